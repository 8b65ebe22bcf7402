"""HTTP for gateways: statuses, headers and OpenAI-shaped error bodies.

Framework-free: each helper returns plain values a Starlette, FastAPI or
aiohttp handler sends as they are. The mapping:

==========================================================  ======  ===============
what happened                                               status  ``Retry-After``
==========================================================  ======  ===============
refused by the tenant's quota (``rate_limited``,            429     when known
``concurrency_limited``)
overload: ``overload_shed``, ``queue_full``                 503     when known
``expired``: the deadline passed while queued               503     no
``gate_closed``                                             503     no
``revoked``: started, then ended for a tenant within its     503     no
share (``engine.reclaim``), or stalled with no first
token while the engine preempts
``admit_nowait`` could not start at once (``would_block``)  503     no
a tool call (``gate.tool``) past its timeout                504     no
(``tool_timeout``); ``unknown_tool``                        400     no
a new agent task waits for running ones (``task_limit``)    503     no
a turn whose task cannot finish (``task_deadline_lost``)    408     no
a turn out of its task's order (``task_out_of_order``)      409     no
a request that can never pass (``prompt_too_long`` 413,     4xx     no
``unknown_lane``/``unknown_tier`` 400, ...)
a malformed request (``InvalidRequest``)                    400     no
==========================================================  ======  ===============

Every status comes from the decision the policy made (``http_status``), so a
custom routing rule's status passes through. Expiry is 503, not 504: the
request never reached the engine, so a client may safely retry it (a 504 says
the upstream may have done the work). Finished requests map by outcome:
``completed`` 200, ``failed`` 502 (the engine failed), ``cancelled`` 499 (the
client went away, nginx's code), ``expired`` and ``revoked`` 503.

The body is OpenAI's error shape, ``{"error": {"message", "type", "param",
"code"}}``, with ``code`` our reason code and ``type`` by status class:
``invalid_request_error`` (4xx), ``rate_limit_error`` (429),
``service_unavailable_error`` (503), ``server_error`` (other 5xx).
"""

from __future__ import annotations

import json
import math
from typing import Any

from slopolicy.core.decisions import Defer, Reject
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.tools.calls import ToolRefused
from slopolicy.errors import InvalidRequest, Rejected, SlopolicyError, UsageError, WouldBlock

__all__ = (
    "error_body",
    "error_headers",
    "error_response",
    "error_status",
    "outcome_status",
    "sse_error",
)

_OUTCOME_STATUS = {
    Outcome.COMPLETED: 200,
    Outcome.FAILED: 502,
    Outcome.CANCELLED: 499,
    Outcome.EXPIRED: 503,
    Outcome.REVOKED: 503,
}

Refusal = SlopolicyError | Defer | Reject | ToolRefused
#: What carries its own reason, status and Retry-After.
_DECIDED = (Rejected, Defer, Reject, ToolRefused)


def error_status(error: Refusal) -> int:
    """The HTTP status for a refusal: a :class:`Rejected` (or its decision, or a
    tool pool's :class:`~slopolicy.core.tools.ToolRefused`), :class:`InvalidRequest`,
    :class:`WouldBlock`, or any other slopolicy error (500)."""
    if isinstance(error, _DECIDED):
        return error.http_status
    if isinstance(error, InvalidRequest):
        return 400
    if isinstance(error, WouldBlock):
        return 503
    return 500


def outcome_status(outcome: Outcome | str | Finished) -> int:
    """The HTTP status for how an accepted request ended (see the module docstring)."""
    ending = outcome.outcome if isinstance(outcome, Finished) else Outcome(outcome)
    status = _OUTCOME_STATUS.get(ending)
    if status is None:
        raise UsageError("a rejection's status is on its decision: use error_status")
    return status


def _code(error: Refusal) -> str:
    if isinstance(error, _DECIDED):
        return str(error.reason.value)
    if isinstance(error, InvalidRequest):
        return "invalid_request"
    if isinstance(error, WouldBlock):
        return "would_block"
    return "internal_error"


def _type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status == 503:
        return "service_unavailable_error"
    return "invalid_request_error" if status < 500 else "server_error"


def error_headers(error: Refusal, *, default_retry_after: float | None = None) -> dict[str, str]:
    """``Retry-After`` (whole seconds, rounded up) when the policy knows the
    wait, else ``default_retry_after`` for 429 and 503 if given; and
    ``X-Slopolicy-Reason`` with the reason code."""
    headers = {"x-slopolicy-reason": _code(error)}
    retry = error.retry_after if isinstance(error, _DECIDED) else None
    if retry is None and error_status(error) in (429, 503):
        retry = default_retry_after
    if retry is not None:
        headers["retry-after"] = str(max(0, math.ceil(retry)))
    return headers


def error_body(error: Refusal) -> dict[str, dict[str, Any]]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    message = error.message if isinstance(error, (*_DECIDED, InvalidRequest)) else str(error)
    param = error.field if isinstance(error, InvalidRequest) else None
    return {
        "error": {
            "message": message,
            "type": _type(error_status(error)),
            "param": param,
            "code": _code(error),
        }
    }


def error_response(
    error: Refusal, *, default_retry_after: float | None = None
) -> tuple[int, dict[str, str], dict[str, dict[str, Any]]]:
    """``(status, headers, body)`` for a refusal, ready to send as JSON."""
    return (
        error_status(error),
        error_headers(error, default_retry_after=default_retry_after),
        error_body(error),
    )


def sse_error(error: Refusal | str, *, code: str = "engine_error") -> str:
    """A server-sent-events ``data:`` line carrying an error after the stream
    began (the status is already 200), as vLLM's server sends one; ``error``
    may be a plain message for engine failures."""
    if isinstance(error, str):
        body: dict[str, dict[str, Any]] = {
            "error": {"message": error, "type": "server_error", "param": None, "code": code}
        }
    else:
        body = error_body(error)
    return f"data: {json.dumps(body)}\n\n"
