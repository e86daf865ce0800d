"""TVM against torch on the GPU box: the same networks, the same weights, the same inputs.

Here (``--export DIR``): the 4 x 256 BERT encoder and ResNet-18 of
``benchmarks/cpu_kernels/onnx_models.py`` with seeded weights, exported to ONNX and compiled for
the box's GPU (``box.json``) into ``DIR/NAME.gpu.tar``, with one input (``NAME.inputs.npz``) and
a digest of the weights (``NAME.digest``; the weights themselves would double what the device
tool carries). On the box (``--time DIR --out FILE``, torch there): the same modules drawn from
the same seed (their digest is checked: a torch that draws otherwise is reported, not timed),
in fp32 with TF32 off, eagerly and as a CUDA graph (CUDA events, median of 200 after 30
warm-ups); outputs saved beside, for the check against TVM's (``latency.py --inputs-dir DIR``
times the TVM builds on the same inputs)::

    .venv/bin/python benchmarks/gpu/torch_ref.py --export .gpu/t          # here
    python3 benchmarks/gpu/torch_ref.py --time .gpu/t --out $OUT/torch.jsonl   # on the box
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu_kernels"))
from onnx_models import MODELS

NAMES = {name.split(" ")[0]: name for name in MODELS if not name.startswith("mlp")}
"""The MLP (4096 wide, 100 MB of weights) is left out: it does not fit a carry."""


def seeded(name: str) -> torch.nn.Module:
    """``MODELS[name]`` with the weights ``torch.manual_seed(0)`` draws."""
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


def digest(module: torch.nn.Module) -> str:
    """SHA-1 of every weight's float32 bytes, in state-dict order."""
    import hashlib

    sha = hashlib.sha1()
    for value in module.state_dict().values():
        sha.update(value.detach().cpu().float().numpy().tobytes())
    return sha.hexdigest()


def export(folder: Path) -> None:
    from tvm_hetero import api
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.devices import ClusterSpec
    from tvm_hetero.frontends import load_model

    folder.mkdir(parents=True, exist_ok=True)
    gpu = ClusterSpec.load(Path(__file__).parent / "box.json").device("cuda:0")
    for short, name in NAMES.items():
        module = seeded(name)
        (folder / f"{short}.digest").write_text(digest(module))
        x = np.random.default_rng(0).standard_normal(MODELS[name][1]).astype("float32")
        np.savez(folder / f"{short}.inputs.npz", x=x)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{short}.onnx"
            torch.onnx.export(module, (torch.from_numpy(x),), str(path), input_names=["x"],
                              dynamo=True, external_data=False)  # fmt: skip
            model = load_model(path)
        api.compile(model, [gpu], options=BuildOptions()).save(folder / f"{short}.gpu.tar")
        print(f"wrote {folder / short}.gpu.tar")


def _events_ms(fn, runs: int = 200, warmup: int = 30) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def time_torch(folder: Path, out: Path) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for short, name in NAMES.items():
        module = seeded(name)
        if digest(module) != (folder / f"{short}.digest").read_text():
            row = {"model": short, "torch": torch.__version__, "error": "other weights drawn"}
            print(json.dumps(row), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            continue
        module = module.cuda()
        x = torch.from_numpy(np.load(folder / f"{short}.inputs.npz")["x"]).cuda()
        with torch.no_grad():
            eager = _events_ms(lambda m=module, x=x: m(x))
            static = x.clone()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    module(static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                result = module(static)
            graphed = _events_ms(graph.replay)
            np.savez(folder / f"{short}.torch_out.npz", y=result.cpu().numpy())
        row = {"model": short, "torch": torch.__version__, "eager_ms": eager,
               "cuda_graph_ms": graphed, "gpu": torch.cuda.get_device_name()}  # fmt: skip
        print(json.dumps(row), flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--export", type=Path, metavar="DIR")
    group.add_argument("--time", type=Path, metavar="DIR")
    parser.add_argument("--out", type=Path, default=Path("torch.jsonl"))
    args = parser.parse_args()
    if args.export:
        export(args.export)
    else:
        time_torch(args.time, args.out)


if __name__ == "__main__":
    main()
