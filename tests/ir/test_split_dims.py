"""Partition dimensions of Relax operators (EOP's Table 2) and their byte counts."""

from tvm import relax

from tvm_hetero.ir.split_dims import Window, split_dims, traffic


def _call(op, *shapes, **attrs):
    args = [relax.Var(f"a{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", args):
        with bb.dataflow():
            out = bb.emit_output(op(*args, **attrs))
        bb.emit_func_output(out)
    return bb.get()["main"].body.blocks[0].bindings[0].value


def test_matmul_rows_columns_and_batch():
    dims = split_dims(_call(relax.op.matmul, (4, 8, 16), (16, 32)))
    assert sorted(dims) == ["M", "N", "batch"]
    assert (dims["M"].extent, dims["M"].out_axis, dims["M"].in_axes) == (8, 1, (1, None))
    assert (dims["N"].extent, dims["N"].out_axis, dims["N"].in_axes) == (32, 2, (None, 1))
    assert dims["batch"].in_axes == (0, None)
    t = traffic(_call(relax.op.matmul, (4, 8, 16), (16, 32)), dims["N"])
    assert (t.cut_in_bytes, t.whole_in_bytes, t.out_bytes) == (
        16 * 32 * 4,
        4 * 8 * 16 * 4,
        4 * 8 * 32 * 4,
    )


def test_elementwise_broadcast_inputs_are_read_whole():
    dims = split_dims(_call(relax.op.add, (6, 8), (8,)))
    assert dims["axis0"].in_axes == (0, None)
    assert dims["axis1"].in_axes == (1, 0)


def test_softmax_and_layer_norm_keep_their_reduced_axes_whole():
    assert sorted(split_dims(_call(relax.op.nn.softmax, (4, 6, 8)))) == ["axis0", "axis1"]
    ln = split_dims(_call(relax.op.nn.layer_norm, (4, 6, 8), (8,), (8,), axes=[-1]))
    assert sorted(ln) == ["axis0", "axis1"]
    assert ln["axis1"].in_axes == (1, None, None)


def test_transpose_cuts_the_permuted_input_axis():
    dims = split_dims(_call(relax.op.permute_dims, (4, 6, 8), axes=[2, 0, 1]))
    assert dims["axis0"].in_axes == (2,) and dims["axis2"].in_axes == (1,)


def test_conv2d_rows_have_a_halo_and_channels_cut_the_weight():
    call = _call(relax.op.nn.conv2d, (2, 3, 16, 16), (8, 3, 3, 3), strides=2, padding=1)
    dims = split_dims(call)
    assert sorted(dims) == ["H", "OC", "batch"]
    assert dims["H"].extent == 8 and dims["H"].window == Window(2, 3, 1, 16)
    # output rows 0..3 read input rows -1..7: rows 0..7 with one row of padding on top
    assert dims["H"].window.input_rows(0, 4) == (0, 8, 1, 0)
    assert dims["H"].window.input_rows(4, 8) == (7, 16, 0, 0)
    assert dims["OC"].in_axes == (None, 0) and dims["OC"].out_axis == 1


def test_unknown_operators_have_no_dimension():
    assert split_dims(_call(relax.op.reshape, (4, 6), shape=(6, 4))) == {}
