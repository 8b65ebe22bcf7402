"""The tool pool's values: a held slot, a queued call, a refusal, how a call ended, snapshots."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from slopolicy.core.reasons import Reason

__all__ = (
    "ToolDisplaced",
    "ToolLease",
    "ToolOutcome",
    "ToolPoolStatistics",
    "ToolRefused",
    "ToolStatistics",
    "ToolWaiting",
)


class ToolOutcome(enum.Enum):
    """How a tool call that held a slot ended."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolLease:
    """A slot held by one tool call. Times are monotonic seconds.

    Attributes:
        id: the call's id, the same from ``acquire`` to ``release``.
        tenant: whose call it is.
        tool: the name the host called it by.
        group: the configured name whose limits it counts against (``tool``,
            or ``"*"`` for an unlisted tool).
        queued_at: when it asked for a slot.
        started_at: when it got one.
        timeout: seconds it may run (``None``: no limit).
    """

    id: int
    tenant: str
    tool: str
    group: str
    queued_at: float
    started_at: float
    timeout: float | None

    @property
    def wait(self) -> float:
        """Seconds it waited for its slot."""
        return self.started_at - self.queued_at

    @property
    def deadline(self) -> float | None:
        """When it times out (monotonic seconds), or ``None``."""
        return None if self.timeout is None else self.started_at + self.timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRefused:
    """A call refused: nothing of it is held. ``http_status`` and
    ``retry_after`` (seconds, or ``None``) are what a gateway answers."""

    reason: Reason
    message: str
    http_status: int
    tenant: str
    tool: str
    retry_after: float | None = None
    accepted = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDisplaced:
    """A waiting call pushed out of a full queue by another tenant's arrival:
    it has ended, refused (``refusal``), and its caller must be told."""

    id: int
    refusal: ToolRefused


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolWaiting:
    """A call queued for a slot: a later ``release`` returns its
    :class:`ToolLease` (same ``id``) once it may start. ``deadline``
    (monotonic seconds, or ``None``) is when the host should withdraw it as
    expired; ``displaced`` is a waiter its arrival pushed out, if any."""

    id: int
    tenant: str
    tool: str
    group: str
    queued_at: float
    deadline: float | None
    displaced: ToolDisplaced | None = None
    accepted = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStatistics:
    """One tool's counts since the pool was made, and its rolling rates at ``now``.

    Attributes:
        name: the configured name (or ``"*"``).
        in_flight: calls holding a slot.
        waiting: calls queued for one.
        started: calls that got a slot.
        ended: calls that gave one back, by outcome.
        refused: calls refused, by reason (``expired`` and displaced waiters included).
        calls: calls ended (not cancelled) within the rolling window.
        timeout_rate: timed-out calls in the window over ``max(calls, min_calls)``.
        error_rate: failed calls in the window over the same.
    """

    name: str
    in_flight: int
    waiting: int
    started: int
    ended: Mapping[ToolOutcome, int]
    refused: Mapping[Reason, int]
    calls: int
    timeout_rate: float
    error_rate: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPoolStatistics:
    """The whole pool at ``now``: each tool's statistics and the totals."""

    tools: tuple[ToolStatistics, ...]
    in_flight: int
    waiting: int
    tenants: int
    timeout_rate: float
    error_rate: float
