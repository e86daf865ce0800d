"""ONNX Runtime beside FlexPie (issue 19): what a stock runtime does on one device of the clusters.

    sudo .venv/bin/python benchmarks/flexpie/ort.py [--model mobilenet resnet18 resnet101 bert]
        [--quota 0.45] [--runs 15] [--out benchmarks/results/flexpie_ort.json]

Each FlexPie model has a twin that no one here wrote, with random weights and the same
architecture and input size: MobileNet v1 from timm (``mobilenetv1_100``), ResNet-18 and
ResNet-101 (at 64 x 64, as ``latency.py`` runs it) from torchvision, the 4 x 256 BERT from
transformers (sequence 128). Each is exported to ONNX and run by ONNX Runtime (one thread,
all graph optimisations) in a process held as one emulated device is: pinned to core 0 and to
``--quota`` of it by a cgroup v1 CPU quota with the cluster's period. The zoo model TVM runs
there is timed the same way, held alike (one thread, the TVM runtime), built twice: for the
clusters' devices as ``latency.py`` describes them (``{"kind": "llvm"}``: LLVM's generic x86-64)
and for this host's CPU (``cpu-serial``: its ``mcpu``). Printed beside the figures of this host
in ``benchmarks/results/flexpie_latency.json`` (the home device alone and FlexPie's plan on the
cluster, medians over every case that ran the model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from tvm_hetero.emulation import control

LATENCY = Path("benchmarks/results/flexpie_latency.json")
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from ort_timing import child, held_run  # noqa: E402


def twin(name: str):
    """The model's twin and its example input (a torch module, a tuple of tensors)."""
    import torch

    torch.manual_seed(0)
    if name == "mobilenet":
        import timm

        return timm.create_model("mobilenetv1_100", pretrained=False), (
            torch.randn(1, 3, 224, 224),
        )
    if name in ("resnet18", "resnet101"):
        import torchvision

        image = 224 if name == "resnet18" else 64
        net = getattr(torchvision.models, name)(weights=None)
        return net, (torch.randn(1, 3, image, image),)
    if name == "bert":
        from transformers import BertConfig, BertModel

        config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                            intermediate_size=1024, max_position_embeddings=128)  # fmt: skip

        class Encoder(torch.nn.Module):  # token ids in, hidden states out
            def __init__(self) -> None:
                super().__init__()
                self.bert = BertModel(config)

            def forward(self, ids):
                return self.bert(input_ids=ids).last_hidden_state

        return Encoder(), (torch.randint(0, 30522, (1, 128)),)
    raise ValueError(f"ort.py: --model {name!r}: choose from mobilenet, resnet18, resnet101, bert")


def export(name: str, folder: Path) -> Path:
    """``name``'s twin as an ONNX file in ``folder``."""
    import torch

    net, args = twin(name)
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings():  # the tracer's notes on transformers' code
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), args, str(path),
                          input_names=[f"in{k}" for k in range(len(args))], opset_version=17,
                          dynamo=False)  # fmt: skip
    return path


def compiled(name: str, folder: Path) -> dict[str, Path]:
    """The zoo model ``latency.py`` runs as ``name``, built for one device of the clusters
    (generic x86-64) and for this host's CPU, one thread each: saved compiled models."""
    from latency import MODELS

    from tvm_hetero import api
    from tvm_hetero.devices import DeviceSpec, cpu_device
    from tvm_hetero.zoo import load_zoo_model

    zoo, settings = MODELS[name]
    model = load_zoo_model(zoo, **settings)
    devices = {"generic": DeviceSpec("cpu", "cpu", {"kind": "llvm"}, index=0, threads=1),
               "host": cpu_device(threads=1)}  # fmt: skip
    out = {}
    for label, device in devices.items():
        out[label] = folder / f"{name}.{label}.tar"
        api.compile(model, [device]).save(out[label])
    return out


def cluster_figures(model: str) -> dict[str, float]:
    """Medians over this host's cases of ``flexpie_latency.json`` that ran ``model`` (ms)."""
    from tvm_hetero.records import cpu_model

    cpu = cpu_model()
    runs = [r for r in json.loads(LATENCY.read_text())["runs"]
            if r["model"] == model and r.get("cpu") == cpu]  # fmt: skip
    if not runs:
        return {}
    single = [r["measured_s"]["single"] * 1e3 for r in runs]
    flexpie = [r["measured_s"]["flexpie"] * 1e3 for r in runs]
    return {"cases": len(runs), "cluster_single_ms": float(np.median(single)),
            "flexpie_ms": float(np.median(flexpie)), "flexpie_best_ms": float(min(flexpie))}  # fmt: skip


COLUMNS = ("ort_ms", "tvm_generic_ms", "tvm_host_ms", "cluster_single_ms", "flexpie_ms")
HEADER = ("model", "ORT", "TVM gen", "TVM host", "cluster 1", "FlexPie")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", nargs="+", default=["mobilenet", "resnet18", "resnet101", "bert"]
    )
    parser.add_argument("--quota", type=float, default=0.45, help="cores of the held device")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/results/flexpie_ort.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.runs)
    problem = control.missing_privilege()
    if problem:
        sys.exit(f"ort.py: {problem}")
    rows = {}
    print("ms, one device (one thread on core 0 held to the quota)")
    print(f"{HEADER[0]:<10}" + "".join(f"{h:>10}" for h in HEADER[1:]))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model:
            runs = {"ort": held_run(export(name, Path(tmp)), args.quota, args.runs)}
            for label, path in compiled(name, Path(tmp)).items():
                runs[f"tvm_{label}"] = held_run(path, args.quota, args.runs)
            row = {f"{k}_ms": float(np.median(v)) for k, v in runs.items()}
            rows[name] = {**row, **cluster_figures(name), "runs_ms": runs}
            print(
                f"{name:<10}" + "".join(f"{rows[name].get(c, float('nan')):10.1f}" for c in COLUMNS)
            )
    meta = {"quota": args.quota, "cfs_period_us": control.cfs_period_us(args.quota),
            "runs": args.runs, "threads": 1, "core": 0}  # fmt: skip
    Path(args.out).write_text(json.dumps({**meta, "models": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
