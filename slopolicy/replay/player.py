"""Play a workload against a real engine in real time, one lane at a time.

Each request is sent at its recorded arrival (seconds from the start) and
recorded as the simulator records it (:class:`~slopolicy.sim.records.RequestRecord`):
TTFT from the recorded arrival, so time spent waiting in the replayer (at
``max_concurrency``), in a gate or in the engine's own queue all counts;
first token at the first streamed choice; finish at the stream's end.
Refusals with 429/503 are sent again as the simulator's
:class:`~slopolicy.sim.simulator.Client` would, up to each request's
``retries``.

A run stops at the latest ``duration + drain`` seconds, or when ``stop`` is
set: every open stream is closed (its gate ticket released as cancelled) and
what had not finished is recorded ``unfinished``, so a partial run still
reports.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from slopolicy.adapters.common import EngineError
from slopolicy.core.outcome import held_name
from slopolicy.errors import Expired, Rejected, UsageError
from slopolicy.sim.records import RequestRecord, SimOutcome
from slopolicy.sim.simulator import Client
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("Attempt", "ClientLoad", "LaneRun", "Plan", "Refused", "play")

#: Told ``(done, total, open)`` as requests end: how far the run is.
Tell = Callable[[int, int, int], None]


class Refused(Exception):
    """A request the engine or the gate refused, as the replayer judges it:
    ``reason`` (a wire code), the HTTP ``status`` if any, ``retry_after`` s."""

    def __init__(self, reason: str, status: int | None, retry_after: float | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after


@dataclass(slots=True)
class Attempt:
    """What one send saw, filled in by the lane's sender; times are the
    run's clock (``anyio.current_time()``)."""

    dispatched: float | None = None
    first: float | None = None
    finished: float | None = None
    output: int = 0
    max_new: int | None = None
    model: str | None = None
    prompt_tokens: int | None = None

    def chunk(self, now: float, tokens: int = 1) -> None:
        """A streamed choice arrived at ``now`` carrying ``tokens`` tokens."""
        if self.first is None:
            self.first = now
        self.output += tokens


#: Sends one request with its prompt and fills the attempt; raises
#: :class:`Refused` (or lets the gate's and adapters' errors out).
Sender = Callable[[SimRequest, str, Attempt], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a lane replays.

    Attributes:
        workload: the requests, arrivals in seconds from the start.
        lanes: request id -> the lane it is reported under.
        prompts: request id -> its prompt text.
        max_concurrency: requests open at once (in a gate's queue included);
            later arrivals wait in the replayer.
        drain: seconds after the workload's duration before what is still
            open is stopped.
        client: how refused requests are retried.
    """

    workload: Workload
    lanes: Mapping[str, str]
    prompts: Mapping[str, str]
    max_concurrency: int = 256
    drain: float = 600.0
    client: Client = field(default_factory=Client)

    def __post_init__(self) -> None:
        limit = self.max_concurrency
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"max_concurrency must be an int >= 1, got {self.max_concurrency!r}")
        if not (isinstance(self.drain, (int, float)) and 0 <= self.drain < float("inf")):
            raise UsageError(f"drain must be a finite number >= 0 seconds, got {self.drain!r}")
        missing = [r.id for r in self.workload if r.id not in self.prompts]
        if missing:
            raise UsageError(f"no prompt for requests {missing[:5]}")


@dataclass(frozen=True, slots=True)
class ClientLoad:
    """What the replayer itself cost while it ran: its process's CPU seconds
    and how late its event loop woke a 10 ms sleep (the delay it can add to
    every time it records), p50, p95 and the most, in seconds."""

    cpu_s: float
    lag_p50_s: float
    lag_p95_s: float
    lag_max_s: float

    def describe(self) -> str:
        """One line for people."""
        lags = (self.lag_p50_s, self.lag_p95_s, self.lag_max_s)
        p50, p95, most = (f"{lag * 1e3:.1f} ms" for lag in lags)
        return f"replayer: {self.cpu_s:.1f} s of CPU; loop lag p50 {p50}, p95 {p95}, max {most}"


@dataclass(frozen=True, slots=True)
class LaneRun:
    """One lane's replay: records in the workload's order, the seconds the run
    lasted (``end``), whether it was stopped early, the most requests open at
    once, the engine's prompt count of each request it reported one for and
    what the replayer cost (``client``)."""

    name: str
    records: tuple[RequestRecord, ...]
    end: float
    interrupted: bool
    peak_open: int
    prompt_tokens: Mapping[str, int]
    client: ClientLoad | None = None


class _Entry:
    __slots__ = ("attempt", "attempts", "held_by", "outcome", "reason", "request")

    def __init__(self, request: SimRequest) -> None:
        self.request = request
        self.attempt = Attempt()
        self.attempts = 0
        self.outcome = SimOutcome.UNFINISHED
        self.reason = "admitted"
        self.held_by: str | None = None  # what the gate's policy last held it for, if it expired

    def frozen(self, lane: str, origin: float) -> RequestRecord:
        seen = self.attempt

        def at(moment: float | None) -> float | None:
            return None if moment is None else moment - origin

        return RequestRecord(
            self.request,
            lane,
            self.outcome,
            self.reason,
            at(seen.dispatched),
            at(seen.first),
            at(seen.finished),
            seen.output,
            seen.max_new,
            0,
            max(1, self.attempts),
            seen.model,
            held_by=self.held_by,
        )


def _refusal(error: Exception) -> Refused | None:
    """How the replayer reads an error a send raised (``None``: not a refusal)."""
    if isinstance(error, Refused):
        return error
    if isinstance(error, Rejected):
        return Refused(error.reason.code, error.http_status, error.retry_after)
    if isinstance(error, EngineError):
        return Refused(error.code, error.engine_status, error.retry_after)
    return None


class _Run:
    def __init__(self, plan: Plan, send: Sender, tell: Tell | None) -> None:
        self.plan = plan
        self.send = send
        self.tell = tell
        self.entries = [_Entry(request) for request in plan.workload]
        self.limiter = anyio.Semaphore(plan.max_concurrency)
        self.open = self.peak = self.done = 0
        self.rng = random.Random(plan.client.seed)
        self.origin = 0.0

    async def one(self, entry: _Entry) -> None:
        request = entry.request
        await anyio.sleep_until(self.origin + request.arrival)
        while True:
            entry.attempt = Attempt()
            entry.attempts += 1
            entry.held_by = None
            refused = await self._attempt(entry)
            if refused is None:
                entry.outcome = SimOutcome.COMPLETED
                break
            entry.reason = refused.reason
            entry.attempt.finished = anyio.current_time()
            retried = entry.attempts - 1
            if refused.status not in (429, 503) or retried >= request.retries:
                expired = refused.reason == "expired"
                entry.outcome = SimOutcome.EXPIRED if expired else SimOutcome.REJECTED
                break
            await anyio.sleep(
                self.plan.client.delay(retried, refused.retry_after, self.rng.random())
            )
        self.done += 1
        if self.tell is not None:
            self.tell(self.done, len(self.entries), self.open)

    async def _attempt(self, entry: _Entry) -> Refused | None:
        async with self.limiter:
            self.open += 1
            self.peak = max(self.peak, self.open)
            try:
                await self.send(entry.request, self.plan.prompts[entry.request.id], entry.attempt)
            except Exception as error:
                if isinstance(error, Expired):
                    entry.held_by = held_name(error.finished.held_by)
                    return Refused("expired", error.http_status, error.retry_after)
                refused = _refusal(error)
                if refused is None:
                    return Refused(f"error: {type(error).__name__}", None, None)
                return refused
            finally:
                self.open -= 1
            entry.attempt.finished = entry.attempt.finished or anyio.current_time()
            return None


async def play(
    name: str,
    plan: Plan,
    send: Sender,
    *,
    stop: anyio.Event | None = None,
    tell: Tell | None = None,
) -> LaneRun:
    """Replay ``plan`` through ``send`` in real time; see the module doc."""
    run = _Run(plan, send, tell)
    run.origin = anyio.current_time()
    stop = stop or anyio.Event()
    interrupted = False
    lags: list[float] = []
    cpu = time.process_time()
    with anyio.CancelScope(deadline=run.origin + plan.workload.duration + plan.drain) as bound:
        async with anyio.create_task_group() as group:

            async def lag() -> None:
                while True:
                    asleep = anyio.current_time()
                    await anyio.sleep(_LAG_EVERY)
                    lags.append(max(0.0, anyio.current_time() - asleep - _LAG_EVERY))

            async def watch() -> None:
                nonlocal interrupted
                await stop.wait()
                interrupted = True
                bound.cancel()

            async def everyone() -> None:
                async with anyio.create_task_group() as senders:
                    for entry in run.entries:
                        senders.start_soon(run.one, entry)
                group.cancel_scope.cancel()  # all ended: stop watching

            group.start_soon(watch)
            group.start_soon(everyone)
            group.start_soon(lag)
    end = anyio.current_time() - run.origin
    client = ClientLoad(time.process_time() - cpu, *_lag_quantiles(lags))
    counts = {
        e.request.id: e.attempt.prompt_tokens
        for e in run.entries
        if e.attempt.prompt_tokens is not None
    }
    records = tuple(
        e.frozen(plan.lanes.get(e.request.id, "default"), run.origin) for e in run.entries
    )
    return LaneRun(name, records, end, interrupted or bound.cancel_called, run.peak, counts, client)


#: How often :func:`play` measures its own event loop's lag, in seconds.
_LAG_EVERY = 0.01


def _lag_quantiles(lags: list[float]) -> tuple[float, float, float]:
    if not lags:
        return 0.0, 0.0, 0.0
    ordered = sorted(lags)
    return ordered[len(ordered) // 2], ordered[int(0.95 * (len(ordered) - 1))], ordered[-1]


def usage_of(chunk: Any) -> tuple[int | None, int | None]:
    """``(prompt_tokens, completion_tokens)`` of a usage chunk, or ``None``s
    (read, never trusted: the client does not validate what it parses)."""
    usage = getattr(chunk, "usage", None)
    prompt = getattr(usage, "prompt_tokens", None)
    output = getattr(usage, "completion_tokens", None)
    return (
        prompt if isinstance(prompt, int) and prompt >= 0 else None,
        output if isinstance(output, int) and output >= 0 else None,
    )
