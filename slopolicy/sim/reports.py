"""Reports computed exactly from a simulation's records.

Definitions (``docs/simulator.md`` has the full list):

* **attainment** = attained / offered, where *offered* counts every request
  that arrived, refused and expired ones included, so a policy cannot raise
  its attainment by turning work away; a request attains iff it completed
  within its lane's targets (TTFT <= ``ttft_p95`` (else ``ttft_p99``),
  TPOT <= ``tpot_p95``, end-to-end <= ``e2e_p95``, its own p99 gap between
  tokens <= ``tbt_p99``; unset targets pass: one rule with the runtime's,
  :meth:`~slopolicy.core.slo.SLOTargets.attains`) with
  a full answer: a **degraded** request (its answer truncated or its model
  switched by the scheduler, :attr:`RequestRecord.degraded`) does not attain.
* **goodput** = attained / the workload's duration, **degraded goodput** =
  degraded requests within their targets / the same duration,
  **throughput** = completed / the same duration (requests per second), so
  every policy is divided by the same time.
* **TBT** per lane: the p99 and largest gap between two tokens of a
  request, and **stalls**, the gaps of at least the lane's stall threshold
  (``tbt_stall_s``, else ``tbt_p99_s``, else 0.2 s; :mod:`slopolicy.sim.gaps`).
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
from typing import TypedDict

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim.gaps import TBTSummary
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


class _Fields(TypedDict):
    """What lane, tenant and total reports share, from :meth:`_Counts.fields`."""

    offered: int
    completed: int
    rejected: int
    expired: int
    attained: int
    attainment: float | None
    goodput_rps: float
    degraded: int
    degraded_goodput_rps: float


@dataclass(frozen=True, slots=True)
class _Counts:
    offered: int
    completed: int
    rejected: int
    expired: int
    unfinished: int
    attained: int
    degraded: int
    degraded_attained: int

    @classmethod
    def of(cls, judged: Sequence[tuple[RequestRecord, bool]]) -> _Counts:
        """Counts over ``(record, within its targets)`` pairs."""
        counts = dict.fromkeys(SimOutcome, 0)
        attained = degraded = degraded_attained = 0
        for record, within in judged:
            counts[record.outcome] += 1
            if record.outcome is not SimOutcome.COMPLETED:
                continue
            if record.degraded:
                degraded += 1
                degraded_attained += within
            else:
                attained += within
        return cls(
            len(judged),
            counts[SimOutcome.COMPLETED],
            counts[SimOutcome.REJECTED],
            counts[SimOutcome.EXPIRED],
            counts[SimOutcome.UNFINISHED],
            attained,
            degraded,
            degraded_attained,
        )

    def fields(self, duration: float) -> _Fields:
        """The counts and rates over ``duration`` seconds every report has."""
        return _Fields(
            offered=self.offered,
            completed=self.completed,
            rejected=self.rejected,
            expired=self.expired,
            attained=self.attained,
            attainment=self.attained / self.offered if self.offered else None,
            goodput_rps=self.attained / duration,
            degraded=self.degraded,
            degraded_goodput_rps=self.degraded_attained / duration,
        )


@dataclass(frozen=True, slots=True)
class LaneReport:
    """One lane under one policy; latencies in seconds, rates per second.
    ``degraded`` counts completed requests whose answer was cut short or
    whose model was switched, ``degraded_goodput_rps`` those of them within
    the targets; ``tbt_stalls`` counts token gaps of at least the lane's
    stall threshold (0.2 s by default). ``expired_by`` counts the expired
    requests by what the scheduler last kept each back for at the front of
    the lane (:attr:`RequestRecord.held_by`: a
    :class:`~slopolicy.core.outcome.Hold` wire name, or ``behind``: it never
    reached the front); empty for a scheduler that does not say."""

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
    degraded: int = 0
    degraded_goodput_rps: float = 0.0
    tbt_p99_s: float | None = None
    tbt_max_s: float | None = None
    tbt_stalls: int = 0
    expired_by: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TenantReport:
    """One tenant under one policy (every lane together). ``preempted``
    counts the engine's preemptions (by recompute) of the tenant's
    requests: under overload, whose work the engine threw away."""

    tenant: str
    offered: int
    completed: int
    rejected: int
    expired: int
    attained: int
    attainment: float | None
    goodput_rps: float
    degraded: int = 0
    degraded_goodput_rps: float = 0.0
    preempted: int = 0


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
    degraded: int = 0
    degraded_goodput_rps: float = 0.0


def _lane(
    lane: str,
    judged: list[tuple[RequestRecord, bool]],
    targets: SLOTargets,
    duration: float,
    tbt: TBTSummary | None,
) -> LaneReport:
    counts = _Counts.of(judged)
    records = [record for record, _ in judged]
    ttfts = [t for r in records if (t := r.ttft) is not None]
    tpots = [t for r in records if (t := r.tpot) is not None]
    e2es = [t for r in records if (t := r.e2e) is not None]
    finishes = [r.finished_at for r in records if r.outcome is SimOutcome.COMPLETED]
    last_finish = max((t for t in finishes if t is not None), default=None)
    last_arrival = max(r.request.arrival for r in records)
    return LaneReport(
        lane=lane,
        targets=targets,
        **counts.fields(duration),
        unfinished=counts.unfinished,
        throughput_rps=counts.completed / duration,
        ttft_p50_s=quantile(ttfts, 0.50),
        ttft_p95_s=quantile(ttfts, 0.95),
        ttft_p99_s=quantile(ttfts, 0.99),
        tpot_p95_s=quantile(tpots, 0.95),
        e2e_p95_s=quantile(e2es, 0.95),
        drain_s=None if last_finish is None else max(0.0, last_finish - last_arrival),
        last_finish_s=last_finish,
        tbt_p99_s=None if tbt is None else tbt.p99_s,
        tbt_max_s=None if tbt is None else tbt.max_s,
        tbt_stalls=0 if tbt is None else tbt.stalls,
        expired_by=_expired_by(records),
    )


def _expired_by(records: Iterable[RequestRecord]) -> dict[str, int]:
    """Expired ``records`` counted by what held them (those that say), most first."""
    counts: dict[str, int] = {}
    for record in records:
        held = record.held_by
        if record.outcome is SimOutcome.EXPIRED and held is not None:
            counts[held] = counts.get(held, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _tenant(tenant: str, judged: list[tuple[RequestRecord, bool]], duration: float) -> TenantReport:
    return TenantReport(
        tenant=tenant,
        **_Counts.of(judged).fields(duration),
        preempted=sum(record.preemptions for record, _ in judged),
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
    tbt: Mapping[str, TBTSummary] | None = None,
) -> PolicyReport:
    """The report of one run: ``targets`` per lane (lanes missing from it have
    none), rates over ``duration`` seconds (> 0), ``tbt`` each lane's token
    gaps (:attr:`SimulationResult.tbt <slopolicy.sim.simulator.SimulationResult.tbt>`)."""
    duration = max(duration, 1e-9)
    none = SLOTargets()
    judged = [
        (
            r,
            r.outcome is SimOutcome.COMPLETED
            and targets.get(r.lane, none).attains(r.ttft, r.tpot, r.e2e, r.gaps, r.slow_gaps),
        )
        for r in records
    ]
    by_lane: dict[str, list[tuple[RequestRecord, bool]]] = {}
    by_tenant: dict[str, list[tuple[RequestRecord, bool]]] = {}
    for pair in judged:
        by_lane.setdefault(pair[0].lane, []).append(pair)
        by_tenant.setdefault(pair[0].request.tenant, []).append(pair)
    gaps = tbt or {}
    lanes = {
        lane: _lane(lane, found, targets.get(lane, SLOTargets()), duration, gaps.get(lane))
        for lane, found in by_lane.items()
    }
    tenants = {tenant: _tenant(tenant, found, duration) for tenant, found in by_tenant.items()}
    total = _Counts.of(judged)
    worst = min(tenants.values(), key=lambda t: (t.attainment or 0.0, t.tenant), default=None)
    return PolicyReport(
        name=name,
        duration_s=duration,
        end_s=end,
        **total.fields(duration),
        unfinished=total.unfinished,
        throughput_rps=total.completed / duration,
        jain_attainment=jain_index(t.attainment or 0.0 for t in tenants.values()),
        worst_tenant=None if worst is None else worst.tenant,
        worst_tenant_attainment=None if worst is None else worst.attainment,
        preemptions=preemptions,
        lanes=lanes,
        tenants=tenants,
        fallback=fallback,
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
