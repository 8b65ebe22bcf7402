"""Pacing dispatch to a rate in cost units per second (the generic cell rate
algorithm, GCRA, in its "check, then charge" form).

The pace keeps a *theoretical arrival time* ``tat``: the moment by which
everything started so far would have been served at ``rate``. A start is
allowed at ``now`` while ``tat - now <= burst / rate`` (the backlog is at most
one burst); it then moves ``tat`` to ``max(tat, now) + cost / rate``. Because
the check does not depend on the cost, one request of any size can start (a
50k-token prompt is never stuck behind a burst smaller than itself), and a
pace that refuses one request refuses every request: callers keep their own
order and simply wait until :meth:`DispatchPace.ready_at`.

Bound: in any interval of ``T`` seconds the cost started is at most
``rate * T + burst + largest cost`` (property-tested). Settling a request's
actual cost moves ``tat`` by the difference, so the pace follows what was
served rather than what was estimated; unused time never banks more than one
burst.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import MAX_AMOUNT, check_now, is_number, shown
from slopolicy.errors import UsageError

__all__ = ("DispatchPace",)


class DispatchPace:
    """Starts at most ``rate`` cost units per second, ``burst`` cost units ahead.

    Sans-IO: every method takes ``now`` (monotonic seconds) from the caller.
    """

    __slots__ = ("_interval", "_tat", "burst", "rate")

    def __init__(self, rate: float, burst: float) -> None:
        if not (is_number(rate) and 0 < rate <= MAX_AMOUNT):
            raise UsageError(f"rate must be a finite number of cost units/s > 0, got {shown(rate)}")
        _check_cost("burst", burst)
        self.rate = float(rate)
        self.burst = float(burst)
        self._interval = self.burst / self.rate  # the tolerated backlog, seconds
        self._tat = -math.inf

    def ready_at(self, *, now: float) -> float:
        """The earliest time at or after ``now`` when a start is allowed (seconds)."""
        check_now(now)
        return self._ready_at(now)

    def _ready_at(self, now: float) -> float:
        """:meth:`ready_at` of a checked ``now``."""
        return max(now, self._tat - self._interval)

    def ready(self, *, now: float) -> bool:
        """Whether a start is allowed at ``now``."""
        check_now(now)
        return self._ready(now)

    def _ready(self, now: float) -> bool:
        """:meth:`ready` of a checked ``now``."""
        return self._tat - self._interval <= now

    def charge(self, cost: float, *, now: float) -> None:
        """Count a start of ``cost`` cost units at ``now`` (the caller checked :meth:`ready`)."""
        _check_cost("cost", cost)
        check_now(now)
        self._charge(cost, now)

    def _charge(self, cost: float, now: float) -> None:
        """:meth:`charge` of a checked ``cost`` and ``now``."""
        tat = self._tat
        self._tat = (now if now > tat else tat) + cost / self.rate

    def settle(self, charged: float, actual: float) -> None:
        """A started request's actual cost is known (cost units): move the pace
        by the difference from what was charged."""
        _check_cost("charged", charged)
        _check_cost("actual", actual)
        self._tat += (actual - charged) / self.rate

    def backlog(self, *, now: float) -> float:
        """Cost units started ahead of the rate at ``now`` (0 when idle)."""
        check_now(now)
        return self._backlog(now)

    def _backlog(self, now: float) -> float:
        """:meth:`backlog` at a checked ``now``."""
        return max(0.0, self._tat - now) * self.rate


def _check_cost(name: str, cost: float) -> None:
    if not (is_number(cost) and 0.0 <= cost <= MAX_AMOUNT):
        raise UsageError(f"{name} must be a finite number of cost units >= 0, got {shown(cost)}")
