"""Reading huggingface_hub's TGI streams: errors, tokens, how they ended, closing them.

Used by :mod:`slopolicy.adapters.tgi` (import that module: it checks the
``tgi`` extra is installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from huggingface_hub.errors import (
    GenerationError,
    HfHubHTTPError,
    IncompleteGenerationError,
    InferenceTimeoutError,
    OverloadedError,
    TextGenerationError,
    ValidationError,
)

from slopolicy.adapters.common import EngineError, EngineFault, fault_from_status, parse_retry_after

if TYPE_CHECKING:
    from huggingface_hub import ChatCompletionStreamOutput, TextGenerationStreamOutput

__all__ = ("Closer", "TextState", "chat_tokens", "classify")


_TOO_LONG = ("`inputs` must have less than", "`inputs` tokens + `max_new_tokens` must be")


def _validation(message: str) -> EngineError:
    too_long = any(text in message for text in _TOO_LONG)
    fault = EngineFault.PROMPT_TOO_LONG if too_long else EngineFault.INVALID_REQUEST
    return EngineError(fault, message)


def _by_type(error_type: object, message: str, status: int | None) -> EngineError:
    """TGI's ``error_type`` (or, without one, its message) -> the fault."""
    if error_type == "overloaded" or message == "Model is overloaded":
        error = EngineError(EngineFault.OVERLOADED, message)
    elif error_type == "validation" or message.startswith("Input validation error"):
        error = _validation(message)
    elif error_type in ("generation", "incomplete_generation"):
        error = EngineError(EngineFault.FAILED, message)
    else:
        error = fault_from_status(status, message)
    error.engine_status = status
    return error


def classify(error: Exception) -> EngineError:
    """The :class:`EngineError` for an exception from huggingface_hub's client."""
    message = str(error)
    if isinstance(error, OverloadedError):
        return EngineError(EngineFault.OVERLOADED, message)
    if isinstance(error, ValidationError):
        return _validation(message)
    if isinstance(error, (GenerationError, IncompleteGenerationError)):
        return EngineError(EngineFault.FAILED, message)
    if isinstance(error, TextGenerationError):  # UnknownError: the Messages API's stream error
        detail = error.args[0] if error.args else None
        if isinstance(detail, Mapping):
            status = detail.get("http_status_code")
            text = str(detail.get("message", message))
            # TGI sends 422 for every in-stream error: read the message instead.
            return _by_type(None, text, None if status == 422 else status)
        return _by_type(None, message, None)
    if isinstance(error, InferenceTimeoutError):
        return EngineError(EngineFault.TIMEOUT, "TGI did not answer in time")
    if isinstance(error, HfHubHTTPError):
        response = error.response
        try:
            body = response.json()
        except Exception:  # not JSON, or a stream that was not read
            body = {}
        if not isinstance(body, Mapping):  # a list, a number: not TGI's error object
            body = {}
        detail = body.get("error")
        text = detail if isinstance(detail, str) else message
        result = _by_type(body.get("error_type"), text, response.status_code)
        result.retry_after = parse_retry_after(response.headers.get("retry-after"))
        return result
    names = {kind.__name__ for kind in type(error).__mro__}
    if "TimeoutException" in names:
        return EngineError(EngineFault.TIMEOUT, "TGI did not answer in time")
    if names & {"TransportError", "NetworkError", "RemoteProtocolError", "ProtocolError"}:
        return EngineError(EngineFault.DISCONNECTED, f"the connection to TGI broke: {error}")
    return EngineError(EngineFault.FAILED, f"{type(error).__name__}: {error}")


def _response_of(stream: object, depth: int = 4) -> Any:
    """The HTTP response under huggingface_hub's stream generators (read from
    their frames while they have not started), or ``None``."""
    frame = getattr(stream, "ag_frame", None)
    if frame is None or depth == 0:
        return None
    for value in frame.f_locals.values():
        # The response, not the client beside it (both have aclose/is_closed).
        if hasattr(value, "status_code") and hasattr(value, "aclose"):
            return value
        found = _response_of(value, depth - 1)
        if found is not None:
            return found
    return None


def _generators_of(stream: object, depth: int = 4) -> list[Any]:
    """``stream`` and the async generators it reads from, outermost first."""
    frame = getattr(stream, "ag_frame", None)
    if frame is None or depth == 0:
        return []
    found = [stream]
    for value in frame.f_locals.values():
        if hasattr(value, "ag_frame"):
            found += _generators_of(value, depth - 1)
    return found


class Closer:
    """Closes a huggingface_hub stream now, not when the client closes."""

    __slots__ = ("generators", "response")

    def __init__(self, stream: object) -> None:
        self.generators = _generators_of(stream)
        self.response = _response_of(stream)

    async def __call__(self) -> None:
        for generator in self.generators:
            await generator.aclose()
        response = self.response
        if response is not None and not response.is_closed:
            await response.aclose()  # the connection closes: TGI stops generating


class TextState:
    """A text-generation stream: one token per event; the last has details."""

    __slots__ = ("ended", "generated")

    def __init__(self) -> None:
        self.ended = False  # the last event (the one with details) arrived
        self.generated: object = None  # as TGI sent it: checked when settled

    def watch(self, event: TextGenerationStreamOutput) -> bool:
        """Note what ``event`` says; whether to pass it to the caller."""
        details = event.details
        if details is not None:
            self.ended = True
            self.generated = getattr(details, "generated_tokens", None)
        return True

    def settle(self) -> object:
        """The engine's output-token count as sent (``None``: none); raises
        :class:`EngineError` when the stream ended before it finished."""
        if not self.ended:
            raise EngineError(EngineFault.DISCONNECTED, "TGI's stream ended before its last token")
        return self.generated


def chat_tokens(chunk: ChatCompletionStreamOutput) -> int:
    """TGI sends one chunk per token (the last with its ``finish_reason``)."""
    total = 0
    for choice in chunk.choices:
        if choice.logprobs is not None and choice.logprobs.content:
            total += len(choice.logprobs.content)
        elif choice.delta.content or choice.delta.tool_calls or choice.finish_reason:
            total += 1
    return total
