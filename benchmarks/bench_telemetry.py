"""What telemetry costs per request through the Gate.

Run from the repository root::

    python -m benchmarks.bench_telemetry            # about 40 s
    python -m benchmarks.bench_telemetry --quick    # fewer rounds, about 10 s

One request is admit + track a four-chunk stream + release, uncontended (one
task, an engine of one slot, 50 tenants in turn) on asyncio. Three gates are
open side by side on one event loop, one per row:

* ``telemetry=False``: the gate records nothing (the baseline);
* ``no SDK``: the default, ``telemetry=True``, with no global provider set.
  That is exactly the no-SDK case: without a provider the API hands out its
  no-op proxies whether or not the SDK is installed (it is installed here
  only for the third row, and nothing sets a global provider);
* ``SDK, in-memory``: a :class:`Telemetry` on an SDK ``MeterProvider`` with an
  ``InMemoryMetricReader`` and a ``TracerProvider`` with a
  ``SimpleSpanProcessor`` into an ``InMemorySpanExporter`` (every span kept,
  cleared between rounds outside the clock).

Each round times a batch on every gate in turn, starting from a different
gate each round, so background load hits every row alike. A row's figure is
the median of its batch times per request; "vs off" is the median over rounds
of the row's batch time over the off row's in the same round, a paired ratio
the machine's drift blurs less. The ``hooks alone`` line times the recorder's
three calls (submitted, dispatched, ended) on prepared values with no gate
around them, with no provider: all a request pays for telemetry without an SDK.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import AsyncIterator

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.gate_drain import bench_policy
from slopolicy import Admit, Finished, Gate, Outcome, Request
from slopolicy.core.lifecycle import Dispatch, Started
from slopolicy.telemetry import Telemetry, default_telemetry

TENANTS = 50
CHUNKS = 4

ROWS = (
    "Gate, telemetry=False",
    "Gate, telemetry on, no SDK",
    "Gate, telemetry on, SDK + in-memory",
)


def _requests(count: int, tag: str) -> list[Request]:
    return [
        Request(id=f"{tag}{k}", tenant=f"t{k % TENANTS}", prompt_tokens=100, max_new_tokens=16)
        for k in range(count)
    ]


async def _stream() -> AsyncIterator[int]:
    for index in range(CHUNKS):
        yield index


async def _batch(gate: Gate, requests: list[Request]) -> float:
    start = time.perf_counter()
    for request in requests:
        async with gate.admit(request) as ticket:
            async for _ in ticket.track(_stream()):
                pass
    return (time.perf_counter() - start) / len(requests)


async def gate_rounds(rounds: int, batch: int) -> dict[str, list[float]]:
    """Per-request seconds of each row's batches, round by round (after one warm-up round)."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    tracers = TracerProvider(shutdown_on_exit=False)
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    sdk = Telemetry(meter_provider=meters, tracer_provider=tracers)
    samples: dict[str, list[float]] = {name: [] for name in ROWS}
    async with contextlib.AsyncExitStack() as stack:
        gates = [
            await stack.enter_async_context(Gate(bench_policy(1), telemetry=telemetry))
            for telemetry in (False, True, sdk)
        ]
        for round_ in range(rounds + 1):
            for shift in range(len(ROWS)):
                row = (round_ + shift) % len(ROWS)
                took = await _batch(gates[row], _requests(batch, f"{row}-{round_}-"))
                if round_:
                    samples[ROWS[row]].append(took)
            exporter.clear()
    # Proof each row did what it says: the SDK row recorded, the default row did not.
    assert reader.get_metrics_data() is not None, "the SDK row recorded no metrics"
    assert default_telemetry().tenants.statistics().observed == 0, "the no-SDK row recorded"
    meters.shutdown()
    tracers.shutdown()
    return samples


def hooks_alone(count: int) -> float:
    """Per-request seconds of the recorder's three calls on prepared values, no provider."""
    recorder = Telemetry().bind(bench_policy(1))
    prepared = []
    for request in _requests(count, "h"):
        decision = Admit(
            lane="chat",
            tier="default",
            request=request,
            prompt_tokens=100,
            cost=100.0,
            message="admitted",
        )
        started = Started(
            id=request.id,
            tenant=request.tenant,
            lane="chat",
            request=request,
            kv_blocks=8,
            queue_wait=0.0,
        )
        finished = Finished(
            id=request.id,
            tenant=request.tenant,
            lane="chat",
            outcome=Outcome.COMPLETED,
            arrival=0.0,
            finished_at=0.1,
            queue_wait=0.0,
            ttft=0.02,
            tpot=0.01,
            prompt_tokens=100,
            output_tokens=CHUNKS,
            cost=104.0,
            stages={"queue": 0.0, "schedule": 0.001},
        )
        prepared.append((request, decision, Dispatch(started=(started,), expired=()), finished))
    start = time.perf_counter()
    for request, decision, dispatch, finished in prepared:
        recorder.submitted(request, decision, 0.0)
        recorder.dispatched(dispatch, 0.0)
        recorder.ended(finished)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    rounds, batch = (20, 200) if args.quick else (80, 500)
    samples = anyio.run(gate_rounds, rounds, batch)
    base = samples[ROWS[0]]
    print(
        f"Gate admit + track ({CHUNKS} chunks) + release, per request, asyncio, uncontended "
        f"(medians over {rounds} rounds of {batch:,} per gate)"
    )
    print(f"{'':40}{'µs/request':>12}{'vs off':>9}")
    for name in ROWS:
        value = statistics.median(samples[name])
        ratio = statistics.median(row / off for row, off in zip(samples[name], base, strict=True))
        print(f"{name:40}{value * 1e6:>12.2f}{ratio:>8.3f}x")
    alone = statistics.median(hooks_alone(5_000) for _ in range(11))
    share = alone / statistics.median(base)
    print(f"{'recorder hooks alone, no SDK':40}{alone * 1e6:>12.2f}{share:>8.3f}x of off")


if __name__ == "__main__":
    main()
