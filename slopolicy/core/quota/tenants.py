"""Per-tenant quotas: a token bucket in cost units, concurrency caps, lane splits.

Each tenant gets a :class:`~slopolicy.core.quota.bucket.TokenBucket` built from its
:class:`~slopolicy.core.specs.TierSpec` (none when the tier's ``rate`` is
``None``), a concurrency cap, and for each lane in the tier's ``lane_quotas`` a
bucket with that ``share`` of the tier's rate and burst and an optional cap of
its own. A request takes its cost from the tenant bucket *and* the lane bucket.

Concurrency counts every admitted request until :meth:`TenantQuotas.release`,
queued or running, so one tenant cannot fill the shared lane queues.

Every method takes ``now`` in monotonic seconds and reads no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.core.decisions import Reason
from slopolicy.core.quota.bucket import BucketStatistics, TokenBucket
from slopolicy.core.quota.lease import Lease
from slopolicy.core.quota.plan import TenantState, TierPlan
from slopolicy.core.quota.refusals import (
    REFUSAL_REASONS,
    QuotaRefusal,
    check_limits,
    check_slots,
    over_burst_refusal,
    rate_refusal,
)
from slopolicy.core.specs import TierSpec
from slopolicy.errors import UsageError

__all__ = (
    "QuotaStatistics",
    "TenantQuotas",
    "TenantStatistics",
)

# Tier plans are cached by identity; a caller building a fresh TierSpec per call
# must not grow the cache without bound.
_PLAN_CACHE = 256


@dataclass(frozen=True, slots=True)
class TenantStatistics:
    """A snapshot of one tenant: requests in flight, overall and per lane (lanes
    with none are left out), and its buckets (``None``: unlimited tier)."""

    tenant: str
    tier: str
    in_flight: int
    lane_in_flight: Mapping[str, int]
    bucket: BucketStatistics | None
    lane_buckets: Mapping[str, BucketStatistics]


@dataclass(frozen=True, slots=True)
class QuotaStatistics:
    """A snapshot of the table: tenants tracked (at most ``max_tenants``),
    idle tenants evicted, requests admitted and in flight, refusals by reason."""

    tenants: int
    max_tenants: int
    evictions: int
    admitted: int
    in_flight: int
    refusals: Mapping[Reason, int]


def _check_args(now: float, name: str = "cost", cost: float = 0.0) -> None:
    if not 0.0 <= cost <= MAX_AMOUNT:
        raise UsageError(f"{name} must be a finite number >= 0 cost units, not {shown(cost)}")
    check_now(now)


class TenantQuotas:
    """Quota state for up to ``max_tenants`` tenants, keyed by tenant id.

    :meth:`acquire` is atomic: it checks every limit first and takes the cost
    and the concurrency slots only if all pass, so a refusal changes nothing
    but statistics and the tenant's recency.

    A tenant's limits follow the ``tier`` passed to each :meth:`acquire`, refused
    or not; when they change, its bucket levels carry over, clamped to the new
    burst, and requests in flight keep their slots.

    Memory is bounded whatever ids arrive: when a new tenant finds the table
    full, the least recently used tenant holding no lease is evicted (a
    tenant holding a lease never is); if every tenant holds one, the new
    tenant is refused with ``TENANT_TABLE_FULL`` (503). The cost of eviction:
    an evicted tenant that comes back starts with full buckets, at most one
    burst of extra credit per bucket (plus any debt from :meth:`settle` charges
    it still owed, itself at most one burst), and only the least recently used
    idle tenant is ever evicted. Refusals count as use, so a tenant retrying at
    its limit stays tracked rather than drifting out into a fresh bucket.
    """

    __slots__ = (
        "_admitted",
        "_evictions",
        "_idle",
        "_in_flight",
        "_max",
        "_plans",
        "_refusals",
        "_tenants",
    )

    def __init__(self, *, max_tenants: int = 100_000) -> None:
        if isinstance(max_tenants, bool) or not isinstance(max_tenants, int) or max_tenants < 1:
            raise UsageError(f"max_tenants must be an integer >= 1, not {max_tenants!r}")
        self._max = max_tenants
        self._tenants: dict[str, TenantState] = {}
        # Tenants with nothing in flight, least recently used first: the
        # eviction candidates, popped from the front in O(1).
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._plans: dict[int, TierPlan] = {}
        self._evictions = 0
        self._admitted = 0
        self._in_flight = 0
        self._refusals = dict.fromkeys(REFUSAL_REASONS, 0)

    @property
    def max_tenants(self) -> int:
        """The most tenant states held at once."""
        return self._max

    def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float, *, now: float
    ) -> Lease | QuotaRefusal:
        """Admit one request of ``cost`` cost units for ``tenant`` in ``lane`` at
        ``now`` (monotonic seconds), or say why not.

        Takes a concurrency slot for the tenant and for (tenant, lane), and
        ``cost`` from the tenant bucket and the lane's bucket, all or nothing.
        """
        _check_args(now, "cost", cost)
        refusal = self._grant(tenant, tier, lane, cost, now)
        if refusal is not None:
            return refusal
        return Lease(self, f"q{self._admitted}", tenant, lane, cost, now)  # admitted: unique

    def _grant(
        self, tenant: str, tier: TierSpec, lane: str, cost: float, now: float
    ) -> QuotaRefusal | None:
        """:meth:`acquire` of checked ``cost`` and ``now`` without the lease
        object: ``None`` when granted. The policy keeps what a lease would
        (tenant, lane, cost) in its own record, and ends it with
        :meth:`_close_held`."""
        plan = self._plans.get(id(tier))
        if plan is None or plan.tier is not tier:
            plan = self._plan(tier)
        state = self._tenants.get(tenant)
        if state is not None and state.plan is not plan:
            state.retier(plan, now=now)
        limits = plan.lanes.get(lane)
        taken = False  # the cost already taken by the check
        if cost > (plan.max_cost if limits is None else limits[1]):
            refusal: QuotaRefusal | None = over_burst_refusal(tenant, plan, lane, cost)
        elif state is None:
            refusal = None if len(self._tenants) < self._max else self._make_room()
        elif state.plan.lanes:  # split buckets: check both before taking from either
            refusal = check_limits(tenant, state, lane, cost, now=now)
        else:  # one bucket at most: its own _try_acquire checks and takes
            refusal = check_slots(tenant, state, lane)
            if refusal is None and state.bucket is not None:
                bucket = state.bucket
                wait = bucket._try_acquire(cost, now)
                if wait:
                    refusal = rate_refusal(
                        tenant,
                        None,
                        bucket.rate,
                        bucket.burst,
                        cost,
                        bucket._level_checked(now),
                        wait,
                    )
                taken = not wait
        if refusal is not None:
            self._refusals[refusal.reason] += 1
            if state is not None and state.in_flight == 0:
                self._idle.move_to_end(tenant)
            return refusal
        if state is None:
            # A new tenant has full buckets and nothing in flight: no limit can refuse it.
            state = self._tenants[tenant] = TenantState(plan, now=now)
        elif state.in_flight == 0:
            del self._idle[tenant]
        if taken:
            self._count_in(state, lane)
        else:
            self._take(state, lane, cost, now)
        return None

    def _plan(self, tier: TierSpec) -> TierPlan:
        plan = TierPlan(tier)
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        self._plans[id(tier)] = plan
        return plan

    def _make_room(self) -> QuotaRefusal | None:
        if not self._idle:
            return QuotaRefusal(
                reason=Reason.TENANT_TABLE_FULL,
                message=f"the tenant table is full: all {self._max:,} tracked tenants hold leases",
                retry_after=None,
                http_status=503,
            )
        victim, _ = self._idle.popitem(last=False)
        del self._tenants[victim]
        self._evictions += 1
        return None

    def _take(self, state: TenantState, lane: str, cost: float, now: float) -> None:
        if state.bucket is not None:
            granted = state.bucket._try_acquire(cost, now)
            assert granted == 0.0, "checked by _check"
        bucket = state.lane_bucket(lane, now=now)
        if bucket is not None:
            granted = bucket._try_acquire(cost, now)
            assert granted == 0.0, "checked by _check"
        self._count_in(state, lane)

    def _count_in(self, state: TenantState, lane: str) -> None:
        """Take the request's concurrency slots (its cost is taken)."""
        state.in_flight += 1
        state.lane_in_flight[lane] = state.lane_in_flight.get(lane, 0) + 1
        self._in_flight += 1
        self._admitted += 1

    def _foreign(self, action: str) -> UsageError:
        return UsageError(f"cannot {action} a lease this TenantQuotas did not grant")

    def settle(self, lease: Lease, actual_cost: float, *, now: float) -> None:
        """Reconcile ``lease``'s estimate with ``actual_cost`` (cost units) at ``now``:
        refund or charge the difference on the same buckets. Settle before
        :meth:`release`; settling again reconciles against the last settle."""
        if not isinstance(lease, Lease) or lease._owner is not self:
            raise self._foreign("settle")
        if lease._released:
            raise UsageError(f"cannot settle a released lease: {lease!r}")
        _check_args(now, "actual_cost", actual_cost)
        self._reconcile(self._tenants[lease.tenant], lease.lane, lease._cost, actual_cost, now)
        lease._cost = actual_cost

    def _close_held(
        self, tenant: str, lane: str, cost: float, actual_cost: float, now: float
    ) -> None:
        """:meth:`settle` then :meth:`release` of a grant of ``cost`` to ``tenant``
        in ``lane`` made by :meth:`_grant`, for the policy that holds it, with
        checked ``actual_cost`` and ``now``."""
        state = self._tenants[tenant]  # a holder is never evicted
        self._reconcile(state, lane, cost, actual_cost, now)
        self._release(tenant, state, lane)

    def _reconcile(
        self, state: TenantState, lane: str, cost: float, actual_cost: float, now: float
    ) -> None:
        """Charge or refund the difference between ``cost`` (what is charged
        now) and ``actual_cost`` on ``state``'s buckets for ``lane``."""
        difference = actual_cost - cost
        if difference:
            for bucket in (state.bucket, state.lane_bucket(lane, now=now)):
                if bucket is None:
                    continue
                if difference > 0:
                    bucket._charge(difference, now)
                else:
                    bucket._refund(-difference, now)

    def release(self, lease: Lease, *, now: float) -> bool:
        """Give back ``lease``'s concurrency slots. True the first time; later
        calls return False and change nothing. Cost is not refunded (settle does).
        ``now`` (monotonic seconds) is unused by this in-memory table."""
        if not isinstance(lease, Lease) or lease._owner is not self:
            raise self._foreign("release")
        check_now(now)
        if lease._released:
            return False
        lease._released = True
        lease.released_at = now
        self._release(lease.tenant, self._tenants[lease.tenant], lease.lane)
        return True

    def _release(self, tenant: str, state: TenantState, lane: str) -> None:
        state.in_flight -= 1
        left = state.lane_in_flight[lane] - 1
        if left:
            state.lane_in_flight[lane] = left
        else:
            del state.lane_in_flight[lane]
        self._in_flight -= 1
        if state.in_flight == 0:
            self._idle[tenant] = None

    def statistics(self) -> QuotaStatistics:
        """A frozen snapshot of the whole table."""
        return QuotaStatistics(
            tenants=len(self._tenants),
            max_tenants=self._max,
            evictions=self._evictions,
            admitted=self._admitted,
            in_flight=self._in_flight,
            refusals=MappingProxyType(dict(self._refusals)),
        )

    def tenant(self, tenant: str, *, now: float) -> TenantStatistics | None:
        """A frozen snapshot of ``tenant`` at ``now``, or None if it is not tracked.
        A lane bucket not used yet is reported full."""
        check_now(now)
        state = self._tenants.get(tenant)
        if state is None:
            return None
        lanes = {
            lane: (state.lane_buckets.get(lane) or TokenBucket(*limits, now=now)).statistics(
                now=now
            )
            for lane, limits in state.plan.lanes.items()
        }
        return TenantStatistics(
            tenant=tenant,
            tier=state.plan.tier.name,
            in_flight=state.in_flight,
            lane_in_flight=MappingProxyType(dict(state.lane_in_flight)),
            bucket=None if state.bucket is None else state.bucket.statistics(now=now),
            lane_buckets=MappingProxyType(lanes),
        )
