"""Attribute keys and names shared by the passes, the graph view and the build."""

ENTRY_FUNC = "main"
"""The name of the entry function of every model tvm-hetero loads."""

COPY_OP = "relax.to_vdevice"
HINT_OP = "relax.hint_on_device"
CALL_TIR_OP = "relax.call_tir"

SCHEDULE_ATTR = "tvm_hetero.schedule"
"""PrimFunc attribute naming the schedule a kernel got (``rule:matmul``, ``tuned``...)."""

COLUMNS_ATTR = "tvm_hetero.columns_operand"
"""PrimFunc attribute (``PackConstantWeights``): the index of the parameter the CPU matmul rule
takes as its tile's columns ``B`` (a 1x1 convolution over a small map: its weights, packed in
panels of output channels, rather than the image the output's innermost axis indexes)."""

OP_PATTERN_ATTR = "op_pattern"
"""PrimFunc attribute ``FuseOps`` reads a kernel's fusion pattern from (TVM's ``OpPatternKind``,
which its Python API does not name; the two values used here follow)."""
OUT_ELEMWISE_FUSABLE = 4
"""``kOutEWiseFusable``: a kernel that takes element-wise consumers but no producers."""
OPAQUE = 8
"""``kOpaque``: ``FuseOps`` fuses nothing with the kernel."""

SEPARABLE_POOL_ATTR = "tvm_hetero.separable_pool"
"""PrimFunc attribute of a max pool legalized as two passes (``LegalizeWithFastMath``): the
maximum along each input row's windows (block ``pool_rows``), then down the columns (block
``pool_columns``); the ``separable_pool`` CPU rule schedules it."""

WINOGRAD_ATTR = "tvm_hetero.winograd"
"""PrimFunc attribute of a transform of a Winograd convolution (``WinogradConvolutions``):
``input`` (a tile's window ``B^T d B``) or ``output`` (a tile's products ``A^T m A``); the
``winograd`` CPU rule schedules it."""

SPLITS_ATTR = "tvm_hetero.op_splits"
"""Relax function attribute: ``{op id: {"dim": name, "shares": [units on vdevice 0, 1, ...]}}``,
written by ``AnnotateOperatorSplits`` and realized by ``RealizeOperatorSplits``."""

UNIT_DEVICE_ATTR = "tvm_hetero.unit_device"
"""Relax function attribute of a unit (``OutlineDeviceUnits``): the index of its vdevice."""

STAGE_BOUNDARY = "tvm_hetero.stage_boundary"
"""Extern name of the hand-placed pipeline cut (:mod:`tvm_hetero.ir.markers`)."""
