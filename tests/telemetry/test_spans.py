"""The request spans of the scripted run, read back through the SDK's InMemorySpanExporter."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.runtime.test_gate_stalled import run_stalled
from tests.telemetry.otel import Otel
from tests.telemetry.scenario import Script, run_script

pytestmark = pytest.mark.anyio


async def _run(otel: Otel) -> tuple[dict[str, ReadableSpan], Script, Sequence[ReadableSpan]]:
    gate, script = await run_script(otel.telemetry(), otel.tracers.get_tracer("host"))
    await gate.__aexit__(None, None, None)
    spans = otel.spans()
    ours = {
        str((span.attributes or {})["slopolicy.request.id"]): span
        for span in spans
        if span.name == "slopolicy.request"
    }
    return ours, script, spans


def _events(span: ReadableSpan) -> list[tuple[str, float]]:
    """Event names with their offset from the span's start, in seconds."""
    assert span.start_time is not None
    return [(e.name, (e.timestamp - span.start_time) / 1e9) for e in span.events]


async def test_one_span_per_request_joining_the_hosts_trace(otel: Otel) -> None:
    spans, script, everything = await _run(otel)
    assert set(spans) == {"first", "queued", "too-long", "broken", "degraded"}
    assert all(span.kind is SpanKind.INTERNAL for span in spans.values())
    host = script.host
    assert host is not None
    (host_span,) = [span for span in everything if span.name == "POST /chat"]
    first = spans["first"]
    # Started in the caller's context: a child of the host's span, in its trace.
    assert first.parent is not None
    assert first.parent.span_id == host.get_span_context().span_id
    assert first.context is not None
    assert first.context.trace_id == host.get_span_context().trace_id
    assert host_span.context is not None
    assert first.context.trace_id == host_span.context.trace_id
    assert spans["queued"].parent is None  # no host span around that one: a root


async def test_events_and_the_ttft_stage_split(otel: Otel) -> None:
    spans, script, _ = await _run(otel)
    queued, finished = spans["queued"], script.finished["queued"]
    assert _events(queued) == [
        ("slopolicy.queued", 0.0),
        ("slopolicy.dispatched", pytest.approx(finished.queue_wait)),
        ("slopolicy.first_token", pytest.approx(finished.ttft)),
        ("slopolicy.finished", pytest.approx(finished.e2e)),
    ]
    assert queued.end_time is not None
    assert queued.start_time is not None
    assert (queued.end_time - queued.start_time) / 1e9 == pytest.approx(finished.e2e)
    attributes = dict(queued.attributes or {})
    assert attributes["slopolicy.ttft.queue"] == pytest.approx(0.06)
    assert attributes["slopolicy.ttft.schedule"] == pytest.approx(0.0)
    assert attributes["slopolicy.ttft"] == pytest.approx(finished.ttft)
    assert attributes["slopolicy.queue.wait"] == pytest.approx(0.06)
    timings = ("slopolicy.ttft", "slopolicy.tpot")
    assert {key: value for key, value in attributes.items() if not key.startswith(timings)} == {
        "slopolicy.request.id": "queued",
        "slopolicy.tenant": "acme",  # spans are not aggregated: the real tenant
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.request.max_tokens": 4,
        "slopolicy.decision": "admit",
        "slopolicy.reason": "admitted",
        "slopolicy.lane": "interactive",
        "slopolicy.outcome": "completed",
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 4,
        "slopolicy.cost": finished.cost,
        "slopolicy.queue.wait": pytest.approx(0.06),
    }
    assert queued.status.status_code is StatusCode.UNSET
    degraded = spans["degraded"]
    rung = [e for e in degraded.events if e.name == "slopolicy.rung_applied"]
    assert [dict(e.attributes or {}) for e in rung] == [
        {"slopolicy.ladder.rung": "drop_optional_features"}
    ]


async def test_a_failure_and_a_refusal(otel: Otel) -> None:
    spans, script, _ = await _run(otel)
    broken = spans["broken"]
    assert broken.status.status_code is StatusCode.ERROR
    error_type = "slopolicy.testing.fake_engine.EngineError"
    assert broken.status.description == error_type
    assert (broken.attributes or {})["error.type"] == error_type
    assert (broken.attributes or {})["slopolicy.outcome"] == "failed"
    (exception,) = [e for e in broken.events if e.name == "exception"]
    assert (exception.attributes or {})["exception.type"] == error_type
    assert [name for name, _ in _events(broken)] == [
        "slopolicy.queued",
        "slopolicy.dispatched",
        "slopolicy.first_token",
        "exception",
        "slopolicy.finished",
    ]

    refused = spans["too-long"]
    attributes = dict(refused.attributes or {})
    assert attributes["slopolicy.decision"] == "reject"
    assert attributes["error.type"] == attributes["slopolicy.reason"] == "prompt_too_long"
    assert attributes["gen_ai.usage.input_tokens"] == 5000
    assert refused.status.status_code is StatusCode.UNSET  # a 4xx: the caller's error
    assert [name for name, _ in _events(refused)] == ["slopolicy.finished"]
    assert refused.start_time == refused.end_time
    assert script.rejected[0].http_status < 500


async def test_a_revoked_request_says_why(otel: Otel) -> None:
    error, _, _ = await run_stalled(preempting=True, telemetry=otel.telemetry())
    assert error is not None
    (span,) = [span for span in otel.spans() if span.name == "slopolicy.request"]
    attributes = span.attributes or {}
    assert attributes["slopolicy.outcome"] == "revoked"
    assert attributes["slopolicy.revoked_for"] == "stalled"
    assert span.status.status_code is StatusCode.ERROR
