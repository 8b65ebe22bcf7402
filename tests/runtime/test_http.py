"""Refusals and outcomes to HTTP statuses, headers and OpenAI error bodies."""

from __future__ import annotations

import json

import pytest

from slopolicy import Admit, Defer, Expired, GateClosed, Outcome, Reason, Reject, Rejected, Request
from slopolicy.core.outcome import Finished
from slopolicy.errors import ConfigError, InvalidRequest, UsageError, WouldBlock
from slopolicy.runtime.http import (
    error_body,
    error_headers,
    error_response,
    error_status,
    outcome_status,
    sse_error,
)


def _finished(outcome: Outcome) -> Finished:
    return Finished(
        id="r",
        tenant="t",
        lane="chat",
        outcome=outcome,
        arrival=0.0,
        finished_at=1.0,
        queue_wait=None,
        ttft=None,
        tpot=None,
        prompt_tokens=10,
        output_tokens=0,
        cost=0.0,
    )


def test_a_quota_refusal_is_429_with_retry_after_rounded_up() -> None:
    error = Rejected.of(
        Defer(
            reason=Reason.RATE_LIMITED,
            message="over quota",
            retry_after=2.2,
            http_status=429,
            lane="chat",
        )
    )
    status, headers, body = error_response(error)
    assert status == 429
    assert headers == {"retry-after": "3", "x-slopolicy-reason": "rate_limited"}
    assert body == {
        "error": {
            "message": "over quota",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limited",
        }
    }


@pytest.mark.parametrize(
    ("reason", "retry_after"),
    [(Reason.OVERLOAD_SHED, 5.0), (Reason.QUEUE_FULL, 60.0), (Reason.QUEUE_FULL, None)],
)
def test_overload_is_503(reason: Reason, retry_after: float | None) -> None:
    decision = Defer(reason=reason, message="busy", retry_after=retry_after, http_status=503)
    for refusal in (decision, Rejected.of(decision)):
        assert error_status(refusal) == 503
        assert error_body(refusal)["error"]["type"] == "service_unavailable_error"
        headers = error_headers(refusal)
        assert headers.get("retry-after") == (None if retry_after is None else f"{retry_after:.0f}")


def test_an_unknown_wait_takes_the_gateways_default_only_for_429_and_503() -> None:
    limited = Rejected.of(
        Defer(reason=Reason.CONCURRENCY_LIMITED, message="busy", retry_after=None, http_status=429)
    )
    assert error_headers(limited, default_retry_after=0.5)["retry-after"] == "1"
    assert "retry-after" not in error_headers(limited)
    never = Rejected.of(Reject(reason=Reason.PROMPT_TOO_LONG, message="too long", http_status=413))
    assert "retry-after" not in error_headers(never, default_retry_after=1.0)
    assert error_body(never)["error"]["type"] == "invalid_request_error"


def test_expiry_and_closing_are_503_without_retry_after() -> None:
    expired = Expired("waited too long", _finished(Outcome.EXPIRED), None)
    closed = GateClosed()
    for error in (expired, closed):
        status, headers, _ = error_response(error)
        assert status == 503
        assert "retry-after" not in headers
    assert error_body(expired)["error"]["code"] == "expired"
    assert error_body(closed)["error"]["code"] == "gate_closed"


def test_other_errors() -> None:
    invalid = InvalidRequest("messages[0].content", "expected text")
    assert error_response(invalid) == (
        400,
        {"x-slopolicy-reason": "invalid_request"},
        {
            "error": {
                "message": "expected text",
                "type": "invalid_request_error",
                "param": "messages[0].content",
                "code": "invalid_request",
            }
        },
    )
    bug = UsageError("a bug")
    assert error_status(bug) == 500
    assert error_body(bug)["error"]["type"] == "server_error"
    assert error_body(bug)["error"]["message"] == "a bug"
    assert error_status(ConfigError(())) == 500
    request = Request(id="r", prompt_tokens=1)
    blocked = WouldBlock(
        Admit(lane="chat", tier="default", request=request, prompt_tokens=1, cost=1.0, message="ok")
    )
    assert error_status(blocked) == 503
    assert error_body(blocked)["error"]["code"] == "would_block"


def test_outcomes_map_to_statuses() -> None:
    assert [outcome_status(o) for o in ("completed", "failed", "cancelled", "expired")] == [
        200,
        502,
        499,
        503,
    ]
    assert outcome_status(_finished(Outcome.FAILED)) == 502
    with pytest.raises(UsageError):
        outcome_status(Outcome.REJECTED)


def test_an_in_stream_error_is_one_sse_data_line() -> None:
    line = sse_error("engine died")
    assert line.startswith("data: ")
    assert line.endswith("\n\n")
    assert json.loads(line[6:])["error"] == {
        "message": "engine died",
        "type": "server_error",
        "param": None,
        "code": "engine_error",
    }
    shed = Rejected.of(
        Defer(reason=Reason.OVERLOAD_SHED, message="shed", retry_after=5.0, http_status=503)
    )
    assert json.loads(sse_error(shed)[6:])["error"]["code"] == "overload_shed"
