"""PlaceOperators: run each operator on its planned device, inserting ``R.to_vdevice`` copies."""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import TensorType, TupleType, VDevice, vdevice_equal
from tvm_hetero.ir.attrs import CALL_TIR_OP, COPY_OP, ENTRY_FUNC, HINT_OP
from tvm_hetero.ir.bindings import calls_op, function_named, op_bindings

_DEVICE_OPS = (COPY_OP, HINT_OP)


@tvm.transform.module_pass(opt_level=0, name="PlaceOperators")
class PlaceOperators:
    """Place operators on devices and copy tensors where data crosses devices.

    Parameters
    ----------
    assignment : Mapping[str, int]
        Op node id (see :mod:`tvm_hetero.ir.bindings`) -> index into the module's vdevice list.
        Unlisted operators run on device 0.
    func_name : str
        The function to rewrite.

    Notes
    -----
    Preconditions: vdevices are declared (``DeclareVDevices``); the function has static or
    symbolic tensor types. Postconditions: function parameters live on device 0; every operator
    argument lives on its operator's device (copies are shared between consumers); the result is
    copied back to device 0. Run ``RealizeVDevice`` afterwards to annotate the remaining bindings.
    """

    def __init__(self, assignment: Mapping[str, int], func_name: str = ENTRY_FUNC) -> None:
        self.assignment = dict(assignment)
        self.func_name = func_name

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Rewrite ``mod[func_name]``; the input module is left unchanged."""
        vdevices = list(mod.global_infos.get("vdevice", []))
        if not vdevices:
            raise ValueError(
                "PlaceOperators: the module declares no vdevices; run DeclareVDevices first"
            )
        bad = {k: v for k, v in self.assignment.items() if not 0 <= v < len(vdevices)}
        if bad:
            raise ValueError(
                f"PlaceOperators: device indices {bad} out of range; the module declares "
                f"{len(vdevices)} vdevice(s)"
            )
        func = function_named(mod, self.func_name, "PlaceOperators")
        ids = {b.node_id: b.call for b in op_bindings(func)}
        unknown = sorted(set(self.assignment) - set(ids))
        if unknown:
            raise ValueError(
                f"PlaceOperators: unknown operator id(s) {unknown[:5]}; see OpGraph ids"
            )
        call_device = {call: vdevices[self.assignment.get(node, 0)] for node, call in ids.items()}
        return _Placer(mod, call_device, vdevices[0]).run(self.func_name)


def _on(ty: relax.Type, vdev: VDevice) -> relax.Type:
    if isinstance(ty, TensorType):
        if ty.shape is not None:
            return TensorType(ty.shape, ty.dtype, vdev)
        return TensorType(None, ty.dtype, vdev, ty.ndim)
    if isinstance(ty, TupleType):
        return relax.TupleType([_on(f, vdev) for f in ty.fields])
    return ty


@mutator
class _Placer(PyExprMutator):
    def __init__(self, mod: IRModule, call_device: Mapping[relax.Call, VDevice], home: VDevice):
        super().__init__(mod)
        self.mod_, self.call_device, self.home = mod, call_device, home
        self.copies: dict[tuple[relax.Expr, str], relax.Expr] = {}

    def run(self, func_name: str) -> IRModule:
        gv = self.mod_.get_global_var(func_name)
        func = self.mod_[gv]
        params = [relax.Var(p.name, _on(p.ty, self.home)) for p in func.params]
        for old, new in zip(func.params, params, strict=True):
            self.set_var_remap(old, new)
        body = self.visit_expr(func.body)
        body = self.builder_.normalize(self._result_home(body))
        new_func = relax.Function(params, body, None, func.is_pure, func.attrs, func.span)
        self.builder_.update_func(gv, new_func)
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        vdev = self.call_device.get(call)
        if vdev is None or (isinstance(call.op, tvm.ir.Op) and call.op.name in _DEVICE_OPS):
            return super().visit_call_(call)
        # Visit the arguments, not the call: normalizing the call before its arguments are moved
        # would fail device inference (operands on two devices).
        args = [self._move(self.visit_expr(a), vdev) for a in call.args]
        ty_args = call.ty_args
        if calls_op(call, CALL_TIR_OP):
            ty_args = [_on(t, vdev) for t in ty_args]
        return relax.Call(call.op, args, call.attrs, ty_args)

    def _move(self, expr: relax.Expr, vdev: VDevice) -> relax.Expr:
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self._move(f, vdev) for f in expr.fields])
        ty = expr.ty
        if not isinstance(ty, TensorType):
            return expr
        # An unannotated tensor (a weight constant, a freshly created tensor) is on the home device.
        current = ty.vdevice if ty.vdevice is not None else self.home
        if vdevice_equal(current, vdev):
            return expr
        key = (expr, f"{vdev.target.kind.name}:{int(vdev.vdevice_id)}")
        if key not in self.copies:
            self.copies[key] = self.builder_.emit(relax.op.to_vdevice(expr, vdev))
        return self.copies[key]

    def _result_home(self, body: relax.SeqExpr) -> relax.Expr:
        """Copy the function result back to the home device when it ends elsewhere."""
        result = body.body
        if not _needs_home(result.ty, self.home):
            return body
        self.builder_._begin_binding_block()
        moved = self._home_expr(result)
        block = self.builder_._end_block()
        return relax.SeqExpr([*body.blocks, block], moved)

    def _home_expr(self, expr: relax.Expr) -> relax.Expr:
        ty = expr.ty
        if isinstance(ty, TupleType):
            items = [
                self._home_expr(self.builder_.emit(relax.TupleGetItem(expr, i)))
                for i in range(len(ty.fields))
            ]
            return self.builder_.emit(relax.Tuple(items))
        if _needs_home(ty, self.home):
            return self.builder_.emit(relax.op.to_vdevice(expr, self.home))
        return expr


def _needs_home(ty: relax.Type, home: VDevice) -> bool:
    if isinstance(ty, TupleType):
        return any(_needs_home(f, home) for f in ty.fields)
    return (
        isinstance(ty, TensorType)
        and ty.vdevice is not None
        and not vdevice_equal(ty.vdevice, home)
    )
