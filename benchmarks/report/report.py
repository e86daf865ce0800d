"""Write (or check) every benchmark figure the documents state, from the results files.

    .venv/bin/python benchmarks/report/report.py           # rewrite the generated blocks
    .venv/bin/python benchmarks/report/report.py --check   # exit 1 if any is stale
    .venv/bin/python benchmarks/report/report.py --show optimize

A document lists its figures in blocks, ``<!-- report: NAME -->`` ... ``<!-- /report -->``,
whose body is section NAME derived from ``benchmarks/results/`` (tables with the command,
commit, host and date they came from). In the documents this script owns, a figure (a time, a
ratio, a share) outside a block fails the check: it could not be derived, so it could drift.
The tutorials' prose is held to the same (their figures are what their cells compute).
``make bench-report`` rewrites; ``make lint`` checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu
import kernels
import runtime
import strategies
import summary
from blocks import bare_figures, fill

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    "README.md",
    "benchmarks/README.md",
    "benchmarks/gpu/README.md",
    "docs/index.md",
    "docs/quickstart.md",
    "docs/DESIGN.md",
    *sorted(
        f"docs/{d}/{p.name}"
        for d in ("guides", "reference")
        for p in (ROOT / "docs" / d).glob("*.md")
    ),
)
"""The documents whose every figure comes from a block: the READMEs, the benchmarks' pages, the
design and the documentation site."""
SECTIONS = {
    **strategies.SECTIONS,
    **kernels.SECTIONS,
    **runtime.SECTIONS,
    **gpu.SECTIONS,
    **summary.SECTIONS,
}


def derive(name: str) -> str:
    """Section ``name``'s Markdown."""
    if name not in SECTIONS:
        raise KeyError(f"no report section '{name}' (known: {', '.join(sorted(SECTIONS))})")
    return SECTIONS[name]()


def problems(root: Path = ROOT, write: bool = False) -> list[str]:
    """What is wrong with the documents under ``root`` (after rewriting them if ``write``)."""
    found = []
    for rel in DOCUMENTS:
        path = root / rel
        text = path.read_text()
        filled, stale = fill(text, derive)
        if write and filled != text:
            path.write_text(filled)
        elif stale:
            found += [f"{rel}: block '{name}' is stale" for name in stale]
        found += [
            f"{rel}:{n}: a figure outside a block: {line}" for n, line in bare_figures(filled)
        ]
    for notebook in sorted((root / "tutorials").glob("*.ipynb")):
        rel = notebook.relative_to(root)
        for i, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "markdown":
                found += [
                    f"{rel}: cell {i}: a figure in prose: {line}"
                    for _, line in bare_figures("".join(cell["source"]))
                ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    parser.add_argument("--show", metavar="NAME", help="print one section")
    args = parser.parse_args(argv)
    if args.show:
        print(derive(args.show))
        return 0
    found = problems(write=not args.check)
    for line in found:
        print(line)
    if found and args.check:
        print("run `make bench-report` to rewrite the blocks from benchmarks/results/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
