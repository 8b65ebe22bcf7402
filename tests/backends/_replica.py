"""One gateway replica in its own process (multiprocessing spawn): hammer a
shared tenant through a RedisQuotaStore and report what it was granted."""

from __future__ import annotations

import asyncio
import random
import time
from multiprocessing.synchronize import Event
from typing import Any

from slopolicy.core.specs import TierSpec

#: Rate part: 200 cost units/s, burst 50, no cap.
RATE_TIER = TierSpec("rate", "chat", rate=200.0, burst=50.0)
#: Concurrency part: 3 in flight, no bucket.
CAP_TIER = TierSpec("cap", "chat", max_concurrency=3)


async def _rate(
    store: Any, until: float, rng: random.Random, out: list[tuple[float, float]]
) -> None:
    from slopolicy.backends import Lease

    while time.monotonic() < until:
        cost = rng.choice((1.0, 2.0, 5.0))
        lease = await store.acquire("shared-rate", RATE_TIER, "chat", cost)
        if isinstance(lease, Lease):
            out.append((lease.acquired_at, cost))
            await store.release(lease)
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.002))


async def _cap(
    store: Any, until: float, rng: random.Random, out: list[tuple[float, float]]
) -> None:
    from slopolicy.backends import Lease

    while time.monotonic() < until:
        lease = await store.acquire("shared-cap", CAP_TIER, "chat", 1.0)
        if isinstance(lease, Lease):
            await asyncio.sleep(rng.uniform(0.0, 0.003))  # the request runs
            await store.release(lease)
            assert lease.released_at is not None
            out.append((lease.acquired_at, lease.released_at))
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.001))


async def _main(url: str, prefix: str, seconds: float, seed: int) -> dict[str, Any]:
    from slopolicy.backends.redis import RedisQuotaStore

    rng = random.Random(seed)
    grants: list[tuple[float, float]] = []
    holds: list[tuple[float, float]] = []
    async with RedisQuotaStore.from_url(url, prefix=prefix, timeout=5.0) as store:
        until = time.monotonic() + seconds
        tasks = [_rate(store, until, rng, grants) for _ in range(2)]
        tasks += [_cap(store, until, rng, holds) for _ in range(2)]
        await asyncio.gather(*tasks)
        stats = store.statistics()
    return {"grants": grants, "holds": holds, "failures": stats.failures, "pending": stats.pending}


def run(url: str, prefix: str, seconds: float, seed: int, start: Event, results: Any) -> None:
    """Process entry point: wait for the start signal, run, put the report."""
    start.wait(60)
    results.put(asyncio.run(_main(url, prefix, seconds, seed)))
