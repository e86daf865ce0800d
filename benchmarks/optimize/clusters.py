"""The emulated clusters ``optimize`` is benchmarked on (issue 55), written as cluster specs for
this host: every device built for this CPU (one core's target), one core each under a CPU quota,
the devices alternating over the host's two cores.

    .venv/bin/python benchmarks/optimize/clusters.py OUT_DIR
    sudo .venv/bin/tvm-hetero cluster up OUT_DIR/ring3-1000.json -o ring3-1000-up.json
    .venv/bin/python benchmarks/optimize/bench.py --models zoo:mobilenet zoo:resnet18 \\
        --cluster ring3-1000-up.json --once

- ``ring3-1000``: a ring of 3 devices of 0.6 core, links of 1 Gbit/s;
- ``ps4-200``: a parameter server and 3 workers of 0.45 core, links of 200 Mbit/s;
- ``hetero3``: a mesh of 3 devices of 0.9, 0.6 and 0.3 core, ``e0``-``e1`` at 1 Gbit/s and the
  other links at 200 Mbit/s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def clusters(target: dict) -> dict[str, dict]:
    """Every cluster's spec, each device built for ``target``."""

    def device(k: int, quota: float) -> dict:
        return {"name": f"e{k}", "kind": "cpu", "target": target, "cores": [k % 2],
                "cpu_quota": quota}  # fmt: skip

    def link(a: int, b: int, mbps: int) -> dict:
        return {"a": f"e{a}", "b": f"e{b}", "bandwidth_mbps": mbps}

    return {
        "ring3-1000": {"topology": "ring", "devices": [device(k, 0.6) for k in range(3)],
                       "links": [link(k, (k + 1) % 3, 1000) for k in range(3)]},
        "ps4-200": {"topology": "parameter-server", "devices": [device(k, 0.45) for k in range(4)],
                    "links": [link(0, k, 200) for k in range(1, 4)]},
        "hetero3": {"topology": "mesh",
                    "devices": [device(0, 0.9), device(1, 0.6), device(2, 0.3)],
                    "links": [link(0, 1, 1000), link(0, 2, 200), link(1, 2, 200)]},
    }  # fmt: skip


def main() -> int:
    from tvm_hetero.devices import cpu_device

    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    for name, spec in clusters(cpu_device(threads=1).target).items():
        (out / f"{name}.json").write_text(json.dumps(spec, indent=1))
        print(out / f"{name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
