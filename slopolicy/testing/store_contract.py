"""One contract test suite for every quota store (needs pytest and anyio's plugin).

Subclass :class:`QuotaStoreContract` in a test module and provide two
fixtures: ``clock``, a :class:`~slopolicy.testing.ManualClock`, and ``store``,
a :class:`~slopolicy.backends.QuotaStore` reading its time from that clock
(``MemoryQuotaStore(clock=clock)``, ``RedisQuotaStore(..., clock=clock)``).
Every test then runs against that store and must pass unchanged: same
grants, same refusals with the same reasons, waits and messages, same
bucket levels to the bit (costs, rates and times are binary fractions, so
the float arithmetic is exact and equality is fair to demand)::

    class TestMyStore(QuotaStoreContract):
        @pytest.fixture
        def clock(self) -> ManualClock:
            return ManualClock()

        @pytest.fixture
        async def store(self, clock):
            async with MyStore(clock=clock) as store:
                yield store
"""

from __future__ import annotations

import math

import pytest

from slopolicy.backends.base import Lease, QuotaStore, TenantSnapshot
from slopolicy.core.decisions import Reason
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.errors import UsageError
from slopolicy.testing.clock import ManualClock

__all__ = ("PRO", "UNLIMITED", "QuotaStoreContract", "granted", "refused")

#: 4 cost units/s, burst 16, 3 in flight; chat gets 3/4 of that, batch 1/4 and one slot.
PRO = TierSpec(
    "pro",
    "chat",
    rate=4.0,
    burst=16.0,
    max_concurrency=3,
    lane_quotas=(LaneQuotaSpec("chat", 0.75), LaneQuotaSpec("batch", 0.25, max_concurrency=1)),
)
#: No bucket; one chat request in flight at a time.
UNLIMITED = TierSpec("big", "chat", lane_quotas=(LaneQuotaSpec("chat", 0.5, max_concurrency=1),))


def granted(result: Lease | QuotaRefusal) -> Lease:
    """``result``, asserted to be a lease."""
    assert isinstance(result, Lease), result
    return result


def refused(result: Lease | QuotaRefusal) -> QuotaRefusal:
    """``result``, asserted to be a refusal."""
    assert isinstance(result, QuotaRefusal), result
    return result


def _state(snapshot: TenantSnapshot) -> tuple[object, ...]:
    """A snapshot without its time, to compare before and after."""
    return (
        snapshot.in_flight,
        dict(snapshot.lane_in_flight),
        snapshot.level,
        dict(snapshot.lane_levels),
    )


@pytest.mark.anyio
class QuotaStoreContract:
    """The quota semantics every store must keep (see the module docstring)."""

    async def test_a_request_takes_cost_and_slots_until_release(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "chat", 5.0))
        assert (lease.tenant, lease.lane, lease.cost, lease.released) == (
            "acme",
            "chat",
            5.0,
            False,
        )
        snap = await store.snapshot("acme", PRO)
        assert (snap.in_flight, dict(snap.lane_in_flight)) == (1, {"chat": 1})
        assert (snap.level, dict(snap.lane_levels)) == (11.0, {"chat": 7.0, "batch": 4.0})
        assert await store.release(lease) is True
        assert lease.released
        assert await store.release(lease) is False
        snap = await store.snapshot("acme", PRO)
        assert (snap.in_flight, dict(snap.lane_in_flight), snap.level) == (0, {}, 11.0)

    async def test_settle_refunds_or_charges_the_difference_with_debt_floored(
        self, store: QuotaStore
    ) -> None:
        lease = granted(await store.acquire("acme", PRO, "chat", 8.0))
        await store.settle(lease, 2.0)
        assert lease.cost == 2.0
        snap = await store.snapshot("acme", PRO)
        assert (snap.level, snap.lane_levels["chat"]) == (14.0, 10.0)
        await store.settle(lease, 30.0)  # over the estimate: debt, floored at -burst
        await store.settle(lease, 30.0)  # settling again reconciles against the last
        snap = await store.snapshot("acme", PRO)
        assert (snap.level, snap.lane_levels["chat"]) == (-14.0, -12.0)
        assert await store.release(lease)
        with pytest.raises(UsageError, match="released lease"):
            await store.settle(lease, 1.0)

    async def test_finish_settles_then_releases_in_one_step(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "chat", 8.0))
        assert await store.finish(lease, 2.0) is True
        assert (lease.cost, lease.released) == (2.0, True)
        assert lease.released_at is not None
        snap = await store.snapshot("acme", PRO)
        # As settle then release: 6 units refunded, the slots back.
        assert (snap.level, snap.lane_levels["chat"], snap.in_flight) == (14.0, 10.0, 0)
        with pytest.raises(UsageError, match="released lease"):
            await store.finish(lease, 2.0)
        snap = await store.snapshot("acme", PRO)
        assert (snap.level, snap.in_flight) == (14.0, 0)  # the refused call changed nothing

    async def test_rate_limited_with_the_exact_wait(
        self, store: QuotaStore, clock: ManualClock
    ) -> None:
        granted(await store.acquire("acme", PRO, "batch", 3.0))  # batch bucket: 1/s, burst 4
        refusal = refused(await store.acquire("acme", PRO, "other", 14.0))  # 13 left
        assert (refusal.reason, refusal.http_status, refusal.retry_after) == (
            Reason.RATE_LIMITED,
            429,
            0.25,
        )
        assert refusal.message == (
            "tenant 'acme' is over its quota of 4 cost units/s with a burst of 16: "
            "14 cost units requested, 13 available; retry in 0.25 s"
        )
        clock.advance(0.125)
        assert refused(await store.acquire("acme", PRO, "other", 14.0)).retry_after == 0.125
        clock.advance(0.125)
        granted(await store.acquire("acme", PRO, "other", 14.0))

    async def test_the_lane_bucket_binds_when_its_wait_is_longer(
        self, store: QuotaStore, clock: ManualClock
    ) -> None:
        await store.release(granted(await store.acquire("acme", PRO, "batch", 4.0)))
        refusal = refused(await store.acquire("acme", PRO, "batch", 2.0))
        assert (refusal.reason, refusal.retry_after) == (Reason.RATE_LIMITED, 2.0)
        assert "over its quota in lane 'batch' of 1 cost units/s with a burst of 4" in (
            refusal.message
        )
        clock.advance(2.0)
        granted(await store.acquire("acme", PRO, "batch", 2.0))

    async def test_concurrency_is_capped_per_tenant_and_per_lane(self, store: QuotaStore) -> None:
        held = granted(await store.acquire("acme", PRO, "batch", 1.0))
        refusal = refused(await store.acquire("acme", PRO, "batch", 1.0))
        assert (refusal.reason, refusal.retry_after, refusal.http_status) == (
            Reason.CONCURRENCY_LIMITED,
            None,
            429,
        )
        assert refusal.message == (
            "tenant 'acme' has 1 requests in flight in lane 'batch'; the lane's limit is 1"
        )
        granted(await store.acquire("acme", PRO, "chat", 1.0))
        granted(await store.acquire("acme", PRO, "chat", 1.0))
        refusal = refused(await store.acquire("acme", PRO, "chat", 1.0))
        assert refusal.message == "tenant 'acme' has 3 requests in flight; its limit is 3"
        await store.release(held)
        granted(await store.acquire("acme", PRO, "chat", 1.0))
        granted(await store.acquire("other", PRO, "batch", 1.0))  # tenants are independent

    async def test_a_cost_over_either_burst_is_refused_and_changes_nothing(
        self, store: QuotaStore
    ) -> None:
        before = _state(await store.snapshot("acme", PRO))
        refusal = refused(await store.acquire("acme", PRO, "chat", 17.0))
        assert (refusal.reason, refusal.retry_after, refusal.http_status) == (
            Reason.COST_OVER_BURST,
            None,
            429,
        )
        assert refusal.message == (
            "a cost of 17 cost units exceeds the burst of 16 cost units for tenant 'acme', "
            "so it can never be admitted"
        )
        refusal = refused(await store.acquire("acme", PRO, "batch", 5.0))
        assert "burst of 4 cost units for tenant 'acme' in lane 'batch'" in refusal.message
        assert _state(await store.snapshot("acme", PRO)) == before

    async def test_a_refusal_changes_nothing(self, store: QuotaStore) -> None:
        granted(await store.acquire("acme", PRO, "batch", 3.0))
        before = _state(await store.snapshot("acme", PRO))
        refused(await store.acquire("acme", PRO, "batch", 1.0))  # lane cap
        refused(await store.acquire("acme", PRO, "chat", 14.0))  # rate
        assert _state(await store.snapshot("acme", PRO)) == before

    async def test_an_unlimited_tier_has_no_bucket_but_keeps_caps(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", UNLIMITED, "chat", 1e12))
        snap = await store.snapshot("acme", UNLIMITED)
        assert (snap.level, dict(snap.lane_levels), snap.in_flight) == (None, {}, 1)
        refusal = refused(await store.acquire("acme", UNLIMITED, "chat", 0.0))
        assert refusal.reason is Reason.CONCURRENCY_LIMITED
        await store.settle(lease, 5.0)
        granted(await store.acquire("acme", UNLIMITED, "other", 1e12))

    async def test_a_zero_cost_is_granted_even_in_debt(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "other", 12.0))
        await store.settle(lease, 40.0)  # 4 - 28: floored at -16
        await store.release(lease)
        assert refused(await store.acquire("acme", PRO, "other", 0.25)).retry_after == 4.0625
        granted(await store.acquire("acme", PRO, "other", 0.0))

    async def test_buckets_refill_at_the_rate_up_to_the_burst(
        self, store: QuotaStore, clock: ManualClock
    ) -> None:
        await store.release(granted(await store.acquire("acme", PRO, "chat", 12.0)))
        clock.advance(1.5)
        snap = await store.snapshot("acme", PRO)
        assert (snap.level, snap.lane_levels["chat"]) == (10.0, 4.5)
        clock.advance(100.0)
        snap = await store.snapshot("acme", PRO)
        assert (snap.level, snap.lane_levels["chat"]) == (16.0, 12.0)

    async def test_a_tier_change_carries_the_levels_over(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "chat", 10.0))
        smaller = TierSpec(
            "small", "chat", rate=1.0, burst=4.0, lane_quotas=(LaneQuotaSpec("chat"),)
        )
        refused(await store.acquire("acme", smaller, "chat", 4.0))  # the lane has 2
        snap = await store.snapshot("acme", smaller)
        assert (snap.level, dict(snap.lane_levels), snap.in_flight) == (4.0, {"chat": 2.0}, 1)
        await store.settle(lease, 0.0)  # settles on the buckets the tenant has now
        assert await store.release(lease)
        snap = await store.snapshot("acme", smaller)
        assert (snap.level, dict(snap.lane_levels), snap.in_flight) == (4.0, {"chat": 4.0}, 0)

    async def test_bad_costs_and_foreign_leases_are_usage_errors(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "chat", 1.0))
        before = _state(await store.snapshot("acme", PRO))
        for cost in (-1.0, math.nan, math.inf, 10**400, "1", None, True):
            with pytest.raises(UsageError, match="cost units"):
                await store.acquire("acme", PRO, "chat", cost)  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="cost units"):
                await store.settle(lease, cost)  # type: ignore[arg-type]
        for tenant, tier, lane in ((7, PRO, "chat"), ("acme", PRO, None), ("acme", "pro", "chat")):
            with pytest.raises(UsageError, match="must be"):
                await store.acquire(tenant, tier, lane, 1.0)  # type: ignore[arg-type]
        foreign = Lease(object(), "x", "acme", "chat", 1.0, 0.0)
        with pytest.raises(UsageError, match="did not grant"):
            await store.settle(foreign, 1.0)
        with pytest.raises(UsageError, match="did not grant"):
            await store.release(foreign)
        with pytest.raises(UsageError, match="tier 'x'"):
            await store.acquire("acme", TierSpec("x", "chat", rate=1.0), "chat", 1.0)
        assert _state(await store.snapshot("acme", PRO)) == before
        assert not lease.released

    async def test_finish_with_a_bad_cost_still_gives_the_slots_back(
        self, store: QuotaStore
    ) -> None:
        """A bad number must not skip a release: the slots go back, the charge
        stays the estimate, and the bad cost is a UsageError."""
        lease = granted(await store.acquire("acme", PRO, "chat", 2.0))
        with pytest.raises(UsageError, match="cost units"):
            await store.finish(lease, math.nan)
        assert lease.released
        assert lease.cost == 2.0
        assert (await store.snapshot("acme", PRO)).in_flight == 0

    async def test_tenant_and_lane_ids_are_kept_apart(self, store: QuotaStore) -> None:
        odd = ["a}b", "a:b", "a%7Db", "{a}", "", "é 租户", "a", "a:bucket"]
        leases = [granted(await store.acquire(tenant, PRO, "batch", 3.0)) for tenant in odd]
        for tenant in odd:
            snap = await store.snapshot(tenant, PRO)
            assert (snap.in_flight, snap.level, snap.lane_levels["batch"]) == (1, 13.0, 1.0)
        granted(await store.acquire("a", PRO, "chat:x", 1.0))
        granted(await store.acquire("a", PRO, "chat}", 1.0))
        snap = await store.snapshot("a", PRO)
        assert dict(snap.lane_in_flight) == {"batch": 1, "chat:x": 1, "chat}": 1}
        for lease in leases:
            assert await store.release(lease)

    async def test_statistics_count_admissions_refusals_and_leases(self, store: QuotaStore) -> None:
        lease = granted(await store.acquire("acme", PRO, "batch", 1.0))
        refused(await store.acquire("acme", PRO, "batch", 1.0))
        refused(await store.acquire("acme", PRO, "chat", 100.0))
        stats = store.statistics()
        assert (stats.admitted, stats.in_flight, stats.degraded) == (1, 1, False)
        assert stats.refusals[Reason.CONCURRENCY_LIMITED] == 1
        assert stats.refusals[Reason.COST_OVER_BURST] == 1
        await store.release(lease)
        assert store.statistics().in_flight == 0

    async def test_leases_carry_ids_and_times_on_the_store_clock(
        self, store: QuotaStore, clock: ManualClock
    ) -> None:
        clock.advance(2.5)
        first = granted(await store.acquire("acme", PRO, "chat", 1.0))
        second = granted(await store.acquire("acme", PRO, "chat", 1.0))
        assert first.id != second.id
        assert first.acquired_at == clock.now()
        assert first.released_at is None
        clock.advance(0.5)
        await store.release(first)
        assert first.released_at == clock.now()
