"""The instruments, made once per meter provider, and the gauges' callbacks.

Instruments are shared by every :class:`~slopolicy.telemetry.Telemetry` on
the same meter provider. The SDK identifies an instrument by name, kind, unit
and description and hands a second registration the first one, dropping the
second one's callbacks, so observable gauges registered per ``Telemetry``
would silently report only the first gate. Here each provider gets one set of
instruments whose callbacks walk every attached :class:`GaugeSource`.

Thread safety: readers may collect from their own thread (the SDK's
``PeriodicExportingMetricReader``, the Prometheus HTTP server), while the
policy is sans-IO and owned by its gate's event loop. A callback running on
the gate's own thread reads the policy directly; on any other thread it reads
the last :class:`Readings` the gate's loop published (see
:mod:`slopolicy.telemetry.gauge_source` and
:meth:`slopolicy.telemetry.Recorder.watch`), never the live policy.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from slopolicy.core.ladder.overload import OverloadState
from slopolicy.core.lifecycle import PolicyStatistics
from slopolicy.core.tasks.trackers import TaskSnapshot
from slopolicy.telemetry import names as n
from slopolicy.telemetry.gauge_source import GaugeSource, Readings

__all__ = ("GaugeSource", "Instruments", "Readings", "instruments_for")

SCOPE = "slopolicy"


class Instruments:
    """Every slopolicy instrument on one meter, and the gauge sources it reports."""

    __slots__ = (
        "__weakref__",
        "active",
        "admissions",
        "applied",
        "duration",
        "outcomes",
        "output_tokens",
        "phase",
        "prompt_tokens",
        "queue_wait",
        "sources",
        "stalls",
        "task_duration",
        "tbt",
        "token_usage",
        "tool_calls",
        "tool_duration",
        "tool_wait",
        "tpot",
        "transitions",
        "ttft",
    )

    def __init__(self, meter: Meter) -> None:
        histogram = meter.create_histogram
        self.ttft = histogram(
            n.TTFT,
            unit="s",
            description="Time from arrival at the gate to the first output token, "
            "queueing included, for requests that completed.",
            explicit_bucket_boundaries_advisory=n.TTFT_BUCKETS,
        )
        self.tpot = histogram(
            n.TPOT,
            unit="s",
            description="Time per output token after the first, for completed requests "
            "with at least two output tokens.",
            explicit_bucket_boundaries_advisory=n.TPOT_BUCKETS,
        )
        self.tbt = histogram(
            n.TBT,
            unit="s",
            description="Time between two chunks of output of a stream (a chunk counts "
            "once however many tokens it carries), by lane.",
            explicit_bucket_boundaries_advisory=n.TBT_BUCKETS,
        )
        self.stalls = meter.create_counter(
            n.STALLS,
            unit="{gap}",
            description="Gaps between chunks of output of at least the lane's stall "
            "threshold (tbt_stall_s, else tbt_p99_s, else 0.2 s).",
        )
        self.duration = histogram(
            n.REQUEST_DURATION,
            unit="s",
            description="Time from arrival at the gate to the end of the request, for every "
            "accepted request; error.type is set unless it completed.",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.token_usage = histogram(
            n.TOKEN_USAGE,
            unit="{token}",
            description="Prompt (input) and generated (output) tokens of each request the "
            "engine ran.",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self.prompt_tokens = histogram(
            n.PROMPT_TOKENS,
            unit="{token}",
            description="Prompt length of each submitted request whose length is known, "
            "by the decision taken.",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self.output_tokens = histogram(
            n.OUTPUT_TOKENS,
            unit="{token}",
            description="Tokens generated for each request the engine ran, by outcome.",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self.queue_wait = histogram(
            n.QUEUE_WAIT,
            unit="s",
            description="Time a request waited in its lane's queue, by how it left the queue.",
            explicit_bucket_boundaries_advisory=n.LATENCY_BUCKETS,
        )
        self.phase = histogram(
            n.PHASE_DURATION,
            unit="s",
            description="Time a request spent in each engine phase: schedule, prefill, "
            "transfer (the TTFT stages after the queue) and decode.",
            explicit_bucket_boundaries_advisory=n.LATENCY_BUCKETS,
        )
        self.tool_wait = histogram(
            n.TOOL_WAIT,
            unit="s",
            description="Time a tool call (gate.tool) waited for its slot, calls that got one.",
            explicit_bucket_boundaries_advisory=n.LATENCY_BUCKETS,
        )
        self.tool_duration = histogram(
            n.TOOL_DURATION,
            unit="s",
            description="Time a tool call ran holding its slot, by how it ended.",
            explicit_bucket_boundaries_advisory=n.LATENCY_BUCKETS,
        )
        self.task_duration = histogram(
            n.TASK_DURATION,
            unit="s",
            description="End-to-end time of each agent task as it ends (first turn's admission "
            "to its end), by lane, tenant and outcome: completed, failed or abandoned.",
            explicit_bucket_boundaries_advisory=n.LATENCY_BUCKETS,
        )
        self.tool_calls = meter.create_counter(
            n.TOOL_CALLS,
            unit="{call}",
            description="Tool calls by how they ended (ok, error, timeout, cancelled) "
            "or the reason they were refused.",
        )
        self.admissions = meter.create_counter(
            n.ADMISSIONS,
            unit="{request}",
            description="Admission decisions: admit, demote, defer or reject, with the reason.",
        )
        self.outcomes = meter.create_counter(
            n.OUTCOMES,
            unit="{request}",
            description="Requests ended, by terminal outcome.",
        )
        self.active = meter.create_up_down_counter(
            n.ACTIVE,
            unit="{request}",
            description="Requests running on the engine (dispatched, not yet ended).",
        )
        self.transitions = meter.create_counter(
            n.LADDER_TRANSITIONS,
            unit="{transition}",
            description="Fallback ladder moves: up into a rung or down out of it.",
        )
        self.applied = meter.create_counter(
            n.LADDER_APPLIED,
            unit="{request}",
            description="Requests a fallback rung changed or marked at admission.",
        )
        self.sources: tuple[GaugeSource, ...] = ()
        # Bound methods would keep this object (and the policies attached to
        # it) alive from the provider; the callbacks reach it weakly instead.
        this = weakref.ref(self)
        observe = _Observer(this)
        meter.create_observable_gauge(
            n.KV_UTILIZATION,
            [observe.kv_utilization],
            unit="1",
            description="Fraction of the KV block pool in use: the policy's ledger, and "
            "the engine's own report while it is fresh.",
        )
        meter.create_observable_up_down_counter(
            n.KV_USAGE,
            [observe.kv_usage],
            unit="{block}",
            description="KV blocks the policy's ledger holds, by lane.",
        )
        meter.create_observable_up_down_counter(
            n.QUEUE_SIZE,
            [observe.queue_size],
            unit="{request}",
            description="Requests waiting in each lane's queue.",
        )
        meter.create_observable_gauge(
            n.OVERLOAD_STATE,
            [observe.overload_state],
            unit="1",
            description="1 for the current overload state, 0 for the others.",
        )
        meter.create_observable_gauge(
            n.LADDER_LEVEL,
            [observe.ladder_level],
            unit="1",
            description="The fallback ladder's level: 0 is normal, k means rungs 1..k are on.",
        )
        meter.create_observable_gauge(
            n.SLO_ATTAINMENT,
            [observe.attainment],
            unit="1",
            description="Share of eligible requests over the SLO window that completed "
            "within every target of their lane.",
        )
        meter.create_observable_gauge(
            n.SLO_GOODPUT,
            [observe.goodput],
            unit="{request}/s",
            description="Requests per second over the SLO window that attained their lane's SLO.",
        )
        meter.create_observable_gauge(
            n.TASK_COMPLETION,
            [observe.task_completion],
            unit="1",
            description="Share of agent tasks that ended in the task window (ten minutes) "
            "that completed: every turn, by the task's deadline.",
        )
        meter.create_observable_gauge(
            n.TASK_DURATION_P95,
            [observe.task_duration],
            unit="s",
            description="p95 of completed agent tasks' end-to-end time in the task window.",
        )
        meter.create_observable_gauge(
            n.DISPATCH_BACKLOG,
            [observe.dispatch_backlog],
            unit="{cost}",
            description="Cost units started ahead of the engine's dispatch rate: at most "
            "the burst (plus one request) while it paces; only with a dispatch rate set.",
        )

    def attach(self, source: GaugeSource) -> None:
        """Report ``source`` in the gauges (a gate opened)."""
        with _LOCK:
            self.sources = (*self.sources, source)

    def detach(self, source: GaugeSource) -> None:
        """Stop reporting ``source`` (its gate closed)."""
        with _LOCK:
            self.sources = tuple(item for item in self.sources if item is not source)


class _Observer:
    """The gauges' callbacks. Each reads only what it reports: on the loop
    thread that is the live policy, and the SLO snapshots cost a millisecond
    or so per lane."""

    __slots__ = ("_instruments",)

    def __init__(self, instruments: weakref.ref[Instruments]) -> None:
        self._instruments = instruments

    def _sources(self) -> tuple[GaugeSource, ...]:
        instruments = self._instruments()
        return () if instruments is None else instruments.sources

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
        for source, statistics in self._statistics():
            for lane, waiting in statistics.queued.items():
                yield Observation(waiting, {**source.attributes, n.LANE: lane})

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


_LOCK = threading.Lock()
_BY_PROVIDER: weakref.WeakKeyDictionary[MeterProvider, Instruments] = weakref.WeakKeyDictionary()
_GLOBAL: list[Instruments] = []  # the instruments on the global (proxy) provider, once made


def instruments_for(provider: MeterProvider | None, version: str) -> Instruments:
    """The instruments on ``provider`` (``None``: the global provider), made on first use."""
    with _LOCK:
        if provider is None:
            if not _GLOBAL:
                # The API's proxy until the host sets a provider, then forwarding.
                _GLOBAL.append(Instruments(metrics.get_meter(SCOPE, version)))
            return _GLOBAL[0]
        found = _BY_PROVIDER.get(provider)
        if found is None:
            found = _BY_PROVIDER[provider] = Instruments(provider.get_meter(SCOPE, version))
        return found
