"""RealizeOperatorSplits: cut each annotated operator into a shard per device."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import VDevice
from tvm_hetero.ir.attrs import ENTRY_FUNC, SPLITS_ATTR
from tvm_hetero.ir.bindings import function_named, op_bindings
from tvm_hetero.ir.split_dims import SplitDim, devices_used, split_dims


@tvm.transform.module_pass(opt_level=0, name="RealizeOperatorSplits")
class RealizeOperatorSplits:
    """Rewrite each operator annotated by ``AnnotateOperatorSplits`` into a shard per device.

    An operator cut along ``dim`` with shares ``(n0, n1, ...)`` (units on vdevice 0, 1, ...)
    becomes: slices of its cut arguments (``strided_slice``, or a constant, such as a weight,
    sliced at compile time; a convolution's row slices overlap by the halo and get their own
    padding), ``to_vdevice`` of the other devices' slices and of the
    arguments every shard reads whole, the operator on each device with a non-zero share,
    ``to_vdevice`` of those results back home, and ``concat`` in device order. Accelerators'
    shards are emitted before CPUs' and the home device's last among equals: TVM 0.27's device
    copies block the host, so a GPU launched before the CPU shard computes while the CPU does.
    When the next operator is cut the same way it takes the shards as they are, and the copies
    back and the concat nobody uses are removed.

    Parameters
    ----------
    func_name : str
        The function to rewrite.

    Notes
    -----
    Preconditions: vdevices declared (index 0 home), at least as many as the longest share list;
    every tensor the function starts from lives on the home device (``PlaceOperators`` with no
    assignment does that). Postconditions: the annotation is consumed (removed); every operator
    not annotated is unchanged; run ``RealizeVDevice`` afterwards.
    """

    def __init__(self, func_name: str = ENTRY_FUNC) -> None:
        self.func_name = func_name

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Rewrite ``mod[func_name]``; the input module is left unchanged."""
        func = function_named(mod, self.func_name, "RealizeOperatorSplits")
        raw = (func.attrs or {}).get(SPLITS_ATTR)
        if raw is None:
            return mod
        splits = json.loads(str(raw))
        vdevices = list(mod.global_infos.get("vdevice", []))
        needed = max((devices_used(s["shares"]) for s in splits.values()), default=1)
        if len(vdevices) < needed:
            raise ValueError(
                f"RealizeOperatorSplits: the shares use {needed} devices and the module declares "
                f"{len(vdevices)} vdevices; run DeclareVDevices with every device first"
            )
        out = _Splitter(mod, func, splits, vdevices).run(self.func_name)
        out = relax.transform.DeadCodeElimination([self.func_name])(out)
        out[self.func_name] = out[self.func_name].without_attr(SPLITS_ATTR)
        return out


@dataclass(frozen=True)
class _Shards:
    """An output kept as its shards (for a next operator cut the same way); ``None`` where a
    device's share is zero."""

    axis: int
    shares: tuple[int, ...]
    pieces: tuple[relax.Expr | None, ...]


@mutator
class _Splitter(PyExprMutator):
    def __init__(
        self, mod: IRModule, func: relax.Function, splits: Mapping[str, Any], vdevices: list
    ) -> None:
        super().__init__(mod)
        self.mod_ = mod
        self.vdevices: list[VDevice] = vdevices
        self.plan = {}
        for b in op_bindings(func):
            if b.node_id in splits:
                entry = splits[b.node_id]
                dim = split_dims(b.call).get(entry["dim"])
                if dim is None:
                    raise ValueError(
                        f"RealizeOperatorSplits: operator {b.node_id!r} cannot be cut along "
                        f"{entry['dim']!r}; annotate with AnnotateOperatorSplits"
                    )
                self.plan[b.call] = (b.var, dim, tuple(entry["shares"]))
        self.shards: dict[relax.Var, _Shards] = {}
        self.copies: dict[tuple[relax.Expr, int], relax.Expr] = {}

    def run(self, func_name: str) -> IRModule:
        gv = self.mod_.get_global_var(func_name)
        self.builder_.update_func(gv, self.visit_expr(self.mod_[gv]))
        return self.builder_.get()

    def _launch_order(self, devices: list[int]) -> list[int]:
        """Accelerators first, then CPUs; the home device last among equals (its shard runs on
        the thread that launches the others)."""
        return sorted(devices, key=lambda i: (_is_cpu(self.vdevices[i]), i == 0, i))

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        planned = self.plan.get(call)
        if planned is None or devices_used(planned[2]) == 1:
            return super().visit_call_(call)
        var, dim, shares = planned
        name = str(var.name)
        used = [i for i, n in enumerate(shares) if n]
        if len(used) == 1:  # the whole operator on one other device
            (i,) = used
            args = [
                self._to(self.visit_expr(a), i, f"{name}_in{k}") for k, a in enumerate(call.args)
            ]
            result = self.builder_.emit(_rebuild(call, args, dim, None), f"{name}_{i}")
            return relax.op.to_vdevice(result, self.vdevices[0])
        per_arg = [self._cut(a, k, dim, shares, f"{name}_in{k}") for k, a in enumerate(call.args)]
        bounds = _bounds(shares)
        pieces: list[relax.Expr | None] = [None] * len(shares)
        for i in self._launch_order(used):
            shard = _rebuild(call, [args[i] for args in per_arg], dim, bounds[i])
            pieces[i] = self.builder_.emit(shard, f"{name}_{i}")
        self.shards[var] = _Shards(dim.out_axis, shares, tuple(pieces))
        home = [
            p if i == 0 else self.builder_.emit(
                relax.op.to_vdevice(p, self.vdevices[0]), f"{name}_{i}_home"
            )
            for i, p in enumerate(pieces) if p is not None
        ]  # fmt: skip
        return relax.op.concat(home, axis=dim.out_axis)

    def _cut(
        self, arg: relax.Expr, k: int, dim: SplitDim, shares: tuple[int, ...], hint: str
    ) -> list[relax.Expr | None]:
        """Argument ``k``'s input to each device's shard (``None`` for a zero share); bindings
        named ``hint`` + ``_<device>`` / ``_dev``, so per-operator timings add up per operator."""
        axis = dim.in_axes[k]
        kept = self.shards.get(arg) if isinstance(arg, relax.Var) else None
        if (
            kept is not None and axis is not None and dim.window is None
            and kept.axis == axis and kept.shares == shares
        ):  # fmt: skip
            return list(kept.pieces)
        value = self.visit_expr(arg)
        if axis is None:
            return [self._to(value, i, hint) if n else None for i, n in enumerate(shares)]
        pieces: list[relax.Expr | None] = []
        for i, rows in enumerate(_bounds(shares)):
            if rows is None:
                pieces.append(None)
                continue
            start, stop = dim.input_slice(k, *rows)
            if isinstance(value, Constant) and 0 <= start <= stop <= value.value.shape[axis]:
                pieces.append(_constant_slice(value, axis, start, stop))
                continue
            sliced = relax.op.strided_slice(value, [axis], [start], [stop])
            pieces.append(self.builder_.emit(sliced, f"{hint}_{i}"))
        return [p if i == 0 or p is None else self._to(p, i, hint) for i, p in enumerate(pieces)]

    def _to(self, value: relax.Expr, device: int, hint: str) -> relax.Expr:
        """``value`` on vdevice ``device`` (one copy per value and device, shared by every shard
        reading it)."""
        if device == 0:
            return value
        if (value, device) not in self.copies:
            copy = relax.op.to_vdevice(value, self.vdevices[device])
            suffix = "_dev" if device == 1 else f"_dev{device}"
            self.copies[value, device] = self.builder_.emit(copy, hint + suffix)
        return self.copies[value, device]


def _bounds(shares: tuple[int, ...]) -> list[tuple[int, int] | None]:
    """Each device's output units ``[lo, hi)`` in device order, ``None`` for a zero share."""
    out, lo = [], 0
    for n in shares:
        out.append((lo, lo + n) if n else None)
        lo += n
    return out


def _constant_slice(value: Constant, axis: int, start: int, stop: int) -> Constant:
    """Units ``[start, stop)`` of constant ``value`` along ``axis``, sliced now: a shard's
    weights stay constants, which the build folds and lays out for its kernel's rule. (Sliced
    at run time, each half of a 3x3 convolution cut between two one-core CPU workers took as
    long as the whole convolution with constant weights, twice the same half's time.)"""
    data = value.value.numpy()
    index = [slice(None)] * data.ndim
    index[axis] = slice(start, stop)
    return relax.const(np.ascontiguousarray(data[tuple(index)]), str(data.dtype))


def _is_cpu(vdev: VDevice) -> bool:
    return str(vdev.target.kind.name) in ("llvm", "c")


def _rebuild(
    call: relax.Call, args: list[relax.Expr], dim: SplitDim, rows: tuple[int, int] | None
) -> relax.Expr:
    """``call`` on new arguments; a windowed cut of output rows ``rows`` gets its own padding."""
    if dim.window is None or rows is None:
        return relax.Call(call.op, args, call.attrs, call.ty_args)
    a = call.attrs
    _, _, before, after = dim.window.input_rows(*rows)
    padding = [before, int(a.padding[1]), after, int(a.padding[3])]
    return relax.op.nn.conv2d(
        args[0], args[1], a.strides, padding, a.dilation, a.groups, a.data_layout,
        a.kernel_layout, a.out_layout, a.out_dtype,
    )  # fmt: skip
