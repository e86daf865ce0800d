"""EdgePipe's partition DP against brute force, memory caps, categories and baselines."""

from __future__ import annotations

import math
import random

import pytest

from tvm_hetero.plan.edgepipe import (
    LOAD_COPIES,
    PipelineProblem,
    brute_force,
    categories,
    edgepipe,
    evaluate,
    even_split,
    gpipe,
    pipedream,
    random_orders,
)


def _problem(rng: random.Random, devices: int, layers: int, kinds: int | None = None,
             memory: bool = False, links: str = "nic") -> PipelineProblem:  # fmt: skip
    """Random devices; with ``kinds``, devices are copies of ``kinds`` prototypes (categories);
    ``links``: ``nic`` (min of two per-device rates, a switch) or ``pair`` (any rate per pair)."""
    protos = kinds or devices
    speed = [rng.uniform(0.5, 4.0) for _ in range(protos)]
    nic = [rng.choice([1e6, 5e6, 2e7]) for _ in range(protos)]
    cap = [rng.choice([None, 3000, 6000]) if memory else None for _ in range(protos)]
    kind = [d % protos for d in range(devices)]
    base = [rng.uniform(0.1, 1.0) for _ in range(layers)]
    bw = [
        [
            math.inf if a == b
            else min(nic[kind[a]], nic[kind[b]]) if links == "nic"
            else rng.choice([1e6, 4e6, 1e7])
            for b in range(devices)
        ]
        for a in range(devices)
    ]  # fmt: skip
    if links == "pair":  # symmetric
        for a in range(devices):
            for b in range(a):
                bw[a][b] = bw[b][a]
    return PipelineProblem(
        layer_s=tuple(tuple(t / speed[kind[d]] for t in base) for d in range(devices)),
        out_bytes=tuple(rng.choice([1000, 20000, 300000]) for _ in range(layers)),
        in_bytes=2000,
        weight_bytes=tuple(rng.choice([0, 500, 1500]) for _ in range(layers)),
        work_bytes=tuple(rng.choice([100, 400]) for _ in range(layers)),
        memory=tuple(cap[kind[d]] for d in range(devices)),
        bandwidth=tuple(tuple(r) for r in bw),
    )


@pytest.mark.parametrize("seed", range(40))
def test_dp_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    devices, layers = rng.randint(1, 4), rng.randint(1, 6)
    kinds = rng.choice([None, 1, 2])
    problem = _problem(
        rng, devices, layers, kinds if kinds and kinds <= devices else None,
        memory=seed % 2 == 0, links=rng.choice(["nic", "pair"]),
    )  # fmt: skip
    exact = brute_force(problem)
    if math.isinf(exact):
        with pytest.raises(ValueError, match="no partition fits"):
            edgepipe(problem)
        return
    part = edgepipe(problem)
    assert part.period_s == pytest.approx(exact, rel=1e-12)
    assert part.feasible
    assert all(s.memory_bytes <= (problem.memory[s.device] or math.inf) for s in part.stages)


def test_categories_group_interchangeable_devices() -> None:
    problem = _problem(random.Random(1), devices=6, layers=3, kinds=2)
    assert categories(problem) == [[0, 2, 4], [1, 3, 5]]
    distinct = _problem(random.Random(1), devices=3, layers=3, links="pair")
    assert len(categories(distinct)) == 3


def test_model_that_fits_no_single_device_is_split() -> None:
    """Four layers of 1000 weight bytes; each device holds 6500 (two layers' weights as they
    load, ``LOAD_COPIES`` times): no device alone, two can."""
    problem = PipelineProblem(
        layer_s=((1.0,) * 4, (1.0,) * 4, (1.0,) * 4),
        out_bytes=(10,) * 4, in_bytes=10, weight_bytes=(1000,) * 4, work_bytes=(10,) * 4,
        memory=(6500, 6500, 6500),
        bandwidth=tuple(tuple(math.inf if a == b else 1e6 for b in range(3)) for a in range(3)),
    )  # fmt: skip
    for d in range(3):
        assert not evaluate(problem, [(0, 3, d)]).feasible
    part = edgepipe(problem)
    assert len(part.stages) >= 2 and part.feasible
    assert part.period_s == brute_force(problem)


def test_a_stage_must_fit_while_it_loads() -> None:
    """1000 weight bytes run in 1040 bytes but load in ``LOAD_COPIES`` x 1000: a 2500-byte
    device cannot take the layer."""
    problem = PipelineProblem(
        layer_s=((1.0,),), out_bytes=(10,), in_bytes=10, weight_bytes=(1000,), work_bytes=(0,),
        memory=(2500,), bandwidth=((math.inf,),),
    )  # fmt: skip
    assert problem.stage_bytes(0, 0) == LOAD_COPIES * 1000 > 2500
    assert not evaluate(problem, [(0, 0, 0)]).feasible
    with pytest.raises(ValueError, match="no partition fits"):
        edgepipe(problem)


def test_slow_device_is_left_out() -> None:
    """A device 100x slower is not worth a stage, though the baselines use every device."""
    problem = PipelineProblem(
        layer_s=((1.0,) * 4, (1.0,) * 4, (100.0,) * 4),
        out_bytes=(10,) * 4, in_bytes=10, weight_bytes=(0,) * 4, work_bytes=(0,) * 4,
        memory=(None,) * 3,
        bandwidth=tuple(tuple(math.inf if a == b else 1e6 for b in range(3)) for a in range(3)),
    )  # fmt: skip
    part = edgepipe(problem)
    assert 2 not in part.devices and part.period_s == pytest.approx(2.0, rel=1e-3)
    assert gpipe(problem, [0, 1, 2]).period_s >= 100.0


def test_even_split_and_baselines_cover_every_layer() -> None:
    assert even_split(7, 3) == [(0, 1), (2, 4), (5, 6)]
    assert even_split(2, 5) == [(0, 0), (1, 1)]
    problem = _problem(random.Random(3), devices=4, layers=9)
    for order in random_orders(4, 10, seed=1):
        for part in (gpipe(problem, order), pipedream(problem, order)):
            assert part.stages[0].first == 0 and part.stages[-1].last == 8
            assert list(part.devices) == order
            assert part.period_s >= edgepipe(problem).period_s - 1e-12


def test_pipedream_balances_identical_workers() -> None:
    """On identical workers and free links, PipeDream's DP is the best partition."""
    rng = random.Random(5)
    base = tuple(rng.uniform(0.1, 1.0) for _ in range(6))
    problem = PipelineProblem(
        layer_s=(base,) * 3, out_bytes=(1,) * 6, in_bytes=1, weight_bytes=(0,) * 6,
        work_bytes=(0,) * 6, memory=(None,) * 3,
        bandwidth=tuple(tuple(math.inf for _ in range(3)) for _ in range(3)),
    )  # fmt: skip
    assert pipedream(problem, [0, 1, 2]).period_s == pytest.approx(brute_force(problem))


def test_evaluate_refuses_bad_stages() -> None:
    problem = _problem(random.Random(2), devices=2, layers=3)
    with pytest.raises(ValueError, match="cover"):
        evaluate(problem, [(0, 1, 0)])
    with pytest.raises(ValueError, match="consecutive"):
        evaluate(problem, [(0, 0, 0), (2, 2, 1)])
    with pytest.raises(ValueError, match="two stages"):
        evaluate(problem, [(0, 0, 0), (1, 2, 0)])


def test_stage_that_fits_only_when_longer() -> None:
    """Layer 0's output is huge, layer 1's small: a cut after layer 0 does not fit a small
    device's buffers, a stage of layers 0..1 does."""
    problem = PipelineProblem(
        layer_s=((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
        out_bytes=(5000, 10, 10), in_bytes=10, weight_bytes=(0, 0, 0), work_bytes=(0, 0, 0),
        memory=(200, 200),
        bandwidth=((math.inf, 1e9), (1e9, math.inf)),
    )  # fmt: skip
    part = edgepipe(problem)
    assert part.period_s == brute_force(problem) == 2.0
    assert [(s.first, s.last) for s in part.stages] == [(0, 1), (2, 2)]


@pytest.mark.parametrize("seed", range(8))
def test_categories_change_the_speed_not_the_optimum(seed: int) -> None:
    problem = _problem(random.Random(seed), devices=6, layers=7, kinds=2, memory=True)
    try:
        grouped = edgepipe(problem).period_s
    except ValueError:
        with pytest.raises(ValueError, match="no partition fits"):
            edgepipe(problem, group=False)
        return
    assert grouped == edgepipe(problem, group=False).period_s
