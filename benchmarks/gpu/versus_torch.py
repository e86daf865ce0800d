"""TVM on the GPU, with and without CUDA graphs, beside torch eager and torch CUDA graphs: the
same networks, weights and inputs, timed in the same interleaved rounds by the same clock.

Here (``--export DIR``): each network of :data:`NETWORKS` is built in torch from seed 0 with its
weights rounded to multiples of 1/256 (so the carried libraries compress about 8x; the values
do not change what a GPU kernel costs), exported to ONNX and compiled for the box's GPU
(``box.json``) twice: ``NAME.graph.tar`` (the default: GPU units capture CUDA graphs) and
``NAME.launch.tar`` (``--no-cuda-graph``); one input per network (``NAME.inputs.npz``) and a
digest of the weights (``NAME.digest``). Then ``tar -cJf DIR.tar.xz DIR``.

On the box (``--time DIR --out FILE``: python3 with torch, the bundle's ``site`` on
``--site``): the same torch modules drawn again (the digest is checked; a torch that draws
otherwise is reported, not timed), fp32 with TF32 off. Per network, ``--rounds`` rounds, each
timing ``--repeat`` runs of the four in turn (TVM with graphs, TVM launching, torch eager,
torch's CUDA graph); a run is timed on the host clock from the call to the end of a device
synchronise (TVM's executor waits for the GPU after each unit; torch is synchronised), inputs
already on the GPU. p50 is the median of the rounds' medians, p99 of all runs. Every output is
compared with torch's (max abs and relative error)::

    .venv/bin/python benchmarks/gpu/versus_torch.py --export .gpu/v             # here
    python3 benchmarks/gpu/versus_torch.py --time .gpu/v --site BOX/site --out $OUT/v.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu_kernels"))
from onnx_models import BertEncoder, ResNet18


class LastHidden(nn.Module):
    """A stacked LSTM or GRU (EOP's Table 3 size: input 80, hidden 64, 2 layers): the last
    layer's output at the last step, as the zoo's ``lstm`` / ``gru`` return."""

    def __init__(self, cell: str, size: int = 80, hidden: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell](size, hidden, layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0][:, -1]


class Siamese(nn.Module):
    """The zoo's Siamese LSTM (DUET Table I): two 2-layer LSTM towers (64 -> 128) over 64 steps,
    merged by ``sigmoid(score(|h1 - h2|))``."""

    def __init__(self, size: int = 64, hidden: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.left = nn.LSTM(size, hidden, layers, batch_first=True)
        self.right = nn.LSTM(size, hidden, layers, batch_first=True)
        self.score = nn.Linear(hidden, 1)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = self.left(a)[0][:, -1] - self.right(b)[0][:, -1]
        return torch.sigmoid(self.score(diff.abs()))


class WideDeep(nn.Module):
    """The zoo's Wide-and-Deep (DUET Table I): wide linear, embedding FFN, ResNet-18 and LSTM
    branches merged by a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Linear(363, 1)
        self.ffn = nn.Sequential(nn.Linear(13, 192), nn.ReLU(), nn.Linear(192, 128), nn.ReLU(),
                                 nn.Linear(128, 64))  # fmt: skip
        self.cnn = ResNet18()
        self.rnn = nn.LSTM(80, 64, 2, batch_first=True)
        self.merge = nn.Linear(1 + 64 + 1000 + 64, 1)

    def forward(self, wide, dense, image, seq):
        parts = [self.wide(wide), self.ffn(dense), self.cnn(image), self.rnn(seq)[0][:, -1]]
        return torch.sigmoid(self.merge(torch.cat(parts, dim=1)))


def _mobilenet() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v3_small()


def _gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=128,
                                     vocab_size=8192, use_cache=False)  # fmt: skip

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = transformers.GPT2LMHeadModel(config)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids).logits

    return Logits()


NETWORKS: dict[str, tuple[Callable[[], nn.Module], dict[str, tuple]]] = {
    "bert-encoder": (BertEncoder, {"x": ((1, 128, 256), "float32")}),
    "resnet18": (ResNet18, {"x": ((1, 3, 224, 224), "float32")}),
    "lstm": (lambda: LastHidden("lstm"), {"x": ((16, 1, 80), "float32")}),
    "gru": (lambda: LastHidden("gru"), {"x": ((16, 1, 80), "float32")}),
    "siamese-lstm": (Siamese, {"a": ((1, 64, 64), "float32"), "b": ((1, 64, 64), "float32")}),
    "wide-deep": (
        WideDeep,
        {
            "wide": ((1, 363), "float32"),
            "dense": ((1, 13), "float32"),
            "image": ((1, 3, 224, 224), "float32"),
            "seq": ((1, 1, 80), "float32"),
        },
    ),
    "mobilenet-v3-small": (_mobilenet, {"x": ((1, 3, 224, 224), "float32")}),
    "gpt2-4x256": (_gpt2, {"ids": ((1, 64), "int64")}),
}
"""Name -> (torch module factory, inputs {name: (shape, dtype)}). The last two come from
torchvision and transformers (random weights): models no one here wrote."""

BUILDS = ("graph", "launch", "tuned")
"""TVM's builds of a network: dlight's kernels with CUDA graphs, the same launching every
kernel, and the tuned kernels of ``--tuning-db`` with CUDA graphs."""

RECURRENT = ("lstm", "gru", "siamese-lstm", "wide-deep")
"""Exported by TorchScript (ONNX ``LSTM`` / ``GRU`` nodes, which tvm-hetero's ONNX frontend
reads); the others by ``torch.export``."""


def seeded(name: str) -> nn.Module:
    """``NETWORKS[name]`` drawn from seed 0, weights rounded to multiples of 1/256."""
    torch.manual_seed(0)
    module = NETWORKS[name][0]().eval()
    with torch.no_grad():
        for value in module.state_dict().values():
            if value.is_floating_point():
                value.copy_(torch.round(value * 256) / 256)
    return module


def digest(module: nn.Module) -> str:
    """SHA-1 of every weight's bytes, in state-dict order."""
    sha = hashlib.sha1()
    for value in module.state_dict().values():
        sha.update(value.detach().cpu().numpy().tobytes())
    return sha.hexdigest()


def make_inputs(name: str) -> dict[str, np.ndarray]:
    """Seeded inputs (token ids below the vocabulary)."""
    rng = np.random.default_rng(0)
    out = {}
    for key, (shape, dtype) in NETWORKS[name][1].items():
        out[key] = (rng.integers(0, 8192, shape) if dtype == "int64"
                    else rng.standard_normal(shape)).astype(dtype)  # fmt: skip
    return out


def _onnx_model(name: str):
    """``NETWORKS[name]`` seeded, exported to ONNX and read by tvm-hetero; with its inputs."""
    from tvm_hetero.frontends import load_model

    module = seeded(name)
    inputs = make_inputs(name)
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        torch.onnx.export(module, args, str(path), input_names=list(inputs),
                          dynamo=name not in RECURRENT, external_data=False)  # fmt: skip
        return load_model(path), module, inputs


def _box_gpu():
    from tvm_hetero.devices import ClusterSpec

    return ClusterSpec.load(Path(__file__).parent / "box.json").device("cuda:0")


def export_tasks(folder: Path, names: list[str]) -> None:
    """The GPU kernels of every network, as tasks to tune on the box (``gpu_tuning``)."""
    from tvm_hetero import api
    from tvm_hetero.build.gpu_tuning import export_tasks as write
    from tvm_hetero.build.gpu_tuning import gpu_tasks
    from tvm_hetero.plan.placement import Placement

    gpu = _box_gpu()
    for name in names:
        model = _onnx_model(name)[0]
        tasks = gpu_tasks(api.place(model, [gpu], Placement((gpu.name,))))
        write(tasks, folder)
        print(f"{name}: {len(tasks)} kernels to tune", flush=True)


def export(
    folder: Path, names: list[str], tuning_db: str | None = None, which: Sequence[str] = BUILDS
) -> None:
    from tvm_hetero import api
    from tvm_hetero.build.multi_device import BuildOptions

    folder.mkdir(parents=True, exist_ok=True)
    gpu = _box_gpu()
    builds = {"graph": BuildOptions(cuda_graph=True), "launch": BuildOptions(cuda_graph=False)}
    if tuning_db:
        builds["tuned"] = BuildOptions(ms_database=tuning_db, cuda_graph=True)
    builds = {k: v for k, v in builds.items() if k in which}
    for name in names:
        model, module, inputs = _onnx_model(name)
        (folder / f"{name}.digest").write_text(digest(module))
        np.savez(folder / f"{name}.inputs.npz", **inputs)
        for suffix, options in builds.items():
            compiled = api.compile(model, [gpu], options=options)
            compiled.save(folder / f"{name}.{suffix}.tar")
        print(f"exported {name}", flush=True)


def _timed(fn: Callable[[], object], sync: Callable[[], None], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _torch_runs(module: nn.Module, inputs: dict[str, np.ndarray]):
    """Eager and CUDA-graph callables of ``module`` on ``inputs`` (on the GPU), and the output;
    the graph's callable is the error's text where torch cannot capture the module."""
    args = [torch.from_numpy(v).cuda() for v in inputs.values()]
    eager = module(*args).detach().cpu().numpy()
    try:
        return (lambda: module(*args)), _captured(module, args), eager
    except Exception as err:
        return (lambda: module(*args)), f"{type(err).__name__}: {err}"[:300], eager


def _captured(module: nn.Module, args: list) -> Callable[[], None]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            module(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module(*args)
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay


def time_all(folder: Path, names: list[str], out: Path, rounds: int, repeat: int) -> int:
    from contextlib import ExitStack

    import tvm

    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import Executor

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failed = 0
    for name in names:
        row: dict = {"model": name, "torch": torch.__version__, "tvm": tvm.__version__,
                     "gpu": torch.cuda.get_device_name(), "rounds": rounds, "repeat": repeat}  # fmt: skip
        try:
            module = seeded(name)
            # another torch or transformers may draw other weights: timed all the same (what a
            # kernel costs does not depend on the values), compared only when the same
            row["same_weights"] = digest(module) == (folder / f"{name}.digest").read_text()
            module = module.cuda()
            with np.load(folder / f"{name}.inputs.npz") as data:
                inputs = {k: data[k] for k in data.files}
            with torch.no_grad(), ExitStack() as stack:
                eager, replay, reference = _torch_runs(module, inputs)
                runs = {}
                for suffix in BUILDS:
                    if not (folder / f"{name}.{suffix}.tar").is_file():
                        continue  # tuned builds exist only where a database was given
                    tmp = stack.enter_context(tempfile.TemporaryDirectory())
                    deployment = load(folder / f"{name}.{suffix}.tar", tmp)
                    executor = stack.enter_context(Executor(deployment))
                    tensors = executor.place_inputs(inputs)
                    (got,) = executor.run(inputs)
                    if row["same_weights"]:
                        err = float(np.max(np.abs(got - reference)))
                        row[f"tvm_{suffix}_max_abs_err"] = err
                        row[f"tvm_{suffix}_max_rel_err"] = err / float(np.max(np.abs(reference)))
                    runs[f"tvm_{suffix}"] = (lambda e=executor, t=tensors: e.run_tensors(t),
                                             lambda: None)  # fmt: skip
                runs["torch_eager"] = (eager, torch.cuda.synchronize)
                if isinstance(replay, str):
                    row["torch_cuda_graph_error"] = replay
                else:
                    runs["torch_cuda_graph"] = (replay, torch.cuda.synchronize)
                for fn, sync in runs.values():
                    _timed(fn, sync, 20)  # warm-up (TVM's first run captured its graph)
                samples = {k: [] for k in runs}
                medians = {k: [] for k in runs}
                for _ in range(rounds):
                    for key, (fn, sync) in runs.items():
                        got_ms = _timed(fn, sync, repeat)
                        samples[key] += got_ms
                        medians[key].append(float(np.median(got_ms)))
                for key in runs:
                    row[f"{key}_p50_ms"] = float(np.median(medians[key]))
                    row[f"{key}_p99_ms"] = float(np.percentile(samples[key], 99))
                    row[f"{key}_round_p50_ms"] = medians[key]
        except Exception as err:  # report it and go on with the others
            failed += 1
            row["error"] = f"{type(err).__name__}: {err}"
        print(json.dumps(row), flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--export", type=Path, metavar="DIR")
    group.add_argument("--time", type=Path, metavar="DIR")
    group.add_argument("--tasks", type=Path, metavar="DIR", help="export kernels to tune")
    parser.add_argument("--tuning-db", help="with --export: also NAME.tuned.tar from it")
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS))
    parser.add_argument("--site", type=Path, help="the bundle's site folder (on the box)")
    parser.add_argument("--out", type=Path, default=Path("versus_torch.jsonl"))
    parser.add_argument("--only", nargs="+", choices=list(NETWORKS), default=list(NETWORKS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    if args.export:
        export(args.export, args.only, args.tuning_db, args.builds)
        return 0
    if args.tasks:
        export_tasks(args.tasks, args.only)
        return 0
    if args.site:  # after torch's own packages: the bundle brings TVM and tvm-hetero only
        os.environ["TVM_USE_RUNTIME_LIB"] = "1"
        sys.path.append(str(args.site))
    return time_all(args.time, args.only, args.out, args.rounds, args.repeat)


if __name__ == "__main__":
    sys.exit(main())
