"""The quota store contract on a three-node Redis Cluster: a tenant's keys share
one hash slot, so every script runs on the node that owns them."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

from slopolicy.backends._scripts import tenant_keys
from slopolicy.testing.clock import ManualClock
from slopolicy.testing.redis_server import LocalCluster
from slopolicy.testing.store_contract import PRO, QuotaStoreContract, granted
from tests.backends.conftest import NO_REDIS_PY

pytest.importorskip("redis", reason=NO_REDIS_PY)
from redis.asyncio.cluster import RedisCluster

from slopolicy.backends.redis import RedisQuotaStore


@pytest.fixture(scope="module")
def cluster(redis_binary: str) -> Iterator[LocalCluster]:
    with LocalCluster(3, executable=redis_binary) as running:
        yield running


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(cluster: LocalCluster, clock: ManualClock) -> AsyncIterator[RedisQuotaStore]:
    client = RedisCluster.from_url(cluster.url)
    prefix = f"cluster-{secrets.token_hex(4)}"
    async with RedisQuotaStore(
        client, owns_client=True, prefix=prefix, clock=clock, key_grace=3600.0, timeout=5.0
    ) as on_cluster:
        yield on_cluster


class TestQuotaStoreContractOnCluster(QuotaStoreContract):
    """Every contract test, on the cluster."""


@pytest.mark.anyio
async def test_tenants_spread_over_the_nodes_and_renew_in_one_pass(
    store: RedisQuotaStore,
) -> None:
    client = store._client
    assert isinstance(client, RedisCluster)
    # Twelve tenants at least, and on until every node holds one: the prefix
    # is random, so twelve alone miss a node about one run in forty.
    tenants: list[str] = []
    leases = []
    nodes: set[str] = set()
    for k in range(64):
        if len(tenants) >= 12 and len(nodes) == 3:
            break
        tenant = f"tenant-{k}"
        leases.append(granted(await store.acquire(tenant, PRO, "chat", 1.0)))
        node = client.get_node_from_key(tenant_keys(store._prefix, tenant, "chat").leases)
        assert node is not None
        nodes.add(node.name)
        tenants.append(tenant)
    assert len(nodes) == 3  # the test exercises every node
    assert await store.renew() == len(tenants)
    for lease in leases:
        assert await store.release(lease)
    for tenant in tenants:
        assert (await store.snapshot(tenant, PRO)).in_flight == 0
    assert store.statistics().failures == 0
