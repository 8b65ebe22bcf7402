"""Internal state of :class:`~slopolicy.core.quota.tenants.TenantQuotas`: validated
tier plans and per-tenant buckets and counters. Not public API."""

from __future__ import annotations

import math

from slopolicy.core.quota.bucket import TokenBucket
from slopolicy.core.specs import TierSpec
from slopolicy.errors import UsageError

__all__ = ("Limits", "TenantState", "TierPlan", "carry", "check_cap")

#: A bucket's (rate in cost units per second, burst in cost units).
Limits = tuple[float, float]


class TierPlan:
    """A tier, validated once and flattened for the admission path: the tenant
    bucket's limits, each lane's bucket limits, and the concurrency caps."""

    __slots__ = ("bucket", "caps", "lanes", "max_concurrency", "max_cost", "tier")

    def __init__(self, tier: TierSpec) -> None:
        where = f"tier {tier.name!r}"
        rate, burst = tier.rate, tier.burst
        self.bucket: Limits | None = None
        if rate is not None:
            if burst is None:
                raise UsageError(f"{where}: a rate needs a burst")
            try:  # validate now, not at the first tenant
                TokenBucket(rate, burst)
            except UsageError as error:
                raise UsageError(f"{where}: {error}") from error
            self.bucket = (rate, burst)
        self.tier = tier
        self.max_concurrency = check_cap(where, tier.max_concurrency)
        self.lanes: dict[str, Limits] = {}
        self.caps: dict[str, int] = {}
        for quota in tier.lane_quotas:
            lane = f"{where}, lane {quota.lane!r}"
            if not 0.0 < quota.share <= 1.0:
                raise UsageError(f"{lane}: share must be in (0, 1], not {quota.share!r}")
            if sum(other.lane == quota.lane for other in tier.lane_quotas) > 1:
                raise UsageError(f"{lane}: two quotas for one lane")
            if rate is not None and burst is not None:
                self.lanes[quota.lane] = (rate * quota.share, burst * quota.share)
            cap = check_cap(lane, quota.max_concurrency)
            if cap is not None:
                self.caps[quota.lane] = cap
        # The largest cost ever admitted outside split lanes; a split lane's
        # burst is smaller still.
        self.max_cost = math.inf if self.bucket is None else self.bucket[1]

    def same_buckets(self, other: TierPlan) -> bool:
        return self.bucket == other.bucket and self.lanes == other.lanes


def check_cap(where: str, cap: int | None) -> int | None:
    """``cap``, if it is None or an integer >= 1."""
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise UsageError(f"{where}: max_concurrency must be an integer >= 1, not {cap!r}")
    return cap


def carry(old: TokenBucket | None, limits: Limits, *, now: float) -> TokenBucket:
    """A bucket with new limits keeping the old level (clamped), so a tier
    change neither hands out a fresh burst nor erases debt (``now`` checked)."""
    rate, burst = limits
    if old is None:
        return TokenBucket(rate, burst, now=now)
    if (old.rate, old.burst) == limits:
        return old
    return TokenBucket(rate, burst, now=now, level=min(burst, max(-burst, old._level_checked(now))))


class TenantState:
    """One tenant: its plan, buckets and requests in flight (overall, per lane)."""

    __slots__ = ("bucket", "in_flight", "lane_buckets", "lane_in_flight", "plan")

    def __init__(self, plan: TierPlan, *, now: float) -> None:
        self.plan = plan
        self.bucket = None if plan.bucket is None else TokenBucket(*plan.bucket, now=now)
        # Lane buckets are made at first use: an untouched bucket is full anyway.
        self.lane_buckets: dict[str, TokenBucket] = {}
        self.in_flight = 0
        self.lane_in_flight: dict[str, int] = {}

    def retier(self, plan: TierPlan, *, now: float) -> None:
        """Follow a tier change at ``now``, carrying bucket levels over."""
        if not plan.same_buckets(self.plan):
            self.bucket = None if plan.bucket is None else carry(self.bucket, plan.bucket, now=now)
            lanes = {}
            for lane, limits in plan.lanes.items():
                old = self.lane_buckets.get(lane)
                if old is None and lane in self.plan.lanes:  # not used yet: full
                    old = TokenBucket(*self.plan.lanes[lane], now=now)
                if old is not None:
                    lanes[lane] = carry(old, limits, now=now)
            self.lane_buckets = lanes
        self.plan = plan

    def lane_bucket(self, lane: str, *, now: float) -> TokenBucket | None:
        """``lane``'s split bucket, made now if not used yet; None if unsplit."""
        bucket = self.lane_buckets.get(lane)
        if bucket is None:
            limits = self.plan.lanes.get(lane)
            if limits is not None:
                bucket = self.lane_buckets[lane] = TokenBucket(*limits, now=now)
        return bucket
