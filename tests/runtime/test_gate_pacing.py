"""The gate with ``engine.dispatch_rate``: waiters start at the rate, in fair
order, woken by the timer (no polling), on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Expired, Gate
from tests.runtime.conftest import assert_clean, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


async def test_waiters_start_at_the_dispatch_rate_and_in_fair_order() -> None:
    p = policy(
        engine={"max_running": 8, "dispatch_rate": 1000.0, "dispatch_burst": 0.0},
        cost={"alpha": 1.0, "beta": 0.0},
    )
    starts: list[tuple[str, float]] = []
    async with Gate(p) as gate:
        begin = anyio.current_time()

        async def wait(name: str, tenant: str, prompt: int) -> None:
            async with gate.admit(_request(name, tenant, prompt_tokens=prompt)):
                starts.append((name, anyio.current_time() - begin))

        async with anyio.create_task_group() as group:
            for k in range(3):  # arriving in this order, a millisecond apart
                for tenant, prompt in (("a", 200), ("b", 100)):
                    group.start_soon(wait, f"{tenant}{k}", tenant, prompt)
                    await anyio.sleep(0.001)
    names = [name for name, _ in starts]
    # Fair order in cost units (a costs twice what b does), not arrival order:
    # a0 starts at once; b, which was behind, catches up; then a goes on.
    assert names == ["a0", "b0", "b1", "b2", "a1", "a2"]
    # Each start waits for the ones before it to be paid at 1,000 cost units/s.
    cost = {name: 200 if name.startswith("a") else 100 for name in names}
    paid = [sum(cost[name] for name in names[:k]) / 1000 for k in range(len(names))]
    assert [at for _, at in starts] == pytest.approx(paid, abs=1e-6)
    assert_clean(p)


async def test_a_paced_waiter_still_expires_at_its_deadline() -> None:
    p = policy(
        engine={"max_running": 8, "dispatch_rate": 10.0, "dispatch_burst": 0.0},
        cost={"alpha": 1.0, "beta": 0.0},
    )
    async with Gate(p) as gate:
        begin = anyio.current_time()
        first = await gate.admit(_request("first", prompt_tokens=100))  # 10 s of rate
        with pytest.raises(Expired):
            await gate.admit(_request("late", prompt_tokens=10))  # the lane waits 5 s at most
        assert anyio.current_time() - begin == pytest.approx(5.0)
        first.finish()
    assert_clean(p)
