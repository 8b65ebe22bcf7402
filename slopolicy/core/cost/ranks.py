"""A quantile and the mean of the most recent values: exact, bounded, O(window) per value.

:class:`RecentRank` keeps the last ``window`` values in arrival order (to
evict the oldest) and sorted (to answer a rank), and their sum, and caches
the answers, so a read is O(1) and a new value costs one ``bisect`` insert
and delete, a memmove of at most ``window`` slots. The quantile is the value
of rank ``floor(quantile x (n - 1))`` (0-based) among the ``n <= window``
kept, numpy's ``method="lower"``, and the mean their sum over ``n`` (exact
for integers below 2**53), once ``n >= min_samples``; ``None`` before.

Used for what changes with traffic and must follow it, such as the output
lengths KV reservations forecast.
"""

from __future__ import annotations

import bisect
from collections import deque

__all__ = ("RecentRank",)


class RecentRank:
    """The ``quantile`` and the mean of the last ``window`` values added
    (callers check their arguments: ``0 < quantile <= 1``,
    ``1 <= min_samples <= window``)."""

    __slots__ = (
        "_recent",
        "_sorted",
        "_total",
        "mean",
        "min_samples",
        "quantile",
        "value",
        "window",
    )

    def __init__(self, quantile: float, window: int, min_samples: int) -> None:
        self.quantile = quantile
        self.window = window
        self.min_samples = min_samples
        #: The quantile (``None`` until ``min_samples`` values were added).
        self.value: float | None = None
        #: The mean (``None`` until ``min_samples`` values were added).
        self.mean: float | None = None
        self._recent: deque[float] = deque()
        self._sorted: list[float] = []
        self._total = 0.0

    def add(self, value: float) -> None:
        """Add ``value`` (the oldest kept one leaves once ``window`` are kept)."""
        recent, ranked = self._recent, self._sorted
        if len(recent) == self.window:
            oldest = recent.popleft()
            del ranked[bisect.bisect_left(ranked, oldest)]
            self._total -= oldest
        recent.append(value)
        bisect.insort(ranked, value)
        self._total += value
        n = len(ranked)
        if n >= self.min_samples:
            self.value = ranked[int(self.quantile * (n - 1))]
            self.mean = self._total / n
