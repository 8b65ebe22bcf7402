"""Which tenants ask for more than their max-min share of what the engine serves.

Max-min fairness gives every tenant what it asks for up to a common level
``L`` (per unit of weight), and ``L`` is where those shares add up to what
the engine serves: ``sum_i min(d_i, w_i * L) = S``. A tenant whose demand
``d_i`` is above ``w_i * L`` is *over its share*; the rest are within it and,
under saturation, should keep what they ask for while the over-share tenants
absorb the shortfall (SIMULATOR.md's "in-share" check).

:class:`TenantDemand` measures both sides online, in the policy's cost units:
``d_i``, the cost each tenant queued, and ``S``, the cost the policy started,
each a sum decayed with time constant ``window_s`` (so a rate times
``window_s``, comparable with each other). While the tenants together ask for
no more than was served (the engine keeps up), or before anything was
served, nobody is over: ``L`` is infinite, and the estimate changes nothing.
``L`` is recomputed at most every ``window_s / 20`` (``O(n log n)`` in the
tenants seen within about ``window_s``; one sort per recomputation).

Demand is counted when work is queued and service when it starts, so while
queues hold work the two sums differ by what waits, and the largest tenant
reads as over its share whenever work waits. The flag only orders the
tenants competing inside one queue's slack, so it matters only where a queue
forms: below the knee it changes little, near it it trades some of
shortest-first's goodput for the light tenants' attainment, and past it the
over-share tenants absorb the shortfall (``benchmarks/README.md``).

Both sides are counted at the policy's estimate of a request's cost (prompt
and forecast output) so the units agree: a request queued and started adds
the same amount to both. What expires or is refused after queueing adds to
demand only: that is the shortfall the level sorts out.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import check_now
from slopolicy.core.queueing.counters import check_finite, check_slack, check_weight
from slopolicy.errors import UsageError

__all__ = ("TenantDemand",)

# A tenant whose decayed demand has fallen below this (cost units) is forgotten.
_NEGLIGIBLE = 1e-3


class TenantDemand:
    """Each tenant's recent demand against its max-min share of recent service.

    Args:
        window_s: the time constant both sums decay with (seconds, > 0): a
            tenant's demand is roughly what it queued over the last
            ``window_s``.
    """

    __slots__ = ("_at", "_demand", "_level", "_refresh", "_served", "_served_at", "_window")

    def __init__(self, window_s: float) -> None:
        check_finite(window_s, "window_s")
        if window_s <= 0:
            raise UsageError(f"window_s must be > 0, got {window_s!r}")
        self._window = float(window_s)
        self._refresh = window_s / 20
        self._demand: dict[str, list[float]] = {}  # tenant -> [decayed cost, at, weight]
        self._served = 0.0
        self._served_at = 0.0
        self._level = math.inf
        self._at = -math.inf

    def offered(self, tenant: str, *, cost: float, weight: float, now: float) -> bool:
        """``tenant`` (at ``weight`` > 0) queued work of ``cost`` units at
        ``now``: counted, then whether it is over its share. ``cost`` is
        finite and >= 0."""
        check_slack(cost, "cost")
        check_weight(weight)
        check_now(now)
        return self._offer(tenant, cost, weight, now)

    def _offer(self, tenant: str, cost: float, weight: float, now: float) -> bool:
        """:meth:`offered` for a caller that checked its arguments."""
        kept = self._demand.get(tenant)
        if kept is None:
            self._demand[tenant] = kept = [0.0, now, weight]
        kept[0] = self._decayed(kept[0], kept[1], now) + cost
        kept[1], kept[2] = max(kept[1], now), weight
        return kept[0] > weight * self._level_at(now)

    def served(self, cost: float, *, now: float) -> None:
        """The policy started work of ``cost`` (finite, >= 0) units at ``now``."""
        check_slack(cost, "cost")
        check_now(now)
        self._serve(cost, now)

    def _serve(self, cost: float, now: float) -> None:
        """:meth:`served` for a caller that checked its arguments."""
        self._served = self._decayed(self._served, self._served_at, now) + cost
        self._served_at = max(self._served_at, now)

    def over(self, tenant: str, *, now: float) -> bool:
        """Whether ``tenant`` asks for more than its share at ``now``."""
        check_now(now)
        kept = self._demand.get(tenant)
        if kept is None:
            return False
        return self._decayed(kept[0], kept[1], now) > kept[2] * self._level_at(now)

    def level(self, *, now: float) -> float:
        """``L``: the share per unit of weight (decayed cost units; ``inf``
        while the engine keeps up with what is asked)."""
        check_now(now)
        return self._level_at(now)

    def _decayed(self, value: float, at: float, now: float) -> float:
        return value * math.exp(-(now - at) / self._window) if now > at else value

    def _level_at(self, now: float) -> float:
        if now - self._at < self._refresh:
            return self._level
        self._at = now
        served = self._decayed(self._served, self._served_at, now)
        normalized: list[tuple[float, float, float]] = []  # demand per weight, demand, weight
        total = 0.0
        for tenant, kept in list(self._demand.items()):
            demand = self._decayed(kept[0], kept[1], now)
            if demand < _NEGLIGIBLE:
                del self._demand[tenant]
                continue
            normalized.append((demand / kept[2], demand, kept[2]))
            total += demand
        self._level = math.inf
        if total > served > 0:  # nothing served yet: nothing to share out
            # Water-filling: the smallest demands are met in full, and the
            # level is where what is left, split by weight, falls below the next.
            normalized.sort()
            left, weights = served, sum(weight for _, _, weight in normalized)
            for per_weight, demand, weight in normalized:
                if per_weight * weights >= left:
                    self._level = left / weights
                    break
                left -= demand
                weights -= weight
        return self._level
