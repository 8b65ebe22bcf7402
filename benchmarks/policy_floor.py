"""A floor for ``bench_policy``: the least work one request's lifecycle needs,
written inline with plain dicts, a heap and deques.

Per request: route by cost (``prompt + 2 x max_new_tokens``), a token bucket
and an in-flight count per tenant, Virtual Token Counter order over tenant
FIFOs, a KV block ledger, and one SLO window (a count and three log-bucketed
sketches). Nothing a product needs beyond that: no explanations, no limit
that refuses, no eviction, no deadlines, no per-tenant SLO, no argument
checks, no records handed back. It times what CPython charges for the bare
bookkeeping, so the Policy's row can be read against it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

__all__ = ("FloorPolicy",)

_Item = tuple[str, str, int, int, int, float]  # id, tenant, prompt, max_new, cost, arrival


class FloorPolicy:
    """submit / dispatch / finish with the floor's bookkeeping (see the module doc)."""

    def __init__(self, rate: float = 1e12, block_size: int = 16) -> None:
        self._rate = rate
        self._block_size = block_size
        self._buckets: dict[str, list[float]] = {}  # tenant -> [level, last]
        self._in_flight: dict[str, int] = {}
        self._fifos: dict[str, deque[_Item]] = {}
        self._counters: dict[str, float] = {}
        self._ready: list[tuple[float, str]] = []
        self._kv: dict[str, int] = {}
        self._kv_used = 0
        self._running: dict[str, tuple[_Item, float]] = {}
        self._completed = 0
        self._sketches: tuple[dict[int, int], ...] = ({}, {}, {})

    def submit(self, request_id: str, tenant: str, prompt: int, max_new: int, now: float) -> bool:
        cost = prompt + 2 * max_new
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = [self._rate, now]
        level = min(self._rate, bucket[0] + self._rate * (now - bucket[1]))
        if cost > level:
            return False
        bucket[0], bucket[1] = level - cost, now
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
        fifo = self._fifos.get(tenant)
        if fifo is None:
            fifo = self._fifos[tenant] = deque()
        if not fifo:
            heapq.heappush(self._ready, (self._counters.get(tenant, 0.0), tenant))
        fifo.append((request_id, tenant, prompt, max_new, cost, now))
        return True

    def dispatch(self, now: float) -> str:
        counter, tenant = heapq.heappop(self._ready)
        fifo = self._fifos[tenant]
        item = fifo.popleft()
        blocks = -(-(item[2] + item[3]) // self._block_size)
        self._kv_used += blocks
        self._kv[item[0]] = blocks
        counter += item[2]
        self._counters[tenant] = counter
        if fifo:
            heapq.heappush(self._ready, (counter, tenant))
        self._running[item[0]] = (item, now)
        return item[0]

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        item, started = self._running.pop(request_id)
        self._kv_used -= self._kv.pop(request_id)
        tenant = item[1]
        self._buckets[tenant][0] += item[4] - (item[2] + 2 * output_tokens)
        self._in_flight[tenant] -= 1
        self._counters[tenant] = self._counters.get(tenant, 0.0) + 2 * output_tokens
        self._completed += 1
        values = (started - item[5], now - item[5], float(item[2]))
        for sketch, value in zip(self._sketches, values, strict=True):
            key = math.ceil(math.log(value) / 0.02) if value > 1e-9 else 0
            sketch[key] = sketch.get(key, 0) + 1
