"""What the policy reports and keeps about requests as they move."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from slopolicy.core.fast_init import fast_init
from slopolicy.core.kv.snapshot import KVStatistics
from slopolicy.core.ladder.events import LadderEvent
from slopolicy.core.ladder.overload import OverloadState
from slopolicy.core.outcome import Finished, Hold, Outcome, Revocation
from slopolicy.core.quota.tenants import QuotaStatistics
from slopolicy.core.request import Request

__all__ = ("Dispatch", "Entry", "Phase", "PolicyStatistics", "Started")


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """A request the engine may start now.

    ``request`` carries the lane's limits (capped ``max_new_tokens``) and the
    fallback ladder's transforms; ``kv_blocks`` is the KV reservation;
    ``queue_wait`` is seconds queued; ``rungs`` names the ladder rungs that
    changed or marked the request (a ``compress_prompt`` marker asks the host
    to compress the prompt itself). ``over_share``: when it started, the KV
    pool was contended (the tenants' needs exceed it, as
    :class:`~slopolicy.core.kv.shares.KVShares` counts them, or the running
    requests are forecast past 80% of it) and its tenant asked for more than
    its max-min share of the saturated engine (:meth:`TenantDemand.portion
    <slopolicy.core.queueing.demand.TenantDemand.portion>` below 1); always
    ``False`` without share protection. The engine's preemptions are to
    come then, and should take such requests first: :meth:`engine_priority`
    tells the engine (see ``docs/adapters.md``).
    """

    id: str
    tenant: str
    lane: str
    request: Request
    kv_blocks: int
    queue_wait: float
    rungs: tuple[str, ...] = ()
    over_share: bool = False

    def engine_priority(self, priorities: Mapping[str, int]) -> int | None:
        """vLLM's ``priority`` for this start, from ``priorities`` (lane ->
        ``priority``, lower runs first): its lane's (``None`` where the lane
        has none), and when :attr:`over_share` that plus the span of
        ``priorities`` (the most less the least, plus one), so it ranks
        after every start within its share, whatever the lanes. vLLM
        preempts the running request of the largest ``priority`` (then the
        latest arrival) first: an engine out of KV takes the tenants over
        their share first, not a within-share tenant's long prompt."""
        priority = priorities.get(self.lane)
        if priority is None or not self.over_share:
            return priority
        return priority + max(priorities.values()) - min(priorities.values()) + 1


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    """The result of :meth:`Policy.dispatch`: iterate it for the started requests;
    ``expired`` lists queued requests whose deadline passed; ``ladder`` is the
    fallback ladder's move if dispatch evaluated it and it moved; ``revoked``
    lists running requests the policy ended (outcome ``revoked``): to give
    their KV to a queued request of a tenant within its share
    (``engine.reclaim``), or stalled with no first token past their lane's
    p99 TTFT target while the engine preempts (``slo_deadline``; see
    :attr:`Finished.revoked_for <slopolicy.Finished.revoked_for>`): the host
    stops each on the engine (aborts it) and answers its caller with a
    retryable refusal (:class:`~slopolicy.Revoked` through the gate).

    It has no truth value (``if dispatch:`` raises :class:`TypeError`): ask
    ``dispatch.started``, ``dispatch.expired`` or :attr:`changed`."""

    started: tuple[Started, ...]
    expired: tuple[Finished, ...]
    ladder: LadderEvent | None = None
    revoked: tuple[Finished, ...] = ()

    def __iter__(self) -> Iterator[Started]:
        return iter(self.started)

    def __bool__(self) -> bool:
        raise TypeError(
            "a Dispatch has no truth value: ask .started, .expired, .revoked, .ladder or .changed"
        )

    @property
    def changed(self) -> bool:
        """Whether it started, expired or revoked anything, or moved the ladder."""
        return bool(self.started or self.expired or self.revoked) or self.ladder is not None


@dataclass(frozen=True, slots=True)
class PolicyStatistics:
    """A snapshot of the policy: requests waiting per lane, running, outcomes so
    far (``submitted`` counts every submit; ``outcomes`` includes ``rejected``),
    the KV and quota ledgers, the overload state, the ladder's level, the
    cost units started ahead of ``engine.dispatch_rate`` (``None`` without one),
    each lane's p99 time between tokens over its SLO window (seconds,
    ``None`` before two chunks of one stream), and the engine's saturation:
    the part of the recent time it held a startable request back, in
    ``[0, 1]`` (:class:`~slopolicy.core.queueing.saturation.Saturation`;
    ``None`` without ``engine.share_window_s``); and for each lane with a
    TTFT deadline, the share of its first tokens past their target, weighted
    over the last half minute, in ``[0, 1]``: what its late budget reads
    (:mod:`~slopolicy.core.queueing.lateness`); for each lane with a TPOT
    target, the same share of its completed answers past it, what the decode
    pace reads (:mod:`~slopolicy.core.queueing.decode_pace`)."""

    submitted: int
    queued: Mapping[str, int]
    running: int
    outcomes: Mapping[Outcome, int]
    kv: KVStatistics
    quotas: QuotaStatistics
    overload: OverloadState
    ladder_level: int
    dispatch_backlog: float | None = None
    tbt_p99: Mapping[str, float | None] = field(default_factory=dict)
    saturation: float | None = None
    ttft_late_share: Mapping[str, float] = field(default_factory=dict)
    tpot_late_share: Mapping[str, float] = field(default_factory=dict)


class Phase(enum.Enum):
    """An entry's phase (internal). ``DONE`` marks an ended entry: the lazy
    indexes (the deadline heap, each lane's FIFO) drop entries not ``QUEUED``
    when they reach them, so ending one is O(1)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class Entry:
    """The policy's record of one live request (mutable, internal)."""

    __slots__ = (
        "arrival",
        "charged_output",
        "cost",
        "deadline",
        "dispatched_at",
        "first_token_at",
        "gaps",
        "held_by",
        "id",
        "kv_blocks",
        "kv_output",
        "lane",
        "last_token_at",
        "marks",
        "output_tokens",
        "phase",
        "prompt_tokens",
        "request",
        "revoked_for",
        "rungs",
        "share_cost",
        "slow_gaps",
        "tenant",
        "weight",
    )

    def __init__(
        self,
        request: Request,
        lane: str,
        weight: float,
        prompt_tokens: int,
        kv_blocks: int,
        cost: float,
        arrival: float,
        deadline: float,
        rungs: tuple[str, ...] = (),
    ) -> None:
        self.id = request.id
        self.tenant = request.tenant
        self.request = request
        self.lane = lane
        self.weight = weight
        self.prompt_tokens = prompt_tokens
        self.kv_blocks = kv_blocks
        # Output tokens per sequence its KV reservation holds room for.
        self.kv_output = request.max_new_tokens
        self.cost = cost
        # Its cost at its forecast answer, as the tenants' shares count it.
        self.share_cost = cost
        self.arrival = arrival
        self.deadline = deadline
        self.rungs = rungs
        self.marks: dict[str, float] | None = None
        self.phase = Phase.QUEUED
        self.dispatched_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.output_tokens = 0
        self.charged_output = 0
        self.gaps = 0  # gaps between chunks of output (TBT)
        self.slow_gaps = 0  # of them above the lane's tbt_p99 target
        self.held_by: Hold | None = None  # what last kept it back at its lane's front
        self.revoked_for: Revocation | None = None  # why the policy ended it running

    def finished(self, outcome: Outcome, *, now: float, cost: float) -> Finished:
        """Mark this entry done; its terminal record at ``now``."""
        self.phase = Phase.DONE
        queue_wait = None if self.dispatched_at is None else self.dispatched_at - self.arrival
        ttft = tpot = None
        if self.first_token_at is not None:
            ttft = self.first_token_at - self.arrival
            last = self.last_token_at if self.last_token_at is not None else self.first_token_at
            tpot = (
                (last - self.first_token_at) / (self.output_tokens - 1)
                if self.output_tokens > 1
                else 0.0
            )
        return Finished(
            id=self.id,
            tenant=self.tenant,
            lane=self.lane,
            outcome=outcome,
            arrival=self.arrival,
            finished_at=now,
            queue_wait=queue_wait,
            ttft=ttft,
            tpot=tpot,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            cost=cost,
            stages=self._stages(),
            gaps=self.gaps,
            slow_gaps=self.slow_gaps,
            held_by=self.held_by if self.dispatched_at is None else None,
            revoked_for=self.revoked_for if outcome is Outcome.REVOKED else None,
        )

    def _stages(self) -> dict[str, float]:
        """TTFT split at the marks present: each stage ends at its own mark and
        starts at the previous one that exists."""
        if self.dispatched_at is None:
            return {}
        stages = {"queue": self.dispatched_at - self.arrival}
        marks = self.marks
        if not marks:  # the usual case: nothing marked
            return stages
        start = self.dispatched_at
        for stage in ("schedule", "prefill"):
            end = marks.get(stage)
            if end is not None:
                stages[stage] = end - start
                start = end
        if "prefill" in marks and self.first_token_at is not None:
            stages["transfer"] = self.first_token_at - start
        return stages
