"""The benchmark figures in the documents are derived from benchmarks/results/ and checked."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "report"))

import report  # noqa: E402
from blocks import bare_figures, fill, find_blocks  # noqa: E402
from sources import source  # noqa: E402


def _copy_documents(tmp_path: Path) -> Path:
    for rel in report.DOCUMENTS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_documents_match_their_results():
    result = subprocess.run(
        [sys.executable, "benchmarks/report/report.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_section_is_used_in_a_document():
    used = {
        b.name
        for rel in report.DOCUMENTS
        for b in find_blocks((ROOT / rel).read_text().split("\n"))
    }
    assert used == set(report.SECTIONS)


def test_an_edited_figure_fails_the_check(tmp_path):
    root = _copy_documents(tmp_path)
    path = root / "benchmarks/README.md"
    text = path.read_text()
    start = text.index("<!-- report: corpus -->")
    figure = re.compile(r"\d+\.\d\dx").search(text, start)
    path.write_text(text[: figure.start()] + "0.50x" + text[figure.end() :])
    assert report.problems(root) == ["benchmarks/README.md: block 'corpus' is stale"]
    report.problems(root, write=True)
    assert path.read_text() == text


def test_a_figure_outside_a_block_fails_the_check(tmp_path):
    root = _copy_documents(tmp_path)
    path = root / "docs/guides/limits.md"
    path.write_text(path.read_text() + "\n- EOP now runs 1.4x faster than ONNX Runtime.\n")
    (found,) = report.problems(root)
    assert found.startswith("docs/guides/limits.md:") and "1.4x faster" in found


@pytest.mark.parametrize(
    ("line", "figures"),
    [
        ("median 1.20x ONNX Runtime's time, 81 % of its bound, 0.5 ms, 33 us", 4),
        ("BERT 4 x 256, a 3x3 convolution, 1x1/2, x86-64, 2 cores, `0.9x in code`", 0),
    ],
)
def test_what_counts_as_a_figure(line, figures):
    assert len(bare_figures(line)) == (1 if figures else 0)
    from blocks import FIGURE

    assert len(FIGURE.findall(re.sub(r"`[^`]*`", "", line))) == figures


def test_blocks_are_replaced_and_must_close():
    text = "a\n<!-- report: x -->\nold\n<!-- /report -->\nb"
    filled, stale = fill(text, lambda name: f"new {name}")
    assert filled == "a\n<!-- report: x -->\nnew x\n<!-- /report -->\nb" and stale == ["x"]
    assert fill(filled, lambda name: f"new {name}") == (filled, [])
    assert (
        bare_figures("```\n2.0x in a fence\n```\n<!-- report: x -->\n3.0x\n<!-- /report -->") == []
    )
    with pytest.raises(ValueError, match="never closes"):
        find_blocks(["<!-- report: x -->", "text"])
    with pytest.raises(ValueError, match="opens inside"):
        find_blocks(["<!-- report: x -->", "<!-- report: y -->"])


def test_a_results_file_must_say_where_it_came_from(tmp_path):
    (tmp_path / "provenance.toml").write_text('["b.json"]\ncommit = "abc1234"\n')
    (tmp_path / "a.json").write_text('{"command": "x.py", "commit": "1", "host": "h", "date": "d"}')
    (tmp_path / "b.json").write_text('{"meta": {"command": "y.py", "host": "h", "date": "d"}}')
    (tmp_path / "c.jsonl").write_text('{"command": "z.py"}\n')
    assert (
        source("a.json", results=tmp_path).line() == "*`results/a.json`: `x.py`, commit 1, h, d.*"
    )
    assert source("b.json", results=tmp_path).commit == "abc1234"
    with pytest.raises(KeyError, match="no commit, host, date"):
        source("c.jsonl", results=tmp_path)
    (tmp_path / "provenance.toml").write_text(
        '["d.jsonl"]\ncommand = "old.py"\ncommit = "1"\nhost = "h"\ndate = "d"\n'
    )
    (tmp_path / "d.jsonl").write_text('{"x": 1}\n{"command": "new.py", "commit": "2"}\n')
    assert source("d.jsonl", results=tmp_path).command == "old.py / new.py"
    assert source("d.jsonl", results=tmp_path).commit == "1 / 2"


def test_a_figure_in_a_tutorials_prose_fails_the_check(tmp_path):
    root = _copy_documents(tmp_path)
    (root / "tutorials").mkdir()
    cells = [
        {"cell_type": "markdown", "source": ["# A tutorial\n", "It runs 3.1x faster.\n"]},
        {"cell_type": "code", "source": ["print('1.5x')\n"]},
    ]
    (root / "tutorials" / "01_x.ipynb").write_text(json.dumps({"cells": cells}))
    assert report.problems(root) == [
        "tutorials/01_x.ipynb: cell 0: a figure in prose: It runs 3.1x faster."
    ]


def test_a_flexpie_row_of_another_plan_is_named_with_it():
    from runtime import _plan

    assert _plan({"model": "resnet18"}) == "resnet18"  # rows from before plans were named
    assert _plan({"model": "resnet18", "plan": "flexpie"}) == "resnet18"
    assert _plan({"model": "bert", "plan": "layerwise"}) == "bert (layerwise)"


STAMP = {"command": "x.py", "commit": "abc1234", "host": "a CPU", "date": "2026-12-03"}


def _rows_of(text: str) -> list[list[str]]:
    """The body rows of every Markdown table in ``text``, cell by cell."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|---"):
            rows.pop()  # the header above it
        elif line.startswith("| "):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


@pytest.mark.parametrize("section", ["als", "flexpie_latency", "edgepipe_throughput"])
def test_strategy_tables_set_onnx_runtime_beside_their_plans(monkeypatch, section):
    import strategies

    timed = {"OPT (ALS)": 2.0, "OPT guarded": 2.0, "OPT confirmed": 3.0, "a only": 4.0,
             "b only": 5.0, "onnxruntime": 2.0}  # fmt: skip
    priced = {"a only": 6.0, "b only": 5.0}  # ALS's price of each device alone
    als_row = {"model": "bert", "seq": 8, "node_runs": 2, "edge_runs": 1,
               "measured": {k: {"measured_ms": v, "predicted_ms": priced.get(k, float("nan"))}
                            for k, v in timed.items()}}  # fmt: skip
    without_ort = {**als_row, "seq": 64, "measured": {
        k: v for k, v in als_row["measured"].items() if k != "onnxruntime"}}  # fmt: skip
    flexpie_row = {"case": "ring4-1000", "model": "bert", "score": {"flexpie-confirmed": 1.0},
                   "predicted_s": {"flexpie-confirmed": 0.01},
                   "measured_s": {"flexpie": 0.01, "flexpie-confirmed": 0.012, "single": 0.02,
                                  "layerwise": 0.015}}  # fmt: skip
    pipe_row = {"case": "homogeneous", "together": {}, **STAMP,
                "strategies": {k: [{"measured_per_s": 2.0, "bound_per_s": 4.0}]
                               for k in ("edgepipe", "gpipe", "pipedream")}}  # fmt: skip
    files = {
        "als": {"als.json": {"meta": STAMP, "rows": [als_row, without_ort]},
                "als_cores.json": {"meta": STAMP, "rows": [als_row]}},
        "flexpie_latency": {"flexpie_latency.json": {**STAMP, "runs": [
            flexpie_row, {**flexpie_row, "model": "mobilenet", "ort_s": 0.024}]}},
        "edgepipe_throughput": {"edgepipe_throughput.json": {"cases": [
            pipe_row, {**pipe_row, "case": "pair", "ort_per_s": 4.0}]}},
    }[section]  # fmt: skip
    monkeypatch.setattr(strategies, "load", lambda name: files[name])
    rows = _rows_of(getattr(strategies, section)())
    ort, vs_ort = [r[-2] for r in rows], [r[-1] for r in rows]
    if section == "als":  # each device alone: its price over its run, in the devices' order
        assert {r[8] for r in rows} == {"1.50x / 1.00x"}
    expected = {
        "als": (["2", "-", "2"], ["1.50x", "-", "1.50x"]),
        "flexpie_latency": (["-", "24"], ["-", "0.50x"]),
        "edgepipe_throughput": (["-", "4.00"], ["-", "0.50x"]),
    }[section]
    assert (ort, vs_ort) == expected


def test_a_host_is_named_by_its_kind_of_cpu():
    from sources import cpu_name

    zen4 = "AMD EPYC (family 25, model 17, stepping 1), 2 cores, AVX-512"
    assert cpu_name(zen4) == "AMD EPYC Zen 4"
    assert cpu_name("AMD EPYC (family 23, model 1, stepping 2), 2 cores, AVX2") == "AMD EPYC Zen 1"
    assert cpu_name("AMD EPYC (family 26, model 2)") == "AMD EPYC"  # a generation not listed
    xeon = "Intel(R) Xeon(R) Processor (family 6, model 207, stepping 2), 2 cores, AVX-512"
    assert cpu_name(xeon) == "Intel Xeon model 207"
    assert cpu_name("AMD EPYC, 2 cores") == "AMD EPYC"


def test_a_before_and_now_table_keeps_each_cpus_latest_row(monkeypatch):
    """One case measured on two kinds of CPU keeps a row of each, a CPU column naming them;
    measured again on one, that row is replaced; a file of one CPU has no such column."""
    import kernels

    xeon = "Intel(R) Xeon(R) Processor (family 6, model 207, stepping 2), 2 cores, AVX-512"
    zen4 = "AMD EPYC (family 25, model 17, stepping 1), 2 cores, AVX-512"

    def row(host: str, now: float) -> dict:
        return {**STAMP, "host": host, "case": "a layer", "before_ms": 2.0, "now_ms": now,
                "ort_ms": 2.0}  # fmt: skip

    files = {"two.jsonl": [row(xeon, 1.0), row(zen4, 1.5), row(xeon, 0.5)],
             "one.jsonl": [row(zen4, 1.0), row(zen4, 1.5)]}  # fmt: skip
    monkeypatch.setattr(kernels, "load", lambda name: files[name])
    two = _rows_of(kernels._before_and_now("two.jsonl", "layer"))
    assert two == [["a layer", "Intel Xeon model 207", "2", "0.5", "2", "0.25x"],
                   ["a layer", "AMD EPYC Zen 4", "2", "1.5", "2", "0.75x"]]  # fmt: skip
    assert _rows_of(kernels._before_and_now("one.jsonl", "layer")) == [
        ["a layer", "2", "1.5", "2", "0.75x"]
    ]
