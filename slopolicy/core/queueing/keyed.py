"""The pick of a :class:`~slopolicy.core.queueing.fairqueue.FairQueue` once
keys differ or a tenant is pushed *behind*: among the backlogged tenants whose
counter is at most ``V + s`` (*eligible*), the tenants not behind first, then
the one whose first item has the smallest key (ties: the smaller counter, then
the tenant backlogged first).

Two heaps of backlogged tenants, each tenant with one valid entry in one of
them (named by its ``pick_stamp``; older entries are stale, dropped lazily):
*eligible*, by ``(behind, key, counter, joined)``, and *parked*, by counter,
for tenants found above ``V + s`` at the top of eligible. An entry holds the
tenant's flag, its counter and ``record.key``, at most the key of its first
item: a tenant is relisted when its counter or flag changes or an item with a
smaller key arrives, while a first key that rises (its first item left) is
fixed when the entry reaches the top.

A pick first moves the parked at or under ``V + s`` back to eligible (``V``
only rises, so each park is undone at most once), then looks at the top of
eligible: a stale entry is dropped, a tenant above ``V + s`` is parked, one
whose first key rose is relisted at its key, and the first that is none of
these is the pick. It is the right one: every eligible tenant has an entry in
that heap at its flag and a key no larger than its own first key. So each
operation costs ``O(log n)`` amortized (``n`` backlogged tenants): a tenant
moves only when its counter, flag or first key changes, or to be parked and
back once per change.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from slopolicy.core.queueing.backlog import Where, _Tenant

__all__ = ("KeyedPick",)

T = TypeVar("T")

# A heap is rebuilt once stale entries outnumber backlogged tenants by this much.
_SLACK = 64


class KeyedPick(Generic[T]):
    """The eligible and parked heaps of one queue.

    Args:
        records: the backlogged tenants, each with its ``key`` set.
        slack: ``s``, cost units per unit weight (checked by the queue).
        stamps: the queue's own sequence, shared with its other stamps.
    """

    __slots__ = ("_eligible", "_parked", "_slack", "_stamps")

    def __init__(self, records: Iterable[_Tenant[T]], slack: float, stamps: Iterator[int]) -> None:
        self._slack = slack
        self._stamps = stamps
        # behind, key, counter, joined, stamp
        self._eligible: list[tuple[bool, float, float, int, int, _Tenant[T]]] = []
        self._parked: list[tuple[float, int, int, _Tenant[T]]] = []  # counter, joined, stamp
        for record in records:
            record.pick_stamp = stamp = next(stamps)
            entry = (record.behind, record.key, record.counter, record.joined, stamp, record)
            self._eligible.append(entry)
        heapq.heapify(self._eligible)

    def index(self, record: _Tenant[T], backlogged: int) -> None:
        """(Re)list a backlogged ``record`` as eligible at its flag,
        ``record.key`` and its counter; ``backlogged`` tenants have items waiting."""
        record.pick_stamp = stamp = next(self._stamps)
        entry = (record.behind, record.key, record.counter, record.joined, stamp, record)
        heapq.heappush(self._eligible, entry)
        limit = 2 * backlogged + _SLACK
        if len(self._eligible) > limit:
            self._eligible = [e for e in self._eligible if e[5].pick_stamp == e[4] and e[5].live]
            heapq.heapify(self._eligible)
        if len(self._parked) > limit:
            self._parked = [e for e in self._parked if e[3].pick_stamp == e[2] and e[3].live]
            heapq.heapify(self._parked)

    def pick(self, low: _Tenant[T], where: Where[T]) -> _Tenant[T]:
        """The tenant served next, ``low`` being the backlogged tenant with the
        smallest counter (``V``); its first entry is left current."""
        limit = low.counter + self._slack
        eligible, parked = self._eligible, self._parked
        while parked:  # back from the parked: V has risen to them
            counter, joined, stamp, record = parked[0]
            if record.pick_stamp != stamp or not record.live:
                heapq.heappop(parked)
            elif counter <= limit:
                heapq.heappop(parked)
                heapq.heappush(
                    eligible, (record.behind, record.key, counter, joined, stamp, record)
                )
            else:
                break
        # Never empties: low, at V, is listed here (or was just moved back).
        while True:
            behind, key, counter, joined, stamp, record = eligible[0]
            if record.pick_stamp != stamp or not record.live:
                heapq.heappop(eligible)
            elif counter > limit:
                heapq.heappop(eligible)
                heapq.heappush(parked, (counter, joined, stamp, record))
            elif (first := record.first(where)[0]) != key:  # its first key rose
                record.key = first
                heapq.heapreplace(eligible, (behind, first, counter, joined, stamp, record))
            else:
                return record
