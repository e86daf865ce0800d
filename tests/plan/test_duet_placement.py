"""DUET's placement: the list schedule, greedy steps, correction and baselines, against brute force."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_hetero.plan import duet
from tvm_hetero.plan.duet import INPUTS, OUTPUTS, Link, SubgraphCosts

FREE = Link(0.0)


def _fork_join(times, link=FREE, head=None, tail=None):
    """[head] -> branches -> [tail]; ``times[s][d]``; 1 KB per edge."""
    seconds, edges, phase = [], [], []
    if head is not None:
        seconds.append(head), phase.append(0), edges.append((INPUTS, 0, 1000))
    first = len(seconds)
    for t in times:
        s = len(seconds)
        seconds.append(t), phase.append(1)
        edges.append((first - 1, s, 1000) if head is not None else (INPUTS, s, 1000))
    last = len(seconds)
    if tail is not None:
        seconds.append(tail), phase.append(2)
        edges += [(s, last, 1000) for s in range(first, last)] + [(last, OUTPUTS, 1000)]
    else:
        edges += [(s, OUTPUTS, 1000) for s in range(first, last)]
    n_dev = len(times[0])
    return SubgraphCosts(tuple(map(tuple, seconds)), tuple(edges), duet.uniform_links(n_dev, link),
                         tuple(phase))  # fmt: skip


def test_branches_on_two_devices_overlap_and_copies_are_charged():
    costs = _fork_join([(3.0, 5.0), (4.0, 2.0)], Link(0.5, 0.001))
    slots, total = duet.schedule(costs, (0, 1))
    assert [(s.subgraph, s.device) for s in slots] == [(0, 0), (1, 1)]
    # branch 1 waits for its input (0.5 + 1 s), runs 2 s, its output returns (1.5 s): 5.0
    assert slots[1].start_s == pytest.approx(1.5) and total == pytest.approx(5.0)
    assert duet.predicted_s(costs, (0, 0)) == pytest.approx(7.0)  # one device: one after another


@given(st.lists(st.tuples(st.floats(0.1, 9), st.floats(0.1, 9)), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_free_links_give_the_busiest_device(times):
    """With free copies a fork-join phase takes as long as its busiest device."""
    costs = _fork_join(times)
    for a in itertools.product(range(2), repeat=len(times)):
        busy = [sum(t[d] for t, dev in zip(times, a, strict=True) if dev == d) for d in range(2)]
        assert duet.predicted_s(costs, a) == pytest.approx(max(busy))


@st.composite
def small_instances(draw):
    n_dev = draw(st.integers(2, 3))
    row = st.tuples(*[st.floats(0.1, 10) for _ in range(n_dev)])
    times = draw(st.lists(row, min_size=2, max_size=4 if n_dev == 3 else 5))
    head = draw(st.none() | row)
    tail = draw(st.none() | row)
    link = Link(draw(st.floats(0, 2)), draw(st.floats(0, 1e-3)))
    return _fork_join(times, link, head, tail)


@given(small_instances())
@settings(max_examples=150, deadline=None)
def test_greedy_correction_finds_the_exhaustive_optimum_on_small_instances(costs):
    """The paper's check (Sec. VI-C): with the cost model as the measurement and budget to spare,
    greedy + correction ends at Ideal's time, found by enumerating every assignment."""
    every = itertools.product(range(costs.n_devices), repeat=costs.n_subgraphs)
    best = min(duet.predicted_s(costs, a) for a in every)
    _, start = duet.start_point(costs)
    fixed = duet.correct(costs, start, lambda a: duet.predicted_s(costs, a), budget=10_000)
    assert fixed.seconds == pytest.approx(best, rel=1e-9)
    assert duet.predicted_s(costs, duet.ideal(costs)) == pytest.approx(best, rel=1e-9)
    # the paper's own path (no enumeration) never ends worse than where it started
    greedy = duet.greedy(costs)
    paper = duet.correct(costs, greedy, lambda a: duet.predicted_s(costs, a), budget=10_000)
    assert paper.seconds <= duet.predicted_s(costs, greedy) + 1e-12


def test_greedy_and_correction_alone_can_stop_on_a_plateau():
    """Why the start point enumerates where it can: four branches, free copies, optimum 2 s
    (one fast and one slow-on-1 branch per device); greedy reaches 3 s and no single move or
    swap of the correction measures better than 3 s."""
    costs = _fork_join([(1.0, 1.0), (1.0, 2.0), (1.0, 1.0), (1.0, 2.0)])
    paper = duet.correct(costs, duet.greedy(costs), lambda a: duet.predicted_s(costs, a), 10_000)
    assert paper.seconds == 3.0
    label, start = duet.start_point(costs)
    assert label == "ideal" and duet.predicted_s(costs, start) == 2.0


def test_correction_keeps_only_measured_gains_within_its_budget():
    costs = _fork_join([(1.0, 1.0)] * 4)
    calls = []

    def measure(a):
        calls.append(a)
        return 10.0 - 0.1 * len(calls)  # every trial is measured faster than the last

    fixed = duet.correct(costs, (0, 0, 0, 0), measure, budget=3)
    assert len(calls) == 3 and fixed.trials[0] == ((0, 0, 0, 0), 9.9)
    assert fixed.assignment == calls[-1] and fixed.seconds == pytest.approx(9.7)
    slower = duet.correct(costs, (0, 1, 0, 1), lambda a: 1.0 if a == (0, 1, 0, 1) else 2.0, 50)
    assert slower.assignment == (0, 1, 0, 1) and slower.seconds == 1.0
    with pytest.raises(ValueError, match="budget"):
        duet.correct(costs, (0, 0, 0, 0), measure, budget=0)


def test_correction_stops_when_asked_with_the_best_so_far():
    costs = _fork_join([(1.0, 1.0)] * 4)
    calls = []

    def measure(a):
        calls.append(a)
        return 10.0 - 0.1 * len(calls)

    fixed = duet.correct(costs, (0, 0, 0, 0), measure, 50, stop=lambda: len(calls) >= 3)
    assert len(calls) == 3 and fixed.assignment == calls[-1]  # the start, then two moves
    at_once = duet.correct(costs, (0, 0, 0, 0), measure, 50, stop=lambda: True)
    assert at_once.trials == (((0, 0, 0, 0), at_once.seconds),)  # the start is always measured


def test_baselines_and_ideal_limit():
    costs = _fork_join([(1.0, 2.0), (2.0, 1.0), (1.0, 1.0)])
    b = duet.baselines(costs, seed=3)
    assert b["single 0"] == (0, 0, 0) and b["round-robin"] == (0, 1, 0)
    assert duet.predicted_s(costs, b["ideal"]) == pytest.approx(2.0)
    big = _fork_join([(1.0, 1.0)] * 17)
    with pytest.raises(ValueError, match="exceed"):
        duet.ideal(big)
    assert "ideal" not in duet.baselines(big)


def test_critical_path_goes_to_its_fastest_device():
    # the long branch is fastest on device 1, the short ones do not matter for it
    costs = _fork_join([(9.0, 3.0), (1.0, 1.5), (1.0, 1.5)], head=(1.0, 2.0), tail=(1.0, 2.0))
    a = duet.greedy(costs)
    assert a[0] == 0 and a[1] == 1 and a[4] == 0
    assert duet.predicted_s(costs, a) == pytest.approx(min(
        duet.predicted_s(costs, x) for x in itertools.product(range(2), repeat=5)))  # fmt: skip
