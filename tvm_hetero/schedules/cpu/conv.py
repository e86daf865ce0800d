"""Convolutions on CPUs (conv2d, depthwise, conv1d/3d): register tiles over channels and width."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from tvm_hetero.ir.sblocks import buffer_bytes, realizes
from tvm_hetero.schedules.cpu.common import (
    BLOCKED_COPY_MAX_BYTES,
    PARALLEL_MIN_FLOPS,
    CpuRule,
    accumulate_in_registers,
    blocked_read,
    channels_last,
    const_extents,
    cpu_cores,
    index_step,
    largest_divisor,
    output_bits,
    positions_by_vectors,
    region_uses,
    split_first,
    uses_var,
    vector_bits,
    vector_lanes,
)

CHANNELS_PER_TILE = 8
"""Output channels of a one-vector register tile; each loaded input vector feeds this many FMAs
(8 accumulators, half of AVX2's 16 registers)."""
CHANNELS_PER_WIDE_TILE = 4
"""Output channels of a two-vector tile (two vectors of a row, or one of two rows): 8
accumulators fed by 6 loads instead of 9. On ResNet-18's 3x3 convolutions (64-512 channels,
widths 14-56) 4 x 2 ran 1.07-1.14x faster than 8 x 1 at the same width and 4 x 4 spills
(``benchmarks/cpu_kernels/conv_tiles.py``)."""
WIDE_TILE_CHANNELS_AVX512 = 8
"""Output channels of a two-vector tile with AVX-512's 32 vector registers: 8 x 2 accumulators
fed by 10 loads instead of 4 x 2 by 6. Kernels alone beside ONNX Runtime (Intel Xeon, family 6
model 207, two threads, ``benchmarks/cpu_kernels/wide_conv_tiles.py``): Inception v3's 3x3 of
32 -> 64 channels over 147 x 147 ran 1.5x faster, VGG's first layer (3 -> 64 over 224 x 224)
1.3x, ResNet's 7 x 7 stem 1.07x; Inception v3 as a whole 1.43 -> 1.12x ONNX Runtime's time."""
MIN_WIDTH = 4
NARROWEST_HALVED_LANES = 8
"""A row of at most half a vector is computed in vectors half as wide, down to this many lanes:
with AVX-512 a 3x3 of 512 channels over 7 x 7 took 5.4 ms in one vector of 16 a row (9 lanes
computed for nothing) and 3.1 ms in one of 8 (AMD EPYC Zen 4, one thread:
``benchmarks/cpu_kernels/narrow_vectors.py``); rows wider than 8 (a 3x3 of 64 channels over
56 x 56: 2.5 ms in 4 vectors of 16, 3.3 ms in 7 of 8) were slower in vectors of 8."""
SLAB_BYTES = 128 * 1024
"""Input bytes a task of the convolution rule reads (its rows, every channel) above which the
reduction is cut into blocks of channels (:func:`channel_block`): 3x3/2 288 -> 384 channels at
17 x 17 (Inception v3's reduction block, 288 KiB) ran 1.3-1.45x faster in blocks of 16, while
ResNet-18's 3x3 convolutions (59-74 KiB) ran the same or up to 1.1x slower in any block (AMD
EPYC, Zen 3, one thread, ``benchmarks/cpu_kernels/conv_rows.py``)."""
BLOCK_BYTES = 16 * 1024
"""Input bytes a block of channels reads: half of a 32 KiB L1 data cache."""
ROWS_PADDED_FROM = 7
"""Odd output row counts from here on are computed one row taller where the width's vectors are
odd too (:func:`computed_rows`): the extra row costs ``1 / rows`` of the work and buys the
4 x 2 tile over the 8 x 1 (:func:`register_tile`), which reads one input vector for every 8
FMAs instead of 8 broadcasts and one vector. One thread, AMD EPYC (Zen 3), in useful GFLOP/s
(the extra row's work not counted): 3x3 512 channels at 7 x 7 43 -> 52, 64 -> 96 at 35 x 35
42 -> 49, 32 -> 64 at 147 x 147 34 -> 44, 80 -> 192 at 71 x 71 24 -> 46 (Inception v3's
stem; ``benchmarks/cpu_kernels/conv_rows.py``). Three or five rows would pay a third or a fifth
more work for it."""
CHANNEL_VECTOR_MAX_WIDTH = 5
"""Output rows up to this many columns get the channel-vectorized tile (:func:`channel_tiled`):
its vector is a run of output channels, so a row of 1-5 columns fills every lane. Against the
width-vectorized tile at the width ``PadConvolutionOutputs`` gives them, on Zen 3 (8 lanes, one
thread): 3x3 512 channels, 7 rows x 1 column 3.1 -> 0.9 ms, 7 x 2 4.0 -> 1.5 ms, 3x3 256 at
14 x 3 1.8 -> 0.8 ms, 64 channels 56 x 3 0.39 -> 0.19 ms; at 6-7 columns the two are even
(``benchmarks/cpu_kernels/channel_vectors.py``)."""
CHANNEL_VECTOR_ACCUMULATORS = 14
"""Vectors of output channels a channel-vectorized tile accumulates: with one weight vector and
one broadcast input that is AVX2's 16 registers."""
CHANNEL_VECTOR_FLOATS = 112
"""Floats a channel-vectorized tile accumulates at most (14 vectors of 8). Code for AVX-512 (16
lanes) fell off a cliff above 7 vectors: on Zen 5, one thread, 3x3 convolutions of 512 channels
at 3 x 4 and 7 x 2 and of 256 at 14 x 3 ran at 10 GFLOP/s in tiles of 12-14 positions (8
positions, 4 x 2: 13) and at 180-207 in tiles of 6-7, while the same tiles built for AVX2 ran at
69-120; the width-vectorized tile's 8 vectors of 16 are not affected (180-220 GFLOP/s). An Intel
Xeon (family 6, model 207) ran the same tiles 32-40x slower at 14 positions than at 7."""


WIDE_CHANNEL_TILE_VECTORS = 2
"""Vectors of output channels a channel-vectorized tile of a convolution (not grouped or
depthwise) computes with AVX-512's 32 registers, where they divide the channels
(:func:`channel_tile_vectors`): each broadcast input element then feeds two FMAs, 14
accumulators for up to 7 positions. One vector a tile read one weight vector and one broadcast
for every FMA. Each layer alone beside ONNX Runtime (Intel Xeon, family 6 model 207, two
threads, 40 interleaved runs, ``benchmarks/cpu_kernels/channel_tiles.py``): ResNet's 3x3
convolutions with stride 2 ran 8-16 % faster (2.11 -> 1.93 ms over 56 x 56, 1.25 -> 1.06 over
14 x 14), the one at 7 x 7 12 %, a 14 x 3 FlexPie column tile of 256 channels 21 %; whole
models (ResNet-50, ResNet-18, Inception v3, SqueezeNet, DenseNet-121) moved within this host's
noise, these layers being a small share of them."""


def channel_tile_vectors(channels: int, lanes: int, target: Target, tasks: int) -> int:
    """Vectors of ``lanes`` output channels in a channel-vectorized tile of a convolution of
    ``channels`` output channels (not grouped or depthwise) whose parallel loop has ``tasks``
    tasks for each vector of channels (its images' row tiles): :data:`WIDE_CHANNEL_TILE_VECTORS`
    with 32 vector registers where they divide ``channels`` and leave every core two tasks or
    more, else 1."""
    wide = WIDE_CHANNEL_TILE_VECTORS
    if vector_bits(target) < 512 or channels % (wide * lanes):
        return 1
    return wide if tasks * channels // (wide * lanes) >= 2 * cpu_cores(target) else 1


GROUP_TILES = True
"""Whether a grouped convolution whose groups hold whole tiles of output channels takes the
one-group convolution's channel tile (:func:`shares_inputs`)."""


def shares_inputs(group: int | None, lanes: int) -> bool:
    """Whether the output channels of a channel-vectorized tile share their inputs, as the
    one-group convolution's do (``group`` is ``None``): a grouped convolution's do where its
    groups of ``group`` output channels hold :data:`WIDE_CHANNEL_TILE_VECTORS` vectors of
    ``lanes`` whole (:data:`GROUP_TILES`), so a tile never straddles two groups. Such a tile
    takes two vectors of channels with AVX-512 (:func:`channel_tile_vectors`) and runs along a
    row (:func:`channel_vector_tile`); a grouped convolution had one vector, 7 accumulators, one
    weight vector and one broadcast input for every multiply-add. ResNeSt's radix-2 3x3
    convolutions (groups of 128 to 512 channels) inside ResNeSt-14d ran 1.5-1.7x faster
    (6.0 -> 3.6 ms over 56 x 56; ONNX Runtime's 2.5), the model 1.56 -> 1.22x ONNX Runtime's
    time (Intel Xeon, two threads; ``before_and_now.py timm:resnest14d``). With AVX2 (one
    vector a tile) only the row orientation changes, as for one group: 128 -> 256 channels in
    two groups over 56 x 56, built for Haswell and run on that Xeon, 19.1 -> 18.5 ms, over
    28 x 28 5.06 -> 5.13 (a scratch probe; the AVX-512 build 10.3 -> 6.7 ms).
    ResNeXt's and RegNet's groups (4-16 channels) keep one vector."""
    if group is None:
        return True
    return GROUP_TILES and group % (WIDE_CHANNEL_TILE_VECTORS * lanes) == 0


def channel_accumulators(lanes: int) -> int:
    """Positions of a channel-vectorized tile on a CPU of ``lanes`` float32 lanes: 14 up to 8
    lanes, 7 on 16 (:data:`CHANNEL_VECTOR_FLOATS`)."""
    return max(1, min(CHANNEL_VECTOR_ACCUMULATORS, CHANNEL_VECTOR_FLOATS // lanes))


def vector_width(width: int, lanes: int, gathered: bool = False) -> tuple[int, int]:
    """``(W', v)``: the output width to compute and its vector, the largest divisor of ``W'`` up
    to ``lanes``. From ``MIN_WIDTH`` columns on, ``W'`` is ``width`` rounded up to whole vectors
    (AVX2: 8 lanes): with the same register tile, a 3x3 convolution 28 wide in vectors of 7
    took 1.18-1.32x the time of one 32 wide in vectors of 8 (14 against 16: 1.14-1.40x; 7
    against 8: 1.19x), and 13 columns are two vectors of 8, not 13 of 1; rows of at most half a
    vector take vectors half as wide (:data:`NARROWEST_HALVED_LANES`). ``gathered``: the
    input is read lane by lane (a depthwise or grouped convolution whose column stride
    ``StridedLoadsAsShuffles`` does not read as whole vectors: the rule de-interleaves only
    where channels share the input), each lane costs the same wide or not,
    so ``W'`` is the width up to ``lanes - 1`` wider with the fewest vectors per row (the
    narrowest on a tie: 13 is computed 14 wide in vectors of 7, 28 stays 28). Narrower rows
    keep their width.
    """
    if width < MIN_WIDTH:
        return width, largest_divisor(width, lanes)
    if not gathered:
        while lanes > NARROWEST_HALVED_LANES and width <= lanes // 2:
            lanes //= 2  # AVX-512: a 7 x 7 map in vectors of 8, not one of 16 mostly empty
        return -(-width // lanes) * lanes, lanes
    widths = range(width, width + lanes)
    return min(((w, largest_divisor(w, lanes)) for w in widths), key=lambda c: (c[0] / c[1], c[0]))


def computed_rows(rows: int, vectors: int, channels: int) -> int:
    """The output rows to compute for a convolution (not depthwise or grouped, not read lane by
    lane) with ``rows`` rows of ``vectors`` vectors and ``channels`` output channels: one more
    where :func:`register_tile` would otherwise fall back to one vector of one row (``rows`` odd
    from :data:`ROWS_PADDED_FROM` on, ``vectors`` odd, ``channels`` a multiple of
    :data:`CHANNELS_PER_WIDE_TILE`), so it tiles two rows; else ``rows``."""
    odd = rows % 2 == 1 and vectors % 2 == 1
    if odd and rows >= ROWS_PADDED_FROM and channels % CHANNELS_PER_WIDE_TILE == 0:
        return rows + 1
    return rows


def wide_tile_channels(bits: int) -> int:
    """Output channels of the two-vector tile with vectors of ``bits`` bits:
    :data:`WIDE_TILE_CHANNELS_AVX512` with AVX-512's (and its 32 vector registers),
    :data:`CHANNELS_PER_WIDE_TILE` otherwise."""
    return WIDE_TILE_CHANNELS_AVX512 if bits >= 512 else CHANNELS_PER_WIDE_TILE


def register_tile(
    channels: int, rows: int, vectors: int, gathered: bool = False,
    wide: int = CHANNELS_PER_WIDE_TILE,
) -> tuple[int, int, int]:  # fmt: skip
    """``(c, r, n)``: the register tile of a convolution with ``channels`` output channels,
    ``rows`` output rows of ``vectors`` vectors each: ``c`` channels by ``r`` rows by ``n``
    vectors. Two vectors of a row where the row has an even count, else one vector of two rows
    where the rows are even, each with ``wide`` channels (:func:`wide_tile_channels`);
    otherwise, and always when the input is read lane by lane (``gathered``: a stride the rule
    could not de-interleave; each gather is worth reusing over more channels, and ResNet-18's
    strided convolutions ran 1.1-1.3x slower with 4 x 2 then), one vector with ``CHANNELS_PER_TILE``
    channels. ``c`` divides ``channels``."""
    if gathered:
        return largest_divisor(channels, CHANNELS_PER_TILE), 1, 1
    if vectors % 2 == 0:
        return largest_divisor(channels, wide), 1, 2
    if rows % 2 == 0:
        return largest_divisor(channels, wide), 2, 1
    return largest_divisor(channels, CHANNELS_PER_TILE), 1, 1


SPARE_ACCUMULATORS = 1
"""Accumulators a wide row's channel-vectorized tile may leave empty (:func:`channel_tiled`):
with one, Inception's 17 x 17 maps are computed 18 wide in tiles of 6 positions instead of 21
in tiles of 7 (:func:`channel_tile_width`: only where a tile of 7 would have been taken).
Its 1x7 and 7x1 convolutions of 128 to 192 channels ran 13-17 % faster alone (Zen 4, two
threads, ``benchmarks/cpu_kernels/spare_accumulators.py``), whole Inception-v3 and -v4 5-6 %
(paired replay); maps 12, 24 and 48 wide (now tiles of 6 where they were widened to 14, 28
and 49) the same within the noise."""

WIDE_CHANNEL_VECTORS = (16, 56)
"""``(lanes, width)``: with vectors of at least this many lanes, convolutions with rows up to
this wide whose map a whole tile of positions divides, two vectors of output channels or more
and a vector of input channels or more get the channel-vectorized tile too
(:func:`channel_tiled`). On Zen 4 (AVX-512, two threads, kernels alone beside ONNX Runtime):
ResNet's 3x3 convolutions at 56 x 56 to 7 x 7 ran 8-28 % faster, their strided ones 19-35 %,
Inception's 5x5 and 3x3 at 35 x 35 23-27 % (``benchmarks/cpu_kernels/wide_channel_vectors.py``);
the stems (3 input channels), maps 112 wide, 16 channels, Inception's 17 x 17 maps (a prime:
tiles of one position) and every one of these built for AVX2 (8 lanes) on the same CPU ran
slower."""


def channel_tiled(
    width: int, channels: int, lanes: int, group: int | None = None, inputs: int = 0,
    rows: int = 1, spare: int | None = None,
) -> bool:  # fmt: skip
    """Whether a convolution (not depthwise) with rows of ``width`` output columns and
    ``channels`` output channels (``group`` of them a group, for a grouped one; ``inputs``
    input channels, 0 for a 1x1 window; ``rows`` output rows) gets the channel-vectorized tile:
    weights packed at build time as ``[O / lanes, I, KH, KW, lanes]`` (``PackConstantWeights``),
    a vector of ``lanes`` output channels per input element broadcast. Narrow rows (a FlexPie
    tile cut by columns, a small map's last stages); with AVX-512, the rows of
    :data:`WIDE_CHANNEL_VECTORS`; and every grouped convolution whose groups a vector divides
    (:func:`group_lanes`): a vector's channels then share their input channels, and the
    width-vectorized tile, which has no channel tile for them, ran RegNet-X's groups of 16 at
    2.7-3.2x ONNX Runtime's time. A wide row's tile fills every accumulator but ``spare``
    (default :data:`SPARE_ACCUMULATORS`)."""
    if group is not None:
        return group_lanes(group, lanes) is not None
    if channels % lanes:
        return False
    if width <= CHANNEL_VECTOR_MAX_WIDTH:
        return True
    wide_lanes, wide_width = WIDE_CHANNEL_VECTORS
    if lanes < wide_lanes or width > wide_width or channels < 2 * lanes or inputs < lanes:
        return False
    filled = math.prod(channel_vector_tile(rows, width, lanes))
    return filled >= channel_accumulators(lanes) - (SPARE_ACCUMULATORS if spare is None else spare)


def conv_channel_tiled(
    out_shape: Sequence[int], weight_shape: Sequence[int], lanes: int, channels: int = 0
) -> bool:  # fmt: skip
    """:func:`channel_tiled` for a one-group convolution with output ``(N, O, ..., H, W)`` and
    weights ``(O, I, *window)``, computed over ``channels`` output channels (``O`` when 0), as
    ``PackConstantWeights`` will read its kernel: the input channels count only where the
    window has more than one tap."""
    inputs = weight_shape[1] if math.prod(weight_shape[2:]) > 1 else 0
    rows, width = out_shape[-2], out_shape[-1]
    return channel_tiled(width, channels or out_shape[1], lanes, None, inputs, rows)


CHANNEL_VECTOR_EXTRA = 0.25
"""Most extra output columns, as a share of the width, computed so that a convolution gets the
wide channel-vectorized tile (:func:`channel_tile_width`). Zen 4, AVX-512, two threads, each
kernel alone with its crop, 5 interleaved rounds (``benchmarks/cpu_kernels/
padded_channel_vectors.py``): Inception v3's 1x7 and 7x1 convolutions at 17 x 17 ran
1.38-1.67x faster 21 wide than 32 wide, SqueezeNet's 3x3 ones at 13 x 13 and 27 x 27
1.16-1.19x faster 14 and 28 wide than 16 and 32, at 55 x 55 the same 56 wide as 64; whole
models in the same rounds (``before_and_now.py``): Inception v3 1.33 -> 1.18x ONNX Runtime's
time, SqueezeNet 1.39 -> 1.34x. A map 8 wide would need 14 columns (75 % more work)."""


DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH = 7
"""Depthwise convolutions (one input channel an output channel) with whole vectors of
channels and output rows up to this many columns, twice as many with a column stride, get the
channel-vectorized tile (:func:`depthwise_channel_tiled`): weights packed by channel as for
:func:`channel_tiled`, and the copy that pads the input writes it with channels innermost
(``[N, C / L, H, W, L]``) inside each task, so each position's input is one vector of the
tile's channels and every lane is used. Along the width a 7-wide row filled 7 of 8 or 16
lanes and read an unaligned vector per multiply-add, a strided row gathered its lanes or was
computed twice as wide (``DepthwiseColumnsAfter``). Each layer alone against the
width-vectorized tile (Zen 4, two threads, 5 interleaved rounds,
``benchmarks/cpu_kernels/depthwise_channel_vectors.py``): 7-wide rows 1.4-1.8x faster,
strided rows to 7 or 14 columns 1.4-3.8x; 14-wide rows with unit stride the same (5x5) or
1.1-1.2x slower (3x3), built for AVX-512 and for AVX2 alike; wider maps 1.7-3x slower."""


DEPTHWISE_ROWS = 7
"""Output rows of a width-vectorized depthwise convolution's register tile (the largest
divisor of the rows up to this), one vector of columns each, with the window's taps unrolled
and the task's padded input written inside the task (:meth:`Conv._depthwise_rows`). A tap's
input vector then feeds every row whose window covers it: one row a tile read 9 unaligned
vectors for 9 multiply-adds (a 3x3 window), most of them split across two cache lines. Each
layer alone, against one row a tile (Zen 4, two threads, kernels timed alone, 7 interleaved
rounds): MnasNet's and MobileNet's 3x3 of 72 channels at 56 x 56 1.27x faster, 32 at
112 x 112 1.45x, 144 at 56 x 56 1.02-1.30x, 5x5 of 120 at 28 x 28 1.30x, a 3x3 of 96 with
stride 2 at 112 x 112 1.17-1.6x (its rows computed by ``DepthwiseColumnsAfter``); 4 and 8
rows ran within 3 % of 7, two vectors a row slower. Whole models
(``benchmarks/models/before_and_now.py``, the rule with this tile and without it in the same
rounds): ConvNeXt-T 0.98 -> 0.91x ONNX Runtime's time, LR-ASPP 1.14 -> 1.05x,
EdgeNeXt 0.86 -> 0.82x, MnasNet 1.27 -> 1.23x, most others within 2 %."""


ROW_TILED_STEPS = (1, 2)
"""How far apart a depthwise convolution may read its input's columns and take the tile of
:data:`DEPTHWISE_ROWS` rows. With a step of 2 a vector of outputs reads every other column:
TVM reads such a vector a lane at a time, which is why ``DepthwiseColumnsAfter`` computed
strided layers along the rows with every column, then took every other one (twice the work,
and the slice a kernel of its own); :class:`~tvm_hetero.passes.StridedLoadsAsShuffles` reads it
as two vectors and one permute, and ``DepthwiseColumnsAfter`` leaves these steps to this tile.
Each layer alone, ReLU6 after it, against the rows with every column then the slice (Intel
Xeon, AVX-512, two threads, ``benchmarks/cpu_kernels/strided_depthwise.py``): 96 channels
from 112 x 112 0.273 -> 0.203 ms (ONNX Runtime 0.382), 144 from 56 x 56 0.067 -> 0.063, the
5x5 windows at 56 x 56 and 32 channels at 112 x 112 3-7 % slower; the same tile with the reads
a lane at a time took 0.46 ms for the first and 0.45 for the 5x5 of 144 (0.13 by either)."""


DEPTHWISE_PARALLEL_MIN_FLOPS = 1 << 15
"""Multiply-adds from which a depthwise convolution's tasks run in parallel (other
convolutions: ``PARALLEL_MIN_FLOPS``, eight times as many). A depthwise layer does a few
multiply-adds for each element it moves. Each layer alone with ReLU6 against one thread (Intel
Xeon, family 6 model 207, two threads, ``benchmarks/cpu_kernels/depthwise_threads.py``):
MobileNet-V2's 3x3 of 576 channels into 7 x 7 (254 thousand multiply-adds) 0.093 -> 0.036 ms
(ONNX Runtime 0.059), 3x3 of 384 into 7 x 7 0.061 -> 0.030, of 144 into 14 x 14 0.086 ->
0.049, 5x5 of 32 over 14 x 14 0.033 -> 0.017; whole mobile networks level to five percent
faster (``before_and_now.py``, 5 rounds)."""


DEPTHWISE_ROWS_MIN_VECTORS = 1
"""Vectors a row from which a width-vectorized depthwise convolution takes the tile of
:data:`DEPTHWISE_ROWS` rows: every row, one vector (a 14 x 14 map computed 16 wide) included.
Untiled, such a row's taps were one chain of dependent multiply-adds (25 for a 5x5 window).
Each layer alone, with its ReLU, the tile against one row a tile (Intel Xeon, AVX-512, two
threads, ``benchmarks/cpu_kernels/depthwise_rows.py``): 3x3 of 384 and 576 channels over
14 x 14 0.045 -> 0.027 and 0.059 -> 0.041 ms, 5x5 of 480 and 672 0.077 -> 0.056 and 0.103 ->
0.070 ms. Whole models (``benchmarks/models/before_and_now.py``, 7 interleaved rounds):
MnasNet, MobileNet-V2 and MobileNet-V3-Small three to four percent faster, MobileNet-V3-Large
one, EfficientNet-B0, MobileNetV4-Conv-Small and GhostNet level. On Zen 4, when each task
still asked the workspace pool for its register tile (:class:`~tvm_hetero.passes.
StackLoopBuffers` now puts it on the stack), MobileNet-V2 had run 2-4 % slower with these rows
tiled, and 2 was kept."""


def depthwise_channel_tiled(width: int, channels: int, lanes: int, stride: int = 1) -> bool:
    """Whether a depthwise convolution with rows of ``width`` output columns, ``channels``
    channels and a column ``stride`` gets the channel-vectorized tile
    (:data:`DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH`)."""
    most = DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH * (2 if stride > 1 else 1)
    return channels % lanes == 0 and width <= most


def depthwise_channel(stmt: s_tir.stmt.SBlock, form: ConvForm) -> int | None:
    """The spatial axis of ``stmt`` that is a depthwise convolution's channel (``form`` has no
    channel axis, the weights' first index is that axis, optionally packed by channel
    (``w[c // L, ..., c % L]``), they hold one input channel an output channel, and the data's
    channel index is that axis plus at most a unit reduction); ``None`` otherwise."""
    if form.channel is not None or form.weights is None or len(form.data.region) != 4:
        return None
    shape = form.weights.source.shape
    if len(shape) < 4 or not isinstance(shape[1], tirx.IntImm) or int(shape[1]) != 1:
        return None
    iters, first = stmt.iter_vars, form.weights.region[0].min
    for i in form.spatial[:-1]:
        var = iters[i].var
        packed = channel_packed_weights(form.weights, var) is not None
        if not (first.same_as(var) or packed):
            continue
        index = form.data.region[1].min
        rest = index.b if isinstance(index, tirx.Add) and index.a.same_as(var) else None
        if index.same_as(var) or (rest is not None and _unit_reduction(stmt, rest)):
            return i
    return None


def _unit_reduction(stmt: s_tir.stmt.SBlock, expr) -> bool:
    """Whether ``expr`` is a reduction iterator of ``stmt`` of extent 1."""
    return any(
        v.var.same_as(expr) and isinstance(v.dom.extent, tirx.IntImm) and int(v.dom.extent) == 1
        for v in stmt.iter_vars
        if v.iter_type != tirx.IterVar.DataPar
    )


def channel_tile_width(
    width: int, channels: int, lanes: int, inputs: int, rows: int = 1
) -> int | None:  # fmt: skip
    """The output width a convolution (not grouped or depthwise) with rows of ``width``
    columns should be computed at to get the channel-vectorized tile (:func:`channel_tiled`):
    ``width`` itself where it has it, else the narrowest wider one, up to
    :data:`CHANNEL_VECTOR_EXTRA` more columns and the width of :data:`WIDE_CHANNEL_VECTORS`,
    whose tile fills every accumulator (SqueezeNet's 13, 27 and 55 at 14, 28 and 56); where
    one does, the narrowest up to it whose tile leaves :data:`SPARE_ACCUMULATORS` empty (a
    prime 17 at 18, not 21; 24 stays 24, not 28); ``None`` where none fills them all (8 and 16
    keep whole vectors)."""
    most = min(math.floor(width * (1 + CHANNEL_VECTOR_EXTRA)), WIDE_CHANNEL_VECTORS[1])
    widths = range(width, most + 1)  # none past 56 wide: channel_tiled refuses those
    full = next((w for w in widths if channel_tiled(w, channels, lanes, None, inputs, rows, 0)),
                None)  # fmt: skip
    if full is None:
        return None
    return next(w for w in range(width, full + 1) if channel_tiled(w, channels, lanes, None,
                                                                    inputs, rows))  # fmt: skip


def group_lanes(group: int, lanes: int) -> int | None:
    """The lanes of a channel vector for a grouped convolution of ``group`` output channels a
    group: the CPU's ``lanes`` where they divide the group, else half of them from 16 lanes up
    (RegNet-Y's groups of 8 in 256-bit vectors with AVX-512: 1.2-2x faster than by group, alone,
    Zen 4), else None."""
    for vector in (lanes, lanes // 2 if lanes >= 16 else 0):
        if vector and group % vector == 0:
            return vector
    return None


def channel_vector_tile(rows: int, width: int, lanes: int, wide: bool = False) -> tuple[int, int]:
    """``(r, w)``: the rows and columns of a channel-vectorized register tile, each position one
    vector of ``lanes`` output channels: the most positions up to :func:`channel_accumulators`
    that divide ``rows`` and ``width``, taller on a tie (8 lanes: 7 x 1 -> (7, 1), 7 x 2 ->
    (7, 2), 14 x 3 -> (14, 1), 28 x 2 -> (14, 1); 16 lanes: 7 x 2 -> (7, 1), 3 x 4 -> (3, 2)),
    or, with ``wide``, wider (16 lanes: 28 x 28 -> (1, 7)): a one-group convolution's tile
    along a row reads its inputs from one row's cache lines, which the next tile reads again,
    where a column of 7 rows reads 7 rows' lines a step (with a stride of 2, 14 rows apart) and
    its neighbour reads them from L2 again. Kernels alone beside ONNX Runtime (Intel Xeon,
    family 6 model 207, two threads, ``benchmarks/cpu_kernels/channel_tiles_along_rows.py``):
    Inception's 5x5 of 48 -> 64 channels over 35 x 35 ran 1.45x faster, ResNet-50's 3x3 / 2 of
    256 from 28 x 28 1.15x, its 3x3 of 512 over 7 x 7 1.09x, ResNet-18's 3x3 / 2 of 64 from
    56 x 56 the same; depthwise convolutions (their own input copy, channels innermost) ran up
    to 1.5x slower, and keep the tall tile."""
    most = channel_accumulators(lanes)
    tiles = [
        (r, w)
        for r in range(1, rows + 1)
        for w in range(1, width + 1)
        if rows % r == 0 and width % w == 0 and r * w <= most
    ]
    return max(tiles, key=lambda t: (t[0] * t[1], t[1] if wide else t[0]))


def channel_packed_weights(weights, channel: tirx.Var) -> int | None:
    """The lanes of ``weights``' channel packing when the block reads them as
    ``w[c // L, ..., c % L]`` (``PackConstantWeights``' layout for :func:`channel_tiled`
    convolutions), else ``None``."""
    first, last = weights.region[0].min, weights.region[-1].min
    if not (isinstance(last, tirx.FloorMod) and isinstance(first, tirx.FloorDiv)):
        return None
    if not (last.a.same_as(channel) and isinstance(last.b, tirx.IntImm)):
        return None
    return int(last.b)


@dataclass(frozen=True)
class ConvForm:
    """A reduction block read as a convolution: iterator indices of its spatial axes (leading,
    the last the output width) and of its reduction axes, the data read (along the width), the
    weights read (``None`` with one operand), the output channel axis (a spatial axis of
    extent over 1 the data does not use, or uses only as its group, ``c // G * I``; ``None``:
    depthwise, pooling) and the output channels of a group (``None``: not grouped)."""

    spatial: list[int]
    reduce: list[int]
    data: Any
    weights: Any
    channel: int | None
    group: int | None = None


def conv_form(stmt: s_tir.stmt.SBlock, operands: int = 2) -> ConvForm | None:
    """``stmt`` as a convolution with ``operands`` reads (what the convolution rule tiles and
    ``PackConstantWeights`` packs), or ``None``."""
    if len(stmt.reads) != operands or len(stmt.writes[0].region) < 3:
        return None
    iters = stmt.iter_vars
    spatial = [i for i, v in enumerate(iters) if v.iter_type == tirx.IterVar.DataPar]
    reduce = [i for i, v in enumerate(iters) if v.iter_type != tirx.IterVar.DataPar]
    if not spatial or spatial != list(range(len(spatial))):
        return None
    data = next((r for r in stmt.reads if region_uses(r, iters[spatial[-1]].var)), None)
    if data is None:
        return None

    def wide(i: int) -> bool:
        extent = iters[i].dom.extent
        return not isinstance(extent, tirx.IntImm) or int(extent) > 1

    weights = next((r for r in stmt.reads if not r.same_as(data)), None)
    for i in spatial[:-1]:
        if not wide(i):
            continue
        if not region_uses(data, iters[i].var):
            return ConvForm(spatial, reduce, data, weights, i)
        group = group_channels(data, iters[i].var)
        if group is not None:
            return ConvForm(spatial, reduce, data, weights, i, group)
    return ConvForm(spatial, reduce, data, weights, None)


def group_channels(data, channel: tirx.Var) -> int | None:
    """``G`` where ``data`` reads ``channel`` only in one index, as ``channel // G * I`` plus
    terms without it (a grouped convolution's input channel: its group's first, ``I`` input
    channels a group, then the reduction's), with ``G`` above 1; else ``None``."""
    indices = [r.min for r in data.region if uses_var(r.min, channel)]
    if len(indices) != 1:
        return None
    terms, index = [], indices[0]
    while isinstance(index, tirx.Add):
        terms.append(index.b)
        index = index.a
    terms.append(index)
    grouped = [t for t in terms if uses_var(t, channel)]
    if len(grouped) != 1 or not isinstance(grouped[0], tirx.Mul):
        return None
    scaled, scale = grouped[0].a, grouped[0].b
    if not (isinstance(scaled, tirx.FloorDiv) and scaled.a.same_as(channel)):
        return None
    size = scaled.b
    if not (isinstance(size, tirx.IntImm) and isinstance(scale, tirx.IntImm)):
        return None
    return int(size) if int(size) > 1 else None


class Conv(CpuRule):
    """A reduction over two inputs (data, weight) whose output's last axis is contiguous.

    Tile: ``CHANNELS_PER_TILE`` output channels (a spatial axis the data operand does not use,
    so one data vector is reused across them) by a vector of output columns, accumulated in
    registers over the reduction axes; the remaining leading spatial axes are the parallel loop
    (bands of rows before blocks of channels where the input outweighs the weights,
    :func:`rows_before_channels`). Depthwise convolutions have no such channel axis and get a
    vector-only tile, or, with weights packed by channel (:func:`depthwise_channel_tiled`), a
    vector of channels a position (:meth:`_depthwise_channel_vectors`). Padding stays a
    separate parallel pass so the inner loop has no bounds checks; epilogues are folded in.
    Rows of 1-3 columns (a 2 x 2 map, a tile cut by columns) get the same tile with vectors of
    their width: left to the reduction rule (accumulating in memory) they ran at 1.8-3.5
    GFLOP/s, 5-23x slower (``benchmarks/cpu_kernels/narrow_convs.py``). Where the weights are
    packed by output channel (constant weights of :func:`channel_tiled` convolutions, rows of
    1-5 columns), the vector is a run of output channels instead (:meth:`_channel_vectors`).
    """

    name = "conv"
    operands = 2
    """Reads of the reduction block: data and weights."""
    min_width = 1
    """The narrowest output row the rule tiles."""

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = get_reduction_blocks(sch, blocks)
        if not reductions:
            return None
        main = reductions[0]
        stmt = sch.get(main)
        loops = sch.get_loops(main)
        if len(loops) != len(stmt.iter_vars):
            return None
        extents = const_extents(sch, loops)
        form = conv_form(stmt, self.operands)
        if extents is None or form is None:
            return None
        spatial, reduce, data, channel = form.spatial, form.reduce, form.data, form.channel
        vec = spatial[-1]
        if extents[vec] < self.min_width:
            return None
        w = stmt.iter_vars[vec].var
        if channel is not None:
            lanes = channel_packed_weights(form.weights, stmt.iter_vars[channel].var)
            whole = lanes is not None and extents[channel] % lanes == 0
            if whole and (form.group is None or form.group % lanes == 0):
                tile = (spatial, reduce, channel, lanes)
                shared = shares_inputs(form.group, lanes)
                copies = CHANNEL_TILE_COPIES_IN_TASK
                blocks = copies and form.group is None and blocks_in_task(data, form.weights)
                return self._channel_vectors(
                    sch, main, loops, extents, tile, target, shared, copies, blocks, data
                )
            if form.group is not None:
                channel = None  # no channel tile shares a grouped convolution's reads
        else:
            depthwise = depthwise_channel(stmt, form)
            found = depthwise is not None and channel_packed_weights(
                form.weights, stmt.iter_vars[depthwise].var
            )
            if found and extents[depthwise] % found == 0:
                tile = (spatial, reduce, depthwise, found)
                index = list(stmt.reads).index(data)
                return self._depthwise_channel_vectors(
                    sch, main, loops, extents, tile, index, target
                )
        if channel is not None and _deinterleave(sch, main, stmt.reads.index(data), w):
            stmt = sch.get(main)
            data = next(r for r in stmt.reads if region_uses(r, w))
        vw = largest_divisor(extents[vec], vector_lanes(target, output_bits(sch, main)))
        cw, rw, nv = 1, 1, 1
        row = spatial[-2]
        if channel is not None:
            rows = extents[row] if row != channel else 1
            gathered = column_step(data, w) != 1
            cw, rw, nv = register_tile(
                extents[channel],
                rows,
                extents[vec] // vw,
                gathered,
                wide_tile_channels(vector_bits(target)),
            )
        elif extents[vec] // vw >= DEPTHWISE_ROWS_MIN_VECTORS and _row_tiled(stmt, form, data, w):
            rw = largest_divisor(extents[row], DEPTHWISE_ROWS)
            tile = (spatial, reduce, rw, vw)
            return self._depthwise_rows(sch, main, loops, extents, tile, target)

        v0, v1, v2 = sch.split(loops[vec], [None, nv, vw])
        outer = [loops[i] for i in spatial[:-1]]
        tile = []
        if channel is not None:
            c0, c1 = sch.split(loops[channel], [None, cw])
            outer[spatial.index(channel)] = c0
            tile.append(c1)
        if rw > 1:
            r0, r1 = sch.split(loops[row], [None, rw])
            outer[spatial.index(row)] = r0
            tile.append(r1)
        rows_first = (
            channel is not None and row != channel and rows_before_channels(data, form.weights)
        )
        if rows_first:
            bands, count = cpu_cores(target), extents[row] // rw
            if count % bands == 0 and count > bands:
                band, inner = sch.split(outer[spatial.index(row)], [bands, None])
                outer[spatial.index(row)] = inner
                outer.insert(spatial.index(channel), band)
            else:
                outer.insert(spatial.index(channel), outer.pop(spatial.index(row)))
        tasks = []
        if math.prod(extents) >= PARALLEL_MIN_FLOPS:  # with no channel tile a row is too small
            # a row is a task where there are rows (N, C, H): a 1-D pool's channels are its tasks
            tasks = outer if channel is not None or len(outer) < 3 else outer[:-1]
        in_task = False
        banded = rows_first and tasks and len(outer) == len(spatial) and len(reduce) == 3
        if banded and row_tile_tasks(stmt, data, (row, rw), extents[reduce[1]]):
            outer.append(outer.pop(spatial.index(channel) + 1))  # every channel block in a task
            tasks, in_task = outer[:-1], True
        reduction = [loops[i] for i in reduce]
        block = None
        if channel is not None and tasks == outer and extents[vec] // (nv * vw) > 1:
            block = channel_block(stmt, data, (row, rw), [extents[i] for i in reduce])
        nest = (outer, v0, reduction, [*tile, v1], v2)
        return _in_registers(
            sch, main, nest, tasks, target, block, rows_first=rows_first, copies_in_task=in_task
        )

    @classmethod
    def _depthwise_channel_vectors(
        cls, sch, main, loops, extents, tile, data: int, target: Target
    ) -> s_tir.Schedule:  # fmt: skip
        """The channel-vectorized tile of a depthwise convolution
        (:func:`depthwise_channel_tiled`): its input, padded, is laid out with ``lanes``
        channels innermost by a copy each task makes of the rows it reads
        (:func:`_channels_innermost`), so each position's input is one vector of the tile's
        channels, and the tile's accumulators are laid out the same way."""
        lanes = tile[-1]
        copy = _channels_innermost(sch, main, data, lanes)
        cls._channel_vectors(sch, main, loops, extents, tile, target,
                             parallel_min=DEPTHWISE_PARALLEL_MIN_FLOPS)  # fmt: skip
        task = sch.get_loops(main)[0]
        sch.compute_at(copy, task)
        sch.vectorize(sch.get_loops(copy)[-1])
        if BLOCKED_COPIES:
            blocked_input(sch, copy, task, lanes)
        return sch

    @staticmethod
    def _depthwise_rows(sch, main, loops, extents, tile, target: Target) -> s_tir.Schedule:
        """The width-vectorized tile of a depthwise convolution (:data:`DEPTHWISE_ROWS`):
        ``rw`` output rows by one vector of ``vw`` columns, the window's taps unrolled below
        the tile loop (the reads they share are loaded once) and the tile written back
        unrolled; each task (an image's channel) pads its own input just before its rows."""
        spatial, reduce, rw, vw = tile
        vec, row = spatial[-1], spatial[-2]
        v0, v1 = sch.split(loops[vec], [None, vw])
        r0, r1 = sch.split(loops[row], [None, rw])
        outer = [loops[i] for i in spatial[:-2]] + [r0]
        tasks = outer[:-1] if math.prod(extents) >= DEPTHWISE_PARALLEL_MIN_FLOPS else []
        first, *taps = [loops[i] for i in reduce]
        return _in_registers(sch, main, (outer, v0, [first], [*taps, r1], v1), tasks, target,
                             row_tile=True)  # fmt: skip

    @staticmethod
    def _channel_vectors(
        sch, main, loops, extents, tile, target: Target, shared: bool = False,
        copies_in_task: bool = False, blocks_inside: bool = False, data=None,
        parallel_min: int = PARALLEL_MIN_FLOPS,
    ) -> s_tir.Schedule:  # fmt: skip
        """The channel-vectorized tile: ``r`` rows by ``w`` columns of output positions
        (:func:`channel_vector_tile`), each ``vectors`` vectors of ``lanes`` output channels
        (:func:`channel_tile_vectors`, where the channels ``shared`` their inputs, else one)
        accumulated in registers; per reduction step a weight vector for each (contiguous in
        the packed layout) and one broadcast input element per position. No de-interleaving:
        inputs are read one element at a time whatever the stride. The accumulators are laid
        out as the tile holds them, the channels' vector innermost (``[N, O / L, H, W, L]``; in
        the output's layout a vector's lanes lay a map apart: ResNet's 3x3 layers at 7 x 7 to
        56 x 56 ran 2-5 % slower, alone, Zen 4). ``copies_in_task``: each task pads the input
        rows it reads (:data:`CHANNEL_TILE_COPIES_IN_TASK`), where they overlap little
        (:func:`tile_copies_in_task`, ``data`` the padded input's read); ``blocks_inside``:
        each task computes every block of output channels over its positions, after that copy
        (:func:`blocks_in_task`), where other axes leave two tasks a core or more."""
        spatial, reduce, channel, lanes = tile
        vec, row = spatial[-1], spatial[-2]
        rows = extents[row] if row != channel else 1
        rt, wt = channel_vector_tile(rows, extents[vec], lanes, wide=shared)
        if copies_in_task and data is not None and row != channel and len(reduce) == 3:
            window = extents[reduce[1]]
            copies_in_task = tile_copies_in_task(sch.get(main), data, (row, rt), window)
            blocks_inside = blocks_inside and copies_in_task
        outer = [loops[i] for i in spatial[:-1]]
        apart = math.prod(extents[i] for i in spatial[:-2] if i != channel) * (rows // rt)
        vectors = channel_tile_vectors(extents[channel], lanes, target, apart) if shared else 1
        inner = []
        if vectors > 1:
            c0, cm, c1 = sch.split(loops[channel], [None, vectors, lanes])
            inner.append(cm)
        else:
            c0, c1 = sch.split(loops[channel], [None, lanes])
        outer[spatial.index(channel)] = c0
        if row != channel:
            r0, r1 = sch.split(loops[row], [None, rt])
            outer[spatial.index(row)] = r0
            inner.append(r1)
        w0, w1 = sch.split(loops[vec], [None, wt])
        tasks = outer if math.prod(extents) >= parallel_min else []
        if blocks_inside and tasks and apart >= 2 * cpu_cores(target):
            outer = [loop for loop in outer if not loop.same_as(c0)] + [c0]
            tasks = outer[:-1]
        reduction = [loops[i] for i in reduce]
        channel_var = sch.get(main).iter_vars[channel].var
        nest = (outer, w0, reduction, [*inner, w1], c1)
        indices = [r.min for r in sch.get(main).writes[0].region]
        axis = next((i for i, index in enumerate(indices) if index.same_as(channel_var)), None)
        back = CHANNEL_VECTOR_WRITE_BACK and (wt == 1 or CHANNEL_VECTOR_WRITE_BACK_WIDE)
        along = axis if back else None
        _in_registers(sch, main, nest, tasks, target, copies_in_task=copies_in_task,
                      vector_axis=along)  # fmt: skip
        if axis is not None:  # the accumulators as the tile holds them: a vector a position
            sch.transform_layout(main, ("write", 0), channels_last(len(indices), axis, lanes))
        if BLOCKED_COPIES and along is not None and tasks and not shared:
            blocked_output(sch, sch.get_loops(main)[0], lanes)
        return sch


def channel_block(stmt, data, row: tuple[int, int], reduce: list[int]) -> int | None:
    """Input channels a block of the reduction takes, or ``None`` for no blocks: where the
    input rows one task reads (its ``rw`` output rows' reach, every channel, the padded width)
    exceed :data:`SLAB_BYTES`, each vector of a row would stream them again from L2; blocks of
    input channels whose rows fit :data:`BLOCK_BYTES` stay in L1 over the row's vectors (the
    partial sums go to a local buffer between blocks). Convolutions over NCHW inputs
    (``rc, ry, rx`` reductions, the channel first; rows laid out by column phase too) only."""
    if len(reduce) != 3 or len(data.region) not in (4, 5) or len(stmt.iter_vars) != 7:
        return None
    row_shape = data.source.shape[3:]  # a padded row (by column phase: phases x columns)
    if not all(isinstance(d, tirx.IntImm) for d in row_shape):
        return None
    read = rows_read(stmt, data, row, reduce[1])
    if read is None:
        return None
    channels, (reach, _) = reduce[0], read
    per_channel = reach * math.prod(int(d) for d in row_shape) * 4
    if channels * per_channel <= SLAB_BYTES:
        return None
    block = largest_divisor(channels, max(1, BLOCK_BYTES // per_channel))
    return block if block < channels else None


def _in_registers(
    sch: s_tir.Schedule, main, nest: tuple, tasks: list, target, block: int | None = None,
    row_tile: bool = False, rows_first: bool = False, copies_in_task: bool = False,
    vector_axis: int | None = None,
) -> s_tir.Schedule:  # fmt: skip
    """Finish a register tile: ``nest`` is ``(outer loops, tile loop, reduction loops, unrolled
    loops, vector loop)`` in that order; ``tasks`` (fused) run in parallel; the tile is
    accumulated in registers under the tile loop and the producers (padding) run in parallel.
    With ``block`` (:func:`channel_block`; ``tasks`` are then every outer loop), the first
    reduction axis is cut in blocks of ``block``, each outside the tile loop: the task's partial
    sums are kept in a local buffer over the row's vectors. ``row_tile`` (the depthwise row
    tile, :data:`DEPTHWISE_ROWS`): the tile is written back unrolled and each task computes the
    producers' part it reads (:func:`_in_task`), as with ``copies_in_task`` alone (the
    tile written back as it was). ``rows_first`` (:func:`rows_before_channels`): the
    producers' parallel pass runs over rows before channels, as the tasks do.
    ``vector_axis``: the output dimension the tile is written back along, its other loops
    unrolled (:func:`~tvm_hetero.schedules.cpu.common.accumulate_in_registers`)."""
    outer, tile, reduction, unrolled, vector = nest
    producers = [sch.get(p).name_hint for p in sch.get_producers(main)]
    anchor, first, fused = tile, reduction[0], None
    if block is None:
        sch.reorder(*outer, tile, *reduction, *unrolled, vector)
    else:
        first, inner = sch.split(reduction[0], [None, block])
        sch.reorder(*outer, first, tile, inner, *reduction[1:], *unrolled, vector)
    if tasks:
        fused = sch.fuse(*tasks)
        sch.parallel(fused)
        anchor = anchor if block is None else fused
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(vector)
    unroll = row_tile or vector_axis is not None
    accumulate_in_registers(sch, main, anchor, first, target, unroll, vector_axis)
    task = fused if row_tile or copies_in_task else None
    for name in producers:
        _in_task(sch, sch.get_sblock(name), task, rows_first)
    return sch


CHANNEL_VECTOR_WRITE_BACK = True
"""Whether a channel-vectorized tile one position wide (:func:`channel_vector_tile`: a grouped
or depthwise convolution's column of positions) writes its accumulators back a vector of
channels at a time, the epilogue computed on that vector, rather than along the output's
width, one position: its epilogue then ran a lane at a time (a SiLU's exponential in scalar
code). Each layer with its activation alone (Intel Xeon, two threads, ``benchmarks/cpu_kernels/
channel_write_back.py``): RegNetZ-B16's grouped 3x3 convolutions with SiLU 0.61 -> 0.28 ms
over 28 x 28 (ONNX Runtime 0.31), EfficientNet-B0's depthwise 3x3 of 1152 channels over 7 x 7
0.118 -> 0.037 ms, MobileNetV3's 5x5 with hard-swish 0.047 -> 0.030, a grouped one with ReLU
0.255 -> 0.230; whole models (``before_and_now.py``, 7 rounds): RegNetZ-B16 1.54 -> 1.14x
ONNX Runtime's time, EfficientNet-B0 and EfficientNetV2-B0 1.23 -> 1.15x, RegNet-Y level."""


CHANNEL_VECTOR_WRITE_BACK_WIDE = True
"""Whether channel-vectorized tiles wider than one position (a convolution with one group
over a small map: a row of up to seven positions) write back a vector of channels at a time
too (:data:`CHANNEL_VECTOR_WRITE_BACK`), rather than along the width, a channel at a time:
the epilogue then ran on vectors of up to seven lanes. Each layer with its activation alone
(Intel Xeon, two threads, ``benchmarks/cpu_kernels/channel_write_back_wide.py``): 3x3
convolutions of stride 2 with SiLU into 14 x 14 and 7 x 7, and of 256 channels over 7 x 7,
five to ten percent faster, with ReLU level; whole models level within the host's noise
(EfficientNetV2, CSPDarkNet-53, ResNets, RegNet-X, MobileNetV4; ``before_and_now.py``)."""


CHANNEL_TILE_COPIES_IN_TASK = True
"""Whether the channel-vectorized tile of a convolution that is not depthwise
(:meth:`Conv._channel_vectors`) pads, inside each parallel task, the input rows that task
reads (:func:`_in_task`), rather than the whole input in a parallel pass of its own before
the tasks. The pass wrote a padded copy as large as the input, read again by the tasks from
wherever it had been written: of MobileNetV4's 3x3 / 2 of 32 -> 32 channels over 112 x 112,
217 us alone, the copy took 57 (a probe timing the kernel without it). In the tasks a stride
of two pads each row about one and a half times, in the cache of the core that reads it:
alone (Intel Xeon, two threads) that layer 218 -> 183 us (ONNX Runtime's in its model about
154), 32 -> 96 over 56 x 56 140 -> 131, 64 -> 128 over 56 x 56 349 -> 331; whole models 1-5 %
faster (RegNet-X/Y, RepVGG, MobileNetV4, ResNet-26D; ``before_and_now.py``). The
width-vectorized tile keeps its pass (MobileNet-V2's stem in the tasks: 87 -> 149 us), and
the depthwise tile its own copy, a task's rows with channels innermost."""


ROWS_BEFORE_CHANNELS = True
"""Whether a convolution whose input outweighs its weights runs its threads over bands of
output rows, every output channel each, rather than blocks of output channels, every row each
(:func:`rows_before_channels`). Channels first, each thread read the whole input, half of it
from the other core's cache (the copy that pads it, cut by channels, was written by both).
Each case alone beside ONNX Runtime (Intel Xeon, family 6 model 167, two threads,
``benchmarks/cpu_kernels/row_bands.py``; ONNX Runtime's time alone includes its layout
reorders): SqueezeNet's 3x3/2 stem 0.281 -> 0.198 ms (ONNX Runtime 0.359), MobileNet-V2's
0.202 -> 0.109 (0.204), ResNet's 7x7 0.77 -> 0.70 (0.82), a 3x3/2 of 64 -> 128 over 56 x 56
0.53 -> 0.39 (0.41); whole models a percent to four faster (``before_and_now.py``)."""


ROW_TILE_TASKS = True
"""Whether a convolution whose threads take bands of rows (:func:`rows_before_channels`) over
a large input runs a task per row tile of a band, every block of output channels inside it,
each task padding (and laying out by column phase) the input rows it reads, where the tasks'
rows overlap little (:func:`row_tile_tasks`); it had run a task per block of channels and row
tile after a parallel pass that padded the whole input into memory, read back by the tasks.
Each layer alone beside ONNX Runtime (AMD EPYC Zen 1, AVX2, two threads, 80 interleaved runs,
``benchmarks/cpu_kernels/row_tile_tasks.py``): MobileNetV4's 3x3 / 2 of 32 -> 32 over
112 x 112 1.35 -> 1.11 ms (ONNX Runtime 0.99), 16 -> 64 over 112 x 112 1.12 -> 0.97 (1.02),
ResNet's 64 -> 128 over 56 x 56 2.26 -> 2.08 (1.66), HRNet's 128 -> 256 over 56 x 56 8.60 ->
7.58 (6.41), MobileNet-V2's stem 0.55 -> 0.50 (0.58). Whole models (``before_and_now.py``):
MobileNetV4 1.5-3 % faster, HRNet-W18-small 4 %, HGNetV2, SqueezeNet and ResNet-50 2 %,
ResNet-18 and MobileNet-V2 level. Tasks of a channel block and a row tile, each padding its
rows, had run twice as slow: every channel block padded the same rows again."""
ROW_TILE_TASK_MIN_BYTES = 512 * 1024
"""Padded input bytes from which :data:`ROW_TILE_TASKS` applies: MobileNetV4's 3x3 / 2 of
32 -> 96 over 56 x 56 (430 KiB, in a core's L2 as the pass writes it) ran 1-4 % slower so."""
ROW_TILE_TASK_OVERLAP = 1.5
"""Most input rows a task pads for each input row its output rows advance over
(:data:`ROW_TILE_TASKS`): a 3x3 window with stride 2 reads 3 rows for 2 in tiles of one row,
5 for 4 in tiles of two; windows of 7 rows (ResNet's stem: 7 for 2) and stride 1 (3 for 1)
keep the pass. At 1.25 (tiles of two rows only) ResNet's and HRNet's 3x3 / 2 over 56 x 56,
tiles of one row, had run 4-6 % and 12-13 % slower (``row_tile_tasks.py``, four runs)."""


CHANNEL_TILE_COPY_OVERLAP = 3.0
"""Most input rows a channel-vectorized tile's task pads for each input row its output rows
advance over (:data:`CHANNEL_TILE_COPIES_IN_TASK`, :func:`tile_copies_in_task`): a 3x3 window
in tiles of one row reads 3 rows for 1 and pads in its tasks; Inception's 7x1 windows (7 for
1), whose every task of a block of output channels padded seven input rows of every channel,
the next task six of them again, pad the whole input once in a pass of their own. Alone beside
ONNX Runtime (Zen 4, two threads, ``benchmarks/cpu_kernels/tall_windows.py``): the 7x1 layers
of 128-192 channels over 17 x 17 5-17 % faster in a pass (two runs); 3x3 windows of 64-512
channels over 7 x 7 to 56 x 56, all in a pass, within five percent either way, and kept in
their tasks."""
CHANNEL_BLOCKS_IN_TASK = True
"""Whether a channel-vectorized tile whose input outweighs its weights runs a task per row
tile with every block of output channels inside it (:func:`blocks_in_task`)."""
CHANNEL_BLOCKS_IN_TASK_BYTES = 512 * 1024
"""The most bytes of weights each such task reads whole (every block's, from L2)."""


def blocks_in_task(data, weights) -> bool:
    """Whether each task of a channel-vectorized tile (one group, each task padding the input
    rows it reads: :data:`CHANNEL_TILE_COPIES_IN_TASK`) computes every block of output
    channels of its row tile, not one: its ``data`` read's buffer outweighs its ``weights``'
    (:func:`rows_before_channels`) and the weights are at most
    :data:`CHANNEL_BLOCKS_IN_TASK_BYTES`. A task of one block copied its input rows for that
    block alone, every block copying the same rows again: a temporal 3x1x1 convolution (S3D,
    R(2+1)D) reads three frames' rows of every input channel for one row of output."""
    if not CHANNEL_BLOCKS_IN_TASK or weights is None:
        return False
    light = (buffer_bytes(weights.source) or 0) <= CHANNEL_BLOCKS_IN_TASK_BYTES
    return light and rows_before_channels(data, weights)


def tile_copies_in_task(stmt, data, row: tuple[int, int], window: int) -> bool:
    """Whether a channel-vectorized tile's tasks pad the input rows they read: a tile of
    ``row[1]`` output rows (``row[0]`` the row axis of ``stmt``) with a window ``window`` rows
    tall reads at most :data:`CHANNEL_TILE_COPY_OVERLAP` times the input rows it advances over
    (:func:`reads_within`; where that cannot be read, it does)."""
    return reads_within(stmt, data, row, window, CHANNEL_TILE_COPY_OVERLAP) is not False


def row_tile_tasks(stmt, data, row: tuple[int, int], window: int) -> bool:
    """Whether a convolution whose threads take bands of rows pads its input inside tasks of
    one row tile (:data:`ROW_TILE_TASKS`): its padded input (``data``, the read of ``stmt``
    along the rows, ``row`` its axis and the tile's rows) weighs at least
    :data:`ROW_TILE_TASK_MIN_BYTES` and a tile with a window ``window`` rows tall reads at
    most :data:`ROW_TILE_TASK_OVERLAP` times the rows it advances over (:func:`reads_within`)."""
    if not ROW_TILE_TASKS or (buffer_bytes(data.source) or 0) < ROW_TILE_TASK_MIN_BYTES:
        return False
    return reads_within(stmt, data, row, window, ROW_TILE_TASK_OVERLAP) is True


def reads_within(stmt, data, row: tuple[int, int], window: int, most: float) -> bool | None:
    """Whether a tile of ``row[1]`` output rows (``row[0]`` the row axis of ``stmt``) with a
    window ``window`` rows tall reads at most ``most`` times the input rows it advances over
    (:func:`rows_read`); ``None`` where that cannot be read."""
    read = rows_read(stmt, data, row, window)
    if read is None:
        return None
    reach, stride = read
    return reach <= most * row[1] * stride


def rows_read(stmt, data, row: tuple[int, int], window: int) -> tuple[int, int] | None:
    """``(reach, stride)``: the input rows a tile of ``rw`` output rows reads with a window
    ``window`` rows tall, and the input rows an output row advances by, where ``data`` (the
    read of ``stmt`` along the rows, index 2) moves a constant multiple of the row axis
    (``row``: its index and the tile's rows); else ``None``."""
    axis, rw = row
    stride = index_step(data.region[2].min, stmt.iter_vars[axis].var)
    return None if stride is None else ((rw - 1) * stride + window, stride)


def rows_before_channels(data, weights) -> bool:
    """Whether a convolution's threads take bands of output rows first: its ``data`` read's
    buffer outweighs its ``weights``' (:func:`~tvm_hetero.schedules.cpu.common.split_first`),
    as in stems of three input channels and early layers over large maps. Each thread then
    reads its band of the input, pads it (the copy is cut by rows too) and reads every weight.
    The rows are cut in one band a core where the cores divide them, each band's channel
    blocks outermost (a thread writes each output channel's rows in order); in bands of one
    row tile otherwise. With rows of one tile outermost instead, VGG's first layer (3 -> 64
    over 224 x 224) had run 0.63 -> 0.68 ms, its 64 output planes written a tile at a time
    each."""
    if not ROWS_BEFORE_CHANNELS or weights is None:
        return False  # a buffer of symbolic shape weighs nothing here
    return split_first(buffer_bytes(data.source) or 0, buffer_bytes(weights.source) or 0)


def _deinterleave(sch: s_tir.Schedule, main, index: int, w: tirx.Var) -> bool:
    """Lay the input's columns out by phase where the convolution reads them with a stride
    ``s``: ``x[..., c]`` at ``x'[..., c % s, c // s]``, so a vector of outputs reads
    consecutive addresses (``x'[..., kw % s, w + kw // s]``) instead of gathering every lane.
    The copy that pads the input writes the new layout (a copy is made where there is none);
    it runs once per call and every channel tile reads it. ResNet-18's strided 3x3
    convolutions ran 1.2-1.4x faster, its 7x7 stem 1.8x. The copy iterates in the layout it
    writes, a phase's columns innermost and vectorized (:data:`PHASE_ORDERED_COPY`). Whether it
    did (not: unit stride, or a width the stride does not divide)."""
    read = sch.get(main).reads[index]
    stride, width = column_step(read, w), read.source.shape[-1]
    if stride is None or stride < 2:
        return False
    if not isinstance(width, tirx.IntImm) or int(width) % stride:
        return False
    block = _input_copy(sch, main, index)
    ndim = len(read.region)
    phases = tirx.IndexMap.from_func(
        lambda *i: (*i[:-1], i[-1] % stride, i[-1] // stride), ndim=ndim, index_dtype="int32"
    )
    sch.transform_layout(block, ("write", 0), phases)
    if PHASE_ORDERED_COPY:
        try:
            sch.transform_block_layout(block, phases)
        except ScheduleError:
            return True  # a copy whose loops do not map one to one: it keeps its order
        columns = sch.get_loops(block)[-1]
        extent = int(sch.get(columns).extent)
        if extent > PHASE_COPY_MAX_VECTOR:  # vectors of at most 64 columns, or none
            factor = next((f for f in (64, 32, 16, 8) if extent % f == 0), None)
            if factor is None:
                return True
            columns = sch.split(columns, [None, factor])[1]
        sch.vectorize(columns)
    return True


PHASE_COPY_MAX_VECTOR = 512
"""The most columns of a phase that :func:`_deinterleave`'s copy vectorizes as one loop; a
longer row is split in vectors of 64, 32, 16 or 8 columns (the largest that divides it), else
left a scalar loop. LLVM's time grows about as the cube of the vector's length: a 1-D kernel
of eight output channels over phases of 256, 512 and 1,024 columns compiled in 0.9, 6 and
50 s (AMD Zen 4), and a 1-D audio front end (kernel 10, stride 5, over 16,000 samples: a
phase of 3,200 columns; transformers' UniSpeechSat built without fusion, as Lee et al.'s and
EOP's per-operator runs build it) did not finish in ten minutes. The corpus's longest phases
(MobileNet-V5's 385 columns over 768 x 768, LR-ASPP's 257 over 512 x 512) stay one vector."""


PHASE_ORDERED_COPY = True
"""The copy that lays a strided convolution's input out by column phase (:func:`_deinterleave`)
iterates in the layout it writes, each phase's columns innermost, vectorized: it had iterated
in the input's order, a scalar loop writing every other element, a branch for the padding each.
Stems of three input channels, where the copy is a large share of the work, alone beside ONNX
Runtime (AMD EPYC Zen 4, two threads, 40 interleaved runs,
``benchmarks/cpu_kernels/phase_ordered_copies.py``): MobileNet-V2's 3x3 / 2 of 3 -> 32 over
224 x 224 0.288 -> 0.216 ms (ONNX Runtime 0.201), ShuffleNet's 3 -> 24 0.243 -> 0.204 (0.179),
MobileNet-V3's 3 -> 16 0.195 -> 0.181 (0.174), ResNet's 7 x 7 1.47 -> 1.41 (1.32); a 3x3 / 2
of 64 -> 128 over 112 x 112 the same. Whole models (``before_and_now.py``, 9 rounds) within
the host's noise: MobileNet-V2 1.12 -> 1.08x ONNX Runtime's time, EfficientNet-B0 1.10 ->
1.06x, MobileNet-V3 1.03 / 1.05x."""


def _input_copy(sch: s_tir.Schedule, main, index: int):
    """The block that writes ``main``'s read ``index`` (the copy that pads it), or a copy of it
    made for the purpose: a block whose output layout may be changed."""
    read = sch.get(main).reads[index]
    writers = [
        p for p in sch.get_producers(main) if sch.get(p).writes[0].source.same_as(read.source)
    ]
    return writers[0] if writers else sch.cache_read(main, index, "global")


def _channels_innermost(sch: s_tir.Schedule, main, index: int, lanes: int):
    """Lay a depthwise convolution's ``[N, C, H, W]`` input (read ``index`` of ``main``) out as
    ``[N, C / L, H, W, L]`` (``lanes`` channels innermost) and return the block that writes it:
    the copy that pads it (a copy is made where there is none), iterating in the new layout
    (a vector of channels is read lane by lane, written whole)."""
    block = _input_copy(sch, main, index)
    blocked = channels_last(4, 1, lanes)
    sch.transform_layout(block, ("write", 0), blocked)
    sch.transform_block_layout(block, blocked)
    return block


BLOCKED_COPIES = True
"""Whether the channel-vectorized tile of a depthwise convolution, or of a grouped one whose
tile's channels do not share their inputs (:func:`shares_inputs`), writes its output (and a
depthwise one reads its input) through a buffer of the task's positions with a vector of
channels innermost, copied to or from the planar map by
:class:`~tvm_hetero.passes.BlockedCopiesAsTransposes` (:func:`blocked_input`,
:func:`blocked_output`), rather than writing (reading) each position's vector of channels to
(from) the planar map a lane at a time: about twenty instructions a vector, against the 9 to
25 multiply-adds a depthwise tile computes it with. Each layer alone with ReLU6, ONNX Runtime
beside (Intel Xeon, family 6 model 207, two threads, ``benchmarks/cpu_kernels/
blocked_copies.py``): depthwise layers over 7 x 7 0.044 -> 0.030 ms (3x3 of 960; ONNX Runtime
0.064) and 0.051 -> 0.037 (5x5 of 1152; 0.075), into 7 x 7 with a stride of 2 0.092 -> 0.062
(5x5 of 672) and 0.054 -> 0.038 (3x3 of 576), grouped 3x3 layers (groups of 16) six to eleven
percent faster; a one-group convolution's tile (hundreds of multiply-adds a vector) ran up to
four percent slower so and keeps writing a lane at a time. Whole mobile networks level to a
tenth faster within the host's noise (``before_and_now.py``, 5 rounds); replayed in the
model's order, MobileNet-V2's depthwise layers over 7 x 7 a third faster, RegNetZ-B16's
grouped layers a twentieth to a tenth."""


def blocked_input(sch: s_tir.Schedule, pad, task, lanes: int) -> None:
    """Give the depthwise channel tile's padding copy ``pad`` (laid out ``[N, C / L, H, W,
    L]``, ``lanes`` channels innermost) a copy of the input it reads laid out the same way,
    computed in ``task``: a loop of positions (rows and columns fused) over a vector of
    channels, which :class:`~tvm_hetero.passes.BlockedCopiesAsTransposes` runs as
    transposes; not where ``pad`` writes over :data:`BLOCKED_COPY_MAX_BYTES` in a task (a
    depthwise layer of stride 2 from 28 x 28, its copies together larger than L1, ran slower
    so) or where the copy would be predicated (a task's tile of rows reaching past the map's
    edge), which the pass leaves as it is."""
    if _bytes_in(sch, pad, task) > BLOCKED_COPY_MAX_BYTES:
        return
    trial = sch.copy()
    if _predicated(trial, blocked_read(trial, pad, 0, task, lanes)):
        return
    blocked_read(sch, pad, 0, task, lanes)


def _predicated(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` runs under a condition (its realize's predicate is not true)."""
    stmt = sch.get(block)
    for realize, _ in realizes(sch.mod["main"].body):
        if realize.block.same_as(stmt):
            predicate = realize.predicate
            return not (isinstance(predicate, tirx.IntImm) and int(predicate) == 1)
    return True


def blocked_output(sch: s_tir.Schedule, task, lanes: int) -> None:
    """Have the block that writes a channel-vectorized tile's ``[N, C, H, W]`` output (its
    epilogue folded in) write it laid out ``[N, C / L, H, W, L]`` into a buffer of ``task``'s
    positions, copied out by a loop of positions over a vector of channels
    (:class:`~tvm_hetero.passes.BlockedCopiesAsTransposes`), where that buffer is at most
    :data:`BLOCKED_COPY_MAX_BYTES` and the output one 4-D map."""
    out = _output_writer(sch)
    if out is None or len(sch.get(out).writes[0].source.shape) != 4:
        return
    if _bytes_in(sch, out, task) > BLOCKED_COPY_MAX_BYTES:
        return
    copy = sch.cache_write(out, 0, "global")
    blocked = channels_last(4, 1, lanes)
    sch.transform_layout(out, ("write", 0), blocked)
    sch.transform_block_layout(copy, blocked)
    sch.reverse_compute_at(copy, task)
    positions_by_vectors(sch, copy, task)


def _bytes_in(sch: s_tir.Schedule, block, task) -> int:
    """Bytes of float32 that ``block`` writes in one iteration of ``task`` (the product of
    its loops below ``task``; all of them where ``task`` is not one of its loops)."""
    loops = [sch.get(loop) for loop in sch.get_loops(block)]
    inside = next((k + 1 for k, loop in enumerate(loops) if loop.same_as(sch.get(task))), 0)
    return 4 * math.prod(int(loop.extent) for loop in loops[inside:])


def _output_writer(sch: s_tir.Schedule):
    """The one block that writes what no block reads (the function's output), or ``None``."""
    found, stack = [], [sch.get_sblock("root")]
    while stack:
        for child in sch.get_child_blocks(stack.pop()):
            stack.append(child)
            if not sch.get_consumers(child) and not sch.get_child_blocks(child):
                found.append(child)
    return found[0] if len(found) == 1 else None


def column_step(region, var: tirx.Var) -> int | None:
    """How far ``region``'s innermost index moves per step of ``var`` (``w + kw``: 1,
    ``2 * w + kw``: 2), or ``None`` when it is not a constant multiple."""
    return index_step(region.region[-1].min, var)


def _row_tiled(stmt: s_tir.stmt.SBlock, form: ConvForm, data, w: tirx.Var) -> bool:
    """Whether ``stmt`` is a depthwise convolution over ``[N, C, H, W]`` whose columns it reads
    a step of :data:`ROW_TILED_STEPS` apart (:data:`DEPTHWISE_ROWS`): not a grouped one or a
    pool."""
    return depthwise_channel(stmt, form) is not None and column_step(data, w) in ROW_TILED_STEPS


def _in_task(sch: s_tir.Schedule, producer, task, rows_first: bool = False) -> None:
    """Compute ``producer`` (the copy that pads the input) inside the parallel ``task`` loop,
    the part that task reads, its rows vectorized; where there is no task or it cannot move
    there, a parallel pass of its own (:func:`_parallel_spatial`), over rows before channels
    where the convolution's threads take bands of rows (``rows_first``)."""
    if task is not None:
        try:
            sch.compute_at(producer, task)
        except ScheduleError:
            task = None
    if task is None:
        loops = sch.get_loops(producer)
        if rows_first and len(loops) >= 4:
            sch.reorder(loops[2], loops[1])
        _parallel_spatial(sch, producer)
        return
    sch.vectorize(sch.get_loops(producer)[-1])


def _parallel_spatial(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> None:
    loops = sch.get_loops(block)
    if len(loops) >= 2:
        sch.parallel(sch.fuse(*loops[:-1]))


class Pool(Conv):
    """Max and average pooling: the convolution rule's tile with one operand (no weights, so
    no channel axis): a vector of output columns reduced over the window in registers,
    channels in parallel (as for depthwise convolutions), the padding a separate pass. Before
    it, pools fell to the fallback rule (SqueezeNet's three max pools took a third of its
    time)."""

    name = "pool"
    operands = 1
    min_width = MIN_WIDTH
    """A pool to a row of 1-3 columns (a global pool) is the reduction rule's: no channel tile
    shares its reads."""
