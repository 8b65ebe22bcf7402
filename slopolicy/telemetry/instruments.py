"""The instruments, made once per meter provider.

Instruments are shared by every :class:`~slopolicy.telemetry.Telemetry` on
the same meter provider. The SDK identifies an instrument by name, kind, unit
and description and hands a second registration the first one, dropping the
second one's callbacks, so observable gauges registered per ``Telemetry``
would silently report only the first gate. Here each provider gets one set of
instruments whose callbacks walk every attached :class:`GaugeSource` (the
observable ones are the table of :mod:`slopolicy.telemetry.observed`).

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
from functools import partial

from opentelemetry import metrics
from opentelemetry.metrics import Meter, MeterProvider

from slopolicy.telemetry import names as n
from slopolicy.telemetry.gauge_source import GaugeSource, Readings
from slopolicy.telemetry.observed import OBSERVED, Attached, Observer

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
        this: weakref.ref[Attached] = weakref.ref(self)
        observe = Observer(this)
        for spec in OBSERVED:
            create = (
                meter.create_observable_gauge
                if spec.kind == "gauge"
                else meter.create_observable_up_down_counter
            )
            create(
                spec.name,
                [partial(spec.read, observe)],
                unit=spec.unit,
                description=spec.description,
            )

    def attach(self, source: GaugeSource) -> None:
        """Report ``source`` in the gauges (a gate opened)."""
        with _LOCK:
            self.sources = (*self.sources, source)

    def detach(self, source: GaugeSource) -> None:
        """Stop reporting ``source`` (its gate closed)."""
        with _LOCK:
            self.sources = tuple(item for item in self.sources if item is not source)


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
