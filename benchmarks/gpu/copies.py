"""Copies per run of a CPU + GPU placement: the one-VM build of before against the deployment.

Compile-only (no GPU needed): every ``--place OP=cuda:0`` placement is built both ways and the
device copies one run makes are counted from what was built.

- before (one VM, what ``compile`` made until the runtime of issue 12): every ``to_vdevice`` of
  the placed ``main`` is a ``vm.builtin.to_device`` call on every run, the GPU matmuls' weights
  among them;
- after (the deployment): weights are bound into the GPU's library and placed once at load;
  a run copies only activations where the plan crosses devices (copy steps that move bytes),
  each tensor once per device (shared by its readers).

    .venv/bin/python benchmarks/gpu/copies.py --out benchmarks/results/gpu_copies.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.build.multi_device import lower
from tvm_hetero.devices import cpu_device, cuda_device
from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.types import tensor_infos
from tvm_hetero.zoo import load_zoo_model

CASES = [("lstm", "matmul", {"batch": 16}), ("gru", "matmul", {"batch": 16}),
         ("mlp", "matmul", {"batch": 16}), ("bert-small", "matmul", {}),
         ("resnet18", "nn.conv2d", {})]  # fmt: skip


def one_vm_copies(placed) -> tuple[int, int, int]:
    """(copies, of them weights, bytes) per run of the one-VM build of ``placed``."""
    lowered = lower(placed)
    count = weights = nbytes = 0
    for b in op_bindings(lowered[ENTRY_FUNC]):
        if getattr(b.call.op, "name", None) == COPY_OP:
            count += 1
            weights += not hasattr(b.call.args[0], "name")  # a constant, not a variable
            nbytes += sum(t.nbytes or 0 for t in tensor_infos(b.var.ty))
    return count, weights, nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    devices = [cpu_device(), cuda_device(0)]
    print(f"{'model':12} {'place':10} {'before':>8} {'weights':>8} {'MB':>8} "
          f"{'after':>6} {'MB':>8}")  # fmt: skip
    for name, op, settings in CASES:
        model = load_zoo_model(name, **settings)
        placement = api.placement_from_rules(model, devices, {op: "cuda:0"})
        compiled = api.compile(model, devices, placement)
        before, weights, before_bytes = one_vm_copies(compiled.placed)
        moves = compiled.deployment.copies
        after_bytes = sum(s.nbytes for s in moves)
        row = {"model": name, **settings, "place": op, "before": before, "before_weights": weights,
               "before_bytes": before_bytes, "after": len(moves), "after_bytes": after_bytes}  # fmt: skip
        rows.append(row)
        print(f"{name:12} {op:10} {before:8} {weights:8} {before_bytes / 1e6:8.2f} "
              f"{len(moves):6} {after_bytes / 1e6:8.2f}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
