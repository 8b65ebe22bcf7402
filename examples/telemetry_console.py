"""Watch slopolicy's telemetry move: a short load through a Gate, exported to the console.

Run it (the ``dev`` extra installs ``opentelemetry-sdk``)::

    python -m examples.telemetry_console              # 6 s of load, a report each second
    python -m examples.telemetry_console --spans      # also one line per request span

Twelve clients of three tenants send chat and document requests to a
four-slot fake engine (:class:`~slopolicy.testing.fake_engine.FakeEngine`),
so requests queue, the fallback ladder climbs, a few fail in the engine and a
few are refused. Every second of the gate's clock the SDK's
``ConsoleMetricExporter`` prints each instrument on one line (see
:func:`summary`); with ``--spans`` a ``ConsoleSpanExporter`` prints each
finished request's span on one line too.

The host owns the OpenTelemetry SDK: this script builds the providers and
hands them to :class:`~slopolicy.telemetry.Telemetry`; slopolicy never sets
a global provider.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Sequence
from typing import IO

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    HistogramDataPoint,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from slopolicy import Gate, Message, Policy, PolicyConfig, Rejected, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.telemetry import Telemetry
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine

__all__ = ("CONFIG", "main", "span_line", "summary")

CONFIG = PolicyConfig.from_dict(
    {
        "lanes": [
            {
                "name": "interactive",
                "slo": {"ttft_p95_s": 0.5, "tpot_p95_s": 0.1},
                "max_new_tokens": 64,
                "max_prompt_tokens": 4000,
                "max_queue_wait_s": 2.0,
                "weight": 8,
            },
            {
                "name": "heavy",
                "slo": {"ttft_p95_s": 5.0},
                "max_prompt_tokens": 30_000,
                "over_budget": "reject",
                "max_queue_wait_s": 20.0,
            },
        ],
        "tiers": {"standard": {"rate": 200_000, "burst": 400_000, "max_concurrency": 8}},
        "default_tier": "standard",
        "kv": {"num_blocks": 4000, "block_size": 16},
        "engine": {"max_running": 4},
        "ladder": {"evaluate_every_s": 0.5, "dwell_s": 1.0, "cooldown_s": 3.0},
    }
)

# The attributes worth a column in one-line summaries, in order.
_SHOWN = (
    "slopolicy.decision",
    "slopolicy.reason",
    "slopolicy.outcome",
    "slopolicy.queue.result",
    "slopolicy.phase",
    "slopolicy.ladder.rung",
    "slopolicy.overload.state",
    "slopolicy.kv.source",
    "gen_ai.token.type",
    "error.type",
    "slopolicy.lane",
    "slopolicy.tenant",
)


def summary(data: MetricsData) -> str:
    """One line per instrument: histogram counts and means, sums and gauges by attributes."""
    lines = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in sorted(scope.metrics, key=lambda m: m.name):
                parts = []
                for point in metric.data.data_points:
                    attributes = point.attributes or {}
                    label = "/".join(str(attributes[key]) for key in _SHOWN if key in attributes)
                    if isinstance(point, HistogramDataPoint):
                        mean = point.sum / point.count if point.count else 0.0
                        parts.append(f"{label or 'all'}: n={point.count} mean={mean:.3g}")
                    elif isinstance(point, NumberDataPoint):
                        parts.append(f"{label or 'value'}={point.value:.3g}")
                body = "; ".join(sorted(parts)) if parts else "(no data)"
                lines.append(f"  {metric.name} [{metric.unit}] {body}")
    return "\n".join(lines) + "\n"


def span_line(span: ReadableSpan) -> str:
    """One line per request span: id, outcome and the TTFT stages."""
    attributes = span.attributes or {}
    stages = " ".join(
        f"{key.removeprefix('slopolicy.ttft.')}={float(value):.3f}"  # type: ignore[arg-type]
        for key, value in attributes.items()
        if key.startswith("slopolicy.ttft.")
    )
    return (
        f"span {span.name} {attributes.get('slopolicy.request.id')} "
        f"{attributes.get('slopolicy.tenant')} {attributes.get('slopolicy.outcome')} "
        f"events={[event.name.removeprefix('slopolicy.') for event in span.events]} {stages}\n"
    )


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


async def _client(gate: Gate, engine: FakeEngine, number: int, until: float) -> None:
    """One caller: think, send, stream, repeat until ``until`` on the gate's clock."""
    rng = random.Random(number)
    tenant = ("acme", "acme", "globex", "initech")[number % 4]
    sent = 0
    while anyio.current_time() < until:
        await anyio.sleep(rng.uniform(0.05, 0.3))
        sent += 1
        long_document = tenant == "initech" and rng.random() < 0.5
        request = Request(
            id=f"c{number}-{sent}",
            tenant=tenant,
            messages=(Message("user", "summarise this"),),
            prompt_tokens=rng.randint(8_000, 40_000) if long_document else rng.randint(50, 800),
            max_new_tokens=rng.choice((16, 32, 64)),
            lane="heavy" if long_document else None,
            model="llama-3-8b",
        )
        fail_at = 3 if rng.random() < 0.05 else None
        try:
            async with gate.admit(request) as ticket:
                stream = engine.stream(ticket.request, fail_at=fail_at)
                async for _ in ticket.track(stream, tokens_of=_tokens):
                    pass
        except (Rejected, EngineError):
            pass  # a refusal or an engine failure: recorded, and the caller moves on


async def _report(reader: PeriodicExportingMetricReader, out: IO[str], until: float) -> None:
    start = anyio.current_time()
    while anyio.current_time() < until:
        await anyio.sleep(1.0)
        out.write(f"--- t={anyio.current_time() - start:.1f} s ---\n")
        reader.force_flush()  # exports now, from the gate's own loop


async def main(
    seconds: float = 6.0,
    *,
    metric_out: IO[str] = sys.stdout,
    span_out: IO[str] | None = None,
    clients: int = 12,
) -> None:
    """Run the load for ``seconds`` of the gate's clock, reporting every second."""
    # math.inf: no exporter thread; the reporter task exports on the gate's clock.
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(out=metric_out, formatter=summary), export_interval_millis=math.inf
    )
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    tracers = TracerProvider(shutdown_on_exit=False)
    if span_out is not None:
        exporter = ConsoleSpanExporter(out=span_out, formatter=span_line)
        tracers.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(
        meter_provider=meters,
        tracer_provider=tracers,
        tenants=["acme", "globex"],  # named; everyone else is "other"
        attributes={"gen_ai.provider.name": "fake", "server.address": "localhost"},
    )
    engine = FakeEngine(ttft=0.08, per_token=0.02, tokens_per_chunk=4)
    policy = Policy(CONFIG, counter=HeuristicCounter())
    try:
        async with Gate(policy, telemetry=telemetry) as gate:
            until = anyio.current_time() + seconds
            async with anyio.create_task_group() as group:
                for number in range(clients):
                    group.start_soon(_client, gate, engine, number, until)
                group.start_soon(_report, reader, metric_out, until)
    finally:
        meters.shutdown()
        tracers.shutdown()


def cli(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="how long to run")
    parser.add_argument("--spans", action="store_true", help="print one line per span")
    args = parser.parse_args(argv)
    anyio.run(lambda: main(args.seconds, span_out=sys.stdout if args.spans else None))


if __name__ == "__main__":
    cli()
