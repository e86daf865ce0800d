"""``tvm-hetero``: argument parsing only; each command's module (and TVM) loads on use."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from tvm_hetero.devices.spec import split_address
from tvm_hetero.errors import RunError
from tvm_hetero.runtime.rpc_worker import CACHE_BYTES
from tvm_hetero.strategies.base import WorkloadsExported
from tvm_hetero.strategies.flags import number as _number
from tvm_hetero.strategies.registry import PACKAGES

COMMANDS = {
    "devices": "list this machine's devices, or check a cluster file",
    "models": "list the model zoo",
    "inspect": "operator census of a model (per op type: count, FLOPs, bytes, share)",
    "compile": "place a model on devices and compile it to a .tar",
    "run": "run a compiled model on inputs from an .npz",
    "optimize": "find the fastest way to run a model on the devices here: every strategy and "
    "each device alone, the promising ones timed, the fastest written",
    "plan": "measure costs and plan where each operator runs (--strategy als, duet, eop, ...)",
    "profile": "time every operator on each device (and transfers); records go to a database",
    "tune": "MetaSchedule-tune a model's CPU or GPU kernels into a persistent tuning database",
    "demo": "the main job on this machine: optimize two default models (as ONNX files) and "
    "check the kept builds",
    "worker": "serve this machine's device to a client over TVM RPC (no authentication)",
    "cluster": "emulated edge cluster (up / down SPEC, as root) and link probes (probe FILE)",
    "collect-traces": "time tiles, transfers and joins for FlexPie's estimators (JSON lines)",
    "train": "fit FlexPie's XGBoost estimators on traces; report their held-out error",
    "bundle": "the folder a GPU or edge box needs: compiled models, the TVM runtime alone, "
    "tvm-hetero's runtime",
    "measure": "time a folder of exported workloads (plan --offline) with the runtime alone",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``tvm-hetero plan: argument --span: ...`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _checked(parse: Callable[[list[str], str], object], flag: str) -> Callable[[str], str]:
    """An argparse type that checks one item the way the command will read it."""

    def check(text: str) -> str:
        try:
            parse([text], flag)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(flag).lstrip(": ")) from None
        return text

    return check


def _pair(flag: str, sep: str = "=") -> Callable[[str], str]:
    from tvm_hetero.cli.common import parse_pairs, parse_shape

    def parse(items: list[str], name: str) -> None:
        for value in parse_pairs(items, name, sep).values():
            if sep == ":":
                parse_shape(value, name)

    return _checked(parse, flag)


DEVICE_FAILED = 3
"""The exit code of a run that a device or its worker failed (dead, not answering, its session
crashed), or of a worker or RPC server that cannot be reached: not the user's mistake (2) and
not a bug of ours (1)."""

OUTPUT_FLAGS = ("output", "outputs", "plot", "save", "db", "report")
"""Flags naming a file a command writes: checked (not a folder, its folder made) before it runs."""


def _cuda_arch(text: str) -> str:
    """An argparse type: a CUDA arch such as ``sm_90`` or ``sm_90a``."""
    if not re.fullmatch(r"sm_\d{2,3}a?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a CUDA arch; write sm_NN, e.g. sm_90")
    return text


def _python_version(text: str) -> str:
    """An argparse type: a Python version ``3.12``."""
    if not re.fullmatch(r"3\.\d{1,2}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Python version; write e.g. 3.12")
    return text


def _address(text: str) -> tuple[str, int]:
    """An argparse type: ``HOST:PORT``."""
    found = split_address(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9190)")
    return found


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo name (bert-base, resnet50:tiny) or .onnx / .pt2 / .py file")
    p.add_argument(
        "--model-arg", action="append", default=[], metavar="KEY=VALUE", type=_pair("--model-arg"),
        help="change a zoo setting, e.g. batch=16 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--input-shape", action="append", default=[], metavar="NAME:DxDxD",
        type=_pair("--input-shape", ":"),
        help="shape of an ONNX input with symbolic dimensions (repeatable)",
    )  # fmt: skip


def _add_schedule_args(p: argparse.ArgumentParser) -> None:
    """How CPU kernels are scheduled: ``--cpu-schedule``, ``--tuning-db``, ``--conv3x3``."""
    p.add_argument(
        "--cpu-schedule", default="rules", choices=["rules", "default", "dlight", "metaschedule"],
        help="schedule of CPU kernels",
    )  # fmt: skip
    p.add_argument(
        "--tuning-db", metavar="DIR",
        help="MetaSchedule work dir: its records schedule the GPU kernels they hold, and CPU "
        "kernels under --cpu-schedule metaschedule",
    )  # fmt: skip
    p.add_argument(
        "--conv3x3", default="measure", choices=["measure", "rule"],
        help="CPU 3x3 convolutions: time each shape as Winograd 4x4, 2x2 tiles or direct on "
        "this CPU once and keep the fastest (measure, the default), or the static rule",
    )  # fmt: skip


def _add_device_args(p: argparse.ArgumentParser, default: list[str] | None = None) -> None:
    p.add_argument(
        "--device", action="append", default=default, metavar="DEV",
        help="cpu, cpu:N, cpu@N or cpu@A-B (a worker on those cores), cuda, cuda:N or a name "
        "from --cluster (repeatable; the first is home; default with --cluster: all of its)",
    )  # fmt: skip
    p.add_argument(
        "--exclude", action="append", default=[], metavar="DEV",
        help="leave this device out (a failed worker): plan on the others (repeatable)",
    )  # fmt: skip
    p.add_argument("--cluster", metavar="FILE", help="cluster spec (.json or .toml) naming devices")
    p.add_argument(
        "--cuda-arch",
        action="append",
        metavar="SM",
        type=_cuda_arch,
        help="GPU arch to compile CUDA kernels for (repeatable: one fat binary; default the "
        "GPU's own, or sm_90 when no GPU is here); kernels are generated for the lowest",
    )
    p.add_argument(
        "--cuda-graph", action=argparse.BooleanOptionalAction, default=True,
        help="a GPU's units capture their kernels as CUDA graphs on the first run and replay "
        "them after (default on; --no-cuda-graph launches every kernel each run)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (no TVM import)."""
    parser = _Parser(
        prog="tvm-hetero",
        description="Spread one DNN over the CPU and GPU of a machine, or over a cluster.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the passes do")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cmd = {
        name: sub.add_parser(name, help=text, description=text) for name, text in COMMANDS.items()
    }

    cmd["devices"].add_argument(
        "--cluster", metavar="FILE", help="validate and show a cluster file"
    )
    cmd["devices"].add_argument(
        "--save", metavar="FILE", help="write this machine's devices as a cluster file"
    )

    _add_model_args(cmd["inspect"])
    cmd["inspect"].add_argument("--plot", metavar="PNG", help="write a census chart")
    cmd["inspect"].add_argument("--nodes", action="store_true", help="also list every operator")

    _add_model_args(cmd["compile"])
    _add_device_args(cmd["compile"])
    cmd["compile"].add_argument(
        "--place", action="append", default=[], metavar="OP_TYPE=DEV", type=_pair("--place"),
        help="run every OP_TYPE operator (matmul, nn.conv2d) on DEV (repeatable); "
        "the first device gets the rest",
    )  # fmt: skip
    cmd["compile"].add_argument("--output", "-o", required=True, metavar="FILE", help="output .tar")
    _add_schedule_args(cmd["compile"])
    cmd["compile"].add_argument(
        "--check", action="store_true",
        help="run once and compare with the single-device build; on a difference beyond "
        "--rtol / --atol write nothing and exit 1",
    )  # fmt: skip
    cmd["compile"].add_argument(
        "--rtol", type=_number(float, 0.0), default=1e-4, help="--check: relative tolerance"
    )
    cmd["compile"].add_argument(
        "--atol", type=_number(float, 0.0), default=1e-5, help="--check: absolute tolerance"
    )
    cmd["compile"].add_argument(
        "--keep-on-mismatch", action="store_true", help="--check: write the .tar even if it differs"
    )
    cmd["compile"].add_argument(
        "--explain", action="store_true",
        help="list each kernel with the schedule it got (tuned record, rule, default)",
    )  # fmt: skip

    run = cmd["run"]
    run.add_argument("file", help="compiled model (.tar from tvm-hetero compile)")
    run.add_argument("--inputs", metavar="NPZ", help="inputs by name (default: random)")
    run.add_argument("--outputs", metavar="NPZ", help="write outputs here (output_0, output_1...)")
    run.add_argument("--print-time", action="store_true", help="print p50 / p99 / p99.9 latency")
    run.add_argument(
        "--repeat", type=_number(int, 1), default=100, help="timed runs for --print-time"
    )
    run.add_argument("--plot", metavar="PNG", help="the measured timeline of a run, per worker")
    run.add_argument(
        "--microbatches", type=_number(int, 1), default=1, metavar="N",
        help="pipelined run: N microbatches (inputs each, random unless --inputs) in flight at "
        "once, stage after stage; prints throughput, latency and each stage's utilisation",
    )  # fmt: skip
    run.add_argument(
        "--cluster", metavar="FILE",
        help="cluster file with the workers' addresses now (default: those compiled in)",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=_number(float, 0.0, low_open=True), default=10.0,
        help="seconds a unit or copy may take before its worker counts as dead (default 10)",
    )  # fmt: skip
    run.add_argument(
        "--replan", action="store_true",
        help="if a worker fails, compile again without its device (as compile --exclude) and "
        "run on the others (reported; needs the compiler here)",
    )  # fmt: skip
    run.add_argument(
        "--trust-recipe", action="store_true",
        help="let --replan compile a model file outside the .tar's folder (a .py or .pt2 model "
        "runs code: only for a .tar you made)",
    )  # fmt: skip

    prof = cmd["profile"]
    _add_model_args(prof)
    _add_device_args(prof)
    prof.add_argument(
        "--db", metavar="PATH", help="profile database (.jsonl); required unless --minimal-runs"
    )
    prof.add_argument("--remote", metavar="HOST:PORT", help="time on a TVM RPC server")
    prof.add_argument("--repeat", type=_number(int, 1), default=10, help="samples per workload")
    prof.add_argument(
        "--min-repeat-ms", type=_number(float, 0.0), default=20.0, help="minimum time per sample"
    )
    prof.add_argument(
        "--top", type=_number(int, 1), default=10, help="operators in the summary table"
    )
    prof.add_argument("--end-to-end", action="store_true", help="also time the whole model")
    prof.add_argument(
        "--e2e-repeat", type=_number(int, 1), default=100, help="runs for --end-to-end"
    )
    prof.add_argument("--plot", metavar="PNG", help="per-operator bars and transfer curves")
    _add_schedule_args(prof)
    prof.add_argument(
        "--minimal-runs", action="store_true",
        help="show the device-mapped graph, its DA edges and the fewest whole-model profiling "
        "runs that measure every cost (Lee et al.), then stop",
    )  # fmt: skip
    prof.add_argument(
        "--pim", metavar="DEV", help="with --minimal-runs: DEV runs only PIM operators (Lee et al.)"
    )

    tune = cmd["tune"]
    _add_model_args(tune)
    _add_device_args(tune)
    tune.add_argument(
        "--trials", type=_number(int, 1), default=64, help="candidates to measure in all"
    )
    tune.add_argument("--tuning-db", required=True, metavar="DIR", help="MetaSchedule work dir")

    plan = cmd["plan"]
    _add_model_args(plan)
    _add_device_args(plan)
    plan.add_argument(
        "--strategy", default="als", choices=list(PACKAGES), metavar="S",
        help=f"{', '.join(PACKAGES)} (default als; each has its group of flags below)",
    )  # fmt: skip
    _add_strategy_args(plan)
    plan.add_argument("--output", "-o", metavar="JSON", help="write the plan")
    plan.add_argument("--plot", metavar="PNG", help="device timeline of the plan")
    _add_schedule_args(plan)

    cmd["compile"].add_argument("--plan", metavar="JSON", help="plan from tvm-hetero plan")
    cmd["compile"].add_argument(
        "--strategy", choices=list(PACKAGES), metavar="S",
        help=f"measure and plan first, as plan --strategy does ({', '.join(PACKAGES)})",
    )  # fmt: skip
    _add_strategy_args(cmd["compile"])

    opt = cmd["optimize"]
    _add_model_args(opt)
    _add_device_args(opt)
    opt.add_argument(
        "--objective", choices=["latency", "throughput"], default="latency",
        help="latency: one request at a time (default); throughput: a stream, 8 requests in "
        "flight (EdgePipe plans for it)",
    )  # fmt: skip
    opt.add_argument(
        "--budget", type=_number(float, 0.0, low_open=True), default=10.0, metavar="MINUTES",
        help="minutes the search may take (default 10): each device alone is compiled and "
        "run once, the strategies plan in half of the rest (less where timing the "
        "candidates needs more), the candidates are compiled and timed in the rest (fewer "
        "runs if need be)",
    )  # fmt: skip
    opt.add_argument("--output", "-o", required=True, metavar="FILE", help="the fastest, a .tar")
    opt.add_argument("--report", metavar="MD", help="write the candidates and verdict (Markdown)")
    opt.add_argument("--plot", metavar="PNG", help="chart of the candidates' measured times")
    opt.add_argument(
        "--top", type=_number(int, 1), default=3,
        help="plans timed end to end, by lowest predicted time (default 3; each device alone "
        "is timed besides)",
    )  # fmt: skip
    opt.add_argument(
        "--runs", type=_number(int, 1), default=50, help="timed runs per candidate (default 50)"
    )
    _add_schedule_args(opt)
    _add_strategy_args(opt)

    _add_device_args(cmd["demo"])
    cmd["demo"].add_argument(
        "--model", action="append", metavar="NAME",
        help="model to optimize (repeatable; default siamese-lstm and bert-small, written as "
        "ONNX files so ONNX Runtime runs beside)",
    )  # fmt: skip
    cmd["demo"].add_argument(
        "--budget", type=_number(float, 0.0, low_open=True), default=5.0, metavar="MINUTES",
        help="minutes each model's search may take (default 5)",
    )  # fmt: skip
    cmd["demo"].add_argument(
        "--runs", type=_number(int, 1), default=50, help="timed runs per candidate (default 50)"
    )

    bundle = cmd["bundle"]
    bundle.add_argument(
        "artifacts", nargs="*", metavar="FILE",
        help="compiled models (.tar) and exported workload folders (plan --offline) to carry",
    )  # fmt: skip
    bundle.add_argument(
        "-o", "--output", dest="bundle_output", required=True, metavar="PATH",
        help="the bundle: a new folder, or PATH.tar.xz",
    )  # fmt: skip
    bundle.add_argument(
        "--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
        type=_python_version, metavar="X.Y",
        help="the box's Python (its tvm-ffi is fetched from the package index; default this one)",
    )  # fmt: skip
    cmd["measure"].add_argument(
        "folder", help="workloads exported by plan --offline (with their manifest.json)"
    )

    worker = cmd["worker"]
    worker.add_argument(
        "--host", default="127.0.0.1",
        help="address to listen on (default loopback; TVM RPC has no authentication: "
        "never a public address)",
    )  # fmt: skip
    worker.add_argument(
        "--port", type=_number(int, 1, 65535), default=9190, help="first port to try (9190)"
    )
    worker.add_argument(
        "--port-end", type=_number(int, 2, 65536), help="try ports up to this one, excluded "
        "(default --port + 100)",
    )  # fmt: skip
    worker.add_argument(
        "--tracker", type=_address, metavar="HOST:PORT", help="report to a TVM RPC tracker"
    )
    worker.add_argument("--key", default="", help="the key clients ask the tracker for")
    worker.add_argument(
        "--cache", metavar="DIR", help="keep uploaded libraries here for later sessions, by "
        "content (default: a temporary folder, removed when the worker stops)",
    )  # fmt: skip
    worker.add_argument(
        "--cache-gb", type=_number(float, 0), default=CACHE_BYTES / 1e9, metavar="GB",
        help=f"most the cache holds, least recently used dropped first; 0 keeps none "
        f"(default {CACHE_BYTES / 1e9:g})",
    )  # fmt: skip

    traces = cmd["collect-traces"]
    traces.add_argument(
        "models", nargs="*", default=["mobilenet:tiny", "resnet18:tiny"], metavar="MODEL",
        help="models whose tiles are timed (zoo names or files; default mobilenet:tiny "
        "resnet18:tiny)",
    )  # fmt: skip
    _add_device_args(traces)
    traces.add_argument("--output", "-o", metavar="JSONL", required=True, help="traces (appended)")
    traces.add_argument(
        "--limit", type=_number(int, 1), default=300, help="tiles timed per device class (300)"
    )
    traces.add_argument("--db", metavar="PATH", help="profile database the timings go through")
    traces.add_argument("--seed", type=_number(int, 0), default=0, help="which tiles are drawn")
    train = cmd["train"]
    train.add_argument("traces", nargs="+", metavar="JSONL", help="traces (collect-traces -o)")
    train.add_argument(
        "--output-dir", "-o", metavar="DIR", required=True, help="where the estimators go"
    )
    train.add_argument(
        "--held-out", type=_number(float, 0.0, 1.0, low_open=True, high_open=True), default=0.2,
        help="share of the traces kept out and scored (default 0.2)",
    )  # fmt: skip
    train.add_argument("--rounds", type=_number(int, 1), default=400, help="boosting rounds")

    cluster = cmd["cluster"]
    cluster.add_argument(
        "action", choices=["up", "down", "probe"],
        help="up: namespaces, shaped links, cgroups and a worker per device of SPEC; down: "
        "remove all of it (idempotent); probe: measure the links of a cluster file's workers",
    )  # fmt: skip
    cluster.add_argument("file", help="cluster spec (.toml / .json); for probe, a running cluster")
    cluster.add_argument(
        "--output", "-o", metavar="JSON",
        help="up: the cluster file with the workers' addresses (default SPEC-up.json beside it); "
        "probe: the cluster file with the links as measured",
    )  # fmt: skip
    cluster.add_argument(
        "--timeout", type=_number(float, 0.0, low_open=True), default=60.0,
        help="up: seconds each worker may take to start listening (default 60)",
    )  # fmt: skip
    cluster.add_argument("--db", metavar="PATH", help="probe: profile database for the timings")
    cluster.add_argument(
        "--repeat", type=_number(int, 1), default=5, help="probe: pulls per payload size"
    )
    return parser


def _add_strategy_args(p: argparse.ArgumentParser) -> None:
    """The shared planning flags and every registered strategy's own, a group each (plan,
    compile --strategy and optimize take the same)."""
    from tvm_hetero.strategies.base import add_shared_arguments
    from tvm_hetero.strategies.registry import strategies

    add_shared_arguments(p.add_argument_group("planning (every strategy)"))
    for strategy in strategies().values():
        strategy.add_arguments(p.add_argument_group(f"--strategy {strategy.name}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tvm-hetero`` console script."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.exit(2, f"tvm-hetero {args.command}: unrecognized arguments: {' '.join(extra)}\n")
    from tvm_hetero.cli import common

    common.setup_logging(args.verbose)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        for flag in OUTPUT_FLAGS:  # before any work: nothing is measured and then lost
            if getattr(args, flag, None):
                common.writable_path(getattr(args, flag), f"--{flag}")
        if getattr(args, "db", None):  # an existing file must be a profile database
            from tvm_hetero.profiling.db import check_profile_db

            check_profile_db(args.db)
        module = importlib.import_module(f"tvm_hetero.cli.cmd_{args.command.replace('-', '_')}")
        return int(module.run(args) or 0)
    except WorkloadsExported as done:
        common.console().print(
            f"{done}\nnext: tvm-hetero bundle {done.folder} -o box.tar.xz; on the box: "
            f"box/tvm-hetero measure box/artifacts/{Path(done.folder).name}; bring back its "
            f"results.jsonl into {done.folder} and run this command again"
        )
        return done.code
    except RunError as err:
        common.console().print(f"[bold red]tvm-hetero {args.command}:[/] {err}")
        return 2 if err.device is None else DEVICE_FAILED
    except ConnectionError as err:  # a worker or RPC server that cannot be reached
        common.console().print(f"[bold red]tvm-hetero {args.command}:[/] {err}")
        return DEVICE_FAILED
    except common.USER_ERRORS as err:
        common.console().print(f"[bold red]tvm-hetero {args.command}:[/] {err}")
        return 2
    except KeyboardInterrupt:
        common.console().print(f"tvm-hetero {args.command}: interrupted")
        return 130
    except Exception as err:  # not the user's mistake: ours
        if args.verbose:
            common.console().print_exception()
        common.console().print(
            f"[bold red]tvm-hetero {args.command}: internal error (this is a bug):[/] "
            f"{type(err).__name__}: {err}. Please report it with the command line and the "
            "output of -v (which shows where it failed)."
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
