"""How each CPU 3x3 convolution of stride 1 is computed, measured on this CPU and kept.

``WinogradConvolutions`` can compute a convolution as Winograd's ``F(4 x 4, 3 x 3)``, as
``F(2 x 2, 3 x 3)``, or leave it to the convolution rule. Its static rule (4 where the map has
32 tiles of 4 x 4, else 2 where it has 32 of 2 x 2, else the rule's kernel) was measured on one
CPU; which is fastest depends on the CPU's caches and vectors, the channels and the map. With
``BuildOptions(conv3x3="measure")`` (the default) a build compiles each such convolution of at
least :data:`MIN_FLOPS` alone (with a bias and ReLU, as the model fuses it) all three ways,
times them on this CPU, keeps the times in a cache file that later builds read (an entry a
convolution, keyed by the workload, the target, the CPU and the CPU rules' version: a shape is
measured once per machine; a build measures for at most :data:`BUDGET_S`, largest shapes
first, and leaves the rest to the next) and takes the fastest way where it beats the static
rule's by :data:`MARGIN`.

The timing runs in a process of its own (``python -m tvm_hetero.build.conv_choices``), so no
thread pool of the building process runs beside it, and is kept only when the rest of the
machine stayed quiet meanwhile (:data:`MAX_OTHER_SHARE`): Winograd's kernels are parallel with
a barrier each, and with one of two cores taken by another process they ran 17 ms where they
take 0.5 (the convolution rule's one kernel: 5.7 ms), which would have been kept for good.

A convolution whose target is not this CPU (another ``mcpu``: a build for an edge box), one
that is smaller, and one measured while the machine was busy take the static rule, as every
convolution does with ``conv3x3="rule"``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from tvm_hetero._compat import TensorType, VDevice, host_cpu_name
from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.passes import winograd_convolutions as winograd
from tvm_hetero.runtime.device import cache_home
from tvm_hetero.runtime.measure import random_args
from tvm_hetero.runtime.timer import cold_rounds
from tvm_hetero.runtime.worker import use_threads

log = logging.getLogger(__name__)

WAYS = (*winograd.TILES, 0)
"""What is measured: each Winograd tile size, then 0, the convolution rule's kernel."""
MIN_FLOPS = 50e6
"""Smallest convolution measured (floating-point operations of its direct form, a run):
below, the ways differ by microseconds and the static rule decides without a measurement
(over 14 x 14 maps, 32 channels to 64 or 128 ran 0.10-0.18 ms each way)."""
MARGIN = 0.2
"""How much faster than the static rule's way another must run alone to be chosen: a layer
alone is not the layer in its model (Inception v3's 448 -> 384 over 8 x 8 ran 21-27 % faster
alone in 2 x 2 tiles than as the rule's kernel, level in the model; ResNet-26D's 32 -> 64 over
112 x 112 ran level to 13 % faster alone as the rule's kernel than in 4 x 4 tiles, and 2-8 %
slower in the model). The rule's ways, drawn from whole models, stand unless a measurement
says they are far off, as on a CPU unlike the one they were drawn on."""
ROUNDS = 15
"""Interleaved rounds a shape is timed in, one run of each way a round."""
FIRST_ROUNDS = 3
"""Rounds every way is timed in; after them a way over :data:`SLOWER` times the fastest's
median is not timed again (it cannot be chosen, and the static rule's way that slow loses to
the fastest whatever its exact time)."""
SLOWER = 2.0
BUDGET_S = 20.0
"""Seconds of one build's measuring (compiling the ways and timing them) after which no
further shape is started: shapes are measured largest first, and those left take the static
rule in this build and are measured by the next. UperNet's nine shapes (a 2048 -> 512 over 56
x 56 among them, 0.6 s a run as the rule's kernel) took 51 s of a first compile of 91 s
(Intel Xeon, two threads), where the goal for a compile is 60."""
MAX_OTHER_SHARE = 0.1
"""Most of the machine's CPU time (all cores) that others may use while the measuring process
runs for its figures to be kept; a quiet host used 0.3 %."""
TIMEOUT_S = 60.0
"""How long the measuring process may take, and as long again a shape."""
FORMAT = 1


@dataclass(frozen=True)
class Workload:
    """A convolution to measure: shapes, padding, target, and the key it is kept under."""

    key: str
    data: tuple[int, ...]
    weight: tuple[int, ...]
    padding: tuple[int, ...]
    target: str

    @classmethod
    def of(cls, key: str, call: relax.Call) -> Workload:
        """The workload of ``call`` (a candidate of ``WinogradConvolutions``)."""
        data, weight = (tuple(int(d) for d in a.ty.shape.values) for a in call.args[:2])
        padding = tuple(int(p) for p in call.attrs.padding)
        return cls(key, data, weight, padding, key.split(" | ", 1)[1])

    @property
    def output_map(self) -> tuple[int, int]:
        """Rows and columns of the output."""
        _, _, h, w = self.data
        top, left, bottom, right = self.padding
        return h + top + bottom - self.weight[2] + 1, w + left + right - self.weight[3] + 1

    @property
    def flops(self) -> float:
        """Floating-point operations of the convolution computed directly: 2 a multiply-add."""
        o, c, kh, kw = self.weight
        return 2.0 * self.data[0] * o * math.prod(self.output_map) * c * kh * kw

    @property
    def static_tile(self) -> int:
        """The way the static rule takes (``winograd_convolutions.tile_size``)."""
        return winograd.tile_size(self.data[0], *self.output_map)


Measure = Callable[[Sequence[Workload]], "dict[str, dict[int, float]] | None"]
"""Each workload's milliseconds a way, or None when no figure may be kept."""


def cache_path() -> Path:
    """Where choices are kept: ``conv3x3.json`` in ``runtime.device.cache_home()``."""
    return cache_home() / "conv3x3.json"


def measured_tiles(
    mod: tvm.IRModule, cache: str | Path | None, measure: Measure | None = None
) -> dict[str, int]:
    """The tile size (4, 2 or 0) of each convolution of ``mod`` (as the lowering pipeline
    hands it to ``WinogradConvolutions``: ``lower`` runs the passes before it first) on this
    CPU, measured (``measure``, default :func:`measure_apart`) where the cache file
    (:func:`cache_path` when ``cache`` is None) does not have it: the fastest way, where it ran
    at least :data:`MARGIN` faster than the static rule's; convolutions left to the static
    rule are not named."""
    from tvm_hetero.schedules.cpu import RULES_VERSION

    path = Path(cache) if cache is not None else cache_path()
    host = host_cpu_name()
    kept = _read(path)
    mine: dict[str, tuple[str, Workload]] = {}  # workload key -> cache key, workload
    for key, call in winograd.candidates(mod).items():
        work = Workload.of(key, call)
        mcpu = str(tvm.target.Target(work.target).attrs.get("mcpu", ""))
        if mcpu not in ("", host) or work.flops < MIN_FLOPS:
            continue  # not this CPU, or too small to matter: the static rule
        mine[key] = (f"{key} | {host} | rules v{RULES_VERSION}", work)
    wanted = sorted((work for cached, work in mine.values() if cached not in kept),
                    key=lambda work: -work.flops)  # fmt: skip
    if wanted:
        times = (measure or measure_apart)(wanted) or {}
        new = {mine[k][0]: {"ms": {str(w): round(t, 4) for w, t in ms.items()}}
               for k, ms in times.items() if k in mine}  # fmt: skip
        kept.update(new)
        if new:
            _write(path, new)
        if len(times) < len(wanted):
            log.info("%d 3x3 convolution shape(s) left to the static rule until a later build "
                     "measures them", len(wanted) - len(times))  # fmt: skip
    return {key: choose({int(w): t for w, t in kept[cached]["ms"].items()}, work.static_tile)
            for key, (cached, work) in mine.items() if cached in kept}  # fmt: skip


def choose(ms: Mapping[int, float], static: int) -> int:
    """The way to take from each way's milliseconds: the fastest where it ran at least
    :data:`MARGIN` faster than the static rule's way, else the rule's. The cache keeps the
    times, not the choice, so a later margin applies to what was measured."""
    best = min(ms, key=ms.get)
    return static if static in ms and ms[best] > (1 - MARGIN) * ms[static] else best


def measure_apart(workloads: Sequence[Workload]) -> dict[str, dict[int, float]] | None:
    """:func:`time_ways` of each workload in a process of its own; None when it failed or when
    other processes used more than :data:`MAX_OTHER_SHARE` of the CPU meanwhile (logged: the
    static rule decides this build, and the next one measures again)."""
    what = f"{len(workloads)} 3x3 convolution shape(s)"
    log.info("timing %s on this CPU, three ways each (once per machine)", what)
    request = json.dumps([asdict(w) for w in workloads])
    package = str(Path(__file__).resolve().parents[2])  # this tvm_hetero, however imported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [package, *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    before, children, start = _busy_seconds(), os.times(), time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD], input=request, env=env,
            capture_output=True, text=True, timeout=TIMEOUT_S * (1 + len(workloads)), check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        log.warning("timing %s took too long; the static rule decides them", what)
        return None
    wall, after = time.monotonic() - start, os.times()
    theirs = (after.children_user + after.children_system) - (
        children.children_user + children.children_system
    )
    share = max(0.0, _busy_seconds() - before - theirs) / (wall * (os.cpu_count() or 1))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        log.warning("timing %s failed (%s); the static rule decides them", what, last)
        return None
    if share > MAX_OTHER_SHARE:
        log.warning("timing %s: other work took %.0f%% of the CPU meanwhile; the static rule "
                    "decides them this time", what, 100 * share)  # fmt: skip
        return None
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: {int(w): ms for w, ms in v.items()} for k, v in answer.items()}


_CHILD = (
    "import sys; from tvm_hetero.runtime.without_torch import import_tvm_without_torch as t; "
    "t(); from tvm_hetero.build.conv_choices import main; sys.exit(main())"
)
"""The measuring process's program: :func:`main`, TVM imported without torch (3-4 s sooner)."""


def _busy_seconds() -> float:
    """CPU seconds every core spent busy since boot (``/proc/stat``: user, nice, system, irq,
    softirq and steal, which a hypervisor gave to others); 0 where there is no such file."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def time_ways(work: Workload) -> dict[int, float]:
    """Median milliseconds of the workload (with a bias and ReLU after it) alone, each of
    :data:`WAYS`, on this CPU with the target's threads (its ``num-cores``): :data:`ROUNDS`
    interleaved rounds of ``runtime.timer.cold_rounds`` (a way :data:`SLOWER` times the
    fastest after :data:`FIRST_ROUNDS` leaves the rest), each run after the last-level cache
    was written over and the input written again (in a model the other layers' weights evict
    a layer's own, Winograd's 4x (``F(4, 3)``) or 1.8x (``F(2, 3)``) the convolution's, and
    the layer before leaves the input in cache)."""
    mod = _one_layer(work)
    cores = int(tvm.target.Target(work.target).attrs.get("num-cores", 0))
    use_threads(cores or os.cpu_count() or 1)
    fixed = [BuildOptions(conv3x3="rule", winograd_tiles=((work.key, w),)) for w in WAYS]
    executables = [build(mod, options) for options in fixed]
    args = random_args([(work.data, "float32")])
    first = cold_rounds(executables, args, FIRST_ROUNDS)
    times = {w: [row[k] for row in first] for k, w in enumerate(WAYS)}
    fastest = min(float(np.median(t)) for t in times.values())
    close = [k for k, w in enumerate(WAYS) if np.median(times[w]) <= SLOWER * fastest]
    for row in cold_rounds([executables[k] for k in close], args, ROUNDS - FIRST_ROUNDS):
        for k, t in zip(close, row, strict=True):
            times[WAYS[k]].append(t)
    return {w: float(np.median(t)) * 1e3 for w, t in times.items()}


def _one_layer(work: Workload) -> tvm.IRModule:
    """``main(x) = relu(conv2d(x, w) + b)`` on one vdevice of the workload's target, seeded
    weights."""
    rng = np.random.default_rng(0)
    vdev = VDevice(tvm.target.Target(work.target), 0, "global")
    x = relax.Var("x", TensorType(work.data, "float32", vdev))
    w = relax.const(rng.standard_normal(work.weight).astype("float32") * 0.1)
    b = relax.const(rng.standard_normal((1, work.weight[0], 1, 1)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=work.padding))
            y = bb.emit(relax.op.add(y, b))
            y = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _read(path: Path) -> dict[str, dict]:
    """The choices kept in ``path``; none when it is missing, of another format or unreadable
    (a damaged cache is measured again, never trusted)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    choices = data.get("choices")
    ok = isinstance(choices, dict) and all(_timed(v) for v in choices.values())
    return dict(choices) if ok else {}


def _timed(entry: object) -> bool:
    """Whether a kept entry holds a positive time for each of :data:`WAYS`."""
    ms = entry.get("ms") if isinstance(entry, dict) else None
    if not isinstance(ms, dict) or sorted(ms) != sorted(str(w) for w in WAYS):
        return False
    return all(isinstance(t, (int, float)) and t > 0 for t in ms.values())


def _write(path: Path, new: Mapping[str, dict]) -> None:
    """Add ``new`` to the choices in ``path``, written whole (another build's choices kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "choices": {**_read(path), **new}}
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(f.name, path)


def main() -> int:
    """The measuring process: workloads as JSON on stdin, their times as JSON on stdout."""
    logging.disable(logging.WARNING)
    works = [Workload(w["key"], *(tuple(w[k]) for k in ("data", "weight", "padding")),
                      w["target"]) for w in json.loads(sys.stdin.read())]  # fmt: skip
    start, times = time.monotonic(), {}
    for work in works:  # in the order given (largest first), until the budget is spent
        if times and time.monotonic() - start > BUDGET_S:
            break
        times[work.key] = time_ways(work)
    print(json.dumps(times))
    return 0
