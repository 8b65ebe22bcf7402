"""The interface between the simulator and whatever decides admission and order.

The simulator drives a :class:`Scheduler` exactly as a gateway drives a
policy: ``submit`` on arrival, ``dispatch`` whenever something changed (an
arrival, a finish, the engine starting requests from its queue, a timer the
scheduler asked for with ``wakeup``), then ``first_token`` / ``tokens`` /
``finish`` as the engine produces output. Released requests go to the
engine's own queue; the :class:`~slopolicy.sim.view.EngineView` shows a
scheduler the engine's seats, KV and queue, counting what it releases in the
dispatch under way. Ours wraps the real :class:`~slopolicy.Policy`
(:mod:`slopolicy.sim.ours`); the baselines are small objects in
:mod:`slopolicy.sim.baselines`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from slopolicy.core.outcome import BEHIND
from slopolicy.sim.engine import Scheduling
from slopolicy.sim.view import EngineView
from slopolicy.sim.workload import SimRequest

__all__ = ("BEHIND", "EngineView", "Release", "Released", "Scheduler", "SimAdmission")

_SAID_NOTHING: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SimAdmission:
    """The answer to ``submit``: ``accepted`` (queued) or refused, in ``lane``
    (``None`` when the scheduler has no lanes), with a reason code
    (``admitted``, ``demoted``, ``rate_limited``, ``overload_shed`` ...).

    A refusal is ``retryable`` when the same request should succeed later
    (HTTP 429/503: a client may come back), after ``retry_after`` seconds
    when that is known. ``displaced`` is ``(id, refusal)`` for a queued
    request this arrival pushed out of a full queue: it has ended, refused.
    """

    accepted: bool
    lane: str | None = None
    reason: str = "admitted"
    retryable: bool = False
    retry_after: float | None = None
    displaced: tuple[str, SimAdmission] | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """A request handed to the engine, with the output limit each of its
    sequences runs under (after caps and fallbacks), its engine priority
    (lower runs first) and the model it was switched to (``None``: the one
    it asked for)."""

    id: str
    max_new_tokens: int
    priority: int = 0
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Released:
    """What ``dispatch`` did: requests released to the engine, queued
    requests that expired (their deadline passed) instead, and released
    requests it ``revoked``: the engine aborts them, and each ends refused
    (reason ``revoked``, retryable, as a 503), its client retrying it if it may.

    ``held_by`` may say, for expired requests, what the scheduler last kept
    each back for at the front of its lane (a
    :class:`~slopolicy.core.outcome.Hold` wire name, or :data:`BEHIND` for
    one that never reached the front); the reports count expiries by it
    (:attr:`~slopolicy.sim.reports.LaneReport.expired_by`). A scheduler that
    does not say leaves it empty."""

    started: tuple[Release, ...] = ()
    expired: tuple[str, ...] = ()
    held_by: Mapping[str, str] = field(default_factory=lambda: _SAID_NOTHING)
    revoked: tuple[str, ...] = ()


class Scheduler(Protocol):
    """Admission and ordering in front of the engine; every time is simulated seconds.

    ``scheduling`` says how the engine orders what it was released (``fcfs``
    or ``priority``).
    """

    name: str
    scheduling: Scheduling

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission: ...

    def dispatch(self, now: float, engine: EngineView) -> Released: ...

    def first_token(self, request_id: str, *, now: float) -> None: ...

    def tokens(self, request_id: str, count: int, *, now: float) -> None: ...

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None: ...

    def wakeup(self) -> float | None:
        """When ``dispatch`` must run again even if nothing happens (timers,
        deadlines), or ``None``."""
        ...

    def observe(self, engine: EngineView, now: float) -> None:
        """Periodic engine signals (called at every wakeup)."""
        ...
