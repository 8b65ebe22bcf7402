"""The engine's waiting queue: FCFS, or by ``(priority, arrival)`` like vLLM."""

from __future__ import annotations

import heapq
from collections import deque

from slopolicy.sim._decode import Seq

__all__ = ("WaitingQueue",)


class WaitingQueue:
    """Requests waiting to start. ``priority`` orders by ``(priority, order)``
    (lower first); otherwise first come, first served. A preempted request
    goes back in front of those that arrived after it."""

    __slots__ = ("_fifo", "_heap", "priority")

    def __init__(self, *, priority: bool) -> None:
        self.priority = priority
        self._fifo: deque[Seq] = deque()
        self._heap: list[tuple[int, int, Seq]] = []

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._fifo)

    def add(self, seq: Seq) -> None:
        """Queue a new request (at the back, or by priority)."""
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._fifo.append(seq)

    def put_back(self, seq: Seq) -> None:
        """Queue a preempted request: first under FCFS, by priority otherwise."""
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._fifo.appendleft(seq)

    def head(self) -> Seq | None:
        """The next request to start, if any."""
        if self.priority:
            return self._heap[0][2] if self._heap else None
        return self._fifo[0] if self._fifo else None

    def pop(self) -> Seq:
        """Remove and return :meth:`head` (which must exist)."""
        return heapq.heappop(self._heap)[2] if self.priority else self._fifo.popleft()

    def seqs(self) -> list[Seq]:
        """Every waiting request, in no particular order."""
        return [entry[2] for entry in self._heap] if self.priority else list(self._fifo)
