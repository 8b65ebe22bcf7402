"""TGI's router (``router/src/server.rs``), as :mod:`tests.adapters.servers` describes.

- ``POST /`` (``stream`` picks), ``/generate``, ``/generate_stream``: token
  events ``{"index", "token": {"id", "text", "logprob", "special"},
  "generated_text", "details"}``, the last with ``generated_text`` and (when
  ``details``) ``{"finish_reason", "generated_tokens", "seed",
  "input_length"}``; no ``[DONE]``. Errors in a stream are an event
  ``{"error", "error_type"}`` on HTTP 200, then the body ends; without a
  stream they are 429 ``overloaded``, 422 ``validation``, 424 ``generation``.
  ``/`` answers a list ``[generation]`` when not streaming.
- ``POST /v1/chat/completions``: one chunk per token (``delta`` with
  ``role`` and ``content``), the last with ``finish_reason``, a usage chunk
  with ``choices: []`` when asked, then ``data: [DONE]``; an error inside the
  stream is ``{"error": {"message", "http_status_code": 422}}`` then
  ``[DONE]``; before it, the status and ``{"error", "error_type"}``.
"""

from __future__ import annotations

import time
from typing import Any

from tests.adapters.servers import (
    COUNTED,
    Dropped,
    EngineApp,
    Hit,
    Script,
    Send,
    Stream,
    json_response,
    prompt_tokens,
)

_MESSAGES = {
    "overloaded": "Model is overloaded",
    "validation": "Input validation error: `inputs` must have less than 1024 tokens. Given: 4000",
    "generation": "Request failed during generation: CUDA out of memory",
    "incomplete_generation": "Incomplete generation",
}
_STATUS = {"overloaded": 429, "validation": 422, "generation": 424, "incomplete_generation": 500}


def _token(index: int) -> dict[str, Any]:
    return {"id": 100 + index, "text": f"t{index} ", "logprob": -0.25, "special": False}


class TGIApp(EngineApp):
    """TGI's text generation and Messages API routes."""

    async def answer(
        self, path: str, body: dict[str, Any], script: Script, stream: Stream, send: Send
    ) -> None:
        if path == "/v1/chat/completions":
            await self._chat(stream, script, body, send)
        else:
            streaming = path == "/generate_stream" or (path == "/" and body.get("stream"))
            await self._generate(stream, script, body, send, bool(streaming), path == "/")

    async def _generate(
        self, stream: Stream, script: Script, body: Any, send: Send, streaming: bool, compat: bool
    ) -> None:
        parameters = body.get("parameters") or {}
        tokens = min(script.tokens, int(parameters.get("max_new_tokens") or 100))
        error = {"error": _MESSAGES[script.tgi_error_type], "error_type": script.tgi_error_type}
        if not streaming:
            if script.status != 200 or script.raw_answer is not None:
                status = 200 if script.status == 200 else _STATUS[script.tgi_error_type]
                await json_response(send, status, script.body(error), {})
            elif await stream.wait(script.ttft + script.tpot * tokens):
                text = "".join(_token(k)["text"] for k in range(tokens))
                count = tokens if script.generated_tokens is COUNTED else script.generated_tokens
                details = {"finish_reason": script.finish_reason, "generated_tokens": count}
                details |= {
                    "seed": None,
                    "prefill": [],
                    "tokens": [_token(k) for k in range(tokens)],
                }
                reply: dict[str, Any] = {"generated_text": text}
                if parameters.get("details"):
                    reply["details"] = details
                await json_response(send, 200, [reply] if compat else reply, {})
            return
        await stream.start()  # TGI answers 200 and reports errors as events
        if script.status != 200 or not await stream.wait(script.ttft):
            if script.status != 200:
                await stream.data(error)
                await stream.end()
            return
        await self._tokens(stream, script, tokens, body, parameters)

    async def _tokens(
        self, stream: Stream, script: Script, tokens: int, body: Any, parameters: Any
    ) -> None:
        start = time.monotonic()
        for sent in range(tokens):
            if script.fail_after is not None and sent >= script.fail_after:
                await stream.data(error_event(script))
                await stream.end()
                return
            if script.drop_after is not None and sent >= script.drop_after:
                raise Dropped
            if sent and not await stream.wait(0, until=start + script.tpot * sent):
                return
            last = sent == tokens - 1 and not script.no_done
            event: dict[str, Any] = {"index": sent + 1, "token": _token(sent)}
            event |= {"generated_text": None, "details": None}
            if last:
                event["generated_text"] = "".join(_token(k)["text"] for k in range(tokens))
                count = tokens if script.generated_tokens is COUNTED else script.generated_tokens
                if parameters.get("details"):
                    event["details"] = {"finish_reason": script.finish_reason,
                                        "generated_tokens": count, "seed": None,
                                        "input_length": prompt_tokens(body)}  # fmt: skip
            await stream.data(event, token=True)
            if script.raw_chunk is not None and not sent:
                await stream.data(script.raw_chunk)
        await stream.end()

    async def _chat(self, stream: Stream, script: Script, body: Any, send: Send) -> None:
        tokens = min(script.tokens, int(body.get("max_tokens") or 100))
        if script.status != 200:
            error = {"error": _MESSAGES[script.tgi_error_type], "error_type": script.tgi_error_type}
            await json_response(send, _STATUS[script.tgi_error_type], script.body(error), {})
            return
        reply = _Chat(body, stream.hit, script.usage)
        if not body.get("stream"):
            if await stream.wait(script.ttft + script.tpot * tokens):
                await json_response(
                    send, 200, script.body(reply.whole(tokens, script.finish_reason)), {}
                )
            return
        await stream.start()
        if not await stream.wait(script.ttft):
            return
        start = time.monotonic()
        for sent in range(tokens):
            if script.fail_after is not None and sent >= script.fail_after:
                message = _MESSAGES[script.tgi_error_type]
                await stream.data({"error": {"message": message, "http_status_code": 422}})
                break
            if sent and not await stream.wait(0, until=start + script.tpot * sent):
                return
            reason = script.finish_reason if sent == tokens - 1 else None
            await stream.data(reply.chunk(_token(sent)["text"], reason), token=True)
        else:
            if (body.get("stream_options") or {}).get("include_usage"):
                await stream.data(reply.usage_chunk(tokens))
        await stream.data("[DONE]")
        await stream.end()


def error_event(script: Script) -> dict[str, str]:
    kind = script.tgi_error_type
    return {"error": _MESSAGES[kind], "error_type": kind}


class _Chat:
    """TGI's Messages API objects for one request."""

    def __init__(self, body: dict[str, Any], hit: Hit, usage: Any) -> None:
        self.sent_usage = usage
        self.model = body.get("model") or "tgi"
        self.prompt = prompt_tokens(body)
        self.created = int(time.time())

    def _head(self, kind: str) -> dict[str, Any]:
        return {"object": kind, "id": "", "created": self.created, "model": self.model,
                "system_fingerprint": "3.3.6-native"}  # fmt: skip

    def usage(self, completion: int) -> Any:
        if self.sent_usage is not COUNTED:
            return self.sent_usage
        total = self.prompt + completion
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": completion,
            "total_tokens": total,
        }

    def chunk(self, text: str, reason: str | None) -> dict[str, Any]:
        delta = {"role": "assistant", "content": text, "tool_call_id": None}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return self._head("chat.completion.chunk") | {"choices": [choice], "usage": None}

    def usage_chunk(self, completion: int) -> dict[str, Any]:
        return self._head("chat.completion.chunk") | {
            "choices": [],
            "usage": self.usage(completion),
        }

    def whole(self, tokens: int, reason: str) -> dict[str, Any]:
        text = "".join(_token(k)["text"] for k in range(tokens))
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
        return self._head("chat.completion") | {"choices": [choice], "usage": self.usage(tokens)}
