"""What blocked channels (NCHWc) between layers would give, measured with a prototype conversion
that lives in this benchmark, not in the package, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/models/blocked_channels.py [--runs 20] [--only CASE ...]

ONNX Runtime converts a CNN's input once to blocked channels and runs every layer on blocked
maps; we run every layer on NCHW maps. The prototype: before legalization, Relax's
``ConvertLayout`` puts each convolution with one group whose input and output channels the
block divides in ``NCHW{B}c`` (weights ``OIHW{B}i{B}o``, laid out at compile time), and each
depthwise one whose channels it divides too (weights ``OIHW{B}o``), with ``B`` the matmul
rule's panel width (two vectors: 32 floats with AVX-512), so its panels are the weights as
laid out; element-wise operators follow the layout and ``layout_transform`` kernels are left
where a layer does not (pools, norms, grouped convolutions, channels the block does not
divide). Those convolutions are legalized by TOPI's ``conv2d_NCHWc`` and, depthwise, by a TE
compute here (this wheel registers no ``depthwise_conv2d_NCHWc``), and scheduled by the
package's rules (1x1 ones by the matmul rule, written back a vector of channels a position;
depthwise ones by the convolution rule). ``PadConvolutionOutputs`` is off in the blocked
build: it widens a convolution's rows to whole vectors and crops them after with a slice that
``ConvertLayout`` leaves in NCHW, which put two transforms around every depthwise layer (the
NCHW convolutions a whole model keeps lose their widening with it). Cases: chains of four
inverted residual blocks (1x1 pairs around a 3x3 depthwise layer, and the pairs alone; blocked
from end to end) and whole corpus models (blocked around each layer the prototype leaves in
NCHW). Each is compiled for the whole CPU as the package builds it (``NCHW``) and with the
prototype (``blocked``), both run by our executor beside ONNX Runtime on the same cores and
threads in interleaved rounds (medians); both outputs checked against ONNX Runtime's.
Results: ``benchmarks/results/blocked_channels.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]
from onnx_models import append_rows, export_case  # noqa: E402
from stamp import stamp  # noqa: E402
from transposed_writes import blocks  # noqa: E402

CHAINS = {  # name: (channels, expanded channels, map side, blocks, depthwise window or 0)
    "4 x 96->576->96 @14": (96, 576, 14, 4, 0),
    "4 x 160->960->160 @7": (160, 960, 7, 4, 0),
    "4 x 96->576 dw3->96 @14": (96, 576, 14, 4, 3),
}
MODELS = ("mobilenet_v2", "regnet_x_400mf", "poolformer_s12", "mnasnet1_0")


def blocked_convolutions(block: int):
    """The prototype: a module pass putting each one-group convolution whose channels ``block``
    divides in ``NCHW{block}c``, legalized by TOPI's ``conv2d_NCHWc``, and each undilated
    depthwise one whose channels it divides, legalized by :func:`depthwise_nchwc`."""
    import tvm
    from tvm import relax, topi

    default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")

    def layouts(call) -> dict:
        if call.op.name != "relax.nn.conv2d":
            return {}
        weights = call.args[1]
        shape = weights.value.shape if hasattr(weights, "value") else weights.struct_info.shape
        outputs, inputs = (int(d) for d in list(shape)[:2])
        groups = int(call.attrs.groups)
        if outputs % block == 0 and groups == 1 and inputs % block == 0:
            return {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW{block}i{block}o"]}
        undilated = all(int(d) == 1 for d in call.attrs.dilation)  # depthwise_nchwc has none
        if outputs % block == 0 and groups == outputs and inputs == 1 and undilated:
            return {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW{block}o"]}
        return {"relax.nn.conv2d": ["NCHW", "OIHW"]}

    def legalize(bb, call):
        a = call.attrs
        if a.data_layout == "NCHW":
            return default(bb, call)
        if int(a.groups) > 1:
            return bb.call_te(
                depthwise_nchwc, call.args[0], call.args[1], [int(s) for s in a.strides],
                [int(p) for p in a.padding], primfunc_name_hint="depthwise_nchwc",
            )  # fmt: skip
        with tvm.target.Target("llvm"):  # TOPI asks for a target; the compute is the same
            return bb.call_te(
                topi.nn.conv2d_NCHWc, call.args[0], call.args[1], [int(s) for s in a.strides],
                [int(p) for p in a.padding], [int(d) for d in a.dilation], str(a.data_layout),
                str(a.out_layout), "float32", primfunc_name_hint="conv2d_nchwc",
            )  # fmt: skip

    @tvm.transform.module_pass(opt_level=0, name="BlockedConvolutionsPrototype")
    def convert(mod, _ctx):
        mod = relax.transform.ConvertLayout({}, layout_cb=layouts)(mod)
        return relax.transform.LegalizeOps({"relax.nn.conv2d": legalize})(mod)

    return convert


def depthwise_nchwc(data, weights, strides: list[int], padding: list[int]):
    """A depthwise convolution over ``[N, C / B, H, W, B]`` maps with ``[C / B, 1, KH, KW, B]``
    weights (TE), padding ``(top, left, bottom, right)``."""
    from tvm import te, topi

    n, blocks, height, width, lanes = data.shape
    _, _, kh, kw, _ = weights.shape
    (sh, sw), (top, left, bottom, right) = strides, padding
    padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0])
    rows = (height + top + bottom - kh) // sh + 1
    columns = (width + left + right - kw) // sw + 1
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    return te.compute(
        (n, blocks, rows, columns, lanes),
        lambda b, k, y, x, c: te.sum(
            padded[b, k, y * sh + ry, x * sw + rx, c] * weights[k, 0, ry, rx, c], axis=[ry, rx]
        ),
        name="depthwise_nchwc",
    )


@contextmanager
def prototype(block: int):
    """Builds inside run :func:`blocked_convolutions` just before the package's legalization,
    without ``PadConvolutionOutputs``."""
    import tvm

    from tvm_hetero import pipelines

    passes = dict(pipelines.PASSES)
    convert = blocked_convolutions(block)
    legalize = passes["LegalizeWithFastMath"]
    pipelines.PASSES["LegalizeWithFastMath"] = lambda **kw: tvm.transform.Sequential(
        [convert, legalize(**kw)]
    )
    pipelines.PASSES["PadConvolutionOutputs"] = lambda **_: tvm.transform.Sequential([])
    try:
        yield
    finally:
        pipelines.PASSES.update(passes)


def measure(path: Path, feeds: dict, runs: int, vectors: int = 2) -> dict:
    """Milliseconds (medians) of ``path`` built as the package builds it and with the
    prototype, and of ONNX Runtime, in interleaved rounds; each build's largest relative error
    against ONNX Runtime's first output; a block is ``vectors`` vectors of channels."""
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.runtime.executor import interleaved_run_seconds
    from tvm_hetero.runtime.onnx_session import session_options
    from tvm_hetero.schedules.cpu.common import vector_lanes

    device = resolve_device("cpu")
    model = load_model(str(path))
    feeds = {i.name: feeds[i.name] for i in model.inputs}
    want = ort.InferenceSession(str(path), session_options()).run(None, feeds)[0]
    nchw = api.compile(model, [device])
    with prototype(vectors * vector_lanes(make_target(device.target), 32)):
        blocked = api.compile(model, [device])
    errors = [
        float(np.abs(api.run(c, feeds)[0] - want).max() / np.abs(want).max())
        for c in (nchw, blocked)
    ]
    peer = OnnxRuntimePeer(path, device, list(feeds.values()))
    nchw_s, blocked_s, ort_s = interleaved_run_seconds(
        [nchw.deployment, blocked.deployment], [runs, runs], peers=[peer]
    )
    return {"threads": device.threads, "nchw_ms": 1e3 * float(np.median(nchw_s)),
            "blocked_ms": 1e3 * float(np.median(blocked_s)),
            "ort_ms": 1e3 * float(np.median(ort_s)), "max_rel_error": max(errors)}  # fmt: skip


class InvertedResidual(torch.nn.Module):
    """``x + conv(relu(depthwise(relu(conv(x)))))``: MobileNet-V2's block, stride 1."""

    def __init__(self, channels: int, expanded: int, window: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(channels, expanded, 1), torch.nn.ReLU(),
            torch.nn.Conv2d(expanded, expanded, window, 1, window // 2, groups=expanded),
            torch.nn.ReLU(), torch.nn.Conv2d(expanded, channels, 1),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def export_chain(chain: tuple[int, int, int, int, int], path: Path) -> np.ndarray:
    """One of :data:`CHAINS` exported to ``path``; returns its input."""
    channels, expanded, side, count, window = chain

    def build() -> torch.nn.Module:
        if not window:
            return blocks(channels, expanded, count, swish=False)
        return torch.nn.Sequential(
            *[InvertedResidual(channels, expanded, window) for _ in range(count)]
        )

    return export_case(build, (1, channels, side, side), path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--vectors",
        type=int,
        default=2,
        choices=(1, 2),
        help="vectors of channels a block (default 2: the matmul's panel)",
    )
    names = [*CHAINS, *MODELS]
    parser.add_argument("--only", nargs="+", choices=names, metavar="CASE")
    args = parser.parse_args()
    from zoo import exported_feeds

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or names:
            path = Path(tmp) / f"{len(rows)}.onnx"
            if name in CHAINS:
                feeds = {"x": export_chain(CHAINS[name], path)}
            else:
                feeds = exported_feeds(name, path)[1]
            row = {
                **stamp(),
                "case": name,
                "vectors": args.vectors,
                **measure(path, feeds, args.runs, args.vectors),
            }
            rows.append(row)
            print(
                f"{name:24} NCHW {row['nchw_ms']:7.3f} ms  blocked {row['blocked_ms']:7.3f} ms"
                f"  ORT {row['ort_ms']:7.3f} ms  err {row['max_rel_error']:.1e}",
                flush=True,
            )
    append_rows(rows, "blocked_channels.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
