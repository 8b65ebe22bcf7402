"""Reason codes: why the policy decided what it did, as stable wire names.

A leaf module (it imports nothing of the package), so the error tree, the
request and the decisions can all name a reason without importing each other.
"""

from __future__ import annotations

import enum

__all__ = ("Reason",)


class Reason(enum.Enum):
    """Closed set of reason codes; the value is the stable wire name."""

    ADMITTED = "admitted"
    PROMPT_OVER_BUDGET = "prompt_over_budget"
    PROMPT_TOO_LONG = "prompt_too_long"
    COST_OVER_LIMIT = "cost_over_limit"
    UNKNOWN_LANE = "unknown_lane"
    UNKNOWN_TIER = "unknown_tier"
    RULE = "rule"
    RATE_LIMITED = "rate_limited"
    CONCURRENCY_LIMITED = "concurrency_limited"
    COST_OVER_BURST = "cost_over_burst"
    TENANT_TABLE_FULL = "tenant_table_full"
    QUEUE_FULL = "queue_full"
    OVERLOAD_SHED = "overload_shed"
    # The async gate's own refusals: accepted but its deadline passed while it
    # waited (outcome ``expired``), and the gate closed under a waiting request.
    EXPIRED = "expired"
    GATE_CLOSED = "gate_closed"
    # A shared quota store (Redis) could not be reached and the store fails
    # closed: 503, retry once the store is back.
    QUOTA_STORE_UNAVAILABLE = "quota_store_unavailable"
    # Tool calls (``gate.tool``): a name no tool limits cover (400), and a
    # call that ran past its timeout (504: the tool may have done the work).
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_TIMEOUT = "tool_timeout"
    # Agent tasks: a turn of a task whose deadline has passed (408: it cannot
    # complete, so it is not served to fail anyway); a turn out of its task's
    # order, or of a task already ended (409); a first turn while the lane
    # has as many tasks under way as it takes (503, retry later).
    TASK_DEADLINE_LOST = "task_deadline_lost"
    TASK_OUT_OF_ORDER = "task_out_of_order"
    TASK_LIMIT = "task_limit"
    # A prompt whose prefill would hold the engine long enough to make more
    # requests of the more urgent lanes miss their TTFT target than the lane
    # allows (503, retry later: the harm falls as those lanes quieten).
    PREFILL_INTERFERENCE = "prefill_interference"
    # A running request the policy ended (outcome ``revoked``; why:
    # ``Finished.revoked_for``): one of a tenant over its share, to give its
    # KV to a queued request of a tenant within its share that did not fit,
    # or one with no first token by its lane's p99 TTFT target while the
    # engine preempts (503, retry later).
    REVOKED = "revoked"

    __hash__ = object.__hash__  # singletons compared by identity: hash at C speed

    @property
    def code(self) -> str:
        """The stable wire name, e.g. ``"prompt_too_long"``."""
        return self.value
