"""Capacity sweeps: each policy's attainment against rate scale, its goodput
capacity, and the limit, on one workload (``slopolicy simulate ... --sweep``).

The workload is replayed at rate scales on the coarse grid of
:mod:`slopolicy.sim.capacity` (√2 apart) and bisection points near each
policy's knee; each run is a fresh scheduler over the whole workload,
compressed in time by the scale. The reference's walk starts at half the
:func:`~slopolicy.sim.offered_load.limit`, every other policy's at the low end of the
no-harm range (a quarter of the limit without a reference); a walk goes down
to 1/32 of the limit at most (a policy that misses there is reported as below
it: its capacity is under 3% of what the engine can serve, and runs at such
rates take long) and up to 4x.

**No harm** (against ``reference``, FCFS by default): on the coarse grid
points from a quarter of the reference's capacity up to it, the worst of a
policy's attainment minus the reference's. Every policy is run at all of
those points, so the check does not depend on where its own walk stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from slopolicy.config import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim.capacity import REFINE, Capacity, find_capacity, grid_index, grid_point
from slopolicy.sim.comparison import classify, evaluate
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.offered_load import limit
from slopolicy.sim.ours import DEFAULT_SIGNALS
from slopolicy.sim.policies import POLICIES, PolicyFactory, PolicySpec, resolve_all
from slopolicy.sim.simulator import Client
from slopolicy.sim.workload import Workload

__all__ = ("NoHarm", "PolicySweep", "Sweep", "SweepPoint", "SweepProgress", "sweep")

#: Told ``(policy name, rate scale, attainment)`` after each run.
SweepProgress = Callable[[str, float, float], None]


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One run: the rate scale, attainment (0-1), goodput and degraded
    goodput (requests per second), and whether the scale is on the coarse grid."""

    scale: float
    attainment: float
    goodput_rps: float
    degraded_goodput_rps: float
    coarse: bool


@dataclass(frozen=True, slots=True)
class PolicySweep:
    """One policy's capacity and every run it took, by rate scale."""

    name: str
    capacity: Capacity
    points: tuple[SweepPoint, ...]

    def attainment(self, scale: float) -> float | None:
        """Attainment at ``scale``, if it was run there."""
        for point in self.points:
            if point.scale == scale:
                return point.attainment
        return None


@dataclass(frozen=True, slots=True)
class NoHarm:
    """The worst (lowest) attainment minus the reference's over the coarse
    grid points in ``[low, high]`` (``None`` without such points), at ``at``."""

    worst: float | None
    at: float | None
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Sweep:
    """A capacity sweep of several policies over one workload; see the module doc."""

    workload: str
    requests: int
    engine: EngineSpec
    target: float
    refine: int
    limit: float
    reference: str | None
    policies: Mapping[str, PolicySweep]
    no_harm: Mapping[str, NoHarm]

    @property
    def grid(self) -> tuple[float, ...]:
        """The coarse grid points any policy was run at, ascending."""
        return tuple(
            sorted({p.scale for s in self.policies.values() for p in s.points if p.coarse})
        )


class _Runner:
    """Runs and caches ``(policy, scale)``."""

    def __init__(
        self,
        workload: Workload,
        config: PolicyConfig,
        engine: EngineSpec,
        drain: float,
        client: Client | None,
        progress: SweepProgress | None,
    ) -> None:
        self.workload, self.config, self.engine = workload, config, engine
        self.drain, self.client, self.progress = drain, client, progress
        self.lanes = classify(workload, config)
        self.points: dict[str, dict[float, SweepPoint]] = {}
        self._scaled: dict[float, Workload] = {}

    def attainment(self, factory: PolicyFactory, scale: float) -> float:
        found = self.points.setdefault(factory.name, {})
        if scale not in found:
            if scale not in self._scaled:
                self._scaled[scale] = self.workload.scaled(scale)
            _, report = evaluate(
                factory.make(),
                self._scaled[scale],
                self.engine,
                self.config,
                lanes=self.lanes,
                drain=self.drain,
                client=self.client,
            )
            coarse = grid_point(grid_index(scale)) == scale
            found[scale] = SweepPoint(
                scale,
                report.attainment or 0.0,
                report.goodput_rps,
                report.degraded_goodput_rps,
                coarse,
            )
            if self.progress is not None:
                self.progress(factory.name, scale, found[scale].attainment)
        return found[scale].attainment


def sweep(
    workload: Workload,
    config: PolicyConfig,
    engine: EngineSpec,
    *,
    policies: Sequence[PolicySpec] = POLICIES,
    target: float = 0.9,
    refine: int = REFINE,
    reference: str | None = "fcfs",
    rpm_limit: int = 60,
    drain: float = 3600.0,
    client: Client | None = None,
    signals: Collection[str] = DEFAULT_SIGNALS,
    engine_priority: bool = True,
    progress: SweepProgress | None = None,
) -> Sweep:
    """Sweep ``policies`` (as :func:`~slopolicy.sim.comparison.compare` takes
    them) over ``workload`` at scaled rates on ``engine``; see the module doc.
    ``reference`` names the policy the no-harm check compares with (skipped
    when it is not among ``policies``)."""
    if not 0 < target <= 1:
        raise UsageError(f"target must be in (0, 1], got {target!r}")
    factories = resolve_all(
        policies, config, rpm_limit=rpm_limit, signals=signals, engine_priority=engine_priority
    )
    ceiling = limit(workload, engine, target=target)
    runner = _Runner(workload, config, engine, drain, client, progress)
    lowest, highest = grid_index(ceiling / 32), grid_index(ceiling * 4) + 1
    capacities: dict[str, Capacity] = {}

    def run(factory: PolicyFactory, begin: int) -> None:
        capacities[factory.name], _ = find_capacity(
            lambda scale: runner.attainment(factory, scale),
            start=begin,
            lowest=min(lowest, begin),
            highest=highest,
            target=target,
            refine=refine,
        )

    ordered = sorted(factories, key=lambda f: f.name != reference)
    span: tuple[int, int] | None = None
    for factory in ordered:
        if span is not None:
            begin = span[0]  # run there anyway
        else:
            begin = grid_index(ceiling / (2 if factory.name == reference else 4))
        run(factory, begin)
        if factory.name == reference:
            span = _no_harm_span(capacities[factory.name])
        if span is not None:
            for index in range(span[0], span[1] + 1):
                runner.attainment(factory, grid_point(index))
    swept = {
        f.name: PolicySweep(
            f.name,
            capacities[f.name],
            tuple(sorted(runner.points[f.name].values(), key=lambda p: p.scale)),
        )
        for f in factories
    }
    no_harm = {} if span is None else _no_harm(swept, reference, span)
    return Sweep(
        workload.name,
        len(workload),
        engine,
        target,
        refine,
        ceiling,
        reference if span is not None else None,
        swept,
        no_harm,
    )


def _no_harm_span(capacity: Capacity) -> tuple[int, int] | None:
    """Coarse grid indices from a quarter of ``capacity`` up to it."""
    if capacity.bound == "below":
        return None
    low = grid_index(capacity.scale / 4)
    if grid_point(low) < capacity.scale / 4 * (1 - 1e-9):
        low += 1
    high = grid_index(capacity.scale)
    return (low, high) if low <= high else None


def _no_harm(
    swept: Mapping[str, PolicySweep], reference: str | None, span: tuple[int, int]
) -> dict[str, NoHarm]:
    base = swept[str(reference)]
    scales = [grid_point(i) for i in range(span[0], span[1] + 1)]
    found: dict[str, NoHarm] = {}
    for name, policy in swept.items():
        if name == reference:
            continue
        diffs = []
        for scale in scales:
            mine, theirs = policy.attainment(scale), base.attainment(scale)
            if mine is not None and theirs is not None:
                diffs.append((mine - theirs, scale))
        worst = min(diffs, default=None)
        found[name] = NoHarm(
            None if worst is None else worst[0],
            None if worst is None else worst[1],
            scales[0],
            scales[-1],
        )
    return found
