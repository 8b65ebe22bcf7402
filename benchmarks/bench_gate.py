"""The async Gate against asyncio/anyio primitives and peer rate limiters.

Run from the repository root (the peers need the ``bench`` extra)::

    python -m benchmarks.bench_gate            # a few minutes
    python -m benchmarks.bench_gate --quick    # fewer repeats, about 80 s
    python -m benchmarks.bench_gate --load     # also 100,000 requests, 10,000 waiters

Three tables, all on asyncio (two peers are asyncio-only; the Gate and
``CapacityLimiter`` rows marked trio run there too):

1. Overhead per request, median over repeats, in microseconds: uncontended
   (one task, acquire then release at once) and hand-off with 10,000 waiters
   (a capacity of 1, 10,000 tasks queued, then timed from the first release
   until every task has had its turn). ``Policy sans-IO`` is the same work
   without the runtime (submit + dispatch + finish; finish + dispatch for the
   hand-off, since the waiters' submits happen before the clock starts); the
   no-op policy (``gate_drain.NullPolicy``) isolates the runtime, and "the
   runtime's share" rows subtract each sans-IO row from its Gate row.
2. Draining 10,000 waiters at a fixed rate over an ideal of 1 s (and 3 s),
   costs 1 and 99 mixed at random: wall time against the ideal, the CPU it
   took, the share of pairs served out of arrival order (one tenant, one lane:
   fair dispatch is FIFO), the heavy requests' worst wait and the mean waits
   (see ``benchmarks/gate_drain.py`` for how each limiter is set up).
3. With ``--load``, the Gate's 100,000-request, 10,000-waiter load run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

import anyio

from benchmarks.gate_drain import DRAIN_RUNNERS, DrainResult, NullPolicy, bench_policy, drain_costs
from slopolicy import Gate, Request

WAITERS = 10_000


def _requests(count: int) -> list[Request]:
    return [
        Request(id=f"r{k}", tenant="t", prompt_tokens=100, max_new_tokens=16) for k in range(count)
    ]


# -- uncontended ---------------------------------------------------------------


def policy_uncontended(count: int, null: bool = False) -> float:
    policy = NullPolicy(1) if null else bench_policy(1)
    requests = _requests(count)
    start = time.perf_counter()
    for request in requests:
        policy.submit(request, now=time.monotonic())
        policy.dispatch(now=time.monotonic())
        policy.finish(request.id, now=time.monotonic())
    return (time.perf_counter() - start) / count


async def gate_uncontended(count: int, null: bool = False) -> float:
    requests = _requests(count)
    async with Gate(NullPolicy(1) if null else bench_policy(1)) as gate:
        start = time.perf_counter()
        for request in requests:
            async with gate.admit(request):
                pass
        return (time.perf_counter() - start) / count


async def gate_nowait_uncontended(count: int) -> float:
    requests = _requests(count)
    async with Gate(bench_policy(1)) as gate:
        start = time.perf_counter()
        for request in requests:
            gate.admit_nowait(request).finish()
        return (time.perf_counter() - start) / count


async def capacity_limiter_uncontended(count: int) -> float:
    limiter = anyio.CapacityLimiter(1)
    start = time.perf_counter()
    for _ in range(count):
        async with limiter:
            pass
    return (time.perf_counter() - start) / count


async def semaphore_uncontended(count: int) -> float:
    semaphore = asyncio.Semaphore(1)
    start = time.perf_counter()
    for _ in range(count):
        async with semaphore:
            pass
    return (time.perf_counter() - start) / count


async def aiolimiter_uncontended(count: int) -> float:
    from aiolimiter import AsyncLimiter

    limiter = AsyncLimiter(1e12, 1)
    start = time.perf_counter()
    for _ in range(count):
        async with limiter:
            pass
    return (time.perf_counter() - start) / count


async def pyrate_uncontended(count: int) -> float:
    from pyrate_limiter import Duration, Limiter, Rate

    limiter = Limiter(Rate(10**12, Duration.SECOND))
    try:
        start = time.perf_counter()
        for _ in range(count):
            await limiter.try_acquire_async("k", weight=1)
        return (time.perf_counter() - start) / count
    finally:
        limiter.close()


# -- hand-off with 10,000 waiters ------------------------------------------------


def policy_handoff(count: int, null: bool = False) -> float:
    policy = NullPolicy(1) if null else bench_policy(1)
    requests = _requests(count + 1)
    for request in requests:
        policy.submit(request, now=time.monotonic())
    (running,) = policy.dispatch(now=time.monotonic())
    start = time.perf_counter()
    for _ in range(count):
        policy.finish(running.id, now=time.monotonic())
        (running,) = policy.dispatch(now=time.monotonic())
    return (time.perf_counter() - start) / count


async def _handoff(
    count: int,
    hold: Callable[[], Awaitable[Callable[[], None]]],
    turn: Callable[[int], Coroutine[Any, Any, None]],
) -> float:
    """Take the only slot, queue ``count`` tasks behind it, and time the
    release through every task's turn."""
    release = await hold()
    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(turn, index)
        await anyio.sleep(0.05)  # every task is now blocked behind the holder
        gc.collect()
        start = time.perf_counter()
        release()
    return (time.perf_counter() - start) / count


async def gate_handoff(count: int, null: bool = False) -> float:
    requests = _requests(count + 1)
    async with Gate(NullPolicy(1) if null else bench_policy(1)) as gate:

        async def hold() -> Callable[[], None]:
            ticket = await gate.admit(requests[-1])
            return lambda: ticket.__exit__(None, None, None)

        async def turn(index: int) -> None:
            async with gate.admit(requests[index]):
                pass

        return await _handoff(count, hold, turn)


async def capacity_limiter_handoff(count: int) -> float:
    limiter = anyio.CapacityLimiter(1)

    async def hold() -> Callable[[], None]:
        await limiter.acquire()
        return limiter.release

    async def turn(index: int) -> None:
        async with limiter:
            pass

    return await _handoff(count, hold, turn)


async def semaphore_handoff(count: int) -> float:
    semaphore = asyncio.Semaphore(1)

    async def hold() -> Callable[[], None]:
        await semaphore.acquire()
        return semaphore.release

    async def turn(index: int) -> None:
        async with semaphore:
            pass

    return await _handoff(count, hold, turn)


# -- running and printing ----------------------------------------------------------

Measure = Callable[[int], float]


def _on(backend: str, function: Callable[[int], Awaitable[float]]) -> Measure:
    def run(count: int) -> float:
        result: float = anyio.run(function, count, backend=backend)
        return result

    return run


def _available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def overhead_rows() -> list[tuple[str, Measure | None, Measure | None]]:
    """(name, uncontended, hand-off) measures; ``None`` where it does not apply."""
    null = {"null": True}
    rows: list[tuple[str, Measure | None, Measure | None]] = [
        (POLICY, policy_uncontended, policy_handoff),
        (GATE, _on("asyncio", gate_uncontended), _on("asyncio", gate_handoff)),
        (NULL, partial(policy_uncontended, **null), partial(policy_handoff, **null)),
        (
            NULL_GATE,
            _on("asyncio", partial(gate_uncontended, **null)),
            _on("asyncio", partial(gate_handoff, **null)),
        ),
        (GATE_TRIO, _on("trio", gate_uncontended), _on("trio", gate_handoff)),
        (
            NULL_GATE_TRIO,
            _on("trio", partial(gate_uncontended, **null)),
            _on("trio", partial(gate_handoff, **null)),
        ),
        ("Gate admit_nowait() + finish()", _on("asyncio", gate_nowait_uncontended), None),
        (
            "anyio.CapacityLimiter",
            _on("asyncio", capacity_limiter_uncontended),
            _on("asyncio", capacity_limiter_handoff),
        ),
        (
            "anyio.CapacityLimiter, trio",
            _on("trio", capacity_limiter_uncontended),
            _on("trio", capacity_limiter_handoff),
        ),
        (
            "asyncio.Semaphore",
            _on("asyncio", semaphore_uncontended),
            _on("asyncio", semaphore_handoff),
        ),
    ]
    if _available("aiolimiter"):
        rows.append(("aiolimiter AsyncLimiter", _on("asyncio", aiolimiter_uncontended), None))
    if _available("pyrate_limiter"):
        rows.append(("pyrate-limiter try_acquire_async", _on("asyncio", pyrate_uncontended), None))
    return rows


POLICY = "Policy sans-IO"
GATE = "Gate on Policy"
NULL = "no-op policy sans-IO"
NULL_GATE = "Gate on the no-op policy"
GATE_TRIO = "Gate on Policy, trio"
NULL_GATE_TRIO = "Gate on the no-op policy, trio"
#: Gate rows and the sans-IO row their runtime's share is read against.
_SHARES = {GATE: POLICY, NULL_GATE: NULL, GATE_TRIO: POLICY, NULL_GATE_TRIO: NULL}


def print_overheads(repeats: int, count: int) -> None:
    print(f"Overhead per request, µs, asyncio unless marked (median of {repeats}, interleaved;")
    print(f"uncontended: {count:,} in a row; hand-off: {WAITERS:,} waiters behind a capacity of 1)")
    rows = overhead_rows()
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _ in rows}
    for _ in range(repeats):  # interleaved, so background load hits every row alike
        for name, alone, handoff in rows:
            if alone is not None:
                samples[name][0].append(alone(count))
            if handoff is not None:
                samples[name][1].append(handoff(WAITERS))
    medians = {
        name: tuple(statistics.median(values) if values else None for values in pair)
        for name, pair in samples.items()
    }
    print(f"{'':40}{'uncontended':>13}{'10,000 waiters':>16}")
    for name, _, _ in rows:
        first, second = medians[name]
        print(f"{name:40}{_us(first):>13}{_us(second):>16}")
        if name in _SHARES:
            base = medians[_SHARES[name]]
            extra = [_minus(g, b) for g, b in zip(medians[name], base, strict=True)]
            label = "  the runtime's share (row minus sans-IO)"
            print(f"{label:40}{_us(extra[0]):>13}{_us(extra[1]):>16}")
    print()


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _us(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:.2f}"


def print_drain(repeats: int, seconds: float) -> None:
    costs = drain_costs(WAITERS)
    rate = sum(costs) / seconds
    print(
        f"Draining {WAITERS:,} waiters, costs 1 and 99 ({sum(costs):,} units) at "
        f"{rate:,.0f} units/s: ideal {seconds:.2f} s (median of {repeats})"
    )
    print(
        f"{'':36}{'wall s':>8}{'x ideal':>9}{'CPU s':>7}{'out of order':>14}"
        f"{'heavy worst wait':>18}{'mean wait heavy/light':>23}"
    )
    for name, runner in DRAIN_RUNNERS:
        if runner is None:
            print(f"{name:36}{'not installed':>14}")
            continue
        runs: list[DrainResult] = [runner(costs, rate) for _ in range(repeats)]
        r = sorted(runs, key=lambda run: run.wall)[len(runs) // 2]
        waits = f"{r.heavy_mean_wait:.3f} / {r.light_mean_wait:.3f}"
        print(
            f"{name:36}{r.wall:>8.3f}{r.wall / seconds:>9.2f}{r.cpu:>7.2f}"
            f"{r.out_of_order:>13.1%}{r.heavy_worst_wait:>18.3f}{waits:>23}"
        )
    print()


def print_load(requests: int) -> None:
    from benchmarks.gate_drain import run_full_load

    print(f"Load: {requests:,} requests, {WAITERS:,} clients, an engine of 100, virtual time")
    for backend in ("asyncio", "trio"):
        reports, wall, blocks = run_full_load(backend, requests, WAITERS)
        completed = sum(r.completed for r in reports)
        issued = sum(r.issued for r in reports)
        gap = max(r.max_gap for r in reports)
        print(
            f"  {backend}: {completed:,} of {issued:,} completed in {wall:.1f} s wall "
            f"({sum(r.seconds for r in reports):.1f} s virtual); "
            f"{max(r.peak_waiting for r in reports):,} waiters at peak; "
            f"fairness gap {gap:,.0f} <= bound {reports[0].gap_bound:,.0f} cost units; "
            f"memory blocks after each half {blocks[0]:,} / {blocks[1]:,}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--load", action="store_true", help="also run the 100,000-request load")
    parser.add_argument(
        "--drain-seconds",
        type=float,
        nargs="+",
        default=[1.0, 3.0],
        help="the drains' ideal times (the first is repeated, the others run once)",
    )
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 7
    print_overheads(repeats, 5_000 if args.quick else 20_000)
    for index, seconds in enumerate(args.drain_seconds):
        print_drain(1 if args.quick or index else 3, seconds)
    if args.load:
        print_load(100_000)


if __name__ == "__main__":
    main()
