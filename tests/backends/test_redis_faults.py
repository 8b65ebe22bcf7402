"""Redis killed, restarted, slow: fail open or closed as configured, recover, leak nothing.

Each test runs its own ``redis-server`` (it kills it). Store time and the
circuit breaker run on manual clocks, so lease expiry and the breaker's
reset are stepped, not waited for; only the store's call timeout is real.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from slopolicy import Gate, Policy, Reason, Rejected
from slopolicy.backends import CircuitBreaker, FailClosed, FailOpen, MemoryQuotaStore
from slopolicy.backends._scripts import tenant_keys
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.specs import TierSpec
from slopolicy.testing.clock import ManualClock
from slopolicy.testing.redis_server import RedisServer
from slopolicy.testing.store_contract import granted, refused
from tests.backends.conftest import NO_REDIS_PY
from tests.backends.proxy import StallingProxy
from tests.runtime.conftest import config, make_request

pytestmark = pytest.mark.anyio

redis_asyncio = pytest.importorskip("redis.asyncio", reason=NO_REDIS_PY)
from slopolicy.backends.redis import RedisQuotaStore  # noqa: E402

TIER = TierSpec("t", "chat", rate=1.0, burst=100.0, max_concurrency=4)
TTL = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=[False, True], ids=["no-persistence", "aof"])
def server(request: pytest.FixtureRequest, redis_binary: str) -> Iterator[RedisServer]:
    with RedisServer(persist=request.param, executable=redis_binary) as running:
        yield running


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def breaker_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def peek(server: RedisServer) -> AsyncIterator[Any]:
    """A plain client for looking at what Redis holds (reconnects after restarts)."""
    client = redis_asyncio.Redis.from_url(server.url, decode_responses=True)
    yield client
    await client.aclose()


def _store(
    url: str, clock: ManualClock, breaker_clock: ManualClock, **options: Any
) -> RedisQuotaStore:
    breaker = CircuitBreaker(failures=1, reset_after=1.0, clock=breaker_clock)
    options = {"lease_ttl": TTL, "key_grace": 3600.0, "timeout": 2.0, **options}
    return RedisQuotaStore.from_url(url, prefix="p", clock=clock, breaker=breaker, **options)


KEYS = tenant_keys("p", "acme", "chat")


async def test_kill_and_restart_failing_open(
    server: RedisServer,
    clock: ManualClock,
    breaker_clock: ManualClock,
    peek: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    local = MemoryQuotaStore(clock=clock)
    store = _store(server.url, clock, breaker_clock, on_failure=FailOpen(local))
    crashed = _store(server.url, clock, ManualClock())
    async with store, crashed:
        kept = granted(await store.acquire("acme", TIER, "chat", 10.0))
        ended_in_outage = granted(await store.acquire("acme", TIER, "chat", 10.0))
        granted(await crashed.acquire("acme", TIER, "chat", 10.0))  # its replica dies with it
        assert await peek.zcard(KEYS.leases) == 3

        server.kill()
        with caplog.at_level(logging.WARNING, "slopolicy.backends.redis"):
            assert await store.release(ended_in_outage)  # at once here; waits for Redis
            fallback = granted(await store.acquire("acme", TIER, "chat", 10.0))
        assert fallback.fallback
        assert not kept.fallback
        assert "failing open on local limits" in caplog.text
        stats = store.statistics()
        assert (stats.degraded, stats.breaker, stats.pending) == (True, "open", 1)
        assert (stats.fallback_admitted, stats.fallback_in_flight) == (1, 1)
        failures = stats.failures
        # While open nothing goes to Redis; local limits apply (the tier's cap of 4).
        more = [granted(await store.acquire("acme", TIER, "chat", 10.0)) for _ in range(3)]
        assert refused(await store.acquire("acme", TIER, "chat", 1.0)).reason is (
            Reason.CONCURRENCY_LIMITED
        )
        assert store.statistics().failures == failures
        await store.release(more.pop())

        server.start()  # the same port
        assert await store.renew() == 0  # the breaker waits its reset_after
        breaker_clock.advance(1.0)
        assert await store.renew() == 4  # kept + 3 fallback leases, registered
        stats = store.statistics()
        assert (stats.degraded, stats.breaker, stats.pending) == (False, "closed", 0)
        assert stats.resyncs >= 1
        # What Redis holds now: exactly the leases really in flight, with the
        # dead replica's one too if Redis kept it (until its ttl).
        persisted = server.persist
        live = {kept.id, fallback.id, *(lease.id for lease in more)}
        crashed_ids = set(await peek.zrange(KEYS.leases, 0, -1)) - live
        assert set(await peek.zrange(KEYS.leases, 0, -1)) - crashed_ids == live
        assert len(crashed_ids) == (1 if persisted else 0)
        assert stats.lost == (0 if persisted else 1)  # `kept` was gone with the data
        # Nothing double-counted: Redis kept the three charges, or lost them all
        # (a fresh bucket); the fallback admissions charged the local bucket only.
        snap = await store.snapshot("acme", TIER)
        assert snap.level == (70.0 if persisted else 100.0)

        # The cap (4) counts every request really in flight, fallback ones included.
        assert refused(await store.acquire("acme", TIER, "chat", 1.0)).reason is (
            Reason.CONCURRENCY_LIMITED
        )
        await store.release(more.pop())  # 3 of ours left, and the dead replica's if kept
        if persisted:
            refused(await store.acquire("acme", TIER, "chat", 1.0))
        # After the ttl the dead replica's lease is gone; ours were renewed.
        clock.advance(TTL / 2)
        assert await store.renew() == 3
        clock.advance(TTL / 2)
        extra = granted(await store.acquire("acme", TIER, "chat", 1.0))
        # Ended as the gate ends them: settle and release in one step. `kept`
        # refunds 6 on whichever bucket Redis has; the fallback lease settles
        # on the local limits it was admitted on, and its registration in
        # Redis is released there.
        assert await store.finish(kept, 4.0)
        assert await store.finish(fallback, 10.0)
        for lease in (*more, extra):
            assert await store.release(lease)
        assert await peek.zcard(KEYS.leases) == 0
        assert await peek.exists(KEYS.costs) == 0
        stats = store.statistics()
        assert (stats.in_flight, stats.pending, stats.fallback_in_flight) == (0, 0, 0)
        assert local.statistics().in_flight == 0


async def test_kill_and_restart_failing_closed(
    server: RedisServer, clock: ManualClock, breaker_clock: ManualClock, peek: Any
) -> None:
    store = _store(server.url, clock, breaker_clock, on_failure=FailClosed(min_retry_after=2.0))
    async with store:
        held = granted(await store.acquire("acme", TIER, "chat", 10.0))
        server.kill()
        refusal = refused(await store.acquire("acme", TIER, "chat", 10.0))
        assert (refusal.reason, refusal.http_status, refusal.retry_after) == (
            Reason.QUOTA_STORE_UNAVAILABLE,
            503,
            2.0,
        )
        assert "unavailable and fails closed" in refusal.message
        for _ in range(3):  # open: refused at once, Redis not tried
            refused(await store.acquire("acme", TIER, "chat", 10.0))
        stats = store.statistics()
        assert (stats.failures, stats.degraded, stats.refusals[refusal.reason]) == (1, True, 4)
        assert await store.release(held)  # waits for Redis
        server.start()
        breaker_clock.advance(1.0)
        lease = granted(await store.acquire("acme", TIER, "chat", 10.0))  # the trial
        assert not lease.fallback
        await store.renew()  # the waiting release goes through
        assert await peek.zrange(KEYS.leases, 0, -1) == [lease.id]
        await store.release(lease)
        assert store.statistics().pending == 0


async def test_the_gate_answers_503_while_failing_closed(
    server: RedisServer, clock: ManualClock, breaker_clock: ManualClock
) -> None:
    store = _store(server.url, clock, breaker_clock)
    policy = Policy(config(), counter=HeuristicCounter())
    async with store, Gate(policy, quota_store=store) as gate:
        async with gate.admit(make_request("a")):
            pass
        server.kill()
        with pytest.raises(Rejected) as caught:
            await gate.admit(make_request("b"))
        assert (caught.value.reason, caught.value.http_status) == (
            Reason.QUOTA_STORE_UNAVAILABLE,
            503,
        )
        assert caught.value.retry_after is not None
        server.start()
        breaker_clock.advance(1.0)
        async with gate.admit(make_request("c")) as ticket:
            assert not ticket.released
    stats = policy.statistics()
    assert sum(stats.outcomes.values()) == stats.submitted == 3


async def test_a_slow_redis_times_out_and_the_late_acquire_is_undone(
    server: RedisServer, clock: ManualClock, breaker_clock: ManualClock, peek: Any
) -> None:
    async with StallingProxy(server.port).running() as proxy:
        store = _store(proxy.url, clock, breaker_clock, timeout=0.1, on_failure=FailOpen())
        async with store:
            granted(await store.acquire("warm", TIER, "chat", 1.0))  # connected, scripts loaded
            proxy.stall()
            late = granted(await store.acquire("acme", TIER, "chat", 10.0))  # times out
            assert late.fallback
            assert store.statistics().pending == 1  # the abort of the timed-out acquire
            proxy.resume()  # the held EVALSHA reaches Redis now, and runs
            for _ in range(200):
                if await peek.zcard(KEYS.leases):
                    break
                await asyncio.sleep(0.005)  # polling Redis for the late write
            assert await peek.zcard(KEYS.leases) == 1
            assert (await store.snapshot("acme", TIER)).level == 90.0
            breaker_clock.advance(1.0)
            await store.renew()  # sends the abort, registers the fallback lease
            assert store.statistics().pending == 0
            assert await peek.zrange(KEYS.leases, 0, -1) == [late.id]  # only the real one
            assert (await store.snapshot("acme", TIER)).level == 100.0  # cost given back
            await store.release(late)
            assert await peek.zcard(KEYS.leases) == 0
