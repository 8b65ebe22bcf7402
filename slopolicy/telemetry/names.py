"""Instrument names, units, advisory buckets and attribute keys.

The ``gen_ai.*`` names, units and buckets follow the OpenTelemetry GenAI
semantic conventions (status: Development; v1.41 of the main repository and
the newer ``semantic-conventions-genai`` repository agree on the server
histograms). The ``slopolicy.*`` names are this library's own, for the
incident counters the conventions do not cover. Attribute *values* that could
grow without bound (tenants, models) pass through :mod:`slopolicy.telemetry.labels`
first; every other value comes from a closed set (lanes and rungs from the
configuration, reasons from :class:`~slopolicy.core.decisions.Reason`,
outcomes from :class:`~slopolicy.core.outcome.Outcome`).
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "DURATION_BUCKETS",
    "LATENCY_BUCKETS",
    "TBT_BUCKETS",
    "TOKEN_BUCKETS",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
)

# -- instrument names ------------------------------------------------------------

#: Histogram, seconds: arrival at the gate to the first output token, completed requests.
TTFT: Final = "gen_ai.server.time_to_first_token"
#: Histogram, seconds: (end - first token) / (output tokens - 1), completed requests.
TPOT: Final = "gen_ai.server.time_per_output_token"
#: Histogram, seconds: arrival at the gate to the end, every accepted request.
REQUEST_DURATION: Final = "gen_ai.server.request.duration"
#: Histogram, tokens: prompt and output tokens of each request that ran.
TOKEN_USAGE: Final = "gen_ai.client.token.usage"

ADMISSIONS: Final = "slopolicy.admission.decisions"
OUTCOMES: Final = "slopolicy.request.outcomes"
ACTIVE: Final = "slopolicy.active_requests"
QUEUE_WAIT: Final = "slopolicy.queue.wait"
PROMPT_TOKENS: Final = "slopolicy.request.prompt_tokens"
OUTPUT_TOKENS: Final = "slopolicy.request.output_tokens"
PHASE_DURATION: Final = "slopolicy.request.phase.duration"
#: Histogram, seconds: each gap between two chunks of output of a stream (TBT), by lane.
#: The GenAI conventions have none (their TPOT is a per-request mean, which hides
#: one long gap); vLLM's ``vllm:inter_token_latency_seconds`` is the engine's own.
TBT: Final = "slopolicy.request.time_between_tokens"
#: Counter: gaps of at least the lane's stall threshold (``LaneSLO.tbt_stall_s``).
STALLS: Final = "slopolicy.request.stalls"
LADDER_TRANSITIONS: Final = "slopolicy.ladder.transitions"
LADDER_APPLIED: Final = "slopolicy.ladder.applied"
#: Histogram, seconds: a tool call's wait for its slot (``gate.tool``).
TOOL_WAIT: Final = "slopolicy.tool.wait"
#: Histogram, seconds: a tool call's run, slot held, by how it ended.
TOOL_DURATION: Final = "slopolicy.tool.duration"
#: Counter: tool calls by how they ended (``ok``, ``error``, ``timeout``,
#: ``cancelled``) or the reason they were refused.
TOOL_CALLS: Final = "slopolicy.tool.calls"
#: Histogram, seconds: each agent task's end-to-end time as it ends, by lane,
#: tenant label and outcome (its count per outcome is the task completion rate).
TASK_DURATION: Final = "slopolicy.task.duration"
# Observable (read from the policy when a reader collects).
KV_UTILIZATION: Final = "slopolicy.kv.utilization"
KV_USAGE: Final = "slopolicy.kv.usage"
QUEUE_SIZE: Final = "slopolicy.queue.size"
OVERLOAD_STATE: Final = "slopolicy.overload.state"
LADDER_LEVEL: Final = "slopolicy.ladder.level"
SLO_ATTAINMENT: Final = "slopolicy.slo.attainment"
SLO_GOODPUT: Final = "slopolicy.slo.goodput"
TASK_COMPLETION: Final = "slopolicy.task.completion_rate"
TASK_DURATION_P95: Final = "slopolicy.task.duration.p95"
DISPATCH_BACKLOG: Final = "slopolicy.dispatch.backlog"
ENGINE_SATURATION: Final = "slopolicy.engine.saturation"
TTFT_LATE_SHARE: Final = "slopolicy.slo.ttft_late_share"
TPOT_LATE_SHARE: Final = "slopolicy.slo.tpot_late_share"

#: The one span each request gets, from submit to its end.
SPAN_NAME: Final = "slopolicy.request"

# -- attribute keys ----------------------------------------------------------------

OPERATION: Final = "gen_ai.operation.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
USAGE_INPUT: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT: Final = "gen_ai.usage.output_tokens"
ERROR_TYPE: Final = "error.type"

TENANT: Final = "slopolicy.tenant"
LANE: Final = "slopolicy.lane"
DECISION: Final = "slopolicy.decision"
REASON: Final = "slopolicy.reason"
OUTCOME: Final = "slopolicy.outcome"
QUEUE_RESULT: Final = "slopolicy.queue.result"
#: What a request that left its queue unstarted last waited on at the front
#: of its lane (:class:`~slopolicy.core.outcome.Hold`'s wire names, or ``behind``).
QUEUE_HELD_BY: Final = "slopolicy.queue.held_by"
#: Why the policy ended a running request (outcome ``revoked``):
#: :class:`~slopolicy.core.outcome.Revocation`'s wire names.
REVOKED_FOR: Final = "slopolicy.revoked_for"
PHASE: Final = "slopolicy.phase"
RUNG: Final = "slopolicy.ladder.rung"
DIRECTION: Final = "slopolicy.ladder.direction"
CAUSE: Final = "slopolicy.ladder.cause"
KV_SOURCE: Final = "slopolicy.kv.source"
STATE: Final = "slopolicy.overload.state"
REQUEST_ID: Final = "slopolicy.request.id"
REQUESTED_MODEL: Final = "slopolicy.request.requested_model"
#: A tool's configured name (``*`` for the unlisted ones, ``other`` for a refused unknown one).
TOOL: Final = "slopolicy.tool.name"
TOOL_RESULT: Final = "slopolicy.tool.result"
#: How an agent task ended: ``completed``, ``failed`` or ``abandoned``.
TASK_OUTCOME: Final = "slopolicy.task.outcome"

#: The value every tenant or model outside the named set is reported as.
OTHER: Final = "other"
#: ``error.type`` of a failure with no exception to name (the conventions' fallback).
OTHER_ERROR: Final = "_OTHER"

# -- advisory bucket boundaries ------------------------------------------------------

#: ``gen_ai.server.time_to_first_token``, seconds (the conventions' advice).
TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
    0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
#: ``gen_ai.server.time_per_output_token``, seconds (the conventions' advice).
TPOT_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
#: ``slopolicy.request.time_between_tokens``, seconds: the TPOT buckets, then on to
#: the long gaps a prefill or a preemption landing mid-stream makes.
TBT_BUCKETS: Final = (*TPOT_BUCKETS, 5.0, 10.0)
#: ``gen_ai.server.request.duration``, seconds: 0.01 doubling to 81.92 (the conventions' advice).
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
#: Token counts: powers of 4 from 1 to 4^13 (the conventions' advice for token usage).
TOKEN_BUCKETS: Final = tuple(float(4**k) for k in range(14))
#: Queue waits and request phases, seconds: the TTFT buckets, then on to ten minutes
#: (batch lanes queue for minutes; decode of a long answer takes that long too).
LATENCY_BUCKETS: Final = (*TTFT_BUCKETS, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
