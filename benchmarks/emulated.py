"""How the benchmarks build the code of their emulated devices (``tvm-hetero cluster up``)."""

from __future__ import annotations

from tvm_hetero.devices import cpu_device

TARGETS = ("generic", "host")
"""What ``--target`` builds the devices' code for (:func:`device_target`)."""


def device_target(target: str) -> dict:
    """The TVM target of every emulated device: ``generic`` names no CPU (``{"kind": "llvm"}``:
    LLVM's generic x86-64, SSE2 at most, 2.8-3.9x slower here than built for this CPU,
    ``ort.py``; every run before this option, 2026-11-26 night, was so); ``host`` is the serial CPU's
    (``cpu_device(threads=1)``: this host's ``mcpu``, one core, as a device is ``--quota`` of
    one core), what a user builds for a device they know."""
    return {"kind": "llvm"} if target == "generic" else cpu_device(threads=1).target
