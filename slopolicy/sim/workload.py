"""Workloads: the requests a simulation replays, in arrival order.

A :class:`SimRequest` is what a client would send (tenant, prompt length,
``max_new_tokens``, an optional lane hint) plus what the model would answer
(``output_tokens``, generated unless ``max_new_tokens`` cuts it short).
Workloads come from :mod:`slopolicy.sim.streams` (synthetic, seeded),
:mod:`slopolicy.sim.traces` (recorded) or a plain list.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from slopolicy.core.request import Request
from slopolicy.core.tasks.ref import TaskRef
from slopolicy.errors import InvalidRequest, UsageError

__all__ = ("MAX_ARRIVAL", "SimRequest", "Workload")

#: The latest arrival a workload may hold, in seconds from its start (about 31
#: years): later is a unit mistake (milliseconds read as seconds, a rate scale
#: near 0), and at such times a float no longer resolves an engine iteration.
MAX_ARRIVAL = 1e9


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request of a workload.

    Attributes:
        id: unique within the workload.
        arrival: seconds from the start of the workload, at most :data:`MAX_ARRIVAL`.
        tenant: who sends it.
        prompt_tokens: prompt length in tokens (>= 1).
        output_tokens: tokens the model would generate if not capped (>= 1).
        max_new_tokens: the client's output limit (>= 1).
        lane: lane hint, or ``None``.
        stream: the stream or trace class it came from (``chat``, ``code``...).
        retries: times the client sends it again after a retryable refusal
            (429/503; see :class:`~slopolicy.sim.simulator.Client`).
        tier: tier hint for the policy (``Request.tier``), or ``None`` for the
            tier the policy gives the tenant.
        task: the agent task it is a turn of, or ``None``. A later turn
            (``turn`` > 0) is sent by the simulator only once the turn before
            it completed, ``tool_wait`` seconds later (closed loop); its
            ``arrival`` is its task's start until then.
        turn: its index in the task (0: the first turn).
        turns: how many turns its task has.
        tool_wait: seconds of tool calls between the previous turn's end and this one.
        task_deadline: when the task must be done (seconds from the
            workload's start), or ``None``.
        n: choices asked for; the engine runs ``n`` sequences of
            ``output_tokens`` each (the policy counts a seat for each).
    """

    id: str
    arrival: float
    tenant: str
    prompt_tokens: int
    output_tokens: int
    max_new_tokens: int
    lane: str | None = None
    stream: str = "default"
    retries: int = 0
    tier: str | None = None
    task: str | None = None
    turn: int = 0
    turns: int | None = None
    tool_wait: float = 0.0
    task_deadline: float | None = None
    n: int = 1

    def __post_init__(self) -> None:
        if not self.id or not self.tenant:
            raise UsageError("a request needs a non-empty id and tenant")
        if "\x1f" in self.id:  # the engine's separator for a request's sequences
            raise UsageError(f"request {self.id!r}: an id may not hold U+001F")
        arrival = self.arrival
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)):
            raise UsageError(f"request {self.id!r}: arrival must be a number of seconds")
        if not 0 <= arrival <= MAX_ARRIVAL:  # NaN fails too
            raise UsageError(
                f"request {self.id!r}: arrival must be within [0, {MAX_ARRIVAL:g}] seconds, "
                f"got {arrival!r}"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise UsageError(f"request {self.id!r}: retries must be an int >= 0")
        for name in ("prompt_tokens", "output_tokens", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"request {self.id!r}: {name} must be an int >= 1, got {value!r}")
        wait = self.tool_wait
        if (
            isinstance(wait, bool)
            or not isinstance(wait, (int, float))
            or not 0 <= wait <= MAX_ARRIVAL
        ):
            raise UsageError(
                f"request {self.id!r}: tool_wait must be within [0, {MAX_ARRIVAL:g}] s"
            )
        if self.task is None and (self.turn or self.turns is not None or self.task_deadline):
            raise UsageError(f"request {self.id!r}: turn, turns and task_deadline need a task")
        # What the policy will be asked must be a valid request (text lengths,
        # count bounds): checked here, so a bad workload never starts a run.
        try:
            self.to_request()
        except InvalidRequest as error:
            raise UsageError(f"request {self.id!r}: {error}") from error

    def to_request(self) -> Request:
        """The :class:`~slopolicy.Request` a client would send for it (lengths in tokens)."""
        return Request(
            id=self.id,
            tenant=self.tenant,
            prompt_tokens=self.prompt_tokens,
            max_new_tokens=self.max_new_tokens,
            lane=self.lane,
            tier=self.tier,
            task=self.task_ref(),
            n=self.n,
        )

    def task_ref(self) -> TaskRef | None:
        """Its :class:`~slopolicy.TaskRef`, or ``None`` outside a task."""
        if self.task is None:
            return None
        return TaskRef(self.task, self.turn, self.task_deadline, self.turns)


@dataclass(frozen=True, slots=True)
class Workload:
    """Requests sorted by arrival (ties keep their given order) over
    ``duration`` seconds (at least the last arrival).

    ``bursts`` names the streams that are bursts, so reports can tell the
    traffic outside them apart.
    """

    requests: tuple[SimRequest, ...]
    duration: float
    name: str = "workload"
    bursts: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.requests, key=lambda r: r.arrival))
        object.__setattr__(self, "requests", ordered)
        ids = {r.id for r in ordered}
        if len(ids) != len(ordered):
            raise UsageError("request ids must be unique within a workload")
        last = ordered[-1].arrival if ordered else 0.0
        if not math.isfinite(self.duration) or self.duration < last:
            object.__setattr__(self, "duration", last)
        object.__setattr__(self, "bursts", frozenset(self.bursts))

    @classmethod
    def of(cls, requests: Iterable[SimRequest], *, name: str = "workload") -> Workload:
        """A workload of ``requests``; its duration is the last arrival."""
        return cls(tuple(requests), 0.0, name)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[SimRequest]:
        return iter(self.requests)

    @property
    def tenants(self) -> tuple[str, ...]:
        """Tenants in order of first arrival."""
        return tuple(dict.fromkeys(r.tenant for r in self.requests))

    @property
    def streams(self) -> tuple[str, ...]:
        """Streams in order of first arrival."""
        return tuple(dict.fromkeys(r.stream for r in self.requests))

    def merged(self, *others: Workload, name: str | None = None) -> Workload:
        """This workload and ``others`` on one timeline (ids must stay unique)."""
        parts = (self, *others)
        return Workload(
            tuple(r for part in parts for r in part.requests),
            max(part.duration for part in parts),
            name or "+".join(part.name for part in parts),
            frozenset().union(*(part.bursts for part in parts)),
        )

    def scaled(self, rate_scale: float) -> Workload:
        """Time compressed by ``rate_scale`` (> 0): arrival rates multiply by it."""
        if not (math.isfinite(rate_scale) and rate_scale > 0):
            raise UsageError(f"rate_scale must be a finite number > 0, got {rate_scale!r}")
        return Workload(
            tuple(_moved(r, r.arrival / rate_scale) for r in self.requests),
            self.duration / rate_scale,
            self.name,
            self.bursts,
        )

    @property
    def openers(self) -> tuple[SimRequest, ...]:
        """The requests sent at their arrival: all but the later turns of tasks."""
        return tuple(r for r in self.requests if r.turn == 0)

    def window(self, start: float, end: float) -> Workload:
        """The requests arriving in ``[start, end)`` seconds, shifted to start at 0."""
        if not start < end:
            raise UsageError("window start must be before its end")
        kept = [_moved(r, r.arrival - start) for r in self.requests if start <= r.arrival < end]
        duration = min(self.duration, end) - start
        return Workload(tuple(kept), duration, self.name, self.bursts)

    def only(self, streams: Sequence[str]) -> Workload:
        """The requests of ``streams`` only (same timeline and duration)."""
        keep = set(streams)
        kept = tuple(r for r in self.requests if r.stream in keep)
        return Workload(kept, self.duration, self.name, self.bursts & keep)


def _moved(request: SimRequest, arrival: float) -> SimRequest:
    """``request`` arriving at ``arrival`` instead; its task keeps its own
    time (the deadline as long after its start)."""
    deadline = request.task_deadline
    if deadline is not None:
        deadline = arrival + (deadline - request.arrival)
    return dataclasses.replace(request, arrival=arrival, task_deadline=deadline)
