from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from slopolicy.core.queueing.scheduler import LaneScheduler
from slopolicy.errors import UsageError
from tests.core.jobs import Job

LANES = ("interactive", "heavy", "background")


class NaiveLanes:
    """Lane counters as SIMULATOR.md's VTC rules, one level up."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = weights
        self.counters = dict.fromkeys(weights, 0.0)
        self.waiting = dict.fromkeys(weights, 0)
        self.last_v = 0.0

    def v(self) -> float:
        backlogged = [self.counters[lane] for lane in self.weights if self.waiting[lane]]
        if backlogged:
            self.last_v = min(backlogged)
        return self.last_v

    def push(self, lane: str) -> None:
        if not self.waiting[lane]:
            self.counters[lane] = max(self.counters[lane], self.v())
        self.waiting[lane] += 1

    def take(self, lane: str) -> None:
        self.v()  # V as it was, should the lane empty
        self.waiting[lane] -= 1

    def charge(self, lane: str, cost: float) -> None:
        v = self.v()
        counter = self.counters[lane]
        new = counter + cost / self.weights[lane]
        if cost < 0:
            new = max(new, min(counter, v))
        self.counters[lane] = new

    def order(self) -> list[str]:
        backlogged = [lane for lane in self.weights if self.waiting[lane]]
        return sorted(backlogged, key=lambda lane: (self.counters[lane], LANES.index(lane)))


class LaneMachine(RuleBasedStateMachine):
    """LaneScheduler's lane counters and candidate order against NaiveLanes;
    the dispatcher may take any candidate (work conservation)."""

    def __init__(self) -> None:
        super().__init__()
        self.lanes: LaneScheduler[Job] = LaneScheduler([("x", 1.0, 0)])
        self.model = NaiveLanes({})
        self.jobs: dict[str, list[Job]] = {}
        self.trusted = False

    @initialize(
        weights=st.tuples(*[st.sampled_from([0.5, 1.0, 3.0, 4.0])] * 3),
        capacity=st.integers(0, 5),
        trusted=st.booleans(),
        slack=st.dictionaries(st.sampled_from(LANES), st.sampled_from([0.0, 5.0, 1e6])),
    )
    def setup(
        self,
        weights: tuple[float, float, float],
        capacity: int,
        trusted: bool,
        slack: dict[str, float],
    ) -> None:
        # Keys and slack order the work inside a lane only: the lane counters
        # and the candidates' order are the same whatever they are.
        self.lanes = LaneScheduler(
            [(n, w, capacity) for n, w in zip(LANES, weights, strict=True)], slack=slack
        )
        self.model = NaiveLanes(dict(zip(LANES, weights, strict=True)))
        self.jobs = {lane: [] for lane in LANES}
        # The policy's path: the trusted push, candidates and pop, which
        # update only the lane they touch instead of resyncing every lane.
        self.trusted = trusted

    @rule(
        lane=st.sampled_from(LANES),
        tenant=st.sampled_from("ab"),
        cost=st.integers(0, 50),
        keyed=st.booleans(),
    )
    def push(self, lane: str, tenant: str, cost: int, keyed: bool) -> None:
        job = Job(tenant, cost)
        push = self.lanes._push if self.trusted else self.lanes.push
        if push(lane, job, tenant, 1.0, key=float(cost) if keyed else 0.0):
            self.model.push(lane)
            self.jobs[lane].append(job)

    @precondition(lambda self: len(self.lanes) > 0)
    @rule(data=st.data())
    def dispatch_any_candidate(self, data: st.DataObject) -> None:
        lanes = self.lanes
        candidates = lanes._candidates() if self.trusted else list(lanes.candidates())
        lane, job = data.draw(st.sampled_from(candidates))
        self.model.take(lane)
        assert (self.lanes._pop if self.trusted else self.lanes.pop)(lane) is job
        self.jobs[lane].remove(job)
        self.lanes.charge(lane, job.tenant, job.cost)
        self.model.charge(lane, job.cost)

    @precondition(lambda self: len(self.lanes) > 0)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        lane = data.draw(st.sampled_from([lane for lane in LANES if self.jobs[lane]]))
        job = data.draw(st.sampled_from(self.jobs[lane]))
        self.model.take(lane)
        assert self.lanes.remove(lane, job)
        assert not self.lanes.remove(lane, job)
        self.jobs[lane].remove(job)

    @rule(lane=st.sampled_from(LANES), cost=st.integers(-80, 80))
    def reconcile(self, lane: str, cost: int) -> None:
        self.lanes.charge(lane, "a", cost)
        self.model.charge(lane, cost)

    @rule(lane=st.sampled_from(LANES))
    def pop_an_empty_lane(self, lane: str) -> None:
        if not self.jobs[lane]:
            with pytest.raises(UsageError, match="nothing waiting"):
                self.lanes.pop(lane)

    @invariant()
    def matches_the_model(self) -> None:
        candidates = list(self.lanes.candidates())
        assert [lane for lane, _ in candidates] == self.model.order()
        for lane, head in candidates:
            assert head is self.lanes.queue(lane).peek()  # heads only, never skipped
        for lane in LANES:
            assert self.lanes.counter(lane) == self.model.counters[lane]
        assert len(self.lanes) == sum(self.model.waiting.values())


def test_lane_scheduler_matches_the_naive_model() -> None:
    run_state_machine_as_test(LaneMachine, settings=settings(max_examples=100))


def _serve_first(lanes: LaneScheduler[Job]) -> tuple[str, Job]:
    lane, job = next(lanes.candidates())
    assert lanes.pop(lane) is job
    lanes.charge(lane, job.tenant, job.cost)
    return lane, job


_pow2 = st.sampled_from([1.0, 2.0, 4.0])  # exact in binary, so the bounds are exact


@given(
    st.tuples(_pow2, _pow2, _pow2),
    st.lists(st.integers(0, 64), min_size=1, max_size=30),
    st.integers(100, 400),
)
def test_lanes_share_by_weight_under_contention(
    weights: tuple[float, float, float], costs: list[int], rounds: int
) -> None:
    # All lanes stay backlogged from a common start (counters 0), so with U the
    # largest cost: -U/w_b <= S_a/w_a - S_b/w_b <= U/w_a after every dispatch.
    lanes: LaneScheduler[Job] = LaneScheduler(
        [(n, w, rounds) for n, w in zip(LANES, weights, strict=True)]
    )
    weight = dict(zip(LANES, weights, strict=True))
    for k in range(rounds):
        for lane in LANES:
            lanes.push(lane, Job("t", costs[k % len(costs)]), "t", 1.0)
    served = dict.fromkeys(LANES, 0.0)
    u = max(costs)
    for _ in range(rounds):
        lane, job = _serve_first(lanes)
        served[lane] += job.cost
        for a, b in itertools.permutations(LANES, 2):
            gap = served[a] / weight[a] - served[b] / weight[b]
            assert -u / weight[b] <= gap <= u / weight[a]


def test_interactive_gets_its_share_when_weights_are_three_to_one() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("interactive", 3.0, 500), ("batch", 1.0, 500)])
    for _ in range(500):
        lanes.push("interactive", Job("chat", 10), "chat", 1.0)
        lanes.push("batch", Job("etl", 10), "etl", 1.0)
    served = [_serve_first(lanes)[0] for _ in range(400)]
    # -10 <= S_i/3 - S_b <= 10/3 with S_i + S_b = 4000 leaves exactly 300 jobs
    assert served.count("interactive") == 300


# --- No starvation ----------------------------------------------------------
#
# Every charge is in [eps, U]. While lane b stays backlogged and the dispatcher
# always takes the first candidate, lane a is served at most
# floor(U * w_a / (eps * w_b)) + 1 times between two turns of b (or between b
# becoming backlogged and its first turn): after b's turn c_b grew by at most
# U/w_b, a starts at or above b's old counter (b was the minimum; a joining
# later is lifted to V >= it), is served only while c_a <= c_b, and gains at
# least eps/w_a per turn. A b that rejoins has c_b <= V + U/w_b, so the same
# holds. Tenants inside a lane obey the same bound with tenant weights.

_EPS, _U = 1, 8
_TENANT_WEIGHTS = {"p": 1.0, "q": 2.0, "r": 4.0}
_ops = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(LANES), st.sampled_from(sorted(_TENANT_WEIGHTS)), st.integers(_EPS, _U)
        ),
        st.just(("serve", "", 0)),
    ),
    max_size=250,
)


def _turn_limit(u: float, eps: float, w_other: float, w_waiting: float) -> int:
    return math.floor(u * w_other / (eps * w_waiting)) + 1


@settings(max_examples=150)
@given(st.tuples(_pow2, _pow2, _pow2), _ops)
def test_no_lane_or_tenant_starves(
    weights: tuple[float, float, float], ops: list[tuple[str, str, int]]
) -> None:
    lane_weight = dict(zip(LANES, weights, strict=True))
    lanes: LaneScheduler[Job] = LaneScheduler(
        [(n, w, 10_000) for n, w in zip(LANES, weights, strict=True)]
    )
    # serves of others since each waiting lane / (lane, tenant) last had a turn
    lane_since: dict[str, dict[str, int]] = {lane: {} for lane in LANES}
    tenant_since: dict[tuple[str, str], dict[str, int]] = {}
    count: dict[tuple[str, str], int] = {}  # jobs waiting per (lane, tenant)
    pushed: list[Job] = []
    popped: list[Job] = []

    def backlogged(lane: str, tenant: str | None = None) -> bool:
        if tenant is None:
            return len(lanes.queue(lane)) > 0
        return count.get((lane, tenant), 0) > 0

    def serve() -> None:
        lane, job = _serve_first(lanes)
        popped.append(job)
        count[(lane, job.tenant)] -= 1
        for other, since in lane_since.items():
            if other != lane and backlogged(other):
                since[lane] = since.get(lane, 0) + 1
                limit = _turn_limit(_U, _EPS, lane_weight[lane], lane_weight[other])
                assert since[lane] <= limit, (lane, other, since)
        lane_since[lane] = {}
        for (inner, tenant), since in tenant_since.items():
            if inner == lane and tenant != job.tenant and backlogged(lane, tenant):
                since[job.tenant] = since.get(job.tenant, 0) + 1
                limit = _turn_limit(_U, _EPS, _TENANT_WEIGHTS[job.tenant], _TENANT_WEIGHTS[tenant])
                assert since[job.tenant] <= limit, (lane, tenant, since)
        tenant_since[(lane, job.tenant)] = {}

    for lane, tenant, cost in ops:
        if lane == "serve":
            if len(lanes):
                serve()
            continue
        if not backlogged(lane):
            lane_since[lane] = {}
        if not backlogged(lane, tenant):
            tenant_since[(lane, tenant)] = {}
        job = Job(tenant, cost)
        assert lanes.push(lane, job, tenant, _TENANT_WEIGHTS[tenant])
        count[(lane, tenant)] = count.get((lane, tenant), 0) + 1
        pushed.append(job)
    while len(lanes):
        serve()
    assert sorted(j.n for j in popped) == sorted(j.n for j in pushed)  # each exactly once


# --- Work conservation --------------------------------------------------------


def _dispatch(lanes: LaneScheduler[Job], fits: Callable[[Job], bool]) -> list[tuple[str, Job]]:
    """The Policy's loop: the first candidate that fits is popped and charged;
    repeat until none fits."""
    started: list[tuple[str, Job]] = []
    while True:
        for lane, job in lanes.candidates():
            if fits(job):
                lanes.pop(lane)
                lanes.charge(lane, job.tenant, job.cost)
                started.append((lane, job))
                break
        else:
            return started


def test_a_blocked_head_does_not_idle_other_lanes_nor_get_skipped_inside_its_lane() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("interactive", 4.0, 10), ("batch", 1.0, 10)])
    big, small = Job("chat", 900), Job("chat", 5)
    lanes.push("interactive", big, "chat", 1.0)
    lanes.push("interactive", small, "chat", 1.0)  # fits, but is behind the head
    etl = [Job("etl", 10) for _ in range(3)]
    for job in etl:
        lanes.push("batch", job, "etl", 1.0)
    budget = [25.0]

    def fits(job: Job) -> bool:
        if job.cost > budget[0]:
            return False
        budget[0] -= job.cost
        return True

    started = _dispatch(lanes, fits)
    assert started == [("batch", etl[0]), ("batch", etl[1])]  # capacity used, not idled
    assert lanes.counter("interactive") == 0.0  # uncharged: still first in line
    assert next(lanes.candidates()) == ("interactive", big)
    budget[0] = 1000
    # big lifts interactive's counter to 225, past batch's 20
    assert [job for _, job in _dispatch(lanes, fits)] == [big, etl[2], small]


def test_candidates_is_a_snapshot() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("a", 1.0, 5), ("b", 1.0, 5)])
    jobs = [Job(), Job()]
    lanes.push("a", jobs[0], "t", 1.0)
    lanes.push("b", jobs[1], "t", 1.0)
    seen = []
    for lane, job in lanes.candidates():
        lanes.pop(lane)
        seen.append(job)
    assert seen == jobs
    assert lanes.lanes == ("a", "b")


def test_a_lane_that_returns_is_lifted() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("interactive", 1.0, 100), ("batch", 1.0, 100)])
    for _ in range(50):
        lanes.push("batch", Job("etl", 10), "etl", 1.0)
    for _ in range(50):
        _serve_first(lanes)
    assert lanes.counter("batch") == 500
    lanes.push("interactive", Job("chat", 10), "chat", 1.0)
    # V is batch's counter when it last waited (490), not after its last charge
    assert lanes.counter("interactive") == 490.0
    lanes.push("batch", Job("etl", 10), "etl", 1.0)
    assert [lane for lane, _ in lanes.candidates()] == ["interactive", "batch"]


# --- Bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("lanes", "match"),
    [
        ([], "at least one lane"),
        ([("a", 1.0, 1), ("a", 2.0, 1)], "unique"),
        ([("a", 0.0, 1)], "weight"),
        ([("a", -1.0, 1)], "weight"),
        ([("a", math.nan, 1)], "weight"),
        ([("a", math.inf, 1)], "weight"),
        ([("a", 1.0, -1)], "capacity"),
    ],
)
def test_bad_lanes_are_refused(lanes: list[tuple[str, float, int]], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        LaneScheduler(lanes)


def test_each_lane_orders_by_key_within_its_own_slack() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler(
        [("chat", 1.0, 10), ("batch", 1.0, 10)], slack={"chat": 100.0}
    )
    for lane in ("chat", "batch"):
        lanes.push(lane, Job("a", 50), "a", 1.0, key=500.0)
        lanes.push(lane, Job("b", 50), "b", 1.0, key=5.0)
        lanes.charge(lane, "b", 50)  # b is 50 above a: within chat's slack only
    heads = {lane: job.tenant for lane, job in lanes.candidates()}
    assert heads == {"chat": "b", "batch": "a"}
    lanes._push("batch", Job("a", 1), "a", 1.0, key=1.0)  # the trusted path takes keys too
    assert lanes.pop("batch").cost == 1


@pytest.mark.parametrize(
    ("slack", "match"),
    [
        ({"nope": 1.0}, "unknown lanes"),
        ({"a": -1.0}, "slack"),
        ({"a": math.nan}, "slack"),
        ({"a": math.inf}, "slack"),
    ],
)
def test_bad_slack_is_refused(slack: dict[str, float], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        LaneScheduler([("a", 1.0, 1)], slack=slack)


def test_misuse_changes_nothing() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("a", 1.0, 5), ("b", 2.0, 5)])
    job = Job()
    lanes.push("a", job, "t", 1.0)
    lanes.charge("a", "t", 3)

    def state() -> tuple[Any, ...]:
        return (
            list(lanes.candidates()),
            lanes.counter("a"),
            lanes.counter("b"),
            lanes.queue("a").statistics(),
            len(lanes),
        )

    before = state()
    calls: list[Callable[[], object]] = [
        lambda: lanes.push("nope", Job(), "t", 1.0),
        lambda: lanes.pop("nope"),
        lambda: lanes.remove("nope", job),
        lambda: lanes.charge("nope", "t", 1),
        lambda: lanes.queue("nope"),
        lambda: lanes.counter("nope"),
        lambda: lanes.pop("b"),
        lambda: lanes.push("a", job, "t", 1.0),
        lambda: lanes.push("a", Job(), "t", 0.0),
        lambda: lanes.push("a", Job(), "t", 1.0, key=math.inf),
        lambda: lanes.charge("a", "t", math.nan),
        lambda: lanes.charge("a", "t", 1, weight=-1.0),
    ]
    for call in calls:
        with pytest.raises(UsageError):
            call()
        assert state() == before


def test_a_lanes_queue_is_read_through_a_view_that_cannot_change_it() -> None:
    lanes: LaneScheduler[Job] = LaneScheduler([("a", 1.0, 5), ("b", 1.0, 5)])
    job = Job()
    lanes.push("a", job, "t", 1.0)
    view = lanes.queue("a")
    assert (len(view), view.peek(), view.capacity) == (1, job, 5)
    assert view.statistics().waiting == 1
    for change in ("push", "pop", "remove", "charge", "displaced"):
        assert not hasattr(view, change)
    lanes.pop("a")
    assert (len(view), view.peek()) == (0, None)  # a live view, not a copy
