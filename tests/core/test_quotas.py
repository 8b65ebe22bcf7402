from __future__ import annotations

import math
import tracemalloc
from dataclasses import FrozenInstanceError

import pytest

from slopolicy.core.decisions import Reason
from slopolicy.core.quota.lease import Lease
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.errors import UsageError

PRO = TierSpec(
    "pro",
    "chat",
    rate=4.0,
    burst=16.0,
    max_concurrency=3,
    lane_quotas=(LaneQuotaSpec("chat", 0.75), LaneQuotaSpec("batch", 0.25, max_concurrency=1)),
)
UNLIMITED = TierSpec("unlimited", "chat")


def _lease(result: Lease | QuotaRefusal) -> Lease:
    assert isinstance(result, Lease), result
    return result


def _refusal(result: Lease | QuotaRefusal) -> QuotaRefusal:
    assert isinstance(result, QuotaRefusal), result
    return result


def test_a_request_takes_cost_and_slots_until_release() -> None:
    quotas = TenantQuotas()
    lease = _lease(quotas.acquire("acme", PRO, "chat", 5.0, now=0.0))
    assert (lease.tenant, lease.lane, lease.cost, lease.released) == ("acme", "chat", 5.0, False)
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert stats.tier == "pro"
    assert stats.in_flight == 1
    assert dict(stats.lane_in_flight) == {"chat": 1}
    assert stats.bucket is not None
    assert stats.bucket.level == 11.0
    assert stats.lane_buckets["chat"].level == 12.0 - 5.0
    assert stats.lane_buckets["batch"].level == 4.0  # untouched: full
    assert quotas.release(lease, now=1.0) is True
    assert lease.released
    assert quotas.release(lease, now=2.0) is False
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert stats.in_flight == 0
    assert dict(stats.lane_in_flight) == {}
    assert stats.bucket is not None
    assert stats.bucket.level == 11.0  # release does not refund


def test_settle_refunds_or_charges_the_difference_on_the_same_buckets() -> None:
    quotas = TenantQuotas()
    lease = _lease(quotas.acquire("acme", PRO, "chat", 8.0, now=0.0))
    quotas.settle(lease, 2.0, now=0.0)
    assert lease.cost == 2.0
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert stats.bucket is not None
    assert (stats.bucket.level, stats.lane_buckets["chat"].level) == (14.0, 10.0)
    quotas.settle(lease, 30.0, now=0.0)  # over the estimate: debt, floored at -burst
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert stats.bucket is not None
    assert stats.bucket.level == -14.0
    assert stats.lane_buckets["chat"].level == -12.0
    assert stats.lane_buckets["chat"].forgiven == 6.0
    assert quotas.release(lease, now=0.0)


def test_rate_limited_with_the_exact_wait_for_both_buckets() -> None:
    quotas = TenantQuotas()
    _lease(quotas.acquire("acme", PRO, "batch", 3.0, now=0.0))  # batch bucket: 1/s, burst 4
    refusal = _refusal(quotas.acquire("acme", PRO, "other", 14.0, now=0.0))  # 13 left
    assert refusal.reason is Reason.RATE_LIMITED
    assert refusal.http_status == 429
    assert refusal.retry_after == 0.25
    assert refusal.message == (
        "tenant 'acme' is over its quota of 4 cost units/s with a burst of 16: "
        "14 cost units requested, 13 available; retry in 0.25 s"
    )
    _lease(quotas.acquire("acme", PRO, "other", 14.0, now=0.25))


def test_the_lane_bucket_binds_when_its_wait_is_longer() -> None:
    quotas = TenantQuotas()
    first = _lease(quotas.acquire("acme", PRO, "batch", 4.0, now=0.0))
    quotas.release(first, now=0.0)
    refusal = _refusal(quotas.acquire("acme", PRO, "batch", 2.0, now=0.0))
    assert refusal.reason is Reason.RATE_LIMITED
    assert refusal.retry_after == 2.0
    assert "over its quota in lane 'batch' of 1 cost units/s with a burst of 4" in refusal.message
    _lease(quotas.acquire("acme", PRO, "batch", 2.0, now=2.0))


def test_concurrency_is_capped_per_tenant_and_per_lane() -> None:
    quotas = TenantQuotas()
    _lease(quotas.acquire("acme", PRO, "batch", 1.0, now=0.0))
    refusal = _refusal(quotas.acquire("acme", PRO, "batch", 1.0, now=0.0))
    assert refusal.reason is Reason.CONCURRENCY_LIMITED
    assert refusal.retry_after is None
    assert "1 requests in flight in lane 'batch'" in refusal.message
    _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=0.0))
    _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=0.0))
    refusal = _refusal(quotas.acquire("acme", PRO, "chat", 1.0, now=0.0))
    assert refusal.reason is Reason.CONCURRENCY_LIMITED
    assert "has 3 requests in flight; its limit is 3" in refusal.message


def test_a_cost_over_either_burst_can_never_be_admitted() -> None:
    quotas = TenantQuotas()
    refusal = _refusal(quotas.acquire("acme", PRO, "chat", 17.0, now=0.0))
    assert refusal.reason is Reason.COST_OVER_BURST
    assert (refusal.retry_after, refusal.http_status) == (None, 429)
    assert refusal.message == (
        "a cost of 17 cost units exceeds the burst of 16 cost units for tenant 'acme', "
        "so it can never be admitted"
    )
    refusal = _refusal(quotas.acquire("acme", PRO, "batch", 5.0, now=0.0))
    assert "burst of 4 cost units for tenant 'acme' in lane 'batch'" in refusal.message
    assert quotas.tenant("acme", now=0.0) is None  # a refusal creates no state


def test_an_unlimited_tier_has_no_bucket_but_keeps_caps() -> None:
    quotas = TenantQuotas()
    tier = TierSpec("big", "chat", lane_quotas=(LaneQuotaSpec("chat", 0.5, max_concurrency=1),))
    lease = _lease(quotas.acquire("acme", tier, "chat", 1e12, now=0.0))
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert (stats.bucket, dict(stats.lane_buckets)) == (None, {})
    assert _refusal(quotas.acquire("acme", tier, "chat", 0.0, now=0.0)).reason is (
        Reason.CONCURRENCY_LIMITED
    )
    quotas.settle(lease, 5.0, now=0.0)
    _lease(quotas.acquire("acme", tier, "other", 1e12, now=0.0))


def test_eviction_takes_the_least_recently_used_idle_tenant() -> None:
    quotas = TenantQuotas(max_tenants=3)
    held = _lease(quotas.acquire("a", PRO, "other", 16.0, now=0.0))
    for tenant in ("b", "c"):
        quotas.release(_lease(quotas.acquire(tenant, PRO, "other", 16.0, now=0.0)), now=0.0)
    _refusal(quotas.acquire("b", PRO, "other", 1.0, now=0.0))  # a refusal is use: b is now recent
    quotas.release(_lease(quotas.acquire("d", PRO, "other", 1.0, now=0.0)), now=0.0)
    assert quotas.tenant("c", now=0.0) is None  # c: idle and least recent; a: holds a lease
    assert quotas.tenant("a", now=0.0) is not None
    assert quotas.tenant("b", now=0.0) is not None
    assert quotas.statistics().evictions == 1
    # An evicted tenant comes back with a full bucket: one burst of extra credit.
    assert _lease(quotas.acquire("c", PRO, "other", 12.0, now=0.0)).cost == 12.0
    assert quotas.tenant("a", now=0.0) is not None
    quotas.release(held, now=0.0)


def test_a_full_table_of_leaseholders_refuses_newcomers_with_503() -> None:
    quotas = TenantQuotas(max_tenants=2)
    leases = [_lease(quotas.acquire(t, PRO, "chat", 1.0, now=0.0)) for t in ("a", "b")]
    refusal = _refusal(quotas.acquire("c", PRO, "chat", 1.0, now=0.0))
    assert refusal.reason is Reason.TENANT_TABLE_FULL
    assert (refusal.http_status, refusal.retry_after) == (503, None)
    assert "all 2 tracked tenants hold leases" in refusal.message
    _lease(quotas.acquire("a", PRO, "chat", 1.0, now=0.0))  # tracked tenants still get in
    quotas.release(leases[1], now=0.0)
    _lease(quotas.acquire("c", PRO, "chat", 1.0, now=0.0))
    assert quotas.tenant("b", now=0.0) is None
    stats = quotas.statistics()
    assert (stats.tenants, stats.evictions, stats.in_flight, stats.admitted) == (2, 1, 3, 4)
    assert stats.refusals[Reason.TENANT_TABLE_FULL] == 1


def test_a_tier_change_carries_the_levels_over() -> None:
    quotas = TenantQuotas()
    lease = _lease(quotas.acquire("acme", PRO, "chat", 10.0, now=0.0))
    smaller = TierSpec("small", "chat", rate=1.0, burst=4.0, lane_quotas=(LaneQuotaSpec("chat"),))
    _refusal(quotas.acquire("acme", smaller, "chat", 4.0, now=0.0))
    stats = quotas.tenant("acme", now=0.0)
    assert stats is not None
    assert stats.tier == "small"
    assert stats.bucket is not None
    assert (stats.bucket.level, stats.lane_buckets["chat"].level) == (4.0, 2.0)
    assert stats.in_flight == 1
    quotas.settle(lease, 0.0, now=0.0)  # settles on the buckets the tenant has now
    assert quotas.release(lease, now=0.0)
    equal = TierSpec("small", "chat", rate=1.0, burst=4.0, lane_quotas=(LaneQuotaSpec("chat"),))
    _lease(quotas.acquire("acme", equal, "chat", 4.0, now=0.0))


def test_statistics_are_frozen_snapshots() -> None:
    quotas = TenantQuotas()
    stats = quotas.statistics()
    tenant_stats = quotas.tenant("acme", now=0.0)
    _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=0.0))
    assert stats.admitted == 0
    assert tenant_stats is None
    with pytest.raises(FrozenInstanceError):
        stats.tenants = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        stats.refusals[Reason.RATE_LIMITED] = 1  # type: ignore[index]


def _snapshot(quotas: TenantQuotas, tenants: tuple[str, ...]) -> object:
    return (quotas.statistics(), [quotas.tenant(t, now=0.0) for t in tenants])


@pytest.mark.parametrize(
    ("cost", "now"),
    [
        (-1.0, math.nan),
        (math.nan, math.inf),
        (math.inf, -math.inf),
        (10**400, 10**400),
        (-(10**400), 1.7e18),
    ],
)
def test_a_bad_cost_or_now_is_a_usage_error_and_changes_nothing(cost: float, now: float) -> None:
    quotas = TenantQuotas()
    lease = _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=0.0))
    before = _snapshot(quotas, ("acme",))
    with pytest.raises(UsageError, match="cost units"):
        quotas.acquire("acme", PRO, "chat", cost, now=0.0)
    with pytest.raises(UsageError, match="cost units"):
        quotas.settle(lease, cost, now=0.0)
    with pytest.raises(UsageError, match="monotonic seconds"):
        quotas.acquire("acme", PRO, "chat", 1.0, now=now)
    with pytest.raises(UsageError, match="monotonic seconds"):
        quotas.settle(lease, 1.0, now=now)
    with pytest.raises(UsageError, match="monotonic seconds"):
        quotas.release(lease, now=now)
    with pytest.raises(UsageError, match="monotonic seconds"):
        quotas.tenant("acme", now=now)
    assert _snapshot(quotas, ("acme",)) == before
    assert not lease.released


def test_misused_leases_are_usage_errors_and_change_nothing() -> None:
    quotas, other = TenantQuotas(), TenantQuotas()
    lease = _lease(quotas.acquire("acme", PRO, "chat", 4.0, now=0.0))
    foreign = _lease(other.acquire("acme", PRO, "chat", 4.0, now=0.0))
    before = _snapshot(quotas, ("acme",))
    with pytest.raises(UsageError, match="did not grant"):
        quotas.settle(foreign, 1.0, now=0.0)
    with pytest.raises(UsageError, match="did not grant"):
        quotas.release(foreign, now=0.0)
    with pytest.raises(UsageError, match="did not grant"):
        quotas.release("acme", now=0.0)  # type: ignore[arg-type]
    assert _snapshot(quotas, ("acme",)) == before
    assert quotas.release(lease, now=0.0)
    before = _snapshot(quotas, ("acme",))
    with pytest.raises(UsageError, match="released lease"):
        quotas.settle(lease, 1.0, now=0.0)
    assert _snapshot(quotas, ("acme",)) == before
    assert not foreign.released


def test_a_released_lease_of_an_evicted_tenant_is_still_handled() -> None:
    quotas = TenantQuotas(max_tenants=1)
    lease = _lease(quotas.acquire("a", PRO, "chat", 1.0, now=0.0))
    quotas.release(lease, now=0.0)
    _lease(quotas.acquire("b", PRO, "chat", 1.0, now=0.0))
    assert quotas.release(lease, now=0.0) is False
    with pytest.raises(UsageError, match="released lease"):
        quotas.settle(lease, 1.0, now=0.0)


@pytest.mark.parametrize(
    "tier",
    [
        TierSpec("x", "chat", rate=1.0),
        TierSpec("x", "chat", rate=-1.0, burst=1.0),
        TierSpec("x", "chat", rate=1.0, burst=math.inf),
        TierSpec("x", "chat", max_concurrency=0),
        TierSpec("x", "chat", lane_quotas=(LaneQuotaSpec("chat", 0.0),)),
        TierSpec("x", "chat", lane_quotas=(LaneQuotaSpec("chat", 1.5),)),
        TierSpec("x", "chat", lane_quotas=(LaneQuotaSpec("chat", 1.0, max_concurrency=0),)),
        TierSpec("x", "chat", lane_quotas=(LaneQuotaSpec("chat"), LaneQuotaSpec("chat"))),
    ],
)
def test_an_impossible_tier_is_a_usage_error(tier: TierSpec) -> None:
    quotas = TenantQuotas()
    with pytest.raises(UsageError, match="tier 'x'"):
        quotas.acquire("acme", tier, "chat", 1.0, now=0.0)
    assert quotas.statistics().tenants == 0


@pytest.mark.parametrize("max_tenants", [0, -1, 1.5, True])
def test_max_tenants_must_be_a_positive_integer(max_tenants: int) -> None:
    with pytest.raises(UsageError):
        TenantQuotas(max_tenants=max_tenants)


def _churn(quotas: TenantQuotas, tier: TierSpec, first: int, last: int) -> None:
    acquire, settle, release = quotas.acquire, quotas.settle, quotas.release
    for i in range(first, last):
        now = i * 1e-3
        lease = acquire(f"tenant-{i}", tier, "chat", 5.0, now=now)
        assert isinstance(lease, Lease)
        settle(lease, 3.0, now=now)
        release(lease, now=now)
        if i % 1000 == 0:
            assert quotas.statistics().tenants <= quotas.max_tenants


def _traced(quotas: TenantQuotas, tier: TierSpec, first: int, last: int) -> tuple[int, int]:
    """(current, peak) traced memory over ids ``first`` to ``last``: the table
    turns over completely, so all it holds was allocated while traced."""
    tracemalloc.start()
    try:
        _churn(quotas, tier, first, last)
        return tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()


def test_a_million_distinct_tenants_keep_the_table_bounded() -> None:
    # 10^6 ids, each acquired, settled and released, through a table of 1000.
    # Memory is traced over the first and the last 10^4 ids (tracing all 10^6
    # would take minutes); the table turns over completely within each window,
    # so everything it holds at the end of a window was allocated inside it.
    tier = TierSpec("t", "chat", rate=100.0, burst=1000.0, max_concurrency=8)
    quotas = TenantQuotas(max_tenants=1000)
    early, early_peak = _traced(quotas, tier, 0, 10_000)
    assert quotas.statistics().tenants == 1000
    for start in range(10_000, 990_000, 100_000):
        _churn(quotas, tier, start, min(start + 100_000, 990_000))
        assert quotas.statistics().tenants == 1000
    late, late_peak = _traced(quotas, tier, 990_000, 1_000_000)
    stats = quotas.statistics()
    assert (stats.tenants, stats.in_flight, stats.admitted) == (1000, 0, 1_000_000)
    assert stats.evictions == 1_000_000 - 1000
    assert quotas.tenant("tenant-998999", now=0.0) is None
    assert quotas.tenant("tenant-999000", now=0.0) is not None
    # The table holds no more after 10^6 ids than after 10^4, about 1 KB a tenant.
    assert late <= early * 1.25, (early, late)
    assert late_peak <= early_peak * 1.25, (early_peak, late_peak)
    assert late <= 1000 * 1024, late


def test_the_tables_lease_is_the_stores_lease() -> None:
    from slopolicy.backends import Lease as StoreLease

    assert StoreLease is Lease  # one class for the table and every store
    quotas = TenantQuotas()
    first = _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=2.0))
    second = _lease(quotas.acquire("acme", PRO, "chat", 1.0, now=3.0))
    assert first.id != second.id
    assert (first.acquired_at, first.released_at, first.fallback) == (2.0, None, False)
    assert quotas.release(first, now=4.0)
    assert (first.released, first.released_at) == (True, 4.0)
