"""Rolling counts of how tool calls ended, over a fixed window, in fixed memory."""

from __future__ import annotations

from collections import deque

__all__ = ("RollingRates",)

_SLOTS = 10


class RollingRates:
    """Calls, timeouts, errors and seconds run of the last ``window`` seconds.

    The window is ten slots of ``window / 10`` seconds each; a count leaves
    it whole when its slot ages out, so the window reads between
    ``0.9 * window`` and ``window`` seconds back. Times are monotonic
    seconds, already checked and never earlier than one seen (the pool's).
    """

    __slots__ = ("_counts", "_min_calls", "_width")

    def __init__(self, window: float, min_calls: int) -> None:
        self._width = window / _SLOTS
        self._min_calls = min_calls
        # [slot index, calls, timeouts, errors, seconds run], oldest first.
        self._counts: deque[list[float]] = deque()

    def _trim(self, now: float) -> int:
        slot = int(now // self._width)
        counts = self._counts
        while counts and counts[0][0] <= slot - _SLOTS:
            counts.popleft()
        return slot

    def record(self, *, now: float, timeout: bool, error: bool, seconds: float) -> None:
        """Count one call ended at ``now`` that ran ``seconds`` (>= 0)."""
        slot = self._trim(now)
        counts = self._counts
        if not counts or counts[-1][0] != slot:
            counts.append([slot, 0, 0, 0, 0.0])
        last = counts[-1]
        last[1] += 1
        last[2] += timeout
        last[3] += error
        last[4] += seconds

    def totals(self, *, now: float) -> tuple[int, int, int, float]:
        """``(calls, timeouts, errors, seconds run)`` in the window at ``now``."""
        self._trim(now)
        calls = timeouts = errors = 0
        seconds = 0.0
        for _, c, t, e, s in self._counts:
            calls += int(c)
            timeouts += int(t)
            errors += int(e)
            seconds += s
        return calls, timeouts, errors, seconds

    def rates(self, *, now: float) -> tuple[int, float, float]:
        """``(calls, timeout rate, error rate)``; rates over ``max(calls, min_calls)``."""
        calls, timeouts, errors, _ = self.totals(now=now)
        base = max(calls, self._min_calls)
        return calls, timeouts / base, errors / base
