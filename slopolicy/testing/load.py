"""A closed-loop load driver for a :class:`~slopolicy.Gate`.

``run_load`` keeps ``concurrency`` clients busy, each admitting a request,
holding its ticket for ``service`` seconds of engine time and releasing it,
until ``requests`` have been issued; with the engine far smaller than the
client count, almost every client is a waiter at any moment. Clients are
spread evenly over tenants, each tenant with its own prompt size, so fair
dispatch has unequal costs to balance. It measures the service each tenant
got in cost units (prompt cost at the start, output cost at the end, as the
policy charges them) and the largest gap between two tenants while every
tenant had a waiter. Run it under trio's ``MockClock`` or
:func:`~slopolicy.testing.clock.virtual_event_loop` to finish in seconds.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import anyio

from slopolicy.core.request import Request
from slopolicy.runtime.gate import Gate

__all__ = ("LoadReport", "run_load")


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a load run saw.

    Attributes:
        issued: requests submitted.
        completed: requests that completed (the warm-up's not counted).
        peak_waiting: most callers waiting in ``admit`` at once.
        peak_running: most tickets held at once.
        served: cost units served per tenant.
        max_gap: the largest difference in cost units served (since every
            tenant first had a waiter) between two tenants while all had one.
        gap_bound: the bound ``max_gap`` must stay within (see ``run_load``).
        seconds: time on the gate's clock the run took.
    """

    issued: int
    completed: int
    peak_waiting: int
    peak_running: int
    served: Mapping[str, float]
    max_gap: float
    gap_bound: float
    seconds: float


class _Books:
    __slots__ = (
        "base",
        "completed",
        "gap",
        "issued",
        "peak_running",
        "peak_waiting",
        "running",
        "served",
        "waiting",
    )

    def __init__(self, tenants: Sequence[str]) -> None:
        self.issued = 0
        self.completed = 0
        self.running = 0
        self.peak_running = 0
        self.peak_waiting = 0
        self.waiting = dict.fromkeys(tenants, 0)
        self.served = dict.fromkeys(tenants, 0.0)
        self.base: dict[str, float] | None = None  # served when all first had a waiter
        self.gap = 0.0

    def measure(self) -> None:
        if min(self.waiting.values()) == 0:
            return
        if self.base is None:
            self.base = dict(self.served)
        base = self.base
        gains = [self.served[t] - base[t] for t in self.served]
        self.gap = max(self.gap, max(gains) - min(gains))


async def run_load(
    gate: Gate,
    *,
    requests: int,
    concurrency: int,
    prompts: Mapping[str, int],
    output_tokens: int = 8,
    service: float = 0.01,
    seed: int = 0,
) -> LoadReport:
    """Drive ``requests`` requests through ``gate`` from ``concurrency`` clients.

    Each request holds the engine for ``service`` seconds on average (uniform
    within +-50%, from ``seed``), so releases rarely coincide.

    ``prompts`` maps each tenant to its requests' prompt tokens (tenants must
    share one lane and tier weight; ``concurrency`` at most the lane's queue
    capacity). The engine is filled first (tenant ``load-warmup``), so every
    client is queued, from equal counters, before the first start.

    The fairness bound: VTC starts the waiting tenant with the smallest
    counter, so between two of tenant ``i``'s starts its counter grows by at
    most its prompt cost ``p_i`` plus the output cost ``o_i`` of each of its
    running requests (at most ``max_running``). From equal counters, two
    tenants' service thus differs by at most ``B = max_i(p_i + max_running *
    o_i)``; the bound reported is ``2B + max_i p_i``, allowing for starts
    counted as clients resume rather than in dispatch order.
    """
    policy = gate.policy
    weights = policy.router.estimator.weights
    tenants = list(prompts)
    books = _Books(tenants)
    output_cost = weights.beta * output_tokens
    rng = random.Random(seed)
    everyone_waits = anyio.Event()
    start = anyio.current_time()

    async def client(tenant: str) -> None:
        prompt = prompts[tenant]
        while books.issued < requests:
            books.issued += 1
            request = Request(tenant=tenant, prompt_tokens=prompt, max_new_tokens=output_tokens)
            books.waiting[tenant] += 1
            waiting = sum(books.waiting.values())
            books.peak_waiting = max(books.peak_waiting, waiting)
            if waiting == concurrency:
                everyone_waits.set()
            async with gate.admit(request) as ticket:
                books.waiting[tenant] -= 1
                books.served[tenant] += weights.alpha * prompt
                books.running += 1
                books.peak_running = max(books.peak_running, books.running)
                books.measure()
                await anyio.sleep(service * (0.5 + rng.random()))
                books.running -= 1
                ticket.finish(output_tokens=output_tokens)
                books.completed += 1
                books.served[tenant] += output_cost
                books.measure()

    # Fill the engine first so every client queues before anything starts:
    # fair dispatch then begins from equal counters (no first-come warm-up).
    holders = [
        gate.admit_nowait(Request(tenant="load-warmup", prompt_tokens=1, max_new_tokens=1))
        for _ in range(policy.max_running)
    ]
    async with anyio.create_task_group() as group:
        for index in range(concurrency):
            group.start_soon(client, tenants[index % len(tenants)])
        await everyone_waits.wait()
        for ticket in holders:
            ticket.finish()
    worst = max(weights.alpha * p + policy.max_running * output_cost for p in prompts.values())
    return LoadReport(
        issued=books.issued,
        completed=books.completed,
        peak_waiting=books.peak_waiting,
        peak_running=books.peak_running,
        served=dict(books.served),
        max_gap=books.gap,
        gap_bound=2 * worst + weights.alpha * max(prompts.values()),
        seconds=anyio.current_time() - start,
    )
