"""A quantile or the mean of the most recent values: exact, bounded, O(window) per value.

:class:`RecentRank` keeps the last ``window`` values in arrival order (to
evict the oldest) and their sum, and, for a quantile, sorted (to answer a
rank); it caches the answer, so a read is O(1) and a new value costs at most
one ``bisect`` insert and delete, a memmove of at most ``window`` slots. A
quantile is the value of rank ``floor(quantile x (n - 1))`` (0-based) among
the ``n <= window`` kept, numpy's ``method="lower"``; the mean is their sum
over ``n`` (exact for integers below 2**53); either once ``n >=
min_samples``, ``None`` before.

Used for what changes with traffic and must follow it, such as the output
lengths KV reservations forecast.
"""

from __future__ import annotations

import bisect
from collections import deque

__all__ = ("RecentRank",)


class RecentRank:
    """The ``quantile`` of the last ``window`` values added, or their mean
    with ``quantile=None`` (callers check their arguments: ``0 < quantile <=
    1``, ``1 <= min_samples <= window``)."""

    __slots__ = ("_recent", "_sorted", "_total", "min_samples", "quantile", "value", "window")

    def __init__(self, quantile: float | None, window: int, min_samples: int) -> None:
        self.quantile = quantile
        self.window = window
        self.min_samples = min_samples
        #: The answer (``None`` until ``min_samples`` values were added).
        self.value: float | None = None
        self._recent: deque[float] = deque()
        self._sorted: list[float] | None = None if quantile is None else []
        self._total = 0.0

    def add(self, value: float) -> None:
        """Add ``value`` (the oldest kept one leaves once ``window`` are kept)."""
        recent, ranked = self._recent, self._sorted
        if len(recent) == self.window:
            oldest = recent.popleft()
            self._total -= oldest
            if ranked is not None:
                del ranked[bisect.bisect_left(ranked, oldest)]
        recent.append(value)
        self._total += value
        if ranked is not None:
            bisect.insort(ranked, value)
        n = len(recent)
        if n >= self.min_samples:
            quantile = self.quantile
            if ranked is None or quantile is None:
                self.value = self._total / n
            else:
                self.value = ranked[int(quantile * (n - 1))]
