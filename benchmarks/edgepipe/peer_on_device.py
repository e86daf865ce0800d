"""The peers of ``torch_pipelining.py``, each in the process of one emulated device (started
inside its namespace, on its cores and in its cgroup). One JSON line on stdout: the seconds of
each timed batch, and a checksum of the outputs.

    python peer_on_device.py torch RANK WORLD MASTER:PORT FIRST LAST MODEL IMAGE MICROBATCHES REPEAT
    python peer_on_device.py ort ONNX_FILE IMAGE MICROBATCHES REPEAT

``torch``: one stage (pieces FIRST..LAST of ``vit_pieces``) of a ViT pipelined by
torch.distributed.pipelining (``ScheduleGPipe`` over gloo); the last stage prints. ``ort``: ONNX
Runtime (one thread) on the same microbatches one after another.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from vit_pieces import pieces, vit


def pipelined(args: list[str]) -> None:
    rank, world, master, first, last, name, image, microbatches, repeat = args
    rank, world, microbatches, repeat = int(rank), int(world), int(microbatches), int(repeat)
    torch.set_num_threads(1)  # one device: one core's share
    stage_module = nn.Sequential(*pieces(vit(name, int(image)))[int(first) : int(last) + 1])
    dist.init_process_group(
        "gloo", init_method=f"tcp://{master}", rank=rank, world_size=world,
        timeout=timedelta(seconds=600),
    )  # fmt: skip
    stage = PipelineStage(stage_module, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=microbatches)
    torch.manual_seed(1)
    batch = torch.randn(microbatches, 3, int(image), int(image))
    seconds, out = [], None
    with torch.no_grad():
        for k in range(repeat + 1):  # the first batch warms up (and infers the shapes)
            dist.barrier()
            start = time.perf_counter()
            out = schedule.step(batch) if rank == 0 else schedule.step()
            dist.barrier()  # the batch is done when the last stage is
            if k:
                seconds.append(time.perf_counter() - start)
    if rank == world - 1:
        print(json.dumps({"seconds": seconds, "checksum": float(out.double().sum())}), flush=True)
    dist.destroy_process_group()


def onnx_runtime(args: list[str]) -> None:
    import numpy as np
    import onnxruntime as ort

    path, image, microbatches, repeat = args[0], int(args[1]), int(args[2]), int(args[3])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    torch.manual_seed(1)
    batch = torch.randn(microbatches, 3, image, image).numpy()
    seconds, total = [], 0.0
    for k in range(repeat + 1):
        start = time.perf_counter()
        outs = [session.run(None, {name: batch[i : i + 1]})[0] for i in range(microbatches)]
        if k:
            seconds.append(time.perf_counter() - start)
        total = float(np.concatenate(outs).astype("float64").sum())
    print(json.dumps({"seconds": seconds, "checksum": total}), flush=True)


if __name__ == "__main__":
    {"torch": pipelined, "ort": onnx_runtime}[sys.argv[1]](sys.argv[2:])
