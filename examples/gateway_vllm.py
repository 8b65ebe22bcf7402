"""An OpenAI-compatible FastAPI gateway in front of vLLM's OpenAI server, with a slopolicy Gate.

Serve it (``pip install 'slopolicy[openai]' fastapi uvicorn``)::

    VLLM_URL=http://127.0.0.1:8000/v1 uvicorn examples.gateway_vllm:app --port 9000

and point any OpenAI client at ``http://127.0.0.1:9000/v1``. The ``X-Tenant``
header names the tenant (a real gateway derives it from the API key) and
``X-Lane`` may hint a lane. vLLM's ``/metrics`` feeds the gate's signals, so
KV pressure moves the fallback ladder.

How it answers:

- The gate refuses (quota, overload, full queue): 429/503 with ``Retry-After``
  and an OpenAI error body, before anything reaches vLLM.
- vLLM refuses or fails before the stream (503 overload, 400 prompt too
  long): the status from :class:`~slopolicy.adapters.EngineError`, with vLLM's
  ``Retry-After`` passed on.
- vLLM fails inside the stream: a ``data:`` line with the error, then
  ``[DONE]``, as vLLM itself does.
- The client goes away: the response generator is closed, which closes the
  stream to vLLM (vLLM aborts) and releases the ticket as cancelled.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from slopolicy import Gate, InvalidRequest, PolicyConfig, Rejected
from slopolicy.adapters import EngineError, GatedStream, engine_error_response
from slopolicy.adapters.metrics import MetricsScraper
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.runtime.http import error_response, sse_error

__all__ = ("GatedSSE", "app", "create_app")

#: vLLM priority per lane (lower runs first; needs ``--scheduling-policy priority``).
PRIORITIES = {"interactive": 0, "heavy": 5, "background": 10}


def _refusal(error: Rejected | InvalidRequest | EngineError) -> JSONResponse:
    if isinstance(error, EngineError):
        status, headers, body = engine_error_response(error, default_retry_after=1.0)
    else:
        status, headers, body = error_response(error, default_retry_after=1.0)
    return JSONResponse(body, status_code=status, headers=headers)


# --8<-- [start:sse]
async def _sse(stream: GatedStream[ChatCompletionChunk]) -> AsyncGenerator[str, None]:
    """vLLM's framing: one ``data:`` line per chunk, then ``[DONE]``."""
    try:
        async for chunk in stream:
            yield f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"
    except EngineError as error:
        # The status line is long gone: report the failure in-stream, as vLLM does.
        yield sse_error(error.message, code=error.code)
    yield "data: [DONE]\n\n"


class GatedSSE(StreamingResponse):
    """A streamed answer that closes its gated stream however the response ends.

    Starlette leaves the body iterator open when the client disconnects; this
    closes it at once, so the ticket is released as cancelled and the stream
    to vLLM closes (vLLM aborts the request) without waiting for the garbage
    collector.
    """

    def __init__(self, stream: GatedStream[ChatCompletionChunk]) -> None:
        self.events = _sse(stream)
        super().__init__(self.events, media_type="text/event-stream")
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass  # the client went away: cancelled below, not an engine failure
        finally:
            await self.events.aclose()
            await self.stream.aclose()


# --8<-- [end:sse]


def _policy_fields(headers: Mapping[str, str]) -> dict[str, Any]:
    return {"tenant": headers.get("x-tenant", "anonymous"), "lane": headers.get("x-lane")}


# --8<-- [start:route]
async def chat_completions(http: Request) -> Response:
    gated: GatedOpenAI = http.app.state.gated
    try:
        body = await http.json()
    except ValueError:
        return _refusal(InvalidRequest("body", "not valid JSON"))
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _refusal(InvalidRequest("messages", "expected a list of messages"))
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "stream")}
    model = str(body.get("model") or http.app.state.model)
    try:
        if body.get("stream"):
            stream = await gated.chat_stream(
                model=model, messages=body["messages"], **_policy_fields(http.headers), **params
            )
            return GatedSSE(stream)
        reply = await gated.chat(
            model=model, messages=body["messages"], **_policy_fields(http.headers), **params
        )
    except (Rejected, InvalidRequest, EngineError) as error:
        return _refusal(error)
    return JSONResponse(reply.response.model_dump(exclude_unset=True))


# --8<-- [end:route]


def create_app(gated: GatedOpenAI, *, model: str = "default") -> FastAPI:
    """The gateway around ``gated`` (the caller owns its gate and client)."""
    application = FastAPI()
    application.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    application.state.gated = gated
    application.state.model = model
    return application


# --8<-- [start:lifespan]
@asynccontextmanager
async def _lifespan(application: FastAPI) -> AsyncIterator[None]:
    base = os.environ.get("VLLM_URL", "http://127.0.0.1:8000/v1")
    metrics = MetricsScraper(base.removesuffix("/v1") + "/metrics", engine="vllm")
    async with (
        metrics,
        Gate(PolicyConfig(), signals=metrics, poll_every=1.0) as gate,
        AsyncOpenAI(base_url=base, api_key=os.environ.get("VLLM_API_KEY", "-")) as client,
    ):
        application.state.gated = GatedOpenAI(client, gate, priorities=PRIORITIES)
        application.state.model = os.environ.get("VLLM_MODEL", "default")
        yield


# --8<-- [end:lifespan]


#: For ``uvicorn examples.gateway_vllm:app``: the default policy in front of ``VLLM_URL``.
app = FastAPI(lifespan=_lifespan)
app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
