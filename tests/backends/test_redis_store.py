"""What only the Redis store does: one round trip, scripts by hash, keys, TTL leases, renewal."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from slopolicy.backends._scripts import SCRIPTS, check_prefix, escape, tenant_keys
from slopolicy.errors import UsageError
from slopolicy.testing.clock import ManualClock
from slopolicy.testing.store_contract import PRO, granted, refused
from tests.backends.conftest import NO_REDIS_PY

pytestmark = pytest.mark.anyio

redis_asyncio = pytest.importorskip("redis.asyncio", reason=NO_REDIS_PY)
from slopolicy.backends._redis_calls import token_of  # noqa: E402
from slopolicy.backends.redis import RedisQuotaStore  # noqa: E402

Factory = Callable[..., RedisQuotaStore]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Any]:
    connection = redis_asyncio.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()


@pytest.fixture
async def make(redis_url: str, prefix: str, clock: ManualClock) -> AsyncIterator[Factory]:
    """Stores on one server and prefix (replicas), on the test's manual clock."""
    made: list[RedisQuotaStore] = []

    def factory(**options: Any) -> RedisQuotaStore:
        # A generous call timeout, as the contract suite's store has: on a
        # loaded machine a first call (loading the scripts) can pass 0.25 s.
        options = {"prefix": prefix, "clock": clock, "key_grace": 3600.0, "timeout": 5.0, **options}
        store = RedisQuotaStore.from_url(redis_url, **options)
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.aclose()


async def test_an_admission_is_one_evalsha_round_trip(make: Factory, client: Any) -> None:
    store = make()
    await store.release(granted(await store.acquire("acme", PRO, "chat", 1.0)))  # loads scripts
    calls: list[tuple[Any, ...]] = []
    original = store._client.execute_command

    async def spy(*args: Any, **options: Any) -> Any:
        calls.append(args)
        return await original(*args, **options)

    store._client.execute_command = spy  # type: ignore[method-assign]
    before = await client.info("commandstats")
    for k in range(20):
        await store.acquire(f"t{k % 3}", PRO, "chat" if k % 2 else "batch", 1.0)
    after = await client.info("commandstats")
    assert [call[0] for call in calls] == ["EVALSHA"] * 20
    assert {call[1] for call in calls} == {SCRIPTS["acquire"].sha}
    assert after["cmdstat_evalsha"]["calls"] - before["cmdstat_evalsha"]["calls"] == 20
    assert "cmdstat_eval" not in after or after["cmdstat_eval"] == before.get("cmdstat_eval")


async def test_finishing_a_lease_is_one_pipelined_round_trip(make: Factory, client: Any) -> None:
    store = make()
    await store.release(granted(await store.acquire("acme", PRO, "chat", 1.0)))  # loads scripts
    leases = [granted(await store.acquire("acme", PRO, "chat", 3.0)) for _ in range(3)]
    singles: list[tuple[Any, ...]] = []
    pipelines: list[int] = []
    original_command, original_pipeline = store._client.execute_command, store._client.pipeline

    async def command(*args: Any, **options: Any) -> Any:
        singles.append(args)
        return await original_command(*args, **options)

    def pipeline(*args: Any, **options: Any) -> Any:
        pipe = original_pipeline(*args, **options)
        execute = pipe.execute

        async def counted(*a: Any, **o: Any) -> Any:
            pipelines.append(len(pipe.command_stack))
            return await execute(*a, **o)

        pipe.execute = counted
        return pipe

    store._client.execute_command = command  # type: ignore[method-assign]
    store._client.pipeline = pipeline  # type: ignore[method-assign]
    for lease in leases:
        assert await store.finish(lease, 1.0) is True
    assert singles == []  # no lone settle or release...
    assert pipelines == [2, 2, 2]  # ...each finish is settle + release in one round trip
    snap = await store.snapshot("acme", PRO)
    # 16 - 1 (the first, released unsettled) - 3 x 3 taken + 3 x 2 refunded at the finish.
    assert (snap.in_flight, snap.level, snap.lane_levels["chat"]) == (0, 12.0, 8.0)


async def test_lost_scripts_are_loaded_again_and_leases_registered_again(
    make: Factory, client: Any
) -> None:
    store = make()
    lease = granted(await store.acquire("acme", PRO, "chat", 1.0))
    await client.script_flush()  # what a restart or failover does to the script cache
    await client.delete(*tenant_keys(store._prefix, "acme", "chat").all())  # and to the data
    assert store.statistics().resyncs == 0
    granted(await store.acquire("acme", PRO, "chat", 1.0))
    assert store.statistics().resyncs == 1
    assert await store.renew() == 2
    assert store.statistics().lost == 1  # the first lease, gone with the data
    keys = tenant_keys(store._prefix, "acme", "chat")
    assert await client.zcard(keys.leases) == 2
    assert await store.release(lease)
    assert await client.zcard(keys.leases) == 1


def test_keys_share_one_cluster_slot_per_tenant_and_never_collide() -> None:
    from redis.crc import key_slot

    ids = ["acme", "a}b", "a:b", "{a}", "", "%", "é 租户", "a%7Db", "x" * 300]
    seen: set[str] = set()
    for tenant in ids:
        keys = tenant_keys("slopolicy", tenant, "chat:1}").all()
        assert len({key_slot(key.encode()) for key in keys}) == 1, keys
        tag = keys[0][keys[0].index("{") + 1 : keys[0].index("}")]
        assert tag == escape(tenant), tag  # the whole id
        assert tag, keys  # never the empty tag, which Cluster ignores
        assert not seen & set(keys)
        seen |= set(keys)
    assert escape("") == "%"
    assert escape("%") == "%25"
    assert tenant_keys("p", "acme", "chat").leases == "p:{acme}:leases"
    assert tenant_keys("p", "acme", "batch").lane_bucket == "p:{acme}:bucket:batch"
    for bad in ("", "a{b", "a}b"):
        with pytest.raises(UsageError, match="prefix"):
            check_prefix(bad)


def test_the_scripts_ship_as_package_data() -> None:
    from importlib import resources

    folder = resources.files("slopolicy.backends") / "lua"
    names = sorted(item.name for item in folder.iterdir() if item.name.endswith(".lua"))
    assert names == [
        "acquire.lua",
        "common.lua",
        "inspect.lua",
        "release.lua",
        "renew.lua",
        "settle.lua",
    ]
    for script in SCRIPTS.values():
        assert "redis.call('TIME')" in script.source  # the server's clock, via the prelude
        assert len(script.sha) == 40


async def test_a_crashed_replicas_slots_come_back_after_the_lease_ttl(
    make: Factory, clock: ManualClock, client: Any
) -> None:
    crashed, alive = make(lease_ttl=30.0), make(lease_ttl=30.0)
    for _ in range(3):
        granted(await crashed.acquire("acme", PRO, "chat", 1.0))
    # `crashed` never renews nor releases: it is gone.
    clock.advance(29.5)
    refused(await alive.acquire("acme", PRO, "chat", 1.0))
    clock.advance(0.5)  # 30 s since they were granted: expired
    lease = granted(await alive.acquire("acme", PRO, "chat", 1.0))
    keys = tenant_keys(alive._prefix, "acme", "chat")
    assert await client.zcard(keys.leases) == 1
    assert await client.hkeys(keys.costs) == [lease.id]  # purged with their cost records


async def test_renewal_keeps_a_live_replicas_leases(make: Factory, clock: ManualClock) -> None:
    holder, other = make(lease_ttl=30.0), make(lease_ttl=30.0)
    held = [granted(await holder.acquire("acme", PRO, "chat", 1.0)) for _ in range(3)]
    for _ in range(4):
        clock.advance(20.0)
        assert await holder.renew() == 3
    refused(await other.acquire("acme", PRO, "chat", 1.0))
    await holder.release(held[0])
    assert await holder.renew() == 2
    granted(await other.acquire("acme", PRO, "chat", 1.0))
    assert holder.statistics().lost == 0


async def test_a_retried_acquire_or_settle_takes_nothing_twice(make: Factory, client: Any) -> None:
    store = make()
    lease = granted(await store.acquire("acme", PRO, "chat", 4.0))
    keys = tenant_keys(store._prefix, "acme", "chat")
    token = token_of(lease)
    args = (lease.id, "4.0", "0.0", "30.0", "3600.0", *token.args, "3", "", "chat")
    reply = await store._scripts.eval(SCRIPTS["acquire"], keys.all(), args)  # the same id again
    assert reply[0] == b"ok"
    snap = await store.snapshot("acme", PRO)
    assert (snap.level, snap.in_flight) == (12.0, 1)
    for _ in range(2):  # a settle whose reply was lost, sent again
        await store._scripts.eval(
            SCRIPTS["settle"],
            keys.all(),
            (lease.id, "10.0", "4.0", "0.0", "3600.0", *token.args, "chat"),
        )
    snap = await store.snapshot("acme", PRO)
    assert (snap.level, snap.lane_levels["chat"]) == (6.0, 2.0)


async def test_an_aborted_acquire_gives_back_its_slots_and_cost(make: Factory) -> None:
    store = make()
    lease = granted(await store.acquire("acme", PRO, "chat", 4.0))
    keys = token_of(lease).keys.all()
    await store._scripts.eval(SCRIPTS["release"], keys, (lease.id, "", "1", "3600.0"))
    snap = await store.snapshot("acme", PRO)
    assert (snap.level, snap.lane_levels["chat"], snap.in_flight) == (16.0, 12.0, 0)


async def test_idle_keys_expire_once_full_again(make: Factory, client: Any) -> None:
    store = make(clock=None, key_grace=0.0, lease_ttl=5.0)  # server time
    lease = granted(await store.acquire("acme", PRO, "chat", 4.0))
    keys = tenant_keys(store._prefix, "acme", "chat")
    # 4 units at 4/s: the tenant bucket is full again in 1 s; 4 at 3/s in the lane.
    assert 900 <= await client.pttl(keys.bucket) <= 1000
    assert 1250 <= await client.pttl(keys.lane_bucket) <= 1334
    assert 4900 <= await client.pttl(keys.leases) <= 5000
    await store.release(lease)
    assert await client.exists(keys.leases, keys.lane_leases, keys.costs) == 0  # empty: gone


async def test_server_time_is_the_clock(make: Factory, client: Any) -> None:
    store = make(clock=None)
    seconds, micros = await client.time()
    lease = granted(await store.acquire("acme", PRO, "chat", 1.0))
    assert 0 <= lease.acquired_at - (seconds + micros / 1e6) < 5.0


def test_bad_settings_are_usage_errors(redis_url: str) -> None:
    for options in (
        {"lease_ttl": 0.0},
        {"timeout": -1.0},
        {"timeout": "0.25"},
        {"timeout": None},
        {"lease_ttl": "30"},
        {"lease_ttl": 3.0, "renew_every": 3.0},
        {"renew_every": True},
        {"key_grace": float("nan")},
        {"key_grace": 10**400},
        {"prefix": "a{b"},
    ):
        with pytest.raises(UsageError):
            RedisQuotaStore.from_url(redis_url, **options)
    for url in ("http://127.0.0.1:6399/0", "not a url", "redis://127.0.0.1:port/0"):
        with pytest.raises(UsageError, match="Redis URL"):
            RedisQuotaStore.from_url(url)


def test_bad_failure_settings_are_usage_errors() -> None:
    from slopolicy.backends import CircuitBreaker, FailClosed, FailOpen

    bad: list[tuple[Callable[..., object], dict[str, Any]]] = [
        (FailOpen, {"share": "1"}),
        (FailOpen, {"share": 0.0}),
        (FailClosed, {"min_retry_after": None}),
        (FailClosed, {"min_retry_after": -1}),
        (CircuitBreaker, {"reset_after": "1"}),
        (CircuitBreaker, {"reset_after": float("inf")}),
    ]
    for make, options in bad:
        with pytest.raises(UsageError):
            make(**options)
