"""Build a module whose bindings carry VDevices: legalize, fuse within a device, schedule, compile.

``tvm.compile(mod)`` with no target (the multi-device path) runs no fusion and no schedule, and an
unscheduled CUDA kernel silently becomes host code. This module does what the single-target
pipelines would do, per device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import tvm
from tvm import relax

from tvm_hetero._compat import PrimFunc
from tvm_hetero.build.storage_per_device import TagStorageByDevice, UntagStorage
from tvm_hetero.errors import BuildError
from tvm_hetero.ir.builder_scopes import module_without_seq_scopes
from tvm_hetero.passes import (
    BlockedCopiesAsTransposes,
    GuardedLanesAsMaskedStores,
    GuardedReadsAsVectors,
    PrefetchNextPanels,
    PrefetchPanelBlocks,
    StackLoopBuffers,
    StridedLoadsAsShuffles,
)
from tvm_hetero.pipelines import PIPELINES
from tvm_hetero.runtime.native_noise import without_native_lines
from tvm_hetero.schedules import schedule_kernels

log = logging.getLogger(__name__)


class CpuSchedule(StrEnum):
    """How CPU kernels are scheduled."""

    RULES = "rules"
    """tvm-hetero's CPU rules (matmul, conv, reductions, injective, fallback): no tuning."""
    DEFAULT = "default"
    """TVM's default lowering: plain loops."""
    DLIGHT = "dlight"
    """dlight's CPU rules (GEMV, reductions)."""
    METASCHEDULE = "metaschedule"
    """Records of a MetaSchedule tuning database where it has them, the rules elsewhere."""


RECORDS_FILE = "database_tuning_record.json"
"""The records file of a MetaSchedule work dir."""

CONV3X3 = ("rule", "measure")
"""How CPU 3x3 convolutions of stride 1 are chosen (``BuildOptions.conv3x3``)."""


def normalize_cpu_schedule(value: str | CpuSchedule) -> CpuSchedule:
    """Parse a schedule mode, listing the allowed ones on error."""
    try:
        return CpuSchedule(value)
    except ValueError:
        allowed = ", ".join(m.value for m in CpuSchedule)
        raise ValueError(f"unknown CPU schedule {value!r}; choose from {allowed}") from None


@dataclass(frozen=True)
class BuildOptions:
    """Options of :func:`build`.

    Attributes
    ----------
    cpu_schedule : CpuSchedule
        Schedule mode of CPU kernels.
    ms_database : str or None
        MetaSchedule work dir (``database_workload.json`` / ``database_tuning_record.json``):
        its records schedule the GPU kernels they hold (:mod:`~tvm_hetero.build.gpu_tuning`),
        and the CPU kernels too under ``metaschedule``, which requires it.
    fuse : bool
        Fuse operators within each device; ``False`` keeps one kernel per operator (per-operator
        profiling maps each kernel call back to its operator).
    cuda_archs : tuple of str
        GPU architectures (``sm_80``, ``sm_90``) whose device code the library carries (one fat
        binary); empty: each CUDA device's own ``arch``.
    conv3x3 : str
        How CPU 3x3 convolutions of stride 1 are computed: ``"measure"`` (the default), each
        shape of :data:`~tvm_hetero.build.conv_choices.MIN_FLOPS` or more timed on this CPU
        all three ways (4 x 4 or 2 x 2 Winograd tiles, or the convolution rule's kernel) and
        the fastest kept (:mod:`~tvm_hetero.build.conv_choices`: once per machine and shape);
        ``"rule"``, Winograd's tiles where ``WinogradConvolutions``' static rule takes them.
    conv_cache : str or None
        The file ``"measure"`` keeps its choices in; None: ``conv_choices.cache_path()``.
    winograd_tiles : tuple of (str, int)
        Tile sizes fixed by workload key (what measuring builds each way with); they win over
        the rule and the measured choice.
    cuda_graph : bool
        A library of one CUDA device captures its runs of kernels over planned memory as CUDA
        graphs on the first call and replays them after (``RewriteCUDAGraph``); ``False``
        launches every kernel each run. Libraries of CPU devices, and modules of several
        devices, never capture (TVM's rewrite does not tell a CPU kernel from a GPU one).
    """

    cpu_schedule: CpuSchedule = CpuSchedule.RULES
    ms_database: str | None = None
    fuse: bool = True
    cuda_archs: tuple[str, ...] = ()
    cuda_graph: bool = True
    conv3x3: str = "measure"
    conv_cache: str | None = None
    winograd_tiles: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu_schedule", normalize_cpu_schedule(self.cpu_schedule))
        if self.conv3x3 not in CONV3X3:
            raise ValueError(f"unknown conv3x3 {self.conv3x3!r}; choose from {', '.join(CONV3X3)}")
        if self.cpu_schedule is CpuSchedule.METASCHEDULE and not self.ms_database:
            raise ValueError("cpu_schedule 'metaschedule' needs ms_database (a tuning work dir)")
        if self.ms_database and not (Path(self.ms_database) / RECORDS_FILE).is_file():
            raise ValueError(f"ms_database {self.ms_database!r} has no {RECORDS_FILE}")

    @property
    def mode_key(self) -> str:
        """The compile mode as measurements record it.

        ``metaschedule`` carries a digest of the tuning records, so timings taken with one state
        of the tuning database are not served once it has better records.
        """
        records = ""
        if self.ms_database:
            import hashlib

            data = (Path(self.ms_database) / RECORDS_FILE).read_bytes()
            records = hashlib.sha1(data).hexdigest()[:12]
        if self.cpu_schedule is CpuSchedule.METASCHEDULE:
            return f"metaschedule:{records}"
        tuned = f"+tuned:{records}" if records else ""
        if self.cpu_schedule is CpuSchedule.RULES:
            from tvm_hetero.schedules.cpu import RULES_VERSION

            static = "+static3x3" if self.conv3x3 == "rule" else ""
            return f"rules:v{RULES_VERSION}{static}{tuned}"
        return f"{self.cpu_schedule.value}{tuned}"


def lower(mod: tvm.IRModule, options: BuildOptions | None = None) -> tvm.IRModule:
    """Everything before code generation: the returned module's kernels are all scheduled.

    Raises
    ------
    BuildError
        If the module declares no vdevices, or a GPU kernel stays unscheduled.
    """
    options = options or BuildOptions()
    mod = fused(mod, options)
    records = None
    if options.ms_database:
        from tvm.s_tir import meta_schedule as ms

        records = ms.database.JSONDatabase(work_dir=options.ms_database)
    cpu = options.cpu_schedule.value
    cpu_records = None
    if options.cpu_schedule is CpuSchedule.METASCHEDULE:
        cpu_records, cpu = records, "rules"
    mod = module_without_seq_scopes(schedule_kernels(mod, cpu, cpu_records, records))
    unscheduled = [
        gv.name_hint
        for gv, f in mod.functions_items()
        if isinstance(f, PrimFunc) and _kind(f) == "cuda" and not _scheduled(f)
    ]
    if unscheduled:
        raise BuildError(
            f"build: CUDA kernels left unscheduled (would run as host code): {unscheduled}"
        )
    return mod


def fused(mod: tvm.IRModule, options: BuildOptions | None = None) -> tvm.IRModule:
    """A placed module lowered to its kernels, fused (unless ``options.fuse`` is off), none
    scheduled yet: what :func:`lower` schedules.

    Raises
    ------
    BuildError
        If the module declares no vdevices.
    """
    options = options or BuildOptions()
    if not list(mod.global_infos.get("vdevice", [])):
        raise BuildError("build: the module declares no vdevices; place it on devices first")
    with without_native_lines(PRAGMA_NOISE):  # TVM's FoldConstant builds topi's kernels
        lowering = "multi_device_lower" if options.fuse else "multi_device_lower_unfused"
        head, tail = PIPELINES[lowering].split("WinogradConvolutions")
        mod = head.build()(mod)
        tiles = dict(options.winograd_tiles)
        if options.conv3x3 == "measure":
            from tvm_hetero.build.conv_choices import measured_tiles

            tiles = {**measured_tiles(mod, options.conv_cache), **tiles}
        mod = tail.build(winograd_tiles=tiles)(mod)
    return mod


PRAGMA_NOISE = "Unknown pragma pragma_scope"
"""What LLVM's code generator logs for each ``pragma_scope`` of topi's ``scatter_nd`` (see
:mod:`~tvm_hetero.ir.builder_scopes`) when TVM's ``FoldConstant`` builds one of constants
itself: Swin3D's shifted-window mask printed 36 such lines while ``tvm-hetero compile`` built
it (none with ``FoldConstant`` taken out of the pipeline)."""


def build(mod: tvm.IRModule, options: BuildOptions | None = None) -> tvm.runtime.Executable:
    """Lower and compile a multi-device module.

    Fails loudly if a CUDA kernel would run as host code. With CUDA kernels the executable is a
    :class:`~tvm_hetero.build.cuda_binary.DeviceCodeExecutable`: exported, it carries them as
    device code for ``options.cuda_archs`` (a module that declares a CUDA vdevice but computes
    nothing there, such as a copy's workload or a plan that keeps everything home, has none).
    """
    options = options or BuildOptions()
    return build_lowered(lower(mod, options), options)


def build_lowered(
    lowered: tvm.IRModule, options: BuildOptions | None = None
) -> tvm.runtime.Executable:
    """Compile a module :func:`lower` returned (with the ``options`` it was lowered with), as
    :func:`build` does after lowering: for a caller that reads the lowered module too."""
    options = options or BuildOptions()
    ex = _compile(lowered, options.cuda_graph and captures(lowered))
    cuda_kernels = [
        gv.name_hint
        for gv, f in lowered.functions_items()
        if isinstance(f, PrimFunc) and _kind(f) == "cuda"
    ]
    if not cuda_kernels:
        return ex
    if "cuda" not in module_kinds(ex.mod):
        raise BuildError(
            f"build: CUDA kernels {cuda_kernels[:3]} were compiled as host code (no CUDA module)"
        )
    from tvm_hetero.build.cuda_binary import DeviceCodeExecutable

    archs = options.cuda_archs or tuple(
        sorted({str(v.target.attrs["arch"]) for v in lowered.global_infos["vdevice"]
                if str(v.target.kind.name) == "cuda"})
    )  # fmt: skip
    return DeviceCodeExecutable(ex.mod, archs)


def captures(mod: tvm.IRModule) -> bool:
    """Whether a build of ``mod`` may capture CUDA graphs: it declares one vdevice, a CUDA one.

    ``RewriteCUDAGraph`` lifts every kernel over planned memory, whatever its target, and merges
    the lifted storage assuming virtual device 0: in a module of several devices it would
    capture CPU kernels into the graph (replayed, they never run). A deployment builds each
    device's units into a library of that device alone, so its GPU units capture.
    """
    vdevices = list(mod.global_infos.get("vdevice", []))
    return len(vdevices) == 1 and str(vdevices[0].target.kind.name) == "cuda"


def _compile(lowered: tvm.IRModule, cuda_graph: bool) -> tvm.runtime.Executable:
    """Relax to VM code; with ``cuda_graph``, capturing where TVM's rewrite can, else (its
    rewrite fails on some modules: a lifted region's value left undefined) launching."""
    if cuda_graph:
        try:
            with _cuda_graph_context(True):
                return tvm.compile(lowered, relax_pipeline=vm_pipeline(), tir_pipeline=TIR_PIPELINE)
        except RuntimeError as err:  # tvm.error.InternalError
            first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            log.warning("build: CUDA graphs left off for this library (TVM: %s)", first)
    with _cuda_graph_context(False):
        return tvm.compile(lowered, relax_pipeline=vm_pipeline(), tir_pipeline=TIR_PIPELINE)


def _cuda_graph_context(enabled: bool) -> tvm.transform.PassContext:
    """The caller's pass context (its instruments, its config) with CUDA graphs on or off."""
    current = tvm.transform.PassContext.current()
    config = {str(k): v for k, v in current.config.items()}
    config["relax.backend.use_cuda_graph"] = enabled
    return tvm.transform.PassContext(
        opt_level=current.opt_level, config=config, instruments=list(current.instruments)
    )


def vm_pipeline() -> tvm.transform.Pass:
    """TVM's default Relax-to-VM pipeline, with memory planned per device.

    ``StaticPlanBlockMemory`` in 0.27 pools storage by (scope, dtype) only, so a buffer freed on
    one vdevice was reused for a tensor on another and kernels failed their device check (seen
    with llvm:0 / llvm:1): :mod:`~tvm_hetero.build.storage_per_device` keeps each device's
    storage to itself while the planner runs. ``RewriteCUDAGraph`` acts only under the pass
    config ``relax.backend.use_cuda_graph`` (:func:`build` sets it for a CUDA device alone).
    """
    t = relax.transform
    steps = [
        DispatchOnHomeDevice(), t.LegalizeOps(), t.RewriteDataflowReshape(),
        t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
        TagStorageByDevice(), t.StaticPlanBlockMemory(), UntagStorage(),
        t.RewriteCUDAGraph(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
        t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol(),
    ]  # fmt: skip
    return tvm.transform.Sequential(steps, name="tvm_hetero_vm_pipeline")


@tvm.transform.module_pass(opt_level=0, name="DispatchOnHomeDevice")
class DispatchOnHomeDevice:
    """TVM's ``DispatchSampling`` and ``DispatchSortScan`` with the home device's target (the
    module's vdevice 0) current.

    Each takes an operator's target from its output's vdevice, else from the current target,
    and fails without one. An operator of constants alone has no vdevice: DETR's sine position
    embedding sums a constant mask along each axis (``CumSum``), and its build failed ("Target
    not found"). Such an operator runs on the home device, as a kernel of constants does
    (:class:`~tvm_hetero.passes.RestoreKernelTargets`)."""

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Return ``mod`` with its sampling, sort and scan operators as kernels."""
        steps = tvm.transform.Sequential(
            [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()]
        )
        vdevices = list(mod.global_infos.get("vdevice", []))
        if not vdevices or tvm.target.Target.current(allow_none=True) is not None:
            return steps(mod)
        with vdevices[0].target:
            return steps(mod)


TIR_PIPELINE = "tvm_hetero"
"""The name every build of the package's kernels gives ``tvm.compile`` as its TIR pipeline
(:func:`tir_pipeline`)."""


def tir_pipeline() -> tuple:
    """TVM's ``s_tir`` pipeline (its lowering, the host's and the devices' last passes) with
    :class:`~tvm_hetero.passes.PrefetchPanelBlocks` and
    :class:`~tvm_hetero.passes.PrefetchNextPanels` before the lowering (on the scheduled
    kernels), :class:`~tvm_hetero.passes.GuardedLanesAsMaskedStores`,
    :class:`~tvm_hetero.passes.GuardedReadsAsVectors`,
    :class:`~tvm_hetero.passes.BlockedCopiesAsTransposes`,
    :class:`~tvm_hetero.passes.StridedLoadsAsShuffles` and
    :class:`~tvm_hetero.passes.StackLoopBuffers` before the host's (``LowerTVMBuiltin``, which
    turns each buffer the latter leaves into a workspace allocation).
    Registered with TVM as :data:`TIR_PIPELINE`."""
    lowering, host, device = tvm.tirx.get_tir_pipeline("s_tir")
    lowered = tvm.transform.Sequential([PrefetchPanelBlocks(), PrefetchNextPanels(), lowering])
    host_steps = [
        GuardedLanesAsMaskedStores(), GuardedReadsAsVectors(), BlockedCopiesAsTransposes(),
        StridedLoadsAsShuffles(), StackLoopBuffers(),
    ]  # fmt: skip
    return lowered, lambda: tvm.transform.Sequential([*host_steps, host()]), device


tvm.tirx.register_tir_pipeline(TIR_PIPELINE, tir_pipeline)


def module_kinds(module: tvm.runtime.Module) -> set[str]:
    """Kinds of the modules in an executable's import tree (``relax.VMExecutable``, ``cuda``...)."""
    kinds, stack = set(), [module]
    while stack:
        m = stack.pop()
        kinds.add(str(m.kind))
        stack.extend(m.imports)
    return kinds


def _kind(func: PrimFunc) -> str | None:
    target = func.attrs.get("target") if func.attrs else None
    return None if target is None else str(target.kind.name)


def _scheduled(func: PrimFunc) -> bool:
    return bool(func.attrs and func.attrs.get("tirx.is_scheduled", False))
