"""An OpenAI-compatible chat gateway that puts a slopolicy Gate in front of an engine.

Serve it (``pip install starlette uvicorn``)::

    uvicorn examples.gateway_starlette:app

and ``POST /v1/chat/completions`` with ``{"messages": [...], "max_tokens": 64,
"stream": true}``; the ``X-Tenant`` header names the tenant (a real gateway
derives it from the API key) and ``X-Lane`` may hint a lane. The engine is the
in-process :class:`~slopolicy.testing.fake_engine.FakeEngine`; swap in your
own async stream of chunks.

How it holds the policy's promises:

- Admission happens before the response starts, so a refusal can still be a
  429/503 with ``Retry-After`` and an OpenAI-shaped error body.
- A streamed response owns its ticket (:class:`GatedStream`): the ticket is
  released however the response ends: the stream's end (completed), an engine
  error (failed, reported in-stream as vLLM does), or the client going away
  (cancelled, and the engine stream is closed).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from slopolicy import Gate, InvalidRequest, Outcome, PolicyConfig, Rejected, Request
from slopolicy.runtime import Ticket
from slopolicy.runtime.http import error_response, outcome_status, sse_error
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine

__all__ = ("GatedStream", "app", "create_app")


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


def _sse(data: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(data)}\n\n"


def _error(error: Rejected | InvalidRequest) -> JSONResponse:
    status, headers, body = error_response(error, default_retry_after=1.0)
    return JSONResponse(body, status_code=status, headers=headers)


def _build_request(body: Any, headers: Mapping[str, str]) -> Request:
    if not isinstance(body, Mapping):
        raise InvalidRequest("body", "expected a JSON object")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 256))
    return Request(
        tenant=headers.get("x-tenant", "anonymous"),
        messages=body.get("messages"),
        max_new_tokens=max_tokens,
        n=body.get("n", 1),
        model=body.get("model"),
        lane=headers.get("x-lane"),
    )


class _Reply:
    """OpenAI chat-completion objects for one request."""

    __slots__ = ("created", "id", "model")

    def __init__(self, ticket: Ticket) -> None:
        self.id = f"chatcmpl-{ticket.id}"
        self.model = ticket.request.model or "fake"
        self.created = int(time.time())

    def chunk(self, delta: Mapping[str, str], finish_reason: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": dict(delta), "finish_reason": finish_reason}
        return self._object("chat.completion.chunk", choices=[choice])

    def usage(self, prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _object(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
        } | fields


async def _events(
    ticket: Ticket, engine: FakeEngine, include_usage: bool
) -> AsyncGenerator[str, None]:
    """The SSE body: content deltas, a final chunk, usage if asked, ``[DONE]``."""
    reply = _Reply(ticket)
    produced = 0
    yield _sse(reply.chunk({"role": "assistant", "content": ""}, None))
    try:
        async for chunk in ticket.track(engine.stream(ticket.request), tokens_of=_tokens):
            produced += chunk.tokens
            yield _sse(reply.chunk({"content": chunk.text + " "}, None))
    except EngineError as error:
        # The status line is long gone: report the failure in-stream, as vLLM does.
        yield sse_error(str(error))
        yield "data: [DONE]\n\n"
        return
    reason = "length" if produced >= ticket.request.max_new_tokens else "stop"
    yield _sse(reply.chunk({}, reason))
    if include_usage:
        prompt = ticket.finished.prompt_tokens if ticket.finished else 0
        yield _sse(
            reply._object("chat.completion.chunk", choices=[], usage=reply.usage(prompt, produced))
        )
    yield "data: [DONE]\n\n"


class GatedStream(StreamingResponse):
    """A streaming response that owns a ticket and releases it however it ends."""

    def __init__(self, ticket: Ticket, content: AsyncGenerator[str, None]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.ticket = ticket
        self._events = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.ticket:  # cancellation or an error here releases it too
            try:
                await super().__call__(scope, receive, send)
            except (ClientDisconnect, OSError):
                self.ticket.cancel()  # the client went away: not an engine failure
            finally:
                await self._events.aclose()


async def chat_completions(http: HttpRequest) -> Response:
    gate: Gate = http.app.state.gate
    engine: FakeEngine = http.app.state.engine
    try:
        body = await http.json()
        request = _build_request(body, http.headers)
        ticket = await gate.admit(request)  # waits its fair turn, or raises
    except json.JSONDecodeError:
        return _error(InvalidRequest("body", "not valid JSON"))
    except (Rejected, InvalidRequest) as error:
        return _error(error)
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        # No await between admission and handing the ticket to the response.
        return GatedStream(ticket, _events(ticket, engine, include_usage))
    return await _complete(ticket, engine)


async def _complete(ticket: Ticket, engine: FakeEngine) -> Response:
    reply = _Reply(ticket)
    texts: list[str] = []
    async with ticket:
        try:
            async for chunk in ticket.track(engine.stream(ticket.request), tokens_of=_tokens):
                texts.append(chunk.text)
        except EngineError as error:
            body = {"message": str(error), "type": "server_error", "param": None}
            body["code"] = "engine_error"
            return JSONResponse({"error": body}, status_code=outcome_status(Outcome.FAILED))
    finished = ticket.finished
    assert finished is not None
    reason = "length" if finished.output_tokens >= ticket.request.max_new_tokens else "stop"
    message = {"role": "assistant", "content": " ".join(texts)}
    return JSONResponse(
        reply._object(
            "chat.completion",
            choices=[{"index": 0, "message": message, "finish_reason": reason}],
            usage=reply.usage(finished.prompt_tokens, finished.output_tokens),
        )
    )


async def status(http: HttpRequest) -> Response:
    stats = http.app.state.gate.statistics()
    policy = stats.policy
    return JSONResponse(
        {
            "waiting": stats.waiting,
            "running": policy.running,
            "queued": dict(policy.queued),
            "overload": policy.overload.value,
            "outcomes": {outcome.value: count for outcome, count in policy.outcomes.items()},
        }
    )


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/slopolicy/status", status),
]


def create_app(gate: Gate, engine: FakeEngine) -> Starlette:
    """The gateway around an open ``gate`` (the caller owns its lifetime)."""
    application = Starlette(routes=ROUTES)
    application.state.gate = gate
    application.state.engine = engine
    return application


@asynccontextmanager
async def _lifespan(application: Starlette) -> AsyncIterator[None]:
    async with Gate(PolicyConfig()) as gate:
        application.state.gate = gate
        application.state.engine = FakeEngine()
        yield


#: For ``uvicorn examples.gateway_starlette:app``: the default policy, a fake engine.
app = Starlette(routes=ROUTES, lifespan=_lifespan)
