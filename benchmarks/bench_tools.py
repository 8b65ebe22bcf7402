"""A tenant flooding a tool: does another tenant's tool wait move?

Run from the repository root::

    python -m benchmarks.bench_tools            # a few seconds (virtual time)
    python -m benchmarks.bench_tools --quick

Tenant A runs ``workers`` callers in a loop, each call holding a slot for
``a_call_s``; tenant B makes ``b_calls`` calls one after another (``b_call_s``
each, ``b_think_s`` apart). One tool with ``slots`` slots. B's wait for a
slot is measured alone and beside A's flood, through ``gate.tool`` (fair
waiting between tenants) and through a plain ``anyio.Semaphore`` of the same
size (first come, first served: what a host without slopolicy would write).
Everything runs on virtual time (asyncio's virtual loop), so the figures are
exact and the same on every machine. The fair-share bound: B, holding fewer
slots than A, gets the next slot that frees, so its wait is at most one of
A's calls (``a_call_s``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import anyio

from slopolicy import Gate, PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.policy import Policy
from slopolicy.testing.virtual_loop import virtual_event_loop

__all__ = ("Flood", "Result", "measure", "p99", "table")

Slot = Callable[[str], AbstractAsyncContextManager[object]]


@dataclass(frozen=True, slots=True)
class Flood:
    """One scenario's sizes (seconds and counts)."""

    slots: int = 4
    workers: int = 32
    a_call_s: float = 1.0
    b_calls: int = 200
    b_call_s: float = 0.2
    b_think_s: float = 0.25


@dataclass(frozen=True, slots=True)
class Result:
    """B's waits for a slot (seconds), and the calls A finished in the
    ``elapsed`` seconds B took."""

    b_waits: tuple[float, ...]
    a_calls: int
    elapsed: float

    @property
    def a_rate(self) -> float:
        """A's calls per second."""
        return self.a_calls / self.elapsed


def p99(values: tuple[float, ...]) -> float:
    """The 99th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _config(flood: Flood) -> PolicyConfig:
    return PolicyConfig.from_dict(
        {"tools": {"limits": {"search": {"max_concurrency": flood.slots, "max_waiting": 4096}}}}
    )


async def _run(flood: Flood, slot: Slot, clock: Callable[[], float], *, a: bool) -> Result:
    waits: list[float] = []
    a_done = 0
    start = clock()
    done = anyio.Event()

    async def tenant_a() -> None:
        nonlocal a_done
        while not done.is_set():
            async with slot("a"):
                await anyio.sleep(flood.a_call_s)
            a_done += 1

    async with anyio.create_task_group() as group:
        if a:
            for _ in range(flood.workers):
                group.start_soon(tenant_a)
            await anyio.sleep(flood.a_call_s / 2)  # A's flood is under way first
        for _ in range(flood.b_calls):
            asked = clock()
            async with slot("b"):
                waits.append(clock() - asked)
                await anyio.sleep(flood.b_call_s)
            await anyio.sleep(flood.b_think_s)
        done.set()
    return Result(tuple(waits), a_done, clock() - start)


async def measure(flood: Flood, *, fair: bool, a: bool) -> Result:
    """B's waits beside A's flood (``a``), through ``gate.tool`` (``fair``) or a semaphore."""
    clock = anyio.current_time
    if fair:
        async with Gate(
            Policy(_config(flood), counter=HeuristicCounter()), telemetry=False
        ) as gate:
            return await _run(flood, lambda t: gate.tool(tenant=t, name="search"), clock, a=a)
    semaphore = anyio.Semaphore(flood.slots)

    @asynccontextmanager
    async def plain(_: str) -> AsyncIterator[None]:
        async with semaphore:
            yield

    return await _run(flood, plain, clock, a=a)


def table(flood: Flood, results: dict[tuple[bool, bool], Result]) -> list[str]:
    """The report: B's wait p50/p99 alone and beside the flood, per limiter."""
    lines = [
        f"B's tool wait (s), {flood.slots} slots; A floods with {flood.workers} callers of "
        f"{flood.a_call_s:g} s; fair-share bound {flood.a_call_s:g} s",
        f"{'limiter':<18}{'alone p99':>11}{'flood p50':>11}{'flood p99':>11}{'A calls/s':>11}",
    ]
    for fair, name in ((True, "gate.tool (fair)"), (False, "anyio.Semaphore")):
        alone, flooded = results[fair, False], results[fair, True]
        median = sorted(flooded.b_waits)[len(flooded.b_waits) // 2]
        lines.append(
            f"{name:<18}{p99(alone.b_waits):>11.3f}{median:>11.3f}"
            f"{p99(flooded.b_waits):>11.3f}{flooded.a_rate:>11.2f}"
        )
    return lines


async def _all(flood: Flood) -> dict[tuple[bool, bool], Result]:
    return {
        (fair, a): await measure(flood, fair=fair, a=a)
        for fair in (True, False)
        for a in (False, True)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 calls of B, not 200")
    args = parser.parse_args()
    flood = Flood(b_calls=40) if args.quick else Flood()
    results = anyio.run(
        _all, flood, backend="asyncio", backend_options={"loop_factory": virtual_event_loop}
    )
    print("\n".join(table(flood, results)))


if __name__ == "__main__":
    main()
