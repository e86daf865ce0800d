"""The cache sweep of ``runtime.timer.cold_rounds``: twice the last-level cache, capped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tvm_hetero.runtime import timer


@pytest.mark.parametrize(
    ("llc", "expected"),
    [(32 << 20, 64 << 20), (8 << 20, 16 << 20), (300 << 20, timer.SWEEP_MAX_BYTES)],
)
def test_sweep_is_twice_the_cache_up_to_the_cap(monkeypatch, llc: int, expected: int) -> None:
    monkeypatch.setattr(timer, "last_level_cache_bytes", lambda: llc)
    assert timer.sweep_bytes() == expected


def test_last_level_cache_reads_the_largest_size(monkeypatch, tmp_path: Path) -> None:
    for index, size in enumerate(("48K", "2048K", "307200K", "bogus")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    real = Path
    monkeypatch.setattr(timer, "Path", lambda p: tmp_path if "cpu0/cache" in str(p) else real(p))
    assert timer.last_level_cache_bytes() == 300 << 20
