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
:func:`~slopolicy.testing.virtual_loop.virtual_event_loop` to finish in seconds.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from slopolicy.config.policy import PolicyConfig
from slopolicy.core.request import Request
from slopolicy.runtime.gate import Gate

__all__ = ("LoadReport", "load_config", "run_load")


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


def load_config(waiters: int, max_running: int = 100) -> PolicyConfig:
    """A policy for ``run_load``: one lane deep enough for ``waiters``, limits
    that never bind, no ladder, an engine of ``max_running``."""
    return PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": 2 * waiters, "max_queue_wait_s": 1e6}],
            "tiers": {"default": {"max_concurrency": 2 * waiters}},
            "kv": {"num_blocks": 1_000_000, "block_size": 16},
            "engine": {"max_running": max_running},
            "ladder": {"enabled": False},
        }
    )


_RUNS = itertools.count(1)


class _Driver:
    """The clients' shared books and their loop."""

    __slots__ = (
        "base",
        "completed",
        "everyone_waits",
        "gap",
        "gate",
        "issued",
        "output_tokens",
        "peak_running",
        "peak_waiting",
        "prompts",
        "rng",
        "running",
        "served",
        "service",
        "suffix",
        "waiting",
    )

    def __init__(
        self, gate: Gate, prompts: Mapping[str, int], output_tokens: int, service: float, seed: int
    ) -> None:
        self.gate = gate
        self.prompts = prompts
        self.output_tokens = output_tokens
        self.service = service
        self.rng = random.Random(seed)
        # Fresh tenant names per run: a gate's policy keeps each tenant's fair
        # counter, and only tenants new to it start from equal counters.
        self.suffix = f"#{next(_RUNS)}"
        self.everyone_waits = anyio.Event()
        self.issued = self.completed = self.running = 0
        self.peak_running = self.peak_waiting = 0
        self.waiting = dict.fromkeys(prompts, 0)
        self.served = dict.fromkeys(prompts, 0.0)
        self.base: dict[str, float] | None = None  # served when all first had a waiter
        self.gap = 0.0

    async def client(self, tenant: str, requests: int, concurrency: int) -> None:
        weights = self.gate.policy.estimator.weights
        prompt = self.prompts[tenant]
        while self.issued < requests:
            self.issued += 1
            request = Request(
                tenant=f"{tenant}{self.suffix}",
                prompt_tokens=prompt,
                max_new_tokens=self.output_tokens,
            )
            self.waiting[tenant] += 1
            waiting = sum(self.waiting.values())
            self.peak_waiting = max(self.peak_waiting, waiting)
            if waiting == concurrency:
                self.everyone_waits.set()
            async with self.gate.admit(request) as ticket:
                self.waiting[tenant] -= 1
                self.served[tenant] += weights.alpha * prompt
                self.running += 1
                self.peak_running = max(self.peak_running, self.running)
                self.measure()
                await anyio.sleep(self.service * (0.5 + self.rng.random()))
                self.running -= 1
                ticket.finish(output_tokens=self.output_tokens)
                self.completed += 1
                self.served[tenant] += weights.beta * self.output_tokens
                self.measure()

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
    capacity); each run submits them under names new to the policy
    (``a#1``, ``a#2``...). The engine is filled first (tenant ``load-warmup``),
    so every client is queued, from equal counters, before the first start.

    The fairness bound: VTC starts the waiting tenant with the smallest
    counter, so between two of tenant ``i``'s starts its counter grows by at
    most its prompt cost ``p_i`` plus the output cost ``o_i`` of each of its
    running requests (at most ``max_running``). From equal counters, two
    tenants' service thus differs by at most ``B = max_i(p_i + max_running *
    o_i)``; the bound reported is ``2B + max_i p_i``, allowing for starts
    counted as clients resume rather than in dispatch order.
    """
    policy = gate.policy
    weights = policy.estimator.weights
    driver = _Driver(gate, prompts, output_tokens, service, seed)
    tenants = list(prompts)
    start = anyio.current_time()
    # Fill the engine first so every client queues before anything starts:
    # fair dispatch then begins from equal counters (no first-come warm-up).
    holders = [
        gate.admit_nowait(Request(tenant="load-warmup", prompt_tokens=1, max_new_tokens=1))
        for _ in range(policy.max_running)
    ]
    async with anyio.create_task_group() as group:
        for index in range(concurrency):
            group.start_soon(driver.client, tenants[index % len(tenants)], requests, concurrency)
        await driver.everyone_waits.wait()
        for ticket in holders:
            ticket.finish()
            # One start at a time: each client books its start before the
            # next (trio runs a batch of woken tasks in random order).
            await anyio.lowlevel.checkpoint()
    output_cost = weights.beta * output_tokens
    worst = max(weights.alpha * p + policy.max_running * output_cost for p in prompts.values())
    return LoadReport(
        issued=driver.issued,
        completed=driver.completed,
        peak_waiting=driver.peak_waiting,
        peak_running=driver.peak_running,
        served=dict(driver.served),
        max_gap=driver.gap,
        gap_bound=2 * worst + weights.alpha * max(prompts.values()),
        seconds=anyio.current_time() - start,
    )
