"""PackConstantWeights: constant weights of CPU kernels laid out as their rule's tile reads."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax, s_tir, tirx
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks
from tvm.s_tir.schedule import ScheduleError

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.attrs import CALL_TIR_OP, COLUMNS_ATTR
from tvm_hetero.ir.bindings import calls_op, op_bindings
from tvm_hetero.schedules.cpu.common import output_bits, vector_lanes
from tvm_hetero.schedules.cpu.conv import (
    channel_tiled,
    column_step,
    conv_form,
    depthwise_channel,
    depthwise_channel_tiled,
    group_lanes,
    region_uses,
)
from tvm_hetero.schedules.cpu.gemm_form import drop_unit_reductions, gemm_form
from tvm_hetero.schedules.cpu.matmul import panel_width, weights_as_columns


@tvm.transform.module_pass(opt_level=0, name="PackConstantWeights")
class PackConstantWeights:
    """Lay out constant weights of CPU kernels as their rule's register tile reads them.

    Matmuls: ``[K, N]`` weights as ``[N / NR, K, NR]`` panels. Convolutions with rows of 1-5
    output columns (:func:`~tvm_hetero.schedules.cpu.conv.channel_tiled`: FlexPie's column
    tiles, small maps): ``[O, I, KH, KW]`` weights as ``[O / L, I, KH, KW, L]``, ``L`` the
    vector lanes, so the convolution rule's channel-vectorized tile loads ``L`` output
    channels' weights as one vector (a column of a 7-wide map's 3x3 512-channel convolution
    ran 3.5x faster than with its width as the vector). A packed kernel is named
    ``<name>_panels`` or ``<name>_channels``.

    The CPU matmul rule's register tile reads ``NR`` consecutive columns of ``B`` for each ``k``;
    in ``[K, N]`` layout those rows lie ``N`` elements apart (a new page every few ``k`` for wide
    layers), in panels they are consecutive. Doing the layout change once at compile time costs
    nothing at run time (packing per call costs a pass over the weights). ``NR`` is the rule's
    (two vectors of the kernel's target). Every Relax function's calls count: in a deployment the
    kernels are called by the units, not by ``main`` (before this, units kept ``[K, N]`` weights
    and a two-stage ViT ran its halves 1.4x slower than the whole model).

    Notes
    -----
    Run after ``FuseTIR`` and ``RestoreKernelTargets`` (kernels carry targets, weights are
    ``call_tir`` constants). A kernel is rewritten only when it is a matmul the rule tiles
    (``panel_width``, the rule's own test and tile width), its target is a CPU, and every call
    passes a constant at that argument; its ``B`` buffer becomes the panel layout (a new kernel
    ``<name>_panels``; the old one is left for ``DeadCodeElimination``), so numbers are unchanged.
    A convolution likewise: the convolution rule's form (two reads, the data read along the
    output width, an output channel axis the data does not use, the weights indexed by that
    axis first), static shapes, a CPU target and constant weights at every call.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Rewrite the kernels and their constants; ``mod`` is left unchanged."""
        calls: dict[tvm.ir.GlobalVar, list[relax.Call]] = {}
        for _, func in mod.functions_items():  # main, and the units a deployment calls
            if not isinstance(func, relax.Function):
                continue
            for b in op_bindings(func):
                if calls_op(b.call, CALL_TIR_OP):
                    calls.setdefault(b.call.args[0], []).append(b.call)
        packed = {}
        for gv, sites in calls.items():
            func = mod[gv]
            found = packed_kernel(func) if isinstance(func, PrimFunc) else None
            if found is None:
                continue
            if all(isinstance(c.args[1].fields[found.index], Constant) for c in sites):
                packed[gv] = found
        if not packed:
            return mod
        return _Repacker(mod, packed).run()


@dataclass(frozen=True)
class Packing:
    """How one kernel's weights are packed: the argument, the kernel reading it packed, its
    name's suffix and the same change on the constant's values."""

    index: int
    kernel: PrimFunc
    suffix: str
    pack: Callable[[np.ndarray], np.ndarray]


def packed_kernel(func: PrimFunc) -> Packing | None:
    """How ``func``'s weights are packed, or ``None`` when they are not."""
    target = func.attrs.get("target") if func.attrs else None
    if target is None or str(target.kind.name) != "llvm":
        return None
    sch = s_tir.Schedule(func)
    try:
        root = sch.get_sblock("root")
    except ScheduleError:
        return None  # no root block (TE's extern kernels: scatter_elements): no weights here
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(root))
    if not reductions or len(reductions) != 1:
        return None
    if gemm_form(sch.get(reductions[0])) is not None:
        return _panel_packed(sch, reductions[0], func, target)
    pointwise = s_tir.Schedule(func)  # a 1x1 convolution is the matmul rule's, not a window
    main = pointwise.get_sblock(sch.get(reductions[0]).name_hint)
    drop_unit_reductions(pointwise, main)
    form = gemm_form(pointwise.get(main))
    if form is not None and (found := _pointwise_packed(pointwise, main, form.b, func, target)):
        return found
    return _channel_packed(sch, reductions[0], func, target)


def _panel_packed(sch: s_tir.Schedule, main, func: PrimFunc, target) -> Packing | None:
    """A matmul's ``[K, N]`` weights as ``[N / NR, K, NR]`` panels."""
    block = sch.get(main)
    reduce = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    columns = block.writes[0].source.shape[-1]
    if not isinstance(columns, tirx.IntImm):
        return None  # a symbolic width: the panels need a whole number of columns
    columns = int(columns)  # rows may be symbolic (a batch given at run time)
    bits = output_bits(sch, main)
    nr = panel_width(target, bits, columns)
    if nr is None:
        return None  # not a kernel the matmul rule tiles
    params = [str(p.name) for p in func.params]
    for i, read in enumerate(block.reads):
        buf = read.source
        if len(buf.shape) != 2 or str(buf.name) not in params:
            continue
        row, col = (r.min for r in read.region)
        if not (isinstance(row, tirx.Var) and any(row.same_as(v) for v in reduce)):
            continue
        if not (isinstance(col, tirx.Var) and not any(col.same_as(v) for v in reduce)):
            continue
        if not isinstance(buf.shape[1], tirx.IntImm) or int(buf.shape[1]) != columns:
            return None
        sch.transform_layout(main, ("read", i), lambda k, j: (j // nr, k, j % nr))

        def pack(w: np.ndarray) -> np.ndarray:
            k, n = w.shape
            return w.reshape(k, n // nr, nr).transpose(1, 0, 2)

        kernel = sch.mod["main"].with_attrs(func.attrs)
        return Packing(params.index(str(buf.name)), kernel, "panels", pack)
    return None


def _pointwise_packed(
    sch: s_tir.Schedule, main, found: int, func: PrimFunc, target
) -> Packing | None:  # fmt: skip
    """A 1x1 convolution's ``[O, I, 1, 1]`` weights as the matmul rule's ``[O / NR, I, NR]``
    panels, the output channels its columns, where that beats the image as the columns:

    - over a 1x1 map (a model's head after global pooling) the output channels are the
      columns anyway. Packed by channel for the convolution rule instead, the matmul rule,
      which takes the kernel, repacked all of them into panels on every call: GhostNet's
      960 -> 1280 head took a third of the model's time;
    - over a small map whose positions no whole vector divides (:func:`weights_as_columns`:
      MobileNets' 14 x 14 and 7 x 7) the image's columns would be padded to whole vectors and
      packed on every call; with the weights as panels, named as ``B`` (``COLUMNS_ATTR``), the
      matmul rule reads both in place and writes its tile transposed;
    - over a map whose positions make one vector of columns where the output channels make two
      (:func:`~tvm_hetero.schedules.cpu.matmul.wider_with_weights`: 28 x 28), a wider tile.

    ``None`` otherwise (larger maps: the image is ``B``; rows of 1-5 columns keep the channel
    packing and the convolution rule)."""
    block = sch.get(main)
    params = [str(p.name) for p in func.params]
    reduce = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    bits = output_bits(sch, main)
    for index in (found, 1 - found):
        read = block.reads[index]
        shape = read.source.shape
        if len(shape) != 4 or str(read.source.name) not in params:
            continue
        if not all(isinstance(d, tirx.IntImm) for d in shape) or tuple(shape[2:]) != (1, 1):
            continue
        col, row, *window = (r.min for r in read.region)
        if any(not isinstance(w, tirx.IntImm) or int(w) != 0 for w in window):
            continue
        if not (isinstance(row, tirx.Var) and any(row.same_as(v) for v in reduce)):
            continue
        if not (isinstance(col, tirx.Var) and not any(col.same_as(v) for v in reduce)):
            continue
        nr = panel_width(target, bits, int(shape[0]))
        channels = int(shape[1]), int(shape[0])
        if nr is None or (index != found and not _weights_fit(block, target, bits, *channels)):
            return None
        break
    else:
        return None
    sch.transform_layout(main, ("read", index), lambda n, k, y, x: (n // nr, k + y + x, n % nr))

    def pack(w: np.ndarray) -> np.ndarray:
        n, k = w.shape[:2]
        return w.reshape(n // nr, nr, k).transpose(0, 2, 1)

    kernel = sch.mod["main"].with_attrs(func.attrs)
    weights = params.index(str(read.source.name))
    if index != found:
        kernel = kernel.with_attr(COLUMNS_ATTR, weights)
    return Packing(weights, kernel, "panels", pack)


def _weights_fit(block: s_tir.SBlock, target, bits: int, inputs: int, outputs: int) -> bool:
    """Whether ``block`` writes a map of static size whose 1x1 convolution of ``inputs`` ->
    ``outputs`` channels :func:`weights_as_columns` takes."""
    spatial = block.writes[0].source.shape[2:]
    if not all(isinstance(d, tirx.IntImm) for d in spatial):
        return False  # a height or width given at run time
    positions = math.prod(int(d) for d in spatial)
    return weights_as_columns(target, bits, positions, inputs, outputs)


def _channel_packed(sch: s_tir.Schedule, main, func: PrimFunc, target) -> Packing | None:
    """A narrow convolution's ``[O, I, K...]`` weights as ``[O / L, I, K..., L]``."""
    block = sch.get(main)
    form = conv_form(block)
    if form is None:
        return None
    iters = block.iter_vars
    if any(not isinstance(v.dom.extent, tirx.IntImm) for v in iters):
        return None
    depthwise = depthwise_channel(block, form)
    channel = form.channel if depthwise is None else depthwise
    if channel is None:
        return None
    weights = form.weights
    if region_uses(weights, iters[form.spatial[-1]].var):
        return None  # both reads run along the width: not data and weights
    if not weights.region[0].min.same_as(iters[channel].var):
        return None  # the weights are not indexed by the output channel first
    params = [str(p.name) for p in func.params]
    if str(weights.source.name) not in params or len(weights.source.shape) < 3:
        return None
    lanes = vector_lanes(target, output_bits(sch, main))
    if form.group is not None:
        lanes = group_lanes(form.group, lanes) or lanes
    channels = int(weights.source.shape[0])
    window = [int(iters[i].dom.extent) for i in form.reduce]
    inputs = window[0] if len(window) > 1 and math.prod(window[1:]) > 1 else 0
    width = int(iters[form.spatial[-1]].dom.extent)
    row = form.spatial[-2]
    rows = int(iters[row].dom.extent) if row != channel else 1
    if depthwise is not None:
        stride = column_step(form.data, iters[form.spatial[-1]].var) or 1
        tiled = depthwise_channel_tiled(width, channels, lanes, stride)
    else:
        tiled = channel_tiled(width, channels, lanes, form.group, inputs, rows)
    if not tiled:
        return None
    ndim = len(weights.source.shape)
    sch.transform_layout(
        main,
        ("read", list(block.reads).index(weights)),
        tirx.IndexMap.from_func(lambda o, *rest: (o // lanes, *rest, o % lanes), ndim=ndim),
    )

    def pack(w: np.ndarray) -> np.ndarray:
        o, *rest = w.shape
        order = (0, *range(2, ndim + 1), 1)
        return w.reshape(o // lanes, lanes, *rest).transpose(order)

    kernel = sch.mod["main"].with_attrs(func.attrs)
    return Packing(params.index(str(weights.source.name)), kernel, "channels", pack)


@mutator
class _Repacker(PyExprMutator):
    def __init__(self, mod: IRModule, packed: dict) -> None:
        super().__init__(mod)
        self.mod_, self.packed = mod, packed

    def run(self) -> IRModule:
        # a new GlobalVar per packed kernel: a GlobalVar keeps the type of its first function
        self.kernels = {
            kernel: self.builder_.add_func(p.kernel, f"{kernel.name_hint}_{p.suffix}")
            for kernel, p in self.packed.items()
        }
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not calls_op(call, CALL_TIR_OP):
            return call
        found = self.packed.get(call.args[0])
        if found is None:
            return call
        fields = list(call.args[1].fields)
        weight = fields[found.index].value.numpy()
        fields[found.index] = relax.const(np.ascontiguousarray(found.pack(weight)))
        kernel = self.kernels[call.args[0]]
        return relax.Call(call.op, [kernel, relax.Tuple(fields), *call.args[2:]],
                          call.attrs, call.ty_args)  # fmt: skip
