"""Deployments timed in a process of their own (what ``optimize`` does with candidates too
large to hold at once): the samples asked for come back, in interleaved rounds beside one timed
in this process; a file the child cannot run is a :class:`RunError` naming it."""

from pathlib import Path

import pytest

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.runtime import apart
from tvm_hetero.runtime.executor import interleaved_run_seconds


def test_a_saved_deployment_is_timed_in_a_child_each_round(tmp_path, monkeypatch):
    model = load_model("mlp:tiny")
    compiled = api.compile(model, [resolve_device("cpu@0")])
    saved = compiled.save(tmp_path / "mlp.tar")
    calls, timed = [], apart.time_saved

    def spy(path, runs, warmup, microbatches=1):
        calls.append((Path(path).name, runs, warmup, microbatches))
        return timed(path, runs, warmup, microbatches)

    monkeypatch.setattr("tvm_hetero.runtime.executor.time_saved", spy)
    here, child = interleaved_run_seconds(
        [compiled.deployment, saved], [4, 5], rounds=2, warmup=3, microbatches=2
    )
    assert len(here) == 4 and len(child) == 5 and min(child) > 0
    # a fresh process each round: warmed up the first, settled (its first run) later
    assert calls == [("mlp.tar", 3, 3, 2), ("mlp.tar", 2, 2, 2)]


def test_a_file_the_child_cannot_run_is_named(tmp_path):
    broken = tmp_path / "broken.tar"
    broken.write_bytes(b"not a tar")
    with pytest.raises(RunError, match=r"broken\.tar: timing it apart failed: ArtifactError"):
        apart.time_saved(broken, 2, 0)
