"""Quantile sketches over sliding windows of time.

A window of ``window_s`` seconds is a ring of ``slices`` slices (see
:mod:`slopolicy.core.slo.windows` for the exact semantics: values older than
``window_s`` are gone, values younger than ``window_s - window_s/slices`` are
counted, and an answer covers between the two). Each slice holds one
:class:`~slopolicy.core.slo.quantiles.QuantileSketch` per metric, so quantiles
keep the sketch's relative-error bound: merging sketches loses nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.core.slo.quantiles import QuantileSketch
from slopolicy.core.slo.windows import SlidingRing
from slopolicy.errors import UsageError

__all__ = ("FOLD_AT", "Slice", "SlidingQuantiles", "SlidingSketches")


class Slice:
    """One slice of a :class:`SlidingSketches`: its sums, and per metric a
    sketch plus the values recorded since it was last read.

    Writers append checked values to :attr:`pending` (a list append, the cheap
    part of a request's bookkeeping) and call :meth:`fold` once a list reaches
    :data:`FOLD_AT` values; readers take :meth:`sketch`, which folds first, so
    memory stays bounded and every read sees every value. A metric's sketch
    is made from ``template`` when first folded or read: most slices of a
    quiet tenant's tracker never need one, and every object held is one more
    for the garbage collector to scan.
    """

    __slots__ = ("_sketches", "_template", "pending", "sums")

    def __init__(self, template: QuantileSketch, metrics: int, fields: int) -> None:
        self._template = template
        self._sketches: list[QuantileSketch | None] = [None] * metrics
        self.pending: list[list[float]] = [[] for _ in range(metrics)]
        self.sums = [0.0] * fields

    def sketch(self, metric: int) -> QuantileSketch:
        """Metric ``metric``'s sketch, holding every value recorded in the slice."""
        sketch = self._sketches[metric]
        if sketch is None:
            sketch = self._sketches[metric] = self._template.empty_like()
        values = self.pending[metric]
        if values:
            sketch.add_many(values)
            values.clear()
        return sketch

    def fold(self) -> None:
        """Move every pending value into its sketch."""
        for metric, values in enumerate(self.pending):
            if values:
                self.sketch(metric)

    def clear(self) -> None:
        """Empty every sketch and zero every sum."""
        for sketch in self._sketches:
            if sketch is not None:
                sketch.clear()
        for values in self.pending:
            values.clear()
        sums = self.sums
        for index in range(len(sums)):
            sums[index] = 0.0


#: Pending values a writer lets one of a slice's lists reach before it folds them.
FOLD_AT = 256


class SlidingSketches:
    """``metrics`` quantile sketches and ``fields`` sums per slice of a sliding window.

    Window semantics are those of :mod:`slopolicy.core.slo.windows`: values older
    than ``window_s`` are gone; values younger than ``window_s - window_s/slices``
    are counted; an answer covers between the two. Keeping several metrics in
    one ring costs one slice lookup per recorded request, not one per metric.
    A query merges the closed slices of a metric once per slice (cached: records
    only ever land in the current slice) plus the current one. Each ``now`` is
    checked by the caller (the public object this window is inside).
    """

    __slots__ = (
        "_cache",
        "_cache_epoch",
        "_piece",
        "_piece_end",
        "_ring",
        "_template",
        "alpha",
        "fields",
        "max_buckets",
        "metrics",
        "min_value",
    )

    def __init__(
        self,
        metrics: int,
        fields: int = 0,
        *,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
        max_buckets: int = 2048,
        min_value: float = 1e-9,
    ) -> None:
        self._template = QuantileSketch(alpha, max_buckets=max_buckets, min_value=min_value)
        if metrics < 0 or fields < 0:
            raise UsageError("metrics and fields must be >= 0")
        self.metrics, self.fields = metrics, fields
        self.alpha, self.max_buckets, self.min_value = alpha, max_buckets, min_value
        self._ring: SlidingRing[Slice] = SlidingRing(window_s, slices, self._slice, Slice.clear)
        self._cache: list[QuantileSketch | None] = [None] * metrics
        self._cache_epoch: int | None = None
        # The latest slice and when it ends: records before then skip the ring.
        self._piece: Slice | None = None
        self._piece_end = -math.inf

    @property
    def window_s(self) -> float:
        """Nominal window length, seconds."""
        return self._ring.window_s

    @property
    def width(self) -> float:
        """Slice width, seconds."""
        return self._ring.width

    def current(self, *, now: float) -> Slice:
        """The slice for ``now`` (monotonic seconds; earlier counts as the latest
        seen), for the caller to add to (O(1) amortized)."""
        if -math.inf < now < self._piece_end:  # the latest slice (earlier: clamped to it)
            piece = self._piece
            assert piece is not None
            return piece
        ring = self._ring
        piece = self._piece = ring.current(now=now)
        self._piece_end = (math.floor(ring.latest / ring.width) + 1) * ring.width
        return piece

    def clear(self) -> None:
        """Forget everything recorded (the slots are reused, not reallocated)."""
        self._ring.clear()
        self._cache = [None] * self.metrics
        self._cache_epoch = None
        self._piece, self._piece_end = None, -math.inf

    def sketch(self, metric: int, *, now: float) -> QuantileSketch:
        """A new sketch holding every value of ``metric`` in the window at ``now``."""
        now = self._see(now)
        epoch = self._ring.epoch(now=now)
        if self._cache_epoch != epoch:
            self._cache = [None] * self.metrics
            self._cache_epoch = epoch
        closed = self._cache[metric]
        if closed is None:
            closed = self._empty()
            for slot_epoch, piece in self._ring.live(now=now):
                if slot_epoch != epoch:
                    closed.merge(piece.sketch(metric))
            self._cache[metric] = closed
        merged = closed.copy()
        for slot_epoch, piece in self._ring.live(now=now):
            if slot_epoch == epoch:
                merged.merge(piece.sketch(metric))
        return merged

    def count(self, metric: int, *, now: float) -> int:
        """Values of ``metric`` in the window at ``now``."""
        now = self._see(now)
        return sum(piece.sketch(metric).count for _, piece in self._ring.live(now=now))

    def totals(self, *, now: float) -> list[float]:
        """Each sum over the live slices at ``now``."""
        totals = [0.0] * self.fields
        for _, piece in self._ring.live(now=self._see(now)):
            for index, value in enumerate(piece.sums):
                totals[index] += value
        return totals

    def start(self, *, now: float) -> float:
        """When the window at ``now`` begins, seconds (see :meth:`SlidingRing.start`)."""
        return self._ring.start(now=self._see(now))

    def _see(self, now: float) -> float:
        """Advance the ring to ``now`` for a read; the latest seen. A read that
        moves past the cached slice ends it (a later record must not land there)."""
        latest = self._ring.see(now=now)
        if latest >= self._piece_end:
            self._piece, self._piece_end = None, -math.inf
        return latest

    def _empty(self) -> QuantileSketch:
        return self._template.empty_like()

    def _slice(self) -> Slice:
        return Slice(self._template, self.metrics, self.fields)


class SlidingQuantiles:
    """Quantiles of one metric over the last ``window_s`` seconds, in ``slices``
    slices: a one-metric :class:`SlidingSketches` (same window semantics)."""

    __slots__ = ("_window",)

    def __init__(
        self,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
        *,
        max_buckets: int = 2048,
        min_value: float = 1e-9,
    ) -> None:
        self._window = SlidingSketches(
            1,
            window_s=window_s,
            slices=slices,
            alpha=alpha,
            max_buckets=max_buckets,
            min_value=min_value,
        )

    @property
    def window_s(self) -> float:
        """Nominal window length, seconds."""
        return self._window.window_s

    @property
    def width(self) -> float:
        """Slice width, seconds."""
        return self._window.width

    def record(self, value: float, *, now: float) -> None:
        """Record ``value`` (finite, >= 0) at ``now`` (monotonic seconds). O(1) amortized."""
        if not (value >= 0 and value <= MAX_AMOUNT):
            raise UsageError(f"a quantile sketch takes finite values >= 0, got {shown(value)}")
        check_now(now)
        self._window.current(now=now).sketch(0).add(value)

    def sketch(self, *, now: float) -> QuantileSketch:
        """A new sketch holding every value in the window at ``now``."""
        check_now(now)
        return self._window.sketch(0, now=now)

    def quantile(self, q: float, *, now: float) -> float | None:
        """The ``q`` quantile over the window (``None`` when empty)."""
        return self.sketch(now=now).quantile(q)

    def quantiles(self, qs: Sequence[float], *, now: float) -> tuple[float | None, ...]:
        """Several quantiles over the window, merging the slices once."""
        return self.sketch(now=now).quantiles(qs)

    def count(self, *, now: float) -> int:
        """Values in the window at ``now``."""
        check_now(now)
        return self._window.count(0, now=now)
