"""RealizeOperatorSplits: cut each annotated operator into a shard per device."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import VDevice
from tvm_hetero.ir.attrs import ENTRY_FUNC, SPLITS_ATTR
from tvm_hetero.ir.bindings import function_named, op_bindings
from tvm_hetero.ir.split_dims import SplitDim, split_dims


@tvm.transform.module_pass(opt_level=0, name="RealizeOperatorSplits")
class RealizeOperatorSplits:
    """Rewrite each operator annotated by ``AnnotateOperatorSplits`` into two shards.

    An operator cut along ``dim`` with shares ``(n0, n1)`` becomes: slices of its cut arguments
    (``strided_slice``; a convolution's row slices overlap by the halo and get their own
    padding), ``to_vdevice`` of the second device's slices and of the arguments both shards read
    whole, the operator on each device, ``to_vdevice`` of the second result back home, and
    ``concat``. The accelerator's shard is emitted before the CPU's (the second device's first
    when both are CPUs): TVM 0.27's device copies block the host, so a GPU launched before the CPU
    shard computes while the CPU does. When the next operator is cut the same way it takes the
    shards as they are, and the copy back and concat nobody uses are removed.

    Parameters
    ----------
    func_name : str
        The function to rewrite.

    Notes
    -----
    Preconditions: vdevices declared (index 0 home, index 1 the other device); every tensor the
    function starts from lives on the home device (``PlaceOperators`` with no assignment does
    that). Postconditions: the annotation is consumed (removed); every operator not annotated is
    unchanged; run ``RealizeVDevice`` afterwards.
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
        if len(vdevices) < 2 and any(s["shares"][1] for s in splits.values()):
            raise ValueError(
                "RealizeOperatorSplits: the module declares fewer than two vdevices; "
                "run DeclareVDevices with the home device and the other one first"
            )
        out = _Splitter(mod, func, splits, vdevices).run(self.func_name)
        out = relax.transform.DeadCodeElimination([self.func_name])(out)
        out[self.func_name] = out[self.func_name].without_attr(SPLITS_ATTR)
        return out


@dataclass(frozen=True)
class _Shards:
    """An output kept as two shards (for a next operator cut the same way)."""

    axis: int
    shares: tuple[int, int]
    home: relax.Expr
    other: relax.Expr


@mutator
class _Splitter(PyExprMutator):
    def __init__(
        self, mod: IRModule, func: relax.Function, splits: Mapping[str, Any], vdevices: list
    ) -> None:
        super().__init__(mod)
        self.mod_ = mod
        self.home: VDevice = vdevices[0]
        self.other: VDevice | None = vdevices[1] if len(vdevices) > 1 else None
        # the accelerator's shard goes first: its launch returns at once, the CPU's does not
        home_first = self.other is not None and _is_cpu(self.other) and not _is_cpu(self.home)
        self.order = -1 if home_first else 1
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
        self.copies: dict[relax.Expr, relax.Expr] = {}

    def run(self, func_name: str) -> IRModule:
        gv = self.mod_.get_global_var(func_name)
        self.builder_.update_func(gv, self.visit_expr(self.mod_[gv]))
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        planned = self.plan.get(call)
        if planned is None or planned[2][1] == 0:
            return super().visit_call_(call)
        var, dim, (n0, n1) = planned
        name = str(var.name)
        if n0 == 0:  # the whole operator on the other device
            args = [
                self._to_other(self.visit_expr(a), f"{name}_in{k}_dev")
                for k, a in enumerate(call.args)
            ]
            result = self.builder_.emit(_rebuild(call, args, dim, None), f"{name}_1")
            return relax.op.to_vdevice(result, self.home)
        home_args, other_args = [], []
        for k, arg in enumerate(call.args):
            home, other = self._cut(arg, k, dim, (n0, n1), f"{name}_in{k}")
            home_args.append(home)
            other_args.append(other)
        shards = [
            (_rebuild(call, other_args, dim, (n0, dim.extent)), f"{name}_1"),
            (_rebuild(call, home_args, dim, (0, n0)), f"{name}_0"),
        ]
        emitted = {hint: self.builder_.emit(expr, hint) for expr, hint in shards[:: self.order]}
        home, other = emitted[f"{name}_0"], emitted[f"{name}_1"]
        self.shards[var] = _Shards(dim.out_axis, (n0, n1), home, other)
        back = self.builder_.emit(relax.op.to_vdevice(other, self.home), f"{name}_1_home")
        return relax.op.concat([home, back], axis=dim.out_axis)

    def _cut(
        self, arg: relax.Expr, k: int, dim: SplitDim, shares: tuple[int, int], hint: str
    ) -> tuple[relax.Expr, relax.Expr]:
        """Argument ``k``'s input to the home shard and to the other shard (bindings named
        ``hint`` + ``_0`` / ``_1`` / ``_dev``, so per-operator timings add up per operator)."""
        axis = dim.in_axes[k]
        kept = self.shards.get(arg) if isinstance(arg, relax.Var) else None
        if (
            kept is not None and axis is not None and dim.window is None
            and kept.axis == axis and kept.shares == shares
        ):  # fmt: skip
            return kept.home, kept.other
        value = self.visit_expr(arg)
        if axis is None:
            return value, self._to_other(value, f"{hint}_dev")
        n0, _ = shares
        pieces = []
        for i, (lo, hi) in enumerate(((0, n0), (n0, dim.extent))):
            start, stop = dim.input_slice(k, lo, hi)
            sliced = relax.op.strided_slice(value, [axis], [start], [stop])
            pieces.append(self.builder_.emit(sliced, f"{hint}_{i}"))
        return pieces[0], self._to_other(pieces[1], f"{hint}_dev")

    def _to_other(self, value: relax.Expr, hint: str) -> relax.Expr:
        """``value`` on the other device (one copy per value, shared by every shard reading it)."""
        if value not in self.copies:
            copy = relax.op.to_vdevice(value, self.other)
            self.copies[value] = self.builder_.emit(copy, hint)
        return self.copies[value]


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
