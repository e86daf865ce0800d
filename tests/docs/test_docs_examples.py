"""The documentation's Python examples run as written (``docs/**/*.md``): each page's blocks in
order, in one namespace, in a scratch folder. A block preceded by ``<!-- not run: REASON -->``
is left out, and the reason must name the test that covers it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"(<!-- not run: (?P<why>[^>]*) -->\n)?```python\n(?P<code>.*?)```", re.S)


def blocks(page: Path) -> list[tuple[str | None, str]]:
    """``(reason it is not run or None, code)`` for every Python block of ``page``."""
    return [(m["why"], m["code"]) for m in BLOCK.finditer(page.read_text())]


PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and blocks(p))


def test_the_pages_have_examples():
    assert {p.name for p in PAGES} >= {"quickstart.md", "passes.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = 0
    for why, code in blocks(page):
        if why is not None:
            test = re.search(r"tests/\S+\.py", why)
            assert test and (DOCS.parent / test.group()).exists(), why
            continue
        exec(compile(code, f"{page.name}:block", "exec"), namespace)
        ran += 1
    if page.name == "passes.md":
        assert ran >= 2 and "placed" in namespace
        assert "to_vdevice" in namespace["placed"]["main"].script()
