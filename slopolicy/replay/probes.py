"""The live probes of ``slopolicy calibrate``: each sends a few requests to an
otherwise idle engine and returns one :mod:`~slopolicy.replay.fit` probe.

Times are the client's (streamed, ``anyio.current_time()``): a TTFT from the
request's send to its first choice, a TPOT from the first choice to the last
over the tokens between. On llama.cpp the decoding requests are pinned to
slots (``id_slot``), so the step's micro-batches are known
(:mod:`slopolicy.sim.ubatches`): side by side from slot 0, or every other
slot for the scattered probe.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from slopolicy.errors import UsageError
from slopolicy.replay.fit import Decode, Mixed, Prefill, Start
from slopolicy.replay.prompts import build_prompts
from slopolicy.replay.target import EngineFacts, Target
from slopolicy.sim.workload import SimRequest

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ("Prober",)

#: The prompt of each short request (decodes, the start probe, queued requests), in tokens.
SHORT = 32
TINY = 8


@dataclass(slots=True)
class _Seen:
    """One request: when it was sent and when each choice arrived."""

    sent: float = 0.0
    chunks: list[float] = field(default_factory=list)
    #: Told once ``goal`` choices have arrived.
    goal: int | None = None
    reached: _Countdown | None = None

    @property
    def ttft(self) -> float:
        if not self.chunks:
            raise UsageError("a probe produced no token: is the engine serving?")
        return self.chunks[0] - self.sent

    def tpot(self, after: float = float("-inf")) -> float:
        """Mean time between its tokens, those after ``after`` only."""
        times = [t for t in self.chunks if t >= after]
        if len(times) < 2:
            raise UsageError(
                "a decode probe produced under 2 tokens: does the engine honour ignore_eos?"
            )
        return (times[-1] - times[0]) / (len(times) - 1)


class Prober:
    """Sends the probes to one engine (open ``target`` first)."""

    def __init__(self, target: Target, facts: EngineFacts, offset: int, decode_tokens: int) -> None:
        self.target = target
        self.facts = facts
        self.offset = offset
        self.decode_tokens = decode_tokens
        self.seeds = itertools.count()
        self.pins = facts.kind == "llama.cpp"
        #: The most tokens a decode beside the mixed probe's prompt may run to.
        self.longest = max(decode_tokens, min(4096, (facts.slot_context or 8192) - SHORT - 8))

    async def _prompt(self, tokens: int) -> str:
        """A fresh prompt of ``tokens`` tokens as the engine counts a request."""
        request = SimRequest("p", 0.0, "calibrate", tokens, 1, 1)
        count = self.target.count if self.facts.tokenizes else None
        made = await build_prompts([request], count, offset=self.offset, seed=next(self.seeds))
        return made["p"]

    async def _stream(
        self,
        client: AsyncOpenAI,
        prompt: str,
        tokens: int,
        slot: int | None,
        seen: _Seen,
        started: _Countdown | None = None,
    ) -> None:
        body: dict[str, Any] = self.facts.extra_body()
        if slot is not None and self.pins:
            body["id_slot"] = slot
        seen.sent = anyio.current_time()
        stream = await client.completions.create(
            model=self.facts.model, prompt=prompt, max_tokens=tokens, stream=True, extra_body=body
        )
        async with stream:
            async for chunk in stream:
                if chunk.choices:
                    seen.chunks.append(anyio.current_time())
                    if started is not None and len(seen.chunks) == 1:
                        started.tick()
                    if seen.reached is not None and len(seen.chunks) == seen.goal:
                        seen.reached.tick()

    async def _at_once(self, requests: Sequence[tuple[str, int, int | None]]) -> list[_Seen]:
        """``(prompt, max_tokens, slot)`` requests sent at once, each to its end."""
        seen = [_Seen() for _ in requests]
        async with (
            self.target.openai_client(timeout=600.0) as client,
            anyio.create_task_group() as group,
        ):
            for (prompt, tokens, slot), one in zip(requests, seen, strict=True):
                group.start_soon(self._stream, client, prompt, tokens, slot, one)
        return seen

    async def prefill(self, length: int, chunk: int) -> Prefill:
        """One prompt alone, one output token: its TTFT."""
        (seen,) = await self._at_once([(await self._prompt(length), 1, None)])
        return Prefill(length, chunk, seen.ttft)

    async def decode(self, slots: Sequence[int], length: int = SHORT) -> Decode:
        """Requests pinned to ``slots`` decoding together: their median TPOT."""
        batch = [(await self._prompt(length), self.decode_tokens, s) for s in slots]
        seen = await self._at_once(batch)
        ubatches = _runs(slots) if self.pins else 1
        context = length + self.decode_tokens / 2
        return Decode(len(slots), context, statistics.median(s.tpot() for s in seen), ubatches)

    async def queued(self, slots: int, waiting: int) -> Decode:
        """Every slot decoding and ``waiting`` tiny requests queued behind
        them (sent once the decodes have started): the decodes' TPOT over
        ``decode_tokens`` tokens from the last queued request's send (then
        everything is cancelled)."""
        prompts = [await self._prompt(SHORT) for _ in range(slots)]
        tiny = [await self._prompt(TINY) for _ in range(waiting)]
        seen = [_Seen() for _ in range(slots)]
        queued = [_Seen() for _ in range(waiting)]
        started, done = _Countdown(slots), _Countdown(slots)
        async with (
            self.target.openai_client(timeout=600.0) as client,
            anyio.create_task_group() as group,
        ):
            for slot, (prompt, one) in enumerate(zip(prompts, seen, strict=True)):
                group.start_soon(self._stream, client, prompt, self.longest, slot, one, started)
            await started.event.wait()
            for prompt, one in zip(tiny, queued, strict=True):
                group.start_soon(self._stream, client, prompt, 1, None, one)
            await anyio.sleep(0.05)  # they reach the server's queue
            since = anyio.current_time()
            for one in seen:
                one.goal, one.reached = len(one.chunks) + self.decode_tokens, done
            await done.event.wait()
            group.cancel_scope.cancel()
        context = SHORT + statistics.mean(len(one.chunks) for one in seen) - self.decode_tokens / 2
        tpot = statistics.median(one.tpot(after=since) for one in seen)
        return Decode(slots, context, tpot, waiting=waiting)

    async def mixed(self, batch: int, length: int, chunk: int) -> Mixed:
        """A prompt pinned to slot ``batch`` computed while ``batch`` requests
        decode in slots 0 to ``batch - 1``: its TTFT (the decodes are then cancelled)."""
        prompts = [await self._prompt(SHORT) for _ in range(batch)]
        long_prompt = await self._prompt(length)
        seen = [_Seen() for _ in range(batch)]
        prompt = _Seen()
        started = _Countdown(batch)
        async with (
            self.target.openai_client(timeout=600.0) as client,
            anyio.create_task_group() as decodes,
        ):
            for slot, (text, one) in enumerate(zip(prompts, seen, strict=True)):
                decodes.start_soon(self._stream, client, text, self.longest, slot, one, started)
            await started.event.wait()
            outputs = sum(len(one.chunks) for one in seen) / batch
            await self._stream(client, long_prompt, 1, batch, prompt)
            outputs = (outputs + sum(len(one.chunks) for one in seen) / batch) / 2
            decodes.cancel_scope.cancel()
        return Mixed(length, chunk, batch, SHORT + outputs, prompt.ttft)

    async def start(self, requests: int) -> Start:
        """``requests`` tiny requests at once, one output token: from the
        first sent to the last first token."""
        seen = await self._at_once([(await self._prompt(TINY), 1, None) for _ in range(requests)])
        last = max(one.sent + one.ttft for one in seen)
        return Start(requests, TINY, last - min(one.sent for one in seen))


class _Countdown:
    """An event set once :meth:`tick` was called ``count`` times."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.event = anyio.Event()
        if count <= 0:
            self.event.set()

    def tick(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.event.set()


def _runs(slots: Sequence[int]) -> int:
    """Runs of consecutive slots: the micro-batches a decode step of them takes."""
    ordered = sorted(slots)
    return 1 + sum(b != a + 1 for a, b in itertools.pairwise(ordered))
