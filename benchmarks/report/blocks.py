"""Generated blocks in Markdown documents, and the check that no figure stands outside one.

A block is the text between ``<!-- report: NAME -->`` and ``<!-- /report -->``; the report
script owns it and rewrites it from the results files. A document the report owns may state a
measured figure (a time, a ratio, a share) only inside such a block, so that no number in it can
drift from its data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPEN = re.compile(r"^<!-- report: ([a-z0-9-]+) -->$")
CLOSE = "<!-- /report -->"
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?: ?(?:ms|us|µs)\b|x(?![\w])| ?%)")
"""A measured figure: a time in ms or us, a ratio such as ``1.20x`` or a share such as ``81 %``."""


@dataclass(frozen=True)
class Block:
    """One generated block: its name and the lines between its markers."""

    name: str
    start: int
    """Index of the opening marker's line."""
    end: int
    """Index of the closing marker's line."""


def find_blocks(lines: list[str]) -> list[Block]:
    """The blocks of a document, in order.

    Raises
    ------
    ValueError
        A marker without its pair, or a block inside a block.
    """
    blocks, opened = [], None
    for i, line in enumerate(lines):
        match = OPEN.match(line.strip())
        if match:
            if opened is not None:
                raise ValueError(f"line {i + 1}: block '{match[1]}' opens inside '{opened[0]}'")
            opened = (match[1], i)
        elif line.strip() == CLOSE:
            if opened is None:
                raise ValueError(f"line {i + 1}: a block closes that never opened")
            blocks.append(Block(opened[0], opened[1], i))
            opened = None
    if opened is not None:
        raise ValueError(f"block '{opened[0]}' (line {opened[1] + 1}) never closes")
    return blocks


def fill(text: str, derive) -> tuple[str, list[str]]:
    """``text`` with every block's body replaced by ``derive(name)``, and the stale names.

    Parameters
    ----------
    text
        A Markdown document.
    derive
        Callable from a block's name to its body (Markdown, no trailing newline).
    """
    lines = text.split("\n")
    out, stale, last = [], [], 0
    for block in find_blocks(lines):
        body = derive(block.name).split("\n")
        out += lines[last : block.start + 1] + body
        if lines[block.start + 1 : block.end] != body:
            stale.append(block.name)
        last = block.end
    out += lines[last:]
    return "\n".join(out), stale


def bare_figures(text: str) -> list[tuple[int, str]]:
    """Lines (1-based number, text) that state a figure outside every block and code fence."""
    lines = text.split("\n")
    inside = set()
    for block in find_blocks(lines):
        inside.update(range(block.start, block.end + 1))
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if i in inside or fenced:
            continue
        if FIGURE.search(re.sub(r"`[^`]*`", "", line)):
            found.append((i + 1, line.strip()))
    return found
