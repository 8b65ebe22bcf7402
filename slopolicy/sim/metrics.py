"""Reports computed exactly from a simulation's records.

Definitions (``docs/simulator.md`` has the full list):

* **attainment** = attained / offered, where *offered* counts every request
  that arrived, refused and expired ones included, so a policy cannot raise
  its attainment by turning work away; a request attains iff it completed
  within its lane's targets (TTFT <= ``ttft_p95`` (else ``ttft_p99``),
  TPOT <= ``tpot_p95``, end-to-end <= ``e2e_p95``; unset targets pass).
* **goodput** = attained / the workload's duration, **throughput** =
  completed / the same duration (requests per second), so every policy is
  divided by the same time.
* Latency quantiles interpolate linearly between order statistics; TTFT
  over requests with a first token, TPOT and end-to-end over completed ones.
* **Jain's index** over tenants' attainment: ``(Σx)² / (n·Σx²)``, 1 when
  every tenant attains alike (``None`` when no tenant attained anything).
* **drain** of a lane: seconds from its last arrival to its last completion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim.records import RequestRecord, SimOutcome

__all__ = (
    "FallbackSummary",
    "LaneReport",
    "PolicyReport",
    "TenantReport",
    "jain_index",
    "quantile",
    "report",
)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values``, interpolating linearly between
    order statistics (numpy's default); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index of ``values`` (1 = all equal), or ``None`` when
    there are none or all are 0."""
    found = list(values)
    squares = sum(v * v for v in found)
    if not found or squares == 0:
        return None
    return sum(found) ** 2 / (len(found) * squares)


@dataclass(frozen=True, slots=True)
class _Counts:
    offered: int
    completed: int
    rejected: int
    expired: int
    unfinished: int

    @classmethod
    def of(cls, records: Sequence[RequestRecord]) -> _Counts:
        counts = dict.fromkeys(SimOutcome, 0)
        for record in records:
            counts[record.outcome] += 1
        return cls(
            len(records),
            counts[SimOutcome.COMPLETED],
            counts[SimOutcome.REJECTED],
            counts[SimOutcome.EXPIRED],
            counts[SimOutcome.UNFINISHED],
        )


@dataclass(frozen=True, slots=True)
class LaneReport:
    """One lane under one policy; latencies in seconds, rates per second."""

    lane: str
    targets: SLOTargets
    offered: int
    completed: int
    rejected: int
    expired: int
    unfinished: int
    attained: int
    attainment: float | None
    goodput_rps: float
    throughput_rps: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    tpot_p95_s: float | None
    e2e_p95_s: float | None
    drain_s: float | None
    last_finish_s: float | None


@dataclass(frozen=True, slots=True)
class TenantReport:
    """One tenant under one policy (every lane together)."""

    tenant: str
    offered: int
    completed: int
    rejected: int
    expired: int
    attained: int
    attainment: float | None
    goodput_rps: float


@dataclass(frozen=True, slots=True)
class FallbackSummary:
    """What the fallback ladder did: activations per rung (climbs onto it),
    the highest level reached, seconds spent in each overload state, and every
    move as ``(time_s, level, rung, state)``."""

    activations: Mapping[str, int]
    max_level: int
    seconds_by_state: Mapping[str, float]
    timeline: tuple[tuple[float, int, str, str], ...]

    @property
    def climbs(self) -> int:
        """Moves up, over every rung."""
        return sum(self.activations.values())


@dataclass(frozen=True, slots=True)
class PolicyReport:
    """One policy over one workload: totals, then per lane and per tenant."""

    name: str
    duration_s: float
    end_s: float
    offered: int
    completed: int
    rejected: int
    expired: int
    unfinished: int
    attained: int
    attainment: float | None
    goodput_rps: float
    throughput_rps: float
    jain_attainment: float | None
    worst_tenant: str | None
    worst_tenant_attainment: float | None
    preemptions: int
    lanes: Mapping[str, LaneReport] = field(default_factory=dict)
    tenants: Mapping[str, TenantReport] = field(default_factory=dict)
    fallback: FallbackSummary | None = None


def _attains(record: RequestRecord, targets: SLOTargets) -> bool:
    if record.outcome is not SimOutcome.COMPLETED:
        return False
    return targets.attains(record.ttft, record.tpot, record.e2e)


def _lane(
    lane: str, records: list[RequestRecord], targets: SLOTargets, duration: float
) -> LaneReport:
    attained = sum(1 for r in records if _attains(r, targets))
    counts = _Counts.of(records)
    ttfts = [t for r in records if (t := r.ttft) is not None]
    tpots = [t for r in records if (t := r.tpot) is not None]
    e2es = [t for r in records if (t := r.e2e) is not None]
    finishes = [r.finished_at for r in records if r.outcome is SimOutcome.COMPLETED]
    last_finish = max((t for t in finishes if t is not None), default=None)
    last_arrival = max(r.request.arrival for r in records)
    return LaneReport(
        lane,
        targets,
        counts.offered,
        counts.completed,
        counts.rejected,
        counts.expired,
        counts.unfinished,
        attained,
        attained / counts.offered if counts.offered else None,
        attained / duration,
        counts.completed / duration,
        quantile(ttfts, 0.50),
        quantile(ttfts, 0.95),
        quantile(ttfts, 0.99),
        quantile(tpots, 0.95),
        quantile(e2es, 0.95),
        None if last_finish is None else max(0.0, last_finish - last_arrival),
        last_finish,
    )


def _tenant(
    tenant: str, records: list[RequestRecord], targets: Mapping[str, SLOTargets], duration: float
) -> TenantReport:
    attained = sum(1 for r in records if _attains(r, targets.get(r.lane, SLOTargets())))
    counts = _Counts.of(records)
    return TenantReport(
        tenant,
        counts.offered,
        counts.completed,
        counts.rejected,
        counts.expired,
        attained,
        attained / counts.offered,
        attained / duration,
    )


def report(
    name: str,
    records: Sequence[RequestRecord],
    targets: Mapping[str, SLOTargets],
    *,
    duration: float,
    end: float,
    preemptions: int = 0,
    fallback: FallbackSummary | None = None,
) -> PolicyReport:
    """The report of one run: ``targets`` per lane (lanes missing from it have
    none), rates over ``duration`` seconds (> 0)."""
    duration = max(duration, 1e-9)
    by_lane: dict[str, list[RequestRecord]] = {}
    by_tenant: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_lane.setdefault(record.lane, []).append(record)
        by_tenant.setdefault(record.request.tenant, []).append(record)
    lanes = {
        lane: _lane(lane, found, targets.get(lane, SLOTargets()), duration)
        for lane, found in by_lane.items()
    }
    tenants = {
        tenant: _tenant(tenant, found, targets, duration) for tenant, found in by_tenant.items()
    }
    attained = sum(lane.attained for lane in lanes.values())
    total = _Counts.of(records)
    worst = min(tenants.values(), key=lambda t: (t.attainment or 0.0, t.tenant), default=None)
    return PolicyReport(
        name,
        duration,
        end,
        total.offered,
        total.completed,
        total.rejected,
        total.expired,
        total.unfinished,
        attained,
        attained / total.offered if total.offered else None,
        attained / duration,
        total.completed / duration,
        jain_index(t.attainment or 0.0 for t in tenants.values()),
        None if worst is None else worst.tenant,
        None if worst is None else worst.attainment,
        preemptions,
        lanes,
        tenants,
        fallback,
    )


def fallback_summary(
    moves: Sequence[tuple[float, int, str, str]], *, rungs: Sequence[str], end: float
) -> FallbackSummary:
    """Summarise ladder ``moves`` ``(time_s, level, rung, state)`` over ``[0, end]``
    seconds; ``rungs`` in climbing order."""
    activations = dict.fromkeys(rungs, 0)
    seconds: dict[str, float] = {"normal": 0.0}
    level, state, since = 0, "normal", 0.0
    for at, to_level, rung, to_state in moves:
        if to_level > level:
            activations[rung] = activations.get(rung, 0) + 1
        seconds[state] = seconds.get(state, 0.0) + max(0.0, at - since)
        level, state, since = to_level, to_state, at
    seconds[state] = seconds.get(state, 0.0) + max(0.0, end - since)
    top = max((m[1] for m in moves), default=0)
    return FallbackSummary(activations, top, seconds, tuple(moves))
