import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import build_memo
import pytest
import tvm
import tvm.testing
from tvm.relax.ir.instrument import WellFormedInstrument

from tvm_hetero.costmodel.estimators import OP_KINDS, conv_gflops
from tvm_hetero.devices import cpu_device


@pytest.fixture(autouse=True)
def _well_formed_after_every_pass():
    """Each pass's output checked (a pass's input is the last one's output, checked already)."""
    with tvm.transform.PassContext(
        instruments=[WellFormedInstrument(validate_before_transform=False)]
    ):
        yield


@pytest.fixture(autouse=True)
def _builds_reused_unless_patched(request):
    """Within one pytest process a module built again (same IR, options, pass config and
    package constants) reuses the first build: many tests plan and confirm the same zoo models.
    While a test's ``monkeypatch`` holds a patch that may change what a build does, every build
    is made anew (:func:`build_memo.changes_builds`)."""
    if "monkeypatch" in request.fixturenames:
        patches = request.getfixturevalue("monkeypatch")
        build_memo.bypass = lambda: build_memo.changes_builds(patches)
    yield
    build_memo.bypass = build_memo.never


@pytest.fixture(scope="session")
def two_cpus():
    """Two CPU vdevices (llvm:0, llvm:1): the numerical test bed on GPU-less machines."""
    return [cpu_device(0), cpu_device(1)]


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    if not tvm.testing.env.has_gpu():
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


def host_has_avx512() -> bool:
    """Whether this host's CPU target has 512-bit vectors (code built for AVX-512 runs here)."""
    from tvm_hetero._compat import make_target
    from tvm_hetero.schedules.cpu.common import vector_bits

    return vector_bits(make_target(cpu_device().target)) >= 512


def fused_kernels(mod: tvm.IRModule, target, legalize=None) -> tvm.IRModule:
    """``mod`` legalized (by ``legalize``, TVM's ``LegalizeOps`` by default) and fused, each
    kernel tagged with ``target`` (as a build's kernels reach the schedule rules)."""
    from tvm import relax

    from tvm_hetero._compat import PrimFunc

    mod = (legalize or relax.transform.LegalizeOps())(mod)
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    return tvm.IRModule(
        {
            gv: f.with_attr("target", target) if isinstance(f, PrimFunc) else f
            for gv, f in mod.functions_items()
        }
    )


def one_op_module(device: dict, params: list, op) -> tvm.IRModule:
    """``main(*params) = op(*params)`` with every parameter and the result on one vdevice of
    ``device`` (a target dict), which the module declares: a rewrite pass's test bed.
    ``params`` are ``(name, shape)`` pairs of float32 tensors."""
    from tvm import relax

    from tvm_hetero._compat import VDevice, make_target

    vdev = VDevice(make_target(device), 0, "global")
    args = [relax.Var(n, relax.TensorType(s, "float32", vdev)) for n, s in params]
    bb = relax.BlockBuilder()
    with bb.function("main", args):
        with bb.dataflow():
            y = bb.emit_output(op(*args))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def fused_body(shapes, body, target) -> tvm.IRModule:
    """The fused kernels (:func:`fused_kernels`) of ``main(a0, a1, ...)`` = ``body(bb, *args)``
    over float32 arguments of ``shapes``."""
    from tvm import relax

    bb = relax.BlockBuilder()
    args = [relax.Var(f"a{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", args):
        with bb.dataflow():
            out = bb.emit_output(body(bb, *args))
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), target)


def op_calls(mod: tvm.IRModule) -> list:
    """The operator calls bound in ``main``'s blocks, in order (calls of functions left out)."""
    from tvm import relax

    return [
        b.value
        for block in mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
    ]


def conv_axes():
    """Every ``(size, outputs, window, stride, dilation, before)`` of one convolution axis over
    sizes 1-8, windows 1-4, strides 1-3, dilations 1-5 and paddings 0-7 before and after
    (``outputs`` of at least one), and the outputs that read input ``o * stride + k *
    dilation - before`` inside it for each tap ``k``: a brute force for tap arithmetic."""
    import itertools

    for size, window, stride, dilation, before, after in itertools.product(
        range(1, 9), range(1, 5), range(1, 4), range(1, 6), range(8), range(8)
    ):
        outputs = (size + before + after - dilation * (window - 1) - 1) // stride + 1
        if outputs < 1:
            continue
        reading = [
            [o for o in range(outputs) if 0 <= o * stride + k * dilation - before < size]
            for k in range(window)
        ]
        yield (size, outputs, window, stride, dilation, before), reading


def conv_module(shape, weights, **attrs) -> tvm.IRModule:
    """``main(x, w) = conv2d(x, w, **attrs)`` over float32 ``x`` of ``shape`` and ``w`` of
    ``weights``."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType(shape, "float32"))
    w = relax.Var("w", relax.TensorType(weights, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, w, **attrs))
        bb.emit_func_output(y)
    return bb.get()


def kernel_script(mod: tvm.IRModule) -> str:
    """The TVMScript of the one kernel (PrimFunc) of ``mod``."""
    from tvm_hetero._compat import PrimFunc

    (text,) = [f.script() for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    return text


def same_numbers_after(rewrite, mod: tvm.IRModule) -> tvm.IRModule:
    """``rewrite(mod)``, checked to compute what ``mod`` does on random inputs (both legalized
    by TVM and built for the CPU); returns it."""
    import numpy as np
    from tvm import relax

    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32")
            for p in mod["main"].params]  # fmt: skip

    def run(m: tvm.IRModule) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(m)), tvm.cpu())
        return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()

    after = rewrite(mod)
    np.testing.assert_allclose(run(after), run(mod), rtol=1e-5, atol=1e-5)
    return after


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing listens on right now: each is held while the next
    is chosen (one at a time, the kernel may hand the same port out twice, and the second
    worker then finds its one-port range taken: ``no free port in [p, p + 1)``)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def start_server(args: list[str], wait_for: str, env: dict | None = None) -> subprocess.Popen:
    """``python ARGS`` in its own process group, once it has printed ``wait_for``."""
    return wait_until_started(launch(args, env), wait_for)


def launch(args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """``python ARGS`` in its own process group, its output piped, with every signal unblocked
    and at its default action (a signal ignored or blocked in the test process would be
    inherited through fork and exec: a server's sessions would then survive it)."""
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env=env, preexec_fn=_default_signals, cwd=cwd,
    )  # fmt: skip


def _default_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_DFL)


def wait_until_started(proc: subprocess.Popen, wait_for: str) -> subprocess.Popen:
    """``proc`` once it has printed ``wait_for`` (a failed test if it exits or takes 60 s)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = ""
    while wait_for not in seen:
        if not sel.select(timeout=60):
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"server did not start: {seen}")
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"server exited: {seen}")
        seen += line
    return proc


def wait_accepting(port: int, timeout_s: float = 30) -> None:
    """Until ``127.0.0.1:port`` accepts connections: TVM's RPC server and tracker print "bind
    to" before they listen (a client right after it was refused once, on a loaded machine). The
    probe sends a wrong magic number, which both close without a word."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.sendall(b"\0\0\0\0")
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"nothing accepts connections on port {port}")
            time.sleep(0.05)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop ``proc``'s process group (``SIGSTOP``) and wait until every thread of each of its
    processes has stopped: a group stop takes hold as each thread next runs, and under load a
    run sent right after the signal was served by a worker's session not yet stopped (the
    test expecting it to fail did not see it fail, and its executor's close then hung)."""
    os.killpg(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = [
            _state(t) for pid in _group(proc.pid) for t in Path(f"/proc/{pid}/task").iterdir()
        ]
        if states and all(s in "Tt" for s in states if s):
            return
        time.sleep(0.002)
    pytest.fail(f"process group {proc.pid} did not stop within 30 s")


def _stat_fields(path: Path) -> list[str]:
    """The fields of a ``stat`` file after its command name (which may hold spaces)."""
    try:
        return path.read_text().rpartition(")")[2].split()
    except OSError:  # gone meanwhile
        return []


def _state(task: Path) -> str:
    fields = _stat_fields(task / "stat")
    return fields[0] if fields else ""


def _group(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry / "stat")
            if len(fields) > 2 and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def _worker_args(port: int) -> list[str]:
    return ["-m", "tvm_hetero.cli.main", "worker", "--port", str(port), "--port-end", str(port + 1)]


@pytest.fixture
def start_workers(tmp_path_factory):
    """Start ``count`` ``tvm-hetero worker`` processes at once on loopback, with the TVM runtime
    library only (``extra``: more flags; each keeps its libraries in a test folder unless
    ``extra`` says where; ``cwd``: the folder they start in; ``env``: more environment;
    ``own_cache``: the worker makes its own temporary folder, as a user's does);
    returns ``[(port, process)]``; all are killed (process group) at the end."""
    procs: list[subprocess.Popen] = []

    def start(
        count: int = 1, extra: tuple[str, ...] = (), cwd: Path | None = None,
        env: dict[str, str] | None = None, own_cache: bool = False,
    ) -> list[tuple[int, subprocess.Popen]]:  # fmt: skip
        ports = free_ports(count)
        given = "--cache" in extra or own_cache  # own_cache: a temporary folder of its own
        cache = () if given else ("--cache", str(tmp_path_factory.mktemp("cache")))
        environment = {**os.environ, "TVM_USE_RUNTIME_LIB": "1", **(env or {})}
        new = [launch([*_worker_args(p), *cache, *extra], environment, cwd) for p in ports]
        procs.extend(new)
        return [
            (p, wait_until_started(proc, "listening on"))
            for p, proc in zip(ports, new, strict=True)
        ]

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def remote_cpus(ports: list[tuple[int, subprocess.Popen]]) -> list:
    """A one-thread CPU device ``edge-<k>`` for each worker ``start_workers`` started."""
    import dataclasses

    from tvm_hetero.devices import resolve_device

    return [
        dataclasses.replace(resolve_device("cpu"), name=f"edge-{k}", host=f"127.0.0.1:{p}",
                            threads=1)
        for k, (p, _) in enumerate(ports)
    ]  # fmt: skip


def mlp_onnx(path):
    """A 16 -> 32 -> 8 ReLU MLP (batch 4, input ``x``) exported to ONNX at ``path``."""
    import warnings

    import torch

    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(mlp.eval(), (torch.randn(4, 16),), str(path), input_names=["x"],
                          dynamo=False)  # fmt: skip
    return path


def conv_trace_row(channels: int, width: int, kernel: int = 3, lanes: int = 8) -> dict:
    """A compute estimator's row of a convolution tile of 8 rows, ``width`` columns, on
    ``lanes`` float lanes."""
    return {"kind": OP_KINDS["conv2d"], "in_c": channels, "in_h": 8 + kernel - 1,
            "in_w": width + kernel - 1, "out_c": channels, "out_h": 8, "out_w": width,
            "k_h": kernel, "k_w": kernel, "stride": 1, "dilation": 1, "groups": 1,
            "gflops": conv_gflops(channels, 8, width, channels, kernel, kernel), "inner": width,
            "operands": 2, "elements_read": 0, "threads": 1, "cpu_quota": 1.0,
            "lanes": lanes}  # fmt: skip
