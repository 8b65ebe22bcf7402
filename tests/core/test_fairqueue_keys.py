"""Keys and slack in a FairQueue: shortest first inside the fairness the
counters keep (the state machine in test_fairqueue.py checks the pick against
a naive model; these are the cases by name, the scale and the bad input)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from slopolicy.core.queueing.fairqueue import FairQueue
from slopolicy.errors import UsageError
from tests.core.jobs import Job


def _push(queue: FairQueue[Job], tenant: str, key: float, cost: float = 0.0) -> Job:
    job = Job(tenant, cost)
    assert queue.push(job, tenant, 1.0, key=key)
    return job


def test_a_tenants_items_go_by_key_then_arrival() -> None:
    queue: FairQueue[Job] = FairQueue(10)
    five, one, three, one_again = (_push(queue, "a", key) for key in (5, 1, 3, 1))
    assert [queue.pop() for _ in range(4)] == [one, one_again, three, five]


def test_the_smallest_key_across_tenants_within_the_slack() -> None:
    for slack, first in ((10.0, "b"), (4.9, "a"), (5.0, "b")):
        queue: FairQueue[Job] = FairQueue(10, slack=slack)
        _push(queue, "a", 100)
        _push(queue, "b", 1)
        queue.charge("b", 5)  # b is 5 above V = 0
        head = queue.peek()
        assert head is not None
        assert head.tenant == first, slack
        assert queue.pop() is head


def test_ties_on_key_go_to_the_smaller_counter_then_the_tenant_backlogged_first() -> None:
    queue: FairQueue[Job] = FairQueue(10, slack=100.0)
    b, a, c = _push(queue, "b", 1), _push(queue, "a", 1), _push(queue, "c", 1)
    queue.charge("b", 3)
    assert [queue.pop() for _ in range(3)] == [a, c, b]


def test_a_tenant_above_the_slack_waits_until_v_rises_to_it() -> None:
    queue: FairQueue[Job] = FairQueue(100, slack=10.0)
    small = [_push(queue, "small", 1) for _ in range(5)]
    for _ in range(30):
        _push(queue, "large", 1000, cost=4)
    queue.charge("small", 15)  # small is 15 above V: parked behind large
    served = []
    while (job := queue.pop()) is not small[0]:
        served.append(job.tenant)
        queue.charge(job.tenant, job.cost)
    # Large is served until V + 10 reaches small's 15: then small's key wins.
    assert served == ["large", "large"]
    assert queue.counter("large") == 8


def test_a_full_queue_pushes_out_the_newest_not_the_largest() -> None:
    queue: FairQueue[Job] = FairQueue(4, slack=1.0)
    old = _push(queue, "a", 900)
    newest = [_push(queue, "a", key) for key in (5, 1)][-1]
    _push(queue, "b", 50)
    assert queue.displaced("c", 1.0) is newest  # by arrival: invariant 9 is about places
    assert queue.remove(newest)
    _push(queue, "c", 7)
    assert queue.pop().tenant == "a"  # all at V: a's key 5 is the smallest
    assert queue.displaced("a", 1.0) is None  # room
    assert old in (queue.pop(), queue.pop(), queue.pop())


def test_the_interval_bound_counts_the_slack_twice_and_is_reached() -> None:
    """Equal weights, every cost U = 1, slack s = 10: j's small items come
    first, then i's. While both stay backlogged, the served gap S_i - S_j
    moves from -(U + s) to U + s: the bound U_i/w_i + U_j/w_j + 2s, reached."""
    u, s = 1.0, 10.0
    queue: FairQueue[Job] = FairQueue(200, slack=s)
    for key in [0.0] * 40 + [100.0] * 40:
        _push(queue, "j", key, cost=u)
    for key in [50.0] * 80:
        _push(queue, "i", key, cost=u)
    served = {"i": 0.0, "j": 0.0}
    gaps = []
    for _ in range(100):
        job = queue.pop()
        queue.charge(job.tenant, job.cost)
        served[job.tenant] += job.cost
        gaps.append(served["i"] - served["j"])
    assert min(gaps) == -(u + s)
    assert max(gaps) == u + s
    assert max(gaps) - min(gaps) == u + u + 2 * s


def test_every_key_equal_is_vtc_whatever_the_slack() -> None:
    orders = []
    for slack, key in ((0.0, 0.0), (0.0, 7.0), (1e6, 7.0)):
        queue: FairQueue[Job] = FairQueue(100, slack=slack)
        jobs = [Job(t, 1 + k % 5) for k, t in enumerate("abcab" * 6)]
        for job in jobs:
            queue.push(job, job.tenant, 1.0 + (job.tenant == "c"), key=key)
        order = []
        while len(queue):
            job = queue.pop()
            queue.charge(job.tenant, job.cost)
            order.append(jobs.index(job))
        orders.append(order)
    assert orders[0] == orders[1] == orders[2]


def test_shortest_first_at_scale_across_20k_tenants() -> None:
    # An O(tenants) scan per pick would take minutes here.
    queue: FairQueue[Job] = FairQueue(40_000, slack=1e9, max_idle_counters=100)
    keys = list(range(20_000))
    random.Random(7).shuffle(keys)
    for k, key in enumerate(keys):
        queue.push(Job(f"t{k}", 1.0), f"t{k}", 1.0, key=float(key))
        queue.push(Job(f"t{k}", 1.0), f"t{k}", 1.0, key=float(key) + 0.5)
    popped = []
    while len(queue):
        job = queue.pop()
        queue.charge(job.tenant, job.cost)
        popped.append(keys[int(job.tenant[1:])])
    assert popped == sorted(popped)


def test_keyed_garbage_stays_bounded() -> None:
    queue: FairQueue[Job] = FairQueue(10_000, slack=3.0)
    draw = random.Random(3)
    kept = [_push(queue, "a", 10), _push(queue, "b", 10)]
    for k in range(5000):
        job = _push(queue, "a", draw.choice([1, 5, 20]))
        assert queue.remove(job)
        queue.charge("b" if k % 2 else "a", draw.randint(-3, 5))  # relists, parks
        head = queue.peek()
        assert head in kept
    record = queue._tenants["a"]
    assert record.order is not None
    assert len(record.items) <= 2 * 1 + 64
    assert len(record.order) <= 2 * 1 + 64
    assert queue._keyed is not None
    assert len(queue._keyed._eligible) + len(queue._keyed._parked) <= 2 * (2 * 2 + 64)
    assert {queue.pop(), queue.pop()} == set(kept)


@pytest.mark.parametrize("slack", [-1.0, math.nan, math.inf, -math.inf, True, "1", 10**400])
def test_bad_slack_is_refused(slack: Any) -> None:
    with pytest.raises(UsageError, match="slack"):
        FairQueue(10, slack=slack)


@pytest.mark.parametrize("key", [math.nan, math.inf, -math.inf, None, True, "1", 10**400])
def test_a_bad_key_changes_nothing(key: Any) -> None:
    queue: FairQueue[Job] = FairQueue(10)
    waiting = _push(queue, "a", 3)
    with pytest.raises(UsageError, match="key"):
        queue.push(Job("b"), "b", 1.0, key=key)
    assert len(queue) == 1
    assert queue.counter("b") is None
    assert queue.pop() is waiting


def test_a_tenant_pushed_behind_goes_after_those_within_their_share() -> None:
    # The deep backlog of small items would win every pick by key; behind, it
    # waits for the tenant within its share, inside the slack.
    queue: FairQueue[Job] = FairQueue(100, slack=1e6)
    deep = [_push(queue, "deep", 1, cost=1) for _ in range(5)]
    assert queue.push(Job("deep", 1), "deep", 1.0, key=1, behind=True)
    light = _push(queue, "light", 50, cost=1)
    assert queue.pop() is light
    queue.charge("light", 1)
    assert queue.pop() is deep[0]


def test_behind_changes_the_order_never_the_bound() -> None:
    # A tenant always behind is still served once the others' counters pass
    # V + s: the counters keep it within U/w + s of them.
    u, s = 1.0, 10.0
    queue: FairQueue[Job] = FairQueue(1000, slack=s)
    for _ in range(200):
        assert queue.push(Job("over", u), "over", 1.0, key=0.0, behind=True)
        _push(queue, "within", 5.0, cost=u)
    served = {"over": 0.0, "within": 0.0}
    for _ in range(200):
        job = queue.pop()
        queue.charge(job.tenant, job.cost)
        served[job.tenant] += job.cost
        assert abs(served["within"] - served["over"]) <= u + s
    assert served["over"] > 0


def test_behind_must_be_a_bool() -> None:
    queue: FairQueue[Job] = FairQueue(4)
    with pytest.raises(UsageError, match="behind must be a bool"):
        queue.push(Job("a", 1), "a", 1.0, behind=1)  # type: ignore[arg-type]
    assert len(queue) == 0


@pytest.mark.parametrize("skip", ["a", 3, None])
def test_skipping_takes_a_collection_of_names(skip: Any) -> None:
    queue: FairQueue[Job] = FairQueue(10)
    job = _push(queue, "a", 1)
    with pytest.raises(UsageError, match="skip must be a collection"):
        queue.peek_skipping(skip)
    assert queue.peek() is job


def test_skipping_a_tenant_picks_among_the_others_and_changes_nothing() -> None:
    queue: FairQueue[Job] = FairQueue(10, slack=0.0)
    a, b, c = _push(queue, "a", 5), _push(queue, "b", 1), _push(queue, "c", 1)
    queue.charge("b", 3)
    queue.charge("c", 6)
    assert queue.peek() is a  # the least served
    # Without a, V is b's counter: b is eligible, c (3 above it) is not.
    assert queue.peek_skipping({"a"}) is b
    assert queue.peek_skipping({"a", "b"}) is c
    assert queue.peek_skipping({"a", "b", "c"}) is None
    assert queue.peek() is a
    assert queue.remove(b)  # a caller takes what the skipping pick showed
    assert [queue.pop(), queue.pop()] == [a, c]
