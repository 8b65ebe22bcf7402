"""Task completion rate and task e2e p95 per lane, as observable gauges."""

from __future__ import annotations

import pytest

from slopolicy import Gate, Policy, PolicyConfig, Request, TaskRef
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.telemetry import names as n
from tests.telemetry.otel import Otel

pytestmark = pytest.mark.anyio


async def test_a_completed_task_shows_in_the_lane_gauges(otel: Otel) -> None:
    config = PolicyConfig.from_dict({"lanes": [{"name": "agent", "task": {"deadline_s": 60}}]})
    policy = Policy(config, counter=HeuristicCounter())
    async with Gate(policy, telemetry=otel.telemetry()) as gate:
        assert n.TASK_COMPLETION not in otel.metrics()  # no task has ended: no value
        for turn in range(2):
            ref = TaskRef("t1", turn, expected_turns=2)
            ticket = gate.admit_nowait(Request(tenant="a", prompt_tokens=10, task=ref))
            async with ticket:
                pass  # a turn with no output, completed
        metrics = otel.metrics()
    assert metrics[n.TASK_COMPLETION].value(slopolicy__lane="agent") == 1.0
    assert metrics[n.TASK_DURATION_P95].value(slopolicy__lane="agent") >= 0.0
