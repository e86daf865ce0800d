"""CPU schedule rules: which rule takes which kernel, and equal numbers to TVM's default build."""

import math
import re
from contextlib import ExitStack
from unittest.mock import patch

import numpy as np
import pytest
import tvm
from conftest import fused_body, fused_kernels, host_has_avx512
from tvm import relax, topi

from tvm_hetero._compat import PrimFunc, VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.ir.sblocks import realizes
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu import cpu_rules
from tvm_hetero.schedules.cpu.common import vector_bits
from tvm_hetero.schedules.cpu.conv import Conv, channel_vector_tile, register_tile
from tvm_hetero.schedules.cpu.matmul import (
    A_CACHED_BYTES,
    deep_panels,
    image_streams,
    position_bands_apply,
    row_groups,
    token_bands_apply,
)
from tvm_hetero.schedules.cpu.reduction import Reduction, recomputed

AVX2 = {**cpu_device().target, "mcpu": "znver3", "num-cores": 2}
"""The schedules' expected tiles are written for 256-bit vectors (8 float lanes) and two threads:
the target is pinned, not the host's (an AVX-512 host has 16 lanes and other tiles, a host of
more cores other shares of the parallel loops); znver3 code runs on any later x86 CPU with
AVX2."""
CPU = make_target(AVX2)
SERIAL = make_target({**AVX2, "num-cores": 1})


def _module(params, body, target=CPU):
    """Legalized, fused module of ``body(*vars)``, kernels tagged with ``target``."""
    return fused_body(params, body, target)


def _crop(x, width):
    return relax.op.strided_slice(x, axes=[3], begin=[0], end=[width])


def _run(mod, arrays, target=CPU):
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def _packed_pointwise(cin: int, cout: int, side: int, relu: bool):
    """``(target, module, input, runs)``: a 1x1 convolution of ``cin`` -> ``cout`` channels
    over ``side`` x ``side`` (and a ReLU) with constant weights packed as the build packs them,
    for an AVX-512 target; ``runs``: whether this host can run its code."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    target = make_target({**AVX2, "mcpu": "skylake-avx512"})
    weights = np.random.default_rng(0).standard_normal((cout, cin, 1, 1)).astype("float32")

    def body(bb, x):
        y = relax.op.nn.conv2d(x, relax.const(weights))
        return relax.op.nn.relu(y) if relu else y

    mod = _module([(1, cin, side, side)], body, target)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    x = np.random.default_rng(1).standard_normal((1, cin, side, side)).astype("float32")
    return target, mod, x, host_has_avx512()


def _gelu(bb, x):
    return relax.op.nn.gelu(x)


def _torch_gelu(y):
    c = relax.const
    erf = relax.op.erf(relax.op.divide(y, c(1.4142135, "float32")))
    return relax.op.multiply(
        relax.op.multiply(y, relax.op.add(erf, c(1.0, "float32"))), c(0.5, "float32")
    )


CASES = {
    "matmul": ([(16, 32), (32, 48)], lambda bb, x, w: relax.op.matmul(x, w), "matmul"),
    "linear_gelu": (
        [(8, 32), (64, 32), (64,)],
        lambda bb, x, w, b: relax.op.nn.gelu(
            relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), b)
        ),
        "matmul",
    ),
    "linear_erf_gelu_torch_order": (  # x * (erf(x / sqrt 2) + 1) * 0.5: the last multiply is
        [(8, 32), (32, 64), (64,)],  # reached by two paths (it once aborted the build)
        lambda bb, x, w, b: _torch_gelu(relax.op.add(relax.op.matmul(x, w), b)),
        "matmul",
    ),
    "dense_weight_nk": (
        [(128, 64), (96, 64)],
        lambda bb, x, w: bb.emit_te(topi.nn.dense, x, w),
        "matmul",
    ),
    "matmul_prime_columns": (  # 61 columns: padded to whole panels (GPT-2's vocabulary)
        [(8, 32), (32, 61), (61,)],
        lambda bb, x, w, b: relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w), b)),
        "matmul",
    ),
    "attention_scores_197": (  # ViT's 197 tokens, keys transposed
        [(2, 197, 16), (2, 197, 16)],
        lambda bb, q, k: relax.op.matmul(q, relax.op.permute_dims(k, [0, 2, 1])),
        "matmul",
    ),
    "batch1_linear_bias_relu": (  # one row (dlight sees no I axis): 1 x NR tiles
        [(1, 64), (48, 64), (48,)],
        lambda bb, x, w, b: relax.op.nn.relu(
            relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), b)
        ),
        "matmul",
    ),
    "batch1_prime_columns": (
        [(1, 1, 32), (32, 61)],
        lambda bb, x, w: relax.op.matmul(x, w),
        "matmul",
    ),
    "rows_197_padded_to_tiles": (  # ViT's tokens: 200 rows of 4-row tiles, 3 dropped
        [(197, 32), (32, 64), (64,)],
        lambda bb, x, w, b: relax.op.add(relax.op.matmul(x, w), b),
        "matmul",
    ),
    "conv1x1_odd_map": (  # a 1x1 convolution is weights x image: 13x13 = 169 columns, padded
        [(1, 16, 13, 13), (24, 16, 1, 1), (1, 24, 1, 1)],
        lambda bb, x, w, b: relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(x, w), b)),
        "matmul",
    ),
    "conv1x1_stride2": (  # x[c, 2y, 2x]: strided, the convolution rule's (de-interleaved copy)
        [(1, 16, 8, 8), (32, 16, 1, 1)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2),
        "conv",
    ),
    "squeeze_excite_scale": (  # x * sigmoid(conv1x1(s)): the scale broadcasts over x's map,
        [(1, 8, 1, 1), (32, 8, 1, 1), (1, 32, 7, 7)],  # it cannot fold into the tile (0.27's
        lambda bb, s, w, x: relax.op.multiply(  # reverse_compute_inline crashed on it)
            x, relax.op.sigmoid(relax.op.nn.conv2d(s, w))
        ),
        "matmul",
    ),
    "batch_matmul": (
        [(4, 16, 8), (4, 24, 8)],
        lambda bb, q, k: relax.op.matmul(q, relax.op.permute_dims(k, [0, 2, 1])),
        "matmul",
    ),
    "conv3x3_bias_relu": (
        [(1, 8, 12, 12), (16, 8, 3, 3), (1, 16, 1, 1)],
        lambda bb, x, w, b: relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(x, w, padding=1), b)),
        "conv",
    ),
    "conv3x3_row_pairs": (  # one vector per row, 10 rows: 4 channels x 2 rows
        [(1, 8, 10, 8), (8, 8, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1),
        "conv",
    ),
    "conv3x3_odd_rows": (  # one vector per row, 7 rows: 8 channels x 1 vector (a predicated
        # row pair lost its predicate in the write-back when a crop was folded in, 0.27)
        [(1, 8, 7, 8), (16, 8, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1),
        "conv",
    ),
    "conv3x3_crop_add_relu": (  # as PadConvolutionOutputs leaves a residual block: 7 rows
        [(1, 16, 7, 8), (16, 16, 3, 3), (1, 16, 7, 8)],
        lambda bb, x, w, r: relax.op.nn.relu(
            relax.op.add(_crop(relax.op.nn.conv2d(x, w, padding=(1, 1, 1, 2)), 8), r)
        ),
        "conv",
    ),
    "conv3x3_rows_crop_add_relu": (  # as PadConvolutionOutputs leaves 7 x 7: 8 x 8, cropped
        [(1, 16, 7, 7), (16, 16, 3, 3), (1, 16, 7, 7)],
        lambda bb, x, w, r: relax.op.nn.relu(
            relax.op.add(
                relax.op.strided_slice(
                    relax.op.nn.conv2d(x, w, padding=(1, 1, 2, 2)),
                    axes=[2, 3],
                    begin=[0, 0],
                    end=[7, 7],
                ),
                r,
            )
        ),
        "conv",
    ),
    "conv_stride2_odd_width": (  # padded width 17: not de-interleaved, read lane by lane
        [(1, 4, 15, 15), (8, 4, 3, 3)],
        lambda bb, x, w: relax.op.nn.relu(relax.op.nn.conv2d(x, w, strides=2, padding=1)),
        "conv",
    ),
    "conv_stride2": (  # padded width 18: the padding copy is laid out by column phase
        [(1, 4, 16, 16), (8, 4, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2, padding=1),
        "conv",
    ),
    "conv3x3_two_columns": (  # a tile cut by columns: rows of 2 in vectors of 2
        [(1, 8, 9, 4), (16, 8, 3, 3)],
        lambda bb, x, w: relax.op.nn.relu(relax.op.nn.conv2d(x, w)),
        "conv",
    ),
    "conv3x3_one_column": (
        [(1, 8, 9, 3), (16, 8, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w),
        "conv",
    ),
    "conv3x3_map_2x2": (  # ResNet's last stage at 64 pixels
        [(1, 16, 2, 2), (16, 16, 3, 3), (1, 16, 1, 1)],
        lambda bb, x, w, b: relax.op.add(relax.op.nn.conv2d(x, w, padding=1), b),
        "conv",
    ),
    "conv_stride2_to_one_column": (
        [(1, 8, 4, 2), (8, 8, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2, padding=1),
        "conv",
    ),
    "depthwise_two_columns": (
        [(1, 8, 6, 4), (8, 1, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, groups=8),
        "conv",
    ),
    "global_avg_pool": (  # a row of one column: the reduction rule's
        [(1, 16, 7, 7)],
        lambda bb, x: relax.op.nn.avg_pool2d(x, pool_size=7),
        "reduction",
    ),
    "depthwise": (
        [(1, 8, 12, 12), (8, 1, 3, 3)],
        lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1, groups=8),
        "conv",
    ),
    "softmax": ([(8, 64)], lambda bb, x: relax.op.nn.softmax(x), "reduction"),
    "softmax_one_row": ([(1, 1000)], lambda bb, x: relax.op.nn.softmax(x), "reduction"),
    "instance_norm_long_rows": (  # rows of 4096: summed in lanes, rows in parallel
        [(1, 4, 64, 64)],
        lambda bb, x: relax.op.subtract(x, relax.op.mean(x, axis=[2, 3], keepdims=True)),
        "reduction",
    ),
    "group_norm_one_group": (  # ONNX's GroupNorm(1, C): a mean over all, broadcast back
        [(1, 1, 4096)],
        lambda bb, x: relax.op.subtract(x, relax.op.mean(x, axis=[2], keepdims=True)),
        "reduction",
    ),
    "add_relu": (
        [(64, 64), (64, 64)],
        lambda bb, x, y: relax.op.nn.relu(relax.op.add(x, y)),
        "injective",
    ),
    "transpose": ([(32, 48)], lambda bb, x: relax.op.permute_dims(x), "injective"),
    "bias_add_odd_width": (  # a width the lanes do not divide: the vector stays in a row
        [(1, 16, 6, 22), (1, 16, 1, 1)],
        lambda bb, x, b: relax.op.nn.relu(relax.op.add(x, b)),
        "injective",
    ),
    "bias_add_unit_spatial": (  # (1, C, 1, 1): the channels are the vector
        [(1, 64, 1, 1), (1, 64, 1, 1)],
        lambda bb, x, b: relax.op.add(x, b),
        "injective",
    ),
    "max_pool": (
        [(1, 4, 8, 8)],
        lambda bb, x: relax.op.nn.max_pool2d(x, pool_size=3, padding=1),
        "pool",
    ),
    "max_pool_stride2_ceil": (  # SqueezeNet's: 111 -> 55, the right edge padded with -inf
        [(1, 4, 23, 23)],
        lambda bb, x: relax.op.nn.max_pool2d(x, pool_size=3, strides=2, ceil_mode=True),
        "pool",
    ),
    "avg_pool_then_relu": (
        [(1, 4, 16, 16)],
        lambda bb, x: relax.op.nn.relu(relax.op.nn.avg_pool2d(x, pool_size=2, strides=2)),
        "pool",
    ),
    "max_pool1d_stride2": (
        [(1, 4, 40)],
        lambda bb, x: relax.op.nn.max_pool1d(x, pool_size=3, strides=2, padding=1),
        "pool",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_choice_and_numbers_match_default(case):
    shapes, body, rule = CASES[case]
    mod = _module(shapes, body)
    scheduled = schedule_kernels(mod, "rules")
    labels = {c.label for c in kernel_choices(scheduled)}
    assert all(label.startswith("rule:") for label in labels), labels
    if rule is not None:
        assert f"rule:{rule}" in labels
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 4096), (1, 2, 2048), (4, 1, 1024), (2, 1, 8192)])
def test_a_mean_broadcast_back_is_summed_once_not_once_per_element(shape):
    """dlight put the sum under the element-wise loop when the reduction's rows were not its
    loops (one group: 4096 sums of 4096 elements); now each reduction runs once over its own
    domain, in vector lanes."""
    mod = _module([shape], lambda bb, x: relax.op.subtract(
        x, relax.op.mean(x, axis=[2], keepdims=True)))  # fmt: skip
    (kernel,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    dlight = tvm.s_tir.dlight.cpu.Reduction().apply(kernel, CPU, False)
    sch = Reduction().schedule(kernel, CPU)
    assert recomputed(sch) == 1
    script = sch.mod["main"].script()
    if shape[0] * shape[1] == 1:
        assert recomputed(dlight) == shape[2]  # the bug this guards against
    assert "_rf" in script, script  # every row summed in vector lanes
    if shape[0] * shape[1] > 1:  # rows in parallel
        assert "T.parallel" in script


@pytest.mark.parametrize("shape", [(1, 4, 40, 16), (2, 3, 10, 8), (1, 2, 12, 4)])
def test_a_softmax_over_tokens_reduces_each_column_once(shape):
    """CoaT's factorized attention takes a softmax over the tokens (``axis=2`` of heads x
    tokens x channels). dlight parallelised the output's fused heads and tokens and put each
    column's max and sum under that loop, which the reductions read only the heads of: every
    column reduced again for each token (CoaT-Lite Tiny's 785 tokens: 0.99 s a softmax, 7x ONNX
    Runtime's time for the model), hidden from the check for loops the block does not use,
    since it uses the fused loop's variable. The rule now counts a block's runs against its
    domain and reduces each column once, a vector of columns (the channels, contiguous) a
    token: in lanes of tokens, read a channel apart, 8 x 3,137 x 8 took 2.3 ms against ONNX
    Runtime's 0.84."""
    mod = _module([shape], lambda bb, x: relax.op.nn.softmax(x, axis=2))
    (kernel,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    dlight = tvm.s_tir.dlight.cpu.Reduction().apply(kernel, CPU, False)
    assert recomputed(dlight) >= shape[2]  # the bug this guards against
    sch = Reduction().schedule(kernel, CPU)
    assert recomputed(sch) == 1
    script = sch.mod["main"].script()
    reductions = 0
    for realize, loops in realizes(sch.mod["main"].body):  # each column once, in lanes
        if realize.block.name_hint.endswith("_update"):
            reductions += 1
            *outer, tokens, columns = loops
            assert columns.kind == tvm.tirx.ForKind.VECTORIZED, script
            assert int(tokens.extent) == shape[2], script
            assert int(columns.extent) == min(shape[3], 8), script  # AVX2's lanes
            assert shape[2] not in [int(f.extent) for f in outer], script
    assert reductions == 2, script  # the max and the sum
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    scheduled = schedule_kernels(mod, "rules")
    np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("side", "window", "lanes"),
    [(28, True, 8), (12, True, 8), (14, True, 7), (7, True, 7), (56, False, 8), (3, False, None),
     (11, False, None)],
)  # fmt: skip
def test_a_mean_over_a_map_is_summed_as_one_run_of_vectors(side, window, lanes):
    """A squeeze-excite's mean over ``side x side``: a row of 28, 12, 14 or 7 is no whole
    number of vectors of 8 (AVX2) but the map is (or 7 x 7's 49 is of 7, 14 x 14's 196 of 7),
    so both loops are fused into one run of the map's memory summed in that many lanes
    (before: one scalar chain a channel, 0.056 ms over 144 x 28 x 28 where ONNX Runtime takes
    0.015). A row of 56 is whole vectors already; 3 x 3 and 11 x 11 have no 4 lanes or more
    that divide them into 4 vectors or more, and keep dlight's schedule."""
    mod = _module([(1, 6, side, side)], lambda bb, x: relax.op.mean(x, axis=[2, 3], keepdims=True))
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:reduction"}
    (script,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert ("k2_k3_fused" in script) == window, script
    assert ("_rf" in script) == (lanes is not None), script
    if lanes is not None:
        assert f"T.vectorized(T.int64({lanes}))" in script, script
    x = np.random.default_rng(0).standard_normal((1, 6, side, side)).astype("float32")
    np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_run(scheduled, [x]), x.mean((2, 3), keepdims=True), rtol=1e-5)


@pytest.mark.parametrize(
    ("shape", "lanes", "whole"),
    [
        ((2, 12, 128), 8, None),
        ((2, 3, 44), 4, None),
        ((1, 6, 1500), 8, 187),
        ((2, 4, 197), 8, 24),
        ((2, 3, 6), 6, None),
        ((3, 2), None, None),
    ],
)
def test_softmax_rows_are_reduced_in_lanes(shape, lanes, whole):
    """Each row's max and sum as ``lanes`` partial results a vector updates (the largest power
    of two of 4 or more that divides the row, up to the CPU's 8 lanes), then combined. A row no
    such vector divides (197, a prime; 1,500, whose largest divisor up to 8 is 6) is padded to
    whole vectors of 8 and each loop over it partitioned into its whole vectors and the last; a
    row shorter than a vector takes its largest divisor (6 lanes for 6) or keeps dlight's
    schedule (2)."""
    mod = _module([shape], lambda bb, x: relax.op.nn.softmax(x, axis=-1))
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:reduction"}
    (script,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert ("_rf" in script) == (lanes is not None), script
    if lanes is not None:
        assert f"T.vectorized(T.int64({lanes}))" in script and "T.parallel" in script
    if whole is not None:  # max, exp, sum and divide: whole vectors, then the last
        assert script.count(f"in range(T.int64({whole})):") == 4, script
        assert script.count(f"in range(T.int64({whole}), T.int64({whole + 1})):") == 4, script
    x = 4 * np.random.default_rng(0).standard_normal(shape).astype("float32") - 20
    np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("weights", "groups", "channel", "group"),
    [((32, 16, 3, 3), 1, 1, None), ((32, 8, 3, 3), 2, 1, 16), ((16, 1, 3, 3), 16, None, None)],
    ids=["plain", "groups of 16", "depthwise"],
)
def test_a_grouped_convolution_has_a_channel_axis_and_its_group(weights, groups, channel, group):
    """The data reads a grouped convolution's output channel only as its group's first input
    channel (``ff // G * G + rc``): the channel axis is found, with ``G``; a depthwise one has
    none (its data reads every output channel's own input)."""
    from tvm_hetero.schedules.cpu.conv import conv_form

    channels = weights[1] * groups
    mod = _module([(1, channels, 8, 8), weights],
                  lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1, groups=groups))  # fmt: skip
    (kernel,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = tvm.s_tir.Schedule(kernel)
    (main,) = [
        b for b in sch.get_child_blocks(sch.get_sblock("root")) if "conv" in sch.get(b).name_hint
    ]
    form = conv_form(sch.get(main))
    assert (form.channel, form.group) == (channel, group)


def test_an_image_padded_to_whole_panels_is_packed_a_vector_of_columns_at_a_time():
    """A 1x1 convolution over 13 x 13 (169 columns, no vector divides them): the image is packed
    into padded panels with 16 consecutive columns of a channel as one vector (the last panel
    apart), not column by column; numbers equal TVM's default build."""
    shapes = [(1, 32, 13, 13), (8, 32, 1, 1)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.relu(relax.op.nn.conv2d(x, w)))
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    (script,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    start = script.index('reindex_pad_i1_00_partition"')
    whole = script[start : script.index('sblock("pad_temp_reindex_pad_i1_00")')]
    assert "for i1_1 in T.vectorized(T.int64(16))" in whole, script
    assert "in range(T.int64(10), T.int64(11))" in script, script  # the last panel apart
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 2, 17, 17), (2, 4, 197)])
def test_padded_rows_on_a_serial_target_are_scheduled_serial_not_replayed(shape):
    """A one-core target's kernel is the rule's schedule replayed without ``parallel`` on the
    original kernel; a padded row's schedule starts from the padded kernel, so replayed on the
    original its partial sums read past the row (an EdgePipe stage of a ViT on one core
    differed by 2.3). The rule leaves such rows serial itself; numbers equal TVM's build."""
    mod = _module([shape], lambda bb, x: relax.op.nn.softmax(x, axis=-1), target=SERIAL)
    scheduled = schedule_kernels(mod, "rules")
    (script,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert "_rf" in script and "T.parallel" not in script, script
    x = 4 * np.random.default_rng(0).standard_normal(shape).astype("float32") - 20
    got, expected = _run(scheduled, [x], SERIAL), _run(mod, [x], SERIAL)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_a_step_over_the_row_read_once_is_inlined_into_its_reader():
    """The fast softmax's ``x - max`` is read by its ``exp`` alone: computed inside it, no row
    stored between them; the ``exp``, summed and divided, stays a row of its own."""
    from tvm_hetero._compat import VDevice
    from tvm_hetero.passes import LegalizeWithFastMath

    vdevice = VDevice(CPU, 0, "global")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 197), "float32", vdevice))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.softmax(x, axis=-1))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdevice])
    mod = LegalizeWithFastMath()(mod)
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    (kernel,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    assert "T_softmax_delta" in kernel.script()
    script = Reduction().schedule(kernel, CPU).mod["main"].script()
    assert "T_softmax_delta" not in script and "T_fast_exp = " in script, script
    scheduled = schedule_kernels(mod, "rules")
    rows = np.random.default_rng(0).standard_normal((2, 3, 197)).astype("float32")
    np.testing.assert_allclose(_run(scheduled, [rows]), _run(mod, [rows]), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("channels", "rows", "vectors", "gathered", "tile"),
    [(64, 56, 7, False, (4, 2, 1)), (128, 28, 4, False, (4, 1, 2)), (512, 7, 1, False, (8, 1, 1)),
     (64, 56, 4, True, (8, 1, 1)), (6, 7, 2, False, (3, 1, 2)), (12, 1, 1, False, (6, 1, 1))],
)  # fmt: skip
def test_register_tile_takes_two_vectors_where_the_input_is_contiguous(
    channels, rows, vectors, gathered, tile
):
    assert register_tile(channels, rows, vectors, gathered) == tile


@pytest.mark.parametrize(
    ("channels", "rows", "vectors", "tile"),
    [(64, 56, 4, (8, 1, 2)), (64, 56, 7, (8, 2, 1)), (12, 56, 4, (6, 1, 2)),
     (64, 7, 1, (8, 1, 1))],
)  # fmt: skip
def test_a_register_tile_with_32_registers_takes_8_channels_of_two_vectors(
    channels, rows, vectors, tile
):
    assert register_tile(channels, rows, vectors, wide=8) == tile
    assert register_tile(channels, rows, vectors, True, wide=8) == (8 if channels % 8 == 0 else
                                                                   6, 1, 1)  # fmt: skip


@pytest.mark.parametrize(("mcpu", "channels"), [("znver3", 4), ("skylake-avx512", 8)])
def test_a_wide_convolution_tiles_the_channels_its_registers_hold(mcpu, channels):
    """A 3x3 of 16 -> 32 channels over 6 x 64 (four vectors of 16 a row with AVX-512, eight of
    8 with AVX2): two vectors of a row, by 8 output channels with AVX-512's 32 registers and 4
    with AVX2's 16; numbers equal the default build's (the AVX-512 build only where the host
    has it)."""
    target = make_target({**AVX2, "mcpu": mcpu})

    def body(bb, x, w):
        return relax.op.nn.relu(relax.op.nn.conv2d(x, w, padding=1))

    mod = _module([(1, 16, 6, 64), (32, 16, 3, 3)], body, target)
    scheduled = schedule_kernels(mod, "rules")
    (func,) = [f for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    text = func.script()
    assert "rule:conv" in text, text
    tile = rf"T.unroll\(T.int64\({channels}\)\):\s+for \w+ in T.unroll\(T.int64\(2\)\):\s+"
    assert re.search(tile + r"for \w+ in T.vectorized", text), text
    if mcpu == "skylake-avx512" and not host_has_avx512():
        return
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype("float32") for s in ((1, 16, 6, 64), (32, 16, 3, 3))]
    want = _run(schedule_kernels(mod, "default"), arrays, target)
    np.testing.assert_allclose(_run(scheduled, arrays, target), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("rows", "width", "lanes", "tile"),
    [(7, 2, 8, (7, 2)), (14, 3, 8, (14, 1)), (28, 2, 4, (14, 1)), (7, 2, 16, (7, 1)),
     (3, 4, 16, (3, 2)), (14, 3, 16, (7, 1))],
)  # fmt: skip
def test_a_channel_vector_tile_has_at_most_7_positions_of_16_lanes(rows, width, lanes, tile):
    assert channel_vector_tile(rows, width, lanes) == tile


@pytest.mark.parametrize(
    ("rows", "width", "lanes", "tall", "wide"),
    [(28, 28, 16, (7, 1), (1, 7)), (14, 14, 16, (7, 1), (1, 7)), (7, 2, 16, (7, 1), (7, 1)),
     (3, 4, 16, (3, 2), (3, 2)), (28, 2, 8, (14, 1), (7, 2))],
)  # fmt: skip
def test_a_wide_channel_vector_tile_runs_along_the_row_on_a_tie(rows, width, lanes, tall, wide):
    """The same count of positions either way; ``wide`` (one-group convolutions) takes more
    columns, else more rows."""
    assert channel_vector_tile(rows, width, lanes) == tall
    assert channel_vector_tile(rows, width, lanes, wide=True) == wide


@pytest.mark.parametrize(
    ("width_in", "phases", "splits", "copy_loops"),
    [(32, [1, 4, 34, 2, 17], [[2, 8], [4], [2]], [(1, 272), (2, 17)]),
     (31, [1, 4, 33, 33], [[1, 8], [8], [2]], [(1, 132), (0, 33)])],
    ids=["even_width", "odd_width"],
)  # fmt: skip
def test_strided_inputs_are_deinterleaved_where_the_stride_divides_the_width(
    width_in, phases, splits, copy_loops
):
    """The padded input of a stride-2 convolution is laid out by column phase, so its vectors
    are contiguous and the tile is 4 x 2 vectors, the copy iterating in that layout (the
    image's rows and phases in parallel, a phase's 17 columns one vector); where the stride
    does not divide the padded width the input stays, its copy a row a task, and its vectors
    are gathers, each reused over 8 channels. The input outweighs the weights: the output rows
    are cut in a band a thread (the last split). The numbers equal TVM's default build's."""
    shapes = [(1, 4, width_in, width_in), (16, 4, 3, 3)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2, padding=1))
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = Conv().schedule(func, CPU)
    pad = sch.get(sch.get_sblock("pad_temp")).writes[0].source
    assert [int(d) for d in pad.shape] == phases
    copy = sch.get_loops(sch.get_sblock("pad_temp"))  # (kind, extent): 0 serial, 1 parallel
    assert [(int(sch.get(loop).kind), int(sch.get(loop).extent)) for loop in copy] == copy_loops
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    want = _run(mod, arrays)
    np.testing.assert_allclose(_run(schedule_kernels(mod, "rules"), arrays), want, rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    factors = [
        [int(a) for a in inst.inputs[1:] if a is not None]
        for inst in sch.trace.insts
        if inst.kind.name == "Split"
    ]
    assert factors == splits


def test_a_long_phase_of_a_strided_1d_input_is_copied_in_vectors_of_64_columns():
    """An audio front end's first layer (kernel 10, stride 5, over 16,000 samples): each of the
    five phases of its input has 3,200 columns, copied in 50 vectors of 64, the phases' 250 in
    parallel (vectorized whole, LLVM took over ten minutes to compile the kernel). The numbers
    equal TVM's default build's."""
    shapes = [(1, 1, 16000), (8, 1, 10)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv1d(x, w, strides=5))
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = Conv().schedule(func, CPU)
    pad = sch.get(sch.get_sblock("pad_temp")).writes[0].source
    assert [int(d) for d in pad.shape] == [1, 1, 5, 3200]
    copy = sch.get_loops(sch.get_sblock("pad_temp"))  # (kind, extent): 1 parallel, 2 vectorized
    assert [(int(sch.get(loop).kind), int(sch.get(loop).extent)) for loop in copy] == [
        (1, 250), (2, 64)
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(schedule_kernels(mod, "rules"), arrays), _run(mod, arrays),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    ("side", "window", "in_task", "tile_rows"),
    [(80, 3, True, 2), (96, 3, True, 1), (48, 3, False, 2), (80, 7, False, 2)],
    ids=["large_map", "large_map_one_row_tiles", "small_map", "tall_window"],
)
def test_a_strided_convolution_over_a_large_map_pads_its_rows_in_tasks_of_one_row_tile(
    side, window, in_task, tile_rows
):
    """A 3x3 / 2 convolution of 24 -> 24 channels over 80 x 80 (its padded input 645 KiB, over
    ``ROW_TILE_TASK_MIN_BYTES``; 40 output columns, five vectors, so tiles of two rows): a task
    per row tile of a band (20 of them), every block of 4 output channels inside the task, and
    the copy that pads and de-interleaves the input computed in the task, the 5 rows it reads;
    over 96 x 96 (48 columns, six vectors: tiles of one row) 48 tasks of 3 rows each. Over
    48 x 48 (240 KiB) or with a 7x7 window (a tile reads 9 rows for 4) the copy stays a
    parallel pass of its own before tasks of a channel block and row tile. The numbers equal
    TVM's default build's."""
    shapes = [(1, 24, side, side), (24, 24, window, window)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2, padding=window // 2))
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = Conv().schedule(func, CPU)

    def loops(block):
        return [sch.get(loop) for loop in sch.get_loops(sch.get_sblock(block))]

    conv, pad = loops("conv2d_nchw_update"), loops("pad_temp")
    assert conv[0].kind == tvm.tirx.ForKind.PARALLEL
    assert pad[0].same_as(conv[0]) == in_task
    tiles = (side // 2) // tile_rows
    if in_task:
        assert (int(conv[0].extent), int(conv[1].extent)) == (tiles, 24 // 4)
        reach = 2 * (tile_rows - 1) + window
        assert [int(loop.extent) for loop in pad[1:]] == [24, reach, 2, side // 2 + 1]
    else:
        assert pad[0].kind == tvm.tirx.ForKind.PARALLEL
        assert int(conv[0].extent) == tiles * 24 // 4
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(schedule_kernels(mod, "rules"), arrays), _run(mod, arrays),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("crop", [None, 30], ids=["whole", "cropped"])
def test_a_depthwise_tile_is_rows_of_one_vector_with_its_taps_unrolled_and_input_padded_in_task(
    crop,
):
    """A 3x3 depthwise convolution over 28 rows of 32 columns (8 lanes): tiles of 7 rows by one
    vector, the window's 9 taps and the tile's rows unrolled below the tile loop, the tile
    written back unrolled (a cropped last vector too), and the padding computed inside the
    parallel task loop (an image's channel), not as a pass of its own; the numbers equal the
    default schedule's."""

    def body(bb, x, w):
        y = relax.op.nn.conv2d(x, w, padding=1, groups=64)
        return y if crop is None else _crop(y, crop)

    shapes = [(1, 64, 28, 32), (64, 1, 3, 3)]
    mod = _module(shapes, body)
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = Conv().schedule(func, CPU)

    def loops(block):
        found = sch.get_loops(sch.get_sblock(block))
        return [(int(sch.get(loop).kind), int(sch.get(loop).extent)) for loop in found]

    serial, parallel, vectorized, unrolled = 0, 1, 2, 3
    task = (parallel, 64)
    taps = [(unrolled, 3), (unrolled, 3), (unrolled, 7), (vectorized, 8)]
    assert loops("group_conv2d_nchw_update") == [task, (serial, 4), (serial, 4), (serial, 1), *taps]
    written = "group_conv2d_nchw_local" if crop is None else "group_conv2d_nchw_intermediate_local"
    assert loops(written)[-2:] == [(unrolled, 7), (vectorized, 8)]
    assert loops("pad_temp")[0] == task
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)


UNROLLED, VECTORIZED = 3, 2
"""``ForKind`` values of an unrolled and a vectorized loop."""


def _depthwise_update_loops(mod) -> list[tuple[int, int]]:
    """``(kind, extent)`` of each loop around the convolution rule's depthwise update block in
    ``mod``'s one kernel, outermost first."""
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    sch = Conv().schedule(func, CPU)
    found = sch.get_loops(sch.get_sblock("group_conv2d_nchw_update"))
    return [(int(sch.get(loop).kind), int(sch.get(loop).extent)) for loop in found]


@pytest.mark.parametrize("steps", [(1, 2), (1,)], ids=["stride 2 row-tiled", "unit steps only"])
def test_a_depthwise_convolution_of_column_stride_2_takes_the_row_tile(steps, monkeypatch):
    """A 3x3 / 2 depthwise convolution over 28 x 64 (8 lanes): 14 output rows of 4 vectors,
    tiled as a unit-stride one is, 7 rows by one vector with the taps unrolled, since its
    strided reads are whole vectors and a shuffle (``StridedLoadsAsShuffles``); with
    ``ROW_TILED_STEPS`` of unit steps only, no row tile. The numbers equal the default
    schedule's either way (the build shuffles the strided reads)."""
    from tvm_hetero.schedules.cpu import conv

    monkeypatch.setattr(conv, "ROW_TILED_STEPS", steps)
    shapes = [(1, 64, 28, 64), (64, 1, 3, 3)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w, strides=2, padding=1,
                                                                groups=64))  # fmt: skip
    loops = _depthwise_update_loops(mod)
    taps = [(UNROLLED, 3), (UNROLLED, 3), (UNROLLED, 7), (VECTORIZED, 8)]
    assert (loops[-4:] == taps) == (2 in steps), loops
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(schedule_kernels(mod, "rules"), arrays), _run(mod, arrays),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("least", [1, 2], ids=["rows of one vector tiled", "two vectors"])
def test_a_depthwise_convolution_with_rows_of_one_vector_takes_the_row_tile(least, monkeypatch):
    """A 3x3 depthwise convolution over 14 x 8 (8 lanes: one vector a row) takes the tile of
    7 rows, the taps unrolled, as wider rows do: each row's 9 multiply-adds had been one chain
    of dependent sums. With ``DEPTHWISE_ROWS_MIN_VECTORS`` of 2 it keeps one row a tile. The
    numbers equal the default schedule's either way."""
    from tvm_hetero.schedules.cpu import conv

    monkeypatch.setattr(conv, "DEPTHWISE_ROWS_MIN_VECTORS", least)
    shapes = [(1, 64, 14, 8), (64, 1, 3, 3)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1, groups=64))
    loops = _depthwise_update_loops(mod)
    taps = [(UNROLLED, 3), (UNROLLED, 3), (UNROLLED, 7), (VECTORIZED, 8)]
    assert (loops[-4:] == taps) == (least == 1), loops
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(schedule_kernels(mod, "rules"), arrays), _run(mod, arrays),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_input_module_is_not_mutated():
    shapes, body, _ = CASES["matmul"]
    mod = _module(shapes, body)
    before = mod.script()
    schedule_kernels(mod, "rules")
    assert mod.script() == before


def test_a_1d_pool_runs_its_channels_in_parallel():
    """A 1-D pool's spatial axes are (N, C, W): its channels are the parallel loop (the 2-D
    pool's rows are left inside a task; a 1-D pool has none, and ran on one thread)."""
    body = CASES["max_pool1d_stride2"][1]
    scheduled = schedule_kernels(_module([(1, 64, 4000)], body), "rules")
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert text.count("T.parallel(T.int64(64))") == 2, text  # the padding copy and the pool


@pytest.mark.parametrize("target", [CPU, SERIAL], ids=["parallel", "serial"])
def test_a_separable_max_pool_computes_each_maps_rows_in_its_task(target):
    """A max pool ``LegalizeWithFastMath`` made two stages (ResNet's 3 x 3, stride 2, over
    maps 60 wide): the ``separable_pool`` rule runs the (N, C) maps in parallel (serially on
    a serial target), each task's row maxima computed inside it; TVM's numbers."""
    from tvm_hetero.passes import LegalizeWithFastMath

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 9, 60), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.max_pool2d(x, 3, 2, 1))
        bb.emit_func_output(y)
    plain = bb.get()
    plain.update_global_info("vdevice", [VDevice(target, 0, "global")])  # the home device
    scheduled = schedule_kernels(fused_kernels(plain, target, LegalizeWithFastMath()), "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:separable_pool"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    loops = re.findall(r"^    for (.*):$", text, re.MULTILINE)
    assert len(loops) == 1  # one nest: the rows inside each map's task
    assert ("T.parallel(T.int64(6))" in loops[0]) == (target is CPU)
    assert text.index('T.sblock("pool_rows")') < text.index('T.sblock("pool_columns")')
    a = np.random.default_rng(0).standard_normal((2, 3, 9, 60)).astype("float32")
    want = _run(relax.transform.LegalizeOps()(plain), [a])
    np.testing.assert_array_equal(_run(scheduled, [a], target), want)


def test_large_matmul_is_parallel_and_vectorized_serial_target_is_not_parallel():
    shapes = [(128, 256), (256, 256)]
    body = CASES["matmul"][1]
    for target, parallel in ((CPU, True), (SERIAL, False)):
        scheduled = schedule_kernels(_module(shapes, body, target), "rules")
        text = "\n".join(
            f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)
        )
        assert ("T.parallel" in text) is parallel
        assert "T.vectorized" in text and "T.unroll" in text


@pytest.mark.parametrize(
    ("shape", "lanes"), [((1, 64, 56, 22), 2), ((1, 64, 56, 20), 5), ((1, 32768, 1, 1), 8)]
)
def test_injective_vectors_come_from_the_innermost_axis(shape, lanes):
    """The vector is the innermost real axis' largest divisor up to the lanes (fusing all
    loops and cutting vectors across rows made a width-28 bias add 4.3x slower), and the other
    loops run in parallel."""
    target = make_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})  # 8 lanes
    mod = _module([shape, (1, shape[1], 1, 1)], lambda bb, x, b: relax.op.add(x, b), target)
    (text,) = [
        f.script() for _, f in schedule_kernels(mod, "rules").functions_items()
        if isinstance(f, PrimFunc)
    ]  # fmt: skip
    assert f"in T.vectorized(T.int64({lanes}))" in text, text
    assert "T.parallel" in text


PACKING = {
    "matmul": False,
    "dense_weight_nk": True,
    "conv1x1_image_rows": False,  # x[c, j // 8, j % 8]: consecutive columns, consecutive bytes
}
CASES_PACKING = {
    **CASES,
    "conv1x1_image_rows": ([(1, 16, 8, 8), (32, 16, 1, 1)],
                           lambda bb, x, w: relax.op.nn.conv2d(x, w), "matmul"),
}  # fmt: skip


@pytest.mark.parametrize(("case", "packed"), sorted(PACKING.items()))
def test_weights_are_packed_only_when_columns_are_strided(case, packed):
    """``B[k, j]`` is read as it is; ``B[j, k]`` (dense's layout) is packed into panels first."""
    scheduled = schedule_kernels(_module(*CASES_PACKING[case][:2]), "rules")
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert ("_reindex = T.sblock_alloc_buffer" in text) is packed, text


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "copied"),
    [
        ((1, 48, 64, 64), (16, 48, 1, 1), True),  # rows 16 KiB apart: 4 sets of an L2 way
        ((1, 16, 128, 128), (8, 16, 1, 1), True),  # 64 KiB apart: one set, 16 rows > 8 ways
        ((1, 48, 56, 56), (16, 48, 1, 1), False),  # 12,544 bytes apart: 256 sets
        ((1, 48, 64, 64), (4, 48, 1, 1), False),  # one row tile reads the panel once
        ((1, 16, 64, 64), (16, 16, 1, 1), False),  # 16 rows fit the 4 sets' 32 ways
        # a map as wide as a panel (16 columns with AVX2): x[k, j // 16, j % 16] is no panel
        # layout; its 640 rows 1 KiB apart fall into 64 sets: more than their 512 ways
        ((1, 640, 16, 16), (16, 640, 1, 1), True),
    ],
)
def test_a_panel_whose_rows_share_cache_sets_is_copied_once_per_panel(x_shape, w_shape, copied):
    mod = _module([x_shape, w_shape], lambda bb, x, w: relax.op.nn.relu(relax.op.nn.conv2d(x, w)))
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert ("a0_global = T.sblock_alloc_buffer" in text) is copied, text
    if copied:  # under the parallel panel loop: each panel's own copy
        assert text.index("T.parallel") < text.index('T.sblock("a0_global")'), text
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in (x_shape, w_shape)]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-4, atol=1e-4)


TILES = [("znver3", 16, 4), ("znver3", 24, 4), ("skylake-avx512", 16, 8),
         ("skylake-avx512", 24, 12), ("skylake-avx512", 12, 12), ("skylake-avx512", 20, 5)]  # fmt: skip
"""``(mcpu, rows, MR)``: 12 rows where 12 divides them with AVX-512, else up to 8 (4 with AVX2)."""


@pytest.mark.parametrize(
    ("mcpu", "rows", "tile"),
    TILES,
)
def test_register_tiles_take_12_or_8_rows_where_avx512_has_the_registers(mcpu, rows, tile):
    """12 rows where 12 divides them, else the largest divisor up to 8 (4 with AVX2)."""
    target = make_target({**AVX2, "mcpu": mcpu})
    mod = _module([(rows, 64), (64, 64)], lambda bb, x, w: relax.op.matmul(x, w), target)
    (func,) = [f for _, f in schedule_kernels(mod, "rules").functions_items()
               if isinstance(f, PrimFunc)]  # fmt: skip
    assert f"T.unroll(T.int64({tile}))" in func.script(), func.script()


def test_a_tile_written_transposed_keeps_at_most_8_rows():
    """Positions written as vectors (``write_by_position``) are not cut in vectors of 12."""
    from tvm_hetero.schedules.cpu.matmul import tile_rows

    target = make_target({**AVX2, "mcpu": "skylake-avx512"})
    assert tile_rows(target, 36) == 12
    assert tile_rows(target, 36, transposed=True) == 6


def test_small_kernels_stay_single_threaded():
    scheduled = schedule_kernels(_module(*CASES["matmul"][:2]), "rules")
    assert not any(
        "T.parallel" in f.script()
        for _, f in scheduled.functions_items()
        if isinstance(f, PrimFunc)
    )


def test_default_and_dlight_modes_are_labelled():
    mod = _module(*CASES["softmax"][:2])
    assert {c.label for c in kernel_choices(schedule_kernels(mod, "default"))} == {"default"}
    assert {c.label for c in kernel_choices(schedule_kernels(mod, "dlight"))} == {
        "dlight:reduction"
    }


@pytest.mark.parametrize(
    ("target", "bits"),
    [
        ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3"}, 256),
        ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512"}, 512),
        ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}, 128),
    ],
)
def test_vector_width_from_cpu_features(target, bits):
    assert vector_bits(make_target(target)) == bits


class _Broken:
    """A rule that raises on every kernel (as a rule meeting a kernel it did not foresee)."""

    name = "broken"

    def apply(self, func, target, tunable):
        raise ValueError("The block no longer exists in the IRModule")


def test_a_failing_rule_falls_back_to_the_next_and_says_so(monkeypatch, caplog):
    from tvm_hetero.schedules import apply

    shapes, body, _ = CASES["matmul"]
    mod = _module(shapes, body)
    monkeypatch.setattr(apply, "cpu_rules", lambda: (_Broken(), *cpu_rules()))
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    assert "schedule rule broken failed (The block no longer exists" in caplog.text
    monkeypatch.setattr(apply, "cpu_rules", lambda: (_Broken(),))
    alone = schedule_kernels(mod, "rules")  # no rule left: TVM's default schedule
    assert {c.label for c in kernel_choices(alone)} == {"default"}
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(alone, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "stride", "padding", "blocked"),
    [((1, 288, 35, 35), (384, 288, 3, 3), 2, (0, 0, 2, 15), True),  # Inception's, 288 KiB
     ((1, 192, 17, 17), (192, 192, 7, 1), 1, (3, 0, 4, 7), True),  # a 7x1 over 192 channels
     ((1, 64, 56, 56), (64, 64, 3, 3), 1, (1, 1, 1, 1), False)],  # ResNet-18's, 59 KiB
)  # fmt: skip
def test_a_task_reading_more_input_than_a_slab_cuts_its_channels_in_blocks(
    x_shape, w_shape, stride, padding, blocked
):
    """Where a task's input rows (every channel) exceed ``SLAB_BYTES``, each vector of its row
    would read them again from L2: the reduction is cut into blocks of channels that fit
    ``BLOCK_BYTES``, each outside the tile loop, and the numbers stay the default build's."""
    mod = _module([x_shape, w_shape], lambda bb, x, w: relax.op.nn.relu(
        relax.op.nn.conv2d(x, w, strides=stride, padding=padding)))  # fmt: skip
    scheduled = schedule_kernels(mod, "rules")
    (kernel,) = [f for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert ("rc_0" in kernel.script()) == blocked
    if blocked:  # the numbers, on the smaller of the two
        small = _module([(1, 192, 17, 17), (192, 192, 7, 1)], lambda bb, x, w: relax.op.nn.relu(
            relax.op.nn.conv2d(x, w, padding=(3, 0, 4, 7))))  # fmt: skip
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s).astype("float32") for s in ((1, 192, 17, 17),
                                                                      (192, 192, 7, 1))]  # fmt: skip
        got = _run(schedule_kernels(small, "rules"), arrays)
        np.testing.assert_allclose(got, _run(small, arrays), rtol=1e-4, atol=1e-4)


def test_rows_are_padded_only_where_no_tile_of_4_to_the_registers_rows_divides_them():
    """A 7 x 7 map's 49 positions take tiles of 7 rows with AVX-512's 32 registers (padded to
    52 for tiles of 4 before); with AVX2's 16 (tiles up to 4) they are padded; ViT's 197 tokens
    are padded either way, and rows a tile of 4 divides never."""
    from tvm_hetero.schedules.cpu.matmul import ROWS_PER_TILE, WIDE_ROWS_PER_TILE, padded_row_count

    assert padded_row_count(49, WIDE_ROWS_PER_TILE) == 49
    assert padded_row_count(49, ROWS_PER_TILE) == 52
    assert padded_row_count(197, WIDE_ROWS_PER_TILE) == 200
    assert padded_row_count(196, ROWS_PER_TILE) == 196
    assert padded_row_count(31, ROWS_PER_TILE) == 31  # few rows: one-row tiles cost little


def test_rows_only_a_tile_of_9_to_14_divides_take_it_where_avx512_has_the_registers():
    """A 13 x 13 map's 169 positions take tiles of 13 rows with AVX-512's 32 registers, not
    padded (to 172 before) and not made the columns; with AVX2's 16, or with
    :data:`TALL_ROW_TILES` off, as before. Rows a tile of 4 to 8 divides keep it."""
    from tvm_hetero.schedules.cpu import matmul

    wide = make_target({**AVX2, "mcpu": "skylake-avx512"})
    assert matmul.tile_rows(wide, 169, transposed=True) == 13
    assert matmul.padded_row_count(169, matmul.WIDE_ROWS_PER_TILE) == 169
    assert matmul.tile_rows(wide, 26) == 13 and matmul.tile_rows(wide, 196) == 7
    assert matmul.tile_rows(CPU, 169) == 1 and matmul.padded_row_count(169) == 172
    with patch.object(matmul, "TALL_ROW_TILES", False):
        assert matmul.padded_row_count(169, matmul.WIDE_ROWS_PER_TILE) == 172


def test_a_13_by_13_pointwise_convolution_takes_its_channels_as_columns_in_tiles_of_13():
    """SqueezeNet's 1x1 convolutions over 13 x 13 with AVX-512: the weights are packed in
    panels at build time and each tile is 13 positions by two vectors of output channels,
    written back a vector of 13 positions a channel; numbers unchanged (where the host has
    AVX-512)."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    target = make_target({**AVX2, "mcpu": "skylake-avx512"})
    weights = np.random.default_rng(0).standard_normal((64, 96, 1, 1)).astype("float32")
    mod = _module([(1, 96, 13, 13)], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights))), target)  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    scheduled = schedule_kernels(mod, "rules")
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert "T.int64(2), T.int64(96), T.int64(32)" in text, text  # two panels of 32 channels
    assert "in T.unroll(T.int64(13)):" in text and "in T.vectorized(T.int64(13)):" in text, text
    assert "reindex_pad" not in text, text  # no rows padded, no image copied
    if not host_has_avx512():
        return  # the AVX-512 build runs only where the host has it
    x = np.random.default_rng(1).standard_normal((1, 96, 13, 13)).astype("float32")
    np.testing.assert_allclose(
        _run(scheduled, [x], target), _run(mod, [x], target), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "block", "blocks", "row_tiles"),
    [  # AVX2: panels of 16 columns, tiles of 4 rows
        ((1, 16, 112, 112), (96, 16, 1, 1), 8, 98, 24),  # 1 KiB panels: 8 a block
        ((1, 32, 56, 56), (192, 32, 1, 1), 7, 28, 48),  # 196 panels: 7 divides them
        # 9 KiB panels: one fills the budget (an image under a MiB: not in channel blocks)
        ((1, 144, 40, 40), (24, 144, 1, 1), 1, 100, 6),
        ((1, 96, 56, 56), (64, 96, 1, 1), 1, 196, 16),  # 6 KiB: 2 would fit, fewer than 4
        ((1, 16, 64, 64), (96, 16, 1, 1), 8, 32, 24),  # rows 16 KiB apart, 16 of them: no copy
        ((1, 48, 64, 64), (16, 48, 1, 1), 1, 256, 4),  # a panel the rule copies stays alone
    ],
)
def test_a_row_tile_sweeps_several_small_panels(x_shape, w_shape, block, blocks, row_tiles):
    """A 1x1 convolution of few input channels over a large map: each row tile computes up to
    8 panels of columns (their ``B`` within 16 KiB, 4 of them at least) before the next row tile, so each output
    row is written in runs of ``8 x NR`` columns, not one panel's; numbers unchanged."""
    mod = _module([x_shape, w_shape], lambda bb, x, w: relax.op.nn.relu(relax.op.nn.conv2d(x, w)))
    _check_panel_blocks(mod, [x_shape, w_shape], block, blocks, row_tiles)


def _check_panel_blocks(mod, shapes, block: int, blocks: int, row_tiles: int) -> None:
    """``mod``'s one kernel is the matmul rule's, its parallel loop over ``blocks`` blocks of
    ``block`` panels, ``row_tiles`` row tiles outside a block's panels (the reduction inside
    them), and its numbers the default build's."""
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert f"in T.parallel(T.int64({blocks})):" in text, text
    if block > 1:
        assert f"T.grid(T.int64({row_tiles}), T.int64({block})):" in text, text
    else:
        assert f"in range(T.int64({row_tiles})):" in text, text
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "block", "blocks"),
    [((128, 256), (2048, 256), 8, 16),  # 16 KiB panels, packed: 8 in L2's 256 KiB
     ((128, 256), (512, 256), 1, 32),  # 32 panels: a block of 4 would leave 8 blocks
     ((128, 2048), (2048, 2048), 1, 128)],  # 128 KiB panels: 2 fit, fewer than 4
)  # fmt: skip
def test_a_row_tile_sweeps_packed_panels_that_fit_l2_where_the_output_is_wide(
    x_shape, w_shape, block, blocks
):
    """A wide output over a short ``K`` (a decoder's vocabulary): where no 4 panels fit L1's
    block but 4 of ``B``'s packed panels fit ``L2_BLOCK_BYTES``, each row tile computes up to 8
    of them before the next row tile (AVX2: 16-column panels, 4-row tiles; ``x @ w.T`` as a
    dense layer reads it, ``w`` packed per call); numbers unchanged. An image read in place
    (strided) never takes L2 blocks (``test_a_row_tile_sweeps_several_small_panels``, its 9 KiB
    case)."""
    mod = _module([x_shape, w_shape], lambda bb, x, w: bb.emit_te(topi.nn.dense, x, w))
    _check_panel_blocks(mod, [x_shape, w_shape], block, blocks, x_shape[0] // 4)


@pytest.mark.parametrize(
    ("x_shape", "block", "blocks", "row_tiles"),
    [((1100, 32), 75, 25, 11),  # a 2.6 MB output: every panel, the threads share the rows
     # in 25 groups of 11 row tiles (13 and 12 a thread; 11 groups of 25, 6 and 5, before the
     # busiest thread's bound went from a tenth to a twentieth)
     ((200, 32), 3, 25, 50)],  # a 480 KB output: blocks of L1, as before
)  # fmt: skip
def test_a_row_tile_sweeps_every_panel_where_the_output_is_not_in_cache(
    x_shape, block, blocks, row_tiles
):
    """Where a batch's output is over ``C_CACHED_BYTES`` and all of ``B``'s packed panels fit
    ``WIDE_A_BLOCK_BYTES`` (75 KB here: 600 columns over a ``K`` of 32, as attention's scores
    over Whisper's frames), each row tile computes every panel, so its rows are written whole;
    before, 3 panels at a time (no more fit L1's block and left 16 blocks), each row written
    in runs of 24 columns. Numbers unchanged."""
    w_shape = (600, 32)
    mod = _module([x_shape, w_shape], lambda bb, x, w: bb.emit_te(topi.nn.dense, x, w))
    _check_panel_blocks(mod, [x_shape, w_shape], block, blocks, row_tiles)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "tasks", "row_tiles"),
    [  # AVX2: panels of 16 columns (8 where 16 do not divide them), 49 tiles of 4 rows
        ((1, 576, 14, 14), (96, 576, 1, 1), 6, 49),  # 6 panels: even already
        ((1, 576, 14, 14), (40, 576, 1, 1), 35, 7),  # 5 panels of 8: 7 groups of 7 row tiles
        ((1, 576, 14, 14), (8, 576, 1, 1), 49, 1),  # 1 panel: 7 groups leave 4 and 3
    ],
)
def test_few_panels_share_their_row_tiles_between_the_threads(x_shape, w_shape, tasks, row_tiles):
    """A 1x1 convolution over a small map with its output channels as the columns (weights
    packed at build time) has few panels; where they would leave one of the two threads idle
    for a share of the run, each panel's row tiles are cut into groups and the parallel loop
    runs over panels and groups; numbers unchanged."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    rng = np.random.default_rng(0)
    weights = rng.standard_normal(w_shape).astype("float32")
    mod = _module([x_shape], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights))))  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    _check_panel_blocks(mod, [x_shape], 1, tasks, row_tiles)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "rows_first"),
    [((1, 576, 14, 14), (40, 576, 1, 1), True),  # image 451 KB, weights 92 KB: 7 bands of rows
     ((1, 64, 10, 10), (112, 64, 1, 1), False)],  # image 26 KB, weights 29 KB: 7 panels first
)  # fmt: skip
def test_threads_sharing_row_tiles_take_bands_of_the_larger_operand(x_shape, w_shape, rows_first):
    """Where the threads share each panel's row tiles (few panels), the parallel loop runs over
    bands of row tiles first when the image (``A``, its positions the rows) outweighs the
    weights (``B``): each thread reads a band of the image and every panel, not the whole
    image; else over panels first, as before. With :data:`SPLIT_LARGER` off, panels first
    always; numbers unchanged either way."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import common

    weights = np.random.default_rng(0).standard_normal(w_shape).astype("float32")
    mod = _module([x_shape], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights))))  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    positions = x_shape[2] * x_shape[3]
    x = np.random.default_rng(1).standard_normal(x_shape).astype("float32")
    for larger in (True, False):
        with patch.object(common, "SPLIT_LARGER", larger):
            scheduled = schedule_kernels(mod, "rules")
        (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
        task = re.search(r"for (\w+) in T\.parallel\(T\.int64\(35\)\)", text).group(1)
        row = re.search(rf"T\.axis\.spatial\(T\.int64\({positions}\), {task} (//|%)", text)
        assert row.group(1) == ("//" if larger and rows_first else "%"), text
        np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [((1, 64, 14, 14), (96, 64, 1, 1)),  # tiles of 4 rows (AVX2), 16 columns a panel
     ((1, 576, 14, 14), (96, 576, 1, 1))],  # the panel's partial sums kept over depth blocks
)  # fmt: skip
def test_a_transposed_tile_is_written_back_a_vector_of_positions_a_channel(x_shape, w_shape):
    """A 1x1 convolution over a small map with its output channels as the columns computes the
    output's transpose: each tile is written back one output channel at a time (the columns
    unrolled), a vector of the tile's consecutive positions each, not a vector of channels
    scattered a map apart; numbers unchanged."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    weights = np.random.default_rng(0).standard_normal(w_shape).astype("float32")
    mod = _module([x_shape], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights))))  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    scheduled = schedule_kernels(mod, "rules")
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    written = r"in T\.unroll\(T\.int64\(16\)\):\s+for \w+ in T\.vectorized\(T\.int64\(4\)\):"
    assert re.search(written + r"\s+with T\.sblock\(\"conv2d_nchw_intermediate_reindex", text), text
    x = np.random.default_rng(1).standard_normal(x_shape).astype("float32")
    np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-4, atol=1e-4)


def test_panels_a_twentieth_uneven_on_the_threads_are_cut_in_groups_of_row_tiles(monkeypatch):
    """A 1x1 convolution of 64 -> 240 channels over 14 x 14 (AVX2: 15 panels of 16 channels,
    49 row tiles of 4 positions): its 15 panels, 8 and 7 on two threads, are cut in 7 groups of
    row tiles each (105 tasks, 53 and 52) with :data:`matmul.MAX_IMBALANCE` a twentieth; with a
    tenth (the rule's bound before) they stay 15 tasks. Numbers unchanged either way."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import matmul

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((240, 64, 1, 1)).astype("float32")
    mod = _module([(1, 64, 14, 14)], lambda bb, x: relax.op.nn.conv2d(x, relax.const(weights)))
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    x = rng.standard_normal((1, 64, 14, 14)).astype("float32")
    want = _run(mod, [x])
    for bound, tasks in ((1.05, 105), (1.1, 15)):
        monkeypatch.setattr(matmul, "MAX_IMBALANCE", bound)
        scheduled = schedule_kernels(mod, "rules")
        (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
        assert "rule:matmul" in text and f"T.parallel(T.int64({tasks}))" in text, text
        np.testing.assert_allclose(_run(scheduled, [x]), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("tasks", "row_tiles", "cores", "groups"),
    [(6, 28, 2, 1), (3, 28, 2, 2), (5, 28, 2, 2), (1, 7, 2, 7), (1, 1, 2, 1), (3, 28, 1, 1),
     (3, 28, 0, 1), (15, 28, 2, 2), (21, 28, 2, 1), (13, 7, 2, 7), (6, 28, 4, 2),
     (3, 9, 2, 9), (3, 6, 2, 2)],
)  # fmt: skip
def test_row_groups_even_out_the_threads(tasks, row_tiles, cores, groups):
    """The fewest groups (a divisor of the row tiles) that leave the busiest of ``cores``
    threads at most a twentieth over an even share (15 panels on two threads, 8 and 7, are
    cut; 21, 11 and 10, are not); none where that holds already, the target is serial or its
    cores are unknown, or the row tiles cannot be cut."""
    assert row_groups(tasks, row_tiles, cores) == groups
    if groups > 1:
        assert row_tiles % groups == 0
        busiest = -(-tasks * groups // cores) * cores / (tasks * groups)
        assert busiest <= 1.05 or groups == row_tiles


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "block", "tasks", "row_tiles"),
    [((2048, 256), (512, 256), 8, 4, 512),  # A 2 MiB: 4 blocks of 8 panels of 16 KiB
     ((2048, 1024), (128, 1024), 8, 2, 256),  # one block of all 8: two groups of row tiles
     ((2048, 2048), (128, 2048), 4, 4, 256),  # 128 KiB panels: 4 fill 512 KiB; 2 blocks,
     # one a thread: A (16 MiB) outweighs B, so each thread takes a band of rows instead
     ((512, 256), (512, 256), 1, 32, 128)],  # A 512 KiB stays cached: panels alone
)  # fmt: skip
def test_a_row_tile_sweeps_blocks_of_panels_where_a_is_larger_than_l2(
    x_shape, w_shape, block, tasks, row_tiles
):
    """Where ``A`` (one batch's rows) is over :data:`A_CACHED_BYTES`, each panel's pass over
    it read it from beyond L2 again: row tiles sweep blocks of packed panels up to
    :data:`WIDE_A_BLOCK_BYTES` instead, the threads sharing the row tiles where the blocks are
    too few (AVX2: panels of 16 columns, tiles of 4 rows); numbers unchanged."""
    assert (x_shape[0] * x_shape[1] * 4 > A_CACHED_BYTES) == (block > 1)
    mod = _module([x_shape, w_shape], lambda bb, x, w: bb.emit_te(topi.nn.dense, x, w))
    _check_panel_blocks(mod, [x_shape, w_shape], block, tasks, row_tiles)


@pytest.mark.parametrize(
    ("depth", "cols", "rows", "found"),
    [(16384, 4096, 128, (256, 8)),  # ALBERT's 16384 -> 4096: 2 MiB panels, 8 a task
     (4096, 768, 128, (256, 6)),  # 24 panels: 8 a task leave 3 tasks for 2 threads; 6 leave 4
     (4096, 3072, 200, (256, 4)),  # 200 rows: sums of 5 panels would pass 128 KiB
     (4096, 32, 128, (256, 1)),  # one panel: one a task
     (3400, 1280, 64, (200, 10)),  # blocks of 200 rows (25 KiB): 10 panels' fit 256 KiB
     (4099, 4096, 128, None),  # a prime depth: no block of 32 rows or more divides it
     (5120, 1280, 1500, None),  # 1500 rows: not one panel's sums fit
     (3072, 768, 128, None),  # 384 KiB panels stay whole (BERT's 3072 -> 768)
     (16384, 4096, 8, None)],  # one row tile of 8 reads each panel once
)  # fmt: skip
def test_panels_too_deep_for_l2_are_summed_in_blocks_of_their_depth(depth, cols, rows, found):
    """:func:`deep_panels` with AVX-512's panels of 32 columns, tiles of 8 rows and two
    cores: rows ``k`` a block and panels a task, or none."""
    panel_bytes = depth * 32 * 4
    assert deep_panels(depth, panel_bytes, rows, 8, cols // 32, 2) == found


def test_a_deep_panel_is_summed_in_blocks_of_its_depth_its_partial_sums_kept_by_the_task():
    """A 16 x 8192 by 8192 x 64 dense layer (AVX2: panels of 16 columns, 512 KiB each; four
    row tiles): each of two tasks takes two panels and sums them in 16 blocks of 512 rows of
    the depth, each block's row tiles in registers, the partial sums in a buffer of the
    task's, written back after the last block; with :data:`DEEP_PANELS` off, a panel a task
    over the whole depth. The depth loops take four rows a pass either way
    (:data:`DEPTH_STEPS`). Numbers unchanged either way."""
    shapes = [(16, 8192), (64, 8192)]
    mod = _module(shapes, lambda bb, x, w: bb.emit_te(topi.nn.dense, x, w))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    texts = _on_and_off(mod, arrays, _run(mod, arrays), "DEEP_PANELS", 1e-3)
    for deep, text in texts.items():
        tasks = 2 if deep else 4  # (block, row tile, panel, k): 16 x 4 x 2 x 512, else k whole
        assert f"T.parallel(T.int64({tasks}))" in text, text
        nest = "T.grid(T.int64(16), T.int64(4), T.int64(2), T.int64(128))"  # k four at a time
        whole = re.search(
            r"for \w+ in range\(T\.int64\(2048\)\):\n\s+for \w+ in T\.unroll\(T\.int64\(4\)", text
        )
        assert (nest in text) == deep and (whole is None) == deep, text


def _on_and_off(mod, arrays, want, switch: str, tolerance: float = 1e-4) -> dict:
    """``{on: the matmul kernel's scheduled text}`` with ``matmul.<switch>`` on and off, each
    build's numbers checked against ``want``."""
    from tvm_hetero.schedules.cpu import matmul

    texts = {}
    for on in (True, False):
        with patch.object(matmul, switch, on):
            scheduled = schedule_kernels(mod, "rules")
        texts[on] = next(
            f.script()
            for _, f in scheduled.functions_items()
            if isinstance(f, PrimFunc) and "rule:matmul" in f.script()
        )
        np.testing.assert_allclose(_run(scheduled, arrays), want, rtol=tolerance, atol=tolerance)
    return texts


@pytest.mark.parametrize(
    ("depth", "rows", "panels", "found"),
    [(144, 24, 98, (16, 49)),  # MobileNet-V2's 144 -> 24 over 56 x 56: 9 blocks, a band a thread
     (96, 24, 98, (16, 49)),
     (120, 24, 98, (15, 49)),  # 15 divides 120
     (138, 24, 98, None),  # 138 = 2 x 3 x 23: no block of 8 to 16 channels divides it
     (32, 24, 98, None),  # two blocks or fewer: the prefetcher follows 32 runs
     (144, 24, 25, None),  # 25 panels (1x1 over 28 x 28) fall unevenly on two threads
     (144, 24, 24, None),  # the image (432 KiB) stays in L2 between layers
     (256, 64, 98, None)],  # the band's sums (64 x 1568 positions) would pass 256 KiB
)  # fmt: skip
def test_an_image_read_in_place_is_summed_in_blocks_of_channels_over_a_band_a_thread(
    depth, rows, panels, found
):
    """:func:`image_streams` with AVX-512's panels of 32 columns (128 bytes a row) and two
    cores: channels a block and panels a task, or none."""
    assert image_streams(depth, rows, panels, 128, 2) == found


def test_a_pointwise_layer_over_a_large_map_reads_its_image_in_blocks_of_channels():
    """A 96 -> 24 1x1 convolution over 56 x 56 (a 1.2 MB image; AVX2: panels of 16
    positions, 196 of them; tiles of 4 output channels): each thread takes one band of 98
    panels and sums it in 6 blocks of 16 channels (loops block, panel, row tile, channel), its
    partial sums in a buffer of the band's; with :data:`IMAGE_STREAMS` off, a panel a task
    over all 96 channels. Numbers unchanged either way."""
    shapes = [(1, 96, 56, 56), (24, 96, 1, 1)]
    mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    for streams, text in _on_and_off(mod, arrays, _run(mod, arrays), "IMAGE_STREAMS").items():
        assert ("T.parallel(T.int64(2))" in text) == streams, text
        nest = "T.grid(T.int64(6), T.int64(98), T.int64(6), T.int64(16))"
        assert (nest in text) == streams, text


@pytest.mark.parametrize(
    ("batches", "row_tiles", "b_bytes", "laid_out", "found"),
    [(1, 17, 768 * 192 * 4, True, True),  # DeiT-tiny's 768 -> 192: 576 KiB of weights
     (1, 17, 768 * 768 * 4, True, False),  # ViT-B's 768 -> 768: each thread would read 2.25 MiB
     (1, 1, 192 * 576 * 4, True, False),  # one row tile: one thread would have none
     (6, 17, 64 * 197 * 4, True, False),  # attention's heads: a batch each already
     (1, 17, 192 * 576 * 4, False, False)],  # weights packed per call or as the columns
)  # fmt: skip
def test_a_matmul_with_small_weights_takes_a_band_of_rows_a_thread(
    batches, row_tiles, b_bytes, laid_out, found
):
    """:func:`token_bands_apply` on two cores."""
    assert token_bands_apply(batches, row_tiles, 2, b_bytes, laid_out) is found


def test_a_token_matmul_with_small_weights_runs_its_threads_on_bands_of_rows():
    """DeiT-tiny's 197 x 192 by 192 x 576 with constant weights packed as the build packs them
    (AVX2: 36 panels of 16 columns, rows padded to 50 tiles of 4): two bands of rows, each
    over all 36 panels, the band outermost in the parallel loop (72 tasks: the first 36 one
    thread's); with :data:`TOKEN_BANDS` off, the 36 panels. Numbers unchanged either way."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    weights = np.random.default_rng(0).standard_normal((192, 576)).astype("float32")
    mod = _module([(1, 197, 192)], lambda bb, x: relax.op.matmul(x, relax.const(weights)))
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    x = np.random.default_rng(1).standard_normal((1, 197, 192)).astype("float32")
    for bands, text in _on_and_off(mod, [x], x @ weights, "TOKEN_BANDS").items():
        tasks = 72 if bands else 36
        assert f"_fused in T.parallel(T.int64({tasks})):" in text, text
        if bands:  # the band is the task's outer index: tasks 0-35 rows 0-99
            assert "fused // T.int64(36) * T.int64(100)" in text, text


@pytest.mark.parametrize("crop", [True, False])
def test_a_matmul_on_uneven_bands_of_rows_writes_no_row_past_its_output(crop):
    """VOLO's 196 x 64 by 64 x 486 (AVX2: 49 row tiles of 4, which two bands split unevenly),
    with a bias. ``crop``: its columns padded to whole panels and cropped after (as
    ``PadMatmulColumns`` leaves it): the crop's predicate had replaced the last band's row
    guard in the fused write-back (rows 196-199 written past the output: the heap corrupted),
    so the threads keep panels (32 tasks). Without a crop (512 columns, a bias of 512) the
    threads take two uneven bands of rows (64 tasks: 25 and 24 row tiles), as DeiT-tiny's 25
    tiles with AVX-512 do. Each buffer is called with guard bytes around it: none may
    change."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 512)).astype("float32")
    width = 486 if crop else 512
    bias = rng.standard_normal(width).astype("float32")

    def body(bb, x):
        y = relax.op.matmul(x, relax.const(weights))
        if crop:
            y = relax.op.strided_slice(y, axes=[2], begin=[0], end=[width])
        return relax.op.add(y, relax.const(bias))

    mod = _module([(1, 196, 64)], body)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    scheduled = schedule_kernels(mod, "rules")
    (gv, func), *_ = [
        (gv, f) for gv, f in scheduled.functions_items()
        if isinstance(f, PrimFunc) and "rule:matmul" in f.script()
    ]  # fmt: skip
    assert f"T.parallel(T.int64({32 if crop else 64}))" in func.script(), func.script()
    kernel = tvm.compile(func.with_attr("global_symbol", gv.name_hint), CPU)[gv.name_hint]
    (call,) = [
        b.value for block in scheduled["main"].body.blocks for b in block.bindings
        if isinstance(b.value, relax.Call) and b.value.args and b.value.args[0].same_as(gv)
    ]  # fmt: skip
    x = rng.standard_normal((1, 196, 64)).astype("float32")
    packed = [c.value.numpy() for c in call.args[1].fields[1:]]  # the weights and the bias
    guard = 4096
    raws, args = [], []
    for array in [x, *packed, np.zeros((1, 196, width), "float32")]:
        raw = np.full(array.nbytes + 2 * guard + 64, 0x7A, np.uint8)
        start = (-raw.ctypes.data) % 64 + guard
        view = raw[start : start + array.nbytes].view("float32").reshape(array.shape)
        view[...] = array
        raws.append((raw, start, array.nbytes))
        args.append(tvm.runtime.from_dlpack(view))
    kernel(*args)
    for raw, start, size in raws:
        assert (raw[start - guard : start] == 0x7A).all()
        assert (raw[start + size : start + size + guard] == 0x7A).all()
    want = x @ weights[:, :width] + bias
    np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("shapes", "body", "reduce"),
    [([(16, 64), (64, 48)], lambda bb, x, w: relax.op.matmul(x, w),
      "T.axis.reduce(T.int64(64), ax3_0 * T.int64(4) + ax3_1)"),  # x's rows in runs
     ([(1, 32, 8, 8), (16, 32, 1, 1)], lambda bb, x, w: relax.op.nn.conv2d(x, w),
      "T.axis.reduce(T.int64(32), ax3)")],  # the image's channels, a map apart
)  # fmt: skip
def test_the_depth_loop_takes_four_rows_a_pass_where_a_reads_its_rows_in_runs(shapes, body, reduce):
    """A matmul whose ``A`` is read along its rows (``x @ W``) takes :data:`DEPTH_STEPS` rows
    of the depth a pass of its register tile's depth loop, unrolled; a 1x1 convolution, whose
    depth is the image's channels, keeps one a pass. Numbers unchanged."""
    mod = _module(shapes, body)
    scheduled = schedule_kernels(mod, "rules")
    text = next(f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc))
    assert "rule:matmul" in text and reduce in text, text
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-4, atol=1e-4)


def test_a_pointwise_layer_with_its_weights_as_columns_takes_four_depth_rows_a_pass():
    """MobileNet-V2's 960 -> 160 over 7 x 7 with AVX-512 (the weights as the columns, tiles of
    7 positions, 35 tasks, its depth whole): four input channels a pass of the depth loop,
    unrolled; with :data:`NAMED_DEPTH_STEPS` off, one. Numbers unchanged (where the host has
    AVX-512)."""
    from tvm_hetero.schedules.cpu import matmul

    target, mod, x, runs = _packed_pointwise(960, 160, 7, relu=False)
    for steps in (True, False):
        with patch.object(matmul, "NAMED_DEPTH_STEPS", steps):
            scheduled = schedule_kernels(mod, "rules")
        (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
        assert "tvm_hetero.columns_operand" in text, text
        stepped = "T.axis.reduce(T.int64(960), ax3_0 * T.int64(4) + ax3_1)" in text
        assert stepped == steps and ("T.axis.reduce(T.int64(960), ax3)" in text) != steps, text
        if runs:
            want = _run(mod, [x], target)
            np.testing.assert_allclose(_run(scheduled, [x], target), want, rtol=1e-4, atol=1e-4)


def test_a_squeeze_excite_scale_computes_its_sigmoid_once_a_channel():
    """``x * sigmoid(conv(s))``, the conv over a 1x1 map: the sigmoid is computed in the tile's
    write-back, once a channel, and the broadcast multiply reads it (inlined into the multiply
    it ran once for every element of the map); numbers unchanged."""
    shapes = [(1, 4, 1, 1), (32, 4, 1, 1), (1, 32, 8, 8)]

    def body(bb, s, w, x):
        return relax.op.multiply(x, relax.op.sigmoid(bb.emit(relax.op.nn.conv2d(s, w))))

    mod = _module(shapes, body)
    scheduled = schedule_kernels(mod, "rules")
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    (line,) = [t for t in text.splitlines() if "T.sigmoid" in t]
    assert "T.int64(0), T.int64(0)] = T.sigmoid(" in line, text  # written per channel
    multiply = next(t for t in text.splitlines() if "T_multiply_intermediate[v_ax0" in t)
    assert "sigmoid" not in multiply, text
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "rows_first"),
    [((1, 3, 64, 64), (32, 3, 3, 3), True),  # image 48 KB (padded), weights 3.5 KB: rows first
     ((1, 64, 10, 10), (64, 64, 3, 3), False)],  # image 36 KB, weights 147 KB: channels first
)  # fmt: skip
def test_conv_threads_take_bands_of_rows_where_the_image_outweighs_the_weights(
    x_shape, w_shape, rows_first
):
    """A convolution's parallel loop runs over bands of output rows first (every output
    channel each) where its input outweighs its weights, and the copy that pads the input is
    cut by rows too: each thread reads and writes a band of the image, not the whole of it;
    else over blocks of output channels first, as before. With :data:`ROWS_BEFORE_CHANNELS`
    off, channels first always; numbers unchanged either way."""
    from tvm_hetero.schedules.cpu import conv

    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype("float32") for s in (x_shape, w_shape))
    mod = _module([x_shape, w_shape], lambda bb, x, w: relax.op.nn.relu(
        relax.op.nn.conv2d(x, w, strides=2, padding=1)))  # fmt: skip
    for switched in (True, False):
        with patch.object(conv, "ROWS_BEFORE_CHANNELS", switched):
            scheduled = schedule_kernels(mod, "rules")
        (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
        tasks, copy = re.findall(r"for (\w+) in T\.parallel", text)[::-1][:2]
        bands = switched and rows_first
        assert (tasks.index("yy") < tasks.index("ff")) == bands, text
        assert copy.startswith("ax0_ax2_ax1" if bands else "ax0_ax1_ax2"), text
        np.testing.assert_allclose(_run(scheduled, [x, w]), _run(mod, [x, w]), rtol=1e-4, atol=1e-4)


def test_one_panel_a_thread_takes_a_band_of_rows_where_the_image_outweighs_the_weights():
    """MobileNet-V2's 384 -> 64 over 14 x 14 with AVX-512: two panels of 32 channels for two
    threads, even already; its image (301 KB) outweighs its weights (98 KB), so each panel's
    28 row tiles are cut in two bands and each thread takes a band (every panel) instead of a
    panel (every row). With :data:`ONE_PANEL_BANDS` off, a panel a thread; numbers unchanged
    (where the host has AVX-512). :data:`POSITION_BANDS`, which would band it either way, is
    off."""
    switches = {"ONE_PANEL_BANDS": None, "POSITION_BANDS": False}
    _banded_pointwise(384, 64, switches, (4, 2), r" // T\.int64\(2\)")


def _banded_pointwise(cin: int, cout: int, switches: dict, tasks: tuple, band: str) -> None:
    """A packed 1x1 convolution of ``cin`` -> ``cout`` over 14 x 14 with AVX-512, scheduled
    with the matmul rule's ``switches`` set (``None``: on, then off; else that value): its
    parallel loop has ``tasks`` tasks (on, off) and its positions' index is the task's
    variable then ``band`` where on; numbers unchanged where the host has AVX-512."""
    from tvm_hetero.schedules.cpu import matmul

    target, mod, x, runs = _packed_pointwise(cin, cout, 14, relu=True)
    for banded in (True, False):
        with ExitStack() as stack:
            for name, value in switches.items():
                stack.enter_context(patch.object(matmul, name, banded if value is None else value))
            scheduled = schedule_kernels(mod, "rules")
        (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
        task = re.search(r"for (\w+) in T\.parallel\(T\.int64\((\d+)\)\)", text)
        assert int(task.group(2)) == tasks[0 if banded else 1], text
        row = rf"T\.axis\.spatial\(T\.int64\(196\), {task.group(1)}{band}"
        assert bool(re.search(row, text)) == banded, text
        if runs:
            want = _run(mod, [x], target)
            np.testing.assert_allclose(_run(scheduled, [x], target), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("row_tiles", "b_bytes", "found"),
    [(28, 96 * 576 * 4, True),  # MobileNet-V2's 96 -> 576 over 14 x 14: 216 KiB of weights
     (28, 704 * 256 * 4, True),  # HGNetV2's 704 -> 256: 704 KiB
     (28, 1024 * 1024 * 4, False),  # ResNeXt's 1024 -> 1024: each thread would read 4 MiB
     (7, 160 * 960 * 4, False)],  # 7 x 7 in tiles of 7 positions: two bands would be uneven
)  # fmt: skip
def test_a_pointwise_convolution_with_small_weights_takes_a_band_of_positions_a_thread(
    row_tiles, b_bytes, found
):
    """:func:`position_bands_apply` on two cores."""
    assert position_bands_apply(row_tiles, 2, b_bytes) is found


def test_a_pointwise_convolution_with_small_weights_runs_its_threads_on_bands_of_positions():
    """MobileNet-V2's 96 -> 576 over 14 x 14 with AVX-512 (18 panels of 32 channels, even on
    two threads, so no other chooser cuts its 28 row tiles): two bands of positions, each over
    all 18 panels, the band outermost in the parallel loop (36 tasks: the first 18 one
    thread's, positions 0-97); with :data:`POSITION_BANDS` off, the 18 panels over every
    position. Numbers unchanged (where the host has AVX-512)."""
    band = r" // T\.int64\(18\) \* T\.int64\(98\)"
    _banded_pointwise(96, 576, {"POSITION_BANDS": None}, (36, 18), band)


def test_the_channel_tile_pads_in_each_task_the_rows_it_reads():
    """A 3x3 / 2 convolution of 64 -> 64 channels to rows of 5 columns with packed weights
    (the channel-vectorized tile): the copy that pads its input is computed inside the
    parallel task loop, each task the rows it reads, no parallel pass of its own before the
    tasks; with :data:`CHANNEL_TILE_COPIES_IN_TASK` off, a pass of its own; numbers
    unchanged."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    weights = np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype("float32")
    mod = _module([(1, 64, 10, 10)], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights), strides=2, padding=1)))  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    x = np.random.default_rng(1).standard_normal((1, 64, 10, 10)).astype("float32")
    for in_task in (True, False):
        scheduled, lines, task, copy = _pad_copy(mod, "CHANNEL_TILE_COPIES_IN_TASK", in_task)
        tile = next(k for k, line in enumerate(lines) if "T.vectorized(T.int64(" in line
                    and k > copy and "ff" in line)  # fmt: skip
        assert (task < copy) == in_task and task < tile
        np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-4, atol=1e-4)


def _pad_copy(mod, switch: str, value) -> tuple:
    """``mod`` (one convolution) scheduled by the rules with ``conv.<switch>`` set to
    ``value``: the scheduled module, its kernel's TVMScript lines, the line of its last
    parallel loop (the tasks) and of the copy that pads the input, checked to be one parallel
    loop where that copy is inside the tasks and two (a pass of its own) where it is not."""
    from tvm_hetero.schedules.cpu import conv

    with patch.object(conv, switch, value):
        scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    lines = text.splitlines()
    parallel = [k for k, line in enumerate(lines) if "T.parallel" in line]
    copy = next(k for k, line in enumerate(lines) if 'T.sblock("pad_temp")' in line)
    assert len(parallel) == (1 if parallel[-1] < copy else 2), text
    return scheduled, lines, parallel[-1], copy


@pytest.mark.parametrize(("window", "in_task"), [(7, False), (3, True)])
def test_a_channel_tile_with_a_window_many_rows_tall_pads_its_input_in_a_pass(window, in_task):
    """A 7x1 convolution of 32 -> 32 channels over 17 x 5 (17 rows: a tile of one row whatever
    the lanes) reads seven input rows for each output row: its input is padded in a parallel
    pass of its own before the tasks, not in each task; a 3x1 (three rows for one) pads in its
    tasks, and so does the 7x1 with :data:`CHANNEL_TILE_COPY_OVERLAP` unbounded. Numbers
    unchanged."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import conv

    pad = window // 2
    weights = np.random.default_rng(0).standard_normal((32, 32, window, 1)).astype("float32")
    mod = _module([(1, 32, 17, 5)], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights), padding=(pad, 0))))  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    x = np.random.default_rng(1).standard_normal((1, 32, 17, 5)).astype("float32")
    for overlap in (conv.CHANNEL_TILE_COPY_OVERLAP, math.inf):
        scheduled, _, task, copy = _pad_copy(mod, "CHANNEL_TILE_COPY_OVERLAP", overlap)
        assert (task < copy) == (in_task or overlap == math.inf)
        np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("along_channels", [True, False])
def test_a_channel_tile_one_position_wide_is_written_back_a_vector_of_channels(along_channels):
    """A grouped 3x3 convolution of 32 channels in groups of 8 (a vector of AVX2's lanes) over
    14 x 14 with a SiLU after it takes the channel-vectorized tile one position wide (a column
    of 14 positions, a vector of 8 channels each): its accumulators are written back and the SiLU computed a vector of
    channels at a time; with :data:`CHANNEL_VECTOR_WRITE_BACK` off, along the width, one
    position, the SiLU a lane at a time (RegNetZ's took twice as long). Numbers unchanged."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import conv

    weights = np.random.default_rng(0).standard_normal((32, 8, 3, 3)).astype("float32")

    def silu(bb, x):
        out = relax.op.nn.conv2d(x, relax.const(weights), padding=1, groups=4)
        return relax.op.multiply(out, relax.op.sigmoid(out))

    mod = _module([(1, 32, 14, 14)], silu)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    with patch.object(conv, "CHANNEL_VECTOR_WRITE_BACK", along_channels):
        scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    lanes = 8 if along_channels else 1
    written = rf"in T\.vectorized\(T\.int64\({lanes}\)\):\s+with T\.sblock\(\"\w+_local\"\)"
    assert re.search(written, text), text
    x = np.random.default_rng(1).standard_normal((1, 32, 14, 14)).astype("float32")
    np.testing.assert_allclose(_run(scheduled, [x]), _run(mod, [x]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("wide", [True, False])
def test_a_channel_tile_a_row_wide_is_written_back_a_vector_of_channels(wide):
    """A 3x3 convolution of stride 2, 32 -> 32 channels over 14 x 14 with a SiLU after it, for
    AVX-512, takes the channel-vectorized tile a row of 7 positions wide, two vectors of 16
    channels each: its accumulators are written back and the SiLU computed 32 channels at a
    time (the two vectors lie side by side in the output); with :data:`CHANNEL_VECTOR_WRITE_BACK_WIDE` off, along the width, 7
    positions of one channel. Numbers unchanged where the host runs AVX-512."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import conv

    target = make_target({**AVX2, "mcpu": "skylake-avx512"})
    weights = np.random.default_rng(0).standard_normal((32, 32, 3, 3)).astype("float32")

    def silu(bb, x):
        out = relax.op.nn.conv2d(x, relax.const(weights), strides=2, padding=1)
        return relax.op.multiply(out, relax.op.sigmoid(out))

    mod = _module([(1, 32, 14, 14)], silu, target)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    with patch.object(conv, "CHANNEL_VECTOR_WRITE_BACK_WIDE", wide):
        scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert "in T.vectorized(T.int64(16)):" in text  # the tile: a vector of channels
    lanes = 32 if wide else 7
    written = rf"in T\.vectorized\(T\.int64\({lanes}\)\):\s+with T\.sblock\(\"\w+_local\"\)"
    assert re.search(written, text), text
    if host_has_avx512():
        x = np.random.default_rng(1).standard_normal((1, 32, 14, 14)).astype("float32")
        expected = _run(mod, [x], target)
        np.testing.assert_allclose(_run(scheduled, [x], target), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("inside", [True, False])
def test_each_task_of_a_temporal_convolution_computes_every_channel_block(inside):
    """S3D's 3x1x1 convolution of 64 channels over 4 frames of 14 x 14, for AVX-512: its input
    (200 KiB) outweighs its weights (48 KiB), so each task (a frame's row) pads its three
    frames' rows of every input channel once and computes both blocks of 32 output channels
    from them (:data:`conv.CHANNEL_BLOCKS_IN_TASK`): 56 tasks. Off, a task per block and row,
    each copying the same rows again: 112. Numbers unchanged where the host runs AVX-512."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights
    from tvm_hetero.schedules.cpu import conv

    target = make_target({**AVX2, "mcpu": "skylake-avx512"})
    weights = np.random.default_rng(0).standard_normal((64, 64, 3, 1, 1)).astype("float32")

    def temporal(bb, x):
        out = relax.op.nn.conv3d(x, relax.const(weights), padding=(1, 0, 0))
        return relax.op.nn.relu(out)

    mod = _module([(1, 64, 4, 14, 14)], temporal, target)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    with patch.object(conv, "CHANNEL_BLOCKS_IN_TASK", inside):
        scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    tasks = re.search(r"in T\.parallel\(T\.int64\((\d+)\)\)", text).group(1)
    assert int(tasks) == (56 if inside else 112), text
    if inside:  # the copy, then the two blocks of channels, in each task
        assert re.search(r"pad_temp.*\n(.*\n)*?\s+for ff_0(, \w+)? in T\.grid\(T\.int64\(2\)", text)
    if host_has_avx512():
        x = np.random.default_rng(1).standard_normal((1, 64, 4, 14, 14)).astype("float32")
        expected = _run(mod, [x], target)
        np.testing.assert_allclose(_run(scheduled, [x], target), expected, rtol=1e-4, atol=1e-4)


def _packed_depthwise(channels: int, groups: int, side: int, stride: int = 1) -> tuple:
    """``(module, input)``: a 3x3 convolution of ``channels`` channels in ``groups`` groups
    over ``side`` x ``side`` with ReLU, its constant weights packed as the build packs them,
    for the AVX2 target (8 lanes)."""
    from tvm_hetero.passes.pack_constant_weights import PackConstantWeights

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((channels, channels // groups, 3, 3)).astype("float32")

    def body(bb, x):
        y = relax.op.nn.conv2d(x, relax.const(weights), strides=stride, padding=1, groups=groups)
        return relax.op.nn.relu(y)

    mod = _module([(1, channels, side, side)], body)
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    return mod, rng.standard_normal((1, channels, side, side)).astype("float32")


def _gathered_vectors(mod) -> int:
    """Vectors that ``mod``'s kernels, built by the build's TIR pipeline, read or write a lane
    at a time in one call: accesses whose index is a ``Ramp`` of a stride over 4 (which no
    pass reads whole), each counted as often as the loops around it run, in the lowered TIR
    after ``BlockedCopiesAsTransposes``."""
    from tvm_hetero.build.multi_device import TIR_PIPELINE

    seen = []

    @tvm.instrument.pass_instrument
    class After:
        def run_after_pass(self, module, info):
            if info.name == "BlockedCopiesAsTransposes":
                seen.extend(f for _, f in module.functions_items() if isinstance(f, PrimFunc))

    kernels = tvm.IRModule({gv.name_hint: f.with_attr("global_symbol", gv.name_hint)
                            for gv, f in mod.functions_items() if isinstance(f, PrimFunc)})  # fmt: skip
    with tvm.transform.PassContext(opt_level=3, instruments=[After()]):
        tvm.compile(kernels, CPU, tir_pipeline=TIR_PIPELINE)

    def strided(index) -> bool:
        return isinstance(index, tvm.tirx.Ramp) and int(index.stride) > 4

    def loads(expr) -> int:
        if isinstance(expr, tvm.ir.expr.TensorLoad):
            return sum(strided(i) for i in expr.indices)
        parts = [getattr(expr, k, None) for k in ("a", "b", "value", "true_value", "false_value")]
        parts += list(getattr(expr, "args", []))
        return sum(loads(p) for p in parts if isinstance(p, tvm.ir.expr.Expr))

    def count(stmt, times: int) -> int:
        if isinstance(stmt, tvm.tirx.For):
            return count(stmt.body, times * int(stmt.extent))
        if isinstance(stmt, tvm.tirx.SeqStmt):
            return sum(count(s, times) for s in stmt.seq)
        if isinstance(stmt, tvm.tirx.BufferStore):
            return times * (sum(strided(i) for i in stmt.indices) + loads(stmt.value))
        body = getattr(stmt, "body", None)
        return count(body, times) if isinstance(body, tvm.tirx.Stmt) else 0

    return sum(count(f.body, 1) for f in seen)


@pytest.mark.parametrize(
    ("groups", "stride", "side", "blocked"),
    [(640, 1, 7, True), (640, 2, 14, True), (8, 1, 14, True), (1, 1, 7, False)],
    ids=["depthwise", "depthwise stride 2", "groups of 8", "one group"],
)
def test_a_channel_tiles_planar_reads_and_writes_are_blocked_copies(
    groups, stride, side, blocked, monkeypatch
):
    """A depthwise 3x3 convolution of 640 channels over 7 x 7 (8 lanes: 80 tasks of a block of
    channels), one of stride 2 from 14 x 14, and a grouped one of 64 channels (groups of 8)
    over 14 x 14 take
    the channel-vectorized tile; with ``BLOCKED_COPIES`` the depthwise tiles read their input
    and every such tile writes its output through a buffer of the task's positions, channels
    innermost, which the build copies from and to the planar maps by transposes: most of the
    vectors read or written a lane at a time are gone (a position past the last whole vector
    of positions stays). A one-group convolution's tile is scheduled as it was. The numbers equal the default
    schedule's either way."""
    from tvm_hetero.schedules.cpu import conv

    mod, x = _packed_depthwise(640 if groups == 640 else 64, groups, side, stride)
    scheduled = schedule_kernels(mod, "rules")
    monkeypatch.setattr(conv, "BLOCKED_COPIES", False)
    before = schedule_kernels(mod, "rules")
    alone, alone_before = _gathered_vectors(scheduled), _gathered_vectors(before)
    if blocked:
        assert alone < alone_before / 4, (alone, alone_before)
    else:
        tvm.ir.assert_structural_equal(scheduled, before)
    want = _run(mod, [x])
    np.testing.assert_allclose(_run(scheduled, [x]), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(before, [x]), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("least", [1 << 15, 1 << 18], ids=["depthwise threshold", "other convs'"])
@pytest.mark.parametrize("tile", ["rows", "channels"])
def test_a_small_depthwise_convolution_runs_its_tasks_in_parallel(tile, least, monkeypatch):
    """A 3x3 depthwise convolution of 96 channels over 14 x 16 (194 thousand multiply-adds,
    the width-vectorized row tile) and one of 256 packed channels over 7 x 7 (113 thousand,
    the channel tile) run their tasks in parallel, under ``PARALLEL_MIN_FLOPS`` (2^18) as they
    are; with ``DEPTHWISE_PARALLEL_MIN_FLOPS`` at that too, on one thread. The numbers equal
    the default schedule's either way."""
    from tvm_hetero.schedules.cpu import conv

    monkeypatch.setattr(conv, "DEPTHWISE_PARALLEL_MIN_FLOPS", least)
    if tile == "rows":
        shapes = [(1, 96, 14, 16), (96, 1, 3, 3)]
        mod = _module(shapes, lambda bb, x, w: relax.op.nn.conv2d(x, w, padding=1, groups=96))
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    else:
        mod, x = _packed_depthwise(256, 256, 7)
        arrays = [x]
    scheduled = schedule_kernels(mod, "rules")
    (func,) = [f for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    (update,) = [(r, loops) for r, loops in realizes(func.body)
                 if r.block.name_hint.endswith("_update")]  # fmt: skip
    kinds = {int(loop.kind) for loop in update[1]}
    assert (int(tvm.tirx.ForKind.PARALLEL) in kinds) == (least < 1 << 18)
    np.testing.assert_allclose(_run(scheduled, arrays), _run(mod, arrays), rtol=1e-5, atol=1e-5)
