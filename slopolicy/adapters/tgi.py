"""The gate in front of Text Generation Inference, through huggingface_hub's async client.

::

    gated = GatedInferenceClient(AsyncInferenceClient(model="http://tgi:8080"), gate)
    stream = await gated.text_generation_stream("Hello", max_new_tokens=128, tenant="acme")
    async with stream:
        async for event in stream: ...     # TextGenerationStreamOutput, unchanged
    reply = await gated.chat(messages=[...], max_tokens=128, tenant="acme")

Calls are admitted by the gate first and sent with the ticket's limits
(``max_new_tokens``/``max_tokens`` capped; ``best_of`` as the ladder left it).
Text generation always asks for ``details=True``: each event is one token,
and the last carries ``details.generated_tokens``, the engine's own count,
which settles the tenant's charge. Chat streams ask for
``stream_options.include_usage`` the same way (the usage chunk reaches the
caller only when asked for).

TGI reports errors differently per route, and each maps to an
:class:`~slopolicy.adapters.common.EngineError`:

- ``/generate_stream`` answers HTTP 200 and sends the error as an event,
  ``data: {"error": "Model is overloaded", "error_type": "overloaded"}``, with
  no ``[DONE]``; huggingface_hub raises ``OverloadedError``, ``ValidationError``,
  ``GenerationError``, ``IncompleteGenerationError`` from iterating.
- ``/generate`` (no stream) answers 429 ``overloaded``, 422 ``validation``,
  424 ``generation``, 500 ``incomplete_generation``: the same exceptions.
- The Messages API (``/v1/chat/completions``) answers those statuses before
  a stream (huggingface_hub raises ``HfHubHTTPError``); inside a stream the
  error is ``{"error": {"message": ..., "http_status_code": 422}}`` whatever
  happened, which huggingface_hub raises as ``UnknownError``: the message
  tells overload from validation.

``overloaded`` → overloaded (503); validation → prompt_too_long (413) when the
prompt is too long ("``inputs`` must have less than ..." or "``inputs`` tokens +
``max_new_tokens`` must be <= ..."), else invalid_request (400); generation and
incomplete generation → failed (502); the client's timeout → timeout (504); a
dropped connection → disconnected (502).

huggingface_hub keeps every streamed response open on the client's exit stack
until the client is closed. So that a stream stopped early also stops TGI
(it stops generating when the connection closes), the adapter finds that
response through the stream's generators when the call returns and closes it
when the stream ends, however it ends. The non-streamed ``text_generation``
of huggingface_hub runs ``asyncio.to_thread``: asyncio only; the streamed
calls and ``chat`` also run on trio (huggingface_hub 2.x speaks through httpx2).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

try:
    from huggingface_hub import AsyncInferenceClient, ChatCompletionInputStreamOptions
    from huggingface_hub.errors import (
        GenerationError,
        HfHubHTTPError,
        IncompleteGenerationError,
        InferenceTimeoutError,
        OverloadedError,
        TextGenerationError,
        ValidationError,
    )
except ImportError as error:  # pragma: no cover - covered by a test that hides the package
    raise ImportError(
        "slopolicy.adapters.tgi needs huggingface_hub: pip install 'slopolicy[tgi]'"
    ) from error

from slopolicy.adapters.common import (
    EngineError,
    EngineFault,
    GatedStream,
    Reply,
    Who,
    fail,
    fault_from_status,
    parse_retry_after,
    policy_request,
    relay,
)
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.errors import UsageError
from slopolicy.runtime.gate import Gate
from slopolicy.runtime.ticket import Ticket

if TYPE_CHECKING:
    from huggingface_hub import (
        ChatCompletionOutput,
        ChatCompletionStreamOutput,
        TextGenerationOutput,
        TextGenerationStreamOutput,
    )

__all__ = ("GatedInferenceClient", "classify")

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
        detail = body.get("error") if isinstance(body, Mapping) else None
        text = detail if isinstance(detail, str) else message
        result = _by_type(body.get("error_type") if body else None, text, response.status_code)
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


class _Closer:
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


class _TextState:
    """A text-generation stream: one token per event; the last has details."""

    __slots__ = ("generated",)

    def __init__(self) -> None:
        self.generated: int | None = None

    def watch(self, event: TextGenerationStreamOutput) -> bool:
        if event.details is not None:
            self.generated = event.details.generated_tokens
        return True

    def settle(self) -> int:
        if self.generated is None:
            raise EngineError(EngineFault.DISCONNECTED, "TGI's stream ended before its last token")
        return self.generated


class _ChatState:
    """A Messages API stream: choices seen and finished, usage."""

    __slots__ = ("finished", "seen", "show_usage", "usage")

    def __init__(self, show_usage: bool) -> None:
        self.show_usage = show_usage
        self.seen: set[int] = set()
        self.finished: set[int] = set()
        self.usage: int | None = None

    def watch(self, chunk: ChatCompletionStreamOutput) -> bool:
        if chunk.usage is not None:
            self.usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            self.seen.add(choice.index)
            if choice.finish_reason is not None:
                self.finished.add(choice.index)
        return bool(chunk.choices) or self.show_usage

    def settle(self) -> int | None:
        if not self.seen or self.seen - self.finished:
            raise EngineError(EngineFault.DISCONNECTED, "TGI's stream ended before it finished")
        return self.usage


def _chat_tokens(chunk: ChatCompletionStreamOutput) -> int:
    """TGI sends one chunk per token (the last with its ``finish_reason``)."""
    total = 0
    for choice in chunk.choices:
        if choice.logprobs is not None and choice.logprobs.content:
            total += len(choice.logprobs.content)
        elif choice.delta.content or choice.delta.tool_calls or choice.finish_reason:
            total += 1
    return total


class GatedInferenceClient:
    """huggingface_hub's ``AsyncInferenceClient`` behind a :class:`~slopolicy.Gate`.

    Args:
        client: the client, with ``model`` (or ``base_url``) the TGI URL.
        gate: an open gate.
        default_max_tokens: output limit, in tokens, when a call gives none.

    Policy keywords on every call: those of :class:`~slopolicy.adapters.common.Who`.
    Other keywords go to huggingface_hub's method unchanged.
    """

    __slots__ = ("client", "default_max_tokens", "gate")

    def __init__(
        self, client: AsyncInferenceClient, gate: Gate, *, default_max_tokens: int = 256
    ) -> None:
        if default_max_tokens < 1:
            raise UsageError(f"default_max_tokens must be >= 1, got {default_max_tokens}")
        self.client = client
        self.gate = gate
        self.default_max_tokens = default_max_tokens

    async def text_generation(
        self,
        prompt: str,
        *,
        max_new_tokens: int | None = None,
        best_of: int | None = None,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> Reply[TextGenerationOutput]:
        """``text_generation(details=True)`` through the gate (asyncio only:
        huggingface_hub parses the answer in ``asyncio.to_thread``)."""
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self._admit_text(prompt, max_new_tokens, best_of, who)
        sent = ticket.request
        if sent.best_of is not None:
            params["best_of"] = sent.best_of
        call = self.client.text_generation(
            prompt, details=True, max_new_tokens=sent.max_new_tokens, **params
        )
        output: TextGenerationOutput = await _call(ticket, call)
        generated = output.details.generated_tokens if output.details is not None else None
        return Reply(output, _settle(ticket, generated))

    async def text_generation_stream(
        self,
        prompt: str,
        *,
        max_new_tokens: int | None = None,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> GatedStream[TextGenerationStreamOutput]:
        """A streamed ``text_generation(stream=True, details=True)`` through the
        gate: each event is a token, the last has ``details``. TGI reports its
        errors inside the stream, so they are raised from iterating."""
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self._admit_text(prompt, max_new_tokens, None, who)
        call = self.client.text_generation(
            prompt,
            stream=True,
            details=True,
            max_new_tokens=ticket.request.max_new_tokens,
            **params,
        )
        raw: AsyncIterator[TextGenerationStreamOutput] = await _call(ticket, call)
        state = _TextState()
        return _gated(ticket, raw, state.watch, state.settle, None)

    async def chat(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> Reply[ChatCompletionOutput]:
        """``chat_completion`` through the gate; the whole answer."""
        listed = list(messages)
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self._admit_chat(listed, max_tokens, params, who)
        call = self.client.chat_completion(
            [dict(m) for m in listed], max_tokens=ticket.request.max_new_tokens, **params
        )
        output: ChatCompletionOutput = await _call(ticket, call)
        return Reply(output, _settle(ticket, output.usage.completion_tokens))

    async def chat_stream(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> GatedStream[ChatCompletionStreamOutput]:
        """A streamed ``chat_completion`` through the gate."""
        listed = list(messages)
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self._admit_chat(listed, max_tokens, params, who)
        options = ChatCompletionInputStreamOptions(**(params.pop("stream_options", None) or {}))
        show_usage = bool(options.include_usage)
        options.include_usage = True
        call = self.client.chat_completion(
            [dict(m) for m in listed],
            stream=True,
            max_tokens=ticket.request.max_new_tokens,
            stream_options=options,
            **params,
        )
        raw: AsyncIterator[ChatCompletionStreamOutput] = await _call(ticket, call)
        state = _ChatState(show_usage)
        return _gated(ticket, raw, state.watch, state.settle, _chat_tokens)

    async def _admit_text(
        self, prompt: str, max_new_tokens: int | None, best_of: int | None, who: Who
    ) -> Ticket:
        limit = self.default_max_tokens if max_new_tokens is None else max_new_tokens
        request = policy_request(who, prompt=prompt, max_new_tokens=limit, best_of=best_of)
        return await self.gate.admit(request)

    async def _admit_chat(
        self,
        messages: list[Mapping[str, Any]],
        max_tokens: int | None,
        params: Mapping[str, Any],
        who: Who,
    ) -> Ticket:
        limit = self.default_max_tokens if max_tokens is None else max_tokens
        request = policy_request(
            who,
            messages=messages,
            max_new_tokens=limit,
            n=params.get("n") or 1,
            model=params.get("model"),
        )
        return await self.gate.admit(request)


async def _call(ticket: Ticket, call: Any) -> Any:
    try:
        return await call
    except Exception as error:
        raise fail(ticket, classify(error)) from error
    except BaseException:
        ticket.cancel()
        raise


def _settle(ticket: Ticket, generated: int | None) -> Finished:
    # No count from the engine: charge the budget it was allowed, not zero.
    tokens = generated if generated is not None else ticket.request.output_budget
    return ticket.finish(Outcome.COMPLETED, output_tokens=tokens)


def _gated(ticket: Ticket, raw: Any, watch: Any, settle: Any, tokens_of: Any) -> GatedStream[Any]:
    ticket.mark("schedule")  # TGI took the request: its response headers are here
    close = _Closer(raw)
    source = relay(ticket, raw, watch=watch, classify=classify, settle=settle, close=close)
    return GatedStream(ticket, ticket.track(source, tokens_of=tokens_of), close=close)
