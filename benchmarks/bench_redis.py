"""The Redis quota store's admissions against the ``limits`` library's Redis storage.

Run from the repository root (``pip install -e '.[dev]'``: redis-py and limits)::

    python -m benchmarks.bench_redis            # about a minute
    python -m benchmarks.bench_redis --quick    # fewer calls and rounds
    python -m benchmarks.bench_redis --url redis://host:6379/0   # a server of your own

It starts its own ``redis-server`` on a free loopback port (Debian's, from
``PATH``) unless ``--url`` is given, and prints admissions per second and
latency percentiles, one task and 32 concurrent tasks, on one key (one
tenant) and on 1,000 keys. Every limiter runs in the same process and event
loop on the same server through redis-py's asyncio client, and every
decision is granted (quotas far above what is asked), so every row does the
same work: one round trip per admission.

- ``slopolicy acquire``: :meth:`RedisQuotaStore.acquire` for a tier with a
  tenant bucket, no caps: one EVALSHA (purge expired leases, check, take,
  register the lease). Leases are not released while timed: the lease sets
  grow to the calls made, as with an engine that holds every request.
- ``slopolicy acquire, lane split + caps``: a tier with a lane's split bucket,
  a tenant cap and a lane cap: all of TenantQuotas' checks in the one call.
- ``limits fixed/moving window``: ``limits.aio`` ``FixedWindowRateLimiter`` /
  ``MovingWindowRateLimiter`` over ``RedisStorage(implementation="redispy")``,
  ``hit(item, key)``; a window of 10^9 per second.
- ``slopolicy acquire+finish``: a request's whole life in the store as the
  Gate drives it: the admission, then ``finish`` (settle and release
  pipelined), two round trips (one task only; for scale).

Rounds interleave the limiters so background load hits them alike; the
throughput is the median over rounds, the percentiles pool every call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any

from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.testing.redis_server import RedisServer, redis_server_path

PLAIN = TierSpec("bench", "chat", rate=1e9, burst=1e9)
SPLIT = TierSpec(
    "bench-split",
    "chat",
    rate=1e9,
    burst=1e9,
    max_concurrency=10**9,
    lane_quotas=(LaneQuotaSpec("chat", 0.5, max_concurrency=10**9),),
)
CONCURRENCY = 32

Call = Callable[[str], Awaitable[Any]]


async def _sequential(call: Call, keys: list[str], count: int) -> tuple[float, list[int]]:
    latencies = []
    clock = time.perf_counter_ns
    start = clock()
    for k in range(count):
        t0 = clock()
        await call(keys[k % len(keys)])
        latencies.append(clock() - t0)
    return count / ((clock() - start) / 1e9), latencies


async def _concurrent(call: Call, keys: list[str], count: int) -> tuple[float, list[int]]:
    latencies: list[int] = []
    clock = time.perf_counter_ns
    per_task = count // CONCURRENCY

    async def worker(offset: int) -> None:
        for k in range(per_task):
            t0 = clock()
            await call(keys[(offset + k * CONCURRENCY) % len(keys)])
            latencies.append(clock() - t0)

    start = clock()
    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return per_task * CONCURRENCY / ((clock() - start) / 1e9), latencies


class Limiter:
    """One contender: a name, and a factory of its call for a fresh key space."""

    def __init__(self, name: str, make: Callable[[str], Awaitable[tuple[Call, Any]]]) -> None:
        self.name = name
        self.make = make


def _slopolicy(url: str, tier: TierSpec, lifecycle: bool = False) -> Limiter:
    from slopolicy.backends import Lease
    from slopolicy.backends.redis import RedisQuotaStore

    async def make(space: str) -> tuple[Call, Any]:
        store = RedisQuotaStore.from_url(url, prefix=space, timeout=5.0)

        async def acquire(key: str) -> None:
            lease = await store.acquire(key, tier, "chat", 1.0)
            assert isinstance(lease, Lease), lease

        async def whole(key: str) -> None:
            lease = await store.acquire(key, tier, "chat", 2.0)
            assert isinstance(lease, Lease), lease
            await store.finish(lease, 1.0)

        return (whole if lifecycle else acquire), store

    name = "slopolicy acquire"
    if tier is SPLIT:
        name += ", lane split + caps"
    if lifecycle:
        name = "slopolicy acquire+finish"
    return Limiter(name, make)


def _limits(url: str, moving: bool) -> Limiter:
    from limits import parse
    from limits.aio.storage import RedisStorage
    from limits.aio.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    item = parse("1000000000/second")

    async def make(space: str) -> tuple[Call, Any]:
        storage = RedisStorage("async+" + url, implementation="redispy", key_prefix=space)
        strategy = MovingWindowRateLimiter if moving else FixedWindowRateLimiter
        limiter = strategy(storage)

        async def hit(key: str) -> None:
            assert await limiter.hit(item, key)

        return hit, storage

    return Limiter(f"limits {'moving' if moving else 'fixed'} window", make)


async def _close(resource: Any) -> None:
    close = getattr(resource, "aclose", None)
    if close is not None:
        await close()
        return
    bridge = getattr(resource, "bridge", None)
    client = getattr(bridge, "storage", None)
    if client is not None and hasattr(client, "aclose"):
        await client.aclose()


def _percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] / 1000.0


async def _measure(
    limiters: list[Limiter], keys: int, count: int, rounds: int, concurrent: bool
) -> dict[str, tuple[list[float], list[int]]]:
    results: dict[str, tuple[list[float], list[int]]] = {
        limiter.name: ([], []) for limiter in limiters
    }
    names = [f"tenant-{k}" for k in range(keys)]
    for round_ in range(rounds):
        for n, limiter in enumerate(limiters):
            if concurrent and "finish" in limiter.name:
                continue
            call, resource = await limiter.make(f"bench{round_}x{n}x{keys}x{int(concurrent)}")
            try:
                for key in names[:50]:
                    await call(key)  # connections, scripts, keys warmed up
                run = _concurrent if concurrent else _sequential
                rate, latencies = await run(call, names, count)
            finally:
                await _close(resource)
            results[limiter.name][0].append(rate)
            results[limiter.name][1].extend(latencies)
    return results


def _table(title: str, columns: list[tuple[str, dict[str, tuple[list[float], list[int]]]]]) -> str:
    head = f"{'limiter':<40}" + "".join(f"{name:>36}" for name, _ in columns)
    sub = f"{'':<40}" + "".join(f"{'adm/s':>12}{'p50 µs':>12}{'p99 µs':>12}" for _ in columns)
    lines = [title, head, sub]
    for name in columns[0][1]:
        row = f"{name:<40}"
        for _, results in columns:
            rates, latencies = results.get(name, ([], []))
            if not rates:
                row += f"{'-':>12}{'-':>12}{'-':>12}"
                continue
            row += f"{statistics.median(rates):>12,.0f}"
            row += f"{_percentile(latencies, 0.50):>12.0f}{_percentile(latencies, 0.99):>12.0f}"
        lines.append(row)
    return "\n".join(lines)


async def _main(url: str, quick: bool) -> None:
    import redis.asyncio

    count = 1_000 if quick else 5_000
    rounds = 2 if quick else 5
    limiters = [
        _slopolicy(url, PLAIN),
        _slopolicy(url, SPLIT),
        _limits(url, moving=False),
        _limits(url, moving=True),
        _slopolicy(url, PLAIN, lifecycle=True),
    ]
    client = redis.asyncio.Redis.from_url(url)
    info = await client.info("server")
    await client.aclose()
    versions = ", ".join(
        f"{package} {metadata.version(package)}" for package in ("redis", "limits", "anyio")
    )
    print(
        f"Redis {info['redis_version']} at {url}; Python {sys.version.split()[0]}, {versions}; "
        f"{rounds} rounds of {count:,} calls per cell"
    )
    for keys in (1, 1_000):
        sequential = await _measure(limiters, keys, count, rounds, concurrent=False)
        concurrent = await _measure(limiters, keys, count * 2, rounds, concurrent=True)
        print()
        print(
            _table(
                f"{keys:,} key{'s' if keys > 1 else ''} (tenant{'s' if keys > 1 else ''})",
                [("1 task", sequential), (f"{CONCURRENCY} concurrent tasks", concurrent)],
            )
        )


def main() -> None:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--url", help="a Redis server to use instead of starting one")
    options = parser.parse_args()
    if options.url:
        asyncio.run(_main(options.url, options.quick))
        return
    if redis_server_path() is None:
        sys.exit("redis-server is not installed (apt-get install redis-server), or pass --url")
    with RedisServer() as server:
        asyncio.run(_main(server.url, options.quick))


if __name__ == "__main__":
    main()
