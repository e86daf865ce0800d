"""EOP's plan confirmed end to end: it and each device alone timed on the devices, the fastest
kept.

EOP prices a cut from each key operator's shards swept alone; inside the model the shards read
weights no longer in cache and the home device also runs every operator left whole, as units
of their own. On two one-core workers of an Intel Xeon (2026-12-03, ``benchmarks/eop/table.py``)
MobileNet's plan was priced 6.3 ms and ran 10.4 where the home device alone ran 9.0. Timing the
plan beside each device alone catches that, as ``--confirm`` does for Lee et al.'s plan (DUET
falls back to the best single device the same way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.strategies.base import end_to_end_seconds

CANDIDATES = ("eop", "home", "other")
"""What is timed: EOP's plan and each device alone (the names of ``report.plans``)."""
ROUNDS = 3
"""Interleaved rounds of the timing: a slow spell of the machine falls on every plan."""


def confirm_by_measurement(
    model: Model, devices: Sequence[DeviceSpec], plans: Mapping[str, SplitPlan],
    options: BuildOptions | None = None, repeat: int = 15,
) -> tuple[SplitPlan, dict[str, float]]:  # fmt: skip
    """Compile EOP's plan and each device alone (``plans``' :data:`CANDIDATES`), run them on
    the devices in :data:`ROUNDS` interleaved rounds (``repeat`` runs each in all) and keep the
    fastest by median.

    Returns
    -------
    tuple[SplitPlan, dict[str, float]]
        The kept plan (strategy ``eop``, or ``eop-home`` / ``eop-other`` when that device alone
        ran faster) and each timed plan's median seconds by name; EOP's plan and nothing timed
        when it cuts nothing (it is the home device alone).
    """
    from tvm_hetero.build.compiled import in_plan_order

    if not any(split.moved for split in plans["eop"].splits):
        return plans["eop"], {}
    timed = {n: (in_plan_order(devices, plans[n]), plans[n]) for n in CANDIDATES if n in plans}
    seconds = end_to_end_seconds(model, timed, options, repeat, ROUNDS)
    kept = min(seconds, key=seconds.__getitem__)
    if kept == "eop":
        return plans["eop"], seconds
    return dataclasses.replace(plans[kept], strategy=f"eop-{kept}"), seconds
