"""Conv1dAsMatmul: CPU 1-D convolutions as their windows' columns times the weights."""

import numpy as np
import pytest
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import Conv1dAsMatmul, conv1d_as_matmul

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _conv1d_module(length=9, stride=2, padding=(1, 1), dilation=1, groups=1, device=CPU,
                   channels=4, taps=3):  # fmt: skip
    params = [("x", (2, channels, length)), ("w", (6, channels // groups, taps))]
    return one_op_module(
        device, params, lambda x, w: relax.op.nn.conv1d(x, w, stride, padding, dilation, groups)
    )


def test_a_strided_padded_convolution_becomes_windows_and_a_product():
    """The windows are gathered by one kernel that takes no producers (``op_pattern`` 4), zero
    where a tap falls in the padding; the weights are reordered tap-major to match."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def tap_columns(
            x: T.Buffer((T.int64(2), T.int64(4), T.int64(9)), "float32"),
            columns: T.Buffer((T.int64(2), T.int64(12), T.int64(5)), "float32"),
        ):
            T.func_attr({"op_pattern": 4, "tirx.noalias": True})
            for n, row, j in T.grid(T.int64(2), T.int64(12), T.int64(5)):
                with T.sblock("columns"):
                    v_n, v_row, v_j = T.axis.remap("SSS", [n, row, j])
                    # tap v_row // 4 of channel v_row % 4 at output v_j: sample 2 v_j + tap - 1
                    T.reads(
                        x[
                            v_n,
                            v_row % T.int64(4),
                            v_j * T.int64(2) + v_row // T.int64(4) - T.int64(1),
                        ]
                    )
                    T.writes(columns[v_n, v_row, v_j])
                    columns[v_n, v_row, v_j] = T.if_then_else(
                        T.int64(1) <= v_j * T.int64(2) + v_row // T.int64(4)
                        and v_j * T.int64(2) + v_row // T.int64(4) < T.int64(10),
                        x[v_n, v_row % T.int64(4), v_j * T.int64(2) + v_row // T.int64(4) - T.int64(1)],
                        T.float32(0.0),
                    )  # fmt: skip

        @R.function
        def main(
            x: R.Tensor((2, 4, 9), "float32", "llvm:0"),
            w: R.Tensor((6, 4, 3), "float32", "llvm:0"),
        ) -> R.Tensor((2, 6, 5), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                columns = R.call_tir(
                    cls.tap_columns, (x,), out_ty=R.Tensor((2, 12, 5), "float32", "llvm:0")
                )
                weights = R.reshape(R.permute_dims(w, [0, 2, 1]), R.shape([6, 12]))
                y = R.matmul(weights, columns)
                R.output(y)
            return y

    before = _conv1d_module()
    text = before.script()
    after = Conv1dAsMatmul()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


def test_an_output_short_of_whole_panels_is_gathered_wider_and_cropped():
    """60 positions with AVX2's panels of 16 (two vectors): the windows are gathered for 64
    (a fifteenth more; those past the input read zero), the product is 64 wide and cropped."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def tap_columns(
            x: T.Buffer((T.int64(2), T.int64(4), T.int64(60)), "float32"),
            columns: T.Buffer((T.int64(2), T.int64(12), T.int64(64)), "float32"),
        ):
            T.func_attr({"op_pattern": 4, "tirx.noalias": True})
            for n, row, j in T.grid(T.int64(2), T.int64(12), T.int64(64)):
                with T.sblock("columns"):
                    v_n, v_row, v_j = T.axis.remap("SSS", [n, row, j])
                    T.reads(x[v_n, v_row % T.int64(4), v_row // T.int64(4) + v_j - T.int64(1)])
                    T.writes(columns[v_n, v_row, v_j])
                    columns[v_n, v_row, v_j] = T.if_then_else(
                        T.int64(1) <= v_row // T.int64(4) + v_j
                        and v_row // T.int64(4) + v_j < T.int64(61),
                        x[v_n, v_row % T.int64(4), v_row // T.int64(4) + v_j - T.int64(1)],
                        T.float32(0.0),
                    )

        @R.function
        def main(
            x: R.Tensor((2, 4, 60), "float32", "llvm:0"),
            w: R.Tensor((6, 4, 3), "float32", "llvm:0"),
        ) -> R.Tensor((2, 6, 60), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                columns = R.call_tir(
                    cls.tap_columns, (x,), out_ty=R.Tensor((2, 12, 64), "float32", "llvm:0")
                )
                weights = R.reshape(R.permute_dims(w, [0, 2, 1]), R.shape([6, 12]))
                wide = R.matmul(weights, columns)
                y = R.strided_slice(wide, axes=[2], begin=[0], end=[60])
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(Conv1dAsMatmul()(_conv1d_module(length=60, stride=1)), Expected)


@pytest.mark.parametrize(
    ("mcpu", "length", "gathered"),
    [("haswell", 60, 64), ("haswell", 2000, 2000), ("haswell", 5, 5), ("haswell", 20, 20),
     ("skylake-avx512", 2000, 2016), ("skylake-avx512", 31, 32)],
)  # fmt: skip
def test_columns_reach_whole_panels_where_that_adds_at_most_an_eighth(mcpu, length, gathered):
    """Two vectors of float32: 16 with AVX2, 32 with AVX-512; 5 -> 16 or 20 -> 32 would add
    more than an eighth, and 2000 is whole panels of 16 already."""
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    assert conv1d_as_matmul.whole_panels(target, length) == gathered


@pytest.mark.parametrize(
    "case",
    [dict(), dict(stride=1, padding=(0, 0)), dict(dilation=2, length=12),
     dict(stride=5, taps=10, padding=(0, 0), length=40, channels=1), dict(taps=1, padding=(0, 0)),
     dict(stride=1, length=60)],
)  # fmt: skip
def test_numbers_match_the_convolution(case):
    after = same_numbers_after(Conv1dAsMatmul(), _conv1d_module(**case))
    assert "conv1d" not in after.script() and "matmul" in after.script()


@pytest.mark.parametrize("case", [dict(groups=2), dict(device=CUDA)])
def test_grouped_and_gpu_convolutions_stay(case):
    mod = _conv1d_module(**case)
    tvm.ir.assert_structural_equal(Conv1dAsMatmul()(mod), mod)


def test_an_exported_audio_front_end_is_built_with_products_and_matches(tmp_path):
    torch = pytest.importorskip("torch")
    front = torch.nn.Sequential(
        torch.nn.Conv1d(1, 16, 10, 5), torch.nn.GELU(), torch.nn.Conv1d(16, 16, 3, 2, padding=1)
    )
    x = torch.randn(1, 1, 400)
    path = tmp_path / "front.onnx"
    torch.onnx.export(front.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    rules = {k.rule for k in api.kernel_schedules(compiled)}
    assert "matmul" in rules and "conv" not in rules
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, front(x).detach().numpy(), rtol=1e-4, atol=1e-5)
