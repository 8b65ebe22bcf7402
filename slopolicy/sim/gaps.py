"""Time between tokens (TBT): every gap between two consecutive tokens of a request.

Mean TPOT hides a long prefill landing mid-stream; the gaps show it. The
engine model gives every decoding request one token per iteration, so each
iteration adds one gap of its own duration to every request decoding in it
(a run of ``k`` pure-decode iterations adds ``k`` gaps growing linearly), and
a request resumed after a preemption adds one gap from its last token before
the preemption to its next.

:class:`Gaps` keeps them per group (lane) in a histogram whose buckets are
0.5% wide and anchored at the stall threshold, so quantiles are within 0.25%
of the exact value and **stalls** (gaps of at least :data:`STALL_S` seconds,
Sarathi-Serve's P99 TBT target of 0.2 s) are counted exactly.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

__all__ = ("STALL_S", "Gaps", "TBTSummary")

#: A gap of at least this many seconds is a stall (Sarathi-Serve's TBT SLO).
STALL_S = 0.2
#: Bucket ``j`` holds gaps in ``[STALL_S·RATIO**j, STALL_S·RATIO**(j+1))``.
RATIO = 1.005
_LOG_RATIO = math.log(RATIO)


@dataclass(frozen=True, slots=True)
class TBTSummary:
    """A group's token gaps: how many, how many stalls (>= :data:`STALL_S`),
    and the median, p99 and largest gap in seconds (``None`` without gaps)."""

    gaps: int
    stalls: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None


def _bucket(seconds: float) -> int:
    if seconds <= 0:
        return -(1 << 30)  # below every positive gap
    index = math.floor(math.log(seconds / STALL_S) / _LOG_RATIO)
    # Rounding must not move a gap across the stall threshold.
    if seconds >= STALL_S:
        return max(index, 0)
    return min(index, -1)


class Gaps:
    """A histogram of token gaps (seconds); see the module docstring."""

    __slots__ = ("_buckets", "count", "maximum", "minimum", "stalls")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.stalls = 0
        self.minimum = math.inf
        self.maximum = 0.0

    def add(self, seconds: float, count: int = 1) -> None:
        """``count`` gaps of ``seconds`` each."""
        self._put(_bucket(seconds), count)
        self.minimum = min(self.minimum, seconds)
        self.maximum = max(self.maximum, seconds)

    def add_run(self, first: float, step: float, k: int, count: int = 1) -> None:
        """``count`` requests' gaps over ``k`` iterations lasting
        ``first + step·i`` seconds (``i`` = 0..k-1, ``step`` >= 0)."""
        if k <= 0:
            return
        last = first + step * (k - 1)
        low, high = _bucket(first), _bucket(last)
        self.minimum = min(self.minimum, first)
        self.maximum = max(self.maximum, last)
        start = 0
        while low < high:
            # The first iteration past bucket ``low``; durations only grow.
            end = bisect.bisect_right(
                range(k), low, lo=start, key=lambda i: _bucket(first + step * i)
            )
            self._put(low, (end - start) * count)
            start = end
            low = _bucket(first + step * start)
        self._put(low, (k - start) * count)

    def _put(self, bucket: int, count: int) -> None:
        if count <= 0:
            return
        self._buckets[bucket] = self._buckets.get(bucket, 0) + count
        self.count += count
        if bucket >= 0:
            self.stalls += count

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0-1) of the gaps, nearest rank, to within 0.25%
        (the bucket's geometric middle, clamped to the smallest and largest gap)."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                middle: float = STALL_S * RATIO ** (bucket + 0.5)
                return min(max(middle, self.minimum), self.maximum)
        return self.maximum

    def summary(self) -> TBTSummary:
        """A frozen snapshot."""
        if not self.count:
            return TBTSummary(0, 0, None, None, None)
        return TBTSummary(
            self.count, self.stalls, self.quantile(0.5), self.quantile(0.99), self.maximum
        )
