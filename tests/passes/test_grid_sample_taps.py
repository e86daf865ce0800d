"""GridSampleTaps: CPU bilinear grid samples as each point's four taps, then a weighted gather."""

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
from tvm_hetero.passes import GridSampleTaps

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _sample_module(shape=(1, 2, 3, 4), points=(5, 1), method="bilinear", padding="zeros",
                   align=False, device=CPU):  # fmt: skip
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    grid = relax.Var("grid", relax.TensorType((shape[0], 2, *points), "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, grid]):
        with bb.dataflow():
            y = relax.op.image.grid_sample(x, grid, method=method, layout="NCHW",
                                           padding_mode=padding, align_corners=align)  # fmt: skip
            y = bb.emit_output(relax.op.nn.relu(bb.emit(y)))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _at(value, size):
    """Where a grid value falls in the image, corners not aligned (TOPI's arithmetic)."""
    return T.float32(-0.5) + (value + T.float32(1.0)) * T.float32(size) / T.float32(2.0)


def _inside(k, y, x):
    row = k // T.int64(2) + T.Cast("int64", T.floor(y))
    col = T.Cast("int64", T.floor(x)) + k % T.int64(2)
    return tvm.tirx.all(T.int64(0) <= row, T.int64(0) <= col, row < T.int64(3), col < T.int64(4))


def _index(k, y, x):
    below, left = T.Cast("int32", T.floor(y)), T.Cast("int32", T.floor(x))
    flat = k // T.int64(2) * T.int64(4) + T.Cast("int64", below * 4) + T.Cast("int64", left)
    return T.Cast("int32", T.Select(_inside(k, y, x), flat + k % T.int64(2), T.int64(0)))


def _weight(k, y, x):
    dy, dx = (
        y - T.Cast("float32", T.Cast("int32", T.floor(y))),
        x - T.Cast("float32", T.Cast("int32", T.floor(x))),
    )
    along_y = T.Select(k // T.int64(2) == T.int64(1), dy, T.float32(1.0) - dy)
    along_x = T.Select(k % T.int64(2) == T.int64(1), dx, T.float32(1.0) - dx)
    return T.Select(_inside(k, y, x), along_y * along_x, T.float32(0.0))


def _idx(indices, b, k, h, w):
    return indices[b, T.int64(k), h, w]


def _lowest(indices, b, h, w):
    taps = [_idx(indices, b, k, h, w) for k in range(4)]
    return T.min(T.min(T.min(taps[0], taps[1]), taps[2]), taps[3])


def _highest(indices, b, h, w):
    taps = [_idx(indices, b, k, h, w) for k in range(4)]
    return T.max(T.max(T.max(taps[0], taps[1]), taps[2]), taps[3])


def test_a_bilinear_sample_becomes_taps_and_a_gather():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def grid_sample_taps(
            grid: T.Buffer((T.int64(1), T.int64(2), T.int64(5), T.int64(1)), "float32"),
            indices: T.Buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(1)), "int32"),
            weights: T.Buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(1)), "float32"),
        ):
            T.func_attr({"tirx.noalias": True})
            for b, k, h, w in T.grid(T.int64(1), T.int64(4), T.int64(5), T.int64(1)):
                with T.sblock("tap_indices"):
                    v_b, v_k, v_h, v_w = T.axis.remap("SSSS", [b, k, h, w])
                    T.reads(grid[v_b, T.int64(0) : T.int64(2), v_h, v_w])
                    T.writes(indices[v_b, v_k, v_h, v_w])
                    indices[v_b, v_k, v_h, v_w] = _index(
                        v_k, _at(grid[v_b, T.int64(1), v_h, v_w], 3),
                        _at(grid[v_b, T.int64(0), v_h, v_w], 4),
                    )  # fmt: skip
            for b, k, h, w in T.grid(T.int64(1), T.int64(4), T.int64(5), T.int64(1)):
                with T.sblock("tap_weights"):
                    v_b, v_k, v_h, v_w = T.axis.remap("SSSS", [b, k, h, w])
                    T.reads(grid[v_b, T.int64(0) : T.int64(2), v_h, v_w])
                    T.writes(weights[v_b, v_k, v_h, v_w])
                    weights[v_b, v_k, v_h, v_w] = _weight(
                        v_k, _at(grid[v_b, T.int64(1), v_h, v_w], 3),
                        _at(grid[v_b, T.int64(0), v_h, v_w], 4),
                    )  # fmt: skip

        @T.prim_func(private=True, s_tir=True)
        def grid_sample_gather(
            flat: T.Buffer((T.int64(1), T.int64(2), T.int64(12)), "float32"),
            indices: T.Buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(1)), "int32"),
            weights: T.Buffer((T.int64(1), T.int64(4), T.int64(5), T.int64(1)), "float32"),
            out: T.Buffer((T.int64(1), T.int64(2), T.int64(5), T.int64(1)), "float32"),
        ):
            T.func_attr({"op_pattern": 4, "tirx.noalias": True})
            for b, c, h, w in T.grid(T.int64(1), T.int64(2), T.int64(5), T.int64(1)):
                with T.sblock("grid_sample_gather"):
                    v_b, v_c, v_h, v_w = T.axis.remap("SSSS", [b, c, h, w])
                    T.reads(
                        weights[v_b, T.int64(0) : T.int64(4), v_h, v_w],
                        flat[v_b, v_c, _lowest(indices, v_b, v_h, v_w) :
                             T.Cast("int64", _lowest(indices, v_b, v_h, v_w))
                             + (T.Cast("int64", _highest(indices, v_b, v_h, v_w)) + T.int64(1)
                                - T.Cast("int64", _lowest(indices, v_b, v_h, v_w)))],
                        indices[v_b, T.int64(0) : T.int64(4), v_h, v_w],
                    )  # fmt: skip
                    T.writes(out[v_b, v_c, v_h, v_w])
                    out[v_b, v_c, v_h, v_w] = (
                        weights[v_b, T.int64(0), v_h, v_w]
                        * flat[v_b, v_c, _idx(indices, v_b, 0, v_h, v_w)]
                        + weights[v_b, T.int64(1), v_h, v_w]
                        * flat[v_b, v_c, _idx(indices, v_b, 1, v_h, v_w)]
                        + weights[v_b, T.int64(2), v_h, v_w]
                        * flat[v_b, v_c, _idx(indices, v_b, 2, v_h, v_w)]
                        + weights[v_b, T.int64(3), v_h, v_w]
                        * flat[v_b, v_c, _idx(indices, v_b, 3, v_h, v_w)]
                    )

        @R.function
        def main(
            x: R.Tensor((1, 2, 3, 4), "float32", "llvm:0"),
            grid: R.Tensor((1, 2, 5, 1), "float32", "llvm:0"),
        ) -> R.Tensor((1, 2, 5, 1), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                taps = R.call_tir(
                    cls.grid_sample_taps, (grid,),
                    out_ty=[R.Tensor((1, 4, 5, 1), "int32", "llvm:0"),
                            R.Tensor((1, 4, 5, 1), "float32", "llvm:0")],
                )  # fmt: skip
                flat = R.reshape(x, R.shape([1, 2, 12]))
                indices = taps[0]
                weights = taps[1]
                y = R.call_tir(
                    cls.grid_sample_gather, (flat, indices, weights),
                    out_ty=R.Tensor((1, 2, 5, 1), "float32", "llvm:0"),
                )  # fmt: skip
                out = R.nn.relu(y)
                R.output(out)
            return out

    before = _sample_module()
    text = before.script()
    after = GridSampleTaps()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    "case",
    [dict(), dict(align=True), dict(padding="border"), dict(padding="border", align=True),
     dict(shape=(2, 3, 7, 5), points=(4, 6)), dict(shape=(1, 4, 1, 1), points=(3, 3))],
)  # fmt: skip
def test_numbers_match_tvms_grid_sample(case):
    """Standard normal grid values (a third of them outside [-1, 1]: taps outside the image)
    give TVM's kernel's numbers, to a rounding."""
    after = same_numbers_after(GridSampleTaps(), _sample_module(**case))
    kernels = {
        gv.name_hint for gv, f in after.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    assert kernels == {"grid_sample_taps", "grid_sample_gather"}


@pytest.mark.parametrize(
    "case",
    [dict(method="nearest"), dict(method="bicubic"), dict(padding="reflection"),
     dict(device=CUDA)],
)  # fmt: skip
def test_other_grid_samples_stay(case):
    mod = _sample_module(**case)
    tvm.ir.assert_structural_equal(GridSampleTaps()(mod), mod)


def test_an_exported_deformable_sample_builds_taps_apart_and_matches_torch(tmp_path):
    """Deformable attention's sample (points computed from the input, zero padding, corners
    not aligned) through the whole build: the taps stay a kernel of their own (fused into the
    gather they would be computed for every channel again), the ReLU after the gather fuses
    into it, and the output is torch's."""
    torch = pytest.importorskip("torch")

    class Sample(torch.nn.Module):
        def forward(self, image, points):
            grid = 1.2 * torch.tanh(points)
            y = torch.nn.functional.grid_sample(image, grid, align_corners=False)
            return torch.relu(y)

    args = (torch.randn(2, 8, 7, 6), torch.randn(2, 30, 4, 2))
    path = tmp_path / "sample.onnx"
    torch.onnx.export(Sample().eval(), args, str(path), input_names=["image", "points"],
                      dynamo=False, opset_version=17)  # fmt: skip
    compiled = api.compile(load_model(path), [cpu_device()])
    kernels = [k.kernel for k in api.kernel_schedules(compiled)]
    assert any("grid_sample_taps" in k for k in kernels)
    gathers = [k for k in kernels if "grid_sample_gather" in k]
    assert gathers and all("taps" not in k and "relu" in k for k in gathers)
    (got,) = api.run(compiled, {"image": args[0].numpy(), "points": args[1].numpy()})
    np.testing.assert_allclose(got, Sample()(*args).numpy(), rtol=1e-5, atol=1e-5)
