"""Foundation benchmarks (issue 2): OpGraph of BERT-base, two-vdevice build of the small BERT.

    .venv/bin/python benchmarks/foundation.py

Targets: OpGraph of BERT-base in under 1 s; two-vdevice build of the small BERT in under 60 s.
"""

from __future__ import annotations

import platform
import statistics
import time

from rich.console import Console
from rich.table import Table

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.zoo import load_zoo_model


def _best_of(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    console = Console()
    rows = []
    start = time.perf_counter()
    bert = load_zoo_model("bert-base")
    load_s = time.perf_counter() - start
    graph = OpGraph.from_module(bert.mod)
    best, median = _best_of(lambda: OpGraph.from_module(bert.mod), 5)
    rows.append([
        "OpGraph of bert-base (seq 128)", f"{graph.graph.number_of_nodes()} ops",
        f"{median:.3f} s (best {best:.3f})", "< 1 s", "yes" if median < 1 else "NO",
    ])  # fmt: skip

    small = load_zoo_model("bert-small")
    devices = [cpu_device(0), cpu_device(1)]
    placement = api.placement_from_rules(small, devices, {"matmul": "cpu:1"})
    best, median = _best_of(lambda: api.compile(small, devices, placement), 3)
    rows.append([
        "two-vdevice build of bert-small (4 x 256, seq 128)", "matmul on cpu:1",
        f"{median:.2f} s (best {best:.2f})", "< 60 s", "yes" if median < 60 else "NO",
    ])  # fmt: skip

    table = Table(title=f"Foundation benchmarks on {platform.processor() or platform.machine()}, "
                  f"{cpu_device().threads} threads")  # fmt: skip
    for col in ("what", "size", "median time", "target", "met"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console.print(table)
    console.print(
        f"(building bert-base with random weights took {load_s:.1f} s, not part of the figure)"
    )


if __name__ == "__main__":
    main()
