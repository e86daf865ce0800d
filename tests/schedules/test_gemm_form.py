"""Reading reduction blocks as matmuls: which read is ``A``, which axes are ``I``, ``J``, ``K``."""

import pytest
import tvm
from tvm import s_tir, te, tirx, topi
from tvm.s_tir.dlight.gpu.matmul import get_index_map, get_reduction_blocks

from tvm_hetero.schedules.cpu.gemm_form import drop_unit_reductions, gemm_form


def _block(*shapes, compute):
    """The schedule and reduction block of ``compute(*placeholders)``."""
    args = [te.placeholder(s, "float32", f"a{i}") for i, s in enumerate(shapes)]
    func = te.create_prim_func([*args, compute(*args)])
    sch = s_tir.Schedule(func)
    (main,) = get_reduction_blocks(sch, sch.get_child_blocks(sch.get_sblock("root")))
    return sch, main


def _axes(index_map: tirx.IndexMap) -> list[str]:
    """The map's outputs as the names of the inputs they use (``0`` for a constant)."""
    out = []
    for expr in index_map.final_indices:
        used = [v.name for v in tirx.analysis.undefined_vars(expr)]
        out.append("*".join(used) if used else str(int(expr)))
    return out


def test_a_plain_matmul_reads_as_dlight_reads_it():
    sch, main = _block((16, 32), (32, 48), compute=lambda a, b: topi.matmul(a, b))
    form = gemm_form(sch.get(main))
    assert (form.a, form.b) == (0, 1)
    for ours, dlights in zip(
        (form.block_map, form.a_map, form.b_map, form.c_map),
        get_index_map(sch.get(main)),
        strict=True,
    ):
        tvm.ir.assert_structural_equal(ours, dlights, map_free_vars=True)


def test_one_row_of_a_has_no_i_axis_but_is_a_matmul():
    """dlight counts the extent-1 row as no axis and declines the block."""
    sch, main = _block((1, 64), (64, 48), compute=lambda a, b: topi.matmul(a, b))
    assert get_index_map(sch.get(main)) is None
    form = gemm_form(sch.get(main))
    assert _axes(form.c_map) == ["0", "0", "i1"]  # [batch, I, J]: I is the constant 0
    assert _axes(form.b_map) == ["0", "i0", "i1"]  # [batch, J, K], inputs in block order (j, k)


def test_a_1x1_convolution_is_weights_times_image():
    """The weights (the second read) are ``A``: the output's columns, the image's ``y * W + x``,
    are ``J``, so the vector runs along the image's rows."""
    sch, main = _block(
        (1, 16, 13, 13), (32, 16, 1, 1), compute=lambda x, w: topi.nn.conv2d_nchw(x, w, 1, 0, 1)
    )
    assert gemm_form(sch.get(main)) is None  # the window's y + ry is not an element access
    drop_unit_reductions(sch, main)
    form = gemm_form(sch.get(main))
    assert (form.a, form.b) == (1, 0)
    # block [n, f, y, x, c] -> [batch, I = f, J = y * 13 + x, K = c]
    assert _axes(form.block_map) == ["0", "i1", "i2*i3", "i4"]


@pytest.mark.parametrize(
    ("shapes", "compute"),
    [
        (((1, 8, 6, 6), (8, 8, 3, 3)), lambda x, w: topi.nn.conv2d_nchw(x, w, 1, 1, 1)),  # 3x3
        (((8, 8, 1, 1), (8, 8, 1, 1)), lambda x, w: topi.sum(topi.multiply(x, w), axis=1)),
    ],
    ids=["window", "product_then_sum"],
)
def test_windows_and_non_matmuls_are_declined(shapes, compute):
    sch, main = _block(*shapes, compute=compute)
    drop_unit_reductions(sch, main)
    assert gemm_form(sch.get(main)) is None


def test_a_named_operand_is_b_whatever_the_output_runs_along():
    """A 1x1 convolution whose weights are packed in panels of output channels
    (``PackConstantWeights`` over a small map) names them as ``B``: the output channels are
    ``J``, the image's positions ``I``, and the output is written transposed to the tile."""
    nr = 16

    def conv(x, w):
        k = te.reduce_axis((0, 8), "k")
        return te.compute(
            (1, 32, 7, 7),
            lambda n, f, y, z: te.sum(x[n, k, y, z] * w[f // nr, k, f % nr], axis=k),
        )

    sch, main = _block((1, 8, 7, 7), (32 // nr, 8, nr), compute=conv)
    assert (gemm_form(sch.get(main)).a, gemm_form(sch.get(main)).b) == (1, 0)  # by the output
    form = gemm_form(sch.get(main), columns="a1")
    assert (form.a, form.b) == (0, 1)
    # block [n, f, y, z, k] -> [batch, I = y * 7 + z, J = f, K = k]
    assert _axes(form.block_map) == ["0", "i2*i3", "i1", "i4"]
    assert _axes(form.c_map) == ["0", "i2*i3", "i1"]
    assert gemm_form(sch.get(main), columns="nothing").b == 0  # a name it does not read
