"""IR passes: plan in, IR out. One pass per file."""

from tvm_hetero.passes.annotate_operator_splits import AnnotateOperatorSplits
from tvm_hetero.passes.blocked_copies_as_transposes import BlockedCopiesAsTransposes
from tvm_hetero.passes.carve_pipeline_stages import CarvePipelineStages
from tvm_hetero.passes.constants_on_cpus_uncopied import ConstantsOnCPUsUncopied
from tvm_hetero.passes.constants_to_kernel_devices import ConstantsToKernelDevices
from tvm_hetero.passes.conv1d_as_matmul import Conv1dAsMatmul
from tvm_hetero.passes.convolution_taps_by_region import ConvolutionTapsByRegion
from tvm_hetero.passes.crop_convolution_taps import CropConvolutionTaps
from tvm_hetero.passes.declare_vdevices import DeclareVDevices
from tvm_hetero.passes.depthwise_columns_after import DepthwiseColumnsAfter
from tvm_hetero.passes.empty_tensors_as_constants import EmptyTensorsAsConstants
from tvm_hetero.passes.exact_ceil_pools import ExactCeilPools
from tvm_hetero.passes.fold_constant_kernels import FoldConstantKernels
from tvm_hetero.passes.fold_constant_weights import FoldConstantWeights
from tvm_hetero.passes.gathered_weights_in_place import GatheredWeightsInPlace
from tvm_hetero.passes.grid_sample_taps import GridSampleTaps
from tvm_hetero.passes.grouped_convolutions_by_group import GroupedConvolutionsByGroup
from tvm_hetero.passes.guarded_lanes_as_masked_stores import GuardedLanesAsMaskedStores
from tvm_hetero.passes.guarded_reads_as_vectors import GuardedReadsAsVectors
from tvm_hetero.passes.infer_kernel_vdevices import InferKernelVDevices
from tvm_hetero.passes.legalize_with_fast_math import LegalizeWithFastMath
from tvm_hetero.passes.merge_parallel_convolutions import MergeParallelConvolutions
from tvm_hetero.passes.outline_device_units import OutlineDeviceUnits
from tvm_hetero.passes.outline_subgraph_units import OutlineSubgraphUnits
from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
from tvm_hetero.passes.pad_convolution_channels import PadConvolutionChannels
from tvm_hetero.passes.pad_convolution_outputs import PadConvolutionOutputs
from tvm_hetero.passes.pad_matmul_columns import PadMatmulColumns
from tvm_hetero.passes.partition_spatial_tiles import PartitionSpatialTiles
from tvm_hetero.passes.place_operators import PlaceOperators
from tvm_hetero.passes.prefetch_next_panels import PrefetchNextPanels
from tvm_hetero.passes.prefetch_panel_blocks import PrefetchPanelBlocks
from tvm_hetero.passes.realize_operator_splits import RealizeOperatorSplits
from tvm_hetero.passes.restore_kernel_targets import RestoreKernelTargets
from tvm_hetero.passes.separable_resize import SeparableResize
from tvm_hetero.passes.stack_loop_buffers import StackLoopBuffers
from tvm_hetero.passes.strided_loads_as_shuffles import StridedLoadsAsShuffles
from tvm_hetero.passes.strip_stage_boundaries import StripStageBoundaries
from tvm_hetero.passes.subsample_strided_pointwise import SubsampleStridedPointwise
from tvm_hetero.passes.temporal_convolutions_as_2d import TemporalConvolutionsAs2D
from tvm_hetero.passes.transposed_convolutions_as_pointwise import (
    TransposedConvolutionsAsPointwise,
)
from tvm_hetero.passes.winograd_convolutions import WinogradConvolutions
from tvm_hetero.passes.wrap_indices import WrapIndices

__all__ = [
    "AnnotateOperatorSplits",
    "BlockedCopiesAsTransposes",
    "CarvePipelineStages",
    "ConstantsOnCPUsUncopied",
    "ConstantsToKernelDevices",
    "Conv1dAsMatmul",
    "ConvolutionTapsByRegion",
    "CropConvolutionTaps",
    "DeclareVDevices",
    "DepthwiseColumnsAfter",
    "EmptyTensorsAsConstants",
    "ExactCeilPools",
    "FoldConstantKernels",
    "FoldConstantWeights",
    "GatheredWeightsInPlace",
    "GridSampleTaps",
    "GroupedConvolutionsByGroup",
    "GuardedLanesAsMaskedStores",
    "GuardedReadsAsVectors",
    "InferKernelVDevices",
    "LegalizeWithFastMath",
    "MergeParallelConvolutions",
    "OutlineDeviceUnits",
    "OutlineSubgraphUnits",
    "PackConstantWeights",
    "PadConvolutionChannels",
    "PadConvolutionOutputs",
    "PadMatmulColumns",
    "PartitionSpatialTiles",
    "PlaceOperators",
    "PrefetchNextPanels",
    "PrefetchPanelBlocks",
    "RealizeOperatorSplits",
    "RestoreKernelTargets",
    "SeparableResize",
    "StackLoopBuffers",
    "StridedLoadsAsShuffles",
    "StripStageBoundaries",
    "SubsampleStridedPointwise",
    "TemporalConvolutionsAs2D",
    "TransposedConvolutionsAsPointwise",
    "WinogradConvolutions",
    "WrapIndices",
]
