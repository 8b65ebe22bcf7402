"""Two Gates on one Redis: two replicas sharing a tenant's caps and bucket (asyncio)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from slopolicy import Gate, Policy, Reason, Rejected
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.clock import ManualClock
from tests.backends.conftest import NO_REDIS_PY
from tests.runtime.conftest import assert_clean, config, make_request

pytestmark = pytest.mark.anyio

pytest.importorskip("redis", reason=NO_REDIS_PY)
from slopolicy.backends.redis import RedisQuotaStore  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def stores(
    redis_url: str, prefix: str, clock: ManualClock
) -> AsyncIterator[tuple[RedisQuotaStore, RedisQuotaStore]]:
    # Lease time runs on the manual clock; renewals every 20 ms of real time.
    options = {"prefix": prefix, "clock": clock, "key_grace": 3600.0, "renew_every": 0.02}
    async with (
        RedisQuotaStore.from_url(redis_url, **options) as one,
        RedisQuotaStore.from_url(redis_url, **options) as two,
    ):
        yield one, two


def _policy() -> Policy:
    return Policy(config(), counter=HeuristicCounter())


async def test_two_gates_share_a_tenants_cap_and_renew_while_a_ticket_lives(
    stores: tuple[RedisQuotaStore, RedisQuotaStore], clock: ManualClock
) -> None:
    one, two = stores
    first, second = _policy(), _policy()
    async with Gate(first, quota_store=one) as a, Gate(second, quota_store=two) as b:
        async with a.admit(make_request("x", "small")):  # tier "tiny": one in flight
            for _ in range(4):  # 4 x 20 s of lease time: past the 30 s ttl, renewed
                with pytest.raises(Rejected) as caught:
                    await b.admit(make_request("y", "small"))
                assert caught.value.reason is Reason.CONCURRENCY_LIMITED
                clock.advance(20.0)
                renewed = one.statistics()
                await anyio.sleep(0.1)  # real time: a few renewals in a's task group
                assert one.statistics().lost == renewed.lost == 0
        await anyio.sleep(0.05)  # a's release task reaches Redis
        async with b.admit(make_request("y", "small")) as ticket:
            assert ticket.tenant == "small"
    for policy in (first, second):
        assert_clean(policy)
    assert one.statistics().in_flight == two.statistics().in_flight == 0
    assert one.statistics().pending == two.statistics().pending == 0


async def test_a_rate_limited_tenant_gets_429_with_the_wait_across_gates(
    stores: tuple[RedisQuotaStore, RedisQuotaStore],
) -> None:
    one, two = stores
    first, second = _policy(), _policy()
    async with Gate(first, quota_store=one) as a, Gate(second, quota_store=two) as b:
        # "tiny": 10 cost units/s, burst 300. Estimated 242 cost units, settled
        # at 240 (no output): 60 left, in Redis, for either gate.
        async with a.admit(make_request("x", "small", prompt_tokens=240, max_new_tokens=1)):
            pass
        await anyio.sleep(0.05)
        with pytest.raises(Rejected) as caught:
            await b.admit(make_request("y", "small", prompt_tokens=240, max_new_tokens=1))
        assert (caught.value.reason, caught.value.http_status) == (Reason.RATE_LIMITED, 429)
        assert caught.value.retry_after == (242.0 - 60.0) / 10.0
    for policy in (first, second):
        assert_clean(policy)
