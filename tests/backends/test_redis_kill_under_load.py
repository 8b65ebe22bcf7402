"""Redis killed mid-run under a Gate's load, then restarted: outcomes as configured, no leaks.

Eight clients keep admitting through one Gate while ``redis-server`` is
SIGKILLed and started again on the same port. Failing closed, the outage
answers 503 and admits nothing; failing open, it admits on local limits and
refuses nothing. Afterwards every lease is back, in the Gate, the policy and
Redis, and a lease ttl later nothing of the run is left in Redis. Store time
and the breaker run on manual clocks (the breaker's reset and lease expiry
are stepped); the load itself runs in real time, bounded by ``DEADLINE``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from slopolicy import Gate, Policy, Reason, Rejected
from slopolicy.backends import CircuitBreaker, FailClosed, FailOpen
from slopolicy.backends._scripts import tenant_keys
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.clock import ManualClock
from slopolicy.testing.redis_server import RedisServer
from slopolicy.testing.store_contract import granted
from tests.backends.conftest import NO_REDIS_PY
from tests.runtime.conftest import assert_clean, config, make_request

pytestmark = pytest.mark.anyio

pytest.importorskip("redis.asyncio", reason=NO_REDIS_PY)
from slopolicy.backends.redis import RedisQuotaStore  # noqa: E402

CLIENTS = 8
TTL = 30.0
DEADLINE = 60.0  # real seconds any one phase may take on a loaded machine
UNAVAILABLE = Reason.QUOTA_STORE_UNAVAILABLE.code


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _until(condition: Callable[[], bool], what: str) -> None:
    limit = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > limit:
            pytest.fail(f"not within {DEADLINE} s: {what}")
        await anyio.sleep(0.01)


@pytest.mark.parametrize("persist", [False, True], ids=["no-persistence", "aof"])
@pytest.mark.parametrize("mode", ["fail-open", "fail-closed"])
async def test_redis_killed_and_restarted_under_load(
    mode: str, persist: bool, redis_binary: str
) -> None:
    clock, breaker_clock = ManualClock(), ManualClock()
    outcomes: Counter[str] = Counter()
    # A cap well above the clients: a slot is held until its release reaches
    # Redis, a round trip after the request ends, and must not bind here.
    tiers = {"default": {"rate": 1e9, "burst": 1e9, "max_concurrency": 4 * CLIENTS}}
    settings = config(engine={"max_running": CLIENTS}, tiers=tiers, tenants={})
    policy = Policy(settings, counter=HeuristicCounter())

    async def client(number: int, stop: anyio.Event) -> None:
        for k in range(10**9):
            if stop.is_set():
                return
            try:
                async with gate.admit(make_request(f"c{number}-{k}")):
                    await anyio.sleep(0.001)  # the request runs
                outcomes["admitted"] += 1
            except Rejected as error:  # anything else fails the test
                outcomes[error.code] += 1
                await anyio.sleep(0.001)

    with RedisServer(persist=persist, executable=redis_binary) as server:
        options: dict[str, Any] = {"prefix": "p", "clock": clock, "key_grace": 3600.0}
        store = RedisQuotaStore.from_url(
            server.url,
            breaker=CircuitBreaker(failures=1, reset_after=1.0, clock=breaker_clock),
            on_failure=FailOpen() if mode == "fail-open" else FailClosed(),
            lease_ttl=TTL,
            renew_every=0.05,
            timeout=1.0,
            **options,
        )
        async with store:
            stop = anyio.Event()
            async with Gate(policy, quota_store=store) as gate, anyio.create_task_group() as group:
                for number in range(CLIENTS):
                    group.start_soon(client, number, stop)
                await _until(lambda: outcomes["admitted"] >= 100, "100 admissions")
                server.kill()
                admitted = outcomes["admitted"]
                await _until(
                    lambda: outcomes["admitted"] + outcomes[UNAVAILABLE] >= admitted + 100,
                    "100 answers while Redis is down",
                )
                during = dict(outcomes)
                await anyio.to_thread.run_sync(server.start)  # clients keep going meanwhile
                breaker_clock.advance(1.0)  # the breaker's next trial is due
                restored = store.statistics().admitted
                await _until(
                    lambda: (
                        store.statistics().admitted - restored >= 100
                        and not store.statistics().degraded
                    ),
                    "100 admissions through Redis after the restart",
                )
                stop.set()
        # Closed: what still waited (a release racing a renewal) was sent.

        stats = store.statistics()
        if mode == "fail-closed":
            assert during[UNAVAILABLE] > 0
            assert stats.fallback_admitted == 0
        else:
            assert UNAVAILABLE not in outcomes
            assert stats.fallback_admitted > 0
        assert set(outcomes) <= {"admitted", UNAVAILABLE}, outcomes
        assert (stats.in_flight, stats.pending, stats.fallback_in_flight) == (0, 0, 0)
        assert stats.resyncs >= 1
        assert_clean(policy)
        assert policy.statistics().submitted == sum(outcomes.values())

        keys = tenant_keys("p", "t", "interactive")
        async with RedisQuotaStore.from_url(server.url, **options) as other:
            peek: Any = other._client
            assert await peek.zcard(keys.leases) == 0
            clock.advance(TTL)  # and a ttl later, nothing of the run is left
            tier = policy.tiers.get("default")
            assert tier is not None
            lease = granted(await other.acquire("t", tier, "interactive", 1.0))
            assert await other.release(lease)
            assert await peek.exists(keys.leases, keys.lane_leases, keys.costs) == 0
