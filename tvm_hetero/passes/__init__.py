"""IR passes: plan in, IR out. One pass per file."""

from tvm_hetero.passes.declare_vdevices import DeclareVDevices
from tvm_hetero.passes.place_operators import PlaceOperators

__all__ = ["DeclareVDevices", "PlaceOperators"]
