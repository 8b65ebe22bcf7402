"""A tenant's backlog in a :class:`~slopolicy.core.fairqueue.FairQueue`, and
which tenant a full queue takes room from (DESIGN.md invariant 9).

Give a tenant's ``k``-th waiting item the *place* ``k / w`` (``w`` its weight).
A full queue keeps the items at the earliest places: an arrival whose place
``(n_a + 1) / w_a`` comes before the latest place held, ``n_m / w_m`` (the
tenant ``m`` with the most items waiting per unit weight), pushes out ``m``'s
newest item; an arrival at that place or later (ties included: no churn) is
refused. So a full queue holds the weighted max-min fair share of its slots,
and a tenant flooding it cannot lower another's share: with ``C`` slots and
``W`` the total weight of the tenants sending, tenant ``i`` is refused only
while it holds at least ``floor(C * w_i / W)`` items, and pushing out never
takes it below that.

Places count requests, not cost: the capacity is in requests, and places by
cost would let a flood of small requests push out a tenant's one large
request. Cost is the dispatcher's to share (virtual token counters).

:class:`Places` finds ``m``: a max-heap of places with lazy invalidation.
A tenant is listed at a place at least its current one (a new entry only when
its place grows past the listed one); an entry found stale at the top is
relisted at the tenant's current place. A queue builds it when it is first
full and drops it once empty, so queues that never fill pay nothing.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, TypeAlias, TypeVar

__all__ = ("Places",)

T = TypeVar("T")

# The heap is rebuilt once stale entries outnumber live tenants by this much.
_SLACK = 64


class _Tenant(Generic[T]):
    """One tenant's counter, weight and backlog.

    The backlog is a FIFO of ``(key, push number, item)`` in arrival order,
    ``items`` (a full queue pushes out the newest), and, once a key smaller
    than one before it arrives, a heap of the same entries in service order,
    ``order`` (``None`` while the FIFO is in service order: with equal keys,
    always). Both are pruned lazily: an entry is live while the queue's
    ``where`` map names its push number. ``last`` is the largest key pushed
    since the tenant joined; ``key`` is at most its first key in service
    order, the key in its pick entry (see :mod:`slopolicy.core.queueing.fairqueue`).

    ``stamp`` names the tenant's one valid heap entry (in the ready heap while
    backlogged, in the idle heap otherwise); older entries are stale.
    ``pick_stamp`` names its one valid entry in the queue's pick heaps (while
    backlogged), listed at ``behind`` (its last push's flag) and ``key``.
    ``place_stamp`` names its entry in the queue's :class:`Places` (-1: none),
    listed at ``place``.
    """

    __slots__ = (
        "behind",
        "counter",
        "items",
        "joined",
        "key",
        "last",
        "live",
        "name",
        "order",
        "pick_stamp",
        "place",
        "place_stamp",
        "stamp",
        "weight",
    )

    def __init__(self, name: str, counter: float, weight: float) -> None:
        self.name = name
        self.counter = counter
        self.weight = weight
        self.items: deque[Entry[T]] = deque()
        self.order: list[Entry[T]] | None = None
        self.last = -math.inf
        self.live = 0  # items waiting
        self.joined = 0  # when it last became backlogged: the tie-break
        self.key = 0.0
        self.behind = False  # pushed last as over its share: goes after those not
        self.stamp = -1
        self.pick_stamp = -1
        self.place = 0.0
        self.place_stamp = -1

    def add(self, entry: Entry[T], where: Where[T]) -> None:
        """Queue ``entry``, already in ``where``."""
        self.items.append(entry)
        self.live += 1
        if self.order is not None:
            heapq.heappush(self.order, entry)
        elif entry[0] >= self.last:  # the FIFO stays in service order
            self.last = entry[0]
        else:  # once per backlogged spell: amortized O(1) per entry
            self.order = [e for e in self.items if _alive(where, e)]
            heapq.heapify(self.order)

    def first(self, where: Where[T]) -> Entry[T]:
        """The entry served next; drops dead ones before it."""
        order = self.order
        if order is None:
            items = self.items
            while not _alive(where, items[0]):
                items.popleft()
            return items[0]
        while not _alive(where, order[0]):
            heapq.heappop(order)
        return order[0]

    def newest(self, where: Where[T]) -> T:
        """The item that arrived last; drops dead ones after it."""
        items = self.items
        while not _alive(where, items[-1]):
            items.pop()
        return items[-1][2]

    def served(self, where: Where[T]) -> None:
        """:meth:`first`'s entry has left ``where`` and others wait: take it off."""
        items, order = self.items, self.order
        if order is None:
            items.popleft()
            return
        heapq.heappop(order)
        while not _alive(where, items[0]):  # in arrival order it may be first too
            items.popleft()
        self.prune(where)

    def prune(self, where: Where[T]) -> None:
        """Rebuild the FIFO or the heap once dead entries outnumber live ones
        by ``_SLACK``: amortized ``O(1)`` per entry, memory ``O(live)``."""
        limit = 2 * self.live + _SLACK
        if len(self.items) > limit:
            self.items = deque(e for e in self.items if _alive(where, e))
        if self.order is not None and len(self.order) > limit:
            self.order = [e for e in self.order if _alive(where, e)]
            heapq.heapify(self.order)

    def clear(self) -> None:
        """Nothing waits any more: the next spell starts in arrival order."""
        self.items.clear()
        self.order = None
        self.last = -math.inf


#: A waiting item's entry: ``(key, push number, item)``.
Entry: TypeAlias = tuple[float, int, T]

#: ``id(item) -> (tenant, push number)`` for each waiting item: the queue's
#: index of what is live. The tenant's FIFO holds the item, so its id cannot be
#: reused while the entry exists.
Where: TypeAlias = dict[int, tuple[_Tenant[T], int]]


def _alive(where: Where[T], entry: Entry[T]) -> bool:
    found = where.get(id(entry[2]))
    return found is not None and found[1] == entry[1]


class Places(Generic[T]):
    """Backlogged tenants by the place of their newest item, latest first.

    ``stamps`` must only grow for the life of the records (a queue's own
    sequence): a record may outlive one :class:`Places`, and its stamp from
    an older one (below ``_first``) counts as not listed in this one.
    """

    __slots__ = ("_first", "_heap", "_stamps")

    def __init__(self, records: Iterable[_Tenant[T]], stamps: Iterator[int]) -> None:
        self._stamps = stamps
        self._first = next(stamps)
        self._heap: list[tuple[float, int, _Tenant[T]]] = []
        for record in records:
            self._heap.append(self._entry(record))
        heapq.heapify(self._heap)

    def grew(self, record: _Tenant[T], backlogged: int) -> None:
        """``record`` has one more item waiting (or a new weight); ``backlogged``
        tenants have items waiting."""
        if record.place_stamp < self._first or record.live / record.weight > record.place:
            heap = self._heap
            heapq.heappush(heap, self._entry(record))
            if len(heap) > 2 * backlogged + _SLACK:
                self._heap = heap = [entry for entry in heap if self._kept(entry)]
                heapq.heapify(heap)

    def latest(self) -> _Tenant[T] | None:
        """The tenant whose newest item has the latest place (``None``: none waits)."""
        heap = self._heap
        while heap:
            _, stamp, record = heap[0]
            if record.place_stamp != stamp:  # relisted since
                heapq.heappop(heap)
            elif not record.live:  # nothing waits: unlisted until it grows again
                record.place_stamp = -1
                heapq.heappop(heap)
            elif record.live / record.weight == record.place:
                return record
            else:  # its place fell (an item left): relist it where it is now
                heapq.heapreplace(heap, self._entry(record))
        return None

    def _entry(self, record: _Tenant[T]) -> tuple[float, int, _Tenant[T]]:
        record.place = record.live / record.weight
        record.place_stamp = stamp = next(self._stamps)
        return (-record.place, stamp, record)

    @staticmethod
    def _kept(entry: tuple[float, int, _Tenant[T]]) -> bool:
        """Whether a rebuild keeps ``entry``: its tenant's own, with items
        waiting. A tenant with none whose entry goes is no longer listed."""
        record = entry[2]
        if record.place_stamp != entry[1]:
            return False
        if not record.live:
            record.place_stamp = -1
            return False
        return True
