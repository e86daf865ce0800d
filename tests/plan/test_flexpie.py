"""FlexPie's reverse DP against exhaustive search, and its baselines through the same costs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tvm_hetero.plan.flexpie import (
    Segment,
    SpatialPartition,
    SpatialProblem,
    baselines,
    brute_force,
    confirm_candidates,
    evaluate,
    flexpie,
    only,
    scores,
)

SCHEMES = ("InH", "InW", "OutC", "Grid")


def _problem(rng: np.random.Generator, n: int, k: int, runs: int) -> SpatialProblem:
    """Random costs with FlexPie's structure: a segment costs its layers' tiles, growing with the
    halo of the layers after it in the run; a move depends on both schemes, the run's halo and
    the length of the segment before (links idle through it move a piece faster); some layers
    cannot take some schemes, some schemes cannot fuse."""
    layer = rng.uniform(1.0, 5.0, size=(n, k))
    growth = rng.uniform(0.0, 0.6, size=k)
    fusable = rng.random(k) < 0.7
    banned = rng.random((n, k)) < 0.15
    compute = np.full((n, runs, k), np.inf)
    for a in range(n):
        for d in range(1, min(runs, n - a) + 1):
            for q in range(k):
                if banned[a : a + d, q].any() or (d > 1 and not fusable[q]):
                    continue
                compute[a, d - 1, q] = sum(
                    layer[a + j, q] * (1 + growth[q] * (d - 1 - j)) for j in range(d)
                )
    move = np.full((n + 1, k + 1, runs + 1, k + 1, runs + 1), np.inf)
    base = rng.uniform(0.5, 3.0, size=(n + 1, k + 1, k + 1))
    halo = rng.uniform(0.0, 0.5, size=(n + 1, k + 1))
    idle = rng.uniform(0.2, 1.0, size=(n + 1, runs + 1))
    for i in range(n + 1):
        for e in range(runs + 1):
            for d in range(1, runs + 1):
                move[i, :, e, :k, d] = base[i, :, :k] * (1 + halo[i, :k] * (d - 1)) * idle[i, e]
            move[i, :, e, k, 0] = base[i, :, k] * idle[i, e]
    return SpatialProblem(SCHEMES[:k], compute, move)


@pytest.mark.parametrize("seed", range(30))
def test_dp_equals_exhaustive_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    runs = int(rng.integers(1, n + 1)) if seed % 2 else n  # bounded runs on odd seeds
    problem = _problem(rng, n, k, runs)
    want = brute_force(problem)
    if not np.isfinite(want):
        with pytest.raises(ValueError, match="no partition of finite time"):
            flexpie(problem)
        return
    got = flexpie(problem)
    assert got.predicted_s == pytest.approx(want)
    modes = got.layer_modes()
    assert len(modes) == n and modes[-1][1] == "T"
    # an NT layer hands its tiles to the same scheme
    assert all(m[0] == nxt[0] for m, nxt in itertools.pairwise(modes) if m[1] == "NT")
    assert all(s.stop - s.start <= runs for s in got.segments)


def test_fusing_pays_when_moves_are_dear_and_not_when_cheap() -> None:
    """Two layers, one scheme: fusing adds halo compute and saves one exchange."""
    compute = np.array([[[1.0], [2.5]], [[1.0], [np.inf]]])  # a fused pair costs 2.5, not 2
    move = np.full((3, 2, 3, 2, 3), np.inf)
    move[:, :, :, 0, 1] = move[:, :, :, 0, 2] = 0.1  # scattering into tiles
    move[2, :, :, 1, 0] = 0.1  # the final gather
    for exchange, fused in ((1.0, True), (0.2, False)):
        move[1, 0, 1, 0, 1] = exchange
        plan = flexpie(SpatialProblem(("InH",), compute, move))
        assert [m for _, m in plan.layer_modes()] == (["NT", "T"] if fused else ["T", "T"])
        assert plan.predicted_s == pytest.approx(2.7 if fused else 2.0 + 0.2 + 0.2)


def test_a_longer_segment_before_makes_the_next_exchange_cheaper() -> None:
    """Three layers, one scheme: fusing the first two costs more halo compute than the exchange
    it saves, unless the links, idle through both layers, then move the next piece faster."""
    compute = np.array([[[1.0], [3.5], [np.inf]], [[1.0], [np.inf], [np.inf]], [[1.0]] * 3])
    move = np.full((4, 2, 4, 2, 4), np.inf)
    move[0, 1, 0, 0, 1:3] = 0.1  # scattering the input
    move[3, 0, :, 1, 0] = 0.1  # the final gather
    move[1, 0, 1, 0, 1] = move[2, 0, 1, 0, 1] = 1.0  # after one layer: a busy link
    for after_two, fused in ((0.1, True), (1.0, False)):
        move[2, 0, 2, 0, 1] = after_two
        problem = SpatialProblem(("InH",), compute, move)
        plan = flexpie(problem)
        assert [m for _, m in plan.layer_modes()] == (["NT", "T", "T"] if fused else ["T"] * 3)
        assert plan.predicted_s == pytest.approx(brute_force(problem))
        assert plan.predicted_s == pytest.approx(0.1 + 3.5 + 0.1 + 1.0 + 0.1 if fused else 5.2)


def test_baselines_are_restrictions_and_never_beat_flexpie() -> None:
    rng = np.random.default_rng(7)
    problem = _problem(rng, 6, 4, 4)
    best = flexpie(problem).predicted_s
    found = baselines(problem, fallback="Grid")
    assert "layerwise" in found and len(found) >= 3
    for name, plan in found.items():
        assert plan.predicted_s >= best - 1e-9, name
        modes = plan.layer_modes()
        if name.startswith("fixed-") or name == "layerwise":
            assert all(m == "T" for _, m in modes)
        if name.startswith(("fixed-", "fused-")):
            assert {s for s, _ in modes} <= {name.split("-", 1)[1], "Grid"}  # Grid: fallback
    times = {n: p.predicted_s for n, p in found.items()} | {"flexpie": best}
    assert scores(times)["flexpie"] == 1.0 and max(scores(times).values()) == 1.0


@pytest.mark.parametrize("seed", range(8))
def test_fixed_and_fused_baselines_cut_every_layer_their_scheme_can(seed: int) -> None:
    """Even where the fallback is cheaper; each equals exhaustive search over the plans that
    do (the two schemes alone, the fallback only where the scheme cannot cut)."""
    rng = np.random.default_rng(seed)
    problem = _problem(rng, 5, 3, 5)
    problem.compute_s[:, :, 2] *= 0.01  # the fallback ("OutC") is far cheaper everywhere
    found = baselines(problem, fallback="OutC")
    for scheme in ("InH", "InW"):
        q = problem.schemes.index(scheme)
        cuttable = np.isfinite(problem.compute_s[:, 0, q])
        pair = [q, 2]
        sub = SpatialProblem(
            (scheme, "OutC"),
            problem.compute_s[:, :, pair],
            problem.move_s[:, [*pair, 3]][:, :, :, [*pair, 3]],
        )
        fused = brute_force(only(sub, scheme, "OutC"))
        if not np.isfinite(fused):
            assert f"fused-{scheme}" not in found
            continue
        plan = found[f"fused-{scheme}"]
        assert plan.predicted_s == pytest.approx(fused)
        assert [s == scheme for s, _ in plan.layer_modes()] == list(cuttable)
        if f"fixed-{scheme}" in found:
            fixed = found[f"fixed-{scheme}"].layer_modes()
            assert [s == scheme for s, _ in fixed] == list(cuttable)


def test_evaluate_refuses_segments_that_do_not_tile_the_layers() -> None:
    problem = _problem(np.random.default_rng(1), 3, 2, 3)
    with pytest.raises(ValueError, match="do not tile 3 layers"):
        evaluate(problem, [(0, 1, 0), (2, 3, 0)])
    with pytest.raises(ValueError, match="unknown schemes"):
        flexpie(problem, ["Diagonal"])


def _partition(*cuts: tuple[int, int, str], seconds: float) -> SpatialPartition:
    """Segments ``(start, stop, scheme)``, priced ``seconds`` in all (on the gather)."""
    return SpatialPartition(tuple(Segment(a, b, q, 0.0, 0.0) for a, b, q in cuts), seconds)


def test_confirm_candidates_are_flexpie_then_the_cheapest_distinct_and_the_home_device() -> None:
    rows = _partition((0, 2, "InH"), (2, 3, "Home"), seconds=5.0)
    found = {
        "fused-InW": _partition((0, 2, "InW"), (2, 3, "Home"), seconds=4.0),
        "fused-InH": rows,  # FlexPie's own segments: the same plan
        "flexpie": rows,
        "layerwise": _partition((0, 1, "InH"), (1, 2, "Grid"), (2, 3, "Home"), seconds=6.0),
        "fixed-Grid": _partition((0, 1, "Grid"), (1, 2, "Grid"), (2, 3, "Home"), seconds=7.0),
        "single": _partition((0, 3, "Home"), seconds=9.0),
    }
    assert confirm_candidates(found, 3) == ["flexpie", "fused-InW", "layerwise", "single"]
    assert confirm_candidates(found, 1) == ["flexpie", "single"]
    assert confirm_candidates(found, 9) == ["flexpie", "fused-InW", "layerwise", "fixed-Grid",
                                            "single"]  # fmt: skip
    assert confirm_candidates(found, 0) == []
    alone = {"flexpie": found["single"], "single": found["single"]}
    assert confirm_candidates(alone, 3) == ["flexpie"]  # nothing else to time
