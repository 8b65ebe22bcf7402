"""The quota store contract: what a :class:`~slopolicy.Gate` needs from tenant quota state.

A quota store holds each tenant's token buckets (cost units) and concurrency
slots, in memory for one gateway process or in Redis for several replicas.
The strategy (:class:`~slopolicy.core.quota.tenants.TenantQuotas`' semantics: a
tenant bucket plus per-lane split buckets, tenant and tenant-lane caps,
check-all-then-take, settle by refund or charge with debt floored at
``-burst``, idempotent release) is the same for every store; the contract
suite in :mod:`slopolicy.testing.store_contract` runs against each.

Every method is async (a store may be a network round trip away) and reads
time from the store's own clock: an injected callable, or for Redis the
server's ``TIME``. Nothing here reads ``time.time()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from slopolicy.core.decisions import Reason
from slopolicy.core.quota.lease import Lease
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.specs import TierSpec
from slopolicy.errors import UsageError

__all__ = ("Lease", "QuotaStore", "StoreStatistics", "TenantSnapshot")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TenantSnapshot:
    """One tenant's quota state as a store sees it at ``at`` (store clock seconds).

    ``level`` is the tenant bucket's cost units (``None``: an unlimited tier),
    ``lane_levels`` each split lane's; buckets never used, or idle long enough
    to be full, read full. ``in_flight`` counts live leases, ``lane_in_flight``
    per lane (lanes with none left out).
    """

    tenant: str
    at: float
    in_flight: int
    lane_in_flight: Mapping[str, int]
    level: float | None
    lane_levels: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a store, from this process's side.

    Attributes:
        backend: ``"memory"`` or ``"redis"``.
        admitted: leases granted (fallback admissions included).
        refusals: refusals by reason (``QUOTA_STORE_UNAVAILABLE`` when failing closed).
        in_flight: leases this process holds.
        degraded: the shared store is unavailable (the circuit breaker is not
            closed): admissions fail open on local limits or fail closed.
        breaker: the circuit breaker's state: ``closed``, ``open`` or ``half_open``.
        failures: calls to the shared store that failed (error or timeout).
        fallback_admitted: admissions on local limits while failing open.
        fallback_in_flight: leases held that were admitted on local limits.
        lost: leases the shared store had dropped (expired, or lost in a
            restart) that renewal registered again.
        resyncs: times the live leases were registered again after the store
            came back or lost its scripts (a restart).
        pending: releases, settles and aborts waiting for the store to come back.
    """

    backend: str
    admitted: int
    refusals: Mapping[Reason, int]
    in_flight: int
    degraded: bool = False
    breaker: str = "closed"
    failures: int = 0
    fallback_admitted: int = 0
    fallback_in_flight: int = 0
    lost: int = 0
    resyncs: int = 0
    pending: int = 0


@runtime_checkable
class QuotaStore(Protocol):
    """Tenant quota state behind a :class:`~slopolicy.Gate` (``Gate(policy, quota_store=...)``).

    ``renew_every`` is the seconds between :meth:`renew` calls that keep
    leases alive (``None``: leases never expire); :meth:`maintain` runs that
    loop, and the Gate runs it in its task group.
    """

    @property
    def renew_every(self) -> float | None:
        """Seconds between lease renewals; ``None`` when leases never expire."""
        ...

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float
    ) -> Lease | QuotaRefusal:
        """Admit one request of ``cost`` cost units for ``tenant`` in ``lane``
        under ``tier``: take a concurrency slot for the tenant and for
        (tenant, lane), and ``cost`` from the tenant bucket and the lane's
        bucket, all or nothing. Return the lease, or why not."""
        ...

    async def settle(self, lease: Lease, actual_cost: float) -> None:
        """Reconcile the lease's charge with ``actual_cost`` (cost units):
        refund or charge the difference (debt floored at ``-burst``). Settle
        before :meth:`release`; settling again reconciles against the last."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Give back the lease's concurrency slots: True the first time, then
        False with nothing changed. Cost is not refunded (settle does)."""
        ...

    async def finish(self, lease: Lease, actual_cost: float) -> bool:
        """:meth:`settle` with ``actual_cost``, then :meth:`release`, as one step
        (one round trip where the store is remote): how the gate ends every
        request. True if this released the lease; a released lease raises, as
        :meth:`settle` does. A bad ``actual_cost`` raises
        :class:`~slopolicy.UsageError` after the release (the charge stays
        the estimate): a bad number never keeps the slots."""
        ...

    async def renew(self) -> int:
        """Extend every live lease's time to live; the number renewed."""
        ...

    async def maintain(self) -> None:
        """Renew leases every ``renew_every`` seconds until cancelled (returns at
        once when leases never expire)."""
        ...

    async def snapshot(self, tenant: str, tier: TierSpec) -> TenantSnapshot:
        """``tenant``'s buckets and leases now, read from the store."""
        ...

    def statistics(self) -> StoreStatistics:
        """A frozen snapshot of this store's counters."""
        ...


def is_real(value: object) -> bool:
    """Whether ``value`` is a number a float holds: an ``int`` or ``float``, not
    a ``bool`` (nor an ``int`` too large for a float). NaN passes: range
    checks (``0 < value``) reject it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def check_cost(name: str, value: float) -> None:
    """Raise :class:`~slopolicy.UsageError` unless ``value`` is a finite cost >= 0."""
    if not (is_real(value) and 0.0 <= value < math.inf):
        shown = repr(value) if is_real(value) else type(value).__name__
        raise UsageError(f"{name} must be a finite number >= 0 cost units, not {shown}")


def check_acquire(tenant: str, tier: TierSpec, lane: str, cost: float) -> None:
    """Raise :class:`~slopolicy.UsageError` unless :meth:`QuotaStore.acquire`'s
    arguments are of their types (checked before a store takes anything)."""
    if not isinstance(tenant, str) or not isinstance(lane, str):
        kinds = f"{type(tenant).__name__} and {type(lane).__name__}"
        raise UsageError(f"tenant and lane must be strings, not {kinds}")
    if not isinstance(tier, TierSpec):
        raise UsageError(f"tier must be a TierSpec, not {type(tier).__name__}")
    check_cost("cost", cost)


def own_token(lease: Lease, store: object, kind: type[T], action: str) -> T:
    """The store-side token (of type ``kind``) of a lease ``store`` granted;
    :class:`~slopolicy.UsageError` naming ``action`` for any other lease."""
    if not isinstance(lease, Lease) or lease._owner is not store:
        raise UsageError(f"cannot {action} a lease this store did not grant")
    token = lease._token
    assert isinstance(token, kind)
    return token


def refusal_counts() -> dict[Reason, int]:
    """Zeroed refusal counters for every reason a store can refuse with."""
    return dict.fromkeys(
        (
            Reason.RATE_LIMITED,
            Reason.CONCURRENCY_LIMITED,
            Reason.COST_OVER_BURST,
            Reason.TENANT_TABLE_FULL,
            Reason.QUOTA_STORE_UNAVAILABLE,
        ),
        0,
    )
