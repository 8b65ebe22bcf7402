"""Per-decision cost of rate limiters, ours against peers: ``python -m benchmarks.bench_bucket``.

Each key gets a quota that admits every decision measured: 10,000 requests'
worth per second (10,000 cost units per second with a burst of 10,000 at cost
1; 1,000,000 at cost 100; a fixed or moving window of the same size for the
window limiters). Each repeat builds fresh limiter state and times a batch of
10,000 (1 key) or 20,000 (10,000 keys, two round-robin passes after an untimed
pass that creates the state) decisions, all granted, so every row does the
same work: check and take. The figure is the median over repeats of batch time
per decision; repeats of the limiters are interleaved so background load hits
them alike. The ratio is against the bare bucket below.

Every decision reads the clock: peers do it inside, so ours and the bare bucket
are handed ``time.monotonic()`` per call. Peers that are not installed
(``pip install 'slopolicy[bench]'``) are left out.

Memory per key is traced with :mod:`tracemalloc` after 1,000 keys took ten
grants each, at cost 1 and at cost 100.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slopolicy.core.quota.bucket import TokenBucket
from slopolicy.core.quota.lease import Lease
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.specs import TierSpec

__all__ = ("BareBuckets", "main")

KEYS = 10_000
REQUESTS = 10_000  # per key per second that the quota admits
MEMORY_KEYS = 1_000
MEMORY_GRANTS = 10

Decide = Callable[[str, int], bool]
#: Fresh limiter state for a quota of ``rate`` cost units per second (and burst).
Factory = Callable[[int], Decide]


class BareBuckets:
    """The least a keyed token bucket can do: the baseline for the ratios."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.state: dict[str, list[float]] = {}

    def try_acquire(self, key: str, cost: float) -> bool:
        now = time.monotonic()
        state = self.state.get(key)
        if state is None:
            state = self.state[key] = [self.burst, now]
        level = min(self.burst, state[0] + self.rate * (now - state[1]))
        state[1] = now
        if level >= cost:
            state[0] = level - cost
            return True
        state[0] = level
        return False


def _bare(rate: int) -> Decide:
    return BareBuckets(rate, rate).try_acquire


def _ours(rate: int) -> Decide:
    buckets: dict[str, TokenBucket] = {}
    clock = time.monotonic

    def decide(key: str, cost: int) -> bool:
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = TokenBucket(rate, rate, now=clock())
        return bucket.try_acquire(cost, now=clock())

    return decide


def _ours_quotas(rate: int) -> Decide:
    quotas = TenantQuotas(max_tenants=2 * KEYS)
    tier = TierSpec("bench", "chat", rate=rate, burst=rate)
    clock = time.monotonic

    def decide(key: str, cost: int) -> bool:
        lease = quotas.acquire(key, tier, "chat", cost, now=clock())
        return isinstance(lease, Lease) and quotas.release(lease, now=clock())

    return decide


def _limits(moving: bool) -> Factory:
    from limits import RateLimitItemPerSecond
    from limits.storage import MemoryStorage
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    def factory(rate: int) -> Decide:
        storage = MemoryStorage()
        limiter = (MovingWindowRateLimiter if moving else FixedWindowRateLimiter)(storage)
        item = RateLimitItemPerSecond(rate)

        def decide(key: str, cost: int) -> bool:
            return bool(limiter.hit(item, key, cost=cost))

        return decide

    return factory


# pyrate-limiter starts a leak thread per limiter; each is closed once measured.
_CLOSE: list[Callable[[], None]] = []


def _close_all() -> None:
    while _CLOSE:
        _CLOSE.pop()()


def _pyrate(token_bucket: bool) -> Factory:
    from pyrate_limiter import (
        BucketFactory,
        Duration,
        InMemoryBucket,
        Limiter,
        Rate,
        RateItem,
        StateBucket,
        TokenBucket,
    )

    def factory(rate: int) -> Decide:
        # One bucket per name, routed by a BucketFactory as pyrate-limiter's
        # docs do it; create() registers each with the leak thread.
        rates = [Rate(rate, Duration.SECOND)]
        buckets: dict[str, object] = {}

        def wrap_item(self: object, name: str, weight: int = 1) -> object:
            return RateItem(name, time.monotonic_ns() // 1_000_000, weight=weight)

        def get(self: BucketFactory, item: RateItem) -> object:
            bucket = buckets.get(item.name)
            if bucket is None:
                if token_bucket:
                    bucket = self.create(StateBucket, rates, algorithm=TokenBucket())
                else:
                    bucket = self.create(InMemoryBucket, rates)
                buckets[item.name] = bucket
            return bucket

        # Built with type() so this module type-checks with or without the extra.
        per_key = type("PerKey", (BucketFactory,), {"wrap_item": wrap_item, "get": get})
        limiter = Limiter(per_key())
        _CLOSE.append(limiter.close)

        def decide(key: str, cost: int) -> bool:
            return limiter.try_acquire(key, weight=cost, blocking=False) is True

        return decide

    return factory


def _aiolimiter(awaited: bool) -> Factory:
    from aiolimiter import AsyncLimiter

    def factory(rate: int) -> Decide:
        limiters: dict[str, AsyncLimiter] = {}

        def limiter_for(key: str) -> AsyncLimiter:
            limiter = limiters.get(key)
            if limiter is None:
                limiter = limiters[key] = AsyncLimiter(rate, 1)
            return limiter

        def acquire(key: str, cost: int) -> bool:
            # The public path, ``await acquire()``: it never suspends while
            # capacity is left, so each decision runs one coroutine to its end.
            coroutine = limiter_for(key).acquire(cost)
            try:
                coroutine.send(None)
            except StopIteration:
                return True
            coroutine.close()
            return False

        def check_and_take(key: str, cost: int) -> bool:
            # What acquire() does when it need not wait, without the coroutine.
            limiter = limiter_for(key)
            if limiter.has_capacity(cost):
                limiter._level += cost
                return True
            return False

        return acquire if awaited else check_and_take

    return factory


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    keys: Sequence[str]
    cost: int
    decisions: int
    repeats: int

    def batch(self) -> list[str]:
        keys = list(self.keys)
        return (keys * (self.decisions // len(keys) + 1))[: self.decisions]


WORKLOADS = (
    Workload("1 key, cost 1", ["k"], 1, REQUESTS, 15),
    Workload("1 key, cost 100", ["k"], 100, REQUESTS, 5),
    Workload(f"{KEYS:,} keys, cost 1", [f"tenant-{i}" for i in range(KEYS)], 1, 2 * KEYS, 7),
)


def _once(factory: Factory, workload: Workload, batch: Sequence[str]) -> float | None:
    """Seconds per decision for one fresh batch, or None if any was refused."""
    cost = workload.cost
    decide = factory(REQUESTS * cost)
    if len(workload.keys) > 1:
        for key in workload.keys:  # state creation, untimed
            decide(key, cost)
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        granted = sum(decide(key, cost) for key in batch)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
        _close_all()
    return elapsed / len(batch) if granted == len(batch) else None


def _measure(subjects: Sequence[tuple[str, Factory]]) -> dict[tuple[str, str], float | None]:
    """Median seconds per decision for each (subject, workload)."""
    results: dict[tuple[str, str], float | None] = {}
    for workload in WORKLOADS:
        batch = workload.batch()
        samples: dict[str, list[float | None]] = {name: [] for name, _ in subjects}
        for _ in range(workload.repeats):
            for name, factory in subjects:
                samples[name].append(_once(factory, workload, batch))
        for name, taken in samples.items():
            valid = [t for t in taken if t is not None]
            results[name, workload.name] = (
                statistics.median(valid) if len(valid) == len(taken) else None
            )
    return results


def _memory_per_key(factory: Factory, cost: int) -> float:
    """Bytes traced per key after ``MEMORY_GRANTS`` grants on each of ``MEMORY_KEYS`` keys."""
    keys = [f"tenant-{i}" for i in range(MEMORY_KEYS)]
    gc.collect()
    tracemalloc.start()
    try:
        decide = factory(REQUESTS * 100)
        for _ in range(MEMORY_GRANTS):
            for key in keys:
                decide(key, cost)
        gc.collect()
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        _close_all()
    return size / MEMORY_KEYS


def _subjects() -> list[tuple[str, Factory]]:
    """Ours, the baseline, and each installed peer."""
    subjects: list[tuple[str, Factory]] = [
        ("slopolicy TokenBucket.try_acquire", _ours),
        ("bare dict bucket (baseline)", _bare),
        ("slopolicy TenantQuotas acquire+release", _ours_quotas),
    ]
    peers: list[tuple[str, Callable[[], Factory]]] = [
        ("aiolimiter await acquire()", lambda: _aiolimiter(awaited=True)),
        ("aiolimiter has_capacity() + take", lambda: _aiolimiter(awaited=False)),
        ("limits fixed window", lambda: _limits(moving=False)),
        ("limits moving window", lambda: _limits(moving=True)),
        ("pyrate-limiter InMemoryBucket", lambda: _pyrate(token_bucket=False)),
        ("pyrate-limiter TokenBucket", lambda: _pyrate(token_bucket=True)),
    ]
    for name, make in peers:
        try:
            subjects.append((name, make()))
        except ImportError:
            print(f"skipped {name}: pip install 'slopolicy[bench]'", file=sys.stderr)
    return subjects


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


async def _report() -> None:
    subjects = _subjects()
    results = _measure(subjects)
    rows = []
    for name, _ in subjects:
        row = [name]
        for workload in WORKLOADS:
            took = results[name, workload.name]
            base = results["bare dict bucket (baseline)", workload.name]
            if took is None:
                row.append("n/a")
            else:
                ratio = "" if base is None else f" ({took / base:.1f}x)"
                row.append(f"{took * 1e6:.2f} µs{ratio}")
        rows.append(row)
    print(f"Per decision, median of repeats (Python {sys.version.split()[0]}):\n")
    print(_table(["limiter", *(w.name for w in WORKLOADS)], rows))
    memory = []
    for name, factory in subjects:
        one, hundred = _memory_per_key(factory, 1), _memory_per_key(factory, 100)
        memory.append([name, f"{one:,.0f} B", f"{hundred:,.0f} B"])
    print(
        f"\nMemory per key, {MEMORY_GRANTS} grants on each of {MEMORY_KEYS:,} keys (tracemalloc):\n"
    )
    print(_table(["limiter", "cost 1", "cost 100"], memory))


def main() -> None:
    """Print the per-decision and per-key memory tables.

    Runs inside an event loop because aiolimiter reads the running loop's
    clock; nothing awaits, so the loop never runs anything during a measurement.
    """
    asyncio.run(_report())


if __name__ == "__main__":
    main()
