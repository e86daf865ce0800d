"""EOP planner: ratio search and collaborative tuning against brute force; plan validity."""

import dataclasses
import itertools
import json
import random

import pytest

from tvm_hetero.plan.eop import (
    DimOption,
    KeyOp,
    Link,
    SplitPlan,
    key_operators,
    plan_eop,
    plan_fixed_ratio,
    ratio_grid,
    split_cost,
)
from tvm_hetero.plan.placement import PlanError


def _affine(fixed, per):
    return lambda x: fixed + per * x


def _table(values):
    """A time model from a table of per-size times (any shape: steps, bumps)."""
    return lambda n: values[int(n)]


def _random_ops(rng, count, extent):
    ops = []
    for i in range(count):
        options = []
        for d in rng.sample(["M", "N", "batch"], rng.randint(1, 2)):
            tables = []
            for _ in range(2):
                acc, table = 0.0, [0.0]
                for _ in range(extent):
                    acc += rng.uniform(0.0, 2.0)
                    table.append(acc + rng.choice([0.0, 0.5]))
                tables.append(table)
            option = DimOption(
                d, extent, (_table(tables[0]), _table(tables[1])),
                rng.randint(5, 40), rng.randint(0, 10), rng.randint(0, 40),
                chains_from=rng.choice(["M", "N", "batch", None]) if i else None,
                chained_bytes=rng.choice([None, 5]),
            )  # fmt: skip
            options.append(option)
        ops.append(KeyOp(f"op{i}", "relax.matmul", tuple(options)))
    return ops


def _chained(a, sa, b, sb):
    pa, pb = a.options[sa[0]], b.options[sb[0]]
    return pb.chains_from == pa.dim and sa[1] == sb[1] and 0 < sb[1] < pb.extent


def _brute_force(ops, link, span, shares=None):
    """Least AT over every combination of (dimension, share) on the grid (or the ``shares``
    of an option's extent and step), links included."""
    states = [
        [(k, n1) for k, o in enumerate(op.options)
         for n1 in (shares(o.extent, o.step) if shares else ratio_grid(o.extent, span))]
        for op in ops
    ]  # fmt: skip
    best = None
    for combo in itertools.product(*states):
        total = 0.0
        for i, (op, (k, n1)) in enumerate(zip(ops, combo, strict=True)):
            lin = i > 0 and _chained(ops[i - 1], combo[i - 1], op, combo[i])
            lout = i + 1 < len(ops) and _chained(op, combo[i], ops[i + 1], combo[i + 1])
            total += split_cost(op.options[k], n1, link, lin, lout)[3]
        best = total if best is None else min(best, total)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_eop_matches_brute_force_over_the_grid(seed):
    rng = random.Random(seed)
    extent = rng.choice([4, 5, 8])
    ops = _random_ops(rng, rng.randint(1, 3), extent)
    link = Link(
        _affine(rng.uniform(0, 1), rng.uniform(0, 0.05)),
        _affine(rng.uniform(0, 1), rng.uniform(0, 0.05)),
        _affine(rng.uniform(0, 0.5), rng.uniform(0, 0.02)),
        concurrent=rng.random() < 0.7,
    )
    span = 1 / extent
    plan = plan_eop(ops, link, ("cpu", "gpu"), rest_s=1.5, span=span)
    assert plan.predicted_s == pytest.approx(_brute_force(ops, link, span) + 1.5, abs=1e-9)
    for s in plan.splits:
        assert sum(s.shares) == s.extent and min(s.shares) >= 0
        assert sum(s.ratios) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(8))
def test_shares_in_steps_match_brute_force_over_whole_steps(seed):
    """With a step (a CPU kernel's vector of channels) every share is a multiple of it or the
    whole extent, and the plan is the best of those."""
    rng = random.Random(seed)
    extent, step = rng.choice([(8, 2), (12, 4), (9, 4), (12, 3)])
    ops = [
        KeyOp(op.node_id, op.op, tuple(dataclasses.replace(o, step=step) for o in op.options))
        for op in _random_ops(rng, rng.randint(1, 3), extent)
    ]  # fmt: skip
    link = Link(_affine(0.2, 0.01), _affine(0.2, 0.01), _affine(0.1, 0.005))

    def whole_steps(n, k):
        return [m for m in range(n + 1) if m % k == 0 or m == n]

    plan = plan_eop(ops, link, ("cpu", "cpu:1"), span=1 / extent)
    want = _brute_force(ops, link, None, whole_steps)
    assert plan.predicted_s == pytest.approx(want, abs=1e-9)
    for split in plan.splits:  # the other device's share in whole steps, home the remainder
        assert split.shares[1] % step == 0 or split.shares[1] == extent
        assert extent % step or all(n % step == 0 for n in split.shares)


def test_separate_tuning_is_each_operators_own_best():
    rng = random.Random(3)
    ops = _random_ops(rng, 3, 8)
    link = Link(_affine(0.2, 0.01), _affine(0.2, 0.01), _affine(0.1, 0.0))
    plan = plan_eop(ops, link, ("a", "b"), span=0.125, collaborative=False)
    for op, s in zip(ops, plan.splits, strict=True):
        own = min(
            split_cost(o, n1, link)[3] for o in op.options for n1 in ratio_grid(o.extent, 0.125)
        )
        assert s.total_s == pytest.approx(own) and not s.chained


def test_collaborative_tuning_keeps_shards_when_it_pays():
    """Two row-cut matmuls with costly copies: tuned together they share one ratio and skip the
    copy out / concat / slice / copy in between (EOP Fig. 5)."""
    lin = _affine(0.0, 1.0)
    a = DimOption("M", 10, (lin, _affine(0, 0.5)), 100, 0, 100)
    b = DimOption("M", 10, (lin, _affine(0, 0.25)), 100, 0, 100, chains_from="M")
    link = Link(_affine(0, 0.01), _affine(0, 0.01), _affine(0, 0.005))
    ops = [KeyOp("x", "relax.matmul", (a,)), KeyOp("y", "relax.matmul", (b,))]
    apart = plan_eop(ops, link, ("cpu", "gpu"), span=0.1, collaborative=False)
    together = plan_eop(ops, link, ("cpu", "gpu"), span=0.1)
    assert together.predicted_s < apart.predicted_s
    assert together.splits[1].chained
    assert together.splits[0].shares == together.splits[1].shares


def test_paper_figure1_eop_beats_equal_and_fixed():
    """Transpose (CPU 2, GPU 2) and Dense (CPU 4, GPU 2), linear, free copies (EOP Fig. 1)."""
    free = _affine(0.0, 0.0)
    link = Link(free, free, free)

    def op(name, t_cpu, t_gpu):
        opt = DimOption("axis0", 100, (_affine(0, t_cpu / 100), _affine(0, t_gpu / 100)), 0, 0, 0)
        return KeyOp(name, "relax." + name, (opt,))

    ops = [op("transpose", 2, 2), op("dense", 4, 2)]
    eop = plan_eop(ops, link, ("cpu", "gpu"))
    equal = plan_fixed_ratio(ops, link, ("cpu", "gpu"), 0.5, strategy="equal")
    fixed = plan_fixed_ratio(ops, link, ("cpu", "gpu"), 1.5 / 2.5)
    assert eop.predicted_s == pytest.approx(1.0 + 4 / 3, rel=0.02)
    assert eop.predicted_s < fixed.predicted_s < equal.predicted_s
    assert eop.splits[1].ratios == pytest.approx((0.33, 0.67), abs=0.011)


def test_single_device_baseline_and_json_roundtrip():
    rng = random.Random(5)
    ops = _random_ops(rng, 2, 4)
    link = Link(_affine(0, 0), _affine(0, 0), _affine(0, 0))
    plan = plan_fixed_ratio(ops, link, ("cpu", "gpu"), 0.0, rest_s=2.0, strategy="single")
    assert all(s.shares == (4, 0) for s in plan.splits)
    assert plan.predicted_s == pytest.approx(
        2.0 + sum(min(o.time[0](4) for o in op.options) for op in ops)
    )
    back = SplitPlan.from_dict(json.loads(plan.to_json()))
    assert back == plan


def test_bad_plans_and_parameters_are_rejected():
    from tvm_hetero.plan.eop import OpSplit

    with pytest.raises(PlanError, match="sum to its extent 8"):
        SplitPlan("eop", ("cpu", "gpu"), (OpSplit("a", "m", "M", 8, (3, 4), (0, 0), 0, 0),))
    with pytest.raises(PlanError, match="span"):
        ratio_grid(8, 0)
    with pytest.raises(PlanError, match="share"):
        key_operators({"a": 1.0}, 1.5)
    with pytest.raises(PlanError, match="not a split plan"):
        SplitPlan.from_dict({"kind": "placement"})


def test_key_operators_cover_the_share():
    times = {"a": 50.0, "b": 30.0, "c": 15.0, "d": 4.0, "e": 1.0}
    assert key_operators(times) == ["a", "b", "c"]
    assert key_operators(times, 0.5) == ["a"]
    assert key_operators(times, 1.0) == ["a", "b", "c", "d", "e"]


def test_ratio_grid_has_every_share_once():
    assert ratio_grid(4) == [0, 1, 2, 3, 4]
    assert len(ratio_grid(1000)) == 101


def test_ratio_grid_in_steps_keeps_whole_vectors_and_the_whole():
    assert ratio_grid(64, 0.01, 16) == [0, 16, 32, 48, 64]
    assert ratio_grid(40, 0.25, 16) == [0, 16, 32, 40]  # 30 of 40: 32; 40 itself stays
    assert ratio_grid(24, 0.25, 16) == ratio_grid(24, 0.25)  # under two vectors: as it is
    option = DimOption("N", 64, (_affine(0, 1), _affine(0, 1)), 0, 0, 0, step=16)
    free = Link(_affine(0, 0), _affine(0, 0), _affine(0, 0))
    fixed = plan_fixed_ratio([KeyOp("a", "relax.matmul", (option,))], free, ("cpu", "cpu:1"), 0.3)
    assert fixed.splits[0].shares == (48, 16)  # 19 of 64 on the other: one vector, not 19 lanes
