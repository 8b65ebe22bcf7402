"""Quantiles with a relative-error guarantee: a mergeable log-bucketed sketch
(DDSketch, Masson et al., VLDB 2019) and a sliding-window ring of them.

With relative accuracy ``alpha`` the sketch uses ``gamma = (1 + alpha) / (1 - alpha)``
and counts a value ``x`` in bucket ``k = ceil(log_gamma(x))``, which holds
``(gamma**(k-1), gamma**k]``. The bucket answers ``2 * gamma**k / (gamma + 1)``,
within ``alpha * x`` of every value it holds. Bucket counts are exact, so the
bucket of the value of any rank is found exactly: **the answer to any quantile
is within ``alpha`` relative error of the exact value of that rank** (plus float
rounding, about 1e-15 relative).

Quantiles are the value of rank ``floor(q * (n - 1))`` (0-based) among the
``n`` values recorded, numpy's ``method="lower"``. Answers are clamped to the
exact minimum and maximum, which never widens the error.

Edge cases:

* **Zero and tiny values**: values in ``[0, min_value)`` are counted in a zero
  bucket and answered as ``0`` (clamped to the exact minimum): absolute error
  below ``min_value`` (default 1e-9, a nanosecond for latencies).
* **Negative, NaN or infinite values** raise :class:`UsageError`: durations and
  token counts cannot be negative, so one is a bug upstream.
* **Bounded memory**: at most ``max_buckets`` non-empty buckets. Past that the
  lowest buckets collapse into the lowest kept one, the *floor*. Quantiles whose
  exact value is above ``gamma**floor`` (see :attr:`QuantileSketch.collapsed_below`)
  keep the ``alpha`` bound; lower ones are overestimated (answered as the floor's
  value). The default 2048 buckets at 1% span a ratio of about 10**17 between the
  smallest and largest value (a nanosecond to three years), so latencies never
  collapse in practice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from slopolicy.core.checks import MAX_AMOUNT, shown
from slopolicy.errors import UsageError

__all__ = ("QuantileSketch",)


class QuantileSketch:
    """A mergeable quantile sketch with relative error ``alpha`` (see the module doc).

    Recording is O(1) (O(``max_buckets``) only on a step that collapses).
    Memory is O(number of distinct buckets), at most ``max_buckets``.
    """

    __slots__ = (
        "_count",
        "_counts",
        "_floor",
        "_gamma",
        "_log_gamma",
        "_max",
        "_min",
        "_sum",
        "_zeros",
        "alpha",
        "max_buckets",
        "min_value",
    )

    def __init__(
        self, alpha: float = 0.01, *, max_buckets: int = 2048, min_value: float = 1e-9
    ) -> None:
        if not 0 < alpha < 1:
            raise UsageError(f"alpha must be in (0, 1), got {alpha!r}")
        if max_buckets < 2:
            raise UsageError(f"max_buckets must be >= 2, got {max_buckets!r}")
        if not (math.isfinite(min_value) and min_value > 0):
            raise UsageError(f"min_value must be a finite number > 0, got {min_value!r}")
        self.alpha = alpha
        self.max_buckets = max_buckets
        self.min_value = min_value
        self._gamma = (1 + alpha) / (1 - alpha)
        self._log_gamma = math.log(self._gamma)
        self._counts: Counter[int] = Counter()
        self._floor: int | None = None
        self.clear()

    def clear(self) -> None:
        """Forget every value (keeps the settings)."""
        self._counts.clear()
        self._floor = None
        self._zeros = 0
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    @property
    def count(self) -> int:
        """Values recorded."""
        return self._count

    @property
    def sum(self) -> float:
        """Exact sum of the values recorded."""
        return self._sum

    @property
    def mean(self) -> float | None:
        """Exact mean, or ``None`` when empty."""
        return self._sum / self._count if self._count else None

    @property
    def min(self) -> float | None:
        """Exact smallest value, or ``None`` when empty."""
        return self._min if self._count else None

    @property
    def max(self) -> float | None:
        """Exact largest value, or ``None`` when empty."""
        return self._max if self._count else None

    @property
    def bucket_count(self) -> int:
        """Non-empty buckets, the zero bucket included: the memory in use."""
        return len(self._counts) + (1 if self._zeros else 0)

    @property
    def collapsed_below(self) -> float | None:
        """``None`` if nothing collapsed; else the value below which quantiles lost
        the ``alpha`` bound (they are overestimated)."""
        return None if self._floor is None else self._gamma**self._floor

    def add(self, value: float) -> None:
        """Record ``value`` (>= 0, finite)."""
        if not (value >= 0 and value <= MAX_AMOUNT):  # also refuses NaN and huge ints
            raise UsageError(f"a quantile sketch takes finite values >= 0, got {shown(value)}")
        self._count += 1
        self._sum += value
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value
        if value < self.min_value:
            self._zeros += 1
            return
        key = math.ceil(math.log(value) / self._log_gamma)
        counts = self._counts
        if self._floor is not None and key < self._floor:
            key = self._floor
        if key in counts:
            counts[key] += 1
            return
        counts[key] = 1
        if len(counts) > self.max_buckets:
            self._collapse()

    def add_many(self, values: Sequence[float]) -> None:
        """Record each of ``values`` (each >= 0, finite), as :meth:`add` would,
        in about a fifth of the time per value; changes nothing if one is bad."""
        if not values:
            return
        low, high = min(values), max(values)
        # Summed only once in bounds (an int too large for a float would raise);
        # a NaN, which min and max may miss, makes the total NaN.
        total = sum(values, self._sum) if low >= 0 and high <= MAX_AMOUNT else math.nan
        if total != total:
            bad = next(value for value in values if not (value >= 0 and value <= MAX_AMOUNT))
            raise UsageError(f"a quantile sketch takes finite values >= 0, got {shown(bad)}")
        self._count += len(values)
        self._sum = total
        if low < self._min:
            self._min = low
        if high > self._max:
            self._max = high
        log, ceil, log_gamma, least = math.log, math.ceil, self._log_gamma, self.min_value
        if low < least:
            keys = [ceil(log(value) / log_gamma) for value in values if value >= least]
            self._zeros += len(values) - len(keys)
        else:
            keys = [ceil(log(value) / log_gamma) for value in values]
        counts = self._counts
        counts.update(keys)  # counted at C speed
        if self._floor is not None or len(counts) > self.max_buckets:
            self._collapse()  # folds keys under the floor, as add() would have

    def merge(self, other: QuantileSketch) -> None:
        """Add every value ``other`` holds (same ``alpha`` and ``min_value`` required)."""
        if other.alpha != self.alpha or other.min_value != self.min_value:
            raise UsageError("only sketches with the same alpha and min_value merge")
        if not other._count:
            return
        self._count += other._count
        self._sum += other._sum
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)
        self._zeros += other._zeros
        if other._floor is not None and (self._floor is None or other._floor > self._floor):
            self._floor = other._floor
        counts = self._counts
        for key, count in other._counts.items():
            counts[key] = counts.get(key, 0) + count
        if self._floor is not None or len(counts) > self.max_buckets:
            self._collapse()

    def copy(self) -> QuantileSketch:
        """An independent sketch holding the same values."""
        twin = self.empty_like()
        twin.merge(self)
        return twin

    def empty_like(self) -> QuantileSketch:
        """An empty sketch with the same settings (cheaper than the constructor:
        sliding windows make one per slice)."""
        twin = object.__new__(QuantileSketch)
        twin.alpha, twin.max_buckets, twin.min_value = self.alpha, self.max_buckets, self.min_value
        twin._gamma, twin._log_gamma = self._gamma, self._log_gamma
        twin._counts, twin._floor = Counter(), None
        twin._zeros, twin._count, twin._sum = 0, 0, 0.0
        twin._min, twin._max = math.inf, -math.inf
        return twin

    def quantile(self, q: float) -> float | None:
        """The value of rank ``floor(q * (n - 1))``, within ``alpha``; ``None`` when empty."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Sequence[float]) -> tuple[float | None, ...]:
        """Several quantiles in one pass over the buckets (``qs`` in [0, 1])."""
        for q in qs:
            if not 0 <= q <= 1:
                raise UsageError(f"quantiles are in [0, 1], got {q!r}")
        if not self._count:
            return tuple(None for _ in qs)
        ranks = sorted((math.floor(q * (self._count - 1)), index) for index, q in enumerate(qs))
        answers: list[float] = [0.0] * len(qs)
        keys = sorted(self._counts)
        seen = self._zeros
        position = 0  # next bucket to open
        for rank, index in ranks:
            value = 0.0
            if rank >= self._zeros:
                while seen <= rank:
                    seen += self._counts[keys[position]]
                    position += 1
                value = 2 * self._gamma ** keys[position - 1] / (self._gamma + 1)
            answers[index] = min(max(value, self._min), self._max)
        return tuple(answers)

    def _collapse(self) -> None:
        # Fold the lowest buckets into the lowest one kept, so memory stays
        # bounded; only quantiles that low lose accuracy (see the module doc).
        counts = self._counts
        floor = self._floor
        if len(counts) > self.max_buckets:
            lowest_kept = sorted(counts)[-self.max_buckets]
            floor = lowest_kept if floor is None else max(lowest_kept, floor)
        if floor is None:
            return
        folded = 0
        for key in [key for key in counts if key < floor]:
            folded += counts.pop(key)
        if folded:
            counts[floor] = counts.get(floor, 0) + folded
        self._floor = floor
