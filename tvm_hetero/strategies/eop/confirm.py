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
import statistics
from collections.abc import Mapping, Sequence

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.eop import SplitPlan

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
    from tvm_hetero.build.compiled import compile_model, in_plan_order
    from tvm_hetero.build.held import HeldBuilds
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    if not any(split.moved for split in plans["eop"].splits):
        return plans["eop"], {}
    names = [name for name in CANDIDATES if name in plans]
    with HeldBuilds(model, len(names)) as held:  # saved and timed apart if they do not fit
        built = []
        for name in names:
            used = in_plan_order(devices, plans[name])
            built.append(held.add(name, compile_model(model, used, plans[name], options)))
        samples = interleaved_run_seconds(built, [repeat] * len(names), rounds=ROUNDS)
    seconds = {name: statistics.median(s) for name, s in zip(names, samples, strict=True)}
    kept = min(seconds, key=seconds.__getitem__)
    if kept == "eop":
        return plans["eop"], seconds
    return dataclasses.replace(plans[kept], strategy=f"eop-{kept}"), seconds
