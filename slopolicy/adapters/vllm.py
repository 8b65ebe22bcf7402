"""The gate in front of vLLM's in-process engine (``AsyncLLM``; ``AsyncLLMEngine`` is an alias).

::

    gated = GatedAsyncLLM(AsyncLLM.from_engine_args(args), gate, priorities={"batch": 10})
    stream = await gated.generate("Hello", SamplingParams(max_tokens=256), tenant="acme")
    async with stream:
        async for output in stream: ...     # vLLM's RequestOutput, unchanged

Duck-typed: the engine needs ``generate(prompt, sampling_params, request_id,
*, priority=...)`` (an async generator of ``RequestOutput``) and
``abort(request_id)``; nothing is imported from vLLM, and the ``vllm`` extra
installs nothing.

What the adapter does:

- The gate decides on a :class:`~slopolicy.Request` built from the prompt (text,
  ``{"prompt": ...}`` or ``{"prompt_token_ids": [...]}``) and the sampling
  params (``max_tokens``, ``n``, ``logprobs``); ``max_tokens=None`` (vLLM: up
  to the model's length) becomes ``default_max_tokens``.
- The engine gets a copy of the sampling params with the ticket's limits:
  ``max_tokens`` capped, ``n`` as the ladder left it, ``logprobs`` dropped when
  the ladder dropped optional features. ``best_of`` is not touched: it is gone
  from vLLM's ``SamplingParams``.
- ``request_id`` is the ticket's id; ``priority`` is passed only for lanes in
  ``priorities`` (vLLM honours it only under ``--scheduling-policy priority``),
  past every lane's for a start over its tenant's share, so vLLM preempts
  those first (:meth:`Started.engine_priority
  <slopolicy.Started.engine_priority>`).
- Tokens are counted from ``outputs[i].token_ids`` per sequence: growth for
  CUMULATIVE outputs (the default), length for DELTA, all at the end for
  FINAL_ONLY. One yield may carry several tokens (``stream_interval``,
  speculative decoding), so TPOT is per token, not per yield.
- Closing the stream early, or cancelling its reader, closes vLLM's generator
  (vLLM aborts the request on that) and calls ``abort(request_id)`` as well,
  for engines that do not.

vLLM takes the request on the first iteration, so its refusals are raised from
iterating, as :class:`~slopolicy.adapters.common.EngineError`: an exception
with ``http_status`` (vLLM's ``GracefulHTTPError``: ``QueueOverflowError`` and
``MaxQueuedTokensError`` 503 → overloaded, 429 → rate_limited) or
``status_code`` (``GenerationError`` 500, ``RetryableRequestError`` 503) maps
by that status; ``VLLMClientError``/``ValueError`` → invalid_request, or
prompt_too_long when ``parameter`` is ``"input_tokens"``; ``EngineDeadError``,
``EngineGenerateError`` and anything else → failed; a sequence ending with
``finish_reason`` ``"error"`` or ``"abort"`` → failed; a stream that ends
without a ``finished`` output → disconnected.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sized
from typing import Any, Protocol

from slopolicy.adapters.calls import GatedStream, holding, stream
from slopolicy.adapters.common import (
    EngineError,
    EngineFault,
    Who,
    check_default_max_tokens,
    check_priorities,
    fault_from_status,
    policy_request,
)
from slopolicy.errors import UsageError
from slopolicy.runtime.gate import Gate
from slopolicy.runtime.ticket import Ticket

__all__ = ("AsyncEngine", "GatedAsyncLLM", "classify")

_BROKEN_FINISH = frozenset({"error", "abort"})


class AsyncEngine(Protocol):
    """What the adapter needs of vLLM's ``AsyncLLM``."""

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Start ``request_id``; its ``RequestOutput`` objects as they come."""
        ...

    async def abort(self, request_id: str) -> None:
        """Stop ``request_id`` in the engine (a no-op for one that ended)."""
        ...


def classify(error: Exception) -> EngineError:
    """The :class:`EngineError` for an exception from vLLM's ``generate``."""
    names = {kind.__name__ for kind in type(error).__mro__}
    message = getattr(error, "message", None)
    if not isinstance(message, str):
        message = str(error) or type(error).__name__
    raw_param = getattr(error, "parameter", None)
    param = raw_param if isinstance(raw_param, str) else None
    status = getattr(error, "http_status", None) or getattr(error, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):  # HTTPStatus is an int
        return fault_from_status(int(status), message, param=param)
    if "EngineDeadError" in names:
        return EngineError(EngineFault.FAILED, f"the vLLM engine died: {message}")
    if "VLLMClientError" in names or isinstance(error, (ValueError, TypeError)):
        # vLLM validates the prompt's length when the engine takes the request.
        return fault_from_status(400, message, param=param)
    return EngineError(EngineFault.FAILED, f"{type(error).__name__}: {message}")


def _kind(sampling_params: Any) -> str:
    kind = getattr(sampling_params, "output_kind", None)
    return getattr(kind, "name", "CUMULATIVE")


class _Progress:
    """Tokens and endings seen in a stream of ``RequestOutput``."""

    __slots__ = ("cumulative", "ended", "last", "lengths", "reasons", "total")

    def __init__(self, kind: str) -> None:
        self.cumulative = kind != "DELTA"  # FINAL_ONLY sends everything once
        self.lengths: dict[int, int] = {}
        self.reasons: dict[int, str] = {}
        self.total = 0
        self.last = 0
        self.ended = False

    def watch(self, output: Any) -> bool:
        new = 0
        for sequence in output.outputs:
            count = len(sequence.token_ids)
            if self.cumulative:
                seen = self.lengths.get(sequence.index, 0)
                new += max(0, count - seen)
                self.lengths[sequence.index] = max(seen, count)
            else:
                new += count
            if sequence.finish_reason is not None:
                self.reasons[sequence.index] = str(sequence.finish_reason)
        self.total += new
        self.last = new
        if output.finished:
            self.ended = True
        return True

    def tokens_of(self, output: Any) -> int:
        return self.last  # counted by watch() just before this chunk passed on

    def settle(self) -> int:
        broken = sorted(reason for reason in self.reasons.values() if reason in _BROKEN_FINISH)
        if broken:
            raise EngineError(EngineFault.FAILED, f"vLLM ended a sequence with {broken[0]!r}")
        if not self.ended:
            raise EngineError(EngineFault.DISCONNECTED, "vLLM's stream ended before it finished")
        return self.total


class _Outputs:
    """The engine's generator for one request, and how far it got: vLLM takes
    the request on the first step, so only a started, unfinished request is
    aborted (one that raised was cleaned up by vLLM itself)."""

    __slots__ = ("done", "source", "started")

    def __init__(self, source: AsyncIterator[Any]) -> None:
        self.source = source
        self.started = False
        self.done = False  # ran out, raised, or was closed

    def __aiter__(self) -> _Outputs:
        return self

    async def __anext__(self) -> Any:
        self.started = True
        try:
            return await self.source.__anext__()
        except Exception:  # StopAsyncIteration included: nothing left to abort
            self.done = True
            raise

    async def close(self, engine: AsyncEngine, request_id: str) -> None:
        """Close the generator (vLLM aborts on that) and abort, once."""
        if self.done:
            return
        self.done = True
        aclose = getattr(self.source, "aclose", None)
        if aclose is not None:
            await aclose()
        if self.started:
            await engine.abort(request_id)  # for engines that do not abort on close


class GatedAsyncLLM:
    """vLLM's ``AsyncLLM`` behind a :class:`~slopolicy.Gate`.

    Args:
        engine: the engine (see :class:`AsyncEngine`).
        gate: an open gate.
        priorities: lane name -> vLLM ``priority`` (lower runs first; past
            every lane's for a start over its tenant's share).
        default_max_tokens: output limit, in tokens, for sampling params
            with ``max_tokens=None``.
    """

    __slots__ = ("default_max_tokens", "engine", "gate", "priorities")

    def __init__(
        self,
        engine: AsyncEngine,
        gate: Gate,
        *,
        priorities: Mapping[str, int] | None = None,
        default_max_tokens: int = 256,
    ) -> None:
        self.engine = engine
        self.gate = gate
        self.priorities = check_priorities(priorities)
        self.default_max_tokens = check_default_max_tokens(default_max_tokens)

    async def generate(
        self,
        prompt: str | Mapping[str, Any],
        sampling_params: Any,
        *,
        tenant: str = "anonymous",
        lane: str | None = None,
        tier: str | None = None,
        deadline: float | None = None,
        tool_risk: float = 0.0,
        request_id: str | None = None,
        prompt_tokens: int | None = None,
        **kwargs: Any,
    ) -> GatedStream[Any]:
        """Admit, then start ``engine.generate`` with the ticket's limits.

        Returns the stream of vLLM's ``RequestOutput`` once admitted; raises
        :class:`~slopolicy.Rejected` when the gate refuses. ``kwargs`` go to
        ``engine.generate`` (``lora_request``, ``trace_headers``, ...). The
        policy keywords are those of :class:`~slopolicy.adapters.common.Who`.
        """
        who = Who(tenant, lane, tier, deadline, tool_risk, request_id, prompt_tokens)
        ticket = await self.gate.admit(self._request(prompt, sampling_params, who))
        with holding(ticket):
            params = self._params(ticket, sampling_params)
            priority = ticket.started.engine_priority(self.priorities)
            if priority is not None:
                kwargs["priority"] = priority
            outputs = _Outputs(self.engine.generate(prompt, params, ticket.id, **kwargs))
        progress = _Progress(_kind(params))

        async def close() -> None:
            await outputs.close(self.engine, ticket.id)

        return stream(
            ticket,
            outputs,
            watch=progress.watch,
            classify=classify,
            settle=progress.settle,
            close=close,
            tokens_of=progress.tokens_of,
        )

    def _request(self, prompt: str | Mapping[str, Any], params: Any, who: Who) -> Any:
        text: str | None = None
        if who.prompt_tokens is None:
            if isinstance(prompt, str):
                text = prompt
            elif isinstance(prompt, Mapping) and isinstance(prompt.get("prompt_token_ids"), Sized):
                who = who._replace(prompt_tokens=len(prompt["prompt_token_ids"]))
            elif isinstance(prompt, Mapping) and isinstance(prompt.get("prompt"), str):
                text = prompt["prompt"]
            else:
                raise UsageError("pass prompt_tokens= for a prompt that is not text or token ids")
        # As the caller set them: the gate's request says what is not a count.
        limit = getattr(params, "max_tokens", None)
        return policy_request(
            who,
            prompt=text,
            max_new_tokens=self.default_max_tokens if limit is None else limit,
            n=getattr(params, "n", None) or 1,
            logprobs=getattr(params, "logprobs", None),
        )

    @staticmethod
    def _params(ticket: Ticket, params: Any) -> Any:
        """A copy of the caller's sampling params with the ticket's limits."""
        clone = getattr(params, "clone", None)
        params = clone() if callable(clone) else copy.copy(params)
        sent = ticket.request
        params.max_tokens = sent.max_new_tokens
        if getattr(params, "n", 1) != sent.n:
            params.n = sent.n
        if sent.logprobs is None and getattr(params, "logprobs", None) is not None:
            params.logprobs = None  # the ladder dropped optional features
        return params
