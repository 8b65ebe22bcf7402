"""Why a tenant's request is refused: which limit it breaks, in one wording.

Shared by the core's :class:`~slopolicy.core.quota.tenants.TenantQuotas` and
the quota stores of :mod:`slopolicy.backends`, so every store words its
refusals alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from slopolicy.core.decisions import Reason
from slopolicy.core.quota.plan import TenantState, TierPlan

__all__ = (
    "REFUSAL_REASONS",
    "QuotaRefusal",
    "check_limits",
    "check_slots",
    "concurrency_refusal",
    "over_burst_refusal",
    "rate_refusal",
)

#: The reasons a quota refuses with.
REFUSAL_REASONS = (
    Reason.RATE_LIMITED,
    Reason.CONCURRENCY_LIMITED,
    Reason.COST_OVER_BURST,
    Reason.TENANT_TABLE_FULL,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaRefusal:
    """Why a request was not admitted.

    ``reason`` is one of ``RATE_LIMITED``, ``CONCURRENCY_LIMITED``,
    ``COST_OVER_BURST`` or ``TENANT_TABLE_FULL``; ``message`` names the limit
    and the numbers. ``retry_after`` (seconds) is the exact wait for the
    buckets when rate limited, and ``None`` when no wait is known to help.
    ``http_status`` is 429, or 503 when the tenant table is full.
    """

    reason: Reason
    message: str
    retry_after: float | None = None
    http_status: int = 429


def _num(value: float) -> str:
    return f"{value:,.6g}"


def over_burst_refusal(tenant: str, plan: TierPlan, lane: str, cost: float) -> QuotaRefusal:
    """``COST_OVER_BURST``: ``cost`` exceeds the tenant's burst, or ``lane``'s.
    Shared with the quota stores of :mod:`slopolicy.backends`, so every store
    words its refusals alike."""
    if cost > plan.max_cost:
        where, burst = "", plan.max_cost
    else:
        where, burst = f" in lane {lane!r}", plan.lanes[lane][1]
    return QuotaRefusal(
        reason=Reason.COST_OVER_BURST,
        message=f"a cost of {_num(cost)} cost units exceeds the burst of {_num(burst)} cost units "
        f"for tenant {tenant!r}{where}, so it can never be admitted",
    )


def concurrency_refusal(
    tenant: str, in_flight: int, cap: int, lane: str | None = None
) -> QuotaRefusal:
    """``CONCURRENCY_LIMITED``: ``tenant`` (in ``lane``, for a lane's cap) has
    ``in_flight`` requests against a cap of ``cap``."""
    if lane is None:
        message = f"tenant {tenant!r} has {in_flight} requests in flight; its limit is {cap}"
    else:
        message = (
            f"tenant {tenant!r} has {in_flight} requests in flight in lane {lane!r}; "
            f"the lane's limit is {cap}"
        )
    return QuotaRefusal(reason=Reason.CONCURRENCY_LIMITED, message=message)


def rate_refusal(
    tenant: str,
    lane: str | None,
    rate: float,
    burst: float,
    cost: float,
    level: float,
    wait: float,
) -> QuotaRefusal:
    """``RATE_LIMITED``: the binding bucket (``lane``'s, or the tenant's when
    ``lane`` is None) holds ``level`` of the ``cost`` asked; ``wait`` seconds
    until it could grant it."""
    where = "" if lane is None else f" in lane {lane!r}"
    return QuotaRefusal(
        reason=Reason.RATE_LIMITED,
        message=f"tenant {tenant!r} is over its quota{where} of {_num(rate)} cost units/s "
        f"with a burst of {_num(burst)}: {_num(cost)} cost units requested, "
        f"{_num(level)} available; retry in {wait:.3g} s",
        retry_after=wait,
    )


def check_slots(tenant: str, state: TenantState, lane: str) -> QuotaRefusal | None:
    """The concurrency cap a new request would break for a tracked tenant, or None."""
    cap = state.plan.max_concurrency
    if cap is not None and state.in_flight >= cap:
        return concurrency_refusal(tenant, state.in_flight, cap)
    cap = state.plan.caps.get(lane)
    if cap is not None:
        in_lane = state.lane_in_flight.get(lane, 0)
        if in_lane >= cap:
            return concurrency_refusal(tenant, in_lane, cap, lane)
    return None


def check_limits(
    tenant: str, state: TenantState, lane: str, cost: float, *, now: float
) -> QuotaRefusal | None:
    """The first limit ``cost`` would break for a tracked tenant, or None."""
    refusal = check_slots(tenant, state, lane)
    if refusal is not None:
        return refusal
    tenant_bucket, lane_bucket = state.bucket, state.lane_buckets.get(lane)
    wait = 0.0 if tenant_bucket is None else tenant_bucket._time_until(cost, now)
    lane_wait = 0.0 if lane_bucket is None else lane_bucket._time_until(cost, now)
    if wait == 0.0 and lane_wait == 0.0:
        return None
    # Levels only rise while nothing is taken, so both buckets grant at the later time.
    where: str | None
    if lane_wait > wait:
        assert lane_bucket is not None
        wait, bucket, where = lane_wait, lane_bucket, lane
    else:
        assert tenant_bucket is not None
        bucket, where = tenant_bucket, None
    return rate_refusal(
        tenant, where, bucket.rate, bucket.burst, cost, bucket._level_checked(now), wait
    )
