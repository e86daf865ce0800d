"""SeparableResize: CPU bilinear resizes as a pass along the width, then one along the height."""

import numpy as np
import pytest
import tvm
from conftest import same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero import api
from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import SeparableResize

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _resize_module(shape=(1, 2, 3, 4), size=(6, 8), mode="half_pixel", method="linear",
                   device=CPU, out_dtype=""):  # fmt: skip
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = relax.op.image.resize2d(x, size, method=method, coordinate_transformation_mode=mode,
                                        out_dtype=out_dtype or None)  # fmt: skip
            y = bb.emit_output(relax.op.nn.relu(bb.emit(y)))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _at(i, scale):
    """Where output index ``i`` falls in the input, half-pixel centres (TOPI's arithmetic)."""
    return (T.Cast("float32", i) + T.float32(0.5)) * T.float32(scale) - T.float32(0.5)


def _tap(i, scale, step, last):
    below = T.Cast("int64", T.floor(_at(i, scale)))
    return T.max(T.min(below + T.int64(step) if step else below, T.int64(last)), T.int64(0))


def _weight(i, scale):
    return _at(i, scale) - T.Cast("float32", T.Cast("int32", T.floor(_at(i, scale))))


def test_a_bilinear_upsample_becomes_a_width_pass_and_a_height_pass():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def resize2d_width(
            x: T.Buffer((T.int64(1), T.int64(2), T.int64(3), T.int64(4)), "float32"),
            rows: T.Buffer((T.int64(1), T.int64(2), T.int64(3), T.int64(8)), "float32"),
        ):
            T.func_attr({"tirx.noalias": True})
            for b, ch, y, i in T.grid(T.int64(1), T.int64(2), T.int64(3), T.int64(8)):
                with T.sblock("resize2d_width"):
                    v_b, v_ch, v_y, v_i = T.axis.remap("SSSS", [b, ch, y, i])
                    T.reads(x[v_b, v_ch, v_y, T.int64(0) : T.int64(4)])
                    T.writes(rows[v_b, v_ch, v_y, v_i])
                    rows[v_b, v_ch, v_y, v_i] = x[v_b, v_ch, v_y, _tap(v_i, 0.5, 0, 3)] * (
                        T.float32(1.0) - _weight(v_i, 0.5)
                    ) + x[v_b, v_ch, v_y, _tap(v_i, 0.5, 1, 3)] * _weight(v_i, 0.5)

        @T.prim_func(private=True, s_tir=True)
        def resize2d_height(
            rows: T.Buffer((T.int64(1), T.int64(2), T.int64(3), T.int64(8)), "float32"),
            out: T.Buffer((T.int64(1), T.int64(2), T.int64(6), T.int64(8)), "float32"),
        ):
            T.func_attr({"op_pattern": 4, "tirx.noalias": True})
            for b, ch, j, i in T.grid(T.int64(1), T.int64(2), T.int64(6), T.int64(8)):
                with T.sblock("resize2d_height"):
                    v_b, v_ch, v_j, v_i = T.axis.remap("SSSS", [b, ch, j, i])
                    T.reads(rows[v_b, v_ch, T.int64(0) : T.int64(3), v_i])
                    T.writes(out[v_b, v_ch, v_j, v_i])
                    out[v_b, v_ch, v_j, v_i] = rows[v_b, v_ch, _tap(v_j, 0.5, 0, 2), v_i] * (
                        T.float32(1.0) - _weight(v_j, 0.5)
                    ) + rows[v_b, v_ch, _tap(v_j, 0.5, 1, 2), v_i] * _weight(v_j, 0.5)

        @R.function
        def main(
            x: R.Tensor((1, 2, 3, 4), "float32", "llvm:0"),
        ) -> R.Tensor((1, 2, 6, 8), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                rows = R.call_tir(
                    cls.resize2d_width, (x,), out_ty=R.Tensor((1, 2, 3, 8), "float32", "llvm:0")
                )
                y = R.call_tir(
                    cls.resize2d_height, (rows,), R.Tensor((1, 2, 6, 8), "float32", "llvm:0")
                )
                out = R.nn.relu(y)
                R.output(out)
            return out

    before = _resize_module()
    text = before.script()
    after = SeparableResize()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    "case",
    [dict(), dict(mode="align_corners"), dict(mode="asymmetric"), dict(mode="pytorch_half_pixel"),
     dict(size=(6, 4)), dict(size=(3, 9)), dict(shape=(1, 3, 5, 7), size=(3, 16)),
     dict(shape=(2, 3, 3, 5), size=(2, 1), mode="pytorch_half_pixel")],
)  # fmt: skip
def test_numbers_match_tvms_resize(case):
    after = same_numbers_after(SeparableResize(), _resize_module(**case))
    kernels = [
        gv.name_hint for gv, f in after.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    shape, size = case.get("shape", (1, 2, 3, 4)), case.get("size", (6, 8))
    assert ("resize2d_width" in kernels) == (size[1] != shape[3])
    assert ("resize2d_height" in kernels) == (size[0] != shape[2])


@pytest.mark.parametrize(
    "case",
    [dict(method="nearest_neighbor"), dict(method="cubic"), dict(mode="tf_half_pixel_for_nn"),
     dict(device=CUDA), dict(shape=(1, 2, 8, 4), size=(3, 8)),
     dict(out_dtype="float16")],
)  # fmt: skip
def test_other_resizes_stay(case):
    mod = _resize_module(**case)
    tvm.ir.assert_structural_equal(SeparableResize()(mod), mod)


@pytest.mark.parametrize(
    "mode", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]
)
def test_a_resize_to_the_inputs_own_size_is_the_input(mode):
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 2, 3, 4), "float32", "llvm:0"),
        ) -> R.Tensor((1, 2, 3, 4), "float32", "llvm:0"):
            with R.dataflow():
                y = x
                out = R.nn.relu(y)
                R.output(out)
            return out

    before = _resize_module(size=(3, 4), mode=mode)
    after = same_numbers_after(SeparableResize(), before)
    tvm.ir.assert_structural_equal(after, Expected)


def test_an_exported_upsample_builds_two_kernels_and_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")

    class Head(torch.nn.Module):
        def forward(self, x):
            y = torch.nn.functional.interpolate(x, size=(24, 20), mode="bilinear")
            return torch.relu(y) + 1.0

    x = torch.randn(1, 3, 6, 5)
    path = tmp_path / "head.onnx"
    torch.onnx.export(Head().eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    kernels = [k.kernel for k in api.kernel_schedules(compiled)]
    assert any("resize2d_width" in k for k in kernels)
    fused = [k for k in kernels if "resize2d_height" in k]
    assert fused and all("resize2d_width" not in k for k in fused)  # not fused back together
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, Head()(x).numpy(), rtol=1e-5, atol=1e-5)
