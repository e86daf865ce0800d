"""Static memory planning per device: TVM's planner, kept from sharing storage across devices.

``StaticPlanBlockMemory`` in TVM 0.27 pools free storage by (storage scope, dtype) only, so in a
module with several vdevices a buffer freed on one device is handed to a tensor of another, and
the kernel that writes it fails its device check (seen with ``llvm:0`` / ``llvm:1``). Planning is
what CUDA graphs stand on (``RewriteCUDAGraph`` captures kernels whose buffers are planned), so
skipping it is no answer. The planner reads the scope from each ``builtin.alloc_tensor``; these
two passes wrap it: :class:`TagStorageByDevice` gives every allocation on device ``k > 0`` the
scope ``SCOPE@vdevice:k`` (so it pools only with its own device), and :class:`UntagStorage`
puts the scope back afterwards, on ``memory.alloc_storage`` and on the allocations the planner
left alone. Device 0 keeps its scope untouched: a one-device module passes through unchanged.
"""

from __future__ import annotations

import tvm
from tvm import relax, tirx

from tvm_hetero.ir.mutate import mutate_functions

TAG = "@vdevice:"
"""Joins a storage scope to its device index while the planner runs."""

_BUILTIN_ALLOC = "relax.builtin.alloc_tensor"
_ALLOC_STORAGE = "relax.memory.alloc_storage"


def _device_index(value: relax.Expr) -> int | None:
    """The integer of a device-index argument, or ``None`` when it is symbolic."""
    return int(value.value) if isinstance(value, tirx.IntImm) else None


def _with_scope(call: relax.Call, position: int, scope: str) -> relax.Call:
    args = list(call.args)
    args[position] = tvm.ir.StringImm(scope)
    return relax.Call(call.op, args, call.attrs, call.ty_args, call.span, ret_ty=call.ty)


@relax.expr_functor.mutator
class _Retag(relax.PyExprMutator):
    """Rewrites the scope argument of the storage calls of one function."""

    def __init__(self, mod: tvm.IRModule, tag: bool) -> None:
        super().__init__(mod)
        self.tag = tag

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        name = call.op.name
        if self.tag and name == _BUILTIN_ALLOC:
            device = _device_index(call.args[2])
            if device:  # 0 or symbolic: left as it is
                return _with_scope(call, 3, f"{call.args[3].value}{TAG}{device}")
        elif not self.tag and name in (_BUILTIN_ALLOC, _ALLOC_STORAGE):
            position = 3 if name == _BUILTIN_ALLOC else 2
            scope = str(call.args[position].value)
            if TAG in scope:
                return _with_scope(call, position, scope.split(TAG)[0])
        return call


def _retag(mod: tvm.IRModule, tag: bool) -> tvm.IRModule:
    return mutate_functions(mod, _Retag(mod, tag))


@tvm.transform.module_pass(opt_level=0, name="TagStorageByDevice")
class TagStorageByDevice:
    """Give every ``builtin.alloc_tensor`` on a device other than 0 a scope of its own device.

    Examples
    --------
    ``R.builtin.alloc_tensor(R.shape([4]), "float32", R.prim_value(1), "global")`` becomes
    ``R.builtin.alloc_tensor(R.shape([4]), "float32", R.prim_value(1), "global@vdevice:1")``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Tag the scopes (a module with one vdevice comes back unchanged)."""
        if len(mod.global_infos.get("vdevice", [])) < 2:
            return mod
        return _retag(mod, tag=True)


@tvm.transform.module_pass(opt_level=0, name="UntagStorage")
class UntagStorage:
    """Undo :class:`TagStorageByDevice` on ``memory.alloc_storage`` and ``builtin.alloc_tensor``."""

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Put each tagged scope back as it was."""
        if len(mod.global_infos.get("vdevice", [])) < 2:
            return mod
        return _retag(mod, tag=False)
