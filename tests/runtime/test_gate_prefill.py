"""The gate with the prefill gate: a waiter held back while the engine has
enough prompt work starts when a running request's first token comes (not
at the timer's next guess), or by the timer as the backlog drains; on
asyncio and trio."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from slopolicy import Gate
from tests.runtime.conftest import assert_clean, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


async def _warm(gate: Gate) -> None:
    """One 300-token prompt through prefill in 0.3 s: 1,000 tokens/s learned."""
    async with gate.admit(_request("warm", prompt_tokens=300)) as ticket:
        await anyio.sleep(0.3)
        ticket.tokens(1)
    assert gate.policy.prefill is not None
    assert gate.policy.prefill["interactive"].rate == pytest.approx(1000.0)


@pytest.mark.parametrize("first_token_at", [0.01, None])
async def test_a_held_waiter_starts_on_a_first_token_or_as_the_backlog_drains(
    first_token_at: float | None,
) -> None:
    p = policy(engine={"max_running": 8, "prefill_horizon_s": 0.1})
    started: dict[str, float] = {}
    async with Gate(p) as gate:
        await _warm(gate)
        begin = anyio.current_time()
        release = anyio.Event()

        async def call(name: str) -> None:
            async with gate.admit(_request(name, prompt_tokens=100)) as ticket:
                started[name] = anyio.current_time() - begin
                if name == "a" and first_token_at is not None:
                    await anyio.sleep(first_token_at)
                    ticket.tokens(1)
                await release.wait()

        async with anyio.create_task_group() as group:
            for name in ("a", "c", "b"):  # a and c fill the 100-token budget
                group.start_soon(call, name)
                await anyio.lowlevel.checkpoint()
            await anyio.sleep(0.5)
            release.set()
    assert started["a"] == started["c"] == pytest.approx(0.0, abs=1e-6)
    if first_token_at is not None:  # a's prompt left the backlog: b goes at once
        assert started["b"] == pytest.approx(first_token_at, abs=1e-6)
    else:  # 200 tokens handed over, 100 allowed: 0.1 s at 1,000 tokens/s
        assert started["b"] == pytest.approx(0.1, abs=1e-3)
    assert_clean(p)
