"""The FlexPie latency tables of ``benchmarks/README.md`` from ``flexpie_latency.json``.

.venv/bin/python benchmarks/flexpie/table.py [--results benchmarks/results/flexpie_latency.json]

One table per host CPU the runs were measured on and per target the devices' code was built for
(``latency.py --target``; this host's CPU first): the cloud host moved from a Zen 3 to a Zen 5
EPYC on 2026-11-25, and latencies of one are no measure of the other.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import subprocess
from pathlib import Path

EARLIER_CPU = "AMD EPYC (Zen 3, znver3)"
"""The host CPU of runs that predate the ``cpu`` field (every run before 2026-11-25 evening)."""
ERAS = (
    ("495c767", "§", "planned with transfers traced on idle links (a shaped link lets 4 ms of its "
     "traffic through at once when idle) against baselines that could leave any layer home"),
    ("52b870f", "¶", "planned with every transfer priced on a busy link, whatever the compute "
     "before it"),
    ("143346e", "‖", "planned with the links idle through the segment before only, and each "
     "later piece over a link priced on a busy link"),
    ("a3ce8f3", "°", "planned with estimators that had traced no tile of ResNet-101 (they held its "
     "tiles out at 25.5 %, the smallest 14 % under)"),
)  # fmt: skip
"""Commits that changed what FlexPie's plans are priced with, oldest first: its mark for the
runs measured before it, and what they were planned with (the runs since the last are
unmarked)."""
TARGETS = {"generic": "generic x86-64 (no CPU named)", "host": "this CPU (mcpu)"}
"""What ``latency.py --target`` built the devices' code for (runs before the field: generic)."""
CONFIRMED = "flexpie-confirmed"
"""The label ``latency.py --confirm`` times FlexPie's confirmed plan under."""
SHAPES = {"ring": "ring", "ps": "PS"}
NAMES = {"resnet18": "ResNet-18", "mobilenet": "MobileNet", "resnet101": "ResNet-101",
         "bert": "BERT"}  # fmt: skip


def cluster_name(case: str) -> str:
    """``ring4-1000`` -> ``ring of 4, 1000 Mbit/s``."""
    shape, count, mbps = re.fullmatch(r"([a-z]+)(\d+)-(\d+)", case).groups()
    return f"{SHAPES[shape]} of {count}, {mbps} Mbit/s"


def row(run: dict) -> str:
    """One Markdown row: FlexPie against the best of each baseline family."""
    m = {k: v * 1e3 for k, v in run["measured_s"].items()}
    p = run["predicted_s"]["flexpie"] * 1e3

    def best(prefix: str) -> float:
        return min(v for k, v in m.items() if k.startswith(prefix))

    winner = min(m, key=m.get)
    score = run["score"]["flexpie"]
    mark = "**" if score >= 0.995 else ""
    ahead = rounds_ahead(run)
    rounds = f" ({ahead[0]}/{ahead[1]})" if ahead and score < 0.995 else ""
    older = (" †" if "estimators" not in run else " *" if "cfs_period_ms" not in run
             else " ‡" if "commit" not in run else era_mark(run))  # fmt: skip
    return (f"| {cluster_name(run['case'])}{older} | {NAMES.get(run['model'], run['model'])} | "
            f"{mark}{m['flexpie']:.0f}{mark} ({p:.0f}) | {m['single']:.0f} | {best('fixed-'):.0f} | "
            f"{m['layerwise']:.0f} | {best('fused-'):.0f} | {mark}{score:.2f}{mark}{rounds} | "
            f"{confirmed(run)} | "
            f"{'FlexPie' if winner == 'flexpie' or score >= 0.995 else winner} | "
            f"{m['single'] / m['flexpie']:.2f}x | {run['search_s'] * 1e3:.1f} |")  # fmt: skip


def confirmed(run: dict) -> str:
    """The score of FlexPie confirmed end to end (``latency.py --confirm``) and what it kept,
    or ``-`` for a run without."""
    score = run["score"].get(CONFIRMED)
    if score is None:
        return "-"
    mark = "**" if score >= 0.995 else ""
    kept = run.get("confirm_kept", "flexpie")
    return f"{mark}{score:.2f}{mark}" + ("" if kept == "flexpie" else f" ({kept})")


def rounds_ahead(run: dict) -> tuple[int, int] | None:
    """In how many of a run's rounds FlexPie's plan ran as fast as the best plan or faster
    (each round's median), of how many; ``None`` for runs that kept no rounds."""
    if "runs_s" not in run:
        return None
    measured = run["measured_s"]
    ours, best = run["runs_s"]["flexpie"], run["runs_s"][min(measured, key=measured.get)]
    won = sum(statistics.median(a) <= statistics.median(b) for a, b in zip(ours, best, strict=True))
    return won, len(ours)


def era_mark(run: dict) -> str:
    """The mark of the first of :data:`ERAS` that ``run`` predates (`""`: none)."""
    return next((f" {mark}" for first, mark, _ in ERAS if not since(first, run)), "")


def since(first: str, run: dict) -> bool:
    """Whether ``run`` was measured by commit ``first`` or a later one."""
    return _descends(first, run.get("commit", "").split("-")[0])


@functools.cache
def _descends(first: str, commit: str) -> bool:
    """One ``git merge-base`` per commit (runs share a few commits; the table asks per run)."""
    asked = ["git", "merge-base", "--is-ancestor", first, commit]
    return bool(commit) and subprocess.run(asked, capture_output=True).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", default="benchmarks/results/flexpie_latency.json")
    args = parser.parse_args()
    by_host: dict[tuple[str, str], list[dict]] = {}
    for run in json.loads(Path(args.results).read_text())["runs"]:
        host = run.get("cpu", EARLIER_CPU), run.get("target", "generic")
        by_host.setdefault(host, []).append(run)
    for cpu, target in sorted(by_host, key=lambda h: (h[0] == EARLIER_CPU, h[1] != "host")):
        print(f"\n**{cpu}, devices built for {TARGETS[target]}**\n")
        print_table(by_host[cpu, target])


def print_table(runs: list[dict]) -> None:
    """One host's runs: the table, its footnotes and a summary line."""
    runs.sort(key=lambda r: (r["case"][:2], r["case"], r["model"]))
    print(
        "| cluster | model | FlexPie ms (predicted) | one device | best fixed | layer-wise | "
        "best fused | FlexPie score | confirmed | best | vs one device | search ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        print(row(run))
    if any("estimators" not in r for r in runs):
        print(
            "\n† measured before the element-wise kernel fix and the senders' share of a "
            "boundary's price (commit 4ad19c7)."
        )
    if any("cfs_period_ms" not in r for r in runs):
        print("\n* and †: each device's CPU quota in periods of 100 ms (bursts of full speed).")
    if any("commit" not in r for r in runs):
        print(
            "\n‡, * and †: measured before a boundary's pieces were sent ahead of the tiles "
            "(commit 544dd88): home computed its own tile, then served the others."
        )
    for first, mark, said in ERAS:
        if any("commit" in r and era_mark(r) == f" {mark}" for r in runs):
            print(f"\n{mark} {said} (before commit {first}).")
    if any(rounds_ahead(r) for r in runs):
        print(
            "\n(k/n) after a score under 1.00: in k of the n rounds FlexPie's plan ran as fast "
            "as the best plan or faster (every round times every plan in turn: a plan ahead in "
            "one round and behind in another differs from the best by less than the host's "
            "drift)."
        )
    print(f"\n{summary(runs)}")
    for first, _, _ in ERAS:
        newest = [r for r in runs if since(first, r)]
        if newest and len(newest) < len(runs):
            print(f"\nOf them since commit {first}: {summary(newest)}")


def summary(runs: list[dict]) -> str:
    """How many runs, FlexPie's scores and its speed against one device."""
    scores = [r["score"]["flexpie"] for r in runs]
    speedups = [r["measured_s"]["single"] / r["measured_s"]["flexpie"] for r in runs]
    level = sum(r["score"]["flexpie"] < 0.995 and (rounds_ahead(r) or (0,))[0] > 0 for r in runs)
    tied = f" (and ahead of the best in a round in {level} more)" if level else ""
    said = (f"{len(runs)} runs: FlexPie's score 1.00 in {sum(s >= 0.995 for s in scores)}"
            f"{tied}, median {statistics.median(scores):.2f}, lowest {min(scores):.2f}; against "
            f"one device {min(speedups):.2f}-{max(speedups):.2f}x.")  # fmt: skip
    kept = [r["score"][CONFIRMED] for r in runs if CONFIRMED in r["score"]]
    if kept:
        said += (f" Confirmed end to end ({len(kept)} runs): 1.00 in "
                 f"{sum(s >= 0.995 for s in kept)}, mean {statistics.mean(kept):.2f}, lowest "
                 f"{min(kept):.2f}.")  # fmt: skip
    return said


if __name__ == "__main__":
    main()
