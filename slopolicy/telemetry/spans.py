"""The request span: one per request, from submit to its end.

The span starts in the caller's context (``Gate.admit`` runs in the caller's
task), so it joins the host's trace as a child of whatever span is current
there, such as the HTTP server span. It is never made current itself: the
host's own code around ``admit`` keeps its context.

Timestamps come from the gate's clock: the span starts at the wall-clock
time of the submit, and every later event sits at that time plus the gate's
elapsed seconds, so a span recorded under a virtual clock (trio's
``MockClock``, the testing loop) is consistent with itself.
"""

from __future__ import annotations

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from slopolicy.core.decisions import Admit, Decision, Demote
from slopolicy.core.lifecycle import Started
from slopolicy.core.outcome import Finished, Outcome, held_name
from slopolicy.core.request import Request
from slopolicy.telemetry import names as n

__all__ = ("dispatched", "ended", "refused", "start")

Attrs = dict[str, AttributeValue]


def start(
    tracer: Tracer,
    request: Request,
    decision: Decision,
    kind: str,
    operation: str,
    base: Attrs,
    start_ns: int,
) -> Span | None:
    """Start the request's span at ``start_ns`` (wall clock, ns); ``None`` when
    nothing records it (no SDK installed, or sampled out), so callers skip the rest."""
    span = tracer.start_span(n.SPAN_NAME, kind=SpanKind.INTERNAL, start_time=start_ns)
    if not span.is_recording():
        return None
    attributes: Attrs = {
        **base,
        n.REQUEST_ID: request.id,
        n.TENANT: request.tenant,  # traces are not aggregated: the real name, not a label
        n.OPERATION: operation,
        n.DECISION: kind,
        n.REASON: decision.reason.value,
    }
    if decision.lane is not None:
        attributes[n.LANE] = decision.lane
    sent = decision.request if isinstance(decision, (Admit, Demote)) else request
    if sent.model is not None:
        attributes[n.REQUEST_MODEL] = sent.model
    if request.model is not None and request.model != sent.model:
        attributes[n.REQUESTED_MODEL] = request.model  # the ladder's cheaper_model moved it
    attributes[n.REQUEST_MAX_TOKENS] = sent.max_new_tokens
    span.set_attributes(attributes)
    if isinstance(decision, (Admit, Demote)):
        attributes = {n.LANE: decision.lane}
        span.add_event("slopolicy.queued", attributes, timestamp=start_ns)
        for rung in decision.rungs:
            span.add_event("slopolicy.rung_applied", {n.RUNG: rung}, timestamp=start_ns)
    return span


def refused(span: Span, decision: Decision, prompt_tokens: int | None, at_ns: int) -> None:
    """End a refused request's span at once: the reason is its ``error.type``;
    a refusal a gateway answers with a 5xx is an error, a 4xx is the caller's."""
    span.set_attribute(n.ERROR_TYPE, decision.reason.value)
    span.set_attribute(n.OUTCOME, Outcome.REJECTED.value)
    if prompt_tokens is not None:
        span.set_attribute(n.USAGE_INPUT, prompt_tokens)
    if decision.http_status >= 500:
        span.set_status(Status(StatusCode.ERROR, decision.message))
    span.add_event("slopolicy.finished", {n.OUTCOME: Outcome.REJECTED.value}, timestamp=at_ns)
    span.end(end_time=at_ns)


def dispatched(span: Span, started: Started, at_ns: int) -> None:
    """The request left its queue and may start on the engine."""
    attributes: Attrs = {
        "slopolicy.queue.wait": started.queue_wait,
        "slopolicy.kv.blocks": started.kv_blocks,
    }
    span.add_event("slopolicy.dispatched", attributes, timestamp=at_ns)


def ended(
    span: Span,
    finished: Finished,
    error: BaseException | None,
    error_type: str | None,
    ns_at: int,
    first_token_ns: int | None,
) -> None:
    """Close the span with the request's timings, the TTFT stage split and the outcome."""
    attributes: Attrs = {
        n.OUTCOME: finished.outcome.value,
        n.USAGE_INPUT: finished.prompt_tokens,
        n.USAGE_OUTPUT: finished.output_tokens,
        "slopolicy.cost": finished.cost,
    }
    if finished.queue_wait is not None:
        attributes["slopolicy.queue.wait"] = finished.queue_wait
    else:  # it ended in its queue: what it last waited on at its lane's front
        attributes[n.QUEUE_HELD_BY] = held_name(finished.held_by)
    if finished.revoked_for is not None:
        attributes[n.REVOKED_FOR] = finished.revoked_for.value
    if finished.ttft is not None:
        attributes["slopolicy.ttft"] = finished.ttft
        if finished.output_tokens > 1 and finished.tpot is not None:
            attributes["slopolicy.tpot"] = finished.tpot
    for stage, seconds in finished.stages.items():
        attributes[f"slopolicy.ttft.{stage}"] = seconds
    if error_type is not None:
        attributes[n.ERROR_TYPE] = error_type
    span.set_attributes(attributes)
    if first_token_ns is not None:
        span.add_event("slopolicy.first_token", timestamp=first_token_ns)
    if error is not None:
        span.record_exception(error, timestamp=ns_at, escaped=True)
    if finished.outcome in (Outcome.FAILED, Outcome.EXPIRED, Outcome.REVOKED):
        span.set_status(Status(StatusCode.ERROR, error_type))
    span.add_event(
        "slopolicy.finished",
        {n.OUTCOME: finished.outcome.value, n.USAGE_OUTPUT: finished.output_tokens},
        timestamp=ns_at,
    )
    span.end(end_time=ns_at)
