"""Redis for the backend tests.

``SLOPOLICY_REDIS_URL`` (set by ``.ci/run``) names a server to share; without
it the session starts its own ``redis-server`` on a free loopback port. With
neither, the Redis tests skip and say why, except where
``SLOPOLICY_REQUIRE_REDIS`` is set (``.ci/run`` sets it): there a missing
Redis, or a missing redis-py, fails the run. Each test gets its own key
prefix, and its keys are deleted afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import NoReturn

import pytest

from slopolicy.backends import MemoryQuotaStore, QuotaStore
from slopolicy.testing.clock import ManualClock
from slopolicy.testing.redis_server import RedisServer, redis_server_path

URL_VARIABLE = "SLOPOLICY_REDIS_URL"
REQUIRE_VARIABLE = "SLOPOLICY_REQUIRE_REDIS"
NO_REDIS_PY = "the Redis tests need redis-py: pip install 'slopolicy[redis]'"

if os.environ.get(REQUIRE_VARIABLE) and importlib.util.find_spec("redis") is None:
    # Test modules skip themselves without redis-py (importorskip); where
    # Redis is required that must fail instead, before any of them is collected.
    raise RuntimeError(f"{NO_REDIS_PY} ({REQUIRE_VARIABLE} is set)")


def missing(reason: str) -> NoReturn:
    """Skip the test, or fail it where Redis is required."""
    if os.environ.get(REQUIRE_VARIABLE):
        pytest.fail(f"{reason} ({REQUIRE_VARIABLE} is set: Redis must be available)", pytrace=False)
    pytest.skip(reason)


def require_redis_py() -> None:
    if importlib.util.find_spec("redis") is None:
        missing(NO_REDIS_PY)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server's URL: ``SLOPOLICY_REDIS_URL``, or one started for the session."""
    require_redis_py()
    url = os.environ.get(URL_VARIABLE)
    if url:
        yield url
        return
    if redis_server_path() is None:
        missing(
            f"no Redis: set {URL_VARIABLE} or install redis-server (apt-get install redis-server)"
        )
    with RedisServer() as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_binary() -> str:
    """The ``redis-server`` executable, for tests that kill and restart their own."""
    require_redis_py()
    path = redis_server_path()
    if path is None:
        missing("this test kills and restarts redis-server: apt-get install redis-server")
    return path


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    name = f"test-{secrets.token_hex(4)}"
    yield name
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{name}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory-asyncio", "memory-trio", "redis-asyncio"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend(store_kind: str) -> str:
    # redis-py's asyncio client does not run on trio; memory runs on both.
    return store_kind.split("-")[1]


@pytest.fixture
async def store(
    store_kind: str, clock: ManualClock, request: pytest.FixtureRequest
) -> AsyncIterator[QuotaStore]:
    """The store under test, on the test's manual clock."""
    if store_kind.startswith("memory"):
        yield MemoryQuotaStore(clock=clock)
        return
    from slopolicy.backends.redis import RedisQuotaStore

    url = request.getfixturevalue("redis_url")
    prefix = request.getfixturevalue("prefix")
    # Virtual time: keys must not expire by the wall clock under the test's feet.
    async with RedisQuotaStore.from_url(
        url, prefix=prefix, clock=clock, key_grace=3600.0, timeout=5.0
    ) as redis_store:
        yield redis_store
