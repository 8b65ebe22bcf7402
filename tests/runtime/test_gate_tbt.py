"""Time between tokens through the Gate: a stream that stalls mid-way, on asyncio and trio."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from slopolicy import Gate, Outcome, Policy
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.fake_engine import Chunk, FakeEngine
from tests.runtime.conftest import assert_clean, config, make_request

pytestmark = pytest.mark.anyio


def _policy(**slo: Any) -> Policy:
    lanes = [{"name": "interactive", "max_new_tokens": 64, "slo": {"ttft_p95_s": 2.0, **slo}}]
    return Policy(config(lanes=lanes), counter=HeuristicCounter())


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


async def test_a_long_gap_mid_stream_is_a_stall_and_a_tbt_miss() -> None:
    p = _policy(tbt_p99_s=0.1)
    # 20 tokens in 2-token chunks, 20 ms a token; the chunk holding token 10
    # comes 1.5 s late (a long prefill landed in the engine's batch).
    engine = FakeEngine(ttft=0.1, per_token=0.02, tokens_per_chunk=2, stall_at=10, stall_s=1.5)
    async with Gate(p) as gate:
        async with gate.admit(make_request("stalled", max_new_tokens=20)) as ticket:
            async for _ in ticket.track(engine.stream(ticket.request), tokens_of=_tokens):
                pass
        stalled = ticket.finished
        async with gate.admit(make_request("smooth", max_new_tokens=20)) as ticket:
            stream = engine.stream(ticket.request, stall_at=10**6)
            async for _ in ticket.track(stream, tokens_of=_tokens):
                pass
        smooth = ticket.finished
        now = anyio.current_time()
    assert stalled is not None
    assert smooth is not None
    assert stalled.outcome is smooth.outcome is Outcome.COMPLETED
    assert (stalled.gaps, stalled.slow_gaps) == (9, 1)  # ten chunks: nine gaps, one long
    assert (smooth.gaps, smooth.slow_gaps) == (9, 0)
    assert stalled.tpot is not None
    assert stalled.tpot < 0.1
    snapshot = p.slo_trackers.lane("interactive").snapshot(now=now)
    assert snapshot.completed == 2
    assert snapshot.attained == 1  # the stall missed the TBT target
    assert snapshot.tbt_stalls == 1
    assert snapshot.tbt is not None
    assert snapshot.tbt.count == 18
    assert snapshot.tbt.max == pytest.approx(1.54)
    assert snapshot.tbt.p50 == pytest.approx(0.04, rel=0.01)  # a chunk is one arrival
    assert_clean(p)


async def test_without_a_tbt_target_the_stall_is_counted_and_misses_nothing() -> None:
    p = _policy()
    engine = FakeEngine(ttft=0.1, per_token=0.02, stall_at=5, stall_s=0.5)
    async with Gate(p) as gate:
        async with gate.admit(make_request("r", max_new_tokens=10)) as ticket:
            async for _ in ticket.track(engine.stream(ticket.request)):
                pass
        now = anyio.current_time()
    snapshot = p.slo_trackers.lane("interactive").snapshot(now=now)
    assert snapshot.attained == snapshot.completed == 1
    assert snapshot.tbt_stalls == 1  # 0.52 s >= the default 0.2 s
    assert p.statistics().tbt_p99["interactive"] == pytest.approx(0.02, rel=0.01)


async def test_tokens_reported_by_hand_measure_the_same_gaps() -> None:
    p = _policy(tbt_p99_s=0.1)
    async with Gate(p) as gate, gate.admit(make_request("r")) as ticket:
        for wait in (0.05, 0.05, 0.3, 0.05):
            await anyio.sleep(wait)
            ticket.tokens(3)
        finished = ticket.finish()
    assert (finished.gaps, finished.slow_gaps) == (3, 1)
