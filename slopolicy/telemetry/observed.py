"""The observable gauges: one table of what each reports, and the callbacks that read it.

Each observable instrument is one :class:`Observed` row of :data:`OBSERVED`:
its name, kind, unit, description and the :class:`Observer` method that
reads it from every attached :class:`~slopolicy.telemetry.gauge_source.GaugeSource`
(on the gate's own thread the live policy, on any other the readings it last
published). :class:`~slopolicy.telemetry.instruments.Instruments` registers
the table once per meter provider.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

from slopolicy.core.ladder.overload import OverloadState
from slopolicy.core.lifecycle import PolicyStatistics
from slopolicy.core.tasks.trackers import TaskSnapshot
from slopolicy.telemetry import names as n
from slopolicy.telemetry.gauge_source import GaugeSource

__all__ = ("OBSERVED", "Attached", "Observed", "Observer")


class Attached(Protocol):
    """What the callbacks read: the gauge sources attached now (the
    :class:`~slopolicy.telemetry.instruments.Instruments`, reached weakly)."""

    @property
    def sources(self) -> tuple[GaugeSource, ...]: ...


class Observer:
    """The gauges' callbacks. Each reads only what it reports: on the loop
    thread that is the live policy, and the SLO snapshots cost a millisecond
    or so per lane."""

    __slots__ = ("_attached",)

    def __init__(self, attached: weakref.ref[Attached]) -> None:
        self._attached = attached

    def _sources(self) -> tuple[GaugeSource, ...]:
        attached = self._attached()
        return () if attached is None else attached.sources

    def _statistics(self) -> Iterator[tuple[GaugeSource, PolicyStatistics]]:
        for source in self._sources():
            statistics = source.statistics()
            if statistics is not None:
                yield source, statistics

    def kv_utilization(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            kv = statistics.kv
            ledger = {**source.attributes, n.KV_SOURCE: "ledger"}
            yield Observation(kv.used_blocks / kv.num_blocks, ledger)
            if kv.engine_used_blocks is not None:
                engine = {**source.attributes, n.KV_SOURCE: "engine"}
                yield Observation(kv.engine_used_blocks / kv.num_blocks, engine)

    def kv_usage(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            used = statistics.kv.used_by_lane
            for lane in statistics.queued:  # every lane, holding blocks or not
                yield Observation(used.get(lane, 0), {**source.attributes, n.LANE: lane})

    def queue_size(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_lane(lambda statistics: statistics.queued)

    def overload_state(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            for state in OverloadState:
                value = 1 if state is statistics.overload else 0
                yield Observation(value, {**source.attributes, n.STATE: state.value})

    def ladder_level(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            yield Observation(statistics.ladder_level, source.attributes)

    def dispatch_backlog(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            if statistics.dispatch_backlog is not None:
                yield Observation(statistics.dispatch_backlog, source.attributes)

    def saturation(self, options: CallbackOptions) -> Iterable[Observation]:
        for source, statistics in self._statistics():
            if statistics.saturation is not None:
                yield Observation(statistics.saturation, source.attributes)

    def ttft_late_share(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_lane(lambda statistics: statistics.ttft_late_share)

    def tpot_late_share(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_lane(lambda statistics: statistics.tpot_late_share)

    def _per_lane(
        self, read: Callable[[PolicyStatistics], Mapping[str, float]]
    ) -> Iterator[Observation]:
        """One observation per lane of what ``read`` takes from the statistics."""
        for source, statistics in self._statistics():
            for lane, value in read(statistics).items():
                yield Observation(value, {**source.attributes, n.LANE: lane})

    def attainment(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in self._sources():
            for lane in source.lanes():
                if lane.attainment is not None:  # nothing eligible in the window: no value
                    yield Observation(lane.attainment, {**source.attributes, n.LANE: lane.lane})

    def task_completion(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_task_lane(lambda lane: lane.completion_rate)

    def task_duration(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._per_task_lane(lambda lane: lane.e2e_p95)

    def _per_task_lane(self, read: Callable[[TaskSnapshot], float | None]) -> Iterator[Observation]:
        for source in self._sources():
            for lane in source.tasks():
                value = read(lane)
                if value is not None:  # no task ended (completed) in the window: no value
                    yield Observation(value, {**source.attributes, n.LANE: lane.lane})

    def goodput(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in self._sources():
            for lane in source.lanes():
                yield Observation(lane.goodput, {**source.attributes, n.LANE: lane.lane})


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed:
    """An observable instrument: its name, kind, the :class:`Observer` method
    that reads it, its unit and description."""

    name: str
    kind: Literal["gauge", "up_down_counter"]
    read: Callable[[Observer, CallbackOptions], Iterable[Observation]]
    unit: str
    description: str


#: The observable instruments, each read by one callback.
OBSERVED = (
    Observed(
        name=n.KV_UTILIZATION,
        kind="gauge",
        read=Observer.kv_utilization,
        unit="1",
        description="Fraction of the KV block pool in use: the policy's ledger, and "
        "the engine's own report while it is fresh.",
    ),
    Observed(
        name=n.KV_USAGE,
        kind="up_down_counter",
        read=Observer.kv_usage,
        unit="{block}",
        description="KV blocks the policy's ledger holds, by lane.",
    ),
    Observed(
        name=n.QUEUE_SIZE,
        kind="up_down_counter",
        read=Observer.queue_size,
        unit="{request}",
        description="Requests waiting in each lane's queue.",
    ),
    Observed(
        name=n.OVERLOAD_STATE,
        kind="gauge",
        read=Observer.overload_state,
        unit="1",
        description="1 for the current overload state, 0 for the others.",
    ),
    Observed(
        name=n.LADDER_LEVEL,
        kind="gauge",
        read=Observer.ladder_level,
        unit="1",
        description="The fallback ladder's level: 0 is normal, k means rungs 1..k are on.",
    ),
    Observed(
        name=n.SLO_ATTAINMENT,
        kind="gauge",
        read=Observer.attainment,
        unit="1",
        description="Share of eligible requests over the SLO window that completed "
        "within every target of their lane.",
    ),
    Observed(
        name=n.SLO_GOODPUT,
        kind="gauge",
        read=Observer.goodput,
        unit="{request}/s",
        description="Requests per second over the SLO window that attained their lane's SLO.",
    ),
    Observed(
        name=n.TASK_COMPLETION,
        kind="gauge",
        read=Observer.task_completion,
        unit="1",
        description="Share of agent tasks that ended in the task window (ten minutes) "
        "that completed: every turn, by the task's deadline.",
    ),
    Observed(
        name=n.TASK_DURATION_P95,
        kind="gauge",
        read=Observer.task_duration,
        unit="s",
        description="p95 of completed agent tasks' end-to-end time in the task window.",
    ),
    Observed(
        name=n.DISPATCH_BACKLOG,
        kind="gauge",
        read=Observer.dispatch_backlog,
        unit="{cost}",
        description="Cost units started ahead of the engine's dispatch rate: at most "
        "the burst (plus one request) while it paces; only with a dispatch rate set.",
    ),
    Observed(
        name=n.ENGINE_SATURATION,
        kind="gauge",
        read=Observer.saturation,
        unit="1",
        description="Part of the recent time (decayed over engine.share_window_s) the "
        "engine held a startable request back: every seat taken, or a queued head "
        "that did not fit the KV ledger or the prefill budget; only with a share window.",
    ),
    Observed(
        name=n.TTFT_LATE_SHARE,
        kind="gauge",
        read=Observer.ttft_late_share,
        unit="1",
        description="Share of a lane's first tokens past its TTFT target, weighted over the "
        "last half minute: once the late ones pass what the target's quantile allows by a "
        "whole one, queued requests are given up on by the predicted TTFT, not the "
        "optimistic one; only for lanes with a TTFT deadline.",
    ),
    Observed(
        name=n.TPOT_LATE_SHARE,
        kind="gauge",
        read=Observer.tpot_late_share,
        unit="1",
        description="Share of a lane's completed answers past its TPOT target, weighted over "
        "the last half minute: once the late ones pass what the target's quantile allows by "
        "a whole one, a start waits while its prefill would leave more than that share of "
        "the lane's decoding requests behind their pace; only for lanes with a TPOT target.",
    ),
)
