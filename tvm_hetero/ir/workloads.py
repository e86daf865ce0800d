"""Standalone modules to measure: one operator, an operator resized along a dimension, an outlined
subgraph, a spatial tile of one operator, and a device-to-device copy. Weights become
parameters, so identical operators (BERT's twelve layers) have identical modules and one
workload key; a tile's weights become zeros of their shape instead (:func:`tile_op_module`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir.expr import Constant

from tvm_hetero._compat import TensorType, VDevice
from tvm_hetero.ir.attrs import CALL_TIR_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import calls_op, iter_bindings, op_bindings
from tvm_hetero.ir.outline import closure, outline_module, plain_type, used_outside
from tvm_hetero.ir.types import TensorInfo, tensor_infos


def workload_key(mod: tvm.IRModule) -> str:
    """Structural hash of a module (variable names do not count)."""
    return f"{tvm_ffi.structural_hash(mod, map_free_vars=True) & (2**64 - 1):016x}"


def _single_call_module(
    call: relax.Call, params: list[relax.Var], args: list, src_mod: tvm.IRModule | None
) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    if calls_op(call, CALL_TIR_OP):
        gv = bb.add_func(src_mod[call.args[0]], call.args[0].name_hint)
        args = [gv, *args[1:]]
    with bb.function(ENTRY_FUNC, params):
        with bb.dataflow():
            out = bb.emit_output(
                relax.Call(call.op, args, call.attrs, [plain_type(t) for t in call.ty_args])
            )
        bb.emit_func_output(out)
    return bb.get()


def op_module(mod: tvm.IRModule, node_id: str, func_name: str = ENTRY_FUNC) -> tvm.IRModule:
    """The operator ``node_id`` of ``mod[func_name]`` alone: its tensor inputs become parameters.

    Raises
    ------
    KeyError
        For an unknown node id.
    """
    found = {b.node_id: b for b in op_bindings(mod[func_name])}
    if node_id not in found:
        raise KeyError(f"op_module: no operator {node_id!r} in {func_name!r}")
    call = found[node_id].call
    params: list[relax.Var] = []

    def lift(expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([lift(f) for f in expr.fields])
        if isinstance(expr.ty, TensorType):
            params.append(relax.Var(f"in{len(params)}", plain_type(expr.ty)))
            return params[-1]
        return expr

    args = list(call.args)
    if calls_op(call, CALL_TIR_OP):
        args = [args[0], lift(args[1]), *args[2:]]
    else:
        args = [lift(a) for a in args]
    return _single_call_module(call, params, args, mod)


@dataclass(frozen=True)
class Dim:
    """A partition dimension: the ``(input index, axis)`` pairs that change together."""

    name: str
    axes: tuple[tuple[int, int], ...]


def partition_dims(mod: tvm.IRModule) -> dict[str, Dim]:
    """The dimensions an operator module can be sampled along.

    ``matmul``: ``M`` (rows of the left operand), ``N`` (columns of the right), ``K`` (the
    reduction, both operands) and ``batch`` when there is one; ``conv2d``: ``batch``, ``H``, ``W``,
    ``OC``, ``IC``; any other op: ``batch`` (axis 0 of every input that has it) and ``axisK`` of an
    element-wise op's inputs of equal rank.
    """
    call = next(b.call for b in op_bindings(mod[ENTRY_FUNC]))
    shapes = [p.ty.shape.values for p in mod[ENTRY_FUNC].params]
    name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
    if name == "relax.matmul":
        dims = {
            "M": Dim("M", ((0, -2),)),
            "N": Dim("N", ((1, -1),)),
            "K": Dim("K", ((0, -1), (1, -2))),
        }
        if len(shapes[0]) > 2:
            dims["batch"] = Dim("batch", tuple((i, 0) for i, s in enumerate(shapes) if len(s) > 2))
        return dims
    if name == "relax.nn.conv2d":
        return {
            "batch": Dim("batch", ((0, 0),)), "H": Dim("H", ((0, 2),)), "W": Dim("W", ((0, 3),)),
            "OC": Dim("OC", ((1, 0),)), "IC": Dim("IC", ((0, 1), (1, 1))),
        }  # fmt: skip
    rank = len(shapes[0])
    same = [i for i, s in enumerate(shapes) if len(s) == rank]
    dims = {f"axis{a}": Dim(f"axis{a}", tuple((i, a) for i in same)) for a in range(rank)}
    dims["batch"] = Dim("batch", tuple((i, 0) for i in same))
    return dims


def resize(mod: tvm.IRModule, dim: Dim, size: int) -> tvm.IRModule:
    """``mod`` (an :func:`op_module`) with ``dim`` set to ``size`` on every input it touches.

    Output shapes follow from Relax's shape inference.
    """
    if size < 1:
        raise ValueError(f"resize: size must be >= 1, got {size}")
    func = mod[ENTRY_FUNC]
    call = next(b.call for b in op_bindings(func))
    params = []
    for i, p in enumerate(func.params):
        shape = list(p.ty.shape.values)
        for index, axis in dim.axes:
            if index == i:
                shape[axis] = size
        params.append(relax.Var(p.name, TensorType(shape, p.ty.dtype)))
    remap = dict(zip(func.params, params, strict=True))
    args = [
        relax.Tuple([remap.get(f, f) for f in a.fields])
        if isinstance(a, relax.Tuple)
        else remap.get(a, a)
        for a in call.args
    ]
    if calls_op(call, CALL_TIR_OP):
        raise ValueError(
            "resize: kernels after legalization have fixed shapes; resize the Relax op"
        )
    return _single_call_module(call, params, args, None)


def subgraph_module(
    mod: tvm.IRModule,
    node_ids: Sequence[str],
    func_name: str = ENTRY_FUNC,
    lift_constants: bool = True,
) -> tvm.IRModule:
    """Outline the operators ``node_ids`` (with the tuple plumbing between them) into ``main``.

    Tensors from outside (function inputs, other operators and, if ``lift_constants``, weight
    constants) become parameters; tensors used outside, or returned, become outputs.
    """
    func = mod[func_name]
    wanted = set(node_ids)
    ops = {b.var: b.node_id for b in op_bindings(func)}
    unknown = wanted - set(ops.values())
    if unknown:
        raise KeyError(f"subgraph_module: unknown operator(s) {sorted(unknown)}")
    bindings = [b for _, _, b in iter_bindings(func)]
    inside = closure(bindings, ops, wanted)
    outputs = used_outside(bindings, inside, func.body.body)
    return outline_module(mod, [b for b in bindings if b.var in inside], outputs, lift_constants)


def transfer_module(nbytes: int, dtype: str, src: VDevice, dst: VDevice) -> tvm.IRModule:
    """``main(x) = to_vdevice(x, dst)`` for a 1-D ``x`` of ``nbytes`` on ``src``."""
    info = TensorInfo((1,), dtype)
    n = max(1, nbytes // (info.nbytes or 1))
    x = relax.Var("x", TensorType((n,), dtype, src))
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.to_vdevice(x, dst))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [src, dst])
    return mod


def local_copy_module(nbytes: int, dtype: str = "float32") -> tvm.IRModule:
    """``main(x) = concat(x[:n/2], x[n/2:])``: slicing and concatenating ``nbytes`` on one device
    (what cutting an operator costs on its home device)."""
    info = TensorInfo((1,), dtype)
    n = max(2, nbytes // (info.nbytes or 1))
    x = relax.Var("x", TensorType((n,), dtype))
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, [x]):
        with bb.dataflow():
            lo = bb.emit(relax.op.strided_slice(x, [0], [0], [n // 2]))
            hi = bb.emit(relax.op.strided_slice(x, [0], [n // 2], [n]))
            out = bb.emit_output(relax.op.concat([lo, hi], axis=0))
        bb.emit_func_output(out)
    return bb.get()


def tile_op_module(call: relax.Call, out: tuple[tuple[int, int], ...]) -> tvm.IRModule:
    """Operator ``call`` computing output box ``out`` of a spatial tile alone: each tensor
    argument a parameter of the part the tile reads, weights (constants of ``call``) a constant
    of zeros of that part, the window padded as the tile pads it (FlexPie's compute traces).
    Weights stay constants because a build lays constant weights out for its kernels
    (``PackConstantWeights``, ``PadMatmulColumns``; a column tile's convolution is vectorized by
    channel only so): given at run time they timed another kernel. Zeros: only shapes are
    timed, and one shape is one workload key."""
    from tvm_hetero.ir.tiles import box_shape, needs, tile_call

    boxes = needs(call, out)
    if boxes is None:
        raise ValueError(f"tile_op_module: {call.op.name} has no tile rule for box {out}")
    params, args = [], []
    for k, (arg, box) in enumerate(zip(call.args, boxes, strict=True)):
        if box is None:
            args.append(arg)
            continue
        if isinstance(arg, Constant):
            args.append(relax.const(np.zeros(box_shape(box), str(arg.ty.dtype))))
            continue
        params.append(relax.Var(f"in{k}", TensorType(box_shape(box), str(arg.ty.dtype))))
        args.append(params[-1])
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, params):
        with bb.dataflow():
            result = bb.emit_output(tile_call(call, args, out))
        bb.emit_func_output(result)
    return bb.get()


def concat_module(shape: Sequence[int], pieces: int, axis: int, dtype: str = "float32"):
    """``main(p0, p1, ...) = concat(p, axis)``: ``pieces`` parts joined into a tensor of
    ``shape`` (what assembling a received tile costs: FlexPie's re-arrangement traces)."""
    from tvm_hetero.ir.tiles import even_parts

    parts = even_parts(int(shape[axis]), pieces)
    params = [
        relax.Var(f"p{k}", TensorType((*shape[:axis], hi - lo, *shape[axis + 1 :]), dtype))
        for k, (lo, hi) in enumerate(parts)
    ]
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.concat(params, axis=axis))
        bb.emit_func_output(out)
    return bb.get()


def chain_module(length: int, size: int = 8) -> tvm.IRModule:
    """``main(x)``: ``length`` tiny additions one after the other, each needing the last (placed
    alternately on two workers, every one of them is a unit and every step a handoff)."""
    x = relax.Var("x", TensorType((size,), "float32"))
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, [x]):
        with bb.dataflow():
            h = x
            for _ in range(length):
                h = bb.emit(relax.op.add(h, relax.const(1.0, "float32")))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


def conv_chain_module(length: int, channels: int = 4, size: int = 16) -> tvm.IRModule:
    """``main(x)``: ``length`` small 3x3 convolutions, each with its ReLU, one after the other
    on a ``(1, channels, size, size)`` image (cut into row tiles, every layer a halo exchange
    between neighbours and a unit per device: what a tiled layer costs the runtime)."""
    x = relax.Var("x", TensorType((1, channels, size, size), "float32"))
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, [x]):
        with bb.dataflow():
            h = x
            for _ in range(length):
                w = rng.standard_normal((channels, channels, 3, 3)).astype("float32") / 6
                h = bb.emit(relax.op.nn.conv2d(h, relax.const(w), padding=1))
                h = bb.emit(relax.op.nn.relu(h))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


def input_infos(mod: tvm.IRModule) -> list[tuple[tuple, str]]:
    """``(shape, dtype)`` of ``main``'s parameters (to make random arguments)."""
    return [(t.shape or (), t.dtype) for p in mod[ENTRY_FUNC].params for t in tensor_infos(p.ty)]


ZEROED_MIN_ELEMENTS = 1024
"""Float constants at least this large are weights; smaller ones (scales, epsilons) are kept."""


def zero_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its float weights zero: what an exported timing workload carries.

    A kernel's time does not depend on its weights' values (dense kernels, no sparsity), and a
    library of zeros compresses to nothing: EOP's per-operator runs of BERT-small carry the
    model's 43 MB of weights, twice, which the device tool could not carry to a GPU box. The
    workload keeps its key (taken from the real module), so the box's record serves it.
    """
    from tvm_hetero.ir.mutate import mutate_functions

    return mutate_functions(mod, _ZeroWeights(mod))


@relax.expr_functor.mutator
class _ZeroWeights(relax.PyExprMutator):
    def visit_generic_const_(self, const):
        value = const.value
        if (
            not isinstance(value, tvm.runtime.Tensor)
            or not str(value.dtype).startswith(("float", "bfloat"))
            or int(np.prod(value.shape)) < ZEROED_MIN_ELEMENTS
        ):
            return const
        return relax.const(np.zeros(tuple(value.shape), str(value.dtype)))
