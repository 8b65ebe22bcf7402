"""A manual clock: virtual time for tests that drive the sans-IO core.

Every core object takes ``now``; a :class:`ManualClock` is the one place a test
keeps it, so time only moves when the test says so and never backwards::

    clock = ManualClock()
    policy.submit(request, clock.now())
    clock.advance(0.25)
    policy.dispatch(clock.now())
"""

from __future__ import annotations

import math

from slopolicy.errors import UsageError

__all__ = ("ManualClock",)


class ManualClock:
    """Monotonic seconds that move only when told, starting at ``start``."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = _seconds("start", start)

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"

    def now(self) -> float:
        """The current reading, in seconds."""
        return self._now

    __call__ = now

    def advance(self, seconds: float) -> float:
        """Move forward ``seconds`` (>= 0); the new reading."""
        seconds = _seconds("seconds", seconds)
        if seconds < 0:
            raise UsageError(f"a clock only moves forward; got {seconds!r} seconds")
        self._now += seconds
        return self._now

    def set(self, when: float) -> float:
        """Move to ``when`` (not before the current reading); the new reading."""
        when = _seconds("when", when)
        if when < self._now:
            raise UsageError(f"a clock only moves forward: {when!r} is before {self._now!r}")
        self._now = when
        return self._now


def _seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)
