"""Values the fallback ladder returns: its moves, admission verdicts and statistics.

All are frozen; times are monotonic seconds on the clock of the ``now``
given to :meth:`slopolicy.core.ladder.ladder.FallbackLadder.update`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from slopolicy.core.ladder.pressure import Reading
from slopolicy.core.ladder.rungs import AdmissionAction

__all__ = (
    "LadderCause",
    "LadderDirection",
    "LadderEvent",
    "LadderStatistics",
    "LadderVerdict",
)


class LadderDirection(enum.Enum):
    """Which way a move went."""

    UP = "up"
    DOWN = "down"


class LadderCause(enum.Enum):
    """Why the ladder moved; the value is the stable wire name."""

    PRESSURE = "pressure"  # a trigger was hot: the readings name which
    COOLDOWN = "cooldown_elapsed"  # every trigger stayed cool for the cooldown


@dataclass(frozen=True, slots=True, kw_only=True)
class LadderEvent:
    """One move of the ladder.

    ``rung`` is the rung entered (up) or left (down). ``readings`` are the hot
    triggers that caused a climb, or every trigger's (cool) value at a step
    down. ``at`` is in monotonic seconds.
    """

    at: float
    from_level: int
    to_level: int
    rung: str
    direction: LadderDirection
    cause: LadderCause
    readings: tuple[Reading, ...]

    @property
    def message(self) -> str:
        """A sentence for people and logs."""
        why = ", ".join(str(reading) for reading in self.readings)
        if self.direction is LadderDirection.UP:
            return f"level {self.from_level} -> {self.to_level}: {self.rung} on; {why}"
        return (
            f"level {self.from_level} -> {self.to_level}: {self.rung} off; cooldown elapsed ({why})"
        )


@dataclass(frozen=True, slots=True)
class LadderVerdict:
    """An admission rung's answer for a lane: hold (``pause``) or refuse
    (``shed``) new requests, and try again after ``retry_after`` seconds.
    Gateways answer 503 with a ``Retry-After`` header when they refuse."""

    action: AdmissionAction
    lane: str
    rung: str
    retry_after: float
    message: str
    http_status: ClassVar[int] = 503


@dataclass(frozen=True, slots=True)
class LadderStatistics:
    """A snapshot of the ladder.

    Attributes:
        level: current level (0 = normal).
        rung: the highest active rung, ``None`` at level 0.
        since: when the current level was entered (``None`` before any update).
        time_at_level: seconds at the current level.
        time_by_level: seconds spent at each level ``0..top`` since the first update.
        climbs: moves up.
        descents: moves down.
        activations: climbs into each rung, by name.
        applied: requests each rung changed or marked in :meth:`FallbackLadder.apply`.
        held: admission verdicts each rung gave.
    """

    level: int
    rung: str | None
    since: float | None
    time_at_level: float
    time_by_level: tuple[float, ...]
    climbs: int
    descents: int
    activations: Mapping[str, int] = field(hash=False)
    applied: Mapping[str, int] = field(hash=False)
    held: Mapping[str, int] = field(hash=False)

    @property
    def moves(self) -> int:
        """Moves in either direction."""
        return self.climbs + self.descents
