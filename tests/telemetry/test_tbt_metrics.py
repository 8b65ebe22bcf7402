"""The TBT histogram and the stall counter, per lane, from a stream that stalls mid-way."""

from __future__ import annotations

import pytest

from slopolicy import Gate, Policy
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.telemetry import names as n
from slopolicy.testing.fake_engine import Chunk, FakeEngine
from tests.runtime.conftest import config, make_request
from tests.telemetry.otel import Otel

pytestmark = pytest.mark.anyio


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


async def test_each_gap_lands_in_its_lanes_histogram_and_stalls_are_counted(otel: Otel) -> None:
    lanes = [
        {"name": "interactive", "slo": {"tbt_p99_s": 0.1}},  # stalls at 0.1 s
        {"name": "heavy", "slo": {"tbt_stall_s": 1.0}},  # no target; stalls at 1 s
    ]
    p = Policy(config(lanes=lanes), counter=HeuristicCounter())
    engine = FakeEngine(ttft=0.1, per_token=0.02, tokens_per_chunk=2, stall_at=4, stall_s=0.5)
    async with Gate(p, telemetry=otel.telemetry()) as gate:
        for lane in ("interactive", "heavy"):
            request = make_request(lane, max_new_tokens=8, lane=lane)
            async with gate.admit(request) as ticket:
                async for _ in ticket.track(engine.stream(ticket.request), tokens_of=_tokens):
                    pass
            assert ticket.lane == lane
    metrics = otel.metrics()
    tbt = metrics[n.TBT]
    for lane in ("interactive", "heavy"):
        point = tbt.histogram(slopolicy__lane=lane)
        assert point.count == 3  # four chunks: three gaps
        assert point.sum == pytest.approx(0.04 + 0.54 + 0.04)
    stalls = metrics[n.STALLS]
    assert (stalls.kind, stalls.unit, stalls.monotonic) == ("sum", "{gap}", True)
    assert stalls.value(slopolicy__lane="interactive") == 1  # 0.54 s >= 0.1 s
    assert {dict(a).get("slopolicy.lane") for a in stalls.attribute_sets()} == {"interactive"}
