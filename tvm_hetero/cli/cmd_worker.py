"""``tvm-hetero worker``: serve this machine's device over TVM RPC (runtime only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.runtime.rpc_worker import serve


def run(args: argparse.Namespace) -> int:
    """Serve until killed."""
    port_end = args.port_end or args.port + 100
    if port_end <= args.port:
        raise ValueError(
            f"--port-end {port_end} must be above --port {args.port} (ports tried: [port, end))"
        )
    if args.key and not args.tracker:
        raise ValueError("--key names this worker to a tracker; give --tracker HOST:PORT too")
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.exists() and not cache.is_dir():
        raise ValueError(f"--cache {args.cache}: not a folder")
    cache_bytes = int(args.cache_gb * 1e9)
    serve(args.host, int(args.port), int(port_end), args.key, args.tracker, cache, cache_bytes)
    return 0
