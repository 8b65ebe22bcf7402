"""Drain and load scenarios for ``bench_gate``.

The drain: 10,000 waiters, costs 1 and 99 mixed at random, all arriving at
once in order (timed from the moment all tasks exist, before any has run),
served at ``rate`` cost units per second. Rate limiters
(aiolimiter, pyrate-limiter) take the cost as the permit's weight, with a
burst of 1% of a second's rate, and so does the Gate paced by
``engine.dispatch_rate``. The slot runners (the Gate and
``anyio.CapacityLimiter``) limit concurrency instead: ``CONCURRENCY`` slots,
each request holding its slot for ``cost * CONCURRENCY / rate`` seconds, which
is the same rate once the slots are busy. Wall time runs until every task is
done; a request is *served* when its acquire returns.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from slopolicy import Admit, Decision, Finished, Gate, Outcome, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.lifecycle import Dispatch, Started
from slopolicy.testing.load import LoadReport, load_config, run_load

__all__ = (
    "CONCURRENCY",
    "DRAIN_RUNNERS",
    "DrainResult",
    "NullPolicy",
    "bench_policy",
    "drain_costs",
    "run_full_load",
)

CONCURRENCY = 256


def bench_policy(max_running: int, queued: int = 20_000) -> Policy:
    """One lane, no limits that bind, no ladder: only the work every request does."""
    return Policy(_bench_config(max_running, queued), counter=HeuristicCounter())


class NullPolicy(Policy):
    """Starts requests first come, first served, and keeps no books: the Gate
    on this one costs only what the runtime itself does."""

    def __init__(self, max_running: int) -> None:
        super().__init__(_bench_config(max_running, 1), counter=HeuristicCounter())
        self._fifo: deque[Request] = deque()

    def submit(self, request: Request, *, now: float) -> Decision:
        self._fifo.append(request)
        return Admit(
            lane="chat",
            tier="default",
            request=request,
            prompt_tokens=0,
            cost=0.0,
            message="admitted",
        )

    def dispatch(self, *, now: float, max_expired: int | None = None) -> Dispatch:
        started: list[Started] = []
        fifo = self._fifo
        while self._book.running < self.max_running and fifo:
            request = fifo.popleft()
            self._book.running += 1
            started.append(
                Started(
                    id=request.id,
                    tenant=request.tenant,
                    lane="chat",
                    request=request,
                    kv_blocks=0,
                    queue_wait=0.0,
                )
            )
        return Dispatch(started=tuple(started), expired=())

    def finish(
        self,
        request_id: str,
        *,
        now: float,
        outcome: Outcome | str = Outcome.COMPLETED,
        output_tokens: int | None = None,
    ) -> Finished:
        self._book.running -= 1
        return Finished(
            id=request_id,
            tenant="t",
            lane="chat",
            outcome=Outcome(outcome),
            arrival=now,
            finished_at=now,
            queue_wait=0.0,
            ttft=None,
            tpot=None,
            prompt_tokens=0,
            output_tokens=0,
            cost=0.0,
        )

    def next_deadline(self) -> float | None:
        return None


def _bench_config(max_running: int, queued: int) -> PolicyConfig:
    return PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": queued, "max_queue_wait_s": 1e9}],
            "tiers": {"default": {"rate": 1e12, "burst": 1e12, "max_concurrency": 10 * queued}},
            "kv": {"num_blocks": 10_000_000, "block_size": 16},
            "engine": {"max_running": max_running},
            "ladder": {"enabled": False},
        }
    )


@dataclass(frozen=True, slots=True)
class DrainResult:
    """wall: seconds until every task is done; cpu: process CPU seconds in
    that time; out_of_order: the share of pairs served in the opposite order
    to their arrival; heavy_worst_wait: the longest a cost-99 request waited;
    heavy_mean_wait, light_mean_wait: the mean wait of the cost-99 and the
    cost-1 requests; waits in seconds."""

    wall: float
    cpu: float
    out_of_order: float
    heavy_worst_wait: float
    heavy_mean_wait: float
    light_mean_wait: float


def drain_costs(count: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return [rng.choice((1, 99)) for _ in range(count)]


def inversions(order: list[int]) -> int:
    """Pairs out of order in a permutation of ``0..n-1`` (Fenwick tree, O(n log n))."""
    size = len(order)
    tree = [0] * (size + 1)
    count = 0
    for seen, value in enumerate(order):
        index, below = value + 1, 0
        while index > 0:
            below += tree[index]
            index -= index & -index
        count += seen - below
        index = value + 1
        while index <= size:
            tree[index] += 1
            index += index & -index
    return count


class _Books:
    __slots__ = ("cpu", "served", "start", "waits")

    def __init__(self, count: int) -> None:
        self.served: list[int] = []
        self.waits = [0.0] * count
        self.start = self.cpu = 0.0

    def begin(self) -> None:
        self.start = time.perf_counter()
        self.cpu = time.process_time()

    def serve(self, index: int) -> None:
        self.waits[index] = time.perf_counter() - self.start
        self.served.append(index)

    def result(self, costs: list[int]) -> DrainResult:
        wall = time.perf_counter() - self.start
        cpu = time.process_time() - self.cpu
        pairs = len(costs) * (len(costs) - 1) / 2
        heavy = [w for w, c in zip(self.waits, costs, strict=True) if c == 99]
        light = [w for w, c in zip(self.waits, costs, strict=True) if c != 99]
        return DrainResult(
            wall,
            cpu,
            inversions(self.served) / pairs,
            max(heavy),
            sum(heavy) / len(heavy),
            sum(light) / len(light),
        )


async def _drain(
    costs: list[int], books: _Books, client: Callable[[int], Coroutine[Any, Any, None]]
) -> DrainResult:
    """Spawn a client per cost, in arrival order, and time from the moment all
    have arrived (none has run yet) until the last is done. The collector
    runs first, once the tasks exist, so their making is not charged to the
    limiter (a full collection of that many young objects takes 50-100 ms)."""
    async with anyio.create_task_group() as group:
        for index in range(len(costs)):
            group.start_soon(client, index)
        gc.collect()
        books.begin()
    return books.result(costs)


def gate_drain(costs: list[int], rate: float, queued: bool = False) -> DrainResult:
    """The Gate; with ``queued``, every waiter is submitted and waiting (behind
    holders of every slot) before the clock starts, so the arrivals' submit
    work is left out."""

    async def main() -> DrainResult:
        policy = bench_policy(CONCURRENCY)
        requests = [
            Request(id=f"d{k}", tenant="t", prompt_tokens=cost, max_new_tokens=1)
            for k, cost in enumerate(costs)
        ]
        dispatched: list[str] = []
        original = policy.dispatch

        def dispatch(*, now: float, max_expired: int | None = None) -> Dispatch:
            result = original(now=now, max_expired=max_expired)
            dispatched.extend(s.id for s in result.started if s.id.startswith("d"))
            return result

        policy.dispatch = dispatch  # type: ignore[method-assign]
        books = _Books(len(costs))
        async with Gate(policy) as gate:

            async def client(index: int) -> None:
                async with gate.admit(requests[index]):
                    books.serve(index)
                    await anyio.sleep(costs[index] * CONCURRENCY / rate)

            if queued:
                result = await _drain_queued(gate, costs, books, client)
            else:
                result = await _drain(costs, books, client)
        # Woken exactly in the order fair dispatch chose.
        assert [f"d{k}" for k in books.served] == dispatched
        return result

    return anyio.run(main, backend="asyncio")


def gate_paced_drain(costs: list[int], rate: float) -> DrainResult:
    """The Gate as a rate limiter: ``engine.dispatch_rate`` paces starts at
    ``rate`` cost units per second (a burst of 10 ms, as the rate limiters
    get), in fair order; slots never bind and a started request is done at once."""

    async def main() -> DrainResult:
        policy = Policy(_paced_config(len(costs), rate), counter=HeuristicCounter())
        requests = [
            Request(id=f"d{k}", tenant="t", prompt_tokens=cost, max_new_tokens=1)
            for k, cost in enumerate(costs)
        ]
        books = _Books(len(costs))
        async with Gate(policy) as gate:

            async def client(index: int) -> None:
                async with gate.admit(requests[index]):
                    books.serve(index)

            return await _drain(costs, books, client)

    return anyio.run(main, backend="asyncio")


def _paced_config(count: int, rate: float) -> PolicyConfig:
    return PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": count, "max_queue_wait_s": 1e9}],
            "cost": {"alpha": 1.0, "beta": 0.0},  # a request costs its prompt: 1 or 99
            "tiers": {"default": {"max_concurrency": count}},
            "kv": {"num_blocks": 10_000_000, "block_size": 16},
            "engine": {"max_running": count, "dispatch_rate": rate, "dispatch_burst": rate / 100},
            "ladder": {"enabled": False},
        }
    )


async def _drain_queued(
    gate: Gate,
    costs: list[int],
    books: _Books,
    client: Callable[[int], Coroutine[Any, Any, None]],
) -> DrainResult:
    holders = [
        gate.admit_nowait(Request(id=f"hold{k}", prompt_tokens=1, max_new_tokens=1))
        for k in range(CONCURRENCY)
    ]
    async with anyio.create_task_group() as group:
        for index in range(len(costs)):
            group.start_soon(client, index)
        while gate.statistics().waiting < len(costs):  # noqa: ASYNC110 - setup, not timed
            await anyio.sleep(0.01)
        gc.collect()
        books.begin()
        for ticket in holders:
            ticket.finish()
    return books.result(costs)


def capacity_limiter_drain(costs: list[int], rate: float) -> DrainResult:
    async def main() -> DrainResult:
        limiter = anyio.CapacityLimiter(CONCURRENCY)
        books = _Books(len(costs))

        async def client(index: int) -> None:
            async with limiter:
                books.serve(index)
                await anyio.sleep(costs[index] * CONCURRENCY / rate)

        return await _drain(costs, books, client)

    return anyio.run(main, backend="asyncio")


def aiolimiter_drain(costs: list[int], rate: float) -> DrainResult:
    from aiolimiter import AsyncLimiter

    async def main() -> DrainResult:
        limiter = AsyncLimiter(rate * 0.01, 0.01)  # a burst of 10 ms worth
        books = _Books(len(costs))

        async def client(index: int) -> None:
            await limiter.acquire(costs[index])
            books.serve(index)

        return await _drain(costs, books, client)

    return anyio.run(main, backend="asyncio")


def pyrate_drain(costs: list[int], rate: float) -> DrainResult:
    from pyrate_limiter import Limiter, Rate

    async def main() -> DrainResult:
        limiter = Limiter(Rate(round(rate * 0.01), 10))  # 10 ms windows
        books = _Books(len(costs))

        async def client(index: int) -> None:
            await limiter.try_acquire_async("k", weight=costs[index])
            books.serve(index)

        try:
            return await _drain(costs, books, client)
        finally:
            limiter.close()

    return anyio.run(main, backend="asyncio")


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


Runner = Callable[[list[int], float], DrainResult]

DRAIN_RUNNERS: list[tuple[str, Runner | None]] = [
    (f"slopolicy Gate ({CONCURRENCY} slots)", gate_drain),
    ("  the same, waiters queued first", partial(gate_drain, queued=True)),
    ("slopolicy Gate, dispatch_rate", gate_paced_drain),
    (f"anyio.CapacityLimiter ({CONCURRENCY} slots)", capacity_limiter_drain),
    ("aiolimiter AsyncLimiter", aiolimiter_drain if _installed("aiolimiter") else None),
    ("pyrate-limiter (InMemoryBucket)", pyrate_drain if _installed("pyrate_limiter") else None),
]


def run_full_load(
    backend: str, requests: int, waiters: int
) -> tuple[list[LoadReport], float, list[int]]:
    """The load test at full size on the virtual clock: two halves through
    one gate; memory blocks (after a full collection) after each half."""
    from slopolicy.testing.virtual_loop import virtual_event_loop

    blocks: list[int] = []
    prompts = {"a": 100, "b": 200, "c": 300, "d": 400}

    async def main() -> list[LoadReport]:
        before = len(anyio.get_running_tasks())
        policy = Policy(load_config(waiters), counter=HeuristicCounter())
        reports: list[LoadReport] = []
        async with Gate(policy) as gate:
            for _ in range(2):
                reports.append(
                    await run_load(
                        gate, requests=requests // 2, concurrency=waiters, prompts=prompts
                    )
                )
                gc.collect()
                blocks.append(sys.getallocatedblocks())
        assert len(anyio.get_running_tasks()) == before  # the gate left no task behind
        return reports

    if backend == "asyncio":
        options: dict[str, object] = {"loop_factory": virtual_event_loop}
    else:
        from trio.testing import MockClock

        options = {"clock": MockClock(autojump_threshold=0)}
    start = time.perf_counter()
    reports: list[LoadReport] = anyio.run(main, backend=backend, backend_options=options)
    return reports, time.perf_counter() - start, blocks
