"""Deadline order across lanes within a slack of their fair shares: the most
urgent head goes first among the lanes near the least served, and no lane
gets further ahead of another than its largest charge plus the slack."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.queueing.scheduler import LaneScheduler
from slopolicy.errors import UsageError


@dataclass(eq=False)
class _Job:
    due: float
    cost: float


def _scheduler(slack: float, weights: tuple[float, ...] = (1.0, 1.0)) -> LaneScheduler[_Job]:
    lanes = [(f"l{i}", w, 10_000) for i, w in enumerate(weights)]
    return LaneScheduler(lanes, lane_slack=slack, urgency=lambda job: job.due)


def _serve(scheduler: LaneScheduler[_Job]) -> tuple[str, _Job]:
    lane, job = next(scheduler.candidates())
    scheduler.pop(lane)
    scheduler.charge(lane, "t", job.cost)
    return lane, job


def test_the_earliest_deadline_goes_first_among_lanes_within_the_slack() -> None:
    scheduler = _scheduler(slack=100.0)
    scheduler.push("l0", _Job(due=9.0, cost=60.0), "t", 1.0)
    scheduler.push("l0", _Job(due=9.5, cost=60.0), "t", 1.0)
    scheduler.push("l1", _Job(due=2.0, cost=10.0), "t", 1.0)
    scheduler.push("l1", _Job(due=3.0, cost=10.0), "t", 1.0)
    # l1's heads are due first: served while l1's counter stays within 100 of l0's.
    assert [_serve(scheduler)[0] for _ in range(4)] == ["l1", "l1", "l0", "l0"]


def test_past_the_slack_the_lane_behind_goes_first_whatever_is_due() -> None:
    scheduler = _scheduler(slack=15.0)
    for _ in range(3):
        scheduler.push("l0", _Job(due=9.0, cost=10.0), "t", 1.0)
        scheduler.push("l1", _Job(due=1.0, cost=10.0), "t", 1.0)
    order = [_serve(scheduler)[0] for _ in range(6)]
    assert order == ["l1", "l1", "l0", "l1", "l0", "l0"]


def test_without_urgency_or_slack_the_order_is_the_counters() -> None:
    plain: LaneScheduler[_Job] = LaneScheduler([("l0", 1.0, 10), ("l1", 1.0, 10)])
    plain.push("l0", _Job(due=9.0, cost=1.0), "t", 1.0)
    plain.push("l1", _Job(due=1.0, cost=1.0), "t", 1.0)
    assert next(plain.candidates())[0] == "l0"  # level counters: the first lane


@pytest.mark.parametrize("slack", [-1.0, float("inf"), float("nan")])
def test_a_bad_lane_slack_is_refused(slack: float) -> None:
    with pytest.raises(UsageError, match="lane_slack"):
        LaneScheduler([("l0", 1.0, 10)], lane_slack=slack)


@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 2), st.floats(0, 100), st.floats(0.5, 50)),
        min_size=1,
        max_size=120,
    ),
    slack=st.floats(0, 200),
    weights=st.tuples(st.floats(0.5, 8), st.floats(0.5, 8), st.floats(0.5, 8)),
)
def test_backlogged_lanes_stay_within_their_largest_charge_plus_the_slack(
    jobs: list[tuple[int, float, float]], slack: float, weights: tuple[float, float, float]
) -> None:
    scheduler = _scheduler(slack, weights)
    largest = max(cost for _, _, cost in jobs)
    for lane, due, cost in jobs:
        scheduler.push(f"l{lane}", _Job(due=due, cost=cost), "t", 1.0)
    while len(scheduler):
        _serve(scheduler)
        backlogged = [i for i in range(3) if len(scheduler.queue(f"l{i}"))]
        for a in backlogged:
            for b in backlogged:
                gap = scheduler.counter(f"l{a}") - scheduler.counter(f"l{b}")
                assert gap <= largest / weights[a] + slack + 1e-6
