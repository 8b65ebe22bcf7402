from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from slopolicy.core.queueing import backlog, fairqueue, keyed
from slopolicy.core.queueing.fairqueue import FairQueue, FairQueueStatistics
from slopolicy.errors import UsageError
from tests.core.jobs import Job

TENANTS = ("a", "b", "c", "d", "e")


class NaiveVTC:
    """The rules of SIMULATOR.md written as plainly as possible: lists per
    tenant, every counter kept, the minimum found by scanning."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.fifo: dict[str, list[Job]] = {}  # backlogged tenants only
        self.counters: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.joined: dict[str, int] = {}
        self.clock = itertools.count()
        self.last_v = 0.0

    def v(self) -> float:
        if self.fifo:
            self.last_v = min(self.counters[t] for t in self.fifo)
        return self.last_v

    def waiting(self) -> int:
        return sum(len(jobs) for jobs in self.fifo.values())

    def push(self, job: Job, tenant: str, weight: float) -> bool:
        if self.waiting() >= self.capacity:
            return False
        if tenant not in self.fifo:
            v = self.v()
            self.counters[tenant] = max(self.counters.get(tenant, v), v)
            self.joined[tenant] = next(self.clock)
            self.fifo[tenant] = []
        self.weights[tenant] = weight
        self.fifo[tenant].append(job)
        return True

    def peek(self, skip: frozenset[str] = frozenset()) -> Job | None:
        """The pick among the backlogged tenants not in ``skip``."""
        waiting = [t for t in self.fifo if t not in skip]
        if not waiting:
            return None
        tenant = min(waiting, key=lambda t: (self.counters[t], self.joined[t]))
        return self.fifo[tenant][0]

    def remove(self, job: Job) -> bool:
        for tenant, jobs in self.fifo.items():
            for k, other in enumerate(jobs):
                if other is job:
                    self.v()  # V as it was, should the tenant leave
                    del jobs[k]
                    if not jobs:
                        del self.fifo[tenant]
                    return True
        return False

    def charge(self, tenant: str, cost: float, weight: float | None = None) -> None:
        v = self.v()
        known = tenant in self.counters
        counter = self.counters.get(tenant, v)
        w = weight if weight is not None else self.weights.get(tenant, 1.0)
        new = counter + cost / w
        if cost < 0:
            new = max(new, min(counter, v))
        if known or new > v:
            self.counters[tenant] = new
            self.weights.setdefault(tenant, w)

    def forget(self, tenant: str) -> None:
        del self.counters[tenant]
        self.weights.pop(tenant, None)


class NaiveKeyedVTC(NaiveVTC):
    """The pick with keys, flags and a slack, as plainly as possible: a tenant
    is eligible while its counter is at most V + slack; of those, the tenants
    whose last push was not behind come first, then the one whose first job
    (by key, then push order) has the smallest key is served, ties by the
    smaller counter, then the tenant backlogged first. Everything is found by
    scanning."""

    def __init__(self, capacity: int, slack: float) -> None:
        super().__init__(capacity)
        self.slack = slack
        self.order: dict[int, tuple[float, int]] = {}  # id(job) -> (key, push number)
        self.behind: dict[str, bool] = {}  # tenant -> its last push's flag

    def push_at(self, job: Job, tenant: str, weight: float, key: float, behind: bool) -> bool:
        if not self.push(job, tenant, weight):
            return False
        self.order[id(job)] = (key, next(self.clock))
        self.behind[tenant] = behind
        return True

    def first(self, tenant: str) -> Job:
        return min(self.fifo[tenant], key=lambda job: self.order[id(job)])

    def peek(self, skip: frozenset[str] = frozenset()) -> Job | None:
        """The pick among the backlogged tenants not in ``skip``: ``V`` is
        theirs (the skipped wait as if nothing of theirs did)."""
        waiting = [t for t in self.fifo if t not in skip]
        if not waiting:
            return None
        v = min(self.counters[t] for t in waiting) if skip else self.v()
        eligible = [t for t in waiting if self.counters[t] <= v + self.slack]
        tenant = min(
            eligible,
            key=lambda t: (
                self.behind[t],
                self.order[id(self.first(t))][0],
                self.counters[t],
                self.joined[t],
            ),
        )
        return self.first(tenant)


_weights = st.sampled_from([0.5, 1.0, 2.0, 3.0])
_costs = st.integers(-60, 100)
# Few values, so ties between keys are common; one far out of the counters' range.
_keys = st.sampled_from([0.0, 1.0, 2.0, 5.0, -3.0, 1e9])
_slacks = st.sampled_from([0.0, 0.5, 10.0, 60.0, 1e6])


class FairQueueMachine(RuleBasedStateMachine):
    """FairQueue against a naive model, with cancellations, refunds, forgetting
    and pushes to a full queue.

    Three modes. ``plain``: the defaults (no slack given, no key pushed) against
    :class:`NaiveVTC`, the rules as they were before keys: today's pick, kept.
    ``equal``: a random slack and the same key (not 0) for every job, against
    the same model: equal keys give VTC's pick whatever the slack, through the
    pick heaps. ``keyed``: random keys, flags (``behind``) and slack against
    :class:`NaiveKeyedVTC`.
    """

    mode = "plain"

    def __init__(self) -> None:
        super().__init__()
        self.queue: FairQueue[Job] = FairQueue(0)
        self.model = NaiveVTC(0)
        self.retired: list[Job] = []  # popped or removed: may be pushed again
        self.left: str | None = None  # the tenant whose last job just went
        self.max_idle = 0

    @initialize(
        capacity=st.integers(0, 6), max_idle=st.sampled_from([0, 1, 2, 10_000]), slack=_slacks
    )
    def setup(self, capacity: int, max_idle: int, slack: float) -> None:
        if self.mode == "plain":
            self.queue = FairQueue(capacity, max_idle_counters=max_idle)
        else:
            self.queue = FairQueue(capacity, max_idle_counters=max_idle, slack=slack)
        self.model = NaiveKeyedVTC(capacity, slack) if self.mode == "keyed" else NaiveVTC(capacity)
        self.max_idle = max_idle

    def push_both(
        self, job: Job, tenant: str, weight: float, key: float, behind: bool = False
    ) -> bool:
        """Push ``job`` to the queue and the model; whether both took it."""
        if self.mode == "plain":
            pushed = self.queue.push(job, tenant, weight)
            assert pushed == self.model.push(job, tenant, weight)
        elif self.mode == "equal":
            pushed = self.queue.push(job, tenant, weight, key=7.0)
            assert pushed == self.model.push(job, tenant, weight)
        else:
            assert isinstance(self.model, NaiveKeyedVTC)
            pushed = self.queue.push(job, tenant, weight, key=key, behind=behind)
            assert pushed == self.model.push_at(job, tenant, weight, key, behind)
        return pushed

    def waiting_jobs(self) -> list[Job]:
        return [job for jobs in self.model.fifo.values() for job in jobs]

    @rule(tenant=st.sampled_from(TENANTS), weight=_weights, key=_keys, behind=st.booleans())
    def push(self, tenant: str, weight: float, key: float, behind: bool) -> None:
        self.push_both(Job(tenant), tenant, weight, key, behind)

    @precondition(lambda self: len(self.retired) > 0)
    @rule(data=st.data(), tenant=st.sampled_from(TENANTS), weight=_weights, key=_keys)
    def push_again(self, data: st.DataObject, tenant: str, weight: float, key: float) -> None:
        job = data.draw(st.sampled_from(self.retired))
        job.tenant = tenant
        if self.push_both(job, tenant, weight, key):
            self.retired.remove(job)

    @precondition(lambda self: len(self.queue) > 0)
    @rule(data=st.data(), weight=_weights)
    def push_a_waiting_job(self, data: st.DataObject, weight: float) -> None:
        job = data.draw(st.sampled_from(self.waiting_jobs()))
        with pytest.raises(UsageError, match="already waiting"):
            self.queue.push(job, "a", weight)

    @rule(weight=st.sampled_from([0.0, -1.0, math.nan, math.inf]))
    def push_with_a_bad_weight(self, weight: float) -> None:
        with pytest.raises(UsageError, match="weight"):
            self.queue.push(Job(), "a", weight)

    @rule(skip=st.frozensets(st.sampled_from(TENANTS)))
    def peek_skipping(self, skip: frozenset[str]) -> None:
        # The pick among the others; nothing changes (the invariant compares
        # the plain pick, counters and statistics with the model after).
        assert self.queue.peek_skipping(skip) is self.model.peek(skip)

    @precondition(lambda self: len(self.queue) > 0)
    @rule(cost=st.integers(0, 100), weighted=st.booleans())
    def pop_and_charge(self, cost: int, weighted: bool) -> None:
        expected = self.model.peek()
        assert expected is not None
        self.model.remove(expected)
        job = self.queue.pop()
        assert job is expected
        self.retired.append(job)
        weight = self.model.weights[job.tenant] if weighted else None
        self.note_left(job)
        self.forget_what_the_queue_forgot()  # the pop may have forgotten a tenant
        self.queue.charge(job.tenant, cost, weight=weight)
        self.model.charge(job.tenant, cost, weight)

    @rule()
    def pop(self) -> None:
        expected = self.model.peek()
        if expected is None:
            with pytest.raises(UsageError, match="empty"):
                self.queue.pop()
            return
        self.model.remove(expected)
        assert self.queue.pop() is expected
        self.retired.append(expected)
        self.note_left(expected)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        jobs = self.waiting_jobs() + self.retired + [Job()]
        job = data.draw(st.sampled_from(jobs))
        removed = self.model.remove(job)
        assert self.queue.remove(job) == removed
        if removed:
            self.retired.append(job)
            self.note_left(job)

    @rule(tenant=st.sampled_from(TENANTS), weight=_weights, key=_keys)
    def push_out(self, tenant: str, weight: float, key: float) -> None:
        """A full queue makes room for the arrival by pushing out the newest job
        of the tenant with the latest place (jobs waiting / weight) when the
        arrival's place comes first, as the model says (DESIGN.md 9)."""
        model = self.model
        if tenant in model.fifo:  # a tenant's weight is its tier's: it stays while it waits
            weight = model.weights[tenant]
        victim = self.queue.displaced(tenant, weight)
        places = {t: len(jobs) / model.weights[t] for t, jobs in model.fifo.items()}
        latest = max(places.values(), default=None)  # None: nothing waits
        mine = (len(model.fifo.get(tenant, ())) + 1) / weight
        if model.waiting() < model.capacity or latest is None or mine >= latest:
            assert victim is None
            return
        assert victim is not None
        assert places[victim.tenant] == latest
        assert model.fifo[victim.tenant][-1] is victim  # its newest
        assert self.queue.remove(victim)
        assert model.remove(victim)
        self.retired.append(victim)
        self.note_left(victim)
        self.forget_what_the_queue_forgot()  # the removal may have forgotten a tenant
        assert self.push_both(Job(tenant), tenant, weight, key)

    def note_left(self, job: Job) -> None:
        if job.tenant not in self.model.fifo:
            self.left = job.tenant

    @rule(tenant=st.sampled_from(TENANTS), cost=_costs, weight=st.none() | _weights)
    def charge(self, tenant: str, cost: int, weight: float | None) -> None:
        self.queue.charge(tenant, cost, weight=weight)
        self.model.charge(tenant, cost, weight)

    @rule(cost=st.sampled_from([math.nan, math.inf, -math.inf]))
    def charge_a_bad_cost(self, cost: float) -> None:
        with pytest.raises(UsageError, match="cost"):
            self.queue.charge("a", cost)

    @invariant()
    def places_list_every_waiting_tenant(self) -> None:
        # While a full queue's heap of places exists, each tenant with jobs
        # waiting has its own entry there, at a place no earlier than its own.
        places = self.queue._places
        if places is None:
            return
        entries = {
            id(entry[2]): entry for entry in places._heap if entry[2].place_stamp == entry[1]
        }
        for record in self.queue._tenants.values():
            if record.live:
                entry = entries.get(id(record))
                assert entry is not None, f"{record.name} is not listed"
                assert entry[1] >= places._first, f"{record.name} is listed in an older heap"
                assert -entry[0] == record.place >= record.live / record.weight

    @invariant()
    def pick_heaps_list_every_waiting_tenant(self) -> None:
        # Once a key other than 0 or a flag came, each tenant with jobs waiting
        # has one valid entry, eligible or parked, at its counter; an eligible
        # one at its flag and a key no larger than its first job's. A tenant's FIFO without a heap
        # is in key order.
        queue = self.queue
        for record in queue._tenants.values():
            live = [e for e in record.items if backlog._alive(queue._where, e)]
            assert len(live) == record.live
            if record.order is None:
                assert live == sorted(live, key=lambda e: e[0])
            elif live:
                assert min(live) == min(e for e in record.order if backlog._alive(queue._where, e))
        if queue._keyed is None:
            return
        eligible = {
            id(e[5]): e for e in queue._keyed._eligible if e[5].pick_stamp == e[4] and e[5].live
        }
        parked = {
            id(e[3]): e for e in queue._keyed._parked if e[3].pick_stamp == e[2] and e[3].live
        }
        assert not eligible.keys() & parked.keys()
        for record in queue._tenants.values():
            if not record.live:
                continue
            first = min(e for e in record.items if backlog._alive(queue._where, e))
            if id(record) in eligible:
                behind, key, counter, joined = eligible[id(record)][:4]
                assert behind is record.behind
                assert key == record.key <= first[0]
            else:
                counter, joined = parked[id(record)][:2]
                assert record.key <= first[0]
            assert (counter, joined) == (record.counter, record.joined)

    @invariant()
    def matches_the_model(self) -> None:
        self.forget_what_the_queue_forgot()
        self.compare()

    def forget_what_the_queue_forgot(self) -> None:
        """The queue may forget idle counters, smallest first but sparing a
        tenant that just left; the model follows."""
        left, self.left = self.left, None
        if self.max_idle and left is not None:
            assert self.queue.counter(left) is not None
        kept_idle = [
            c
            for t in TENANTS
            if t not in self.model.fifo and t != left and (c := self.queue.counter(t)) is not None
        ]
        assert self.queue.statistics().idle_counters <= self.max_idle
        for tenant in TENANTS:
            if tenant in self.model.counters and self.queue.counter(tenant) is None:
                assert tenant not in self.model.fifo
                assert self.model.counters[tenant] <= min(kept_idle, default=math.inf)
                self.model.forget(tenant)

    def compare(self) -> None:
        assert len(self.queue) == self.model.waiting() <= self.model.capacity
        assert self.queue.peek() is self.model.peek()
        for tenant in TENANTS:
            assert self.queue.counter(tenant) == self.model.counters.get(tenant)
        backlogged = [self.model.counters[t] for t in self.model.fifo]
        kept = sum(self.queue.counter(t) is not None for t in TENANTS)
        assert self.queue.statistics() == FairQueueStatistics(
            waiting=self.model.waiting(),
            backlogged_tenants=len(backlogged),
            virtual_time=self.model.v(),
            min_counter=min(backlogged, default=None),
            max_counter=max(backlogged, default=None),
            idle_counters=kept - len(backlogged),
        )


class EqualKeysMachine(FairQueueMachine):
    mode = "equal"


class KeyedMachine(FairQueueMachine):
    mode = "keyed"


@pytest.mark.parametrize("machine", [FairQueueMachine, EqualKeysMachine, KeyedMachine])
@pytest.mark.parametrize("slack", [64, 0], ids=["lazy", "rebuild-always"])
def test_fair_queue_matches_the_naive_model(
    machine: type[FairQueueMachine], slack: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slack 0 rebuilds the heaps and FIFOs at every stale entry: the rebuilds
    # are checked against the model too.
    monkeypatch.setattr(fairqueue, "_SLACK", slack)
    monkeypatch.setattr(backlog, "_SLACK", slack)
    monkeypatch.setattr(keyed, "_SLACK", slack)
    run_state_machine_as_test(machine, settings=settings(max_examples=100, stateful_step_count=50))


# --- Memory and lazy deletion ----------------------------------------------


def test_idle_counters_stay_bounded_with_100k_tenants() -> None:
    queue: FairQueue[Job] = FairQueue(100_000)
    for k in range(100_000):
        tenant = f"t{k}"
        queue.push(Job(tenant), tenant, 1.0 + k % 3)
        queue.charge(queue.pop().tenant, 1 + k % 7)
        if k % 10_000 == 0:
            assert queue.statistics().idle_counters <= 10_000
    stats = queue.statistics()
    assert stats.idle_counters == 10_000
    assert (stats.waiting, stats.backlogged_tenants) == (0, 0)
    assert len(queue._tenants) == 10_000
    assert len(queue._idle) <= 2 * 10_000 + 64


def test_all_tenants_backlogged_at_once_then_served() -> None:
    queue: FairQueue[Job] = FairQueue(20_000, max_idle_counters=500)
    for k in range(20_000):
        queue.push(Job(f"t{k}", 1 + k % 5), f"t{k}", 1.0)
    assert queue.statistics().backlogged_tenants == 20_000
    for k in range(20_000):
        job = queue.pop()
        assert job.tenant == f"t{k}"  # all at V: first backlogged first
        queue.charge(job.tenant, job.cost)
    assert queue.statistics().idle_counters == 500
    # The largest counters are the ones kept.
    assert {queue.counter(t) for t in queue._tenants} == {5.0}


def test_a_heap_rebuild_as_a_tenant_rejoins_keeps_that_tenant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the state machine: the rebuild keeps live tenants only, so a
    rejoining tenant must be live before it is indexed, or its items are
    stranded (peek None with one waiting)."""
    monkeypatch.setattr(fairqueue, "_SLACK", 0)  # rebuild at the first stale entry
    queue: FairQueue[Job] = FairQueue(2, max_idle_counters=0)
    a, b, again = Job("a"), Job("b"), Job("b")
    queue.push(a, "a", 0.5)
    queue.push(b, "b", 0.5)
    queue.charge("b", 1)
    queue.charge("b", 1)
    assert queue.remove(b)
    queue.push(again, "b", 0.5)
    assert queue.remove(a)
    assert queue.peek() is again
    assert queue.pop() is again


def test_a_tenant_that_just_left_keeps_its_counter_for_the_charge() -> None:
    queue: FairQueue[Job] = FairQueue(10, max_idle_counters=1)
    queue.push(Job("a"), "a", 1.0)
    queue.charge(queue.pop().tenant, 50)  # a idle at 50
    queue.push(Job("b"), "b", 4.0)
    assert queue.pop().tenant == "b"  # b idle at V = 0 < 50, yet a is forgotten
    assert (queue.counter("a"), queue.counter("b")) == (None, 0.0)
    queue.charge("b", 8)  # at b's own weight
    assert queue.counter("b") == 2.0


def test_the_smallest_idle_counters_are_forgotten_first() -> None:
    queue: FairQueue[Job] = FairQueue(10, max_idle_counters=2)
    for tenant, cost in (("a", 5), ("b", 1), ("c", 9)):
        queue.push(Job(tenant), tenant, 1.0)
        queue.charge(queue.pop().tenant, cost)
    assert [queue.counter(t) for t in "abc"] == [5.0, None, 9.0]
    queue.push(Job("b"), "b", 1.0)  # a forgotten tenant comes back at V
    assert queue.counter("b") == queue.statistics().virtual_time == 0.0


def test_an_unknown_tenant_is_charged_from_v_at_the_weight_given() -> None:
    queue: FairQueue[Job] = FairQueue(10, max_idle_counters=1)
    queue.push(Job("x"), "x", 1.0)
    queue.charge("x", 10)  # V = 10
    queue.charge("new", 8, weight=4.0)
    assert queue.counter("new") == 12.0
    queue.charge("other", 3)  # weight 1.0 when none is known; "new" is forgotten
    assert (queue.counter("new"), queue.counter("other")) == (None, 13.0)
    queue.charge("refunded", -5)  # a refund to a tenant at V keeps nothing
    assert queue.counter("refunded") is None


def test_lazy_deletion_garbage_stays_bounded() -> None:
    queue: FairQueue[Job] = FairQueue(10_000)
    head = Job("a")
    queue.push(head, "a", 1.0)
    queue.push(Job("b"), "b", 1.0)
    for k in range(5000):
        job = Job("a")
        queue.push(job, "a", 1.0)
        assert queue.remove(job)
        queue.charge("b" if k % 2 else "a", 1)  # reorder the ready heap
        queue.charge(f"idle{k % 50}", 3)  # churn the idle heap
    assert len(queue) == 2
    assert len(queue._tenants["a"].items) <= 1 + 64 + 1
    assert len(queue._ready) <= 2 * 2 + 64
    assert len(queue._idle) <= 2 * 50 + 64
    assert head in (queue.pop(), queue.pop())


def test_ties_go_to_the_tenant_backlogged_first_and_fifo_within_a_tenant() -> None:
    queue: FairQueue[Job] = FairQueue(10)
    first, second, third = Job("b"), Job("a"), Job("b")
    queue.push(first, "b", 1.0)
    queue.push(second, "a", 1.0)
    queue.push(third, "b", 1.0)
    assert [queue.pop(), queue.pop(), queue.pop()] == [first, third, second]


def test_equal_items_are_distinct_entries() -> None:
    queue: FairQueue[tuple[int]] = FairQueue(10)
    one, other = (1,), tuple(range(1, 2))
    assert one == other
    assert one is not other
    queue.push(one, "a", 1.0)
    queue.push(other, "a", 1.0)
    assert len(queue) == 2
    assert queue.remove(other)
    assert queue.pop() is one


def test_a_removed_head_is_skipped() -> None:
    queue: FairQueue[Job] = FairQueue(10)
    jobs = [Job() for _ in range(3)]
    for job in jobs:
        queue.push(job, "a", 1.0)
    assert queue.remove(jobs[0])
    assert not queue.remove(jobs[0])
    assert queue.peek() is jobs[1]
    assert len(queue) == 2


def test_a_refund_stops_at_v() -> None:
    queue: FairQueue[Job] = FairQueue(10)
    queue.push(Job("a"), "a", 1.0)
    queue.push(Job("b"), "b", 2.0)
    queue.charge("a", 100)  # a: 100, b: 0 = V
    queue.charge("a", -60)
    assert queue.counter("a") == 40
    queue.charge("a", -1000)
    assert queue.counter("a") == 0.0
    queue.charge("b", -10)  # b is at V: nothing to give back
    assert queue.counter("b") == 0.0


# --- Bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": -1},
        {"capacity": 1.5},
        {"capacity": True},
        {"capacity": 1, "max_idle_counters": -1},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=r"must be (an integer|>= 0)"):
        FairQueue(**kwargs)


def _snapshot(queue: FairQueue[Job]) -> tuple[object, ...]:
    return (queue.statistics(), queue.peek(), queue.counter("a"), queue.counter("b"))


@pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf, -math.inf, True, "1"])
def test_bad_weights_change_nothing(weight: Any) -> None:
    queue: FairQueue[Job] = FairQueue(10)
    queue.push(Job("a"), "a", 1.0)
    queue.charge("a", 5)
    before = _snapshot(queue)
    with pytest.raises(UsageError, match="weight"):
        queue.push(Job("b"), "b", weight)
    with pytest.raises(UsageError, match="weight"):
        queue.charge("a", 5, weight=weight)
    assert _snapshot(queue) == before


@pytest.mark.parametrize("cost", [math.nan, math.inf, -math.inf, None, "3"])
def test_bad_costs_change_nothing(cost: Any) -> None:
    queue: FairQueue[Job] = FairQueue(10)
    queue.push(Job("a"), "a", 1.0)
    before = _snapshot(queue)
    with pytest.raises(UsageError, match="cost"):
        queue.charge("a", cost)
    assert _snapshot(queue) == before


def test_an_overflowing_charge_changes_nothing() -> None:
    queue: FairQueue[Job] = FairQueue(10)
    queue.push(Job("a"), "a", 1e-300)
    before = _snapshot(queue)
    with pytest.raises(UsageError, match="overflows"):
        queue.charge("a", 1e300)
    assert _snapshot(queue) == before


def test_pop_from_empty_and_duplicates_are_misuse() -> None:
    queue: FairQueue[Job] = FairQueue(1)
    with pytest.raises(UsageError, match="empty"):
        queue.pop()
    job = Job()
    assert queue.push(job, "a", 1.0)
    before = _snapshot(queue)
    with pytest.raises(UsageError, match="already waiting"):
        queue.push(job, "b", 1.0)
    assert _snapshot(queue) == before
    assert not queue.push(Job(), "b", 1.0)  # full: refused, not raised
    assert _snapshot(queue) == before
    assert queue.counter("b") is None


def test_capacity_zero_refuses_everything() -> None:
    queue: FairQueue[Job] = FairQueue(0)
    assert not queue.push(Job(), "a", 1.0)
    assert queue.peek() is None
    assert len(queue) == 0
    assert queue.capacity == 0
