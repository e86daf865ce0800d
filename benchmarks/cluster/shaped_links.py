"""Worker-to-worker tensors against raw TCP on the same shaped link of an emulated cluster.

    sudo .venv/bin/python benchmarks/cluster/shaped_links.py [--mbps 100 1000 10000] [--repeat 3]

For each bandwidth, ``tvm-hetero cluster up`` of two devices (one core each) joined by one link
shaped with ``tbf``; between the same two namespaces, on that link:

- raw TCP: a process in B sends N bytes per request to a process in A (kept-open connection,
  ``recv_into`` a preallocated buffer), timed in A;
- tensor link: worker A pulls a value of N bytes from worker B's tensor server (what a copy
  between two remote workers does), timed in worker A (``tvm_hetero.worker.probe``);
- copy: the client asks worker A, over TVM RPC, to fetch the value into TVM memory
  (``tvm_hetero.worker.fetch``, the runtime's copy step), timed at the client.

Median of ``--repeat`` after one warm-up; results to ``benchmarks/results/cluster_shaped.json``
and a plot beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tvm

from tvm_hetero.devices import ClusterSpec
from tvm_hetero.emulation import control
from tvm_hetero.emulation.layout import cluster_tag, plan_layout
from tvm_hetero.runtime.rpc_worker import PREFIX

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]

SENDER = """
import socket, sys
import numpy as np
host, nbytes, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = memoryview(np.ones(nbytes, np.uint8))
with socket.create_server((host, 9300)) as srv:
    print("ready", flush=True)
    conn, _ = srv.accept()
    with conn:
        for _ in range(count):
            conn.recv(1)
            conn.sendall(payload)
"""

RECEIVER = """
import json, socket, sys, time
import numpy as np
host, nbytes, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sock = socket.create_connection((host, 9300))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = memoryview(np.empty(nbytes, np.uint8))
seconds = []
for i in range(count):
    start = time.perf_counter()
    sock.sendall(b"g")
    got = 0
    while got < nbytes:
        got += sock.recv_into(buf[got:])
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds[1:]))
"""


def raw_tcp(tag: str, sender_ip: str, nbytes: int, repeat: int) -> float:
    """Median seconds of a raw TCP request for ``nbytes`` from namespace 1 to namespace 0."""
    count = str(repeat + 1)
    sender = subprocess.Popen(
        ["ip", "netns", "exec", f"{tag}-1", sys.executable, "-c", SENDER, sender_ip,
         str(nbytes), count],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sender.stdout.readline().strip() == "ready"
    out = subprocess.run(
        ["ip", "netns", "exec", f"{tag}-0", sys.executable, "-c", RECEIVER, sender_ip,
         str(nbytes), count],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    sender.wait()
    return statistics.median(json.loads(out))


def tensor_link(cluster: ClusterSpec, nbytes: int, repeat: int) -> tuple[float, float]:
    """Median seconds of worker A pulling ``nbytes`` from worker B: timed in A (tensor link),
    and as the runtime's copy step timed at the client."""
    a, b = (tvm.rpc.connect(*d.address, session_timeout=0) for d in cluster.devices)
    host_b = cluster.devices[1].address[0]
    port = int(b.get_function(PREFIX + "fill")("x", nbytes))
    pulls = json.loads(a.get_function(PREFIX + "probe")(host_b, port, "x", repeat))
    fetch = a.get_function(PREFIX + "fetch")
    copies = []
    for i in range(repeat + 1):
        start = time.perf_counter()
        fetch(host_b, port, "x", "m")
        if i:
            copies.append(time.perf_counter() - start)
    return statistics.median(pulls), statistics.median(copies)


def _spec(mbps: float, folder: Path) -> Path:
    devices = [{"name": n, "kind": "cpu", "target": {"kind": "llvm"}, "cores": [c]}
               for n, c in (("edge-a", 0), ("edge-b", 1))]  # fmt: skip
    path = folder / f"pair-{mbps:g}.json"
    path.write_text(json.dumps({"topology": "mesh", "devices": devices,
                                "links": [{"a": "edge-a", "b": "edge-b", "bandwidth_mbps": mbps}]}))  # fmt: skip
    return path


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for mbps in sorted({r["mbps"] for r in rows}):
        mine = [r for r in rows if r["mbps"] == mbps]
        sizes = [r["bytes"] / 2**20 for r in mine]
        ax.plot(sizes, [r["link_ratio"] for r in mine], "o-", label=f"{mbps:g} Mbit/s: pull")
        ax.plot(sizes, [r["copy_ratio"] for r in mine], "x--", label=f"{mbps:g} Mbit/s: copy")
    ax.axhline(0.8, color="grey", lw=0.8, ls=":")
    ax.set(xscale="log", xlabel="MiB", ylabel="throughput / raw TCP", ylim=(0, 1.2),
           title="Worker to worker on a shaped link, against raw TCP")  # fmt: skip
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mbps", type=float, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/cluster_shaped.json")
    args = parser.parse_args()
    why = control.missing_privilege()
    if why:
        sys.exit(f"shaped_links: {why}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mbps in args.mbps:
            path = _spec(mbps, Path(tmp))
            spec, tag = ClusterSpec.load(path), cluster_tag(path)
            cluster = control.up(spec, plan_layout(spec, tag))
            try:
                sender_ip = cluster.devices[1].address[0]
                for nbytes in SIZES:
                    raw = raw_tcp(tag, sender_ip, nbytes, args.repeat)
                    pull, copy = tensor_link(cluster, nbytes, args.repeat)
                    rows.append({
                        "mbps": mbps, "bytes": nbytes, "raw_s": raw, "link_s": pull,
                        "copy_s": copy, "link_ratio": raw / pull, "copy_ratio": raw / copy,
                    })  # fmt: skip
                    r = rows[-1]
                    print(f"{mbps:>6g} Mbit/s {nbytes / 2**20:8.3f} MiB: raw "
                          f"{nbytes * 8 / raw / 1e6:8.1f} Mbit/s, pull {r['link_ratio']:5.0%}, "
                          f"copy {r['copy_ratio']:5.0%}", flush=True)  # fmt: skip
            finally:
                control.down(tag)
    out = Path(args.out)
    out.write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=1) + "\n")
    _plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
