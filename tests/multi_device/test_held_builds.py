"""Builds held while they fit, saved and dropped when they do not: what is timed, what is kept,
and the folder removed."""

import dataclasses
from pathlib import Path

import pytest

from tvm_hetero import api
from tvm_hetero.build import held
from tvm_hetero.build.held import HeldBuilds, builds_fit
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.runtime.deployment import Deployment, read_manifest, retargeted


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


def test_builds_after_one_that_leaves_no_room_for_another_are_saved(monkeypatch):
    """Held while another as large as the average so far fits in half the memory the system
    had at the start; from the first that leaves no such room, saved. An explicit choice
    (``in_memory``) is kept whatever the memory."""
    model = load_model("mlp:tiny")
    compiled = api.compile(model, [resolve_device("cpu@0")])
    gib = 2**30
    free = iter([10 * gib, 10 * gib, 8 * gib, 6 * gib])  # fit?, start, after one, after two
    monkeypatch.setattr(held, "available_bytes", lambda: next(free))
    with HeldBuilds(model, 3) as builds:
        assert builds.folder is None
        assert isinstance(builds.add("a", compiled), Deployment)  # 2 + 2 GiB <= 5: room
        assert isinstance(builds.add("b", compiled), Deployment)  # 4 + 2 > 5: the next saved
        assert builds.folder is not None and isinstance(builds.add("c", compiled), Path)
        assert builds.compiled("b") is compiled and builds.compiled("c") is None
    monkeypatch.setattr(held, "available_bytes", lambda: gib)  # fits at the start, then full
    with HeldBuilds(model, 3, in_memory=True) as chosen:
        assert all(isinstance(chosen.add(n, compiled), Deployment) for n in "abc")


def test_a_twin_device_alone_shares_a_held_build_and_copies_a_saved_one(monkeypatch, tmp_path):
    """``cpu@1`` alone is ``cpu@0``'s code: held, the same library on its device; saved, a
    copy of the file naming ``cpu@1`` and its plan, its library byte for byte, which loads
    and runs on ``cpu@1`` with ``cpu@0``'s outputs."""
    import tarfile

    import numpy as np

    from tvm_hetero.plan.placement import Placement
    from tvm_hetero.runtime.deployment import load

    model = load_model("mlp:tiny")
    cpu0, cpu1 = resolve_device("cpu@0"), resolve_device("cpu@1")
    compiled = api.compile(model, [cpu0])
    plan = Placement(("cpu@1",), {}, "single")
    with HeldBuilds(model, 2) as kept:
        kept.add("cpu@0 alone", compiled)
        deployment = kept.twin("cpu@0 alone", "cpu@1 alone", cpu1, plan)
        twin = kept.compiled("cpu@1 alone")
        assert deployment.devices == (cpu1,) and twin.devices == (cpu1,)
        assert twin.placement == plan and twin.deployment.libraries is compiled.deployment.libraries
    monkeypatch.setattr(held, "available_bytes", lambda: 1000)  # nothing fits: saved
    with HeldBuilds(model, 2) as saved:
        first = saved.add("cpu@0 alone", compiled)
        path = saved.twin("cpu@0 alone", "cpu@1 alone", cpu1, plan)
        assert path != first and path.parent == first.parent and saved.timed("cpu@1 alone") == path
        manifest = read_manifest(path)
        assert [d["name"] for d in manifest["devices"]] == ["cpu@1"]
        assert manifest["plan"] == plan.to_dict()
        with tarfile.open(first) as a, tarfile.open(path) as b:
            assert a.extractfile("lib0.so").read() == b.extractfile("lib0.so").read()
        inputs = model.random_inputs()
        copy = load(path, tmp_path)
        assert copy.devices[0].name == "cpu@1"
        np.testing.assert_allclose(api.run(copy, inputs)[0], api.run(compiled, inputs)[0],
                                   rtol=1e-6)  # fmt: skip
        other = dataclasses.replace(cpu1, target={"kind": "llvm", "mcpu": "generic"})
        with pytest.raises(ValueError, match="not of cpu@0's kind and target"):
            retargeted(first, tmp_path / "other.tar", (other,), plan.to_dict())
        assert not (tmp_path / "other.tar").exists()
