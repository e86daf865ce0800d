"""Named pass pipelines: the one place passes are ordered.

Each pipeline is data (a list of steps whose arguments may name pipeline parameters as
``$param``); ``ci/gen_catalog.py`` writes them to ``passes/pipelines/*.toml`` for review, and
:func:`get_pipeline` turns one into a ``tvm.transform.Sequential``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import relax

from tvm_hetero.passes import (
    AnnotateOperatorSplits,
    CarvePipelineStages,
    ConstantsOnCPUsUncopied,
    ConstantsToKernelDevices,
    Conv1dAsMatmul,
    DeclareVDevices,
    DepthwiseColumnsAfter,
    ExactCeilPools,
    FoldConstantKernels,
    GatheredWeightsInPlace,
    GridSampleTaps,
    GroupedConvolutionsByGroup,
    InferKernelVDevices,
    LegalizeWithFastMath,
    MergeParallelConvolutions,
    OutlineDeviceUnits,
    OutlineSubgraphUnits,
    PackConstantWeights,
    PadConvolutionChannels,
    PadConvolutionOutputs,
    PadMatmulColumns,
    PartitionSpatialTiles,
    PlaceOperators,
    RealizeOperatorSplits,
    RestoreKernelTargets,
    SeparableResize,
    StripStageBoundaries,
    SubsampleStridedPointwise,
    TemporalConvolutionsAs2D,
    TransposedConvolutionsAsPointwise,
    WinogradConvolutions,
    WrapIndices,
)

PASSES: dict[str, Callable[..., tvm.transform.Pass]] = {
    # tvm-hetero's own passes
    "DeclareVDevices": DeclareVDevices,
    "PlaceOperators": PlaceOperators,
    "AnnotateOperatorSplits": AnnotateOperatorSplits,
    "RealizeOperatorSplits": RealizeOperatorSplits,
    "InferKernelVDevices": InferKernelVDevices,
    "LegalizeWithFastMath": LegalizeWithFastMath,
    "RestoreKernelTargets": RestoreKernelTargets,
    "PackConstantWeights": PackConstantWeights,
    "PadConvolutionChannels": PadConvolutionChannels,
    "PadConvolutionOutputs": PadConvolutionOutputs,
    "Conv1dAsMatmul": Conv1dAsMatmul,
    "GroupedConvolutionsByGroup": GroupedConvolutionsByGroup,
    "PadMatmulColumns": PadMatmulColumns,
    "SeparableResize": SeparableResize,
    "GridSampleTaps": GridSampleTaps,
    "GatheredWeightsInPlace": GatheredWeightsInPlace,
    "ExactCeilPools": ExactCeilPools,
    "ConstantsOnCPUsUncopied": ConstantsOnCPUsUncopied,
    "ConstantsToKernelDevices": ConstantsToKernelDevices,
    "FoldConstantKernels": FoldConstantKernels,
    "WinogradConvolutions": WinogradConvolutions,
    "TemporalConvolutionsAs2D": TemporalConvolutionsAs2D,
    "TransposedConvolutionsAsPointwise": TransposedConvolutionsAsPointwise,
    "DepthwiseColumnsAfter": DepthwiseColumnsAfter,
    "MergeParallelConvolutions": MergeParallelConvolutions,
    "SubsampleStridedPointwise": SubsampleStridedPointwise,
    "OutlineDeviceUnits": OutlineDeviceUnits,
    "OutlineSubgraphUnits": OutlineSubgraphUnits,
    "CarvePipelineStages": CarvePipelineStages,
    "StripStageBoundaries": StripStageBoundaries,
    "WrapIndices": WrapIndices,
    "PartitionSpatialTiles": PartitionSpatialTiles,
    # TVM passes the pipelines use
    "RealizeVDevice": relax.transform.RealizeVDevice,
    "LegalizeOps": relax.transform.LegalizeOps,
    "AnnotateTIROpPattern": relax.transform.AnnotateTIROpPattern,
    "FuseOps": relax.transform.FuseOps,
    "FuseTIR": relax.transform.FuseTIR,
    "DeadCodeElimination": relax.transform.DeadCodeElimination,
    "FoldConstant": relax.transform.FoldConstant,
    "CanonicalizeBindings": relax.transform.CanonicalizeBindings,
}
OWN_PASSES = (
    "DeclareVDevices",
    "PlaceOperators",
    "AnnotateOperatorSplits",
    "RealizeOperatorSplits",
    "InferKernelVDevices",
    "LegalizeWithFastMath",
    "RestoreKernelTargets",
    "PackConstantWeights",
    "TemporalConvolutionsAs2D",
    "TransposedConvolutionsAsPointwise",
    "PadConvolutionChannels",
    "PadConvolutionOutputs",
    "Conv1dAsMatmul",
    "GroupedConvolutionsByGroup",
    "PadMatmulColumns",
    "SeparableResize",
    "GridSampleTaps",
    "GatheredWeightsInPlace",
    "ExactCeilPools",
    "ConstantsOnCPUsUncopied",
    "ConstantsToKernelDevices",
    "FoldConstantKernels",
    "DepthwiseColumnsAfter",
    "MergeParallelConvolutions",
    "SubsampleStridedPointwise",
    "OutlineDeviceUnits",
    "OutlineSubgraphUnits",
    "CarvePipelineStages",
    "StripStageBoundaries",
    "PartitionSpatialTiles",
    "WrapIndices",
)


@dataclass(frozen=True)
class Step:
    """One pass of a pipeline; ``args`` values starting with ``$`` name pipeline parameters."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pipeline:
    """A named, ordered list of passes."""

    name: str
    description: str
    params: tuple[str, ...]
    steps: tuple[Step, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    """Values of the parameters a caller may leave out."""

    def to_dict(self) -> dict[str, Any]:
        """TOML-friendly form."""
        return {
            "name": self.name,
            "description": self.description,
            "params": list(self.params),
            **({"defaults": self.defaults} if self.defaults else {}),
            "passes": [
                {"name": s.name, **({"args": s.args} if s.args else {})} for s in self.steps
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pipeline:
        """Parse the TOML form."""
        steps = tuple(Step(p["name"], dict(p.get("args", {}))) for p in data["passes"])
        unknown = [s.name for s in steps if s.name not in PASSES]
        if unknown:
            raise ValueError(
                f"pipeline {data['name']!r}: unknown pass(es) {unknown}; known: {sorted(PASSES)}"
            )
        return cls(
            data["name"], data.get("description", ""), tuple(data.get("params", [])), steps,
            dict(data.get("defaults", {})),
        )  # fmt: skip

    def split(self, step: str) -> tuple[Pipeline, Pipeline]:
        """The steps before the first ``step`` and the rest, each with the parameters (and
        defaults) its steps name: to look at the module between them."""
        at = [s.name for s in self.steps].index(step)
        halves = []
        for name, steps in ((f"{self.name}[:{step}]", self.steps[:at]),
                            (f"{self.name}[{step}:]", self.steps[at:])):  # fmt: skip
            named = {_param_name(v) for s in steps for v in s.args.values()} - {None}
            params = tuple(p for p in self.params if p in named)
            defaults = {k: v for k, v in self.defaults.items() if k in named}
            halves.append(Pipeline(name, self.description, params, steps, defaults))
        return halves[0], halves[1]

    def build(self, **params: Any) -> tvm.transform.Sequential:
        """Instantiate the passes with ``params`` bound (those left out take their defaults)."""
        params = {**self.defaults, **params}
        missing = sorted(set(self.params) - set(params))
        extra = sorted(set(params) - set(self.params))
        if missing or extra:
            raise ValueError(
                f"pipeline {self.name!r} takes parameters {list(self.params)}; "
                f"missing {missing}, unexpected {extra}"
            )
        passes = [
            PASSES[s.name](**{k: _bind(v, params) for k, v in s.args.items()}) for s in self.steps
        ]
        return tvm.transform.Sequential(passes, name=self.name)


def _param_name(value: Any) -> str | None:
    """The pipeline parameter a step argument names (``"$winograd_tiles"``), if any."""
    return value[1:] if isinstance(value, str) and value.startswith("$") else None


def _bind(value: Any, params: dict[str, Any]) -> Any:
    name = _param_name(value)
    return value if name is None else params[name]


LOWER_STEPS = (
    Step("StripStageBoundaries"),
    Step("WrapIndices"),
    Step("RealizeVDevice"),
    Step("MergeParallelConvolutions"),
    Step("TransposedConvolutionsAsPointwise"),
    Step("WinogradConvolutions", {"tiles": "$winograd_tiles"}),
    Step("GroupedConvolutionsByGroup"),
    Step("SubsampleStridedPointwise"),
    Step("DepthwiseColumnsAfter"),
    Step("ExactCeilPools"),
    Step("TemporalConvolutionsAs2D"),
    Step("PadConvolutionChannels"),
    Step("PadConvolutionOutputs"),
    Step("Conv1dAsMatmul"),
    Step("SeparableResize"),
    Step("GridSampleTaps"),
    Step("GatheredWeightsInPlace"),
    Step("PadMatmulColumns"),
    Step("LegalizeWithFastMath"),
    Step("InferKernelVDevices"),
    Step("FoldConstantKernels"),
    Step("FoldConstant"),
    Step("CanonicalizeBindings"),
    Step("AnnotateTIROpPattern"),
    Step("FuseOps"),
    Step("FuseTIR"),
    Step("RestoreKernelTargets"),
    Step("PackConstantWeights"),
    Step("DeadCodeElimination"),
)
"""``multi_device_lower``'s passes (its description says what each does)."""

FUSION_ONLY = frozenset({"CanonicalizeBindings", "AnnotateTIROpPattern", "FuseOps", "FuseTIR"})
"""Passes of ``multi_device_lower`` its unfused twin leaves out: fusion, and the folding of
aliases (a rewrite that returns a value it emitted leaves the operator's binding an alias,
whose name the per-operator profile files the kernels under)."""

UNFUSED_AFTER = {
    "RealizeVDevice": (Step("ConstantsOnCPUsUncopied"),),
    "PackConstantWeights": (Step("ConstantsToKernelDevices"),),
}
"""The passes only the unfused build runs, each after the one it follows."""


def unfused_steps(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """``steps`` without :data:`FUSION_ONLY`, with :data:`UNFUSED_AFTER`: every rewrite of
    the fused build, so that per-operator profiles time the kernels it runs."""
    return tuple(
        t for s in steps if s.name not in FUSION_ONLY for t in (s, *UNFUSED_AFTER.get(s.name, ()))
    )


PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in [
        Pipeline(
            "manual_placement",
            "Declare the devices, run each operator on its planned device with to_vdevice copies "
            "where data crosses devices, and propagate vdevices to every binding.",
            ("vdevices", "assignment"),
            (
                Step("DeclareVDevices", {"vdevices": "$vdevices"}),
                Step("PlaceOperators", {"assignment": "$assignment"}),
                Step("RealizeVDevice"),
            ),
        ),
        Pipeline(
            "operator_splits",
            "Declare the two devices, annotate each key operator with its partition dimension "
            "and device shares (EOP), keep everything else on the home device, cut the annotated "
            "operators into a shard per device (slice, to_vdevice, operator, to_vdevice, concat; "
            "shards kept between operators cut alike), and propagate vdevices.",
            ("vdevices", "splits"),
            (
                Step("DeclareVDevices", {"vdevices": "$vdevices"}),
                Step("AnnotateOperatorSplits", {"splits": "$splits"}),
                Step("PlaceOperators", {"assignment": {}}),
                Step("RealizeOperatorSplits"),
                Step("RealizeVDevice"),
            ),
        ),
        Pipeline(
            "spatial_tiles",
            "Declare the devices, keep every tensor on the home device, then compute each planned "
            "segment of layers as spatial tiles on all devices (FlexPie: halo computed inside a "
            "segment, overlapping parts exchanged device to device between segments, the result "
            "gathered home), and propagate vdevices.",
            ("vdevices", "segments"),
            (
                Step("DeclareVDevices", {"vdevices": "$vdevices"}),
                Step("PlaceOperators", {"assignment": {}}),
                Step("PartitionSpatialTiles", {"segments": "$segments"}),
                Step("RealizeVDevice"),
            ),
        ),
        Pipeline(
            "device_units",
            "Cut a placed main into units, one function per run of bindings on one device "
            "(cut where a tensor arrives from or leaves for another device), joined by "
            "to_vdevice copies: what the concurrent runtime runs, one worker per device.",
            (),
            (Step("RealizeVDevice"), Step("OutlineDeviceUnits")),
        ),
        Pipeline(
            "subgraph_units",
            "Cut a placed main into DUET's units, one function per planned subgraph (a branch of "
            "a multi-path phase, or a sequential phase) on its device, joined by to_vdevice "
            "copies: two subgraphs on one device stay two units the runtime starts apart.",
            ("subgraphs",),
            (Step("RealizeVDevice"), Step("OutlineSubgraphUnits", {"subgraphs": "$subgraphs"})),
        ),
        Pipeline(
            "pipeline_stages",
            "Cut a placed main into EdgePipe's stages, one function per planned run of layers "
            "on its device (hand-placed stage_boundary marks become aliases), joined by "
            "to_vdevice copies: what the pipelined runtime runs, microbatch after microbatch.",
            ("stages",),
            (Step("RealizeVDevice"), Step("CarvePipelineStages", {"stages": "$stages"})),
        ),
        Pipeline(
            "multi_device_lower",
            "Lower a module whose bindings carry vdevices: drop stage-boundary marks, make every "
            "indexing op wrap its ids (none reads outside its table), merge sums of "
            "convolutions of one input (and its batch normalization) into one convolution, "
            "compute CPU transposed convolutions whose window is their stride as 1x1 "
            "convolutions to each output channel's window, then laid out as the map, "
            "compute CPU 3x3 convolutions of stride 1 as Winograd's F(4x4, 3x3) or "
            "F(2x2, 3x3) where winograd_tiles (measured on the CPU: build.conv_choices) says "
            "so, or, for convolutions it does not name, over maps of 32 tiles or more; "
            "subsample the input of "
            "strided CPU 1x1 convolutions (then of stride 1), compute strided CPU depthwise "
            "convolutions along the rows with every column, then take their columns, compute "
            "pools whose windows fit "
            "exactly in floor mode, compute CPU 3-D convolutions with a window along time "
            "only that the channel tile does not take as 2-D ones over (time, height x width), "
            "widen CPU "
            "convolutions (their output channels, then their rows) and constant matmul weights "
            "to widths the vector divides, compute CPU "
            "grouped convolutions with a group axis and 1-D convolutions as their windows' "
            "columns times the weights, CPU bilinear resizes as a pass along the width then "
            "one along the height, CPU bilinear grid samples as each point's taps then a "
            "weighted gather, legalize (CPU "
            "exp, tanh, erf and their kin in TVM's fast forms), "
            "repair kernel vdevices, "
            "fold kernels of constants (weight transposes) at compile time (all in one build, "
            "then TVM's folding for what that build could not), take items of "
            "literal tuples (TVM's FuseOps drops the binding of an (x,)[0]), fuse within one "
            "device only, restore the kernel targets fusion drops, and lay constant matmul "
            "weights of CPU kernels out in the CPU rule's panels.",
            ("winograd_tiles",),
            LOWER_STEPS,
            {"winograd_tiles": {}},
        ),
        Pipeline(
            "multi_device_lower_unfused",
            "multi_device_lower without fusion, for per-operator profiling: the same rewrites, "
            "each operator's kernels its own (a rewrite's kernels emitted ahead of the operator "
            "it rewrites are that operator's: profiling.model_run.kernel_sequence), the weights "
            "of operators off the home CPU seen as constants by the rewrites and copied to "
            "their kernels' devices after; kernels of constants are folded as in the fused "
            "build.",
            ("winograd_tiles",),
            unfused_steps(LOWER_STEPS),
            {"winograd_tiles": {}},
        ),
    ]
}


def get_pipeline(name: str, **params: Any) -> tvm.transform.Sequential:
    """The named pipeline as a ``Sequential``, e.g. ``get_pipeline("multi_device_lower")``."""
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; choose from {sorted(PIPELINES)}")
    return PIPELINES[name].build(**params)


def load_pipeline(path: str | Path) -> Pipeline:
    """A pipeline from a TOML file in the ``passes/pipelines`` format."""
    return Pipeline.from_dict(tomllib.loads(Path(path).read_text()))
