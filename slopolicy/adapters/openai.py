"""The gate in front of an OpenAI-compatible server: ``vllm serve``, SGLang, TGI's Messages API,
llama.cpp's ``llama-server``.

::

    gated = GatedOpenAI(AsyncOpenAI(base_url="http://vllm:8000/v1", api_key="-"), gate,
                        priorities={"interactive": -10, "batch": 10})
    reply = await gated.chat(model="m", messages=[...], max_tokens=256, tenant="acme")
    async with await gated.chat_stream(model="m", messages=[...], tenant="acme") as stream:
        async for chunk in stream: ...

Every call is admitted by the gate first (cost estimated from the messages or
prompt), then sent with the ticket's limits: the lane's and ladder's
``max_new_tokens`` cap under each of ``max_tokens`` and ``max_completion_tokens``
the caller gave a value (``max_tokens`` when neither; ``None`` is no value; when
both differ, ``max_completion_tokens`` is the limit reserved for, as vLLM honours
it), ``n``/``logprobs``/``reasoning_effort``/``model`` as the ladder left them,
and vLLM's ``priority`` in ``extra_body`` when the lane maps to one (past every
lane's for a tenant over its share: vLLM preempts those first). Streams
always ask for ``stream_options.include_usage`` so the engine's own
``completion_tokens`` settles the tenant's charge; the usage-only chunk reaches
the caller only when the caller asked for it. Tokens are counted
per chunk (one per choice carrying text, reasoning, tool calls or a
``finish_reason``; ``logprobs`` entries when present), so TTFT and TPOT are
measured on the gate's clock as chunks arrive.

**Client retries are off.** The adapter calls through
``client.with_options(max_retries=0)``: the openai client retries 408, 409, 429
and 5xx twice by default, and a blind retry re-sends work the gate already
decided about (and counted once). A refused call raises
:class:`~slopolicy.adapters.common.EngineError` with ``retry_after``; retrying
is the caller's decision, through the gate again.

Engine answers map as in :mod:`slopolicy.adapters.common`: 503 → overloaded,
429 → rate_limited, 400 with ``param: "input_tokens"`` (vLLM) or ``type:
"exceed_context_size_error"`` (llama.cpp) → prompt_too_long,
other 4xx → invalid_request, 5xx and an error event inside the stream (vLLM's
``data: {"error": ...}`` then ``[DONE]``; the older flat ``{"object": "error"}``
too) → failed, a dropped connection or a stream without every
``finish_reason`` → disconnected, the client's timeout → timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

try:
    import openai
except ImportError as error:  # tests hide the package to check this message
    raise ImportError(
        "slopolicy.adapters.openai needs the openai client: pip install 'slopolicy[openai]'"
    ) from error

from slopolicy.adapters._openai_stream import (
    StreamState,
    chat_tokens,
    classify,
    completion_tokens,
)
from slopolicy.adapters.calls import GatedStream, answer, holding, sent, stream
from slopolicy.adapters.common import (
    Reply,
    Who,
    check_default_max_tokens,
    check_extra_body,
    check_priorities,
    given,
    policy_request,
)
from slopolicy.adapters.slots import SlotPinning
from slopolicy.core.request import Message, Request
from slopolicy.errors import UsageError
from slopolicy.runtime.gate import Gate
from slopolicy.runtime.ticket import Ticket

if TYPE_CHECKING:
    from openai.types import Completion
    from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessageParam

__all__ = ("GatedOpenAI", "classify")


#: The output-limit keywords, in the order vLLM honours them (chat takes
#: either, max_tokens being deprecated there; completions only max_tokens).
_LIMIT_NAMES = ("max_completion_tokens", "max_tokens")


def _given_limits(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The output-limit keywords the caller gave a value (``None`` is no value)."""
    return tuple(name for name in _LIMIT_NAMES if params.get(name) is not None)


def _as_message(message: Message) -> dict[str, str]:
    out = {"role": message.role, "content": message.content}
    if message.name is not None:
        out["name"] = message.name
    return out


class GatedOpenAI:
    """An ``openai.AsyncOpenAI`` whose calls go through a :class:`~slopolicy.Gate`.

    Args:
        client: the client, pointed at the engine's ``/v1``. Calls go through
            ``client.with_options(max_retries=0)`` (see the module docstring).
        gate: an open gate.
        priorities: lane name -> vLLM ``priority`` (lower runs first; vLLM
            honours it only with ``--scheduling-policy priority``), past every
            lane's for a start over its tenant's share
            (:meth:`Started.engine_priority
            <slopolicy.Started.engine_priority>`). Lanes not listed send none.
        default_max_tokens: output limit, in tokens, when a call gives none:
            the gate must reserve for a known budget, so one is always sent.
        slots: for llama.cpp's ``llama-server``: pins each request to a slot
            (its ``id_slot``) so the server computes the urgent lanes' prompts
            first (see :class:`~slopolicy.adapters.slots.SlotPinning`).

    Policy keywords on every call: ``tenant``, ``lane``, ``tier``,
    ``deadline`` (monotonic seconds on the gate's clock), ``tool_risk``,
    ``request_id`` (also the engine's ``X-Request-Id``), ``prompt_tokens``
    (a known count; needed for content that is not text). Other keywords
    go to ``create`` unchanged; ``extra_body`` may not carry a field the gate
    decides (``max_tokens``, ``n``, ``model``...: :class:`~slopolicy.UsageError`).
    """

    __slots__ = ("client", "default_max_tokens", "gate", "priorities", "slots")

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        gate: Gate,
        *,
        priorities: Mapping[str, int] | None = None,
        default_max_tokens: int = 256,
        slots: SlotPinning | None = None,
    ) -> None:
        if slots is not None and not isinstance(slots, SlotPinning):
            raise UsageError(f"slots must be a SlotPinning, not {type(slots).__name__}")
        self.client = client.with_options(max_retries=0)
        self.slots = slots
        self.gate = gate
        self.priorities = check_priorities(priorities)
        self.default_max_tokens = check_default_max_tokens(default_max_tokens)

    # -- chat ------------------------------------------------------------------

    async def chat(
        self,
        *,
        model: str,
        messages: Iterable[ChatCompletionMessageParam],
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> Reply[ChatCompletion]:
        """``chat.completions.create`` through the gate; the whole answer.

        Raises :class:`~slopolicy.Rejected` when the gate refuses, and
        :class:`~slopolicy.adapters.common.EngineError` when the engine does.
        """
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket, body = await self._admit_chat(list(messages), model, params, who)
        return await self._whole(ticket, self.client.chat.completions.create, body)

    async def chat_stream(
        self,
        *,
        model: str,
        messages: Iterable[ChatCompletionMessageParam],
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> GatedStream[ChatCompletionChunk]:
        """A streamed chat completion through the gate, returned once the
        engine accepted it (its response headers arrived); errors before the
        stream raise here, errors inside it from iterating."""
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket, body = await self._admit_chat(list(messages), model, params, who)
        return await self._stream(ticket, self.client.chat.completions.create, body, chat_tokens)

    # -- legacy completions ---------------------------------------------------

    async def completion(
        self,
        *,
        model: str,
        prompt: str,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> Reply[Completion]:
        """``completions.create`` through the gate; the whole answer."""
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket, body = await self._admit_completion(prompt, model, params, who)
        return await self._whole(ticket, self.client.completions.create, body)

    async def completion_stream(
        self,
        *,
        model: str,
        prompt: str,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **params: Any,
    ) -> GatedStream[Completion]:
        """A streamed legacy completion through the gate (see :meth:`chat_stream`)."""
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket, body = await self._admit_completion(prompt, model, params, who)
        return await self._stream(ticket, self.client.completions.create, body, completion_tokens)

    # -- building requests ------------------------------------------------------

    def _limits(self, params: Mapping[str, Any]) -> int:
        """Check the call's keywords; the caller's output limit, in tokens (the
        gate checks it is one)."""
        if "stream" in params:
            raise UsageError("pass no stream=: call chat_stream/completion_stream to stream")
        check_extra_body(params)
        given = _given_limits(params)
        limit: int = params[given[0]] if given else self.default_max_tokens
        return limit

    async def _admit_chat(
        self, messages: list[Any], model: str, params: Mapping[str, Any], who: Who
    ) -> tuple[Ticket, dict[str, Any]]:
        """Admit a chat call; the ticket and the body to send."""
        top = params.get("top_logprobs")
        asked = policy_request(
            who,
            messages=messages,
            max_new_tokens=self._limits(params),
            n=given(params, "n", 1),
            logprobs=(top or 0) if params.get("logprobs") else None,
            reasoning_effort=params.get("reasoning_effort"),
            model=model,
        )
        ticket = await self.gate.admit(asked)
        with holding(ticket):
            return ticket, self._chat_body(ticket, asked, messages, model, params)

    async def _admit_completion(
        self, prompt: str, model: str, params: Mapping[str, Any], who: Who
    ) -> tuple[Ticket, dict[str, Any]]:
        """Admit a legacy completion call; the ticket and the body to send."""
        asked = policy_request(
            who,
            prompt=prompt,
            max_new_tokens=self._limits(params),
            n=given(params, "n", 1),
            best_of=params.get("best_of"),
            logprobs=params.get("logprobs"),
            model=model,
        )
        ticket = await self.gate.admit(asked)
        with holding(ticket):
            return ticket, self._completion_body(ticket, asked, prompt, model, params)

    def _common_body(
        self, ticket: Ticket, asked: Request, model: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        sent = ticket.request
        body = dict(params)
        body["model"] = sent.model or model
        # The cap under every name the caller used, so none stays uncapped on
        # the wire; a name given as None was not given (no null goes out).
        for name in _LIMIT_NAMES:
            body.pop(name, None)
        for name in _given_limits(params) or ("max_tokens",):
            body[name] = sent.max_new_tokens
        if sent.n != asked.n:
            body["n"] = sent.n
        if sent.reasoning_effort != asked.reasoning_effort:
            body["reasoning_effort"] = sent.reasoning_effort
        headers = dict(body.get("extra_headers") or {})
        if not any(name.lower() == "x-request-id" for name in headers):
            headers["X-Request-Id"] = ticket.id  # vLLM logs and aborts by it
        priority = ticket.started.engine_priority(self.priorities)
        if priority is not None:
            # The policy's lane decides the engine's order, over a caller's
            # value: vLLM's X-Vllm-Priority header would override the body's.
            headers = {k: v for k, v in headers.items() if k.lower() != "x-vllm-priority"}
            body["extra_body"] = {**(body.get("extra_body") or {}), "priority": priority}
        slot = None if self.slots is None else self.slots.pin(ticket)
        if slot is not None:  # llama-server computes lower slots' prompts first
            body["extra_body"] = {**(body.get("extra_body") or {}), "id_slot": slot}
        body["extra_headers"] = headers
        return body

    def _chat_body(
        self,
        ticket: Ticket,
        asked: Request,
        messages: list[Any],
        model: str,
        params: Mapping[str, Any],
    ) -> dict[str, Any]:
        body = self._common_body(ticket, asked, model, params)
        sent = ticket.request
        # A compress hook may have rewritten the text; else send the caller's
        # messages as given (they may carry tool calls and other parts).
        changed = sent.messages is not None and sent.messages != asked.messages
        body["messages"] = [_as_message(m) for m in sent.messages or ()] if changed else messages
        if asked.logprobs is not None and sent.logprobs is None:
            body.pop("logprobs", None)  # the ladder dropped optional features
            body.pop("top_logprobs", None)
        return body

    def _completion_body(
        self, ticket: Ticket, asked: Request, prompt: str, model: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        body = self._common_body(ticket, asked, model, params)
        sent = ticket.request
        changed = sent.prompt is not None and sent.prompt != asked.prompt
        body["prompt"] = sent.prompt if changed else prompt
        if sent.best_of != asked.best_of:
            body.pop("best_of", None)
            if sent.best_of is not None:
                body["best_of"] = sent.best_of
        if asked.logprobs is not None and sent.logprobs is None:
            body.pop("logprobs", None)
        return body

    @staticmethod
    def _stream_options(body: dict[str, Any]) -> bool:
        """Ask for the usage chunk; whether the caller asked for it too."""
        options = dict(body.get("stream_options") or {})
        show = bool(options.get("include_usage"))
        options["include_usage"] = True
        body["stream_options"] = options
        body["stream"] = True
        return show

    # -- calling ----------------------------------------------------------------

    @staticmethod
    async def _whole(ticket: Ticket, create: Any, body: dict[str, Any]) -> Reply[Any]:
        with holding(ticket):
            pending = create(**body)
        return await answer(ticket, pending, classify=classify, output_tokens=_usage)

    async def _stream(
        self, ticket: Ticket, create: Any, body: dict[str, Any], count: Callable[[Any], int]
    ) -> GatedStream[Any]:
        with holding(ticket):
            state = StreamState(self._stream_options(body), count)
            pending = create(**body)
        raw = await sent(ticket, pending, classify=classify)
        ticket.mark("schedule")  # the engine took the request: its response headers are here
        return stream(
            ticket,
            raw,
            watch=state.watch,
            classify=classify,
            settle=state.settle,
            close=raw.close,
            tokens_of=state.tokens_of,
        )


def _usage(response: ChatCompletion | Completion) -> object:
    # The client builds responses without validating them: read, never trust.
    return getattr(getattr(response, "usage", None), "completion_tokens", None)
