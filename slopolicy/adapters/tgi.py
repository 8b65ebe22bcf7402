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
of huggingface_hub parses its answer in ``asyncio.to_thread``: asyncio only
(on trio the adapter refuses it with :class:`~slopolicy.UsageError` before
admitting anything); the streamed calls and ``chat`` also run on trio
(huggingface_hub 2.x speaks through httpx2).

Every call sends ``X-Request-Id: <ticket id>`` (in place of one among the
client's own headers). TGI itself reads no request id (it takes a W3C
``traceparent`` for its traces); the proxies and endpoints in front of it
log and route by this one. huggingface_hub has no per-call headers, so the
adapter calls the client's method with a view of the client whose
``headers`` carry it (nothing is changed on the client).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

try:
    from huggingface_hub import AsyncInferenceClient, ChatCompletionInputStreamOptions
except ImportError as error:  # tests hide the package to check this message
    raise ImportError(
        "slopolicy.adapters.tgi needs huggingface_hub: pip install 'slopolicy[tgi]'"
    ) from error

from slopolicy.adapters._choices import ChoiceState
from slopolicy.adapters._tgi_stream import Closer, TextState, chat_tokens, classify
from slopolicy.adapters.calls import GatedStream, answer, holding, sent, stream
from slopolicy.adapters.common import (
    Reply,
    Who,
    check_default_max_tokens,
    check_extra_body,
    given,
    policy_request,
)
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
        self.client = client
        self.gate = gate
        self.default_max_tokens = check_default_max_tokens(default_max_tokens)

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
        """``text_generation(details=True)`` through the gate. asyncio only:
        huggingface_hub parses the answer in ``asyncio.to_thread``, so on any
        other loop this raises :class:`~slopolicy.UsageError` before the gate
        admits anything (use :meth:`text_generation_stream` there)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "text_generation without a stream runs on asyncio only (huggingface_hub "
                "parses its answer in asyncio.to_thread): call text_generation_stream"
            ) from None
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self._admit_text(prompt, max_new_tokens, best_of, who, params)
        sent = ticket.request
        if sent.best_of is not None:
            params["best_of"] = sent.best_of
        with holding(ticket):
            call = type(self.client).text_generation(
                self._view(ticket),
                prompt,
                details=True,
                max_new_tokens=sent.max_new_tokens,
                **params,
            )
        return await answer(ticket, call, classify=classify, output_tokens=_generated)

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
        ticket = await self._admit_text(prompt, max_new_tokens, None, who, params)
        with holding(ticket):
            call = type(self.client).text_generation(
                self._view(ticket),
                prompt,
                stream=True,
                details=True,
                max_new_tokens=ticket.request.max_new_tokens,
                **params,
            )
        state = TextState()
        return await _stream(ticket, call, state.watch, state.settle, None)

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
        with holding(ticket):
            call = type(self.client).chat_completion(
                self._view(ticket),
                [dict(m) for m in listed],
                max_tokens=ticket.request.max_new_tokens,
                **self._chat_params(ticket, params),
            )
        return await answer(ticket, call, classify=classify, output_tokens=_completion_tokens)

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
        with holding(ticket):
            asked = params.pop("stream_options", None) or {}
            options = ChatCompletionInputStreamOptions(**asked)
            show_usage = bool(options.include_usage)
            options.include_usage = True
            call = type(self.client).chat_completion(
                self._view(ticket),
                [dict(m) for m in listed],
                stream=True,
                max_tokens=ticket.request.max_new_tokens,
                stream_options=options,
                **self._chat_params(ticket, params),
            )
        state = ChoiceState(show_usage, chat_tokens, engine="TGI")
        return await _stream(ticket, call, state.watch, state.settle, state.tokens_of)

    def _view(self, ticket: Ticket) -> AsyncInferenceClient:
        """The client for one call: its methods, with the ticket's id in ``headers``."""
        return cast(AsyncInferenceClient, _OneCall(self.client, ticket.id))

    @staticmethod
    def _chat_params(ticket: Ticket, params: dict[str, Any]) -> dict[str, Any]:
        """The caller's keywords with the ladder's ``n`` and ``model``."""
        sent = ticket.request
        if "n" in params:
            params["n"] = sent.n
        if sent.model is not None:
            params["model"] = sent.model
        return params

    async def _admit_text(
        self,
        prompt: str,
        max_new_tokens: int | None,
        best_of: int | None,
        who: Who,
        params: Mapping[str, Any],
    ) -> Ticket:
        if "stream" in params or "details" in params:
            # details=True is how the engine's token count arrives.
            raise UsageError("pass neither stream= nor details=: the adapter sets them")
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
        if "stream" in params:
            raise UsageError("pass no stream=: call chat_stream to stream")
        check_extra_body(params)
        limit = self.default_max_tokens if max_tokens is None else max_tokens
        request = policy_request(
            who,
            messages=messages,
            max_new_tokens=limit,
            n=given(params, "n", 1),
            model=params.get("model"),
        )
        return await self.gate.admit(request)


class _OneCall:
    """``client`` as huggingface_hub's methods see it (``self``) for one call,
    with the request's id among the headers: the client sends ``self.headers``
    with every request and takes no headers per call. Everything else is the
    client's own (its connection pool and exit stack included)."""

    __slots__ = ("_client", "headers")

    def __init__(self, client: AsyncInferenceClient, request_id: str) -> None:
        self._client = client
        own = client.headers or {}
        self.headers = {k: v for k, v in own.items() if k.lower() != "x-request-id"}
        self.headers["X-Request-Id"] = request_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


# huggingface_hub builds its outputs without checking types: read, never trust.


def _generated(output: TextGenerationOutput) -> object:
    return getattr(getattr(output, "details", None), "generated_tokens", None)


def _completion_tokens(output: ChatCompletionOutput) -> object:
    return getattr(getattr(output, "usage", None), "completion_tokens", None)


async def _stream(
    ticket: Ticket, call: Awaitable[AsyncIterable[Any]], watch: Any, settle: Any, tokens_of: Any
) -> GatedStream[Any]:
    raw = await sent(ticket, call, classify=classify)
    ticket.mark("schedule")  # TGI took the request: its response headers are here
    close = Closer(raw)
    return stream(
        ticket, raw, watch=watch, classify=classify, settle=settle, close=close, tokens_of=tokens_of
    )
