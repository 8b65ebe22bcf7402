"""``Gate(policy, quota_store=...)``: quota taken in the store, given back exactly once.

On asyncio and trio, virtual time, with the in-memory store (and a slow one
that suspends in ``acquire`` the way a network store does).
"""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Gate, GateClosed, Outcome, Reason, Rejected, UsageError
from slopolicy.backends import Lease, MemoryQuotaStore, QuotaStore
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.specs import TierSpec
from slopolicy.runtime.store_quota import StoreQuota
from tests.runtime.conftest import assert_clean, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


class SlowStore(MemoryQuotaStore):
    """A memory store whose acquire takes ``delay`` seconds, like a round trip."""

    def __init__(self, delay: float = 1.0) -> None:
        super().__init__()
        self.delay = delay

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float
    ) -> Lease | QuotaRefusal:
        await anyio.sleep(self.delay)
        return await super().acquire(tenant, tier, lane, cost)


async def _settled(store: QuotaStore) -> None:
    """Let the gate's settle-and-release tasks run."""
    await anyio.wait_all_tasks_blocked()


def _tier(store: MemoryQuotaStore, tenant: str) -> TierSpec:
    return store.quotas._tenants[tenant].plan.tier


async def test_the_store_takes_the_quota_and_gets_it_back_settled() -> None:
    p, store = policy(), MemoryQuotaStore()
    async with Gate(p, quota_store=store) as gate:
        async with gate.admit(_request("a", "small", prompt_tokens=100)) as ticket:
            assert store.statistics().in_flight == 1
            tier = _tier(store, "small")
            held = await store.snapshot("small", tier)
            assert held.in_flight == 1
            assert held.level is not None
            assert held.level < 300.0
            ticket.tokens(5)
        await _settled(store)
        assert ticket.finished is not None
        after = await store.snapshot("small", tier)
        assert after.in_flight == 0
        assert after.level == 300.0 - ticket.finished.cost  # settled to the actual cost
    assert p.statistics().quotas.admitted == 0  # the policy's own table was not used
    assert store.statistics().in_flight == 0
    assert_clean(p)


async def test_a_store_refusal_is_raised_and_counted() -> None:
    p, store = policy(), MemoryQuotaStore()
    async with Gate(p, quota_store=store) as gate:
        async with gate.admit(_request("a", "small")):  # tier "tiny": one at a time
            with pytest.raises(Rejected) as caught:
                await gate.admit(_request("b", "small"))
            assert (caught.value.reason, caught.value.http_status) == (
                Reason.CONCURRENCY_LIMITED,
                429,
            )
        await _settled(store)
        with pytest.raises(Rejected) as caught:
            await gate.admit(_request("c", "small", prompt_tokens=400))  # over the burst
        assert caught.value.reason is Reason.COST_OVER_BURST
    assert store.statistics().in_flight == 0
    assert p.statistics().outcomes[Outcome.REJECTED] == 2
    assert_clean(p)


async def test_every_way_a_request_ends_gives_the_lease_back() -> None:
    p = policy(lanes=[{"name": "interactive", "queue_capacity": 2, "max_queue_wait_s": 5.0}])
    store = MemoryQuotaStore()
    outcomes: list[str] = []

    async def admit(name: str) -> None:
        try:
            await gate.admit(_request(name))
        except Rejected as error:
            outcomes.append(f"{name}: {error.reason.code}")

    async with Gate(p, quota_store=store) as gate:
        running = [await gate.admit(_request(f"r{k}")) for k in range(2)]  # engine full
        async with anyio.create_task_group() as group:
            group.start_soon(admit, "expires")
            await anyio.wait_all_tasks_blocked()
            async with anyio.create_task_group() as inner:
                inner.start_soon(admit, "cancelled")
                await anyio.wait_all_tasks_blocked()
                await admit("full")  # the queue is full: granted, then given back
                await _settled(store)
                assert store.statistics().in_flight == 4
                inner.cancel_scope.cancel()  # cancelled while queued
            await anyio.sleep(10)  # the waiter expires
        assert outcomes == ["full: queue_full", "expires: expired"]
        for ticket in running:
            ticket.finish(output_tokens=3)
        await _settled(store)
        assert store.statistics().in_flight == 0
        assert store.statistics().admitted == 5
        snap = await store.snapshot("t", _tier(store, "t"))
        assert snap.in_flight == 0
    assert_clean(p)


async def test_a_waiter_pushed_out_of_a_full_queue_gives_its_lease_back() -> None:
    p = policy(lanes=[{"name": "interactive", "queue_capacity": 2, "max_queue_wait_s": 5.0}])
    store = MemoryQuotaStore()
    refused: list[str] = []

    async def admit(name: str, tenant: str) -> None:
        try:
            with await gate.admit(_request(name, tenant)):
                pass
        except Rejected as error:
            refused.append(f"{name}: {error.code}")

    async with Gate(p, quota_store=store) as gate:
        running = [await gate.admit(_request(f"r{k}")) for k in range(2)]  # engine full
        async with anyio.create_task_group() as group:
            for name in ("f0", "f1"):  # in order (trio shuffles a batch)
                group.start_soon(admit, name, "flood")
                await anyio.wait_all_tasks_blocked()
            group.start_soon(admit, "b", "other")
            await anyio.wait_all_tasks_blocked()
            assert refused == ["f1: queue_full"]
            assert store.statistics().in_flight == 4  # r0, r1, f0, b: f1's went back
            for ticket in running:
                ticket.finish(output_tokens=3)
        await _settled(store)
        assert store.statistics().in_flight == 0
    assert_clean(p)


async def test_closing_the_gate_gives_back_waiters_and_late_tickets_leases() -> None:
    p, store = policy(), MemoryQuotaStore()
    closed: list[Rejected] = []

    async def wait(name: str) -> None:
        try:
            await gate.admit(_request(name))
        except GateClosed as error:
            closed.append(error)

    async with anyio.create_task_group() as group, Gate(p, quota_store=store) as gate:
        held = [await gate.admit(_request(f"r{k}")) for k in range(2)]
        for k in range(3):
            group.start_soon(wait, f"w{k}")
        await anyio.wait_all_tasks_blocked()
        assert store.statistics().in_flight == 5
    assert len(closed) == 3
    assert store.statistics().in_flight == 2
    for ticket in held:  # tickets outlive the gate, and their leases still come back
        ticket.finish()
    assert store.statistics().in_flight == 0
    assert_clean(p)


async def test_cancelled_during_the_round_trip_holds_nothing() -> None:
    p, store = policy(), SlowStore(delay=1.0)
    async with Gate(p, quota_store=store) as gate:
        with anyio.move_on_after(0.5):
            await gate.admit(_request("a"))
        assert store.statistics().in_flight == 0
        async with gate.admit(_request("a")):  # the id is free again
            pass
        await _settled(store)
    stats = p.statistics()
    assert stats.outcomes[Outcome.CANCELLED] == 1
    assert store.statistics().in_flight == 0
    assert_clean(p)


async def test_the_gate_closing_during_the_round_trip_gives_the_lease_back() -> None:
    p, store = policy(), SlowStore(delay=1.0)
    async with Gate(p, quota_store=store) as gate, anyio.create_task_group() as group:

        async def admit() -> None:
            with pytest.raises(GateClosed):
                await gate.admit(_request("a"))

        group.start_soon(admit)
        await anyio.sleep(0.5)
        gate._state = "closed"  # what __aexit__ does first
        await anyio.sleep(1.0)
        gate._state = "open"
    assert store.statistics().in_flight == 0
    assert_clean(p)


async def test_a_duplicate_id_during_the_round_trip_is_a_usage_error() -> None:
    p, store = policy(), SlowStore(delay=1.0)

    async def first() -> None:
        async with gate.admit(_request("a")):
            pass

    async with Gate(p, quota_store=store) as gate, anyio.create_task_group() as group:
        group.start_soon(first)
        await anyio.sleep(0.5)
        with pytest.raises(UsageError, match="already live"):
            await gate.admit(_request("a"))
    assert store.statistics().in_flight == 0


async def test_admit_nowait_needs_the_round_trip() -> None:
    async with Gate(policy(), quota_store=MemoryQuotaStore()) as gate:
        with pytest.raises(UsageError, match="quota store"):
            gate.admit_nowait(_request("a"))


async def test_the_store_strategy_needs_no_gate() -> None:
    # A strategy hands decisions back; the lease lives from grant to end.
    p, store = policy(), MemoryQuotaStore()
    clock = anyio.current_time
    busy = policy()
    busy.submit(_request("x"), now=clock())
    with pytest.raises(UsageError, match="before any request is live"):
        StoreQuota(busy, store)
    quota = StoreQuota(p, store)
    assert p.quota_delegated
    async with anyio.create_task_group() as group:
        await group.start(quota.run)
        decision = await quota.admit(_request("a", "small"), clock, lambda: True)
        assert decision.accepted
        assert p.phase("a") == "queued"
        assert store.statistics().in_flight == 1
        with pytest.raises(GateClosed):  # closed during the round trip: withdrawn, given back
            await quota.admit(_request("b"), clock, lambda: False)
        assert p.phase("b") is None
        await anyio.wait_all_tasks_blocked()
        assert store.statistics().in_flight == 1
        quota.ended(p.cancel("a", now=clock()))
        await anyio.wait_all_tasks_blocked()
        assert store.statistics().in_flight == 0
        assert p.statistics().quotas.in_flight == 0  # the policy took none itself
        group.cancel_scope.cancel()
