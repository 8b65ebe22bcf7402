"""Comparisons and capacity sweeps as JSON-ready data (schemas
``slopolicy.sim/2`` and ``slopolicy.sweep/1``, documented in
``docs/simulator.md``). Times are seconds, rates requests per second,
attainments fractions 0-1; a value that does not exist (a percentile of no
requests) is ``null``."""

from __future__ import annotations

from typing import Any

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim.capacity import STEP
from slopolicy.sim.comparison import Comparison
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.offered_load import Load
from slopolicy.sim.reports import FallbackSummary, LaneReport, PolicyReport, TenantReport
from slopolicy.sim.sweep import NoHarm, Sweep

__all__ = ("SCHEMA", "SWEEP_SCHEMA", "sweep_to_json", "to_json")

#: The schema name written into every report (2: goodput counts full answers
#: only, degraded goodput and TBT beside it).
SCHEMA = "slopolicy.sim/2"
#: The schema name of a capacity sweep.
SWEEP_SCHEMA = "slopolicy.sweep/1"


def to_json(
    comparison: Comparison, *, load: Load | None = None, description: str = ""
) -> dict[str, Any]:
    """The whole comparison as plain data (``json.dumps`` writes it as is)."""
    workload = comparison.workload
    streams: dict[str, int] = {}
    for request in workload:
        streams[request.stream] = streams.get(request.stream, 0) + 1
    return {
        "schema": SCHEMA,
        "scenario": {
            "name": workload.name,
            "description": description,
            "requests": len(workload),
            "duration_s": workload.duration,
            "tenants": len(workload.tenants),
            "streams": streams,
            "bursts": sorted(workload.bursts),
            "engine": _engine(comparison.engine),
            "load_outside_bursts": None if load is None else _load(load),
        },
        "policies": {name: _policy(report) for name, report in comparison.reports.items()},
    }


def _engine(spec: EngineSpec) -> dict[str, Any]:
    profile = spec.profile
    return {
        "profile": profile.name,
        "t_cpu_s": profile.t_cpu,
        "max_num_seqs": spec.max_num_seqs,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "long_prefill_token_threshold": spec.long_prefill_token_threshold,
        "block_size": spec.block_size,
        "num_blocks": spec.blocks,
        "max_model_len": spec.model_len,
    }


def _load(load: Load) -> dict[str, Any]:
    return {
        "rate_rps": load.rate_rps,
        "capacity_rps": load.capacity_rps,
        "load": load.load,
        "requests": load.requests,
    }


def _policy(report: PolicyReport) -> dict[str, Any]:
    return {
        "goodput_rps": report.goodput_rps,
        "degraded_goodput_rps": report.degraded_goodput_rps,
        "throughput_rps": report.throughput_rps,
        "attainment": report.attainment,
        "offered": report.offered,
        "completed": report.completed,
        "rejected": report.rejected,
        "expired": report.expired,
        "unfinished": report.unfinished,
        "attained": report.attained,
        "degraded": report.degraded,
        "jain_attainment": report.jain_attainment,
        "worst_tenant": report.worst_tenant,
        "worst_tenant_attainment": report.worst_tenant_attainment,
        "preemptions": report.preemptions,
        "end_s": report.end_s,
        "fallback": None if report.fallback is None else _fallback(report.fallback),
        "lanes": {name: _lane(lane) for name, lane in report.lanes.items()},
        "tenants": {name: _tenant(tenant) for name, tenant in report.tenants.items()},
    }


def _targets(targets: SLOTargets) -> dict[str, Any]:
    return {
        "ttft_p95_s": targets.ttft_p95,
        "ttft_p99_s": targets.ttft_p99,
        "tpot_p95_s": targets.tpot_p95,
        "e2e_p95_s": targets.e2e_p95,
        "tbt_p99_s": targets.tbt_p99,
    }


def _lane(lane: LaneReport) -> dict[str, Any]:
    return {
        "offered": lane.offered,
        "completed": lane.completed,
        "rejected": lane.rejected,
        "expired": lane.expired,
        "unfinished": lane.unfinished,
        "attained": lane.attained,
        "degraded": lane.degraded,
        "attainment": lane.attainment,
        "goodput_rps": lane.goodput_rps,
        "degraded_goodput_rps": lane.degraded_goodput_rps,
        "throughput_rps": lane.throughput_rps,
        "ttft_p50_s": lane.ttft_p50_s,
        "ttft_p95_s": lane.ttft_p95_s,
        "ttft_p99_s": lane.ttft_p99_s,
        "tpot_p95_s": lane.tpot_p95_s,
        "tbt_p99_s": lane.tbt_p99_s,
        "tbt_max_s": lane.tbt_max_s,
        "tbt_stalls": lane.tbt_stalls,
        "expired_by": dict(lane.expired_by),
        "e2e_p95_s": lane.e2e_p95_s,
        "drain_s": lane.drain_s,
        "last_finish_s": lane.last_finish_s,
        "targets": _targets(lane.targets),
    }


def _tenant(tenant: TenantReport) -> dict[str, Any]:
    return {
        "offered": tenant.offered,
        "completed": tenant.completed,
        "rejected": tenant.rejected,
        "expired": tenant.expired,
        "attained": tenant.attained,
        "degraded": tenant.degraded,
        "attainment": tenant.attainment,
        "goodput_rps": tenant.goodput_rps,
        "degraded_goodput_rps": tenant.degraded_goodput_rps,
        "preempted": tenant.preempted,
    }


def _fallback(summary: FallbackSummary) -> dict[str, Any]:
    return {
        "activations": dict(summary.activations),
        "climbs": summary.climbs,
        "max_level": summary.max_level,
        "seconds_by_state": dict(summary.seconds_by_state),
        "timeline": [
            {"t_s": at, "level": level, "rung": rung, "state": state}
            for at, level, rung, state in summary.timeline
        ],
    }


def sweep_to_json(sweep: Sweep) -> dict[str, Any]:
    """A capacity sweep as plain data (schema :data:`SWEEP_SCHEMA`)."""
    return {
        "schema": SWEEP_SCHEMA,
        "workload": {"name": sweep.workload, "requests": sweep.requests},
        "engine": _engine(sweep.engine),
        "target": sweep.target,
        "grid_step": STEP,
        "refine": sweep.refine,
        "limit": sweep.limit,
        "reference": sweep.reference,
        "policies": {
            name: {
                "capacity": {
                    "scale": policy.capacity.scale,
                    "bound": policy.capacity.bound,
                    "low": policy.capacity.low,
                    "high": policy.capacity.high,
                },
                "capacity_of_limit": policy.capacity.scale / sweep.limit,
                "no_harm": _no_harm(sweep.no_harm.get(name)),
                "points": [
                    {
                        "scale": point.scale,
                        "attainment": point.attainment,
                        "goodput_rps": point.goodput_rps,
                        "degraded_goodput_rps": point.degraded_goodput_rps,
                        "coarse": point.coarse,
                    }
                    for point in policy.points
                ],
            }
            for name, policy in sweep.policies.items()
        },
    }


def _no_harm(found: NoHarm | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {"worst": found.worst, "at": found.at, "low": found.low, "high": found.high}
