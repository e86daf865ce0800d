"""Which kernels of a corpus model leave a thread idle: each kernel's parallel loops as the CPU
rules scheduled them, beside its time inside the model (issue 56).

    .venv/bin/python benchmarks/models/parallel_loops.py MODEL [MODEL ...] [--threads 2]
        [--runs 10] [--share 0.005]

Compiles each model for the CPU as ``api.compile`` does, times every kernel call replayed in
the model's order (``kernels_inside.our_kernels``) and reads the scheduled kernels
(``build.multi_device.lower`` of the placed module). A kernel is listed when it takes at least ``--share`` of the model's
kernel time and none of its parallel loops splits evenly over ``--threads`` threads: the
busiest thread would have over a tenth more than an even share (``matmul.MAX_IMBALANCE``; a
loop of 3 tasks on 2 threads: 2 and 1), or it has no parallel loop at all. TVM hands each
thread an equal block of a parallel loop up front, so such a kernel runs as long as its busiest
thread. This is how the matmul rule's few-panel 1x1 convolutions over small maps were found
(``matmul.row_groups``). Prints only; nothing is written.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

PARALLEL = re.compile(r"T\.parallel\((?:T\.int64\()?(\d+)")


def parallel_extents(lowered) -> dict[str, list[int]]:
    """Each scheduled kernel's parallel loop extents, by kernel name."""
    from tvm_hetero._compat import PrimFunc

    return {
        gv.name_hint: [int(e) for e in PARALLEL.findall(f.script())]
        for gv, f in lowered.functions_items()
        if isinstance(f, PrimFunc)
    }


def main() -> int:
    from zoo import CORPUS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", choices=sorted(CORPUS), metavar="MODEL")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--share", type=float, default=0.005)
    args = parser.parse_args()
    from kernels_inside import compiled_model, our_kernels

    from tvm_hetero.build.multi_device import lower
    from tvm_hetero.schedules.cpu.matmul import MAX_IMBALANCE, busiest_share

    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            _, feeds, compiled = compiled_model(name, tmp, args.threads)
            calls, _ = our_kernels(compiled, feeds, args.runs)
            extents = parallel_extents(lower(compiled.placed))
        total = sum(us for _, us, _, _ in calls)
        by_kernel: dict[str, float] = {}
        for kernel, us, _, _ in calls:
            by_kernel[kernel] = by_kernel.get(kernel, 0.0) + us
        uneven = [
            (us, kernel) for kernel, us in by_kernel.items()
            if us >= args.share * total
            and min((busiest_share(e, args.threads) for e in extents.get(kernel, [])),
                    default=2.0) > MAX_IMBALANCE
        ]  # fmt: skip
        idle = sum(us for us, _ in uneven) / total
        print(f"{name}: {total:.0f} us in {len(calls)} kernel calls; "
              f"{idle:.0%} in kernels that leave a thread idle")  # fmt: skip
        for us, kernel in sorted(uneven, reverse=True):
            loops = extents.get(kernel) or "none"
            print(f"  {us:8.0f} us  {kernel[:44]:44}  parallel loops: {loops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
