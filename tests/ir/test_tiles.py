"""Tile geometry: scheme cells, and the boxes an operator's output box reads (halo, padding)."""

from __future__ import annotations

import itertools

import pytest
from tvm import relax

from tvm_hetero.ir.tiles import (
    contiguous_runs,
    even_parts,
    join_layout,
    needs,
    scheme_cells,
    window_padding,
)


def test_even_parts_and_cells_of_every_scheme():
    assert even_parts(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert even_parts(2, 4) == [(0, 1), (1, 2)]  # devices beyond the rows get nothing
    shape = (1, 8, 6, 10)
    assert scheme_cells("InH", shape, 3) == [
        (0, ((0, 1), (0, 8), (0, 2), (0, 10))),
        (1, ((0, 1), (0, 8), (2, 4), (0, 10))),
        (2, ((0, 1), (0, 8), (4, 6), (0, 10))),
    ]
    assert [b[3] for _, b in scheme_cells("InW", shape, 4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert [b[1] for _, b in scheme_cells("OutC", shape, 3)] == [(0, 3), (3, 6), (6, 8)]
    grid4 = scheme_cells("Grid", shape, 4)
    assert [(d, b[2], b[3]) for d, b in grid4] == [
        (0, (0, 3), (0, 5)), (1, (3, 6), (0, 5)), (3, (0, 3), (5, 10)), (2, (3, 6), (5, 10))
    ]  # fmt: skip
    # snake order: ring neighbours 0-1, 1-2, 2-3 and 3-0 share an edge
    grid3 = scheme_cells("Grid", shape, 3)  # the last device takes its whole column
    assert [d for d, _ in grid3] == [0, 1, 2, 2]
    assert scheme_cells("Home", shape, 3) == [(0, ((0, 1), (0, 8), (0, 6), (0, 10)))]
    with pytest.raises(ValueError, match=r"does not cut a rank-2 output .* takes \['OutC'\]"):
        scheme_cells("InH", (4, 10), 2)
    tokens = scheme_cells("InH", (1, 7, 16), 2)  # (batch, tokens, features)
    assert [b for _, b in tokens] == [((0, 1), (0, 4), (0, 16)), ((0, 1), (4, 7), (0, 16))]
    assert [b[2] for _, b in scheme_cells("OutC", (1, 7, 16), 2)] == [(0, 8), (8, 16)]
    with pytest.raises(ValueError, match="unknown scheme 'Diagonal'"):
        scheme_cells("Diagonal", shape, 2)


def _var(name, shape):
    return relax.Var(name, relax.TensorType(shape, "float32"))


def test_strided_dilated_convolution_reads_its_window_and_pads_at_the_border():
    x, w = _var("x", (1, 4, 11, 9)), _var("w", (6, 4, 3, 3))
    call = relax.op.nn.conv2d(x, w, strides=2, padding=(2, 1, 2, 1), dilation=2)
    call = relax.BlockBuilder().normalize(call)  # output (1, 6, 6, 4)
    out = ((0, 1), (2, 6), (4, 6), (0, 4))  # rows 4-5 of 6, output channels 2-5
    data, weight = needs(call, out)
    # row o reads input rows 2o - 2 .. 2o + 2: rows 6..10 + 2 -> 6..13, clipped to 11
    assert data == ((0, 1), (0, 4), (6, 11), (0, 9))
    assert weight == ((2, 6), (0, 4), (0, 3), (0, 3))
    assert window_padding(call, out) == [0, 1, 2, 1]  # [top, left, bottom, right]


def test_transformer_rows_through_matmul_attention_layout_and_norms():
    bb = relax.BlockBuilder()
    x, w = _var("x", (1, 6, 8)), _var("w", (8, 12))
    mm = bb.normalize(relax.op.matmul(x, w))
    rows = ((0, 1), (2, 4), (0, 12))
    assert needs(mm, rows) == [((0, 1), (2, 4), (0, 8)), ((0, 8), (0, 12))]
    assert needs(mm, ((0, 1), (0, 6), (4, 12)))[1] == ((0, 8), (4, 12))  # OutC: weight columns
    q, k = _var("q", (1, 2, 6, 4)), _var("k", (1, 2, 4, 6))
    scores = bb.normalize(relax.op.matmul(q, k))  # every key for a query row
    assert needs(scores, ((0, 1), (0, 2), (3, 6), (0, 6))) == [
        ((0, 1), (0, 2), (3, 6), (0, 4)), ((0, 1), (0, 2), (0, 4), (0, 6))
    ]  # fmt: skip
    heads = bb.normalize(relax.op.reshape(x, (1, 6, 2, 4)))
    assert needs(heads, ((0, 1), (2, 4), (0, 2), (0, 4))) == [((0, 1), (2, 4), (0, 8)), None]
    assert needs(heads, ((0, 1), (0, 6), (0, 1), (0, 4))) is None  # a head: not a box of x
    perm = bb.normalize(relax.op.permute_dims(_var("h", (1, 6, 2, 4)), [0, 2, 1, 3]))
    assert needs(perm, ((0, 1), (0, 2), (1, 3), (0, 4))) == [((0, 1), (1, 3), (0, 2), (0, 4))]
    soft = bb.normalize(relax.op.nn.softmax(_var("s", (1, 2, 6, 6)), axis=-1))
    assert needs(soft, ((0, 1), (0, 2), (0, 3), (0, 6))) == [((0, 1), (0, 2), (0, 3), (0, 6))]
    assert needs(soft, ((0, 1), (0, 2), (0, 6), (0, 3))) is None  # the softmax axis is cut


def test_depthwise_channels_pooling_and_broadcasting():
    x, w = _var("x", (1, 4, 8, 8)), _var("w", (4, 1, 3, 3))
    bb = relax.BlockBuilder()
    dw = bb.normalize(relax.op.nn.conv2d(x, w, padding=1, groups=4))
    box = ((0, 1), (1, 3), (0, 4), (0, 8))
    assert needs(dw, box) == [((0, 1), (1, 3), (0, 5), (0, 8)), ((1, 3), (0, 1), (0, 3), (0, 3))]
    pool = bb.normalize(relax.op.nn.max_pool2d(x, 3, 2, 1))  # output (1, 4, 4, 4)
    assert needs(pool, ((0, 1), (0, 4), (2, 4), (0, 4)))[0] == ((0, 1), (0, 4), (3, 8), (0, 8))
    bias = _var("b", (1, 4, 1, 1))
    add = bb.normalize(relax.op.add(x, bias))
    assert needs(add, box) == [box, ((0, 1), (1, 3), (0, 1), (0, 1))]
    flat = bb.normalize(relax.op.reshape(x, (1, 256)))
    assert needs(flat, ((0, 1), (0, 128))) is None  # no rule: the layer must stay whole
    assert needs(flat, ((0, 1), (0, 256))) == [((0, 1), (0, 4), (0, 8), (0, 8)), None]
    c = _var("c", (4,))
    norm = bb.normalize(relax.op.nn.batch_norm(x, c, c, c, c, axis=1))
    assert needs(norm, box) == [box, *[((1, 3),)] * 4]  # item 0's box, per channel
    assert needs(norm, ()) is None  # the (out, mean, var) tuple whole: no box (it divided by 0)


@pytest.mark.parametrize(
    ("piece", "runs"),
    [
        (((0, 1), (0, 4), (0, 6), (0, 10)), 1),  # the whole tile: one copy
        (((0, 1), (1, 3), (0, 6), (0, 10)), 1),  # channels: one block
        (((0, 1), (0, 4), (2, 5), (0, 10)), 4),  # rows: a block per channel
        (((0, 1), (0, 4), (2, 5), (3, 7)), 12),  # a grid cell: a run per row
        (((0, 1), (1, 3), (0, 6), (3, 7)), 12),  # columns: a run per row of each channel
    ],
)
def test_contiguous_runs_of_a_piece_in_its_tile(piece, runs):
    whole = ((0, 1), (0, 4), (0, 6), (0, 10))
    assert contiguous_runs(piece, whole) == runs
    flat = [(c, h) for c in range(*piece[1]) for h in range(*piece[2])]  # brute force
    starts = [c * 60 + h * 10 + piece[3][0] for c, h in flat]
    width = piece[3][1] - piece[3][0]
    breaks = sum(1 for a, b in itertools.pairwise(starts) if b != a + width)
    assert breaks + 1 == runs


@pytest.mark.parametrize(
    ("scheme", "runs", "axis", "span"),
    [
        ("OutC", 3, 2, 60),  # channels: a block per piece, a step is a channel's map
        ("InH", 3 * 4, 1, 10),  # rows: a block per channel and piece, a step is a row
        ("InW", 3 * 24, 0, 1),  # columns: a run per row of each channel and piece
        ("Grid", 4 * 12, 0, 1),  # a grid: its columns are the innermost cut
    ],
)
def test_join_layout_of_each_schemes_pieces(scheme, runs, axis, span):
    whole = ((0, 1), (0, 4), (0, 6), (0, 10))
    pieces = [box for _, box in scheme_cells(scheme, (1, 4, 6, 10), 4 if scheme == "Grid" else 3)]
    got = join_layout(pieces, whole)
    assert got == {"runs": runs, "inner": 10, "axis": axis, "span": span}
    assert got["runs"] == sum(contiguous_runs(p, whole) for p in pieces)
