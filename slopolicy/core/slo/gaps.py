"""Time between tokens (TBT) of one lane over a sliding window, with bounded memory.

Each gap (seconds between two consecutive chunks of one stream, see
:mod:`slopolicy.core.slo.targets`) lands in the current slice of a
:class:`~slopolicy.core.slo.sketches.SlidingSketches` ring: appended to the
slice's pending list (no object made per gap) and folded into its quantile
sketch every :data:`~slopolicy.core.slo.sketches.FOLD_AT` gaps, so memory is
at most ``slices`` sketches of ``max_buckets`` buckets plus ``FOLD_AT``
pending gaps per slice, however many tokens stream. Quantiles are within the
sketch's ``alpha`` relative error (:mod:`slopolicy.core.slo.quantiles`);
counts and stalls (gaps of at least ``stall_s``) are exact. Window semantics
are those of :mod:`slopolicy.core.slo.windows`.
"""

from __future__ import annotations

import math

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.core.slo.sketches import FOLD_AT, SlidingSketches
from slopolicy.core.slo.targets import Summary
from slopolicy.errors import UsageError

__all__ = ("GapWindow",)

_STALLS = 0  # the one sum per slice


class GapWindow:
    """Token gaps (seconds) and stalls (gaps >= ``stall_s``) over the last
    ``window_s`` seconds, in ``slices`` slices; see the module doc."""

    __slots__ = ("_window", "stall_s")

    def __init__(
        self,
        stall_s: float,
        *,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
        max_buckets: int = 2048,
    ) -> None:
        if not (math.isfinite(stall_s) and stall_s > 0):
            raise UsageError(f"stall_s must be a finite number > 0, got {shown(stall_s)}")
        self.stall_s = float(stall_s)
        self._window = SlidingSketches(
            1, 1, window_s=window_s, slices=slices, alpha=alpha, max_buckets=max_buckets
        )

    @property
    def window_s(self) -> float:
        """Nominal window length, seconds."""
        return self._window.window_s

    def record(self, gap: float, *, now: float) -> None:
        """Count one gap of ``gap`` seconds (finite, >= 0) at ``now`` (monotonic
        seconds); raises :class:`UsageError`, changing nothing, on a bad one."""
        if not (gap >= 0 and gap <= MAX_AMOUNT):
            raise UsageError(f"a token gap must be finite seconds >= 0, got {shown(gap)}")
        check_now(now)
        self._add(gap, now)

    def _add(self, gap: float, now: float) -> None:
        """:meth:`record` of a checked gap at a checked ``now`` (the policy's own)."""
        piece = self._window.current(now=now)
        pending = piece.pending[0]
        pending.append(gap)
        if gap >= self.stall_s:
            piece.sums[_STALLS] += 1.0
        if len(pending) >= FOLD_AT:
            piece.fold()

    def clear(self) -> None:
        """Forget every gap."""
        self._window.clear()

    def quantile(self, q: float, *, now: float) -> float | None:
        """The ``q`` quantile of the gaps in the window at ``now`` (``None``: none)."""
        check_now(now)
        return self._window.sketch(0, now=now).quantile(q)

    def summary(self, *, now: float) -> Summary | None:
        """Count, mean, p50/p95/p99 and largest gap in the window (``None``: none)."""
        check_now(now)
        return Summary.of(self._window.sketch(0, now=now))

    def count(self, *, now: float) -> int:
        """Gaps in the window at ``now``."""
        check_now(now)
        return self._window.count(0, now=now)

    def stalls(self, *, now: float) -> int:
        """Stalls (gaps >= ``stall_s``) in the window at ``now``."""
        check_now(now)
        return int(self._window.totals(now=now)[_STALLS])
