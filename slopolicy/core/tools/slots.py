"""Which calls a tool's limits let start, and in which order waiters start.

Pure reads of a :class:`~slopolicy.core.tools.state.Group` the
:class:`~slopolicy.core.tools.pool.ToolPool` owns: the rate buckets a call
takes from, whether the concurrency caps leave room, the fair order a freed
slot goes in, and whose waiter a full queue pushes out. Nothing here checks
its arguments (the pool did) or changes the group.
"""

from __future__ import annotations

from collections.abc import Mapping

from slopolicy.core.quota.bucket import TokenBucket
from slopolicy.core.tools.limits import ToolLimits
from slopolicy.core.tools.state import Group, TenantCalls

__all__ = ("buckets_for", "fairest", "has_room", "pushed_out")


def buckets_for(group: Group, tenant: str, *, now: float) -> tuple[TokenBucket, ...]:
    """The rate buckets a call of ``tenant`` takes from at ``now`` (monotonic
    seconds). A tenant without one gets a new full one, kept only once a call
    takes from it."""
    spec = group.spec
    buckets = () if group.bucket is None else (group.bucket,)
    if spec.tenant_rate is None or spec.tenant_burst is None:
        return buckets
    bucket = group.tenant_buckets.get(tenant)
    if bucket is None:
        bucket = TokenBucket(spec.tenant_rate, spec.tenant_burst, now=now)
    return (*buckets, bucket)


def has_room(group: Group, limits: ToolLimits, tenant: str, state: TenantCalls | None) -> bool:
    """Whether every concurrency cap leaves ``tenant`` room for one more call."""
    spec = group.spec
    if spec.max_concurrency is not None and group.in_flight >= spec.max_concurrency:
        return False
    cap = spec.tenant_max_concurrency
    if cap is not None and group.held.get(tenant, 0) >= cap:
        return False
    cap = limits.tenant_max_concurrency
    return cap is None or state is None or state.in_flight < cap


def fairest(group: Group, limits: ToolLimits, tenants: Mapping[str, TenantCalls]) -> str | None:
    """The waiting tenant a freed slot of ``group`` goes to: of those the caps
    leave room, the one holding the fewest of its slots, the least recently
    served among equals; ``None`` when none fits."""
    best: str | None = None
    best_key = (0, 0)
    for tenant in group.queues:
        if not has_room(group, limits, tenant, tenants[tenant]):
            continue
        key = (group.held.get(tenant, 0), group.served.get(tenant, 0))
        if best is None or key < best_key:
            best, best_key = tenant, key
    return best


def pushed_out(group: Group, tenant: str) -> str | None:
    """The tenant whose newest waiter a full queue pushes out for ``tenant``'s
    arrival: the most backlogged, if it has more waiting than the arrival would."""
    own = len(group.queues.get(tenant, ()))
    most, pushed = own + 1, None
    for name, queue in group.queues.items():
        if len(queue) > most:
            most, pushed = len(queue), name
    return pushed
