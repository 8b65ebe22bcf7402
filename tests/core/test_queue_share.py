"""A full lane queue is shared fairly (DESIGN.md invariant 9): an arrival of a
tenant with fewer waiting per unit weight pushes out the newest request of the
tenant with the most, which ends once, refused ``queue_full``."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import Outcome, Policy, PolicyConfig, Reason, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Admit, Defer, Demote
from slopolicy.core.queueing import backlog
from slopolicy.core.queueing.fairqueue import FairQueue
from tests.core.jobs import Job


def _policy(capacity: int, weights: dict[str, float], **lane: Any) -> Policy:
    """One lane of ``capacity``, one engine seat taken by a request that never
    ends (so nothing leaves the queue), tenants by weight, no rate or
    concurrency caps (a tier without ``max_concurrency`` is the flood's way in)."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "queue_capacity": capacity, "max_queue_wait_s": 100.0, **lane}
            ],
            "tiers": {"default": {}, **{f"w{t}": {"weight": w} for t, w in weights.items()}},
            "tenants": {t: f"w{t}" for t in weights},
            "engine": {"max_running": 1},
            "ladder": {"enabled": False},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    policy.submit(_request("engine", "holder"), now=0.0)
    assert [s.id for s in policy.dispatch(now=0.0)] == ["engine"]
    return policy


def _request(request_id: str, tenant: str, **fields: Any) -> Request:
    return Request(id=request_id, tenant=tenant, prompt_tokens=10, max_new_tokens=5, **fields)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 12),
    weights=st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, 4.0]), min_size=2, max_size=5),
    data=st.data(),
)
def test_a_flood_cannot_lower_another_tenants_share_of_a_full_queue(
    capacity: int, weights: list[float], data: st.DataObject
) -> None:
    """Whatever the order of arrivals, and however many the flooding tenant
    ``t0`` sends: every tenant keeps at least ``min(demand, floor(C * w / W))``
    of the ``C`` slots, and the queue ends weighted max-min fair (a tenant
    short of its demand holds a place no earlier than anyone's latest)."""
    weight = {f"t{k}": w for k, w in enumerate(weights)}
    policy = _policy(capacity, weight)
    others = data.draw(st.lists(st.sampled_from(sorted(weight)), max_size=40))
    flood = data.draw(st.integers(0, 60))
    arrivals = list(others)
    for _ in range(flood):  # the flood comes in anywhere among the others
        arrivals.insert(data.draw(st.integers(0, len(arrivals))), "t0")
    demand = dict.fromkeys(weight, 0)
    queued: dict[str, list[str]] = {t: [] for t in weight}
    for k, tenant in enumerate(arrivals):
        demand[tenant] += 1
        decision = policy.submit(_request(f"r{k}", tenant), now=0.0)
        if isinstance(decision, Defer):
            assert decision.reason is Reason.QUEUE_FULL
            continue
        assert isinstance(decision, Admit | Demote)
        queued[tenant].append(f"r{k}")
        pushed = decision.displaced
        if pushed is not None:
            victim = pushed.finished
            assert victim.tenant != tenant
            assert queued[victim.tenant][-1] == victim.id  # its newest
            queued[victim.tenant].pop()
            assert victim.outcome is Outcome.REJECTED
            assert policy.phase(victim.id) is None
    held = {t: len(ids) for t, ids in queued.items()}
    assert sum(held.values()) == min(capacity, len(arrivals))
    assert policy.statistics().queued == {"chat": sum(held.values())}
    total = sum(weight[t] for t in weight if demand[t])
    for tenant, count in held.items():
        if demand[tenant]:
            assert count >= min(demand[tenant], math.floor(capacity * weight[tenant] / total))
        if count < demand[tenant]:
            for other, theirs in held.items():
                assert theirs / weight[other] <= (count + 1) / weight[tenant], (tenant, other)
    stats = policy.statistics()
    assert stats.outcomes[Outcome.REJECTED] == len(arrivals) - sum(held.values())
    assert stats.quotas.in_flight == sum(held.values()) + 1  # and the engine's one


def test_the_displaced_request_ends_refused_and_gives_everything_back() -> None:
    policy = _policy(3, {"flood": 1.0, "b": 1.0})
    for k in range(3):
        policy.submit(_request(f"f{k}", "flood"), now=1.0)
    refused = policy.submit(_request("f3", "flood"), now=1.0)  # its own share is all it gets
    assert isinstance(refused, Defer)
    assert refused.reason is Reason.QUEUE_FULL
    assert "already has its share" in refused.message
    decision = policy.submit(_request("b0", "b"), now=2.0)
    assert isinstance(decision, Admit)
    assert decision.displaced is not None
    finished, refusal = decision.displaced.finished, decision.displaced.refusal
    assert (finished.id, finished.tenant, finished.outcome) == ("f2", "flood", Outcome.REJECTED)
    assert (finished.arrival, finished.finished_at, finished.queue_wait) == (1.0, 2.0, None)
    assert finished.cost == 0.0
    assert (refusal.reason, refusal.http_status, refusal.retry_after) == (
        Reason.QUEUE_FULL,
        503,
        100.0,
    )
    assert refusal.lane == "chat"
    assert "pushed out" in refusal.explain()
    assert policy.phase("f2") is None
    with pytest.raises(Exception, match="not live"):
        policy.cancel("f2", now=2.0)
    stats = policy.statistics()
    assert stats.queued == {"chat": 3}
    assert stats.outcomes[Outcome.REJECTED] == 2
    assert stats.quotas.in_flight == 4  # f0, f1, b0 and the engine's
    snapshot = policy.slo_trackers.lane("chat").snapshot(now=2.0)
    assert snapshot.rejected == 2


def test_the_deadline_index_drops_the_displaced_request() -> None:
    """The displaced request had the earliest deadline (its own): the next
    deadline and the lane's oldest wait move on to the requests still queued."""
    policy = _policy(2, {"flood": 1.0, "b": 1.0})
    policy.submit(_request("f0", "flood"), now=0.0)
    policy.submit(_request("f1", "flood", deadline=5.0), now=1.0)
    assert policy.next_deadline() == 5.0
    decision = policy.submit(_request("b0", "b"), now=2.0)
    assert isinstance(decision, Admit)
    assert decision.displaced is not None
    assert decision.displaced.finished.id == "f1"
    assert policy.next_deadline() == 100.0  # f0's: arrival 0 + the lane's wait
    assert not policy.dispatch(now=10.0).expired  # f1's deadline passes: nothing to expire
    assert policy._deadlines.oldest("chat") is policy._entries["f0"]


def test_weights_set_the_shares_of_a_full_queue() -> None:
    """A tenant of weight 3 keeps three slots for the light tenant's one."""
    policy = _policy(8, {"heavy": 3.0, "light": 1.0})
    for k in range(8):
        policy.submit(_request(f"l{k}", "light"), now=0.0)
    for k in range(10):
        policy.submit(_request(f"h{k}", "heavy"), now=0.0)
    assert {
        t: r.live for t, r in policy._queues._lane("chat").queue._tenants.items() if r.live
    } == {
        "heavy": 6,
        "light": 2,
    }


def test_a_tenant_listed_when_the_queue_last_filled_is_listed_again() -> None:
    """Found in review: the places heap is dropped when the queue empties; a
    tenant listed in the old one must not count as listed in the next, or its
    growth goes unseen and a lighter tenant is pushed out instead of it."""
    queue: FairQueue[Job] = FairQueue(3)
    light = [Job("x") for _ in range(3)]
    for job in light:
        queue.push(job, "x", 0.1)
    assert queue.displaced("w", 1.0) is light[-1]  # builds the heap: x at place 30
    for _ in range(3):
        queue.pop()  # empty: the heap goes
    for _ in range(3):
        queue.push(Job("y"), "y", 1.0)
    assert queue.displaced("z", 1.0) is not None  # a new heap, without x
    queue.pop()  # room: x joins without displacing anyone
    x = Job("x")
    assert queue.push(x, "x", 0.1)  # one waiting at weight 0.1: place 10, the latest
    assert queue.displaced("w", 1.0) is x


def test_a_heap_rebuild_unlists_the_tenants_it_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: a rebuild of the places heap drops the entries of
    tenants with nothing waiting; such a tenant must count as unlisted, or
    when it comes back its place goes unseen."""
    monkeypatch.setattr(backlog, "_SLACK", 0)  # rebuild as soon as anything is stale
    queue: FairQueue[Job] = FairQueue(3)
    x = Job("x")
    queue.push(x, "x", 0.1)
    queue.push(Job("y"), "y", 1.0)
    queue.push(Job("y"), "y", 1.0)
    assert queue.displaced("w", 1.0) is x  # builds the heap: x at place 10, y at 2
    assert queue.pop() is x  # x has nothing waiting; its entry stays listed
    queue.push(Job("y"), "y", 1.0)  # y grows: the rebuild drops x's entry
    queue.pop()
    back = Job("x")
    assert queue.push(back, "x", 0.1)  # x again at place 10, the latest
    assert queue.displaced("w", 1.0) is back
