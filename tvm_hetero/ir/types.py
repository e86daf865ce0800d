"""Plain-Python views of Relax types: shapes, dtypes and byte sizes (symbolic dims kept as text)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from tvm_hetero._compat import TensorType, TupleType
from tvm_hetero.ir.bindings import calls_op

Dim = int | str


@dataclass(frozen=True)
class TensorInfo:
    """Shape, dtype and vdevice of one tensor; a symbolic dimension is kept as its text."""

    shape: tuple[Dim, ...] | None
    dtype: str
    vdevice: str | None = None

    @property
    def static(self) -> bool:
        """``True`` when every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        """Number of elements, or ``None`` for a symbolic shape."""
        return math.prod(self.shape) if self.static else None  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int | None:
        """Size in bytes, or ``None`` for a symbolic shape."""
        n = self.numel
        return None if n is None else n * itemsize(self.dtype)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"shape": list(self.shape or []), "dtype": self.dtype, "vdevice": self.vdevice}


def itemsize(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return int(np.dtype(dtype).itemsize) if dtype else 0


def _dim(value: tvm.ir.PrimExpr) -> Dim:
    return int(value.value) if isinstance(value, tvm.tirx.IntImm) else str(value)


def tensor_infos(ty: Any) -> list[TensorInfo]:
    """Flatten a Relax type into the tensors it holds (tuples are flattened in order)."""
    if isinstance(ty, TensorType):
        shape = None
        if ty.shape is not None and isinstance(ty.shape, relax.ShapeExpr):
            shape = tuple(_dim(v) for v in ty.shape.values)
        vdev = None
        if ty.vdevice is not None:
            vdev = f"{ty.vdevice.target.kind.name}:{int(ty.vdevice.vdevice_id)}"
        return [TensorInfo(shape, str(ty.dtype), vdev)]
    if isinstance(ty, TupleType):
        return [t for field in ty.fields for t in tensor_infos(field)]
    return []


def attrs_to_dict(attrs: Any) -> dict[str, Any]:
    """Op attributes as plain Python values (``{}`` when the op has none)."""
    if attrs is None:
        return {}
    out = {}
    for name in dir(attrs):
        if name.startswith("_") or name in ("id_", "is_", "same_as"):
            continue
        value = getattr(attrs, name)
        if callable(value):
            continue
        out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tvm.tirx.IntImm | tvm.tirx.FloatImm):
        return value.value
    if hasattr(value, "__len__") and not isinstance(value, dict):
        try:
            return [_plain(v) for v in value]
        except TypeError:
            pass
    return str(value)


def static_shape(ty: Any) -> list[int] | None:
    """``ty``'s shape as integers, or None where it has none or a symbolic dimension."""
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return None
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def cpu_op_with_static_shapes(call: Any, op: str, layouts: tuple, mod: tvm.IRModule) -> bool:
    """Whether ``call`` is ``op`` with ``(data, kernel, out)`` ``layouts``, its two operands
    and its output of static shapes, on a CPU vdevice (what the convolution rewrites take)."""
    if not calls_op(call, op):
        return False
    a = call.attrs
    if (a.data_layout, a.kernel_layout, a.out_layout) != layouts:
        return False
    shapes = [call.args[0].ty.shape, call.args[1].ty.shape, call.ty.shape]
    if any(s is None or not all(isinstance(v, tvm.tirx.IntImm) for v in s.values) for s in shapes):
        return False
    return cpu_tensor_target(call.ty, mod) is not None


def cpu_tensor_target(ty: Any, mod: tvm.IRModule) -> tvm.target.Target | None:
    """The CPU target a tensor of type ``ty`` lives on: its vdevice's, or the home vdevice's
    (the first declared) when it has none, as in a single-device module; ``None`` for another
    kind of device, a module that declares no vdevices, or a tensor of unknown shape."""
    if not isinstance(ty, TensorType) or ty.shape is None:
        return None
    vdevices = list(mod.global_infos.get("vdevice", []))
    vdevice = ty.vdevice if ty.vdevice is not None else (vdevices[0] if vdevices else None)
    if vdevice is None or vdevice.target.kind.name != "llvm":
        return None
    return vdevice.target
