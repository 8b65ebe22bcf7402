"""Task completion rate and task e2e p95 per lane, as observable gauges; ended
tasks per lane, tenant label and outcome, as a histogram."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Gate, Policy, PolicyConfig, Rejected, Request, TaskRef
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.tasks import TaskEnded, TaskOutcome
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


async def test_ended_tasks_are_counted_per_tenant_label_and_outcome(otel: Otel) -> None:
    config = PolicyConfig.from_dict(
        {"lanes": [{"name": "agent", "slo_deadline": False, "task": {"deadline_s": 10}}]}
    )
    policy = Policy(config, counter=HeuristicCounter())
    async with Gate(policy, telemetry=otel.telemetry(tenants=["big"])) as gate:
        for tenant in ("big", "x", "y"):  # one completed task each, of 2 turns, 1 s apart
            for turn in range(2):
                ref = TaskRef(f"{tenant}-done", turn, expected_turns=2)
                async with gate.admit(Request(tenant=tenant, prompt_tokens=5, task=ref)):
                    await anyio.sleep(0.5)
        async with gate.admit(Request(tenant="x", prompt_tokens=5, task=TaskRef("x-late", 0))):
            pass
        await anyio.sleep(11.0)  # past its deadline: its next turn is refused, it fails
        with pytest.raises(Rejected):
            await gate.admit(Request(tenant="x", prompt_tokens=5, task=TaskRef("x-late", 1)))
        metrics = otel.metrics()
    ended = metrics[n.TASK_DURATION]
    assert ended.unit == "s"
    big = ended.histogram(
        slopolicy__lane="agent", slopolicy__tenant="big", slopolicy__task__outcome="completed"
    )
    assert big.count == 1
    assert big.sum == pytest.approx(1.0)
    others = ended.histogram(
        slopolicy__lane="agent", slopolicy__tenant="other", slopolicy__task__outcome="completed"
    )
    assert others.count == 2  # x and y: bounded labels, summable counts
    failed = ended.histogram(
        slopolicy__lane="agent", slopolicy__tenant="other", slopolicy__task__outcome="failed"
    )
    assert failed.count == 1
    assert {dict(attrs)[n.TENANT] for attrs in ended.attribute_sets()} == {"big", "other"}
    # Closed, the gate no longer listens: a later end is not counted by it.
    late = TaskEnded(
        id="z",
        tenant="big",
        lane="agent",
        outcome=TaskOutcome.COMPLETED,
        why="completed",
        started_at=0.0,
        ended_at=1.0,
        turns=1,
    )
    policy.task_trackers.record(late)
    again = otel.metrics()[n.TASK_DURATION].histogram(
        slopolicy__lane="agent", slopolicy__tenant="big", slopolicy__task__outcome="completed"
    )
    assert again.count == 1
