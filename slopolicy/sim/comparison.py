"""Run ours and the baselines over one workload on one engine model, side by side.

Every policy sees the same requests and the same engine. Requests are
reported under the lane the policy config's router gives them (routing is
stateless, so the grouping is the same for every policy and matches the lane
ours queues them in), and judged against that lane's SLO targets.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from slopolicy.config import PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.errors import UsageError
from slopolicy.sim.baselines import lane_of
from slopolicy.sim.engine import EngineSpec
from slopolicy.sim.interface import Scheduler
from slopolicy.sim.ours import DEFAULT_SIGNALS, PolicyScheduler
from slopolicy.sim.policies import OURS, POLICIES, PolicySpec, make_scheduler, resolve_all
from slopolicy.sim.reports import PolicyReport, fallback_summary, report
from slopolicy.sim.simulator import Client, Progress, SimulationResult, simulate
from slopolicy.sim.workload import Workload

__all__ = (
    "OURS",
    "POLICIES",
    "Comparison",
    "check_workload",
    "classify",
    "compare",
    "lane_targets",
    "make_scheduler",
)

#: Told ``(policy name, fraction done)`` as each policy's run advances.
CompareProgress = Callable[[str, float], None]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The runs and reports of several policies over one workload."""

    workload: Workload
    engine: EngineSpec
    config: PolicyConfig
    results: Mapping[str, SimulationResult]
    reports: Mapping[str, PolicyReport]


def classify(workload: Workload, config: PolicyConfig) -> dict[str, str]:
    """The lane each request is reported under: where ``config`` routes it."""
    router = config.build_router(config.build_estimator(HeuristicCounter()))
    return {request.id: lane_of(router, request) for request in workload}


def lane_targets(config: PolicyConfig) -> dict[str, SLOTargets]:
    """Each lane's SLO targets."""
    return {lane.name: lane.slo.to_targets() for lane in config.lanes}


def evaluate(
    chosen: Scheduler,
    workload: Workload,
    engine: EngineSpec,
    config: PolicyConfig,
    *,
    lanes: Mapping[str, str] | None = None,
    report_every: float = 1.0,
    drain: float = 3600.0,
    client: Client | None = None,
    progress: Progress | None = None,
) -> tuple[SimulationResult, PolicyReport]:
    """Run one scheduler (ours, a baseline, or your own) over ``workload`` and
    report it against ``config``'s lanes and targets; ``lanes`` defaults to
    :func:`classify`. The building block of :func:`compare` and of property
    tests of custom policies."""
    targets = lane_targets(config)
    result = simulate(
        workload,
        chosen,
        engine,
        targets=targets,
        lanes=classify(workload, config) if lanes is None else lanes,
        report_every=report_every,
        drain=drain,
        client=client,
        progress=progress,
    )
    summary = None
    if isinstance(chosen, PolicyScheduler):
        moves = [(m.at, m.level, m.rung, m.state) for m in chosen.moves]
        summary = fallback_summary(moves, rungs=config.ladder.rungs, end=result.end)
    summary_report = report(
        chosen.name,
        result.records,
        targets,
        duration=workload.duration,
        end=result.end,
        preemptions=result.engine.preemptions,
        fallback=summary,
        tbt=result.tbt,
    )
    return result, summary_report


def check_workload(workload: Workload, config: PolicyConfig) -> None:
    """Raise :class:`UsageError` when ``workload`` hints lanes or names tiers
    that ``config`` does not define (every scheduler ranks requests by them)."""
    lanes = {lane.name for lane in config.lanes}
    unknown = sorted({r.lane for r in workload if r.lane is not None} - lanes)
    if unknown:
        raise UsageError(
            f"the workload hints lanes {unknown} that the policy does not define "
            f"(its lanes are {sorted(lanes)})"
        )
    tiers = sorted({r.tier for r in workload if r.tier is not None} - set(config.tiers))
    if tiers:
        raise UsageError(
            f"the workload names tiers {tiers} that the policy does not define "
            f"(its tiers are {sorted(config.tiers)})"
        )


def compare(
    workload: Workload,
    config: PolicyConfig,
    engine: EngineSpec,
    *,
    policies: Sequence[PolicySpec] = POLICIES,
    rpm_limit: int = 60,
    report_every: float = 1.0,
    drain: float = 3600.0,
    client: Client | None = None,
    signals: Collection[str] = DEFAULT_SIGNALS,
    engine_priority: bool = True,
    progress: CompareProgress | None = None,
) -> Comparison:
    """Run each of ``policies`` over ``workload`` on ``engine``: built-in
    names, import paths ``package.module:Name`` or your own schedulers (see
    :mod:`slopolicy.sim.policies`); results and reports are keyed by each
    scheduler's name. See the module doc and
    :func:`~slopolicy.sim.simulator.simulate`."""
    factories = resolve_all(
        policies, config, rpm_limit=rpm_limit, signals=signals, engine_priority=engine_priority
    )
    check_workload(workload, config)
    lanes = classify(workload, config)
    results: dict[str, SimulationResult] = {}
    reports: dict[str, PolicyReport] = {}
    for factory in factories:
        chosen, name = factory.first(), factory.name

        def tell(fraction: float, name: str = name) -> None:
            if progress is not None:
                progress(name, fraction)

        results[name], reports[name] = evaluate(
            chosen,
            workload,
            engine,
            config,
            lanes=lanes,
            report_every=report_every,
            drain=drain,
            client=client,
            progress=tell,
        )
    return Comparison(workload, engine, config, results, reports)
