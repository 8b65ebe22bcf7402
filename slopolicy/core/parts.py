"""The core objects one :class:`~slopolicy.core.policy.Policy` is made of.

:meth:`Parts.build` checks a :class:`~slopolicy.core.specs.PolicySpec` and
builds its parts once; the policy's submit path, dispatcher and running path
each take the parts they work on from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slopolicy.core.book import Book
from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.health.health import Health
from slopolicy.core.kv import KVReservation
from slopolicy.core.lifecycle import Entry
from slopolicy.core.queueing.counters import check_weight
from slopolicy.core.queueing.deadlines import Deadlines
from slopolicy.core.queueing.pacing import DispatchPace
from slopolicy.core.queueing.prefill import PrefillGate
from slopolicy.core.queueing.scheduler import LaneScheduler
from slopolicy.core.queueing.seats import Seats
from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.reservations import Reservations
from slopolicy.core.router import LaneRouter
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import CostModel
from slopolicy.core.specs import PolicySpec
from slopolicy.core.tasks.table import TaskTable
from slopolicy.core.tasks.trackers import TaskTrackers
from slopolicy.core.tools.pool import ToolPool
from slopolicy.errors import UsageError

__all__ = ("Parts",)


@dataclass(frozen=True, slots=True)
class Parts:
    """A policy's parts (the :class:`~slopolicy.core.policy.Policy` attributes
    of the same names), its book of live requests, and ``slo_bounds``: the
    latency bound (seconds) queued requests of a lane that asks for it expire
    at."""

    router: LaneRouter
    tools: ToolPool
    health: Health
    kv: KVReservation
    reservations: Reservations
    quotas: TenantQuotas
    queues: LaneScheduler[Entry]
    seats: Seats
    pace: DispatchPace | None
    prefill: dict[str, PrefillGate] | None
    first_tokens: FirstTokenCheck
    tasks: TaskTable
    deadlines: Deadlines
    book: Book
    slo_bounds: Mapping[str, float]

    @classmethod
    def build(cls, spec: PolicySpec, cost_model: CostModel | None) -> Parts:
        """Check ``spec`` (:class:`UsageError`) and build its parts."""
        if spec.max_running < 1:
            raise UsageError("max_running must be >= 1")
        for tier in spec.router.tiers.tiers.values():
            check_weight(tier.weight, f"tier {tier.name!r} weight")
        specs = spec.router.lanes
        lanes = [lane.name for lane in specs]
        tools = ToolPool(spec.tools)
        health = Health(
            {name: spec.targets.get(name, SLOTargets()) for name in lanes},
            watch_lane=spec.watch_lane or lanes[0],
            ladder=spec.ladder,
            evaluate_every=spec.evaluate_every,
            signal_max_age=spec.signal_max_age,
            max_tenants=spec.max_tracked_tenants,
            cost_model=cost_model,
            tool_signal=tools.signal,
        )
        reserves = {lane.name: lane.kv_reserve for lane in specs if lane.kv_reserve}
        kv = KVReservation(spec.kv_blocks, spec.kv_block_size, reserves)
        quantile = spec.kv_output_quantile
        forecast = None if quantile is None else OutputForecast(lanes, quantile=quantile)
        horizon = spec.prefill_horizon
        # Per lane, so work of one lane never holds another's starts back: an
        # engine that honours priorities computes the more urgent lane's
        # prompts first anyway.
        prefill = None if horizon is None else {name: PrefillGate(horizon) for name in lanes}
        slo_bounds: dict[str, float] = {}
        # The TTFT targets of those lanes: a request that cannot have its first
        # token by arrival + target (per the engine's learned TTFT) leaves then.
        ttft_bounds: dict[str, float] = {}
        for lane in specs:
            targets = spec.targets.get(lane.name, SLOTargets())
            bound = targets.ttft_target if targets.ttft_target is not None else targets.e2e_p95
            if lane.slo_deadline and bound is not None:
                slo_bounds[lane.name] = bound
                if targets.ttft_target is not None:
                    ttft_bounds[lane.name] = bound
        quotas, tasks = TenantQuotas(max_tenants=spec.max_tenants), TaskTable()
        book = Book(
            health=health,
            quotas=quotas,
            tasks=tasks,
            task_trackers=TaskTrackers(max_tenants=spec.max_tracked_tenants),
            first_lane=lanes[0],
        )
        return cls(
            router=spec.router,
            tools=tools,
            health=health,
            kv=kv,
            reservations=Reservations(kv, forecast),
            quotas=quotas,
            queues=LaneScheduler(
                [(lane.name, lane.weight, lane.queue_capacity) for lane in specs],
                slack={lane.name: lane.fair_slack for lane in specs},
            ),
            seats=Seats(
                spec.max_running,
                {lane.name: lane.max_running for lane in specs},
                {lane.name: lane.seat_reserve for lane in specs},
            ),
            pace=spec.pace,
            prefill=prefill,
            first_tokens=FirstTokenCheck(lanes, ttft_bounds),
            tasks=tasks,
            deadlines=Deadlines(lanes),
            book=book,
            slo_bounds=slo_bounds,
        )
