"""CPU schedule rules, tried in order by kernel kind (the first that applies wins)."""

from tvm_hetero.schedules.cpu.common import CpuRule
from tvm_hetero.schedules.cpu.conv import Conv, Pool
from tvm_hetero.schedules.cpu.dot_products import DotProducts
from tvm_hetero.schedules.cpu.fallback import Fallback
from tvm_hetero.schedules.cpu.injective import Injective
from tvm_hetero.schedules.cpu.matmul import Matmul
from tvm_hetero.schedules.cpu.pieces import Pieces
from tvm_hetero.schedules.cpu.reduction import Gemv, Reduction
from tvm_hetero.schedules.cpu.separable_pool import SeparablePool
from tvm_hetero.schedules.cpu.winograd import Winograd

RULES_VERSION = 92
"""Bumped whenever a rule, or a rewrite of either build, changes the code it generates:
measurements are keyed by it."""


def cpu_rules() -> tuple[CpuRule, ...]:
    """The rules in the order they are tried."""
    return (
        Winograd(), SeparablePool(), Matmul(), DotProducts(), Conv(), Pool(), Gemv(), Reduction(),
        Pieces(), Injective(), Fallback(),
    )  # fmt: skip


__all__ = [
    "RULES_VERSION",
    "Conv",
    "CpuRule",
    "DotProducts",
    "Fallback",
    "Gemv",
    "Injective",
    "Matmul",
    "Pieces",
    "Pool",
    "Reduction",
    "SeparablePool",
    "Winograd",
    "cpu_rules",
]
