"""Bad input through every command: exit 2, one line naming the command, the flag and the value,
no traceback, checked before any work, nothing written."""

import argparse
import dataclasses
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tvm_hetero import api
from tvm_hetero.cli.common import devices_from_args
from tvm_hetero.cli.main import main


def _cli(args: list[str], cwd) -> subprocess.CompletedProcess:
    """A real process: what a user sees, and a crash (a segfault) cannot take pytest down."""
    code = "import sys; from tvm_hetero.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """The command in this process, in ``tmp_path`` (a traceback would fail the test)."""
    monkeypatch.chdir(tmp_path)

    def call(args: list[str]) -> subprocess.CompletedProcess:
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return call


def _one_line_error(
    result: subprocess.CompletedProcess, command: str, *words: str, code: int = 2
) -> None:
    """One line naming the command and ``words``, exit ``code`` (2: a user's mistake)."""
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == code, text
    assert "Traceback" not in text, text
    assert text.startswith(f"tvm-hetero {command}:"), text
    for word in words:
        assert word in text, (word, text)


PARSE_ERRORS = [
    ("compile", ["mlp:tiny", "--place", "matmul", "-o", "a.tar"], ["--place", "'matmul'", "KEY=VALUE"]),
    ("compile", ["mlp:tiny", "--model-arg", "batch", "-o", "a.tar"], ["--model-arg", "'batch'"]),
    ("compile", ["mlp:tiny", "--input-shape", "x:2by16", "-o", "a.tar"], ["--input-shape", "2by16"]),
    ("plan", ["mlp:tiny", "--strategy", "eop", "--span", "0"], ["--span", "'0'", "(0, 1]"]),
    ("plan", ["mlp:tiny", "--strategy", "eop", "--key-share", "2"], ["--key-share", "'2'"]),
    ("plan", ["mlp:tiny", "--strategy", "eop", "--samples", "-3"], ["--samples", "'-3'", ">= 3"]),
    ("plan", ["mlp:tiny", "--min-gain", "nan"], ["--min-gain", "'nan'"]),
    ("run", ["a.tar", "--repeat", "0"], ["--repeat", "'0'", ">= 1"]),
    ("profile", ["mlp:tiny", "--repeat", "x"], ["--repeat", "'x'"]),
    ("inspect", ["mlp:tiny", "--model-arg", "=4"], ["--model-arg", "'=4'"]),
    ("tune", ["mlp:tiny", "--trials", "0", "--tuning-db", "td"], ["--trials", "'0'", ">= 1"]),
    ("tune", ["mlp:tiny", "--cuda-arch", "sm_xx", "--tuning-db", "td"], ["--cuda-arch", "sm_NN"]),
    ("demo", ["--runs", "-1"], ["--runs", "'-1'"]),
    ("demo", ["--budget", "0"], ["--budget", "'0'"]),
    ("optimize", ["mlp:tiny", "-o", "a.tar", "--budget", "0"], ["--budget", "'0'", "> 0"]),
    ("optimize", ["mlp:tiny", "-o", "a.tar", "--objective", "fast"], ["--objective", "'fast'"]),
    ("optimize", ["mlp:tiny", "-o", "a.tar", "--top", "0"], ["--top", "'0'", ">= 1"]),
    ("optimize", ["mlp:tiny"], ["-o", "required"]),
    ("optimize", ["mlp:tiny", "-o", "a.tar", "--samples", "2"], ["--samples", "'2'", ">= 3"]),
    ("models", ["--foo"], ["unrecognized arguments: --foo"]),
    ("devices", ["--cluster"], ["--cluster", "expected one argument"]),
    ("worker", ["--port", "0"], ["--port", "'0'", "[1, 65535]"]),
    ("worker", ["--port", "http"], ["--port", "'http'"]),
    ("worker", ["--tracker", "nohost"], ["--tracker", "'nohost'", "HOST:PORT"]),
    ("worker", ["--cache-gb", "-1"], ["--cache-gb", "'-1'", ">= 0"]),
    ("run", ["a.tar", "--timeout", "0"], ["--timeout", "'0'", "> 0"]),
    ("run", ["a.tar", "--microbatches", "0"], ["--microbatches", "'0'", ">= 1"]),
    ("cluster", ["frob", "c.toml"], ["'frob'", "'up'"]),
    ("cluster", ["up", "c.toml", "--timeout", "-1"], ["--timeout", "'-1'"]),
    ("cluster", ["probe", "c.json", "--repeat", "0"], ["--repeat", "'0'"]),
    ("bundle", ["a.tar", "-o", "b", "--python", "2"], ["--python", "'2'", "3.12"]),
    ("bundle", ["a.tar"], ["-o/--output", "required"]),
    ("compile", ["mlp:tiny", "--cuda-arch", "90", "-o", "a.tar"], ["--cuda-arch", "'90'"]),
]  # fmt: skip

FILE_ERRORS = [
    ("inspect", ["nosuch-model"], ["'nosuch-model'"]),
    ("inspect", ["g.json"], ["'g.json'", ".onnx"]),
    ("inspect", ["mlp:tiny", "--plot", "folder"], ["--plot 'folder'", "is a folder"]),
    ("inspect", ["mlp:tiny", "--model-arg", "batch=-1"], ["batch=-1", "positive"]),
    ("tune", ["mlp:tiny", "--trials", "2", "--tuning-db", "g.json"], ["--tuning-db", "is a file"]),
    ("tune", ["mlp:tiny", "--trials", "2", "--tuning-db", "t", "--device", "gpu7"], ["'gpu7'"]),
    ("compile", ["mlp:tiny", "--tuning-db", "folder", "-o", "a.tar"], ["--tuning-db folder", "no database_tuning_record.json"]),
    ("demo", ["--model", "nosuch"], ["'nosuch'"]),
    ("demo", ["--device", "cuda:9"], ["cuda:9", "not present"]),
    ("demo", ["--cluster", "g.json"], ["'g.json'", "not valid JSON"]),
    ("devices", ["--cluster", "folder"], ["'folder'", "is a folder"]),
    ("devices", ["--cluster", "missing.json"], ["'missing.json'", "does not exist"]),
    ("devices", ["--save", "folder"], ["--save 'folder'", "is a folder"]),
    ("worker", ["--port", "9300", "--port-end", "9300"], ["--port-end 9300", "above --port 9300"]),
    ("worker", ["--key", "k"], ["--key", "--tracker"]),
    ("worker", ["--cache", "g.json"], ["--cache g.json", "not a folder"]),
    ("run", ["a.tar", "--cluster", "g.json"], ["'g.json'", "not valid JSON"]),
    ("compile", ["mlp:tiny", "--exclude", "gpu7", "-o", "a.tar"], ["--exclude 'gpu7'", "not one"]),
    ("plan", ["mlp:tiny", "--device", "cpu", "--exclude", "cpu"], ["--exclude", "no device"]),
    ("cluster", ["up", "g.json"], ["'g.json'", "not valid JSON"]),
    ("cluster", ["up", "missing.toml"], ["'missing.toml'", "does not exist"]),
    ("cluster", ["probe", "folder"], ["'folder'", "is a folder"]),
    ("cluster", ["probe", "g.json", "--output", "folder"], ["--output 'folder'", "is a folder"]),
    ("bundle", ["g.json", "-o", "folder"], ["-o", "'folder'", "already exists"]),
    ("bundle", ["missing.tar", "-o", "box"], ["'missing.tar'", "does not exist"]),
    ("bundle", ["g.json", "-o", "box"], ["'g.json'", "not a tvm-hetero compiled model"]),
    ("measure", ["folder"], ["'folder'", "manifest.json", "plan --offline"]),
    ("plan", ["mlp:tiny", "--strategy", "edgepipe", "--offline", "w"],
     ["--offline 'w'", "als, duet or eop"]),
    ("compile", ["mlp:tiny", "--place", "matmul=cuda:3", "-o", "a.tar"], ["cuda:3", "not one"]),
    ("compile", ["mlp:tiny", "--device", "cpu", "--device", "cpu@0", "-o", "a.tar"],
     ["'cpu' (every core)", "'cpu@0'", "overlap"]),
]  # fmt: skip
"""Bad files, names and devices, per command: refused before any work (``g.json`` is garbage)."""


@pytest.mark.parametrize(("command", "args", "words"), FILE_ERRORS)
def test_bad_files_names_and_devices_are_refused_before_any_work(
    cli, tmp_path, command, args, words
):
    (tmp_path / "folder").mkdir()
    (tmp_path / "g.json").write_text("garbage")
    _one_line_error(cli([command, *args]), command, *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "g.json"]  # nothing written


@pytest.mark.parametrize(("command", "args", "words"), PARSE_ERRORS)
def test_malformed_flags_are_refused_by_the_parser(cli, tmp_path, command, args, words):
    _one_line_error(cli([command, *args]), command, *words)
    assert not (tmp_path / "a.tar").exists()


@given(st.text(min_size=1, max_size=12).filter(lambda t: not t.startswith("-")))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_numeric_flag_values_never_raise(value):
    """Any text as --span, --samples or --repeat: accepted or a clean parser error (exit 2)."""
    for argv in (
        ["plan", "mlp:tiny", "--strategy", "eop", "--span", value, "--help"],
        ["plan", "mlp:tiny", "--strategy", "eop", "--samples", value, "--help"],
        ["run", "a.tar", "--repeat", value, "--help"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code in (0, 2)


def test_zoo_settings_are_checked_before_any_work(cli, tmp_path):
    result = cli(["compile", "mlp:tiny", "--model-arg", "batch=-4", "-o", "a.tar"])
    _one_line_error(result, "compile", "batch=-4", "positive")
    result = cli(["compile", "mlp:tiny", "--input-shape", "x:2x4", "-o", "a.tar"])
    _one_line_error(result, "compile", "zoo model")


def test_output_paths_are_checked_before_any_work(cli, tmp_path):
    (tmp_path / "folder").mkdir()
    _one_line_error(cli(["profile", "mlp:tiny", "--db", "folder"]), "profile", "--db")
    result = cli(["compile", "mlp:tiny", "-o", "folder"])
    _one_line_error(result, "compile", "--output 'folder'", "is a folder")
    assert main(["devices", "--save", str(tmp_path / "new" / "deeper" / "c.json")]) == 0


def _symbolic_onnx(path) -> None:
    w = numpy_helper.from_array(np.ones((4, 16), "float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_symbolic_dimensions_ask_for_a_shape_and_unknown_inputs_are_named(cli, tmp_path):
    _symbolic_onnx(tmp_path / "dyn.onnx")
    result = cli(["compile", "dyn.onnx", "-o", "a.tar"])
    _one_line_error(
        result, "compile", "symbolic dimensions", "x ('batch', 4)", "--input-shape x:1x4"
    )
    result = cli(["compile", "dyn.onnx", "--input-shape", "y:2x4", "-o", "a.tar"])
    _one_line_error(result, "compile", "['y']", "not its inputs ['x']")
    assert main(["compile", str(tmp_path / "dyn.onnx"), "--input-shape", "x:2x4",
                 "-o", str(tmp_path / "a.tar")]) == 0  # fmt: skip


def test_run_checks_inputs_against_the_model(cli, tmp_path):
    assert cli(["compile", "bert-small:tiny", "-o", "bert.tar"]).returncode == 0
    cases = {
        "big": (
            {"ids": np.full((1, 8), 1_000_000, "int32")},
            "is outside its table of 64 rows (allowed 0 .. 63)",
        ),
        "negative": ({"ids": np.full((1, 8), -5, "int32")}, "got -5 .. -5"),
        "dtype": ({"ids": np.zeros((1, 8))}, "dtype float64 given, the model takes int32"),
        "shape": ({"ids": np.zeros((2, 8), "int32")}, "shape (2, 8) given"),
        "extra": ({"ids": np.zeros((1, 8), "int32"), "y": np.zeros(2)}, "unknown ['y']"),
    }
    for name, (arrays, words) in cases.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
        argv = ["run", "bert.tar", "--inputs", f"{name}.npz"]
        # the id that once segfaulted runs in a real process (exit 139 would not take pytest down)
        result = _cli(argv, tmp_path) if name == "big" else cli(argv)
        _one_line_error(result, "run", words)  # never a segfault or a silent read
    (tmp_path / "junk.npz").write_bytes(b"\x00garbage")
    _one_line_error(cli(["run", "bert.tar", "--inputs", "junk.npz"]), "run", "--inputs")


def test_check_fails_and_writes_nothing_when_the_build_differs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.tar"
    argv = ["compile", "mlp:tiny", "--device", "cpu@0", "--device", "cpu@1", "--place",
            "matmul=cpu@1", "-o", str(out), "--check"]  # fmt: skip
    assert main(argv) == 0 and out.exists()
    out.unlink()
    true_reference = api.reference_outputs
    monkeypatch.setattr(
        api, "reference_outputs", lambda *a: [r + 1.0 for r in true_reference(*a)]
    )  # a wrong reference: the check must say so
    assert main(argv) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "DIFFERS" in said and "not written" in said and not out.exists()
    assert main([*argv, "--keep-on-mismatch"]) == 0 and out.exists()
    assert main([*argv, "--atol", "2"]) == 0  # within a tolerance wide enough


@given(st.binary(max_size=200))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_bytes_as_any_input_file_are_refused_in_one_line(tmp_path, capsys, data):
    """Random bytes as a plan, a cluster file (JSON and TOML) and a compiled
    model: exit 2 and one line naming the command, or (rarely) a valid file; never a traceback."""
    for name in ("plan.json", "cluster.json", "cluster.toml", "model.tar"):
        (tmp_path / name).write_bytes(data)
    runs = [
        ["compile", "mlp:tiny", "--plan", str(tmp_path / "plan.json"), "-o", str(tmp_path / "a.tar")],
        ["devices", "--cluster", str(tmp_path / "cluster.json")],
        ["devices", "--cluster", str(tmp_path / "cluster.toml")],
        ["run", str(tmp_path / "model.tar")],
    ]  # fmt: skip
    for argv in runs:
        rc = main(argv)
        said = " ".join(capsys.readouterr().out.split())
        assert rc in (0, 2), (argv, said)
        if rc == 2:
            assert said.startswith(f"tvm-hetero {argv[0]}:"), said
    assert not (tmp_path / "a.tar").exists() or main(["run", str(tmp_path / "a.tar")]) == 0


def _spec(*devices: dict, **fields) -> str:
    cpus = [{"kind": "cpu", "target": {"kind": "llvm"}} | d for d in devices]
    return json.dumps({"devices": cpus, **fields})


_LINK = {"a": "a", "b": "b", "bandwidth_mbps": 10}
_AT_1 = {"host": "127.0.0.1:1"}  # nothing listens on port 1
CLUSTER_ERRORS = [
    ("up", _spec({"name": "a", "speed": 3}), ["devices[0].speed", "unknown"]),
    ("up", _spec({"name": "a"}, links=[_LINK | {"b": "ghost"}]),
     ["links[0]", "'ghost'", "not in the cluster"]),
    ("up", _spec({"name": "a", "cpu_quota": 0}), ["cpu_quota", "got 0"]),
    ("up", _spec({"name": "a", "host": "h:1"}), ["'h:1'", "assigns"]),
    ("up", _spec({"name": "g", "kind": "cuda", "target": {"kind": "cuda"}}),
     ["'g'", "CPU devices only"]),
    ("up", _spec({"name": "a"}, {"name": "b"}, topology="ring"), ["no path of links from a to b"]),
    ("probe", _spec({"name": "a"}), ["'a'", "no worker address"]),
    ("probe", _spec({"name": "a", "key": "edge"}), ["'a'.key", "tracker", "host None"]),
]  # fmt: skip


@pytest.mark.parametrize(("action", "text", "words"), CLUSTER_ERRORS)
def test_bad_cluster_specs_and_refusing_workers_are_named(cli, tmp_path, action, text, words):
    (tmp_path / "c.json").write_text(text)
    _one_line_error(cli(["cluster", action, "c.json"]), "cluster", *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # nothing written


def test_two_devices_tvm_would_see_as_one_are_refused_before_any_work(cli, tmp_path):
    (tmp_path / "c.json").write_text(
        _spec({"name": "a", "cores": [0]}, {"name": "b", "cores": [1]})
    )
    argv = ["plan", "resnet18:tiny", "--strategy", "flexpie", "--cluster", "c.json", "-o", "p.json"]
    _one_line_error(cli(argv), "plan", "--cluster c.json", "'a' and 'b'", "cpu:0", '"index"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]  # nothing written
    spec = _spec({"name": "a", "cores": [0], "index": 0}, {"name": "b", "cores": [1], "index": 1})
    (tmp_path / "c.json").write_text(spec)
    args = argparse.Namespace(cluster="c.json", device=None, exclude=None, cuda_arch=None)
    assert [d.index for d in devices_from_args(args, [])] == [0, 1]


def test_the_api_refuses_two_devices_tvm_would_see_as_one_naming_them():
    """``vdevices_of`` (every build's vdevices) says which two, as the command line does; a
    remote worker's device, whose index counts there, takes a free id instead."""
    from tvm_hetero.build.vdevices import vdevice_clash, vdevices_of
    from tvm_hetero.devices import SpecError, cpu_device

    a, b = (dataclasses.replace(cpu_device(0), name=n) for n in "ab")
    with pytest.raises(SpecError, match=r"devices 'a' and 'b' are both cpu:0 to TVM"):
        vdevices_of([a, b])
    remote = dataclasses.replace(b, host="127.0.0.1:9190")
    assert vdevice_clash([a, remote]) is None
    assert [int(v.vdevice_id) for v in vdevices_of([a, remote])] == [0, 1]


def test_an_unreachable_worker_is_a_device_failure_not_a_mistake(cli, tmp_path):
    spec = _spec({"name": "a"} | _AT_1, {"name": "b"} | _AT_1, links=[_LINK])
    (tmp_path / "c.json").write_text(spec)
    result = cli(["cluster", "probe", "c.json"])
    _one_line_error(result, "cluster", "cannot reach worker a (127.0.0.1:1)", code=3)


def test_cluster_up_without_root_says_so_and_makes_nothing(cli, tmp_path, monkeypatch):
    (tmp_path / "c.json").write_text(_spec({"name": "a"}))
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    for action in ("up", "down"):
        _one_line_error(cli(["cluster", action, "c.json"]), "cluster", "needs root")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """A folder no file can be made in (as root, where permissions do not stop writes, the
    probe's file creation is refused the way the kernel refuses it)."""
    import os
    import tempfile

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = tempfile.NamedTemporaryFile

        def refuse(*args, dir=None, **kwargs):
            if dir is not None and os.path.realpath(dir).startswith(str(folder.resolve())):
                raise PermissionError(13, "Permission denied")
            return real(*args, dir=dir, **kwargs)

        monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    yield folder
    folder.chmod(0o755)


@pytest.mark.parametrize(
    ("command", "args", "flag"),
    [
        ("compile", ["mlp:tiny", "-o", "ro/m.tar"], "--output"),
        ("profile", ["mlp:tiny", "--db", "ro/p.jsonl"], "--db"),
        ("inspect", ["mlp:tiny", "--plot", "ro/census.png"], "--plot"),
        ("run", ["m.tar", "--outputs", "ro/o.npz"], "--outputs"),
        ("plan", ["mlp:tiny", "--strategy", "eop", "--offline", "ro/off"], "--offline"),
    ],
)
def test_unwritable_outputs_are_refused_before_any_work(cli, read_only, command, args, flag):
    result = cli([command, *args])
    _one_line_error(result, command, flag, "cannot write in")
    assert [p for p in read_only.rglob("*") if p.is_file()] == []  # nothing written


def test_db_that_is_not_a_profile_database_is_refused_and_left_whole(cli, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kind": "placement", "devices": ["cpu"]}, indent=2))
    before = plan.read_bytes()
    _one_line_error(cli(["profile", "mlp:tiny", "--db", "plan.json"]), "profile",
                    "is not a profile database")  # fmt: skip
    assert plan.read_bytes() == before


def test_a_damaged_byte_costs_one_line_of_a_profile_database(tmp_path):
    from tvm_hetero.profiling.db import ProfileDB

    good = tmp_path / "good.jsonl"
    assert main(["profile", "mlp:tiny", "--device", "cpu", "--db", str(good)]) == 0
    lines = good.read_bytes().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"\n".join([lines[0][:10] + b"\xff\xfe" + lines[0][12:], *lines[1:]]))
    db = ProfileDB(damaged)
    assert len(db) == len(lines) - 1
    assert db.problems == [f"{damaged}:1: not UTF-8 text"]


def test_an_internal_error_says_it_is_a_bug_with_exit_1(cli, monkeypatch):
    from tvm_hetero.cli import cmd_models

    monkeypatch.setattr(cmd_models, "run", lambda args: 1 / 0)
    result = cli(["models"])
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1
    assert "Traceback" not in text
    assert "internal error (this is a bug): ZeroDivisionError" in text


def test_a_planner_missing_a_cost_is_a_bug_not_the_users_mistake(cli, monkeypatch):
    from tvm_hetero.plan.als import Costs
    from tvm_hetero.strategies.als import planner

    def without_one_cost(*args, **kwargs) -> Costs:
        node = {o: {0: 1e-3, 1: 1e-3} for o in args[2].ops}
        node[next(iter(node))].pop(1)
        return Costs(node, {})

    monkeypatch.setattr(planner, "measure_costs", without_one_cost)
    result = cli(["plan", "mlp:tiny", "--strategy", "als", "--device", "cpu@0", "--device",
                  "cpu@1"])  # fmt: skip
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1, text
    assert "internal error (this is a bug): CostError: no node cost for 1" in text


def test_crafted_files_and_huge_requests_get_one_line(cli, tmp_path):
    import tarfile

    assert cli(["compile", "mlp:tiny", "--device", "cpu", "-o", "m.tar"]).returncode == 0
    np.save(tmp_path / "x.npy", np.zeros(3, "float32"))
    _one_line_error(cli(["run", "m.tar", "--inputs", "x.npy"]), "run", "one unnamed array", ".npz")
    _one_line_error(cli(["compile", "mlp:tiny", "--plan", "nope.json", "-o", "a.tar"]), "compile",
                    "--plan 'nope.json': cannot read it")  # fmt: skip
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with tarfile.open(tmp_path / "list.tar", "w") as tar:
        tar.add(tmp_path / "manifest.json", "manifest.json")
    _one_line_error(cli(["run", "list.tar"]), "run", "its manifest is a list")
    _one_line_error(cli(["run", "m.tar", "--microbatches", "100000000"]), "run",
                    "--microbatches 100000000", "GiB free")  # fmt: skip
    _one_line_error(cli(["run", "m.tar", "--print-time", "--repeat", "10000000000000"]), "run",
                    "--repeat 10000000000000", "GiB free")  # fmt: skip
    _one_line_error(cli(["compile", "mlp:tiny", "--model-arg", "batch=99999999999", "-o", "b.tar"]),
                    "compile", "input 'x'", "GiB free")  # fmt: skip
    assert not (tmp_path / "b.tar").exists()


def test_outputs_go_to_the_name_given(cli, tmp_path):
    assert cli(["compile", "mlp:tiny", "--device", "cpu", "-o", "m.tar"]).returncode == 0
    assert cli(["run", "m.tar", "--outputs", "out"]).returncode == 0
    assert (tmp_path / "out").is_file() and not (tmp_path / "out.npz").exists()
    assert list(np.load(tmp_path / "out", allow_pickle=False).files) == ["output_0"]


@pytest.mark.parametrize("name", ["../../x/escaped", "a b", "$(x)", "..", "-rf", "a;b", "x/y"])
def test_device_names_that_could_name_files_elsewhere_are_refused(tmp_path, name):
    from tvm_hetero.devices import ClusterSpec
    from tvm_hetero.devices.spec import SpecError

    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"devices": [{"name": name, "kind": "cpu"}], "topology": "mesh"}))
    with pytest.raises(SpecError, match="is not a device name"):
        ClusterSpec.load(spec)
