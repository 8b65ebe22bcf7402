"""The in-memory quota store: :class:`~slopolicy.core.quota.tenants.TenantQuotas` behind the
async :class:`~slopolicy.backends.QuotaStore` contract.

One gateway process needs nothing more, and this is what a ``Gate`` without
a ``quota_store`` does through its policy. It is also the fail-open fallback
of :class:`~slopolicy.backends.redis.RedisQuotaStore`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import MappingProxyType

from anyio import current_time

from slopolicy.backends.base import (
    Lease,
    StoreStatistics,
    TenantSnapshot,
    check_acquire,
    check_cost,
    own_token,
    refusal_counts,
)
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.specs import TierSpec
from slopolicy.errors import UsageError

__all__ = ("MemoryQuotaStore",)


class MemoryQuotaStore:
    """Quota state in this process: a :class:`TenantQuotas` table.

    Args:
        quotas: the table to use (default: a new one of ``max_tenants``).
        clock: monotonic seconds for the buckets; default ``anyio.current_time``
            (the Gate's clock, so virtual time in tests moves it too).
        max_tenants: the new table's bound, when ``quotas`` is not given.

    Leases never expire here (``renew_every`` is ``None``): the process that
    holds them is the one that keeps the table.
    """

    __slots__ = ("_admitted", "_clock", "_ids", "_live", "_quotas")

    def __init__(
        self,
        quotas: TenantQuotas | None = None,
        *,
        clock: Callable[[], float] | None = None,
        max_tenants: int = 100_000,
    ) -> None:
        self._quotas = TenantQuotas(max_tenants=max_tenants) if quotas is None else quotas
        self._clock = current_time if clock is None else clock
        self._ids = itertools.count(1)
        self._live = 0
        self._admitted = 0

    @property
    def quotas(self) -> TenantQuotas:
        """The table behind this store."""
        return self._quotas

    @property
    def renew_every(self) -> float | None:
        """``None``: in-memory leases never expire."""
        return None

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float
    ) -> Lease | QuotaRefusal:
        """See :meth:`QuotaStore.acquire`. Never suspends: no await point."""
        check_acquire(tenant, tier, lane, cost)
        now = self._clock()
        granted = self._quotas.acquire(tenant, tier, lane, cost, now=now)
        if isinstance(granted, QuotaRefusal):
            return granted
        self._live += 1
        self._admitted += 1
        return Lease(self, f"m{next(self._ids)}", tenant, lane, cost, now, granted)

    async def settle(self, lease: Lease, actual_cost: float) -> None:
        """See :meth:`QuotaStore.settle`."""
        inner = own_token(lease, self, Lease, "settle")
        if lease._released:
            raise UsageError(f"cannot settle a released lease: {lease!r}")
        check_cost("actual_cost", actual_cost)
        self._quotas.settle(inner, actual_cost, now=self._clock())
        lease._cost = actual_cost

    async def release(self, lease: Lease) -> bool:
        """See :meth:`QuotaStore.release`."""
        inner = own_token(lease, self, Lease, "release")
        now = self._clock()
        if not self._quotas.release(inner, now=now):
            return False
        lease._released = True
        lease.released_at = now
        self._live -= 1
        return True

    async def finish(self, lease: Lease, actual_cost: float) -> bool:
        """See :meth:`QuotaStore.finish`."""
        try:
            await self.settle(lease, actual_cost)
        finally:
            released = await self.release(lease)
        return released

    async def renew(self) -> int:
        """Nothing to renew: 0."""
        return 0

    async def maintain(self) -> None:
        """Nothing to maintain: returns at once."""

    async def snapshot(self, tenant: str, tier: TierSpec) -> TenantSnapshot:
        """See :meth:`QuotaStore.snapshot`. A tenant not tracked reads as full and idle."""
        now = self._clock()
        stats = self._quotas.tenant(tenant, now=now)
        if stats is None:
            return _fresh(tenant, tier, now)
        return TenantSnapshot(
            tenant,
            now,
            stats.in_flight,
            MappingProxyType(dict(stats.lane_in_flight)),
            None if stats.bucket is None else stats.bucket.level,
            MappingProxyType({lane: b.level for lane, b in stats.lane_buckets.items()}),
        )

    def statistics(self) -> StoreStatistics:
        """See :meth:`QuotaStore.statistics`."""
        refusals = refusal_counts()
        refusals.update(self._quotas.statistics().refusals)
        return StoreStatistics(
            backend="memory",
            admitted=self._admitted,
            refusals=MappingProxyType(refusals),
            in_flight=self._live,
        )


def _fresh(tenant: str, tier: TierSpec, now: float) -> TenantSnapshot:
    level = None if tier.rate is None else tier.burst
    lanes = {}
    if tier.rate is not None and tier.burst is not None:
        lanes = {quota.lane: tier.burst * quota.share for quota in tier.lane_quotas}
    return TenantSnapshot(tenant, now, 0, MappingProxyType({}), level, MappingProxyType(lanes))
