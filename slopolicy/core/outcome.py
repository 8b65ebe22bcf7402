"""How requests end: the closed set of outcomes and the record each accepted request leaves.

Every request the policy accepts ends in exactly one :class:`Outcome`;
requests refused at submit end as ``rejected`` with their decision as the record;
a running request ended by the policy itself ends ``revoked`` and says why
(:class:`Revocation`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from slopolicy.core.checks import shown
from slopolicy.core.fast_init import fast_init
from slopolicy.errors import UsageError

__all__ = ("BEHIND", "STAGES", "Finished", "Hold", "Outcome", "Revocation", "ending", "held_name")

#: The stages of time-to-first-token, in order (see :attr:`Finished.stages`).
STAGES = ("queue", "schedule", "prefill", "transfer")


class Outcome(enum.Enum):
    """The terminal outcome of a request; the value is the stable wire name."""

    COMPLETED = "completed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    FAILED = "failed"
    #: A running request the policy ended (:attr:`Dispatch.revoked
    #: <slopolicy.Dispatch.revoked>`; why: :class:`Revocation`): only the
    #: policy ends one so.
    REVOKED = "revoked"

    # Members are singletons compared by identity, so they hash by identity:
    # at C speed, where Enum's own hash is a Python call (several per request).
    __hash__ = object.__hash__


class Hold(enum.Enum):
    """What the policy last kept a queued request back for while it was the
    next of its lane to start (:attr:`Finished.held_by`); the value is the
    stable wire name.

    ``KV``: its KV did not fit the ledger (the pool, as forecast).
    ``KV_SHARE``: its tenant held more than its share of an over-asked
    pool, and its KV did not fit beside the room other tenants are owed
    (:mod:`~slopolicy.core.kv.shares`); the lane's next tenant went instead.
    ``PREFILL``: the prompt work already ahead of it in the engine filled the
    prefill budget. ``SEATS``: the seats its lane may use were all taken.
    ``PAUSED``: the fallback ladder paused its lane. ``LATE``: it would have
    missed its lane's TTFT target even if started then, so it left the queue.
    ``PACE``: its prompt's prefill would have put more of the requests
    decoding behind their TPOT target's pace than the target allows, so it
    waited for them (:mod:`~slopolicy.core.queueing.decode_pace`).
    """

    KV = "kv"
    KV_SHARE = "kv_share"
    PREFILL = "prefill_budget"
    SEATS = "seats"
    PAUSED = "lane_paused"
    LATE = "predicted_late"
    PACE = "decode_pace"

    __hash__ = object.__hash__


class Revocation(enum.Enum):
    """Why the policy ended a running request (:attr:`Finished.revoked_for`);
    the value is the stable wire name.

    ``RECLAIM``: its tenant was over its share of a saturated engine, and its
    KV let a queued request of a tenant within its share start
    (``engine.reclaim``). ``STALLED``: it had no first token by its lane's
    ``ttft_p99_s`` while the engine was preempting for want of KV: it could
    only miss, and an engine that preempts by recompute computes its prompt
    again each time it takes it back (``slo_deadline``).
    """

    RECLAIM = "reclaim"
    STALLED = "stalled"

    __hash__ = object.__hash__


#: The wire name of a request that ended queued without reaching the front
#: of its lane (:attr:`Finished.held_by` ``None``): it waited behind the
#: lane's order, or every seat was taken.
BEHIND = "behind"


def held_name(hold: Hold | None) -> str:
    """The wire name of a :attr:`Finished.held_by`: the hold's own, or
    :data:`BEHIND` for ``None``."""
    return BEHIND if hold is None else hold.value


_ENDINGS = frozenset({Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED})


def ending(outcome: Outcome | str) -> Outcome:
    """``outcome`` (an :class:`Outcome` or its wire name) as the end of a started
    request: ``completed``, ``failed`` or ``cancelled``; anything else raises
    :class:`UsageError`."""
    try:
        found = outcome if isinstance(outcome, Outcome) else Outcome(outcome)
    except ValueError:
        found = None
    if found not in _ENDINGS:
        name = found.value if isinstance(found, Outcome) else shown(outcome)
        raise UsageError(f"a started request ends completed, failed or cancelled, not {name}")
    assert found is not None
    return found


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """How one accepted request ended, with its timings in seconds.

    ``ttft`` counts from arrival at the policy, so queueing is included;
    ``tpot`` is ``(t_last - t_first) / (output_tokens - 1)`` (0 for one token).
    Timings the request never reached are ``None``. ``cost`` is the actual cost
    in cost units charged to the tenant. ``stages`` splits TTFT into the
    :data:`STAGES` that were marked, in seconds: ``queue`` (arrival to
    dispatch), ``schedule`` (dispatch to the engine starting the request),
    ``prefill`` (to the engine producing the first token) and ``transfer``
    (to the first token reaching the caller); unmarked stages are absent.
    ``gaps`` counts the gaps between its chunks of output (TBT; a chunk is one
    arrival however many tokens it carries) and ``slow_gaps`` those above its
    lane's ``tbt_p99`` target (0 without one). ``held_by`` is, for a request
    that ended before it started, the last :class:`Hold` the policy kept it
    back for at the front of its lane; ``None``: it never reached the front
    (it waited behind its lane's order, or every seat was taken), or it started.
    ``revoked_for`` says why a ``revoked`` request was ended (``None`` for
    every other outcome).
    """

    id: str
    tenant: str
    lane: str
    outcome: Outcome
    arrival: float
    finished_at: float
    queue_wait: float | None
    ttft: float | None
    tpot: float | None
    prompt_tokens: int
    output_tokens: int
    cost: float
    stages: Mapping[str, float] = field(default_factory=dict)
    gaps: int = 0
    slow_gaps: int = 0
    held_by: Hold | None = None
    revoked_for: Revocation | None = None

    @property
    def e2e(self) -> float:
        """Seconds from arrival to the end."""
        return self.finished_at - self.arrival
