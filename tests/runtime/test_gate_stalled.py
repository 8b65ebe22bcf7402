"""The gate and a stalled start: a running request with no first token by
its lane's p99 TTFT target while the engine reports preemptions is revoked
(:attr:`Revocation.STALLED`): its tracked stream raises
:class:`~slopolicy.Revoked` and the engine's stream is closed, on the gate's
own timer. Calm, the same stream is waited for. On asyncio and trio, in
virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from slopolicy import (
    EngineSignals,
    Gate,
    Outcome,
    Policy,
    PolicyConfig,
    Request,
    Revocation,
    Revoked,
)
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.telemetry import Telemetry

pytestmark = pytest.mark.anyio

#: The lane's p99 TTFT target (seconds).
P99 = 2.0
#: When the engine's first token would come (seconds after the start).
FIRST = 5.0


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 1.0, "ttft_p99_s": P99},
                    "max_queue_wait_s": 60.0,
                }
            ],
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


async def _engine(closed: list[float]) -> AsyncIterator[str]:
    """An engine computing the prompt again and again: the first token at
    :data:`FIRST`, then three more; ``closed`` hears when it stops."""
    try:
        await anyio.sleep(FIRST)
        for _ in range(4):
            yield "token"
            await anyio.sleep(0.1)
    finally:
        closed.append(anyio.current_time())


async def run_stalled(
    preempting: bool, telemetry: Telemetry | bool = True
) -> tuple[BaseException | None, list[float], float]:
    """One request through a gate (``telemetry`` as the gate takes it); with ``preempting``,
    the engine reports preemptions at 0.5 s. Its error (``None``: it
    completed), when the engine's stream was closed and when it ended
    (seconds from the start)."""
    policy = _policy()
    closed: list[float] = []
    error: BaseException | None = None
    async with Gate(policy, telemetry=telemetry) as gate:
        begin = anyio.current_time()

        async def report() -> None:
            await anyio.sleep(0.5)
            gate.observe(EngineSignals(observed_at=gate.clock(), preemption_rate=3.0))

        async with anyio.create_task_group() as group:
            if preempting:
                group.start_soon(report)
            request = Request(id="r", tenant="t", prompt_tokens=100, max_new_tokens=8)
            try:
                async with gate.admit(request) as ticket:
                    async for _ in ticket.track(_engine(closed)):
                        pass
            except Revoked as raised:
                error = raised
        ended = anyio.current_time() - begin
    return error, [t - begin for t in closed], ended


async def test_a_stalled_stream_is_revoked_at_the_p99_target_while_the_engine_preempts() -> None:
    error, closed, ended = await run_stalled(preempting=True)
    assert isinstance(error, Revoked)
    assert error.http_status == 503
    assert error.finished.outcome is Outcome.REVOKED
    assert error.finished.revoked_for is Revocation.STALLED
    assert "no first token" in error.message
    # On the gate's timer at the bound, not when the engine's token came.
    assert ended == pytest.approx(P99)
    assert closed == [pytest.approx(P99)]


async def test_calm_the_late_stream_is_waited_for() -> None:
    error, closed, ended = await run_stalled(preempting=False)
    assert error is None
    assert ended == pytest.approx(FIRST + 0.4)
    assert closed == [pytest.approx(FIRST + 0.4)]
