"""TenantQuotas against a naive model, step by step."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from slopolicy.core.decisions import Reason
from slopolicy.core.quota.lease import Lease
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.errors import UsageError

# Binary fractions everywhere (rates, shares, costs, steps) keep the float
# arithmetic exact, so the model can demand equality, waits included.
TIERS = (
    TierSpec(
        "free", "chat", rate=1.0, burst=4.0, max_concurrency=2,
        lane_quotas=(LaneQuotaSpec("chat", 0.5, max_concurrency=1),),
    ),
    TierSpec(
        "pro", "chat", rate=4.0, burst=16.0, max_concurrency=3,
        lane_quotas=(LaneQuotaSpec("chat", 0.5), LaneQuotaSpec("batch", 0.25, 2)),
    ),
    # Same lane limits as "pro", smaller tenant bucket: a tier change that
    # keeps the lane buckets and carries the tenant bucket's level.
    TierSpec(
        "pro-lite", "chat", rate=2.0, burst=8.0, max_concurrency=4,
        lane_quotas=(LaneQuotaSpec("chat", 0.5), LaneQuotaSpec("batch", 0.25, 2)),
    ),
    TierSpec("unlimited", "chat", lane_quotas=(LaneQuotaSpec("batch", 0.5, 1),)),
)  # fmt: skip
TENANTS = ("a", "b", "c", "d", "e")
LANES = ("chat", "batch", "other")
_costs = st.integers(0, 80).map(lambda n: n / 4)
_steps = st.integers(0, 40).map(lambda n: n / 8)


@dataclass
class Bucket:
    """An exact bucket, and its history for invariant 1: (time, grants minus
    refunds, grants plus charges minus refunds, level after) per event."""

    rate: Fraction
    burst: Fraction
    level: Fraction
    last: Fraction
    events: list[tuple[Fraction, Fraction, Fraction, Fraction]] = field(default_factory=list)

    def at(self, now: Fraction) -> Fraction:
        if now <= self.last:
            return self.level
        return min(self.burst, self.level + self.rate * (now - self.last))

    def advance(self, now: Fraction) -> None:
        self.level, self.last = self.at(now), max(self.last, now)

    def move(self, now: Fraction, amount: Fraction, *, grant: bool = False) -> None:
        """Take ``amount`` (give back if negative): a grant, a charge or a refund."""
        self.advance(now)
        new = max(-self.burst, min(self.burst, self.level - amount))
        applied = self.level - new
        self.level = new
        admitted = applied if grant or applied < 0 else Fraction(0)
        self.events.append((self.last, admitted, applied, new))


def _bucket(rate: float | None, burst: float | None, share: float, now: Fraction) -> Bucket:
    assert rate is not None
    assert burst is not None
    size = Fraction(burst) * Fraction(share)
    return Bucket(Fraction(rate) * Fraction(share), size, size, now)


@dataclass
class Tenant:
    tier: TierSpec
    bucket: Bucket | None
    lanes: dict[str, Bucket]
    in_flight: int = 0
    lane_in_flight: dict[str, int] = field(default_factory=dict)
    retired: list[Bucket] = field(default_factory=list)  # replaced buckets, still checked

    @classmethod
    def new(cls, tier: TierSpec, now: Fraction) -> Tenant:
        bucket = None if tier.rate is None else _bucket(tier.rate, tier.burst, 1.0, now)
        lanes = {}
        if tier.rate is not None:
            for quota in tier.lane_quotas:
                lanes[quota.lane] = _bucket(tier.rate, tier.burst, quota.share, now)
        return cls(tier, bucket, lanes)

    def retier(self, tier: TierSpec, now: Fraction) -> None:
        fresh = Tenant.new(tier, now)

        def carry(old: Bucket | None, new: Bucket) -> Bucket:
            if old is None:
                return new
            if (old.rate, old.burst) == (new.rate, new.burst):
                return old
            self.retired.append(old)
            new.level = max(-new.burst, min(new.burst, old.at(now)))
            return new

        self.bucket = None if fresh.bucket is None else carry(self.bucket, fresh.bucket)
        self.retired.extend(b for lane, b in self.lanes.items() if lane not in fresh.lanes)
        self.lanes = {lane: carry(self.lanes.get(lane), b) for lane, b in fresh.lanes.items()}
        self.tier = tier

    def buckets(self, lane: str) -> list[Bucket]:
        return [b for b in (self.bucket, self.lanes.get(lane)) if b is not None]

    def refusal(self, lane: str, cost: Fraction, now: Fraction) -> tuple[Reason, object] | None:
        caps = {q.lane: q.max_concurrency for q in self.tier.lane_quotas}
        cap = self.tier.max_concurrency
        if cap is not None and self.in_flight >= cap:
            return Reason.CONCURRENCY_LIMITED, None
        cap = caps.get(lane)
        if cap is not None and self.lane_in_flight.get(lane, 0) >= cap:
            return Reason.CONCURRENCY_LIMITED, None
        waits = [(cost - b.at(now)) / b.rate for b in self.buckets(lane) if cost]
        wait = max([Fraction(0), *waits])
        return None if wait == 0 else (Reason.RATE_LIMITED, wait)


def _over_burst(tier: TierSpec, lane: str, cost: Fraction) -> bool:
    if tier.rate is None or tier.burst is None:
        return False
    shares = {q.lane: q.share for q in tier.lane_quotas}
    smallest = Fraction(tier.burst) * Fraction(min(shares.get(lane, 1.0), 1.0))
    return cost > smallest


class QuotasMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.tenants: dict[str, Tenant] = {}
        self.recency: list[str] = []  # least recently used first
        self.tiers = dict.fromkeys(TENANTS, TIERS[0])
        self.leases: list[Lease] = []
        self.refusals = 0
        self.evictions = 0

    @initialize(max_tenants=st.integers(1, 4), start=st.integers(-8, 8).map(float))
    def build(self, max_tenants: int, start: float) -> None:
        self.quotas = TenantQuotas(max_tenants=max_tenants)
        self.max_tenants = max_tenants
        self.now = start

    def _touch(self, tenant: str) -> None:
        if tenant in self.recency:
            self.recency.remove(tenant)
        self.recency.append(tenant)

    def _snapshot(self) -> object:
        stats = self.quotas.statistics()
        tenants = [self.quotas.tenant(t, now=self.now) for t in TENANTS]
        return stats.tenants, stats.evictions, stats.in_flight, stats.admitted, tenants

    @rule(dt=_steps)
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(tenant=st.sampled_from(TENANTS), tier=st.sampled_from(TIERS))
    def change_tier(self, tenant: str, tier: TierSpec) -> None:
        self.tiers[tenant] = tier

    @rule(tenant=st.sampled_from(TENANTS), lane=st.sampled_from(LANES), cost=_costs)
    def acquire(self, tenant: str, lane: str, cost: float) -> None:
        tier, now, exact = self.tiers[tenant], Fraction(self.now), Fraction(cost)
        model = self.tenants.get(tenant)
        retiered = model is not None and model.tier != tier
        if model is not None and retiered:
            model.retier(tier, now)
        before = self._snapshot()
        result = self.quotas.acquire(tenant, tier, lane, cost, now=self.now)
        expected: tuple[Reason, object] | None
        if _over_burst(tier, lane, exact):
            expected = Reason.COST_OVER_BURST, None
        elif model is None:
            idle = [t for t in self.recency if self.tenants[t].in_flight == 0]
            full = len(self.tenants) >= self.max_tenants
            expected = (Reason.TENANT_TABLE_FULL, None) if full and not idle else None
        else:
            expected = model.refusal(lane, exact, now)
        if expected is not None:
            assert isinstance(result, QuotaRefusal), result
            assert (result.reason, result.retry_after) == expected, result
            assert result.http_status == (503 if expected[0] is Reason.TENANT_TABLE_FULL else 429)
            if not retiered:  # a tier change applies even to a refused request
                assert self._snapshot() == before  # a refusal changes nothing
            self.refusals += 1
            if model is not None:
                self._touch(tenant)
            return
        assert isinstance(result, Lease), result
        if model is None:
            if len(self.tenants) >= self.max_tenants:
                victim = next(t for t in self.recency if self.tenants[t].in_flight == 0)
                del self.tenants[victim]
                self.recency.remove(victim)
                self.evictions += 1
            model = self.tenants[tenant] = Tenant.new(tier, now)
        for bucket in model.buckets(lane):
            bucket.move(now, exact, grant=True)
        model.in_flight += 1
        model.lane_in_flight[lane] = model.lane_in_flight.get(lane, 0) + 1
        caps = {q.lane: q.max_concurrency for q in tier.lane_quotas}
        assert tier.max_concurrency is None or model.in_flight <= tier.max_concurrency
        assert caps.get(lane) is None or model.lane_in_flight[lane] <= (caps[lane] or 0)
        self._touch(tenant)
        self.leases.append(result)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), actual=_costs)
    def settle(self, data: st.DataObject, actual: float) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        if lease.released:
            before = self._snapshot()
            with pytest.raises(UsageError):
                self.quotas.settle(lease, actual, now=self.now)
            assert self._snapshot() == before
            return
        model, now = self.tenants[lease.tenant], Fraction(self.now)
        difference = Fraction(actual) - Fraction(lease.cost)
        self.quotas.settle(lease, actual, now=self.now)
        assert lease.cost == actual
        for bucket in model.buckets(lease.lane):
            bucket.move(now, difference)

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        if lease.released:
            before = self._snapshot()
            assert self.quotas.release(lease, now=self.now) is False
            assert self._snapshot() == before
            return
        assert self.quotas.release(lease, now=self.now) is True
        assert lease.released
        model = self.tenants[lease.tenant]
        model.in_flight -= 1
        model.lane_in_flight[lease.lane] -= 1
        if not model.lane_in_flight[lease.lane]:
            del model.lane_in_flight[lease.lane]
        self._touch(lease.tenant)

    @rule(tenant=st.sampled_from(TENANTS), cost=st.sampled_from([-1.0, float("nan")]))
    def misuse(self, tenant: str, cost: float) -> None:
        before = self._snapshot()
        with pytest.raises(UsageError):
            self.quotas.acquire(tenant, self.tiers[tenant], "chat", cost, now=self.now)
        foreign = TenantQuotas().acquire(tenant, TIERS[3], "chat", 1.0, now=self.now)
        assert isinstance(foreign, Lease)
        with pytest.raises(UsageError):
            self.quotas.release(foreign, now=self.now)
        assert self._snapshot() == before

    @invariant()
    def matches_the_model(self) -> None:
        stats = self.quotas.statistics()
        assert stats.tenants == len(self.tenants) <= self.max_tenants
        assert stats.evictions == self.evictions
        assert sum(stats.refusals.values()) == self.refusals
        assert stats.in_flight == sum(not lease.released for lease in self.leases)
        assert stats.in_flight == sum(t.in_flight for t in self.tenants.values())
        now = Fraction(self.now)
        for name in TENANTS:
            actual, model = self.quotas.tenant(name, now=self.now), self.tenants.get(name)
            if model is None:
                assert actual is None
                continue
            assert actual is not None
            assert actual.tier == model.tier.name
            assert (actual.in_flight, dict(actual.lane_in_flight)) == (
                model.in_flight,
                model.lane_in_flight,
            )
            assert (actual.bucket is None) == (model.bucket is None)
            if actual.bucket is not None and model.bucket is not None:
                assert actual.bucket.level == model.bucket.at(now)
            assert {lane: b.level for lane, b in actual.lane_buckets.items()} == {
                lane: b.at(now) for lane, b in model.lanes.items()
            }

    @invariant()
    def no_leaseholder_is_evicted(self) -> None:
        for lease in self.leases:
            if not lease.released:
                assert self.quotas.tenant(lease.tenant, now=self.now) is not None

    @invariant()
    def invariant_1_per_bucket(self) -> None:
        for model in self.tenants.values():
            for bucket in [*model.buckets(""), *model.lanes.values(), *model.retired]:
                _check_windows(bucket)

    def teardown(self) -> None:
        if not hasattr(self, "quotas"):
            return
        for lease in self.leases:
            self.quotas.release(lease, now=self.now)
        stats = self.quotas.statistics()
        assert stats.in_flight == 0  # no slot leaks
        for name in TENANTS:
            tenant = self.quotas.tenant(name, now=self.now)
            assert tenant is None or (tenant.in_flight, dict(tenant.lane_in_flight)) == (0, {})


def _check_windows(bucket: Bucket) -> None:
    """Every window ending at the newest event (older ones were checked before)."""
    if not bucket.events:
        return
    end, _, _, level_after = bucket.events[-1]
    debt = max(Fraction(0), -level_after)
    admitted = total = Fraction(0)
    for start, net, net_with_charges, _ in reversed(bucket.events):
        admitted += net
        total += net_with_charges
        assert admitted <= bucket.rate * (end - start) + bucket.burst
        assert total <= bucket.rate * (end - start) + bucket.burst + debt


QuotasMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40)
TestQuotasMachine = QuotasMachine.TestCase
