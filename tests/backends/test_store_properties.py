"""Redis against memory, step by step: any sequence of acquires, settles, releases,
tier changes and time steps gets the same answers and leaves the same state.

The memory store is TenantQuotas, checked against a naive model (invariant 1
included) in tests/core/test_quotas_machine.py; equality here carries that
over to the Lua scripts. Costs, rates and steps are binary fractions, so the
float arithmetic is exact and equality, waits included, is fair to demand.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slopolicy.backends import Lease, MemoryQuotaStore, QuotaStore
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.errors import UsageError
from slopolicy.testing.clock import ManualClock
from tests.backends.conftest import NO_REDIS_PY

pytest.importorskip("redis", reason=NO_REDIS_PY)
from slopolicy.backends.redis import RedisQuotaStore

FREE = TierSpec(
    "free", "chat", rate=1.0, burst=4.0, max_concurrency=2,
    lane_quotas=(LaneQuotaSpec("chat", 0.5, max_concurrency=1),),
)  # fmt: skip
PRO = TierSpec(
    "pro", "chat", rate=4.0, burst=16.0, max_concurrency=3,
    lane_quotas=(LaneQuotaSpec("chat", 0.5), LaneQuotaSpec("batch", 0.25, 2)),
)  # fmt: skip
# A downgrade of PRO: every bucket smaller, levels carried over and clamped.
LITE = TierSpec(
    "pro-lite", "chat", rate=2.0, burst=8.0, max_concurrency=4,
    lane_quotas=(LaneQuotaSpec("chat", 0.5), LaneQuotaSpec("batch", 0.25, 2)),
)  # fmt: skip
UNLIMITED = TierSpec("unlimited", "chat", lane_quotas=(LaneQuotaSpec("batch", 0.5, 1),))
# Tenant "c" starts on PRO and may move to LITE (once: the documented divergence
# is a lane bucket first used after an *upgrade*; see docs/scale-out.md).
TIERS = {"a": FREE, "b": PRO, "c": PRO, "d": UNLIMITED}
LANES = ("chat", "batch", "other")


@dataclass(frozen=True)
class Op:
    kind: str
    tenant: str = "a"
    lane: str = "chat"
    amount: float = 0.0
    index: int = 0


_costs = st.integers(0, 80).map(lambda n: n / 4)
ops = st.one_of(
    st.builds(
        Op, st.just("acquire"), st.sampled_from(sorted(TIERS)), st.sampled_from(LANES), _costs
    ),
    st.builds(Op, st.just("settle"), amount=_costs, index=st.integers(0, 30)),
    st.builds(Op, st.just("release"), index=st.integers(0, 30)),
    st.builds(Op, st.just("advance"), amount=st.integers(0, 40).map(lambda n: n / 8)),
    st.builds(Op, st.just("downgrade")),
)


def _answer(result: Lease | QuotaRefusal) -> tuple[object, ...]:
    if isinstance(result, Lease):
        return ("lease", result.tenant, result.lane, result.cost, result.acquired_at)
    return ("refused", result.reason, result.message, result.retry_after, result.http_status)


async def _state(store: QuotaStore, tiers: dict[str, TierSpec]) -> list[tuple[object, ...]]:
    snaps = [await store.snapshot(tenant, tier) for tenant, tier in sorted(tiers.items())]
    return [(s.in_flight, dict(s.lane_in_flight), s.level, dict(s.lane_levels)) for s in snaps]


async def _run(url: str, steps: list[Op]) -> None:
    memory_clock, redis_clock = ManualClock(), ManualClock()
    memory = MemoryQuotaStore(clock=memory_clock)
    prefix = f"prop-{secrets.token_hex(4)}"
    async with RedisQuotaStore.from_url(
        url, prefix=prefix, clock=redis_clock, key_grace=3600.0, timeout=5.0
    ) as redis:
        stores: tuple[QuotaStore, QuotaStore] = (memory, redis)
        leases: tuple[list[Lease], list[Lease]] = ([], [])
        tiers = dict(TIERS)  # the tier each tenant's next acquire passes
        seen = dict(TIERS)  # the tier each tenant last acquired with: snapshots read it
        try:
            for step in steps:
                answers: list[Any] = []
                for store, held in zip(stores, leases, strict=True):
                    answers.append(await _apply(store, held, step, tiers))
                if step.kind == "advance":
                    memory_clock.advance(step.amount)
                    redis_clock.advance(step.amount)
                elif step.kind == "downgrade":
                    tiers["c"] = LITE
                elif step.kind == "acquire":
                    seen[step.tenant] = tiers[step.tenant]
                assert answers[0] == answers[1], (step, answers)
                assert await _state(memory, seen) == await _state(redis, seen), step
                assert memory.statistics().in_flight == redis.statistics().in_flight
        finally:
            await redis._client.execute_command("DEL", *_keys(prefix))


def _keys(prefix: str) -> list[str]:
    from slopolicy.backends._scripts import tenant_keys

    keys = [prefix + ":none"]
    for tenant in TIERS:
        for lane in LANES:
            keys += tenant_keys(prefix, tenant, lane).all()
    return keys


async def _apply(store: QuotaStore, held: list[Lease], step: Op, tiers: dict[str, TierSpec]) -> Any:
    if step.kind == "acquire":
        result = await store.acquire(step.tenant, tiers[step.tenant], step.lane, step.amount)
        if isinstance(result, Lease):
            held.append(result)
        return _answer(result)
    if step.kind in ("settle", "release") and held:
        lease = held[step.index % len(held)]
        if step.kind == "release":
            return await store.release(lease)
        try:
            await store.settle(lease, step.amount)
        except UsageError as error:
            return str(error).split(":")[0]
        return lease.cost
    return None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(ops, min_size=1, max_size=40))
def test_redis_answers_as_memory_does(redis_url: str, steps: list[Op]) -> None:
    asyncio.run(_run(redis_url, steps))
