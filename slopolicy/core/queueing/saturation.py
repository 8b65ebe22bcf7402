"""How much of the recent past the engine held work back: its saturation.

A busy engine is not a saturated one. The ladder's first level reads
pressure (the KV ledger's forecast peak near the pool, a head that waited
half its deadline), and a pool forecast near full is the steady state of an
engine serving long prompts well below its capacity. The policy's
protection by share refuses an over-share tenant's excess from that first
level; on such an engine it refused work the engine had room for (a
long-conversation trace at 86% of its saturated cost throughput: 11% of
the long prompts refused while the rest started within 1.4 s of a 15 s
target).

:class:`Saturation` measures the other side: at the end of each dispatch
the policy says whether the engine held a startable request back (every
seat taken, or a queued head that did not fit the KV ledger or the prefill
budget), and :meth:`Saturation.fraction` is the part of the recent time the
engine did, each moment weighted ``e^(-age / window_s)`` (the state between
two reports is the earlier one's). Over a history shorter than the window
the fraction is of the history, so a fresh policy reads its first moments
in full rather than as mostly idle.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import check_now
from slopolicy.core.queueing.counters import check_window
from slopolicy.errors import UsageError

__all__ = ("SATURATED", "Saturation")

#: The fraction from which the engine counts as saturated: it held work back
#: for most of the recent time, not in a burst.
SATURATED = 0.5


class Saturation:
    """The decayed fraction of time the engine held work back.

    Args:
        window_s: the time constant the past decays with (seconds, > 0).
    """

    __slots__ = ("_at", "_held", "_saturated", "_seen", "_window")

    def __init__(self, window_s: float) -> None:
        check_window(window_s)
        self._window = float(window_s)
        self._at: float | None = None  # the latest report's time
        self._saturated = False  # the state since then
        self._held = 0.0  # decayed seconds saturated, as of _at
        self._seen = 0.0  # decayed seconds reported, as of _at

    def report(self, saturated: bool, *, now: float) -> None:
        """From ``now`` on the engine holds work back (``saturated``) or not."""
        if not isinstance(saturated, bool):
            raise UsageError(f"saturated must be a bool, got {saturated!r}")
        check_now(now)
        self._report(saturated, now)

    def _report(self, saturated: bool, now: float) -> None:
        """:meth:`report` for a caller that checked its arguments."""
        at = self._at
        if at is None or now > at:  # a report before the latest counts as at it
            self._held, self._seen = self._aged(now)
            self._at = now  # the history starts at the first report
        self._saturated = saturated

    def fraction(self, *, now: float) -> float:
        """The part of the recent time (decayed, see the module) the engine
        held work back, in ``[0, 1]``; 0 before the first report. A pure read."""
        check_now(now)
        return self._fraction(now)

    def _fraction(self, now: float) -> float:
        """:meth:`fraction` for a caller that checked ``now``."""
        held, seen = self._aged(now)
        return 0.0 if seen <= 0.0 else min(1.0, held / seen)

    def _aged(self, now: float) -> tuple[float, float]:
        """Both sums (seconds saturated, seconds reported) aged to ``now``;
        as they are for a time at or before the latest, or before any report."""
        at, held, seen = self._at, self._held, self._seen
        if at is not None and now > at:
            kept = math.exp((at - now) / self._window)
            added = self._window * (1.0 - kept)
            seen = seen * kept + added
            held = held * kept + (added if self._saturated else 0.0)
        return held, seen
