"""Strategies by name: ``plan``, ``compile --strategy`` and ``optimize`` loop over these.

Each entry is a package whose ``STRATEGY`` is a :class:`~tvm_hetero.strategies.base.Strategy`;
a new strategy is a package and one line here (or :func:`register` for one that lives outside
the package, as the tests' toy strategy does). Loading a strategy imports no TVM.
"""

from __future__ import annotations

import importlib

from tvm_hetero.strategies.base import Strategy

PACKAGES: dict[str, str] = {
    "als": "tvm_hetero.strategies.als",
    "duet": "tvm_hetero.strategies.duet",
    "edgepipe": "tvm_hetero.strategies.edgepipe",
    "eop": "tvm_hetero.strategies.eop",
    "flexpie": "tvm_hetero.strategies.flexpie",
}
"""``--strategy`` value -> the package that defines its ``STRATEGY``."""


def register(name: str, package: str) -> None:
    """Offer the strategy of ``package`` (its ``STRATEGY``) as ``name`` from now on."""
    if name in PACKAGES and PACKAGES[name] != package:
        raise ValueError(f"strategy {name!r} is already {PACKAGES[name]}")
    PACKAGES[name] = package


def strategies() -> dict[str, Strategy]:
    """Every registered strategy by name, in the registry's order."""
    return {name: get_strategy(name) for name in PACKAGES}


def get_strategy(name: str) -> Strategy:
    """The strategy called ``name``; the error lists the others."""
    if name not in PACKAGES:
        raise ValueError(f"--strategy {name!r}: choose from {', '.join(PACKAGES)}")
    found = importlib.import_module(PACKAGES[name]).STRATEGY
    if found.name != name:
        raise ValueError(f"{PACKAGES[name]}.STRATEGY is named {found.name!r}, not {name!r}")
    return found
