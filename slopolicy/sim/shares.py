"""Who is within their fair share, and how they fare: the in-share check.

Under overload a fair policy should keep the SLOs of the tenants that ask for
no more than their fair share of the engine, and let the tenants above it
absorb the shedding. The share is max-min fair (water-filling) in the units
that cost the engine, tokens (prompt plus output, as :mod:`slopolicy.sim.offered_load`
counts them): every tenant asking for less than the water level gets what it
asks, the others the level, and the levels add up to the engine's saturated
cost throughput for the workload's mix (:func:`~slopolicy.sim.offered_load.saturated_cost_rate`).

:func:`in_share` names the tenants of a workload within their share, and
:func:`in_share_attainment` reports their attainment from a policy's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.engine import EngineSpec
from slopolicy.sim.offered_load import request_cost, saturated_cost_rate
from slopolicy.sim.reports import PolicyReport
from slopolicy.sim.workload import Workload

__all__ = ("InShare", "fair_shares", "in_share", "in_share_attainment")


def fair_shares(demands: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair shares of ``capacity`` among ``demands`` (same units, e.g.
    tokens per second): each gets ``min(demand, level)``, the level set so the
    shares use the whole capacity, or every demand when they fit."""
    if not capacity > 0:
        raise UsageError(f"capacity must be > 0, got {capacity!r}")
    if any(not d >= 0 for d in demands.values()):
        raise UsageError("demands must be >= 0")
    shares: dict[str, float] = {}
    left, waiting = capacity, sorted(demands.items(), key=lambda item: item[1])
    while waiting:
        level = left / len(waiting)
        tenant, demand = waiting[0]
        if demand > level:  # every demand from here on is above the level
            shares.update((name, level) for name, _ in waiting)
            break
        shares[tenant] = demand
        left -= demand
        waiting.pop(0)
    return shares


@dataclass(frozen=True, slots=True)
class InShare:
    """The tenants within their max-min share at a rate, and what they attained.

    Attributes:
        tenants: the tenants whose demand is within their share.
        offered: their requests.
        attained: of those, the ones that attained (``None`` before a report).
        attainment: ``attained / offered`` (``None`` with nothing offered).
    """

    tenants: frozenset[str]
    offered: int
    attained: int | None = None

    @property
    def attainment(self) -> float | None:
        """``attained / offered``, or ``None``."""
        if self.attained is None or not self.offered:
            return None
        return self.attained / self.offered


def in_share(workload: Workload, engine: EngineSpec, *, sample: int = 2000) -> InShare:
    """The tenants of ``workload`` (at its own rate: scale it first) whose token
    demand is within their max-min share of what ``engine`` serves of its mix."""
    if not len(workload) or workload.duration <= 0:
        raise UsageError("the in-share check needs requests over a positive duration")
    demands: dict[str, float] = {}
    for request in workload:
        demands[request.tenant] = demands.get(request.tenant, 0.0) + request_cost(request)
    rates = {tenant: cost / workload.duration for tenant, cost in demands.items()}
    shares = fair_shares(rates, saturated_cost_rate(workload.requests, engine, sample=sample))
    # A tenant whose demand equals its share is within it (float sums).
    tenants = frozenset(t for t, rate in rates.items() if rate <= shares[t] * (1 + 1e-9))
    offered = sum(1 for request in workload if request.tenant in tenants)
    return InShare(tenants, offered)


def in_share_attainment(found: InShare, report: PolicyReport) -> InShare:
    """``found`` with what its tenants attained under ``report``'s policy."""
    attained = sum(
        tenant.attained for name, tenant in report.tenants.items() if name in found.tenants
    )
    return InShare(found.tenants, found.offered, attained)
