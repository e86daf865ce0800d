"""Pipeline statistics from a measured timeline: busy time leaves out a unit's wait for inputs."""

import pytest

from tvm_hetero.runtime.executor import Event, Timeline
from tvm_hetero.runtime.stats import (
    first_turn_s,
    pipeline_stats,
    runs_within,
    warm_up,
    warm_up_runs,
)


def test_a_units_wait_for_its_input_is_not_busy_time():
    events = (
        Event("u0", "a", "unit", 0.0, 1.0, 0),
        Event("c0", "b", "copy", 1.0, 1.0, 0),  # commanded: no time of its own
        Event("u1", "b", "unit", 1.0, 3.0, 0, waited_s=0.5),  # half a second for its input
        Event("u0", "a", "unit", 1.0, 2.0, 1),
        Event("u1", "b", "unit", 3.0, 5.0, 1, waited_s=0.25),
    )
    timeline = Timeline(events, 5.0)
    assert timeline.busy_s("a") == pytest.approx(2.0)
    assert timeline.busy_s("b") == pytest.approx(3.25)
    stats = pipeline_stats(timeline, (3.0, 5.0))
    assert stats.busy_s == pytest.approx({"a": 2.0, "b": 3.25})
    assert stats.waited_s == pytest.approx({"a": 0.0, "b": 0.75})
    assert stats.utilisation("b") == pytest.approx(0.65)
    assert stats.latency_s == pytest.approx((3.0, 4.0))
    assert stats.steady_s == pytest.approx(2.0)


def test_a_piece_is_in_flight_from_its_makers_end_to_when_the_reader_has_every_input():
    """u2 on b reads u0 (made on a, copied to b) and u1 (made on b): in flight from u0's end
    to u2's start plus its wait, per microbatch; u1 reads only its own device's values, and u3
    reads a tuple item of u0 copied over (traced through the item and the copy). A reader
    whose last input came from its own device has no entry."""
    from tvm_hetero.runtime.deployment import Step

    steps = [
        Step("unit", "u0", ("x",), 0, "f0"),
        Step("copy", "c0", ("u0",), 1),
        Step("unit", "u1", ("x",), 1, "f1"),
        Step("unit", "u2", ("c0", "u1"), 1, "f2"),
        Step("item", "i0", ("c0",), 1, index=0),
        Step("unit", "u3", ("i0",), 1, "f3"),
        Step("unit", "u4", ("c0", "u3"), 1, "f4"),
    ]
    events = (
        Event("u0", "a", "unit", 0.0, 1.0, 0),
        Event("c0", "b", "copy", 1.0, 1.0, 0),
        Event("u1", "b", "unit", 0.0, 0.5, 0),
        Event("u2", "b", "unit", 1.1, 2.0, 0, waited_s=0.2),  # had u0's piece at 1.3
        Event("u3", "b", "unit", 2.0, 2.5, 0),  # at 2.0
        Event("u4", "b", "unit", 2.5, 3.0, 0),  # its last input was u3's, made on b
        Event("u0", "a", "unit", 1.0, 2.0, 1),
        Event("u1", "b", "unit", 1.2, 1.5, 1),
        Event("u2", "b", "unit", 2.5, 3.0, 1),  # u0 of microbatch 1 ended at 2.0
    )
    flights = Timeline(events, 3.0).in_flight_s(steps)
    assert flights == pytest.approx({("u2", 0): 0.3, ("u3", 0): 1.0, ("u2", 1): 0.5})
    assert Timeline(events, 3.0).waited_s("b") == pytest.approx(0.2)


def test_a_warm_up_stops_once_its_runs_took_its_seconds(monkeypatch):
    import tvm_hetero.runtime.stats as stats

    clock = [0.0]

    def run(took: float):
        return lambda: clock.__setitem__(0, clock[0] + took)

    monkeypatch.setattr(stats.time, "perf_counter", lambda: clock[0])
    assert warm_up(run(0.1), 5, seconds=1.0) == 5  # fast runs: all of them
    assert warm_up(run(0.4), 5, seconds=1.0) == 3  # 0.4, 0.8, then 1.2 >= 1.0
    assert warm_up(run(3.0), 5, seconds=1.0) == 1  # one slow run is enough
    assert warm_up(run(3.0), 0, seconds=1.0) == 0
    # what a planner expects of it: the same counts
    assert [warm_up_runs(5, t) for t in (0.1, 0.4, 3.0)] == [5, 3, 1]
    assert warm_up_runs(0, 3.0) == 0
    assert first_turn_s(3.0, 5, 4) == 15.0  # one run to warm up, four timed
    assert first_turn_s(0.1, 5, 4) == pytest.approx(0.9)  # five to warm up


def test_runs_within_a_time_are_as_many_as_fit_between_the_least_and_the_most():
    assert runs_within(10.0, 0.01, 30) == 30  # a quick model: the most
    assert runs_within(10.0, 2.3, 30) == 5  # four would fit; five at least
    assert runs_within(10.0, 0.5, 30) == 20
    assert runs_within(10.0, None, 30) == 30 and runs_within(10.0, 0.0, 30) == 30  # unknown
    assert runs_within(10.0, 5.0, 3) == 3  # never more than the most
