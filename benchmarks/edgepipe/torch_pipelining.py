"""EdgePipe against the peer runtime, torch.distributed.pipelining, on one emulated cluster.

    sudo .venv/bin/python benchmarks/edgepipe/torch_pipelining.py [--model vit_small_patch16_224]
        [--image 224] [--case ring3-1000] [--microbatches 16] [--repeat 3]
        [--out benchmarks/results/edgepipe_torch.json]

A ViT from timm (seeded random weights, no download) is exported to ONNX (batch 1). The case's
cluster is brought up as ``benchmarks/optimize/clusters.py`` describes it (``ring3-1000``: three
devices of 0.6 core, links of 1 Gbit/s; every device built for this host's CPU). EdgePipe plans
the ONNX file on it from layer times measured on the workers; its plan is compiled and run
pipelined (``--microbatches`` in flight, one warm-up batch, ``--repeat`` timed ones). Then the
same model runs the same way under torch.distributed.pipelining (``ScheduleGPipe``, gloo; one
process a device, inside its namespace, on its cores and in its cgroup, one thread), with the
split EdgePipe chose: each stage ends at the piece of ``vit_pieces`` (embedding, block halves,
head) whose weights end nearest where the stage's do (printed, with the gap). ONNX Runtime (one
thread) runs the microbatches one after another on the first device, held alike. The devices'
idle tvm-hetero workers stay in their cgroups meanwhile. Rates are microbatches per second of a
whole batch (fill and drain included), medians of ``--repeat``; EdgePipe's steady rate (once
the pipeline is full) is kept beside. Results: ``benchmarks/results/edgepipe_torch.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "flexpie"))
sys.path.insert(0, str(HERE.parent / "optimize"))
sys.path.insert(0, str(HERE.parent))
from clusters import UNIFORM  # noqa: E402
from latency import spec_file  # noqa: E402
from stamp import stamp  # noqa: E402
from throughput import throughput  # noqa: E402
from vit_pieces import pieces, vit, weight_bytes  # noqa: E402

from tvm_hetero import api  # noqa: E402
from tvm_hetero.devices import ClusterSpec  # noqa: E402
from tvm_hetero.emulation import control  # noqa: E402
from tvm_hetero.emulation.layout import cluster_tag, plan_layout  # noqa: E402
from tvm_hetero.frontends import load_model  # noqa: E402
from tvm_hetero.strategies.edgepipe import planner as strategy  # noqa: E402

TORCH_PORT = 29500
NETNS_ETC = Path("/etc/netns")


def export(name: str, image: int, path: Path) -> None:
    """``name`` at batch 1 as ONNX (TorchScript exporter, opset 17)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(vit(name, image), (torch.randn(1, 3, image, image),), str(path),
                          input_names=["in0"], dynamo=False, opset_version=17)  # fmt: skip


def torch_split(layer_weights: list[int], stages: list[tuple[int, int]], model) -> list[tuple]:
    """Each EdgePipe stage (first and last layer) as pieces ``(first, last)`` of the torch model:
    a stage ends at the piece whose weights end nearest where the stage's do (fractions of the
    model's weights); with the gap, for the record."""
    parts = pieces(model)
    ends = np.cumsum([weight_bytes(p) for p in parts]) / sum(weight_bytes(p) for p in parts)
    ours = np.cumsum(layer_weights) / sum(layer_weights)
    out, first = [], 0
    for k, (_, last) in enumerate(stages):
        if k == len(stages) - 1:
            out.append((first, len(parts) - 1, 0.0))
            break
        end = int(np.argmin(abs(ends - ours[last])))
        out.append((first, end, float(abs(ends[end] - ours[last]))))
        first = end + 1
    return out


def on_device(node, command: list[str]) -> subprocess.Popen:
    """``command`` as a process of emulated device ``node``: its namespace, cores and cgroups.
    Gloo binds to the address its host name resolves to: in the namespace (``ip netns exec``
    mounts ``/etc/netns/NAMESPACE/hosts`` over ``/etc/hosts``) that is the device's address."""
    hosts = NETNS_ETC / node.namespace / "hosts"
    hosts.parent.mkdir(parents=True, exist_ok=True)
    hosts.write_text(f"127.0.0.1 localhost\n{node.identity} {socket.gethostname()}\n")
    return control.start_on_device(node, command, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=HERE)  # fmt: skip


def finished(procs: list[subprocess.Popen], timeout_s: float) -> list[dict]:
    """The JSON lines of ``procs`` once all have ended; the first to fail (or the timeout)
    stops the others and is raised with its error output."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs):
        failed = [p for p in procs if p.returncode not in (None, 0)]
        if failed or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            bad = failed[0] if failed else procs[0]
            raise RuntimeError(f"{bad.args}: exit {bad.returncode}: {bad.stderr.read()[-3000:]}")
        time.sleep(0.5)
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"{proc.args}: exit {proc.returncode}: {stderr[-3000:]}")
        out += [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--case", default="ring3-1000", choices=sorted(UNIFORM))
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "edgepipe_torch.json"))
    args = parser.parse_args()
    if (why := control.missing_privilege()) is not None:
        parser.error(why)
    mb = args.microbatches
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        onnx_file = folder / "model.onnx"
        export(args.model, args.image, onnx_file)
        path = spec_file(args.case, UNIFORM[args.case], folder, "host")
        spec, tag = ClusterSpec.load(path), cluster_tag(path)
        layout = plan_layout(spec, tag)
        nodes = {n.device: n for n in layout.nodes}
        cluster = control.up(spec, layout)
        try:
            devices = list(cluster.devices)
            model = load_model(str(onnx_file))
            start = time.perf_counter()
            result = strategy.plan_with_measurements(model, devices, cluster,
                                                     db=str(folder / "db.jsonl"))  # fmt: skip
            plan_s = time.perf_counter() - start
            plan = result.plan
            stages = [(s.first, s.last) for s in result.partition.stages]
            used = list(plan.devices)
            print(f"EdgePipe: {len(result.layers.ops)} layers, stages {stages} on {used} "
                  f"(planned in {plan_s:.0f} s)", flush=True)  # fmt: skip
            deployment = api.compile(model, api.in_plan_order(devices, plan), plan).deployment
            feeds = [model.random_inputs(seed) for seed in range(mb)]
            steady, whole = throughput(deployment, feeds, args.repeat)
            print(f"  tvm-hetero EdgePipe: {whole * 1:.2f} /s a batch, {steady:.2f} steady",
                  flush=True)  # fmt: skip
            split = torch_split(
                list(result.layers.weight_bytes), stages, vit(args.model, args.image)
            )
            print(f"  torch stages (pieces): {[(a, b) for a, b, _ in split]}, weight gap "
                  f"{max(g for *_, g in split):.1%}", flush=True)  # fmt: skip
            master = f"{nodes[used[0]].identity}:{TORCH_PORT}"
            procs = [
                on_device(nodes[d], [sys.executable, "peer_on_device.py", "torch", str(k),
                                     str(len(used)), master, str(a), str(b), args.model,
                                     str(args.image), str(mb), str(args.repeat)])
                for k, (d, (a, b, _)) in enumerate(zip(used, split, strict=True))
            ]  # fmt: skip
            (torch_run,) = finished(procs, 1800)
            torch_rate = mb / statistics.median(torch_run["seconds"])
            print(f"  torch pipelining: {torch_rate:.2f} /s a batch", flush=True)
            first = nodes[devices[0].name]
            (ort_run,) = finished([on_device(first, [
                sys.executable, "peer_on_device.py", "ort", str(onnx_file), str(args.image),
                str(mb), str(args.repeat)])], 1800)  # fmt: skip
            ort_rate = mb / statistics.median(ort_run["seconds"])
            print(f"  ONNX Runtime on {first.device}: {ort_rate:.2f} /s", flush=True)
        finally:
            control.down(tag)
            for node in layout.nodes:
                shutil.rmtree(NETNS_ETC / node.namespace, ignore_errors=True)
            with contextlib.suppress(OSError):  # only where nothing else is in it
                NETNS_ETC.rmdir()
    row = {**stamp(),
        "model": args.model, "image": args.image, "case": args.case, "microbatches": mb,
        "repeat": args.repeat, "stages": stages, "devices": used,
        "torch_pieces": [[a, b] for a, b, _ in split], "weight_gap": max(g for *_, g in split),
        "edgepipe_per_s": whole, "edgepipe_steady_per_s": steady, "torch_per_s": torch_rate,
        "ort_one_device_per_s": ort_rate, "plan_s": plan_s,
        "checksums": {"torch": torch_run["checksum"], "ort": ort_run["checksum"]},
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(row, indent=1) + "\n")
    print(f"EdgePipe / torch: {whole / torch_rate:.2f}x the rate; / ONNX Runtime on one device: "
          f"{whole / ort_rate:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
