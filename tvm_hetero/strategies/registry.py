"""Strategies by name: the CLI takes its ``--strategy`` choices from here.

A strategy is a plan kind, a pass pipeline that realises it and units for the runtime. Its planner
(``planner`` below) has ``make_plan(model, devices, **settings) -> plan``, which ``api.plan``
calls; what it adds to the command line lives in one module (``cli`` below) with two functions:
``make_plan(args, model, devices) -> plan`` (measure and plan: ``compile --strategy``) and
``run_plan(args, model, devices) -> int`` (``plan --strategy``: tables, plots, ``-o``). Importing
this module imports no TVM, so ``tvm-hetero --help`` stays fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Strategy:
    """One planner as the command line offers it.

    Attributes
    ----------
    name : str
        ``--strategy`` value.
    help : str
        One line for ``--help``.
    cli : str
        Module with ``make_plan`` and ``run_plan`` (command-line flags in, plan out).
    planner : str
        Module with ``make_plan(model, devices, **settings)`` (the Python interface).
    default_devices : tuple[str, ...]
        Devices when no ``--device`` is given.
    """

    name: str
    help: str
    cli: str
    planner: str
    default_devices: tuple[str, ...] = ("cpu@0", "cpu@1")

    def module(self) -> ModuleType:
        """The strategy's CLI module (imports TVM)."""
        return importlib.import_module(self.cli)

    def planner_module(self) -> ModuleType:
        """The strategy's planner module (imports TVM)."""
        return importlib.import_module(self.planner)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "als",
            "Lee et al.: one device per operator (ALS DP)",
            "tvm_hetero.cli.als",
            "tvm_hetero.strategies.als",
        ),
        Strategy(
            "duet",
            "DUET: branches as subgraphs on devices at once, corrected by measured runs",
            "tvm_hetero.cli.duet",
            "tvm_hetero.strategies.duet",
        ),
        Strategy(
            "edgepipe",
            "EdgePipe: runs of layers as pipeline stages over a cluster's devices and links",
            "tvm_hetero.cli.edgepipe",
            "tvm_hetero.strategies.edgepipe",
        ),
        Strategy(
            "eop",
            "EOP: key operators cut between two devices",
            "tvm_hetero.cli.eop",
            "tvm_hetero.strategies.eop",
        ),
        Strategy(
            "flexpie",
            "FlexPie: each layer cut into spatial tiles over a cluster's devices (XGBoost costs)",
            "tvm_hetero.cli.flexpie",
            "tvm_hetero.strategies.flexpie",
        ),
    )
}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; the error lists the others."""
    if name not in STRATEGIES:
        raise ValueError(f"--strategy {name!r}: choose from {', '.join(STRATEGIES)}")
    return STRATEGIES[name]
