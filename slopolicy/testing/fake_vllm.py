"""A fake of vLLM's in-process engine (``AsyncLLM``) with vLLM's output semantics.

It reproduces what :mod:`slopolicy.adapters.vllm` relies on, as vLLM 0.33 does it
(``vllm/v1/engine/async_llm.py``, ``vllm/outputs.py``, ``vllm/sampling_params.py``):

- ``generate(prompt, sampling_params, request_id, *, priority=0, ...)`` is an
  async generator; the request reaches the engine on the first iteration, so
  admission and validation errors (:class:`QueueOverflowError` with
  ``http_status`` 503, :class:`VLLMValidationError` with ``parameter
  "input_tokens"``) come from iterating. Closing or cancelling it aborts the
  request, and ``abort(request_id)`` does too.
- Each yield is a :class:`RequestOutput` whose ``outputs`` are
  :class:`CompletionOutput` (``index``, ``text``, ``token_ids``,
  ``finish_reason``). ``output_kind`` CUMULATIVE (the default) repeats every
  token so far; DELTA sends only the new ones; FINAL_ONLY yields once, at the
  end. One yield carries ``tokens_per_step`` tokens (vLLM's
  ``stream_interval`` or speculative decoding). With ``n > 1`` each child
  sequence yields on its own, ``outputs=[that child]``, as vLLM v1 does.
- ``finish_reason``: ``"length"`` at ``max_tokens``, ``"stop"`` when the
  scripted output ends first, or a scripted ``"error"``/``"abort"``.
  ``finished`` is true on the last output of the request.

Time passes through ``anyio.sleep``, so it runs in virtual time under trio's
``MockClock`` or :func:`~slopolicy.testing.virtual_loop.virtual_event_loop`.
Nothing here imports vLLM.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import anyio

__all__ = (
    "CompletionOutput",
    "EngineGenerateError",
    "FakeAsyncLLM",
    "QueueOverflowError",
    "RequestOutput",
    "RequestOutputKind",
    "SamplingParams",
    "VLLMValidationError",
)


class RequestOutputKind(enum.Enum):
    """vLLM's ``RequestOutputKind``."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class SamplingParams:
    """The fields of vLLM's ``SamplingParams`` the adapter touches (no ``best_of``:
    it is gone from vLLM's ``SamplingParams``)."""

    n: int = 1
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE

    def clone(self) -> SamplingParams:
        """A deep copy, as vLLM's ``SamplingParams.clone``."""
        return copy.deepcopy(self)


@dataclass
class CompletionOutput:
    """One sequence of a request, as vLLM's ``CompletionOutput``."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    """One yield of ``generate``, as vLLM's ``RequestOutput``."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    num_cached_tokens: int = 0


class VLLMError(Exception):
    """vLLM's root error."""


class VLLMClientError(VLLMError):
    """vLLM's errors caused by the request (4xx)."""


class VLLMValidationError(VLLMClientError):
    """vLLM's request validation error; ``parameter`` names the field."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value


class GracefulHTTPError(VLLMError):
    """vLLM's errors that carry the HTTP status to answer."""

    def __init__(self, message: str, http_status: HTTPStatus) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class QueueOverflowError(GracefulHTTPError):
    """vLLM's own admission control refused (``--max-num-queued-reqs``)."""

    def __init__(self) -> None:
        super().__init__(
            "The engine is currently busy and cannot accept new requests.",
            HTTPStatus.SERVICE_UNAVAILABLE,
        )


class EngineGenerateError(VLLMError):
    """Raised when ``AsyncLLM.generate()`` fails. Recoverable."""


@dataclass
class _Call:
    request_id: str
    prompt: Any
    params: SamplingParams
    priority: int
    kwargs: dict[str, Any] = field(default_factory=dict)


class FakeAsyncLLM:
    """An ``AsyncLLM`` stand-in; every setting applies to each request.

    Args:
        ttft: seconds from the first iteration to the first output.
        per_token: seconds per token after that (a step of ``tokens_per_step``
            tokens takes ``per_token * tokens_per_step``).
        tokens_per_step: tokens per yield.
        output_tokens: tokens before ``"stop"``; ``None`` runs to ``max_tokens``.
        max_model_len: prompt + output limit, in tokens (prompt longer: 400-style error).
        queue_limit: requests in flight before :class:`QueueOverflowError`.
        fail_at: token index at which to raise :class:`EngineGenerateError`.
        end_with: a finish_reason (``"error"``, ``"abort"``) to end every
            sequence with instead of ``"length"``/``"stop"``.
    """

    def __init__(
        self,
        *,
        ttft: float = 0.05,
        per_token: float = 0.01,
        tokens_per_step: int = 1,
        output_tokens: int | None = None,
        max_model_len: int = 4096,
        queue_limit: int | None = None,
        fail_at: int | None = None,
        end_with: str | None = None,
    ) -> None:
        self.ttft = ttft
        self.per_token = per_token
        self.tokens_per_step = tokens_per_step
        self.output_tokens = output_tokens
        self.max_model_len = max_model_len
        self.queue_limit = queue_limit
        self.fail_at = fail_at
        self.end_with = end_with
        self.calls: list[_Call] = []
        self.aborted: list[str] = []
        self.active: set[str] = set()

    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None:
        """Record ``request_id`` (one or several) in :attr:`aborted` and stop it."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for one in ids:
            if one in self.active or not internal:
                self.aborted.append(one)
            self.active.discard(one)

    async def generate(
        self,
        prompt: str | Mapping[str, Any],
        sampling_params: SamplingParams,
        request_id: str,
        *,
        priority: int = 0,
        **kwargs: Any,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Record the call in :attr:`calls`, then yield its outputs on the
        script's timing (seconds of anyio time), as vLLM's ``generate``."""
        self.calls.append(_Call(request_id, prompt, sampling_params, priority, kwargs))
        prompt_ids = _prompt_ids(prompt)
        if self.queue_limit is not None and len(self.active) >= self.queue_limit:
            raise QueueOverflowError
        if len(prompt_ids) >= self.max_model_len:
            raise VLLMValidationError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your prompt contains {len(prompt_ids)} input tokens.",
                parameter="input_tokens",
                value=len(prompt_ids),
            )
        self.active.add(request_id)
        try:
            # aclosing: closed at a yield, the inner generator must not be left to the collector.
            async with aclosing(self._run(request_id, prompt, prompt_ids, sampling_params)) as run:
                async for output in run:
                    yield output
        except BaseException:  # cancelled or closed (GeneratorExit): vLLM aborts
            if request_id in self.active:
                await self.abort(request_id, internal=True)
            raise
        finally:
            self.active.discard(request_id)

    async def _run(
        self, request_id: str, prompt: Any, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncGenerator[RequestOutput, None]:
        limit = params.max_tokens if params.max_tokens is not None else self.max_model_len
        limit = min(limit, self.max_model_len - len(prompt_ids))
        length = limit if self.output_tokens is None else min(limit, self.output_tokens)
        reason = self.end_with or ("length" if length >= limit else "stop")
        kind = params.output_kind
        text = prompt if isinstance(prompt, str) else None
        await anyio.sleep(self.ttft)
        done = 0
        finals: list[CompletionOutput] = []
        while done < length:
            step = min(self.tokens_per_step, length - done)
            if self.fail_at is not None and done + step > self.fail_at:
                raise EngineGenerateError
            if done:
                await anyio.sleep(self.per_token * step)
            last = done + step >= length
            for index in range(params.n):
                start = 0 if kind is not RequestOutputKind.DELTA else done
                ids = list(range(start, done + step))
                output = CompletionOutput(
                    index,
                    "".join(f"t{k} " for k in ids),
                    ids,
                    finish_reason=reason if last else None,
                )
                if kind is RequestOutputKind.FINAL_ONLY:
                    if last:
                        finals.append(output)
                    continue
                finished = last and index == params.n - 1
                yield RequestOutput(request_id, text, prompt_ids, None, [output], finished)
            done += step
        if finals:
            yield RequestOutput(request_id, text, prompt_ids, None, finals, True)


def _prompt_ids(prompt: str | Mapping[str, Any]) -> list[int]:
    if isinstance(prompt, str):
        return list(range(len(prompt.split())))
    if "prompt_token_ids" in prompt:
        return list(prompt["prompt_token_ids"])
    return list(range(len(str(prompt.get("prompt", "")).split())))
