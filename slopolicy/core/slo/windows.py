"""Sliding windows over time as rings of fixed slices, with bounded memory.

A window of ``window_s`` seconds is cut into ``slices`` slices of
``width = window_s / slices`` seconds, aligned to multiples of the width:
slice ``k`` holds what was recorded at times ``t`` with
``floor(t / width) == k``. At time ``now`` (``k_now = floor(now / width)``) the
live slices are ``k_now - slices + 1 .. k_now``, so the window covers
``[(k_now - slices + 1) * width, now]``: **between** ``window_s - width`` and
``window_s`` seconds. A value older than ``window_s`` is always gone; one
younger than ``window_s - width`` is always counted; one in between may be
either, depending on where ``now`` falls in its slice. (``floor(t / width)``
is computed in floating point, so a time within rounding of a slice edge may
land on either side of it.)

Times are monotonic seconds. A ``now`` earlier than one the window has
already seen counts as the latest seen, so a late record lands in the current
slice and never revives an expired one. Memory is ``slices`` slots, each
allocated on first use.

These rings are the inside of the public windows (SLO trackers, burn windows,
sliding quantiles): each ``now`` they are given was checked once by the public
entry point (:func:`~slopolicy.core.checks.check_now`), so they do not check it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from slopolicy.errors import UsageError

__all__ = ("SlidingCounts", "SlidingRing")

T = TypeVar("T")


class SlidingRing(Generic[T]):
    """``slices`` slots of data, one per ``width``-second slice of a sliding window.

    ``factory`` makes an empty slot; ``reset`` empties a slot for reuse when
    its slice expires, so steady use allocates nothing.
    """

    __slots__ = (
        "_epochs",
        "_factory",
        "_latest",
        "_reset",
        "_slots",
        "slices",
        "width",
        "window_s",
    )

    def __init__(
        self,
        window_s: float,
        slices: int,
        factory: Callable[[], T],
        reset: Callable[[T], None],
    ) -> None:
        if not (math.isfinite(window_s) and window_s > 0) or slices < 1:
            raise UsageError(f"window_s must be > 0 and slices >= 1, got {window_s!r}, {slices!r}")
        self.window_s = float(window_s)
        self.slices = slices
        self.width = self.window_s / slices
        self._factory = factory
        self._reset = reset
        self._slots: list[T | None] = [None] * slices
        self._epochs: list[int | None] = [None] * slices
        self._latest = -math.inf

    @property
    def latest(self) -> float:
        """The latest ``now`` seen (``-inf`` before any)."""
        return self._latest

    def clear(self) -> None:
        """Forget every slice and the latest ``now``; the slots are kept, and
        emptied when next used (so reuse allocates nothing)."""
        self._epochs = [None] * self.slices
        self._latest = -math.inf

    def see(self, *, now: float) -> float:
        """Advance to ``now`` (checked) and return the effective time (the latest seen)."""
        if now > self._latest:
            self._latest = now
        return self._latest

    def epoch(self, *, now: float) -> int:
        """The slice index of ``now`` (after clamping to the latest seen)."""
        return math.floor(self.see(now=now) / self.width)

    def current(self, *, now: float) -> T:
        """The slot for ``now``'s slice, emptied first if it held an expired slice."""
        # Inlined see() and epoch(): this runs several times per recorded request.
        latest = self._latest
        if now > latest:
            self._latest = latest = now
        epoch = math.floor(latest / self.width)
        index = epoch % self.slices
        slot = self._slots[index]
        if slot is None:
            slot = self._factory()
            self._slots[index] = slot
        elif self._epochs[index] != epoch:
            self._reset(slot)
        self._epochs[index] = epoch
        return slot

    def live(self, *, now: float) -> Iterator[tuple[int, T]]:
        """``(epoch, slot)`` for each live slice at ``now``, oldest first."""
        current = self.epoch(now=now)
        oldest = current - self.slices + 1
        found = [
            (epoch, slot)
            for epoch, slot in zip(self._epochs, self._slots, strict=True)
            if slot is not None and epoch is not None and oldest <= epoch <= current
        ]
        found.sort(key=lambda pair: pair[0])
        return iter(found)

    def start(self, *, now: float) -> float:
        """When the window at ``now`` begins: the start of its oldest live slice (seconds)."""
        return (self.epoch(now=now) - self.slices + 1) * self.width


class SlidingCounts:
    """Sums of ``fields`` numbers over a sliding window (see the module doc).

    Counts are kept as floats, exact up to 2**53. Sums over the window are
    computed when asked from the live slices, so nothing drifts.
    """

    __slots__ = ("_ring", "fields")

    def __init__(self, window_s: float, slices: int, fields: int) -> None:
        if fields < 1:
            raise UsageError(f"fields must be >= 1, got {fields!r}")
        self.fields = fields
        self._ring: SlidingRing[list[float]] = SlidingRing(
            window_s, slices, lambda: [0.0] * fields, _zero
        )

    @property
    def window_s(self) -> float:
        """Nominal window length, seconds."""
        return self._ring.window_s

    @property
    def width(self) -> float:
        """Slice width, seconds."""
        return self._ring.width

    @property
    def latest(self) -> float:
        """The latest ``now`` seen (``-inf`` before any)."""
        return self._ring.latest

    def bucket(self, *, now: float) -> list[float]:
        """The current slice's sums, for the caller to add to in place (O(1) amortized)."""
        return self._ring.current(now=now)

    def add(self, *, now: float, field: int, amount: float = 1.0) -> None:
        """Add ``amount`` to ``field`` at time ``now``."""
        self._ring.current(now=now)[field] += amount

    def totals(self, *, now: float) -> list[float]:
        """Each field summed over the live slices at ``now``."""
        sums = [0.0] * self.fields
        for _, values in self._ring.live(now=now):
            for index, value in enumerate(values):
                sums[index] += value
        return sums

    def start(self, *, now: float) -> float:
        """When the window at ``now`` begins, seconds (see :meth:`SlidingRing.start`)."""
        return self._ring.start(now=now)


def _zero(values: list[float]) -> None:
    for index in range(len(values)):
        values[index] = 0.0
