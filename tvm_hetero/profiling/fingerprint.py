"""Device fingerprints: what makes a timing valid only on one device and one TVM version.

Imports only the TVM runtime, so the offline runner can fingerprint the machine it runs on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass


def json_key(data: object) -> str:
    """A short stable hash of JSON-friendly ``data`` (16 hex digits of the SHA-1 of its JSON with
    sorted keys): how fingerprints, imported workloads and plans are named in record keys."""
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


CPU_IDS = (
    ("family", "cpu family"),
    ("model", "model"),
    ("stepping", "stepping"),
    ("part", "CPU part"),
    ("variant", "CPU variant"),
)
"""``/proc/cpuinfo`` fields that name a CPU's generation: x86 family, model and stepping, Arm's
part and variant."""


@dataclass(frozen=True)
class Fingerprint:
    """Identity of a measuring device.

    Attributes
    ----------
    kind : str
        ``cpu``, ``cuda`` or ``simulated``.
    name : str
        CPU model (with LLVM's CPU name), GPU name, or the source of a simulated profile.
    threads : int or None
        Worker threads used (CPU).
    tvm : str
        TVM version.
    host : str
        Where it was measured (``local`` or the RPC address).
    """

    kind: str
    name: str
    threads: int | None
    tvm: str
    host: str = "local"

    @property
    def key(self) -> str:
        """A short stable hash of every field."""
        return json_key(asdict(self))

    def to_dict(self) -> dict:
        """JSON-friendly form."""
        return asdict(self)


@functools.cache
def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's marketing name from ``cpuinfo`` with its family, model and stepping (or the
    platform's processor string).

    The marketing name alone does not tell CPUs apart: a cloud host reports ``AMD EPYC`` for
    Zen 3 and Zen 5 alike, and timings taken on one were served on the other.
    """
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    ids = [f"{k} {fields[c]}" for k, c in CPU_IDS if fields.get(c)]
    return f"{name} ({', '.join(ids)})" if ids else name


def local_fingerprint(
    kind: str, index: int = 0, threads: int | None = None, llvm_cpu: str = ""
) -> Fingerprint:
    """Fingerprint of a device of this process (``kind`` ``cpu`` or ``cuda``)."""
    import tvm

    if kind == "cuda":
        from tvm_hetero.runtime.cuda import cuda_runtime_error

        cuda_runtime_error()  # a runtime-only process loads TVM's CUDA runtime first
        dev = tvm.cuda(index)
        name = str(dev.device_name) if dev.exist else f"cuda:{index} (absent)"
        return Fingerprint("cuda", name, None, tvm.__version__)
    threads = threads or int(os.environ.get("TVM_NUM_THREADS", 0)) or os.cpu_count()
    name = f"{cpu_model()} [{llvm_cpu}]" if llvm_cpu else cpu_model()
    return Fingerprint("cpu", name, threads, tvm.__version__)


def simulated_fingerprint(source: str) -> Fingerprint:
    """Fingerprint of a device that exists only as published or hand-entered numbers."""
    return Fingerprint("simulated", source, None, "n/a", "published")
