"""vLLM 0.33's OpenAI-compatible server, as :mod:`tests.adapters.servers` describes."""

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


class VLLMApp(EngineApp):
    """vLLM's OpenAI server: ``/v1/chat/completions``, ``/v1/completions``, ``/metrics``."""

    async def answer(
        self, path: str, body: dict[str, Any], script: Script, stream: Stream, send: Send
    ) -> None:
        chat = path == "/v1/chat/completions"
        if script.status != 200:
            error = {
                "message": script.message,
                "type": script.error_type,
                "param": script.param,
                "code": script.status,
            }
            headers = {"retry-after": script.retry_after} if script.retry_after else {}
            await json_response(send, script.status, script.body({"error": error}), headers)
            return
        n = int(body.get("n") or 1)
        limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        tokens = min(script.tokens, limit)
        reply = _Reply(chat, body, stream.hit, script.usage)
        if not body.get("stream"):
            if await stream.wait(script.ttft + script.tpot * tokens):
                whole = reply.whole(n, tokens, script.finish_reason)
                await json_response(send, 200, script.body(whole), {})
            return
        await stream.start()
        await self._stream(stream, reply, script, n, tokens, body)

    async def _stream(
        self, stream: Stream, reply: _Reply, script: Script, n: int, tokens: int, body: Any
    ) -> None:
        if not await stream.wait(script.ttft):
            return
        start = time.monotonic()
        if reply.chat:  # vLLM sends the role chunks with the first engine output
            for index in range(n):
                await stream.data(reply.chunk(index, {"role": "assistant", "content": ""}, None))
        sent = 0
        while sent < tokens:
            if script.drop_after is not None and sent >= script.drop_after:
                raise Dropped
            if script.fail_after is not None and sent >= script.fail_after:
                await stream.data(reply.error(script))
                await stream.data("[DONE]")
                await stream.end()
                return
            if sent and not await stream.wait(
                0, until=start + script.tpot * sent / script.per_chunk
            ):
                return
            step = min(script.per_chunk, tokens - sent)
            last = sent + step >= tokens and not script.no_done
            for index in range(n):
                text = "".join(f"t{sent + k} " for k in range(step))
                reason = script.finish_reason if last else None
                await stream.data(reply.piece(index, text, reason), token=index == n - 1)
            if script.raw_chunk is not None and not sent:
                await stream.data(script.raw_chunk)
            sent += step
        if script.no_done:
            await stream.end()
            return
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            await stream.data(reply.usage_chunk(n * tokens))
        await stream.data("[DONE]")
        await stream.end()


class _Reply:
    """vLLM's response objects for one request."""

    def __init__(self, chat: bool, body: dict[str, Any], hit: Hit, usage: Any) -> None:
        self.chat = chat
        self.sent_usage = usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + hit.headers.get("x-request-id", "x")
        self.model = body.get("model", "m")
        self.prompt = prompt_tokens(body)
        self.created = int(time.time())

    def _head(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def usage(self, completion: int) -> Any:
        if self.sent_usage is not COUNTED:
            return self.sent_usage
        total = self.prompt + completion
        return {
            "prompt_tokens": self.prompt,
            "total_tokens": total,
            "completion_tokens": completion,
        }

    def chunk(self, index: int, delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {**self._head(), "choices": [choice], "prompt_token_ids": None}

    def piece(self, index: int, text: str, reason: str | None) -> dict[str, Any]:
        if not self.chat:
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": reason}
            return {**self._head(), "choices": [choice | {"stop_reason": None}]}
        choice = {"index": index, "delta": {"content": text}, "logprobs": None}
        choice |= {"finish_reason": reason, "token_ids": None}
        return {**self._head(), "choices": [choice], "kv_transfer_params": None}

    def usage_chunk(self, completion: int) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": self.usage(completion)}

    def error(self, script: Script) -> dict[str, Any]:
        if script.flat_error:
            return {"object": "error", "message": script.message, "type": script.fail_type,
                    "param": None, "code": script.fail_code}  # fmt: skip
        error = {"message": script.message, "type": script.fail_type, "param": None}
        return {"error": error | {"code": script.fail_code}}

    def whole(self, n: int, tokens: int, reason: str) -> dict[str, Any]:
        text = "".join(f"t{k} " for k in range(tokens))
        choices: list[dict[str, Any]] = []
        for index in range(n):
            if self.chat:
                message = {"role": "assistant", "content": text, "tool_calls": []}
                choices.append({"index": index, "message": message, "logprobs": None,
                                "finish_reason": reason, "stop_reason": None})  # fmt: skip
            else:
                choices.append({"index": index, "text": text, "logprobs": None,
                                "finish_reason": reason, "stop_reason": None})  # fmt: skip
        head = self._head() | {"object": "chat.completion" if self.chat else "text_completion"}
        return {**head, "choices": choices, "usage": self.usage(n * tokens)}
