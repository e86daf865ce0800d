"""The profiler: measure operators, sweeps, subgraphs, transfers and whole models, once each.

Every measurement goes through the profile database: a workload already measured with the same
target, compile mode and device fingerprint is served from it, so BERT's twelve identical layers
cost one layer's profiling and a second run costs nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tvm

from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.build.vdevices import to_vdevice
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import (
    Dim,
    chain_module,
    input_infos,
    op_module,
    resize,
    subgraph_module,
    transfer_module,
    workload_key,
    zero_weights,
)
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.model_run import op_times_workload
from tvm_hetero.profiling.offline import PLACEHOLDER_S
from tvm_hetero.records import Fingerprint, ProfileRecord, RecordKind, json_key
from tvm_hetero.runtime.device import vdevice_runtime_device
from tvm_hetero.runtime.instrument import op_times
from tvm_hetero.runtime.measure import PROFILE_CONFIG, MeasureConfig, Timing, random_args, serves
from tvm_hetero.runtime.memory import give_back_freed_memory
from tvm_hetero.runtime.timer import LocalRunner, Runner, runners_for
from tvm_hetero.runtime.worker import use_threads

DEFAULT_DB = ".tvm-hetero/profiles.jsonl"
"""Where measurements are kept when no database is named."""

NOT_THE_CUT = ("strategy", "predicted_s", "measured_s", "notes")
"""Fields of a plan that do not change what runs (its name, what was predicted or measured of
it, the planner's own time): a run's record key leaves them out, so the same cut made again is
the same workload (EOP's plan carries its planning time; an offline round asked for it anew
every time)."""

RUN_LAYOUT = 4
"""The layout of the deployments and the runtime :meth:`Profiler.profile_run` and
:meth:`Profiler.profile_handoff` time, part of their records' keys: bumped when a pass changes
which steps a plan's deployment runs or in what order, or the runtime how it moves a value, so
that a run timed before is measured again, not served (2: a spatial boundary's pieces are sent
before any tile starts; the tiled probe on the emulated ring of four had been timed with home
computing its own tile first. 3: workers push a unit's pieces as it ends, and a boundary's
joins are one unit: the probe cut in rows on the ring of four at 1 Gbit/s had been served at
1.95 ms a segment over its price, timed again 1.52, and the handoff 0.61 ms, timed again 0.52.
4: local CPU workers run their programs natively, a handoff between two of them some thirty
times cheaper)."""

WHOLE_MODEL = (RecordKind.MODEL, RecordKind.OP_IN_MODEL)
"""Measurements that build and run a whole model: what they freed is given back to the system
after each (Lee et al.'s profiling runs of ViT-Base left 0.47 GiB resident otherwise)."""

if TYPE_CHECKING:
    from tvm_hetero.frontends.model import Model

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``."""


def target_key(spec: DeviceSpec) -> str:
    """The target part of a record key."""
    return json.dumps(spec.target, sort_keys=True)


def device_ref(spec: DeviceSpec) -> tuple[str, int]:
    """``(target kind, index)`` of a device, as runners take it."""
    return ("cuda" if spec.kind is DeviceKind.CUDA else "llvm", spec.index)


def place_on(mod: tvm.IRModule, devices: Sequence[DeviceSpec]) -> tvm.IRModule:
    """Declare ``devices`` and put everything on the first (a standalone workload); a workload
    that declares its own devices (a copy between two) is placed already."""
    if list(mod.global_infos.get("vdevice", [])):
        return mod
    return get_pipeline(
        "manual_placement", vdevices=[to_vdevice(d) for d in devices], assignment={}
    )(mod)


@dataclass
class Profiler:
    """Measures workloads on one runner and records them in a database.

    Attributes
    ----------
    db : ProfileDB
        Where records are looked up and stored.
    runner : Runner
        ``LocalRunner()`` or an ``RPCRunner``.
    config : MeasureConfig
        Repeats and minimum measuring time.
    options : BuildOptions
        Compile mode of every workload (its ``cpu_schedule`` is the record's ``mode``).
    hits, misses : int
        Records served from the database / measured in this profiler's life.
    """

    db: ProfileDB
    runner: Runner = field(default_factory=LocalRunner)
    config: MeasureConfig = field(default_factory=MeasureConfig)
    options: BuildOptions = field(default_factory=BuildOptions)
    hits: int = 0
    misses: int = 0
    _remote_fps: dict[str, Fingerprint] = field(default_factory=dict, repr=False)

    @property
    def mode(self) -> str:
        """The compile mode recorded with every measurement."""
        return self.options.mode_key

    def _remote(self, devices: Sequence[DeviceSpec]) -> DeviceSpec | None:
        """The one remote device of ``devices`` that this profiler, timing in this process,
        times on its own worker instead (None otherwise). Before, DUET's subgraphs on an
        emulated cluster's devices of 0.3 to 0.9 core were all timed here at a whole core, under
        each device's name, and its plans were priced as if the devices were alike."""
        alone = len(devices) == 1 and devices[0].worker_id is not None
        return devices[0] if alone and isinstance(self.runner, LocalRunner) else None

    def _runner_of(self, devices: Sequence[DeviceSpec]) -> Runner:
        """The runner that times a workload on ``devices``: :meth:`_remote`'s worker (a session
        for this measurement alone: a worker serves one at a time), else the profiler's."""
        remote = self._remote(devices)
        return self.runner if remote is None else runners_for([remote])[remote.name]

    def _fingerprint(self, device: DeviceSpec) -> Fingerprint:
        """The device as the records key it: a remote one as its worker describes it (asked
        once)."""
        if self._remote([device]) is None:
            return self.runner.fingerprint(device)
        if device.name not in self._remote_fps:
            runner = self._runner_of([device])
            self._remote_fps[device.name] = runner.fingerprint(device)
            runner.close()
        return self._remote_fps[device.name]

    def measure(
        self, mod: tvm.IRModule, device: DeviceSpec, kind: RecordKind, workload: dict,
        extra: dict | None = None,
    ) -> ProfileRecord:  # fmt: skip
        """Time ``mod`` (its ``main``) on ``device``, or return the stored record."""
        key, target = workload_key(mod), target_key(device)
        return self._record(
            kind, key, target, [device], workload, lambda: place_on(mod, [device]), extra=extra
        )

    def _record(
        self, kind: RecordKind, key: str, target: str, devices: Sequence[DeviceSpec],
        workload: dict, placed: Callable[[], tvm.IRModule], config: MeasureConfig | None = None,
        extra: dict | None = None,
    ) -> ProfileRecord:  # fmt: skip
        """The stored record of this workload on this device, or a fresh measurement of it."""
        config = config or self.config

        def measure() -> Timing:
            mod = placed()
            refs = [device_ref(d) for d in devices]
            runner = self._runner_of(devices)
            if isinstance(runner, LocalRunner):  # the pool the kernels were built for
                use_threads(max((d.threads or os.cpu_count() or 1) for d in devices))
            args = random_args(input_infos(mod))
            try:
                return runner.time(build(mod, self.options), refs, args, config)
            finally:
                if runner is not self.runner:  # a session of this measurement's own
                    runner.close()

        def export() -> dict:
            mod = placed()
            self.runner.collect(  # type: ignore[attr-defined]
                kind, key, target, self.mode, devices, workload,
                build(zero_weights(mod), self.options), input_infos(mod), extra=extra,
            )  # fmt: skip
            return {}

        return self._stored_or_measured(
            kind, key, target, devices[0], workload, config, measure, extra, export
        )

    def _stored(
        self, kind: RecordKind, key: str, target: str, fingerprint: str, config: MeasureConfig
    ) -> ProfileRecord | None:
        """The database's record, of the device whose :meth:`_fingerprint` key is
        ``fingerprint``, measured at least as long as ``config`` asks
        (:func:`~tvm_hetero.runtime.measure.serves`), if any."""
        found = self.db.lookup(kind, key, target, self.mode, fingerprint)
        if found is not None and serves(
            config, found.repeat, found.number, found.median_s, found.extra.get("sample_ms")
        ):
            return found
        return None

    def _stored_or_measured(
        self, kind: RecordKind, key: str, target: str, device: DeviceSpec, workload: dict,
        config: MeasureConfig, measure: Callable[[], Timing], extra: dict | None = None,
        export: Callable[[], dict] | None = None,
    ) -> ProfileRecord:  # fmt: skip
        """The database's record (:meth:`_stored`), else ``measure()`` stored.

        With an offline runner a missing record is ``export()``-ed to be timed elsewhere and a
        placeholder (with what ``export`` returns in its ``extra``) is returned, not stored.
        """
        fp = self._fingerprint(device)
        found = self._stored(kind, key, target, fp.key, config)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        if getattr(self.runner, "offline", False):
            if export is None:
                raise ValueError(
                    f"{workload.get('op', kind.value)}: runs on the concurrent runtime, which "
                    "an offline device cannot; plan this where the devices are"
                )
            return ProfileRecord(
                kind, key, workload, target, self.mode, fp.to_dict(), fp.key,
                (PLACEHOLDER_S,) * config.repeat, 1, config.repeat, extra=export(),
            )  # fmt: skip
        timing = measure()
        if kind in WHOLE_MODEL:  # its build and its runs' buffers, freed
            give_back_freed_memory()
        record = ProfileRecord(
            kind, key, workload, target, self.mode, fp.to_dict(), fp.key, timing.samples_s,
            timing.number, len(timing.samples_s),
            extra={**(extra or {}), **timing.extra, "sample_ms": config.min_repeat_ms},
        )  # fmt: skip
        self.db.add([record])
        return record

    def profile_op(self, mod: tvm.IRModule, node_id: str, device: DeviceSpec) -> ProfileRecord:
        """One operator of ``mod``, compiled standalone at its shapes."""
        node = OpGraph.from_module(mod).node(node_id)
        return self.measure(op_module(mod, node_id), device, RecordKind.OP, _describe(node))

    def profile_ops(
        self, mod: tvm.IRModule, device: DeviceSpec, progress: Progress | None = None
    ) -> dict[str, ProfileRecord]:
        """Every operator of ``mod``; identical workloads are measured once."""
        graph = OpGraph.from_module(mod)
        out = {}
        for i, node in enumerate(graph.nodes):
            if progress:
                progress(node.node_id, i, len(graph.nodes))
            out[node.node_id] = self.measure(
                op_module(mod, node.node_id), device, RecordKind.OP, _describe(node)
            )
        if progress:
            progress("done", len(graph.nodes), len(graph.nodes))
        return out

    def sweep(
        self, mod: tvm.IRModule, node_id: str, dim: Dim, sizes: Sequence[int], device: DeviceSpec
    ) -> list[tuple[int, ProfileRecord]]:
        """One operator resized along ``dim`` to each of ``sizes`` (EOP's sampling).

        Returns ``(size, record)`` pairs: a size equal to another workload (the operator's own
        shape, say) is served by that workload's record.
        """
        base = op_module(mod, node_id)
        node = OpGraph.from_module(mod).node(node_id)
        records = []
        for size in sizes:
            variant = resize(base, dim, size)
            workload = {
                **_describe(OpGraph.from_module(variant).nodes[0]),
                "dim": dim.name,
                "size": size,
            }
            record = self.measure(variant, device, RecordKind.OP, workload, {"of": node.node_id})
            records.append((size, record))
        return records

    def profile_subgraph(
        self, mod: tvm.IRModule, node_ids: Sequence[str], device: DeviceSpec
    ) -> ProfileRecord:
        """Operators outlined into one function and built as the whole model builds them (DUET's
        compiler-aware profile): full fusion, the build's schedules, and weights kept constant so
        they are folded and pre-packed. Subgraphs alike but for their weights' values are one
        workload (keyed with the weights as parameters) and measured once."""
        shapes_only = subgraph_module(mod, node_ids)
        sub = subgraph_module(mod, node_ids, lift_constants=False)
        ops = [n.op for n in OpGraph.from_module(shapes_only).nodes]
        key, target = f"{workload_key(shapes_only)}+weights", target_key(device)
        return self._record(
            RecordKind.SUBGRAPH, key, target, [device], {"ops": ops},
            lambda: place_on(sub, [device]), extra={"nodes": list(node_ids)},
        )  # fmt: skip

    def profile_transfer(
        self, src: DeviceSpec, dst: DeviceSpec, sizes_bytes: Sequence[int], dtype: str = "float32"
    ) -> list[ProfileRecord]:
        """``to_vdevice`` from ``src`` to ``dst`` at each size (Lee et al.'s edge costs)."""
        target = f"{target_key(src)}->{target_key(dst)}"
        records = []
        for nbytes in sizes_bytes:
            mod = transfer_module(nbytes, dtype, to_vdevice(src), to_vdevice(dst))
            workload = {"src": src.name, "dst": dst.name, "dtype": dtype, "bytes": int(nbytes)}
            records.append(
                self._record(
                    RecordKind.TRANSFER,
                    workload_key(mod),
                    target,
                    [src, dst],
                    workload,
                    lambda m=mod: m,
                )
            )
        return records

    def profile_op_times(
        self, placed: tvm.IRModule, devices: Sequence[DeviceSpec], runs: int = 3
    ) -> ProfileRecord:
        """Every operator's time inside whole runs of ``placed`` (placed on ``devices``), built
        without fusion and timed by a VM instrument that waits for the GPU around each kernel
        (EOP's per-operator times, Lee et al.'s profiling runs). The record's ``extra`` holds
        ``node_seconds`` (operator or copy -> median seconds) and ``copies`` (copy -> source,
        destination, dtype, elements); its samples are the runs' wall times."""
        key, target = _op_times_key(placed, devices)
        workload = {"op": "op_times", "devices": [d.name for d in devices]}
        config = MeasureConfig(repeat=runs, min_repeat_ms=0)

        def measure() -> Timing:
            if not isinstance(self.runner, LocalRunner) or any(d.worker_id for d in devices):
                raise ValueError("per-operator runs are timed here or offline, not over RPC")
            work = op_times_workload(placed, self.options)
            use_threads(max((d.threads or os.cpu_count() or 1) for d in devices))
            devs = [vdevice_runtime_device(*device_ref(d)) for d in devices]
            args = random_args(input_infos(placed))
            node_s, walls = op_times(work.executable, devs, args, work.by_symbol, runs)
            return Timing(tuple(walls), 1, {"node_seconds": node_s, "copies": _lists(work.copies)})

        def export() -> dict:
            zeroed = op_times_workload(zero_weights(placed), self.options)
            copies = _lists(zeroed.copies)
            self.runner.collect(  # type: ignore[attr-defined]
                RecordKind.OP_IN_MODEL, key, target, self.mode, devices, workload,
                zeroed.executable, input_infos(placed), by_symbol=zeroed.by_symbol,
                extra={"copies": copies},
            )  # fmt: skip
            nodes = {n for ns in zeroed.by_symbol.values() for n in ns if n is not None}
            return {"node_seconds": dict.fromkeys(nodes, PLACEHOLDER_S), "copies": copies}

        return self._stored_or_measured(
            RecordKind.OP_IN_MODEL, key, target, devices[0], workload, config, measure,
            export=export,
        )  # fmt: skip

    def has_op_times(
        self, placed: tvm.IRModule, devices: Sequence[DeviceSpec], runs: int = 3
    ) -> bool:
        """Whether :meth:`profile_op_times` of these would be served from the database."""
        key, target = _op_times_key(placed, devices)
        config = MeasureConfig(repeat=runs, min_repeat_ms=0)
        fingerprint = self._fingerprint(devices[0]).key
        return self._stored(RecordKind.OP_IN_MODEL, key, target, fingerprint, config) is not None

    def profile_handoff(
        self, a: DeviceSpec, b: DeviceSpec, hops: int = 32, repeat: int = 50, setting: str = ""
    ) -> ProfileRecord:
        """What the concurrent runtime spends each time a value passes between a worker on ``a``
        and one on ``b`` (dispatch, wake-up, a unit call; for CPU workers of one process no
        copy, for a GPU beside the CPU the copy of a tiny value and the wait for the GPU, for
        two remote workers the pull of a tiny value between them): a chain of ``hops + 1`` tiny
        units alternating between them, timed end to end against the same chain as one unit on
        ``a``, the two in the same interleaved rounds. One sample per run, per handoff.
        ``setting``: as :meth:`profile_run` (two emulated clusters' handoffs differ: 0.37 and
        0.52 ms). With an offline runner both chains are exported, compiled, for the box to
        time."""
        if DeviceKind.SIMULATED in (a.kind, b.kind):
            raise ValueError(f"handoff: {a.name} or {b.name} is simulated (it runs nothing)")
        from tvm_hetero.build.compiled import compile_model
        from tvm_hetero.frontends.load import load_model
        from tvm_hetero.plan.placement import Placement
        from tvm_hetero.runtime.executor import handoff_seconds

        mod = chain_module(hops + 1)

        def compiled() -> tuple[Any, Any]:
            model = load_model(mod, name="handoff-chain")
            ids = [n.node_id for n in OpGraph.from_module(mod).nodes]
            apart = Placement((a.name, b.name), {n: 1 for n in ids[1::2]})
            return compile_model(model, [a], options=self.options), compile_model(
                model, [a, b], apart, self.options
            )

        def measure() -> Timing:
            one, two = compiled()
            return Timing(handoff_seconds(one.deployment, two.deployment, hops, repeat), 1)

        def export() -> dict:
            one, two = compiled()
            self.runner.collect_deployments(  # type: ignore[attr-defined]
                RecordKind.TRANSFER, key, target, self.mode, [a, b], workload,
                {"one": one, "two": two}, {"measure": "handoff", "hops": hops, "repeat": repeat},
            )  # fmt: skip
            return {}

        workload = {"src": a.name, "dst": b.name, "op": "handoff", "hops": hops}
        key = f"handoff:v{RUN_LAYOUT}:{workload_key(mod)}"
        target = f"{target_key(a)}<->{target_key(b)}"
        target += f" @ {setting}" if setting else ""
        config = MeasureConfig(repeat=repeat, min_repeat_ms=0)
        return self._stored_or_measured(
            RecordKind.TRANSFER, key, target, a, workload, config, measure, export=export
        )

    def profile_run(
        self, model: Model, devices: Sequence[DeviceSpec], plan: Any, setting: str = "",
        repeat: int = 30,
    ) -> ProfileRecord:  # fmt: skip
        """``model`` compiled with ``plan`` on ``devices`` and run end to end by the concurrent
        runtime on their workers (remote workers over TVM RPC): one sample per run, after five
        warm-up runs. ``setting`` is what else the time depends on that the devices do not say
        (an emulated cluster's links, say): it is part of the record's key. With an offline
        runner the compiled model (weights zero) is exported for the box to run."""
        from tvm_hetero.build.compiled import compile_model
        from tvm_hetero.runtime.executor import run_seconds

        def measure() -> Timing:
            compiled = compile_model(model, list(devices), plan, self.options)
            return Timing(run_seconds(compiled.deployment, repeat), 1)

        def export() -> dict:
            zeroed = dataclasses.replace(model, mod=zero_weights(model.mod))
            self.runner.collect_deployments(  # type: ignore[attr-defined]
                RecordKind.MODEL, key, target, self.mode, list(devices), workload,
                {"run": compile_model(zeroed, list(devices), plan, self.options)},
                {"measure": "run", "repeat": repeat},
            )  # fmt: skip
            return {}

        cut = {k: v for k, v in plan.to_dict().items() if k not in NOT_THE_CUT}
        key = f"run:v{RUN_LAYOUT}:{workload_key(model.mod)}:{json_key(cut)}"
        target = "|".join(target_key(d) for d in devices) + (f" @ {setting}" if setting else "")
        workload = {"op": "run", "model": model.name, "devices": [d.name for d in devices]}
        config = MeasureConfig(repeat=repeat, min_repeat_ms=0)
        return self._stored_or_measured(
            RecordKind.MODEL, key, target, devices[0], workload, config, measure, export=export
        )

    def profile_model(
        self, placed: tvm.IRModule, devices: Sequence[DeviceSpec], repeat: int = 100,
        name: str = "model",
    ) -> ProfileRecord:  # fmt: skip
        """A placed model end to end: one sample per run (``number=1``) for p50 / p99 / p99.9."""
        target = "|".join(target_key(d) for d in devices)
        workload = {"model": name, "devices": [d.name for d in devices]}
        config = MeasureConfig(repeat=repeat, min_repeat_ms=0, max_number=1)
        return self._record(
            RecordKind.MODEL,
            workload_key(placed),
            target,
            devices,
            workload,
            lambda: placed,
            config,
        )


def _op_times_key(placed: tvm.IRModule, devices: Sequence[DeviceSpec]) -> tuple[str, str]:
    """The record key and target of :meth:`Profiler.profile_op_times`."""
    return f"optimes:{workload_key(placed)}", "|".join(target_key(d) for d in devices)


def _lists(copies: dict[str, tuple]) -> dict[str, list]:
    """Copy attributes as JSON keeps them (records are compared after a round trip)."""
    return {name: list(attrs) for name, attrs in copies.items()}


def _describe(node) -> dict:
    return {
        "op": node.op,
        "inputs": [[list(t.shape or []), t.dtype] for t in node.inputs],
        "outputs": [[list(t.shape or []), t.dtype] for t in node.outputs],
        "attrs": {k: v for k, v in node.attrs.items() if isinstance(v, int | float | str | list)},
        "flops": node.flops,
    }


def profiler_for(
    db: str | Path | None = None, options: BuildOptions | None = None, runner: Runner | None = None,
    config: MeasureConfig | None = None,
) -> Profiler:  # fmt: skip
    """The profiler the strategies measure with: records kept in ``db`` (default
    :data:`DEFAULT_DB`), timed by ``runner`` (default: this process) with ``config`` (default:
    ``PROFILE_CONFIG``, 5 repeats of 10 ms)."""
    return Profiler(
        ProfileDB(db or DEFAULT_DB), runner or LocalRunner(),
        config or PROFILE_CONFIG, options or BuildOptions(),
    )  # fmt: skip
