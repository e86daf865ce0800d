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

The ring and the parameter server are FlexPie's cases (``benchmarks/flexpie/latency.py``'s
``spec_file``, built for this host); the mesh's quotas differ by device, so it is written here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flexpie"))
from latency import device_target, spec_file

UNIFORM = {"ring3-1000": 0.6, "ps4-200": 0.45}
"""FlexPie's cases benchmarked here, with each device's CPU quota."""


def hetero3(folder: Path) -> Path:
    """Write the heterogeneous mesh's spec into ``folder``; its path."""
    devices = [
        {"name": f"e{k}", "kind": "cpu", "target": device_target("host"), "cores": [k % 2],
         "cpu_quota": quota}
        for k, quota in enumerate((0.9, 0.6, 0.3))
    ]  # fmt: skip
    links = [{"a": f"e{a}", "b": f"e{b}", "bandwidth_mbps": mbps}
             for a, b, mbps in ((0, 1, 1000), (0, 2, 200), (1, 2, 200))]  # fmt: skip
    path = folder / "hetero3.json"
    path.write_text(json.dumps({"topology": "mesh", "devices": devices, "links": links}))
    return path


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    for case, quota in UNIFORM.items():
        print(spec_file(case, quota, out, "host"))
    print(hetero3(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
