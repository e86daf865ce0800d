"""Builds held while they fit, saved and dropped when they do not: what is timed, what is kept,
and the folder removed."""

from pathlib import Path

from tvm_hetero import api
from tvm_hetero.build import held
from tvm_hetero.build.held import HeldBuilds, builds_fit
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.runtime.deployment import Deployment, read_manifest


def test_builds_are_held_while_they_fit_and_saved_when_they_do_not(monkeypatch):
    model = load_model("mlp:tiny")
    compiled = api.compile(model, [resolve_device("cpu@0")])
    assert builds_fit(model, 5) and not builds_fit(model, 10**12)
    with HeldBuilds(model, 2) as kept:  # a few KiB of weights: held
        assert kept.folder is None
        assert isinstance(kept.add("a", compiled), Deployment)
        assert kept.compiled("a") is compiled and kept.timed("a") is compiled.deployment
    monkeypatch.setattr(held, "available_bytes", lambda: 1000)  # nothing fits now
    saved = HeldBuilds(model, 2)
    assert saved.folder is not None and saved.folder.is_dir()
    path = saved.add("a", compiled)
    assert isinstance(path, Path) and path.parent == saved.folder
    assert read_manifest(path)["model"] == compiled.deployment.model
    assert "a" in saved and saved.timed("a") == path and saved.compiled("a") is None
    folder = saved.folder
    del saved  # collected: its folder goes too
    assert not folder.exists()
