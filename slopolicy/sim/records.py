"""The simulator's own record of every request: exact times, no sketches.

Definitions (DistServe; ``SIMULATOR.md``): TTFT counts from arrival, so
queueing is included; TPOT is ``(t_last - t_first) / (n_out - 1)``, 0 for one
token; a request **attains** its SLO iff it completed, met its lane's
targets (:meth:`~slopolicy.core.slo.SLOTargets.attains`, TBT included: the
same rule the runtime trackers judge by) and was not
**degraded**: its answer cut short by the scheduler (run under a
``max_new_tokens`` below what it would have generated within the client's own
limit) or its model switched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from slopolicy.sim.workload import SimRequest

__all__ = ("RequestRecord", "SimOutcome")


class SimOutcome(enum.Enum):
    """How a simulated request ended; the value is the wire name."""

    COMPLETED = "completed"
    REJECTED = "rejected"  # refused at submit (rejected or deferred), or by the engine
    EXPIRED = "expired"  # its queue deadline passed before it started
    UNFINISHED = "unfinished"  # still queued or running when the simulation stopped


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request's history in one simulation; times in simulated seconds.

    Attributes:
        request: the request as the workload offered it.
        lane: the lane it is reported under.
        outcome: how it ended.
        reason: the scheduler's reason code at submit (``admitted``, ``demoted``,
            ``rate_limited``, ``overload_shed``...), or ``queue_full`` once a
            full queue pushed it out.
        dispatched_at: when the scheduler released it to the engine.
        first_token_at: when its first token came out.
        finished_at: when it completed, expired or was refused.
        output_tokens: tokens generated.
        max_new_tokens: the output limit it ran under (after caps and
            fallbacks), or ``None`` if it never started.
        preemptions: times the engine preempted it.
        attempts: times the client sent it (1 + retries after refusals).
        model: the model the scheduler switched it to, or ``None``.
        slow_gaps: its gaps between tokens above its lane's ``tbt_p99`` target
            (0 without one; see :attr:`gaps`).
        held_by: for an expired request, what the scheduler last kept it back
            for (:attr:`slopolicy.sim.interface.Released.held_by`), or
            ``None`` where it did not say.
    """

    request: SimRequest
    lane: str
    outcome: SimOutcome
    reason: str
    dispatched_at: float | None
    first_token_at: float | None
    finished_at: float | None
    output_tokens: int
    max_new_tokens: int | None
    preemptions: int
    attempts: int = 1
    model: str | None = None
    slow_gaps: int = 0
    held_by: str | None = None

    @property
    def truncated(self) -> bool:
        """Whether it ran under an output limit below what it would have
        generated within the client's own ``max_new_tokens``."""
        if self.max_new_tokens is None:
            return False
        wanted = min(self.request.output_tokens, self.request.max_new_tokens)
        return self.max_new_tokens < wanted

    @property
    def degraded(self) -> bool:
        """Whether its answer was truncated or its model switched by the scheduler."""
        return self.truncated or self.model is not None

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first token."""
        if self.first_token_at is None:
            return None
        return self.first_token_at - self.request.arrival

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first, for completed requests
        (per sequence: a request of ``n`` sequences makes ``n`` at a time)."""
        if self.outcome is not SimOutcome.COMPLETED or self.first_token_at is None:
            return None
        assert self.finished_at is not None
        per_sequence = self.output_tokens / self.request.n
        if per_sequence <= 1:
            return 0.0
        return (self.finished_at - self.first_token_at) / (per_sequence - 1)

    @property
    def gaps(self) -> int:
        """Gaps between its tokens: one per token after the first (the engine
        yields one token an iteration, so each is its own chunk)."""
        return max(self.output_tokens - 1, 0) if self.first_token_at is not None else 0

    @property
    def e2e(self) -> float | None:
        """Seconds from arrival to completion, for completed requests."""
        if self.outcome is not SimOutcome.COMPLETED or self.finished_at is None:
            return None
        return self.finished_at - self.request.arrival

    @property
    def queue_wait(self) -> float | None:
        """Seconds from arrival to release to the engine."""
        if self.dispatched_at is None:
            return None
        return self.dispatched_at - self.request.arrival
