"""A quantile of the most recent values: exact, bounded, O(window) per value.

:class:`RecentRank` keeps the last ``window`` values in arrival order (to
evict the oldest) and sorted (to answer a rank), and caches the answer, so a
read is O(1) and a new value costs one ``bisect`` insert and delete, a memmove
of at most ``window`` slots. The answer is the value of rank
``floor(quantile x (n - 1))`` (0-based) among the ``n <= window`` kept,
numpy's ``method="lower"``, once ``n >= min_samples``; ``None`` before.

Used for what changes with traffic and must follow it, such as the output
lengths KV reservations forecast.
"""

from __future__ import annotations

import bisect
from collections import deque

__all__ = ("RecentRank",)


class RecentRank:
    """The ``quantile`` of the last ``window`` values added (callers check
    their arguments: ``0 < quantile <= 1``, ``1 <= min_samples <= window``)."""

    __slots__ = ("_recent", "_sorted", "min_samples", "quantile", "value", "window")

    def __init__(self, quantile: float, window: int, min_samples: int) -> None:
        self.quantile = quantile
        self.window = window
        self.min_samples = min_samples
        #: The answer (``None`` until ``min_samples`` values were added).
        self.value: float | None = None
        self._recent: deque[float] = deque()
        self._sorted: list[float] = []

    def add(self, value: float) -> None:
        """Add ``value`` (the oldest kept one leaves once ``window`` are kept)."""
        recent, ranked = self._recent, self._sorted
        if len(recent) == self.window:
            del ranked[bisect.bisect_left(ranked, recent.popleft())]
        recent.append(value)
        bisect.insort(ranked, value)
        n = len(ranked)
        if n >= self.min_samples:
            self.value = ranked[int(self.quantile * (n - 1))]
