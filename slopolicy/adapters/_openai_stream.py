"""Reading an OpenAI-compatible stream: errors, tokens per chunk, how it ended.

Used by :mod:`slopolicy.adapters.openai` (import that module: it checks the
``openai`` extra is installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import openai

from slopolicy.adapters._choices import ChoiceState, Chunk
from slopolicy.adapters.common import EngineError, EngineFault, fault_from_status, parse_retry_after

if TYPE_CHECKING:
    from openai.types import Completion
    from openai.types.chat import ChatCompletionChunk

__all__ = ("StreamState", "chat_tokens", "classify", "completion_tokens")


# finish_reason values meaning the engine gave up on the sequence (vLLM).
_BROKEN_FINISH = frozenset({"error", "abort"})


def classify(error: Exception) -> EngineError:
    """The :class:`EngineError` for an exception from the openai client."""
    if isinstance(error, openai.APITimeoutError):
        return EngineError(EngineFault.TIMEOUT, "the engine did not answer in time")
    if isinstance(error, openai.APIConnectionError):
        message = f"the connection to the engine broke: {error.__cause__ or error}"
        return EngineError(EngineFault.DISCONNECTED, message)
    if isinstance(error, openai.APIStatusError):
        retry = parse_retry_after(error.response.headers.get("retry-after"))
        return fault_from_status(
            error.status_code, _message(error.body, error.message), param=error.param,
            kind=error.type, retry_after=retry,
        )  # fmt: skip
    if isinstance(error, openai.APIError):  # an error event inside the stream
        return _body_fault(error.body, error.message)
    return EngineError(EngineFault.FAILED, f"{type(error).__name__}: {error}")


def _message(body: object, default: str) -> str:
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str):
            return message
    return default


def _body_fault(body: object, default: str) -> EngineError:
    """An error object sent inside a stream: vLLM's ``code`` is the HTTP status
    it would have answered (an int, or a digit string in older servers)."""
    status: int | None = None
    param: str | None = None
    kind: str | None = None
    if isinstance(body, Mapping):
        code = body.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            status = code
        elif isinstance(code, str) and code.isdigit():
            status = int(code)
        raw_param, raw_kind = body.get("param"), body.get("type")
        param = raw_param if isinstance(raw_param, str) else None
        kind = raw_kind if isinstance(raw_kind, str) else None
    # A 4xx here is still the caller's: vLLM validates some prompts (length
    # against max_model_len) only once the engine takes the request, in-stream.
    return fault_from_status(status, _message(body, default), param=param, kind=kind)


def _flat_error(chunk: Any) -> Mapping[str, Any] | None:
    """Older vLLM sent in-stream errors flat, ``{"object": "error", ...}``; the
    openai client parses those as a chunk instead of raising."""
    if getattr(chunk, "object", None) != "error":
        return None
    extra = chunk.model_extra or {}
    return {"message": extra.get("message", "engine error"), **extra}


def _extra(model: Any, name: str) -> object:
    extra = getattr(model, "model_extra", None)
    return extra.get(name) if extra else None


def chat_tokens(chunk: ChatCompletionChunk) -> int:
    """Output tokens in a chat chunk: ``logprobs`` entries when sent, else one
    per choice carrying output or its ``finish_reason`` (vLLM's last chunk
    carries the final token; an EOS has no text)."""
    total = 0
    for choice in chunk.choices:
        logprobs = choice.logprobs
        if logprobs is not None and logprobs.content:
            total += len(logprobs.content)
            continue
        delta = choice.delta
        output = delta.content or delta.tool_calls or delta.refusal
        # vLLM streams reasoning as ``reasoning`` (older: ``reasoning_content``).
        thought = _extra(delta, "reasoning") or _extra(delta, "reasoning_content")
        if output or thought or choice.finish_reason is not None:
            total += 1
    return total


def completion_tokens(chunk: Completion) -> int:
    """Output tokens in a legacy completion chunk (see :func:`chat_tokens`)."""
    total = 0
    for choice in chunk.choices:
        logprobs = choice.logprobs
        if logprobs is not None and logprobs.tokens:
            total += len(logprobs.tokens)
        elif choice.text or choice.finish_reason is not None:
            total += 1
    return total


class StreamState(ChoiceState):
    """An OpenAI-compatible stream: an error object in place of a chunk raises,
    and a choice that finished as ``error`` or ``abort`` (vLLM) fails it."""

    __slots__ = ()

    def watch(self, chunk: Chunk) -> bool:
        """Note what ``chunk`` says; whether to pass it to the caller."""
        flat = _flat_error(chunk)
        if flat is not None:
            raise _body_fault(flat, "engine error")
        return super().watch(chunk)

    def settle(self) -> object:
        """The engine's output-token count as sent (``None``: none); raises
        :class:`EngineError` when the stream failed or ended before it finished."""
        broken = sorted(reason for reason in self.finished.values() if reason in _BROKEN_FINISH)
        if broken:
            raise EngineError(EngineFault.FAILED, f"the engine ended a sequence with {broken[0]!r}")
        return super().settle()
