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
first-token deadline cannot wait.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import check_count, check_now
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
        """:meth:`rate` at a checked ``now``."""
        freed = self._advance(now)
        since, at = self._since, self._at
        if since is None or at is None or not freed:
            return 0.0
        # The decayed time seen since the first end: the window's worth once
        # it is long past, all of it while it is short (a whole window when
        # every end so far came at one moment).
        seen = self._window * -math.expm1(-(at - since) / self._window)
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
