"""Time between tokens (TBT): every gap between two consecutive tokens of a request.

Mean TPOT hides a long prefill landing mid-stream; the gaps show it. The
engine model gives every decoding request one token per iteration, so each
iteration adds one gap of its own duration to every request decoding in it
(a run of ``k`` pure-decode iterations adds ``k`` gaps growing linearly), and
a request resumed after a preemption adds one gap from its last token before
the preemption to its next. (Each token is its own chunk, so these are the
gaps the runtime measures between chunks: one definition, in
:mod:`slopolicy.core.slo.targets`.)

:class:`Gaps` keeps them per group (lane) in a histogram whose buckets are
0.5% wide and anchored at the group's stall threshold, so quantiles are
within 0.25% of the exact value and **stalls** (gaps of at least
``stall_s``: the lane's :attr:`~slopolicy.core.slo.SLOTargets.stall_threshold`,
by default :data:`STALL_S`, Sarathi-Serve's P99 TBT target of 0.2 s) are
counted exactly.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from slopolicy.core.slo.targets import STALL_S

__all__ = ("STALL_S", "Gaps", "TBTSummary", "slow_in_run")

#: Bucket ``j`` holds gaps in ``[stall_s·RATIO**j, stall_s·RATIO**(j+1))``.
RATIO = 1.005
_LOG_RATIO = math.log(RATIO)


@dataclass(frozen=True, slots=True)
class TBTSummary:
    """A group's token gaps: how many, how many stalls (>= its stall threshold),
    and the median, p99 and largest gap in seconds (``None`` without gaps)."""

    gaps: int
    stalls: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None


def slow_in_run(first: float, step: float, k: int, bound: float) -> int:
    """How many of ``k`` iterations lasting ``first + step·i`` seconds (``i`` =
    0..k-1, ``step`` >= 0) are above ``bound``: each gives every request
    decoding in it one gap that long."""
    if k <= 0 or first + step * (k - 1) <= bound:
        return 0
    if first > bound:
        return k
    # 0 < step here: the iterations at or below the bound come first.
    within = min(k, math.floor((bound - first) / step) + 1)
    while within > 0 and first + step * (within - 1) > bound:  # float rounding
        within -= 1
    while within < k and first + step * within <= bound:
        within += 1
    return k - within


class Gaps:
    """A histogram of token gaps (seconds), stalls from ``stall_s`` seconds;
    see the module docstring."""

    __slots__ = ("_buckets", "count", "maximum", "minimum", "stall_s", "stalls")

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.stalls = 0
        self.minimum = math.inf
        self.maximum = 0.0

    def add(self, seconds: float, count: int = 1) -> None:
        """``count`` gaps of ``seconds`` each."""
        self._put(self._bucket(seconds), count)
        self.minimum = min(self.minimum, seconds)
        self.maximum = max(self.maximum, seconds)

    def add_run(self, first: float, step: float, k: int, count: int = 1) -> None:
        """``count`` requests' gaps over ``k`` iterations lasting
        ``first + step·i`` seconds (``i`` = 0..k-1, ``step`` >= 0)."""
        if k <= 0:
            return
        last = first + step * (k - 1)
        bucket = self._bucket
        low, high = bucket(first), bucket(last)
        self.minimum = min(self.minimum, first)
        self.maximum = max(self.maximum, last)
        start = 0
        while low < high:
            # The first iteration past bucket ``low``; durations only grow.
            end = bisect.bisect_right(
                range(k), low, lo=start, key=lambda i: bucket(first + step * i)
            )
            self._put(low, (end - start) * count)
            start = end
            low = bucket(first + step * start)
        self._put(low, (k - start) * count)

    def _bucket(self, seconds: float) -> int:
        if seconds <= 0:
            return -(1 << 30)  # below every positive gap
        stall = self.stall_s
        index = math.floor(math.log(seconds / stall) / _LOG_RATIO)
        # Rounding must not move a gap across the stall threshold.
        if seconds >= stall:
            return max(index, 0)
        return min(index, -1)

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
                middle: float = self.stall_s * RATIO ** (bucket + 0.5)
                return min(max(middle, self.minimum), self.maximum)
        return self.maximum

    def summary(self) -> TBTSummary:
        """A frozen snapshot."""
        if not self.count:
            return TBTSummary(0, 0, None, None, None)
        return TBTSummary(
            self.count, self.stalls, self.quantile(0.5), self.quantile(0.99), self.maximum
        )
