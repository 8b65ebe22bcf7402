"""What every adapter shares: engine faults, the policy's view of a call, a whole reply.

An engine can still refuse or fail a request the gate admitted. Each adapter
turns that answer into one :class:`EngineError`, whose :class:`EngineFault`
fixes how the ticket ends and what a gateway should answer:

=================  ================================================  ==========  =======
fault              what the engine said                              ticket      gateway
=================  ================================================  ==========  =======
``overloaded``     503 before the stream (vLLM ``QueueOverflowError``  failed      503
                   / ``MaxQueuedTokensError``); TGI ``overloaded``
``rate_limited``   429 (a proxy's or hosted endpoint's own limit)    failed      503
``prompt_too_long``  400 with ``param: "input_tokens"`` (vLLM); TGI    cancelled   413
                   validation "``inputs`` must have less than ...";
                   llama.cpp ``type: "exceed_context_size_error"``
``invalid_request``  any other 4xx; TGI ``validation``               cancelled   400
``failed``         5xx; an error event inside the stream; vLLM         failed      502
                   ``finish_reason`` ``"error"``/``"abort"``
``disconnected``   the connection dropped, or the stream stopped       failed      502
                   before every choice had its ``finish_reason``
``timeout``        the client's own timeout passed                   failed      504
=================  ================================================  ==========  =======

Why these choices:

- An engine's 4xx is the caller's mistake, not the service failing, so the
  ticket ends ``cancelled``: the SLO trackers leave cancelled requests out of
  the success rate (a ``failed`` would burn error budget and move the ladder).
- The engine's own 429 limits the gateway as a whole, not the tenant, so the
  gateway answers 503 (overload) rather than a 429 that blames the tenant's quota.
- ``Retry-After`` from the engine is passed on when it sent one.
- A dropped connection is 502, not 504: the engine did answer, then broke.

Refusals by the gate itself (quota, overload, deadline) stay
:class:`~slopolicy.Rejected`; :mod:`slopolicy.runtime.http` maps those.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.request import Request
from slopolicy.errors import SlopolicyError, UsageError

__all__ = (
    "EngineError",
    "EngineFault",
    "Reply",
    "Who",
    "check_default_max_tokens",
    "check_extra_body",
    "check_priorities",
    "engine_count",
    "engine_error_response",
    "fault_from_status",
    "given",
    "parse_retry_after",
    "policy_request",
)

T = TypeVar("T")


class EngineFault(enum.Enum):
    """How the engine refused or failed an admitted request; the value is the wire code."""

    OVERLOADED = "engine_overloaded"
    RATE_LIMITED = "engine_rate_limited"
    PROMPT_TOO_LONG = "prompt_too_long"
    INVALID_REQUEST = "engine_invalid_request"
    FAILED = "engine_failed"
    DISCONNECTED = "engine_disconnected"
    TIMEOUT = "engine_timeout"


# fault -> (how the ticket ends, what a gateway answers); see the module docstring.
_MAPPING: dict[EngineFault, tuple[Outcome, int]] = {
    EngineFault.OVERLOADED: (Outcome.FAILED, 503),
    EngineFault.RATE_LIMITED: (Outcome.FAILED, 503),
    EngineFault.PROMPT_TOO_LONG: (Outcome.CANCELLED, 413),
    EngineFault.INVALID_REQUEST: (Outcome.CANCELLED, 400),
    EngineFault.FAILED: (Outcome.FAILED, 502),
    EngineFault.DISCONNECTED: (Outcome.FAILED, 502),
    EngineFault.TIMEOUT: (Outcome.FAILED, 504),
}


class EngineError(SlopolicyError):
    """The engine refused or failed a request the gate had admitted.

    Raised from the adapter call (before any output) or from iterating its
    stream, chained to the client library's own exception. The ticket is
    already released when it is raised.

    Attributes:
        fault: the :class:`EngineFault`.
        message: the engine's message, or ours.
        engine_status: the HTTP status the engine answered, if any.
        param: the request field the engine blamed (``"input_tokens"``), if any.
        retry_after: seconds the engine asked to wait (``Retry-After``), if any.
        finished: the policy's record of the request, set once released.
    """

    def __init__(
        self,
        fault: EngineFault,
        message: str,
        *,
        engine_status: int | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.fault = fault
        self.message = message
        self.engine_status = engine_status
        self.param = param
        self.retry_after = retry_after
        self.finished: Finished | None = None
        super().__init__(message)

    @property
    def outcome(self) -> Outcome:
        """How the ticket ends: ``failed`` or ``cancelled``."""
        return _MAPPING[self.fault][0]

    @property
    def http_status(self) -> int:
        """What a gateway should answer (see the module docstring)."""
        return _MAPPING[self.fault][1]

    @property
    def code(self) -> str:
        """The fault's stable wire name, e.g. ``"engine_overloaded"``."""
        return self.fault.value

    def __repr__(self) -> str:
        return f"EngineError({self.fault.value!r}, {self.message!r})"


def engine_error_response(
    error: EngineError, *, default_retry_after: float | None = None
) -> tuple[int, dict[str, str], dict[str, dict[str, Any]]]:
    """``(status, headers, body)`` for a gateway answering an :class:`EngineError`
    before its stream began, in OpenAI's error shape (as
    :func:`slopolicy.runtime.http.error_response` does for refusals)."""
    status = error.http_status
    headers = {"x-slopolicy-reason": error.code}
    retry = error.retry_after
    if retry is None and status == 503:
        retry = default_retry_after
    if retry is not None:
        headers["retry-after"] = str(max(0, math.ceil(retry)))
    if status < 500:
        kind = "invalid_request_error"
    else:
        kind = "service_unavailable_error" if status == 503 else "server_error"
    body = {"message": error.message, "type": kind, "param": error.param, "code": error.code}
    return status, headers, {"error": body}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header given in seconds; ``None`` for a
    missing or date-valued header (engines send seconds)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def check_default_max_tokens(value: int) -> int:
    """An adapter's ``default_max_tokens``: an ``int`` >= 1 (tokens), else
    :class:`~slopolicy.UsageError` when the adapter is made, not per call."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"default_max_tokens must be an integer >= 1, got {value!r}")
    return value


#: What the gate decides for a call. Sent in ``extra_body``, which the clients
#: merge over the request's own fields, one would reach the engine over the
#: ticket's limits (an uncapped ``max_tokens``, an ``n`` never reserved for).
_DECIDED = frozenset(
    {
        "best_of",
        "logprobs",
        "max_completion_tokens",
        "max_new_tokens",
        "max_tokens",
        "model",
        "n",
        "reasoning_effort",
        "stream",
        "stream_options",
        "top_logprobs",
    }
)


def check_extra_body(params: Mapping[str, Any]) -> None:
    """Raise :class:`~slopolicy.UsageError` (before admission) when a call's
    ``extra_body`` is not a mapping or carries a field the gate decides: those
    go as keywords, where the adapter caps them."""
    extra = params.get("extra_body")
    if extra is None:
        return
    if not isinstance(extra, Mapping):
        raise UsageError(f"extra_body must be a mapping, not {type(extra).__name__}")
    decided = sorted(str(key) for key in _DECIDED.intersection(extra))
    if decided:
        raise UsageError(
            f"pass {', '.join(decided)} as keywords, not in extra_body: the gate decides them"
        )


def check_priorities(priorities: Mapping[str, int] | None) -> dict[str, int]:
    """An adapter's ``priorities`` (lane -> vLLM ``priority``, an ``int``) as a
    dict, else :class:`~slopolicy.UsageError` when the adapter is made."""
    checked = dict(priorities or {})
    for lane, priority in checked.items():
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise UsageError(f"priorities[{lane!r}] must be an integer, got {priority!r}")
    return checked


def given(params: Mapping[str, Any], name: str, default: Any) -> Any:
    """``params[name]``, or ``default`` when it is missing or ``None``: a keyword
    given as ``None`` (a gateway forwarding a JSON ``null``) is not given."""
    value = params.get(name)
    return default if value is None else value


def engine_count(value: object, budget: int) -> int | None:
    """An engine's own output-token count, if ``value`` is a believable one: an
    ``int`` (not a ``bool``) from 0 to ``budget``, the most tokens the request
    was allowed. Anything else (missing, a string, a float, NaN, negative, or
    more than the engine was allowed to generate) is a server's garbage and
    reads as unknown: ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= budget:
        return value
    return None


_TOO_LONG_PARAMS = frozenset({"input_tokens", "input_text"})
# llama.cpp names the fault by its error type and blames no param.
_TOO_LONG_TYPES = frozenset({"exceed_context_size_error"})
_TOO_LONG_TEXTS = ("maximum context length", "longer than the maximum model length")


def fault_from_status(
    status: int | None,
    message: str,
    *,
    param: str | None = None,
    kind: str | None = None,
    retry_after: float | None = None,
) -> EngineError:
    """The :class:`EngineError` for an engine's HTTP status (``None``: no status,
    e.g. an error event inside a stream; one that is no int counts as none);
    ``kind`` is the error body's ``type``."""
    if isinstance(status, bool) or not isinstance(status, int):
        status = None
    if status == 503:
        fault = EngineFault.OVERLOADED
    elif status == 429:
        fault = EngineFault.RATE_LIMITED
    elif status in (408, 504):
        fault = EngineFault.TIMEOUT
    elif status is not None and 400 <= status < 500:
        too_long = (
            param in _TOO_LONG_PARAMS
            or kind in _TOO_LONG_TYPES
            or any(text in message for text in _TOO_LONG_TEXTS)
        )
        fault = EngineFault.PROMPT_TOO_LONG if too_long else EngineFault.INVALID_REQUEST
    else:
        fault = EngineFault.FAILED
    return EngineError(fault, message, engine_status=status, param=param, retry_after=retry_after)


class Who(NamedTuple):
    """The policy's keywords every adapter call takes.

    Attributes:
        tenant: who pays; quota and fairness key.
        lane: preferred lane.
        tier: tenant tier to use instead of the tenant table's.
        deadline: latest start, monotonic seconds on the gate's clock.
        tool_risk: 0-1, how likely and costly tool calls are.
        request_id: the request's id (the engine's too); generated when ``None``.
        prompt_tokens: a known prompt length, in tokens (needed for content
            that is not text, such as images).
    """

    tenant: str = "anonymous"
    lane: str | None = None
    tier: str | None = None
    deadline: float | None = None
    tool_risk: float = 0.0
    request_id: str | None = None
    prompt_tokens: int | None = None


def policy_request(
    who: Who,
    *,
    prompt: str | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    max_new_tokens: int,
    n: int = 1,
    best_of: int | None = None,
    logprobs: int | None = None,
    reasoning_effort: str | None = None,
    model: str | None = None,
) -> Request:
    """The :class:`~slopolicy.Request` the gate decides on for one engine call.

    A known ``prompt_tokens`` replaces the text (so multimodal messages, which
    cannot be counted from text, need not be parsed at all).
    """
    fields: dict[str, Any] = {
        "tenant": who.tenant,
        "lane": who.lane,
        "tier": who.tier,
        "deadline": who.deadline,
        "tool_risk": who.tool_risk,
    }
    if who.request_id is not None:
        fields["id"] = who.request_id
    if who.prompt_tokens is not None:
        fields["prompt_tokens"] = who.prompt_tokens
    elif messages is not None:
        fields["messages"] = messages
    else:
        fields["prompt"] = prompt
    return Request(
        max_new_tokens=max_new_tokens,
        n=n,
        best_of=best_of,
        logprobs=logprobs,
        reasoning_effort=reasoning_effort,
        model=model,
        **fields,
    )


@dataclass(frozen=True, slots=True)
class Reply(Generic[T]):
    """A whole (non-streamed) answer and the policy's record of the request.

    ``finished.ttft`` is ``None``: nothing reached the caller before the end.
    """

    response: T
    finished: Finished
