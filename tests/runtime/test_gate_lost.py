"""Requests the engine is too far behind to serve in time, through the Gate,
on asyncio and trio: they end as ``Expired`` at once, everything released."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Expired, Gate, Outcome, Policy
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.fake_engine import FakeEngine
from tests.runtime.conftest import assert_clean, config, make_request

pytestmark = pytest.mark.anyio


def _policy() -> Policy:
    lanes = [
        {
            "name": "interactive",
            "max_prompt_tokens": 2000,
            "queue_capacity": 64,
            "max_queue_wait_s": 30.0,
            "slo": {"ttft_p95_s": 0.55},
        }
    ]
    # The prefill budget off: this is the TTFT check alone.
    engine = {"max_running": 64, "prefill_horizon_s": 0}
    policy = Policy(config(lanes=lanes, engine=engine), counter=HeuristicCounter())
    # The lane's engine TTFT as 32 earlier requests saw it: 10,000 prompt tokens a second.
    model = policy.first_tokens.models["interactive"]
    for i in range(32):
        tokens = 500 + 500 * (i % 4)
        model.observe(tokens, tokens / 10_000)
    return policy


async def test_a_burst_past_what_the_engine_prefills_in_time_expires_at_once() -> None:
    policy = _policy()
    engine = FakeEngine(ttft=0.05, per_token=0.01)
    served: list[str] = []
    lost: list[Expired] = []

    async def one(gate: Gate, name: str) -> None:
        try:
            async with gate.admit(make_request(name, prompt_tokens=1000)) as ticket:
                async for _ in ticket.track(engine.stream(ticket.request)):
                    pass
            served.append(name)
        except Expired as refusal:
            lost.append(refusal)

    async with Gate(policy) as gate:
        started = anyio.current_time()
        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(one, gate, f"b{i}")
        elapsed = anyio.current_time() - started
    # 5,000 prompt tokens ahead is 0.5 s of the 0.55 s target: five can attain.
    assert len(served) == 5
    assert len(lost) == 15
    assert {refusal.finished.outcome for refusal in lost} == {Outcome.EXPIRED}
    assert all(refusal.finished.e2e < 0.05 for refusal in lost)  # told at once, not at 0.55 s
    assert "TTFT target" in str(lost[0])
    assert elapsed < 5.0
    assert_clean(policy)
