"""How fast the KV pool's reservations free their blocks by ending: its turnover.

Reclaim (``engine.reclaim``, :mod:`slopolicy.core.policy.dispatcher`) ends a
running request only where waiting for the pool's own ends would make the
request it is ended for late. :class:`Turnover` measures that pace: every
end adds the blocks it freed, each weighted ``e^(-age / window_s)``, and
:meth:`Turnover.rate` divides the decayed sum by the decayed time seen (so a
fresh policy reads its history in full rather than as mostly idle, as
:class:`~slopolicy.core.queueing.saturation.Saturation` does). On a pool
whose answers are short the ends come often and a head waits for them; on
one held by long reasoning answers they come seldom, and a head with a
first-token deadline cannot wait. While no end comes the pace falls and a
head's deadline nears, so a head in time now may not be later:
:meth:`Turnover.late_from` is that moment, when the policy asks to be
dispatched again (:meth:`Policy.next_wakeup <slopolicy.Policy.next_wakeup>`).
Reads never move the sum, so every read between two ends agrees with
every other.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import check_count, check_now, check_time
from slopolicy.core.queueing.counters import check_window

__all__ = ("Turnover",)


class Turnover:
    """Blocks freed by ends per second, decayed over ``window_s`` seconds."""

    __slots__ = ("_at", "_freed", "_since", "_window")

    def __init__(self, window_s: float) -> None:
        check_window(window_s)
        self._window = float(window_s)
        self._freed = 0.0  # decayed blocks, as of _at
        self._at: float | None = None  # the latest reading
        self._since: float | None = None  # the first reading

    def freed(self, blocks: int, *, now: float) -> None:
        """A reservation of ``blocks`` ended at ``now`` (monotonic seconds;
        an earlier one counts as the latest seen)."""
        check_count("blocks", blocks)
        check_now(now)
        self._add(blocks, now)

    def _add(self, blocks: int, now: float) -> None:
        """:meth:`freed` for a caller that checked its arguments."""
        self._freed = self._advance(now) + blocks
        if self._since is None:
            self._since = self._at

    def rate(self, *, now: float) -> float:
        """Blocks freed per second lately (0 before any end)."""
        check_now(now)
        return self._rate(now)

    def _rate(self, now: float) -> float:
        """:meth:`rate` at a checked ``now``: a read, from the sum as of the
        latest end, so every read between two ends agrees with every other."""
        freed, since, at = self._freed, self._since, self._at
        if since is None or at is None or not freed:
            return 0.0
        if now > at:
            freed *= math.exp(-(now - at) / self._window)
        else:
            now = at
        # The decayed time seen since the first end: the window's worth once
        # it is long past, all of it while it is short (a whole window when
        # every end so far came at one moment).
        seen = self._window * -math.expm1(-(now - since) / self._window)
        return freed / (seen if seen > 0.0 else self._window)

    def wait(self, blocks: int, *, now: float) -> float:
        """Seconds until ends free ``blocks`` more at :meth:`rate` (``inf``
        at none; 0 for none needed)."""
        check_count("blocks", blocks)
        check_now(now)
        return self._wait(blocks, now)

    def _wait(self, blocks: int, now: float) -> float:
        """:meth:`wait` for a caller that checked its arguments."""
        if not blocks:
            return 0.0
        rate = self._rate(now)
        return math.inf if rate <= 0.0 else blocks / rate

    def late(self, blocks: int, *, by: float, now: float) -> bool:
        """Whether waiting from ``now`` for ends to free ``blocks`` more
        (:meth:`wait`) ends past ``by`` (monotonic seconds)."""
        check_count("blocks", blocks)
        check_now(now)
        check_time("by", by)
        return self._late(blocks, by, now)

    def _late(self, blocks: int, by: float, now: float) -> bool:
        """:meth:`late` for a caller that checked its arguments."""
        return self._wait(blocks, now) > by - now

    def late_from(self, blocks: int, *, by: float, now: float) -> float:
        """The first time from ``now`` on at which :meth:`late` holds, if no
        end comes first (the pace falls as time passes without one, so the
        wait grows while ``by`` nears): ``now`` where it holds already,
        ``inf`` for no blocks; to the clock's resolution, never after."""
        check_count("blocks", blocks)
        check_now(now)
        check_time("by", by)
        return self._late_from(blocks, by, now)

    def _late_from(self, blocks: int, by: float, now: float) -> float:
        """:meth:`late_from` for a caller that checked its arguments."""
        if self._late(blocks, by, now):
            return now
        if not blocks:
            return math.inf  # nothing to wait for: late only past ``by`` itself
        # Late at ``by`` (any wait is), not at ``now``; the reads are one
        # function of time, rising: halve the bracket to adjacent floats.
        early, late = now, by
        while True:
            middle = early + (late - early) / 2.0
            if not early < middle < late:
                return late
            if self._late(blocks, by, middle):
                late = middle
            else:
                early = middle

    def _advance(self, now: float) -> float:
        """Move the decayed sum to ``now`` (a ``now`` before the latest
        counts as it) and return it."""
        at = self._at
        if at is None:
            self._at = now
        elif now > at:
            self._freed *= math.exp(-(now - at) / self._window)
            self._at = now
        return self._freed
