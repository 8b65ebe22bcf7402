"""What the task table reports: how tasks end, what is left of their time,
why a turn is refused, and counts (frozen values)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from slopolicy.core.reasons import Reason

__all__ = ("TaskBudget", "TaskEnded", "TaskOutcome", "TaskRefusal", "TaskStatistics")


class TaskOutcome(enum.Enum):
    """How a task ended; the value is the stable wire name."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskEnded:
    """A task that ended: times in monotonic seconds; ``turns`` counts its
    completed turns and ``why`` says what ended it (``completed``, ``deadline``,
    a turn's outcome such as ``expired``, ``idle`` or ``evicted``)."""

    id: str
    tenant: str
    lane: str
    outcome: TaskOutcome
    why: str
    started_at: float
    ended_at: float
    turns: int

    @property
    def e2e(self) -> float:
        """Seconds from the first turn's admission to the end."""
        return self.ended_at - self.started_at


@dataclass(frozen=True, slots=True)
class TaskBudget:
    """What is left of a task's time: ``remaining`` seconds to its deadline,
    ``turns_left`` (this one included) when known, ``per_turn``, the
    remaining time shared evenly over them (``None`` where unknown), and
    ``tool_s``, the seconds of tool calls (waited plus ran) the host has made
    for it through ``gate.tool(task=...)``, already gone from ``remaining``."""

    deadline: float | None
    remaining: float | None
    turns_left: int | None
    per_turn: float | None
    tool_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRefusal:
    """Why a turn may not be admitted: a reason, a sentence, and its HTTP status."""

    reason: Reason
    message: str
    http_status: int


@dataclass(frozen=True, slots=True)
class TaskStatistics:
    """Counts since the table was made: tasks ``active`` now, and those
    ``started`` and ended in each outcome (``started`` equals the ended ones
    plus the active ones)."""

    active: int
    started: int
    completed: int
    failed: int
    abandoned: int
