"""What the live reservations of a KV ledger will hold from now on.

The peak check's view of :class:`~slopolicy.core.kv.ledger.KVReservation`, in
tokens: a whole reservation holds its blocks for good; a started one holds
its context now and grows by a token a step per sequence until its forecast
end, when it frees them all. Reservations are grouped by lane where the lane
has a floor, the rest together (the shared pool only).

A lane with a floor is protected, and its requests are a stream: when its
running requests end, its next arrivals take their place. So a request of
another lane, which may hold its KV long after those ends, is checked as if
the protected lane kept, for good, what its running requests are forecast
to reach (its floor at least): the protected lane's room is what it uses,
not only the fixed fraction. Requests of the candidate's own lane and of
the lanes without a floor are counted by when they end. This binds only
while the protected lane holds a large share of the pool: when it is quiet
the other lanes have everything outside its floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from slopolicy.core.checks import is_number, shown
from slopolicy.core.kv.peak import Running, over_floors, peak_of, started, worst_over_time
from slopolicy.errors import UsageError

__all__ = ("FutureUse", "Reservation", "check_name", "floors_of")


class Reservation:
    """One live reservation; ``unseen`` of its ``blocks`` (held now) were added in
    ``epoch``. A started one (``rate > 0``) holds ``held`` tokens now, grows by
    ``rate`` a step and ends in ``steps`` steps; a whole one holds ``blocks``
    for good."""

    __slots__ = (
        "blocks",
        "counted",
        "epoch",
        "group",
        "held",
        "id",
        "lane",
        "rate",
        "steps",
        "unseen",
    )

    def __init__(
        self, request_id: str, lane: str, group: str | None, blocks: int, epoch: int
    ) -> None:
        self.id = request_id
        self.lane = lane
        self.group = group
        self.blocks = blocks
        self.epoch = epoch
        self.unseen = blocks
        self.held = 0
        self.rate = 0
        self.steps = 0
        self.counted = 0  # its peak, as the view counted it when added

    def peak(self, block_size: int) -> int:
        """The most tokens it is forecast to hold (its partial blocks padded)."""
        if not self.rate:
            return self.blocks * block_size
        return peak_of(self.running(block_size))

    def running(self, block_size: int) -> Running:
        """It for :func:`~slopolicy.core.kv.peak.worst_over_time` (started ones only)."""
        return started(self.steps, self.group, self.held, self.rate, block_size)


class FutureUse:
    """The live reservations' use of the pool from now on (see the module).

    ``floors`` are the lanes' floors in blocks (lanes with 0 count as having
    none). Keeps, by group: what whole reservations hold, the sum of every
    reservation's own peak (an upper bound of the peak, O(1) to keep: while it
    fits, nothing need be sorted), and the started reservations, sorted by
    steps left when asked (again only after one changed).
    """

    __slots__ = ("_constant", "_floors", "_order", "_peaks", "_started", "block_size")

    def __init__(self, floors: Mapping[str, int], block_size: int) -> None:
        self.block_size = block_size
        self._floors = {lane: floor * block_size for lane, floor in floors.items() if floor}
        self._constant: dict[str | None, int] = {}
        self._peaks: dict[str | None, int] = {}
        self._started: dict[str, Reservation] = {}
        self._order: list[Running] | None = []

    def group(self, lane: str) -> str | None:
        """``lane``'s group: itself where it has a floor, else ``None``."""
        return lane if lane in self._floors else None

    def add(self, entry: Reservation) -> None:
        """Count ``entry`` as it is now."""
        self._shape(entry, 1)

    def remove(self, entry: Reservation) -> None:
        """Stop counting ``entry`` (as it was when added)."""
        self._shape(entry, -1)

    def admits(
        self,
        lane: str,
        whole: int,
        running: Running | None,
        without: Reservation | None,
        budget: int,
    ) -> bool:
        """Whether adding ``whole`` tokens held for good and a started request
        ``running`` to ``lane``, with ``without`` left out, keeps what the lanes
        take from the shared pool within ``budget`` tokens at every step (until
        ``running`` ends, when given: a later peak is not its to fit; see
        :func:`~slopolicy.core.kv.peak.worst_over_time`)."""
        size, floors = self.block_size, self._floors
        group = self.group(lane)
        peaks = dict(self._peaks)
        if without is not None:
            peaks[without.group] -= without.counted
        added = whole if running is None else whole + peak_of(running)
        peaks[group] = peaks.get(group, 0) + added
        if over_floors(peaks, {}, 0, floors, group) <= budget:
            return True  # even the sum of every peak fits
        if running is None and not self._started:
            return False  # all held for good: the sum was the peak
        constant = dict(self._constant)
        if without is not None and not without.rate:
            constant[without.group] -= without.blocks * size
        constant[group] = constant.get(group, 0) + whole
        order = self._seen_by(
            group, constant, self._sorted(without if without is not None and without.rate else None)
        )
        until = None
        if running is not None:
            order = [*order, running]
            order.sort(key=_steps, reverse=True)  # one new element: one pass
            until = running[0]  # what comes after its end is not its to fit
        return worst_over_time(order, constant, floors, group, until=until) <= budget

    def worst(self, group: str | None) -> int:
        """The most the lanes take from the shared pool at any step, as counted
        for a request of ``group`` (tokens)."""
        constant = dict(self._constant)
        order = self._seen_by(group, constant, self._sorted(None))
        return worst_over_time(order, constant, self._floors, group)

    @staticmethod
    def _seen_by(
        group: str | None, constant: dict[str | None, int], order: list[Running]
    ) -> list[Running]:
        """``order`` as a request of ``group`` counts it: the started requests of
        the *other* protected lanes move into ``constant`` at their peak (see
        the module); the rest is returned, still sorted."""
        kept: list[Running] = []
        for one in order:
            owner = one[1]
            if owner is None or owner == group:
                kept.append(one)
            else:
                constant[owner] = constant.get(owner, 0) + peak_of(one)
        return kept

    def peak(self) -> int:
        """The most tokens the live reservations hold at once from now on: the
        lowest of the upper bounds :meth:`admits` admits by, the sum of every
        reservation's own peak and, for a request of each group, the
        step-by-step timeline (each sequence's partial block padded) with the
        other protected lanes at their peaks; and the timeline of them all."""
        flat = dict.fromkeys(self._floors, 0)  # every lane counted whole
        order = self._sorted(None)
        held = sum(self._constant.values())
        bounds = [sum(self._peaks.values()), worst_over_time(order, {None: held}, flat, None)]
        for group in (None, *self._floors) if self._floors else ():
            constant = dict(self._constant)
            rest = self._seen_by(group, constant, order)
            bounds.append(worst_over_time(rest, {None: sum(constant.values())}, flat, None))
        return min(bounds)

    def _sorted(self, without: Reservation | None) -> list[Running]:
        """The started reservations by steps left, descending (``without`` left out)."""
        size = self.block_size
        if without is not None:
            left = (entry for entry in self._started.values() if entry is not without)
            return sorted((entry.running(size) for entry in left), key=_steps, reverse=True)
        order = self._order
        if order is None:
            order = [entry.running(size) for entry in self._started.values()]
            order.sort(key=_steps, reverse=True)
            self._order = order
        return order

    def _shape(self, entry: Reservation, sign: int) -> None:
        group, size = entry.group, self.block_size
        if sign > 0:
            entry.counted = entry.peak(size)
        self._peaks[group] = self._peaks.get(group, 0) + sign * entry.counted
        if entry.rate:
            self._order = None
            if sign > 0:
                self._started[entry.id] = entry
            else:
                del self._started[entry.id]
        else:
            self._constant[group] = self._constant.get(group, 0) + sign * entry.blocks * size


def _steps(running: Running) -> int:
    return running[0]


def floors_of(reserves: Mapping[str, float], num_blocks: int) -> dict[str, int]:
    """Each lane's floor in blocks, ``floor(fraction x num_blocks)``, from the
    fractions of ``reserves`` (checked: each in [0, 1), summing below 1)."""
    # Decimal of the float's repr keeps the fraction the user wrote: 0.29 of 100
    # blocks is 29 (not 28.999...), and 0.7 + 0.2 + 0.1 sums to exactly 1.
    exact: dict[str, Decimal] = {}
    for lane, fraction in reserves.items():
        check_name("lane", lane)
        if not (is_number(fraction) and 0.0 <= fraction < 1.0):
            raise UsageError(f"reserve of lane {lane!r} must be in [0, 1), got {shown(fraction)}")
        exact[lane] = Decimal(repr(float(fraction)))
    if sum(exact.values(), Decimal(0)) >= 1:
        raise UsageError(f"KV reserves must sum below 1, got {dict(reserves)!r}")
    return {lane: math.floor(value * num_blocks) for lane, value in exact.items()}


def check_name(name: str, value: object) -> None:
    """Raise :class:`UsageError` unless ``value`` (a lane or request id) is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{name} must be a non-empty string, got {shown(value)}")
