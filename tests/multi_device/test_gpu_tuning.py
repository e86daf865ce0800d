"""GPU kernels tuned where the GPU is (``build.gpu_tuning``): the tasks cut here, the folder's
round trip, a record applied by the build. Compile-only: no GPU needed."""

import os
from pathlib import Path

import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_hetero import api
from tvm_hetero._compat import PrimFunc
from tvm_hetero.build import gpu_tuning
from tvm_hetero.build.multi_device import BuildOptions, fused, lower
from tvm_hetero.devices import cuda_device
from tvm_hetero.plan.placement import Placement
from tvm_hetero.schedules import kernel_choices
from tvm_hetero.schedules.apply import GPU_RULES, first_schedule
from tvm_hetero.zoo import load_zoo_model


@pytest.fixture(scope="module")
def placed():
    model = load_zoo_model("bert-small:tiny")
    return api.place(model, [cuda_device(0)], Placement(("cuda:0",)))


@pytest.fixture(scope="module")
def tasks(placed):
    return gpu_tuning.gpu_tasks(placed)


def test_tasks_are_the_gpu_kernels_that_reduce(placed, tasks):
    kernels = {
        gv.name_hint: f
        for gv, f in fused(placed).functions_items()
        if isinstance(f, PrimFunc) and f.attrs["target"].kind.name == "cuda"
    }
    reducing = {n for n, f in kernels.items() if gpu_tuning.reduces(f)}
    assert reducing and reducing != set(kernels)  # element-wise kernels exist and are left
    assert {t.name for t in tasks} <= reducing
    assert len({t.key for t in tasks}) == len(tasks)  # one task a workload
    assert [t.calls for t in tasks] == sorted((t.calls for t in tasks), reverse=True)
    assert max(t.calls for t in tasks) > 1  # the encoder's layers call the same matmuls
    assert all(int(t.target.attrs["max_shared_memory_per_block"]) > 0 for t in tasks)


def test_folder_round_trip_adds_calls(tasks, tmp_path):
    gpu_tuning.export_tasks(tasks, tmp_path)
    gpu_tuning.export_tasks(tasks[:1], tmp_path)  # a second model with the first kernel
    back = gpu_tuning.load_tasks(tmp_path)
    assert [t.key for t in back] == [t.key for t in tasks]
    assert back[0].calls == 2 * tasks[0].calls
    assert [t.calls for t in back[1:]] == [t.calls for t in tasks[1:]]
    tvm.ir.assert_structural_equal(back[1].mod, tasks[1].mod)
    assert str(back[0].target) == str(tasks[0].target)


def _database(task, folder: Path) -> str:
    """A database whose one record is dlight's schedule of ``task``."""
    folder.mkdir()
    database = ms.database.JSONDatabase(work_dir=str(folder))
    sch, _ = first_schedule(task.mod["main"], task.target, GPU_RULES)
    args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    record = ms.database.TuningRecord(
        sch.trace, database.commit_workload(task.mod), [1e-6], task.target, args
    )
    database.commit_tuning_record(record)
    return str(folder)


def test_a_record_schedules_its_kernel_and_only_that(placed, tasks, tmp_path):
    task = tasks[0]
    options = BuildOptions(ms_database=_database(task, tmp_path / "db"))
    labels = {c.kernel: c.label for c in kernel_choices(lower(placed, options))}
    assert labels[task.name] == "tuned"
    assert {k for k, v in labels.items() if v == "tuned"} == {task.name}
    untuned = {c.kernel: c.label for c in kernel_choices(lower(placed))}
    assert untuned[task.name] == "dlight:gpu"
    assert "+tuned:" in options.mode_key and "+tuned" not in BuildOptions().mode_key


def test_a_database_without_records_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"database_tuning_record\.json"):
        BuildOptions(ms_database=str(tmp_path))


def test_tuning_refuses_a_folder_without_tasks_and_zero_trials(tasks, tmp_path, capsys):
    assert gpu_tuning.main([str(tmp_path), "--work-dir", str(tmp_path / "db")]) == 2
    assert "no tasks.json" in capsys.readouterr().err
    gpu_tuning.export_tasks(tasks, tmp_path)
    assert gpu_tuning.main([str(tmp_path), "--work-dir", "db", "--trials", "0"]) == 2
    assert "--trials 0" in capsys.readouterr().err


@pytest.mark.slow
def test_tuning_measures_and_keeps_the_fastest(tmp_path):
    """The whole loop on this machine's CPU (the box runs it on its GPU): dlight has no CPU
    schedule, so the records are MetaSchedule's samples, each measured."""
    from tvm import te

    a = te.placeholder((64, 64), name="a")
    b = te.placeholder((64, 64), name="b")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    func = te.create_prim_func([a, b, c])
    target = tvm.target.Target({"kind": "llvm", "num-cores": os.cpu_count() or 1})
    task = gpu_tuning.GpuTask("mm", "k", 1, tvm.IRModule({"main": func}), target)
    gpu_tuning.export_tasks([task], tmp_path)
    measured = gpu_tuning.tune_tasks(tmp_path, tmp_path / "db", 4, builders=2)
    assert measured >= 2
    database = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    best = database.get_top_k(database.commit_workload(task.mod), measured)
    means = [sum(float(x) for x in r.run_secs) / len(r.run_secs) for r in best]
    assert means == sorted(means) and 0 < means[0] < 1
