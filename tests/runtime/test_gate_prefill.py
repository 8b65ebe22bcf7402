"""The gate with the prefill budget: a waiter held back while the engine has
enough prompt work starts the moment a running request's first token comes,
and when a running request ends before one; on asyncio and trio."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from slopolicy import Gate
from tests.runtime.conftest import assert_clean, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


async def _warm(gate: Gate) -> None:
    """32 prompts of 100 to 400 tokens through prefill at 1,000 tokens/s."""
    for k in range(32):
        tokens = 100 * (1 + k % 4)
        async with gate.admit(_request(f"warm{k}", prompt_tokens=tokens)) as ticket:
            await anyio.sleep(tokens / 1000)
            ticket.tokens(1)
    assert gate.policy.first_tokens.models["interactive"].rate == pytest.approx(1000.0)


@pytest.mark.parametrize("ends", ["first_token", "failure"])
async def test_a_held_waiter_starts_when_a_prompt_leaves_prefill(ends: str) -> None:
    p = policy(engine={"max_running": 8, "prefill_horizon_s": 0.1})  # a 100-token budget
    started: dict[str, float] = {}
    async with Gate(p) as gate:
        await _warm(gate)
        begin = anyio.current_time()
        release = anyio.Event()

        async def call(name: str) -> None:
            try:
                async with gate.admit(_request(name, prompt_tokens=40)) as ticket:
                    started[name] = anyio.current_time() - begin
                    if name == "a":
                        await anyio.sleep(0.02)
                        if ends == "failure":
                            raise RuntimeError("the engine failed")
                        ticket.tokens(1)
                    await release.wait()
            except RuntimeError:
                pass

        async with anyio.create_task_group() as group:
            for name in ("a", "c", "b"):  # a and c fill the budget
                group.start_soon(call, name)
                await anyio.lowlevel.checkpoint()
            await anyio.sleep(0.5)
            release.set()
    assert started["a"] == started["c"] == pytest.approx(0.0, abs=1e-6)
    assert started["b"] == pytest.approx(0.02, abs=1e-6)  # at a's first token or end
    assert_clean(p)


async def test_calls_that_report_no_first_token_are_held_only_until_one_was_due() -> None:
    """A cold start with a TTFT target: whole calls report no first token,
    so the budget's hold on the calls behind the first lifts at half the
    tightest target, at a wake-up of the gate's own (nothing else happens
    then), and they start within their target instead of expiring."""
    lane = {"name": "interactive", "slo": {"ttft_p95_s": 1.0}, "max_queue_wait_s": 5.0}
    p = policy(lanes=[lane], engine={"max_running": 8, "prefill_horizon_s": 0.1})
    started: dict[str, float] = {}
    async with Gate(p) as gate:
        begin = anyio.current_time()

        async def call(name: str) -> None:
            async with gate.admit(_request(name, prompt_tokens=40)) as ticket:
                started[name] = anyio.current_time() - begin
                await anyio.sleep(2.0)  # the engine computing the whole answer
                ticket.finish(output_tokens=16)

        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c"):
                group.start_soon(call, name)
                await anyio.lowlevel.checkpoint()
    assert started["a"] == pytest.approx(0.0, abs=1e-6)
    assert started["b"] == started["c"] == pytest.approx(0.5, abs=1e-6)
    assert_clean(p)
