"""The engine's waiting queue: FCFS, or by ``(priority, arrival)`` like vLLM,
and the KV blocks and tokens its requests will need to start."""

from __future__ import annotations

import heapq
from collections import deque

from slopolicy.sim._decode import Seq

__all__ = ("WaitingQueue", "prompt_blocks")


def prompt_blocks(tokens: int, block_size: int) -> int:
    """KV blocks ``tokens`` prompt tokens and the first output token take."""
    return -(-(tokens + 1) // block_size)


class WaitingQueue:
    """Requests waiting to start. ``priority`` orders by ``(priority, order)``
    (lower first); otherwise first come, first served. A preempted request
    goes back in front of those that arrived after it. ``blocks`` counts
    every waiting prompt's KV blocks (and its first token's) in
    ``block_size``-token blocks, ``tokens`` every waiting request's tokens to
    prefill."""

    __slots__ = ("_fifo", "_heap", "_size", "blocks", "priority", "tokens")

    def __init__(self, block_size: int, *, priority: bool) -> None:
        self.priority = priority
        self._size = block_size
        self._fifo: deque[Seq] = deque()
        self._heap: list[tuple[int, int, Seq]] = []
        self.blocks = 0
        self.tokens = 0

    def _count(self, seq: Seq, sign: int) -> None:
        self.blocks += sign * prompt_blocks(seq.prefill_len, self._size)
        self.tokens += sign * seq.prefill_len

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._fifo)

    def add(self, seq: Seq) -> None:
        """Queue a new request (at the back, or by priority)."""
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._fifo.append(seq)
        self._count(seq, 1)

    def put_back(self, seq: Seq) -> None:
        """Queue a preempted request: first under FCFS, by priority otherwise."""
        if self.priority:
            heapq.heappush(self._heap, (seq.priority, seq.order, seq))
        else:
            self._fifo.appendleft(seq)
        self._count(seq, 1)

    def head(self) -> Seq | None:
        """The next request to start, if any."""
        if self.priority:
            return self._heap[0][2] if self._heap else None
        return self._fifo[0] if self._fifo else None

    def pop(self) -> Seq:
        """Remove and return :meth:`head` (which must exist)."""
        seq = heapq.heappop(self._heap)[2] if self.priority else self._fifo.popleft()
        self._count(seq, -1)
        return seq

    def remove(self, seq: Seq) -> None:
        """Take ``seq``, which waits, out of the queue (aborted)."""
        if self.priority:
            self._heap = [entry for entry in self._heap if entry[2] is not seq]
            heapq.heapify(self._heap)
        else:
            self._fifo.remove(seq)
        self._count(seq, -1)

    def seqs(self) -> list[Seq]:
        """Every waiting request, in no particular order."""
        return [entry[2] for entry in self._heap] if self.priority else list(self._fifo)
