import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tvm_hetero.cli.main import main
from tvm_hetero.runtime.deployment import read_manifest
from tvm_hetero.schedules.cpu import RULES_VERSION
from tvm_hetero.strategies.flexpie import traces as trace_collection


def test_help_does_not_import_tvm():
    code = (
        "import sys\n"
        "from tvm_hetero.cli.main import build_parser\n"
        "try:\n    build_parser().parse_args(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'tvm' not in sys.modules, 'tvm imported by --help'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "compile" in result.stdout and "inspect" in result.stdout


def test_models_and_devices(capsys, tmp_path):
    assert main(["models"]) == 0
    assert "bert-base" in capsys.readouterr().out
    cluster = tmp_path / "here.toml"
    assert main(["devices", "--save", str(cluster)]) == 0
    assert "cpu" in capsys.readouterr().out
    assert main(["devices", "--cluster", str(cluster)]) == 0
    assert "star" in capsys.readouterr().out


def test_inspect_with_plot(capsys, tmp_path):
    png = tmp_path / "census.png"
    assert main(["inspect", "resnet18:tiny", "--plot", str(png), "--nodes"]) == 0
    out = capsys.readouterr().out
    assert "relax.nn.conv2d" in out and "operators" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compile_then_run_matches_single_device(capsys, tmp_path):
    art = tmp_path / "mlp.tar"
    rc = main(["compile", "mlp:tiny", "--device", "cpu", "--device", "cpu:1",
               "--place", "matmul=cpu:1", "--output", str(art), "--check"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "max |multi-device - single-device| = 0" in out
    x = np.random.default_rng(3).standard_normal((4, 16)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    rc = main(["run", str(art), "--inputs", str(tmp_path / "in.npz"), "--outputs",
               str(tmp_path / "out.npz"), "--print-time", "--repeat", "3"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "p50" in out and "p99.9" in out
    devices = out[out.index("Devices, last run") :]  # each device read the other's values
    assert "in flight" in devices and "cpu:1" in devices
    single = tmp_path / "single.tar"
    assert main(["compile", "mlp:tiny", "--output", str(single)]) == 0
    assert (
        main(
            [
                "run",
                str(single),
                "--inputs",
                str(tmp_path / "in.npz"),
                "--outputs",
                str(tmp_path / "ref.npz"),
            ]
        )
        == 0
    )
    np.testing.assert_array_equal(
        np.load(tmp_path / "out.npz")["output_0"], np.load(tmp_path / "ref.npz")["output_0"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "nosuchmodel"], "unknown model 'nosuchmodel'"),
        (["compile", "mlp:tiny", "--device", "tpu", "-o", "x.tar"], "unknown device 'tpu'"),
        (
            ["compile", "mlp:tiny", "--device", "cpu", "--device", "cpu", "-o", "x.tar"],
            "--device cpu is given twice",
        ),
        (
            ["compile", "mlp:tiny", "--place", "nn.conv2d=cpu", "-o", "x.tar"],
            "do not occur in the model",
        ),
        (
            ["compile", "mlp:tiny", "--place", "matmul=cuda:0", "-o", "x.tar"],
            "'cuda:0' is not one of the devices",
        ),
        (
            ["compile", "mlp:tiny", "--model-arg", "colour=red", "-o", "x.tar"],
            "has no setting colour",
        ),
        (["run", "missing.tar"], "does not exist"),
    ],
)
def test_bad_input_is_a_clear_error(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().out.replace("\n", "")


def test_malformed_cluster_file(capsys, tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"devices": [{"name": "a", "kind": "fpga"}]}))
    assert main(["devices", "--cluster", str(bad)]) == 2
    assert "'fpga' is not one of" in capsys.readouterr().out.replace("\n", "")


def test_cuda_build_without_gpu_fails_clearly_at_run(capsys, tmp_path):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("checks the error on a GPU-less machine")
    art = tmp_path / "gpu.tar"
    assert main(["compile", "mlp:tiny", "--device", "cpu", "--device", "cuda:0",
                 "--place", "matmul=cuda:0", "--output", str(art)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["run", str(art)]) == 2
    assert "cuda:0 is not present on this machine" in capsys.readouterr().out.replace("\n", "")


def test_profile_command_with_plot_and_database_reuse(capsys, tmp_path):
    db, png = tmp_path / "p.jsonl", tmp_path / "p.png"
    argv = ["profile", "mlp:tiny", "--device", "cpu", "--device", "cpu:1", "--db", str(db),
            "--repeat", "3", "--min-repeat-ms", "1", "--end-to-end", "--e2e-repeat", "10", "--plot", str(png)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Top 7 operators by time on cpu" in out and "cpu / cpu:1" in out
    assert "cpu -> cpu:1" in out and "p99.9" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(argv[:-2]) == 0
    assert "0 measured, 14 from" in capsys.readouterr().out.replace("\n", "")


def test_profile_and_tune_bad_input(capsys, tmp_path):
    assert (
        main(["profile", "mlp:tiny", "--db", str(tmp_path / "p.jsonl"), "--remote", "nohost"]) == 2
    )
    assert "--remote 'nohost': write HOST:PORT" in capsys.readouterr().out.replace("\n", "")
    with pytest.raises(SystemExit):
        main(["tune", "mlp:tiny", "--trials", "4"])  # --tuning-db is required


def test_tune_on_a_gpu_writes_its_kernels_and_says_where_to_tune_them(capsys, tmp_path):
    from tvm_hetero.runtime.cuda import cuda_runtime_error

    if cuda_runtime_error() is None:
        pytest.skip("a GPU is here: tune would tune")
    folder = tmp_path / "td"
    assert main(["tune", "mlp:tiny", "--device", "cuda:0", "--tuning-db", str(folder)]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    tasks = json.loads((folder / "tasks.json").read_text())["tasks"]
    assert f"{len(tasks)} GPU kernels to tune" in out and tasks
    assert "cuda:0 is not here" in out and "python -m tvm_hetero.build.gpu_tuning" in out
    assert "--tuning-db" in out and not (folder / "database_tuning_record.json").exists()


def test_plan_then_compile_the_plan(capsys, tmp_path):
    plan, png, art = tmp_path / "plan.json", tmp_path / "t.png", tmp_path / "m.tar"
    argv = [
        "plan",
        "mlp:tiny",
        "--device",
        "cpu",
        "--device",
        "cpu:1",
        "--pim",
        "cpu:1",
        "-o",
        str(plan),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "priority (cpu:1, cpu)" in out and "profiling runs measured" in out
    assert json.loads(plan.read_text())["strategy"].startswith("als")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (
        main(
            [
                "compile",
                "mlp:tiny",
                "--device",
                "cpu",
                "--device",
                "cpu:1",
                "--plan",
                str(plan),
                "-o",
                str(art),
                "--check",
            ]
        )
        == 0
    )
    assert "single-device| = 0" in capsys.readouterr().out
    assert (
        main(["compile", "mlp:tiny", "--plan", str(plan), "--place", "matmul=cpu", "-o", str(art)])
        == 2
    )


def test_compile_explain_lists_each_kernels_schedule(capsys, tmp_path):
    rc = main(["compile", "mlp:tiny", "-o", str(tmp_path / "m.tar"), "--explain"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Kernel schedules" in out and "rule:matmul" in out
    rc = main(["compile", "mlp:tiny", "-o", str(tmp_path / "d.tar"), "--explain",
               "--cpu-schedule", "default"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "rule:" not in out and "default" in out


def test_eop_plan_then_compile_a_cut_plan(capsys, tmp_path):
    db, plan, png, art = (tmp_path / n for n in ("p.jsonl", "eop.json", "eop.png", "m.tar"))
    devices = ["--device", "cpu", "--device", "cpu:1"]
    argv = ["plan", "mlp:tiny", "--strategy", "eop", *devices, "--db", str(db), "--samples", "4",
            "-o", str(plan), "--plot", str(png), "--no-confirm"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Predicted AT(G, R)" in out and "Fitted patterns" in out and "equal" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (db.parent / "patterns.json").exists()
    data = json.loads(plan.read_text())
    assert data["kind"] == "split" and data["strategy"] == "eop"
    for s in data["splits"]:  # cut every key operator in half, then deploy that plan
        s["shares"] = [s["extent"] - s["extent"] // 2, s["extent"] // 2]
    plan.write_text(json.dumps(data))
    argv = ["compile", "mlp:tiny", *devices, "--plan", str(plan), "-o", str(art), "--check"]
    assert main(argv) == 0
    assert "single-device| = 0" in capsys.readouterr().out
    from tvm_hetero import api

    deployed = api.load(art).plan
    assert deployed["kind"] == "split" and all(s["shares"][1] for s in deployed["splits"])
    argv = ["compile", "mlp:tiny", "--strategy", "eop", *devices, "--db", str(db),
            "--samples", "4", "-o", str(art), "--check"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert int(re.search(r"(\d+) from ", out).group(1)) > 0  # the database served records
    assert "single-device| = 0" in out


def test_edgepipe_plan_compile_and_pipelined_run(capsys, tmp_path):
    plan, png, art = tmp_path / "plan.json", tmp_path / "s.png", tmp_path / "m.tar"
    devices = ["--device", "cpu@0", "--device", "cpu@1"]
    db = ["--db", str(tmp_path / "db.jsonl")]
    argv = ["plan", "vit-base:tiny", "--strategy", "edgepipe", *devices, *db, "-o", str(plan)]
    assert main([*argv, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "EdgePipe:" in out and "gpipe x10" in out and "cpu@0 alone" in out
    saved = json.loads(plan.read_text())
    assert saved["kind"] == "pipeline" and saved["strategy"] == "edgepipe"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["compile", "vit-base:tiny", "--plan", str(plan), "-o", str(art), "--check"]) == 0
    outputs, timeline = tmp_path / "out.npz", tmp_path / "run.png"
    argv = ["run", str(art), "--microbatches", "3", "--outputs", str(outputs), "--plot"]
    assert main([*argv, str(timeline)]) == 0
    out = capsys.readouterr().out
    assert "3 microbatches in flight" in out and "busy %" in out
    single = tmp_path / "one.tar"
    assert main(["compile", "vit-base:tiny", "--device", "cpu", "-o", str(single)]) == 0
    one = tmp_path / "one.npz"
    assert main(["run", str(single), "--outputs", str(one)]) == 0
    with np.load(outputs) as got, np.load(one) as want:  # microbatch 0 has the default inputs
        assert sorted(got.files) == [f"mb{k}_output_0" for k in range(3)]
        np.testing.assert_allclose(got["mb0_output_0"], want["output_0"], rtol=1e-5, atol=1e-6)
    assert timeline.read_bytes()[:4] == b"\x89PNG"


def test_edgepipe_refuses_unjoined_devices_and_memory_no_partition_fits(capsys, tmp_path):
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"topology": "mesh", "devices": [
        {"name": "a", "kind": "cpu", "target": {"kind": "llvm"}, "host": "127.0.0.1:1"},
        {"name": "b", "kind": "cpu", "target": {"kind": "llvm"}, "host": "127.0.0.1:2"},
        {"name": "c", "kind": "cpu", "target": {"kind": "llvm"}, "memory_bytes": 1000},
    ]}))  # fmt: skip
    base = ["plan", "vit-base:tiny", "--strategy", "edgepipe", "--cluster", str(cluster)]
    assert main([*base, "--device", "a", "--device", "b"]) == 2
    assert "no link joins a and b" in capsys.readouterr().out
    assert main([*base, "--device", "c"]) == 2
    assert "no partition fits the devices' memories" in capsys.readouterr().out


def _traced_and_trained(capsys, tmp_path, monkeypatch) -> tuple:
    """``collect-traces`` of ``resnet18:tiny`` on two cores, then ``train``: (estimators
    folder, the devices' flags, the database's flags)."""
    monkeypatch.setattr(trace_collection, "JOINS", trace_collection.JOINS[::9])  # every axis
    traces, est = tmp_path / "t.jsonl", tmp_path / "est"
    devices = ["--device", "cpu@0", "--device", "cpu@1"]
    db = ["--db", str(tmp_path / "db.jsonl")]
    argv = ["collect-traces", "resnet18:tiny", *devices, *db, "-o", str(traces), "--limit", "10"]
    assert main(argv) == 0
    joins = len(trace_collection.JOINS)
    sync = 2 * len(trace_collection.SYNC_SIZES)  # each size both ways between the two cores
    assert f"appended 10 compute, {sync} sync, {joins} rearrange traces" in capsys.readouterr().out
    assert main(["train", str(traces), "-o", str(est), "--rounds", "20"]) == 0
    out = capsys.readouterr().out
    assert "held-out MAPE" in out and (est / "compute.json").exists()
    assert f"v{RULES_VERSION} (" in out  # the kernels' rules the traces timed
    return est, devices, db


def test_flexpie_traces_training_plan_compile_and_run(capsys, tmp_path, monkeypatch):
    est, devices, db = _traced_and_trained(capsys, tmp_path, monkeypatch)
    plan, png = tmp_path / "plan.json", tmp_path / "schemes.png"
    argv = ["plan", "resnet18:tiny", "--strategy", "flexpie", *devices, *db, "--estimators",
            str(est), "-o", str(plan), "--plot", str(png), "--confirm-plans", "2"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "FlexPie:" in out and "fixed-OutC" in out and "score" in out
    assert "older kernels" not in out  # traced just now
    assert "Confirmed end to end" in out and "(kept)" in out and "layerwise" in out
    assert json.loads(plan.read_text())["kind"] == "spatial"
    assert png.read_bytes()[:4] == b"\x89PNG"
    art = tmp_path / "m.tar"
    assert main(["compile", "resnet18:tiny", "--plan", str(plan), "-o", str(art), "--check"]) == 0
    assert main(["train", str(tmp_path / "none.jsonl"), "-o", str(est)]) == 2
    assert "no such file" in " ".join(capsys.readouterr().out.split())


@pytest.mark.slow  # a second search and confirmation (30 s); the test above plans and compiles
def test_flexpie_compile_by_strategy_reuses_the_confirmation_s_build(capsys, tmp_path, monkeypatch):
    est, devices, db = _traced_and_trained(capsys, tmp_path, monkeypatch)
    art = tmp_path / "m.tar"
    argv = ["compile", "resnet18:tiny", "--strategy", "flexpie", *devices, *db, "--estimators",
            str(est), "--confirm-plans", "2", "-o", str(art), "--check"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    kept = re.search(r"(\S+) \(kept\)", out).group(1)
    assert "compiled while confirming" in out and "matches" in out
    written = read_manifest(art)["plan"]["strategy"]
    assert written == ("flexpie" if kept == "flexpie" else f"flexpie-{kept}")
