"""The core objects one :class:`~slopolicy.core.policy.Policy` is made of.

:meth:`Parts.build` checks a :class:`~slopolicy.core.specs.PolicySpec` and
builds its parts once; the policy's submit path, dispatcher and running path
each take the parts they work on from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.health.health import Health
from slopolicy.core.kv.ledger import KVReservation
from slopolicy.core.kv.shares import KVShares
from slopolicy.core.kv.turnover import Turnover
from slopolicy.core.lifecycle import Entry, PolicyStatistics
from slopolicy.core.policy.book import Book
from slopolicy.core.policy.reservations import Reservations
from slopolicy.core.queueing.counters import check_weight
from slopolicy.core.queueing.deadlines import Deadlines
from slopolicy.core.queueing.decode_pace import DecodePace
from slopolicy.core.queueing.demand import TenantDemand
from slopolicy.core.queueing.interference import PrefillInterference
from slopolicy.core.queueing.lateness import late_budget
from slopolicy.core.queueing.pacing import DispatchPace
from slopolicy.core.queueing.saturation import Saturation
from slopolicy.core.queueing.scheduler import LaneScheduler
from slopolicy.core.queueing.seats import Seats
from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.routing.router import LaneRouter
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
    at; ``stall_bounds``: those lanes' ``ttft_p99`` targets (seconds, where
    they have one), past which a started request with no first token is
    revoked while the engine preempts; ``turnover``: how fast ends free the
    pool's blocks, kept where dispatch reclaims room for a within-share head
    (``PolicySpec.reclaim``, with a share window), else ``None``."""

    router: LaneRouter
    tools: ToolPool
    health: Health
    kv: KVReservation
    reservations: Reservations
    quotas: TenantQuotas
    queues: LaneScheduler[Entry]
    seats: Seats
    pace: DispatchPace | None
    first_tokens: FirstTokenCheck
    decode_pace: DecodePace | None
    interference: PrefillInterference
    demand: TenantDemand | None
    saturation: Saturation | None
    kv_shares: KVShares | None
    tasks: TaskTable
    deadlines: Deadlines
    book: Book
    slo_bounds: Mapping[str, float]
    stall_bounds: Mapping[str, float]
    turnover: Turnover | None = None

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
        kv = KVReservation(
            spec.kv_blocks, spec.kv_block_size, reserves, follow_engine=spec.kv_follows_engine
        )
        quantile = spec.kv_output_quantile
        forecast = None if quantile is None else OutputForecast(lanes, quantile=quantile)
        slo_bounds: dict[str, float] = {}
        # The TTFT targets of those lanes: a request that cannot have its first
        # token by arrival + target (per the engine's learned TTFT) leaves then.
        ttft_bounds: dict[str, float] = {}
        late_budgets: dict[str, float] = {}  # the share of their first tokens those may lose
        stall_bounds: dict[str, float] = {}
        for lane in specs:
            targets = spec.targets.get(lane.name, SLOTargets())
            bound = targets.ttft_target if targets.ttft_target is not None else targets.e2e_p95
            if lane.slo_deadline and bound is not None:
                slo_bounds[lane.name] = bound
                if targets.ttft_p99 is not None:
                    stall_bounds[lane.name] = targets.ttft_p99
                quantile = targets.ttft_quantile
                if quantile is not None:
                    ttft_bounds[lane.name] = bound
                    late_budgets[lane.name] = late_budget(quantile)
        first_tokens = FirstTokenCheck(
            lanes, ttft_bounds, horizon=spec.prefill_horizon, budgets=late_budgets
        )
        tpot_bounds = {
            lane.name: t
            for lane in specs
            if (t := spec.targets.get(lane.name, SLOTargets()).tpot_p95) is not None
        }
        interference = PrefillInterference(
            lanes,
            {
                lane.name: t
                for lane in specs
                if (t := spec.targets.get(lane.name, SLOTargets()).ttft_target) is not None
            },
            first_tokens,
            {
                lane.name: lane.max_interference
                for lane in specs
                if lane.max_interference is not None
            },
        )
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
                # Across lanes, within the widest lane's slack, the head whose
                # latency target falls first goes first.
                lane_slack=max(lane.fair_slack for lane in specs),
                urgency=_Urgency(slo_bounds),
            ),
            seats=Seats(
                spec.max_running,
                {lane.name: lane.max_running for lane in specs},
                {lane.name: lane.seat_reserve for lane in specs},
            ),
            pace=spec.pace,
            first_tokens=first_tokens,
            decode_pace=DecodePace(tpot_bounds) if tpot_bounds else None,
            demand=None if spec.share_window is None else TenantDemand(spec.share_window),
            saturation=None if spec.share_window is None else Saturation(spec.share_window),
            kv_shares=None
            if spec.share_window is None
            else KVShares(spec.kv_blocks, spec.share_window),
            interference=interference,
            tasks=tasks,
            deadlines=Deadlines(lanes),
            book=book,
            slo_bounds=slo_bounds,
            stall_bounds=stall_bounds,
            turnover=Turnover(spec.share_window)
            if spec.reclaim and spec.share_window is not None
            else None,
        )

    def statistics(self, at: float) -> PolicyStatistics:
        """The snapshot :meth:`Policy.statistics <slopolicy.core.policy.Policy.statistics>`
        returns; the dispatch backlog read at ``at`` (monotonic seconds, at
        least the latest ``now`` seen), the TBT figures at the latest ``now``."""
        book, health, pace = self.book, self.health, self.pace
        state, _ = health.overload()
        ladder = health.ladder
        backlog = None if pace is None else 0.0 if at == -math.inf else pace._backlog(at)
        return PolicyStatistics(
            submitted=book.submitted,
            queued={lane.name: len(self.queues.queue(lane.name)) for lane in self.router.lanes},
            running=book.running,
            outcomes=dict(book.outcomes),
            kv=self.kv.statistics(),
            quotas=self.quotas.statistics(),
            overload=state,
            ladder_level=0 if ladder is None else ladder.level,
            dispatch_backlog=backlog,
            tbt_p99=health.tbt_p99(now=book.now),
            saturation=None if self.saturation is None else self.saturation._fraction(at),
            ttft_late_share={lane: late.share for lane, late in self.first_tokens.late.items()},
            tpot_late_share={}
            if self.decode_pace is None
            else {lane: late.share for lane, late in self.decode_pace.late.items()},
        )


class _Urgency:
    """A queued request's urgency across lanes: when its lane's latency
    target falls (arrival plus the lane's TTFT target, or its end-to-end
    target), ``inf`` for a lane without one (the lanes' counters and order
    decide between those)."""

    __slots__ = ("_bounds",)

    def __init__(self, bounds: Mapping[str, float]) -> None:
        self._bounds = dict(bounds)

    def __call__(self, entry: Entry) -> float:
        bound = self._bounds.get(entry.lane)
        return math.inf if bound is None else entry.arrival + bound
