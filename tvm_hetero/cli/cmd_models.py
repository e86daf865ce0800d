"""``tvm-hetero models``: the zoo."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import console, table
from tvm_hetero.zoo import ZOO


def run(_args: argparse.Namespace) -> int:
    """Print every zoo model with its presets and the paper it comes from."""
    rows = [[e.name, ", ".join(e.presets), e.cites, e.description] for e in ZOO.values()]
    console().print(
        table("Model zoo (NAME or NAME:tiny)", ["model", "presets", "paper", "what"], rows)
    )
    return 0
