"""An in-process fake LLM engine for tests, examples and benchmarks.

``FakeEngine.stream(request)`` is an async generator of :class:`Chunk` values:
the first chunk arrives ``ttft`` seconds after iteration starts, each later
chunk ``per_token`` seconds per token it carries after the one before. It
sleeps with ``anyio.sleep``, so under trio's ``MockClock`` or
:func:`~slopolicy.testing.virtual_loop.virtual_event_loop` it runs in virtual time.
It can fail at a given token index (raising :class:`EngineError`), be slow to
first token, and pack several tokens into one chunk. ``active`` and ``peak``
count streams in progress, so tests can check the engine was never overfilled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

import anyio

from slopolicy.core.request import Request
from slopolicy.errors import UsageError

__all__ = ("Chunk", "EngineError", "FakeEngine")

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One streamed piece: ``tokens`` tokens starting at token ``index``;
    ``last`` marks the final chunk of a stream that ran to its end."""

    request_id: str
    index: int
    tokens: int
    text: str
    last: bool = False


class EngineError(Exception):
    """The fake engine failed while generating ``request_id`` at token ``index``."""

    def __init__(self, request_id: str, index: int) -> None:
        self.request_id = request_id
        self.index = index
        super().__init__(f"engine failed on request {request_id!r} at token {index}")


class FakeEngine:
    """Streams tokens on the anyio clock; every setting can be overridden per call.

    Args:
        ttft: seconds from the start of iteration to the first chunk.
        per_token: seconds per token after the first chunk.
        tokens_per_chunk: tokens packed into one chunk (the last may carry fewer).
        output_tokens: tokens to produce; ``None`` produces ``max_new_tokens``.
        fail_at: token index at which to raise :class:`EngineError` instead of
            yielding the chunk holding that token; ``None`` never fails.
        stall_at: token index whose chunk comes ``stall_s`` seconds late (a
            long prefill landing mid-stream); ``None`` never stalls.
        stall_s: the extra seconds before that chunk.
    """

    __slots__ = (
        "active",
        "fail_at",
        "output_tokens",
        "peak",
        "per_token",
        "stall_at",
        "stall_s",
        "started",
        "tokens_per_chunk",
        "ttft",
    )

    def __init__(
        self,
        *,
        ttft: float = 0.05,
        per_token: float = 0.01,
        tokens_per_chunk: int = 1,
        output_tokens: int | None = None,
        fail_at: int | None = None,
        stall_at: int | None = None,
        stall_s: float = 0.0,
    ) -> None:
        if tokens_per_chunk < 1:
            raise UsageError(f"tokens_per_chunk must be >= 1, got {tokens_per_chunk}")
        self.ttft = ttft
        self.per_token = per_token
        self.tokens_per_chunk = tokens_per_chunk
        self.output_tokens = output_tokens
        self.fail_at = fail_at
        self.stall_at = stall_at
        self.stall_s = stall_s
        self.active = 0  # streams being iterated now
        self.peak = 0  # most streams ever iterated at once
        self.started = 0  # streams ever started

    async def stream(
        self,
        request: Request,
        *,
        output_tokens: int | None = None,
        fail_at: int | None = None,
        ttft: float | None = None,
        per_token: float | None = None,
        stall_at: int | None = None,
    ) -> AsyncIterator[Chunk]:
        """Generate ``request``'s tokens as chunks (arguments override the engine's)."""
        total = _pick(output_tokens, _pick(self.output_tokens, request.max_new_tokens))
        failure = self.fail_at if fail_at is None else fail_at
        delay = _pick(per_token, self.per_token)
        stall = self.stall_at if stall_at is None else stall_at
        self.active += 1
        self.started += 1
        self.peak = max(self.peak, self.active)
        try:
            await anyio.sleep(_pick(ttft, self.ttft))
            produced = 0
            while produced < total:
                size = min(self.tokens_per_chunk, total - produced)
                if failure is not None and produced + size > failure:
                    raise EngineError(request.id, max(failure, produced))
                if produced:
                    late = stall is not None and produced <= stall < produced + size
                    await anyio.sleep(delay * size + (self.stall_s if late else 0.0))
                text = " ".join(f"t{produced + k}" for k in range(size))
                last = produced + size == total
                yield Chunk(request.id, produced, size, text, last)
                produced += size
        finally:
            self.active -= 1

    async def complete(
        self, request: Request, *, output_tokens: int | None = None, fail_at: int | None = None
    ) -> int:
        """Run ``request`` to the end without streaming; the tokens produced."""
        produced = 0
        async for chunk in self.stream(request, output_tokens=output_tokens, fail_at=fail_at):
            produced += chunk.tokens
        return produced


def _pick(value: _T | None, default: _T) -> _T:
    return default if value is None else value
