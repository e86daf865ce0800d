"""IR passes: plan in, IR out. One pass per file."""

from tvm_hetero.passes.declare_vdevices import DeclareVDevices
from tvm_hetero.passes.infer_kernel_vdevices import InferKernelVDevices
from tvm_hetero.passes.place_operators import PlaceOperators
from tvm_hetero.passes.restore_kernel_targets import RestoreKernelTargets

__all__ = ["DeclareVDevices", "InferKernelVDevices", "PlaceOperators", "RestoreKernelTargets"]
