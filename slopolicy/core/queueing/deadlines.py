"""When queued requests expire, and how long each lane's oldest has waited.

A request's deadline is the earlier of its lane's wait bound (arrival +
``max_queue_wait``) and its own. The policy's ``now`` never goes back, so
lane-bound deadlines come in arrival order: one FIFO per lane holds them,
in O(1) per request, and its head is also the lane's oldest waiting request.
Only a request whose own deadline is earlier than its lane's also goes on a
heap. Requests leave lazily: whatever is no longer queued is dropped when it
reaches a head, and a FIFO or the heap is rebuilt once it has doubled since
its last rebuild, so those left behind a waiting head cost amortized O(1).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable

from slopolicy.core.lifecycle import Entry, Phase

__all__ = ("Deadlines",)


class _Fifo:
    """A lane's queued entries in arrival order (lazily pruned)."""

    __slots__ = ("entries", "rebuild_at")

    def __init__(self, rebuild_at: int) -> None:
        self.entries: deque[Entry] = deque()
        self.rebuild_at = rebuild_at

    def head(self) -> Entry | None:
        entries = self.entries
        while entries:
            entry = entries[0]
            if entry.phase is Phase.QUEUED:
                return entry
            entries.popleft()
        return None


class Deadlines:
    """Queued entries by deadline, and each lane's oldest, for one policy.

    ``lanes`` are the lane names; :meth:`add` takes an entry as it is queued
    (with its ``deadline`` and ``arrival`` set, ``arrival`` never earlier than
    a previous entry's) and ``lane_deadline``, its lane's bound for it. A FIFO
    or the heap holds at most ``max(min_rebuild, 2 x`` the most entries it
    had queued at once ``)``.
    """

    __slots__ = ("_fifos", "_heap", "_heap_rebuild_at", "_min_rebuild", "_sequence", "floor")

    def __init__(self, lanes: Iterable[str], *, min_rebuild: int = 64) -> None:
        #: At most the earliest queued deadline (``inf``: none queued): nothing
        #: is overdue before it. Exact after :meth:`pop_overdue` finds none.
        self.floor = math.inf
        self._min_rebuild = min_rebuild
        self._fifos = {lane: _Fifo(min_rebuild) for lane in lanes}
        self._heap: list[tuple[float, int, Entry]] = []
        self._heap_rebuild_at = min_rebuild
        self._sequence = itertools.count()

    def add(self, entry: Entry, lane_deadline: float) -> None:
        """Index a newly queued ``entry``."""
        fifo = self._fifos[entry.lane]
        entries = fifo.entries
        if entries and entries[0].phase is not Phase.QUEUED:
            fifo.head()  # drops what left from the front, read or not
        if len(entries) >= fifo.rebuild_at:
            fifo.entries = entries = deque(e for e in entries if e.phase is Phase.QUEUED)
            fifo.rebuild_at = max(self._min_rebuild, 2 * len(entries))
        entries.append(entry)
        if entry.deadline < self.floor:
            self.floor = entry.deadline
        if entry.deadline < lane_deadline:  # its own deadline comes first
            heap = self._heap
            if len(heap) >= self._heap_rebuild_at:
                self._heap = heap = [item for item in heap if item[2].phase is Phase.QUEUED]
                heapq.heapify(heap)
                self._heap_rebuild_at = max(self._min_rebuild, 2 * len(heap))
            heapq.heappush(heap, (entry.deadline, next(self._sequence), entry))

    def oldest(self, lane: str) -> Entry | None:
        """``lane``'s longest-waiting queued entry, or ``None``."""
        return self._fifos[lane].head()

    def next(self) -> float | None:
        """The earliest deadline among queued entries, or ``None``."""
        entry = self._earliest()
        return None if entry is None else entry.deadline

    def pop_overdue(self, *, now: float) -> Entry | None:
        """The queued entry with the earliest deadline, if it is at or before
        ``now``, taken out of the index (the caller ends it); else ``None``."""
        entry = self._earliest()
        if entry is None or entry.deadline > now:
            self.floor = math.inf if entry is None else entry.deadline
            return None
        fifo = self._fifos[entry.lane]
        if fifo.entries and fifo.entries[0] is entry:
            fifo.entries.popleft()
        else:  # from the heap; its FIFO drops it once it is no longer queued
            heapq.heappop(self._heap)
        return entry

    def _earliest(self) -> Entry | None:
        heap = self._heap
        while heap and heap[0][2].phase is not Phase.QUEUED:
            heapq.heappop(heap)
        best = heap[0][2] if heap else None
        for fifo in self._fifos.values():
            head = fifo.head()
            # Ties go to the heap (its entry's own deadline), then lane order.
            if head is not None and (best is None or head.deadline < best.deadline):
                best = head
        return best
