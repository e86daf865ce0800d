"""A TVM RPC server with tvm-hetero's functions registered.

Start it with ``python -m tvm_hetero.runtime.rpc_worker``.

It speaks the plain ``tvm.rpc`` protocol (any ``tvm.rpc.connect`` client works) and adds
``tvm_hetero.fingerprint`` so that timings taken through it are keyed by the remote machine's
CPU / GPU, not the client's.
"""

from __future__ import annotations

import argparse
import errno
import json
import socket
import sys

FINGERPRINT_FUNC = "tvm_hetero.fingerprint"


def register() -> None:
    """Register tvm-hetero's remote functions in this process."""
    import tvm

    from tvm_hetero.profiling.fingerprint import local_fingerprint

    @tvm.register_global_func(FINGERPRINT_FUNC, override=True)
    def _fingerprint(kind: str, index: int, threads: int) -> str:
        return json.dumps(local_fingerprint(kind, index, threads or None).to_dict())


def serve(host: str, port: int, port_end: int, key: str = "") -> None:
    """Bind the first free port in ``[port, port_end)`` and serve forever (one fork per session)."""
    from tvm.rpc.server import _listen_loop  # the loop tvm.rpc.Server runs, but in this process

    register()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for candidate in range(port, port_end):
        try:
            sock.bind((host, candidate))
            break
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                raise
    else:
        raise SystemExit(f"tvm_hetero.runtime.rpc_worker: no free port in [{port}, {port_end})")
    sock.listen(1)
    print(f"tvm-hetero rpc worker listening on {host}:{candidate}", flush=True)
    _listen_loop(sock, candidate, key, None, None, None)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9190)
    parser.add_argument("--port-end", type=int, default=9290)
    parser.add_argument("--key", default="")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.port_end, args.key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
