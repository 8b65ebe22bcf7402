"""Tool time counted against the task's budget: ``gate.tool(..., task=...)``,
on asyncio and trio (virtual time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slopolicy import (
    Gate,
    Policy,
    PolicyConfig,
    Rejected,
    Request,
    TaskRef,
    ToolOutcome,
    ToolTimeout,
)
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.errors import UsageError
from slopolicy.runtime.http import error_response

pytestmark = pytest.mark.anyio

REF = TaskRef("t", 0, expected_turns=3)


def _gate(deadline_s: float = 10.0, idle_timeout_s: float = 60.0) -> Gate:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "agent",
                    "slo_deadline": False,
                    "task": {"deadline_s": deadline_s, "idle_timeout_s": idle_timeout_s},
                }
            ],
            "tools": {"limits": {"search": {"max_concurrency": 1}, "*": {}}},
            "ladder": {"enabled": False},
        }
    )
    return Gate(Policy(config, counter=HeuristicCounter()))


async def _turn(gate: Gate, ref: TaskRef, tenant: str = "a") -> None:
    async with gate.admit(Request(tenant=tenant, prompt_tokens=5, task=ref)):
        pass


async def _hold(gate: Gate, tenant: str, seconds: float, task: TaskRef | str | None) -> None:
    async with gate.tool(tenant=tenant, name="search", task=task):
        await anyio.sleep(seconds)


async def test_waited_and_run_time_counts_against_the_tasks_budget() -> None:
    async with _gate() as gate, anyio.create_task_group() as group:
        await _turn(gate, REF)
        start = gate.clock()
        group.start_soon(_hold, gate, "b", 1.0, None)  # another tenant holds the one slot
        await anyio.sleep(0.1)
        async with gate.tool(tenant="a", name="search", task=REF) as call:
            await anyio.sleep(2.0)
        async with gate.tool(tenant="a", name="fetch", task="t") as by_id:  # the id will do
            await anyio.sleep(0.5)
        assert call.wait_s == pytest.approx(0.9)
        budget = gate.policy.tasks.budget(TaskRef("t", 1, expected_turns=3), now=gate.clock())
        assert budget.tool_s == pytest.approx(call.time_s + by_id.time_s) == pytest.approx(3.4)
        assert budget.remaining == pytest.approx(10.0 - (gate.clock() - start))
        assert budget.remaining is not None
        assert budget.per_turn == pytest.approx(budget.remaining / 2)
        await _turn(gate, TaskRef("t", 1, expected_turns=3))  # the task goes on
        # A call without a task, or of a task not under way, counts against nothing.
        await _hold(gate, "a", 1.0, None)
        await _hold(gate, "a", 1.0, "not-begun")
        assert gate.policy.tasks.budget(REF, now=gate.clock()).tool_s == pytest.approx(3.4)
        assert "not-begun" not in gate.policy.tasks


async def test_a_call_runs_and_waits_no_longer_than_its_tasks_deadline() -> None:
    async with _gate(deadline_s=3.0) as gate, anyio.create_task_group() as group:
        start = gate.clock()
        await _turn(gate, REF)
        with pytest.raises(Rejected) as cut:
            async with gate.tool(tenant="a", name="fetch", task=REF, timeout_s=30.0) as call:
                await anyio.sleep(10.0)
        assert (cut.value.code, cut.value.http_status) == ("task_deadline_lost", 408)
        assert not isinstance(cut.value, ToolTimeout)  # not the tool's fault:
        assert call.outcome is ToolOutcome.CANCELLED  # it says nothing of the tool's rates
        assert gate.clock() - start == pytest.approx(3.0)  # cut at the task's deadline
        assert gate.policy.tasks.budget(REF, now=gate.clock()).tool_s == pytest.approx(3.0)
        with pytest.raises(ToolTimeout):  # the tool's own timeout, when it comes first
            async with gate.tool(tenant="a", name="fetch", task="other", timeout_s=1.0):
                await anyio.sleep(10.0)

    async with _gate(deadline_s=3.0) as gate, anyio.create_task_group() as group:
        start = gate.clock()
        await _turn(gate, REF)
        group.start_soon(_hold, gate, "b", 10.0, None)
        await anyio.sleep(0.1)
        with pytest.raises(Rejected) as waited:
            await _hold(gate, "a", 1.0, REF)
        assert waited.value.code == "expired"
        assert gate.clock() - start == pytest.approx(3.0)  # it gave up waiting at the deadline
        group.cancel_scope.cancel()


async def test_a_lost_or_foreign_task_refuses_the_call_before_it_holds_anything() -> None:
    async with _gate(deadline_s=3.0) as gate:
        await _turn(gate, REF)
        with pytest.raises(Rejected) as foreign:
            await _hold(gate, "b", 1.0, REF)
        assert (foreign.value.code, foreign.value.http_status) == ("task_out_of_order", 409)
        await anyio.sleep(3.0)
        with pytest.raises(Rejected) as lost:
            await _hold(gate, "a", 1.0, REF)
        assert (lost.value.code, lost.value.http_status) == ("task_deadline_lost", 408)
        assert error_response(lost.value)[0] == 408
        stats = gate.policy.tools.statistics(now=gate.clock())
        assert (stats.in_flight, sum(tool.started for tool in stats.tools)) == (0, 0)


@pytest.mark.parametrize("with_task", [True, False])
async def test_a_task_calling_tools_is_not_idle(with_task: bool) -> None:
    async with _gate(deadline_s=100.0, idle_timeout_s=5.0) as gate:
        await _turn(gate, REF)
        for _ in range(3):  # 9 s of tool calls between turns, each under the idle timeout
            await _hold(gate, "a", 3.0, REF if with_task else None)
        await anyio.lowlevel.checkpoint()
        gate.policy.tasks.sweep(now=gate.clock())
        stats = gate.policy.tasks.statistics()
        assert (stats.active, stats.abandoned) == ((1, 0) if with_task else (0, 1))


@pytest.mark.parametrize("task", [3, "", "x" * 257, TaskRef])
async def test_a_bad_task_raises_before_anything_is_held(task: Any) -> None:
    async with _gate() as gate:
        with pytest.raises(UsageError, match="task must be"):
            gate.tool(tenant="a", name="search", task=task)
        with pytest.raises(UsageError, match="tenant"):
            gate.tool(tenant="", name="search", task="t")
        assert gate.policy.tools.statistics(now=gate.clock()).tenants == 0


@dataclass(frozen=True, slots=True)
class Call:
    arrive: float
    tenant: str
    seconds: float
    fail: bool
    cancel_after: float | None


_TIMES = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])
calls = st.builds(
    Call,
    arrive=_TIMES,
    tenant=st.sampled_from(["a", "a", "b"]),
    seconds=_TIMES,
    fail=st.booleans(),
    cancel_after=st.none() | _TIMES,
)


@dataclass
class Seen:
    entered: float = 0.0  # time_s of the calls that entered their block
    unseen: float = 0.0  # time of the callers that never did (a bound)
    ended_late: int = 0  # calls of the task that ended past its deadline


async def _client(gate: Gate, call: Call, deadline: float, seen: Seen) -> None:
    await anyio.sleep(call.arrive)
    start = gate.clock()
    tool = gate.tool(tenant=call.tenant, name="search", task="t")
    with anyio.CancelScope() as scope:
        if call.cancel_after is not None:
            scope.deadline = start + call.cancel_after
        try:
            async with tool:
                await anyio.sleep(call.seconds)
                if call.fail:
                    raise RuntimeError("the tool failed")
        except (Rejected, RuntimeError):
            pass
    if call.tenant != "a":
        return
    if tool.lease is None:
        seen.unseen += gate.clock() - start
    else:
        seen.entered += tool.time_s
        seen.ended_late += gate.clock() > deadline + 1e-9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(calls, min_size=1, max_size=10), deadline_s=st.sampled_from([1.5, 100.0]))
async def test_tool_time_is_counted_once_for_every_call_and_never_past_the_deadline(
    plan: list[Call], deadline_s: float
) -> None:
    seen = Seen()
    async with _gate(deadline_s=deadline_s) as gate:
        await _turn(gate, REF)
        deadline = gate.clock() + deadline_s
        async with anyio.create_task_group() as group:
            for call in plan:
                group.start_soon(_client, gate, call, deadline, seen)
        spent = gate.policy.tasks.budget(REF, now=gate.clock()).tool_s
        stats = gate.policy.tools.statistics(now=gate.clock())
    assert (stats.in_flight, stats.waiting) == (0, 0)
    assert seen.ended_late == 0
    # Every call that held a slot counts once; one granted in the instant its
    # caller was cancelled counts too, and no more than its caller waited.
    assert seen.entered - 1e-9 <= spent <= seen.entered + seen.unseen + 1e-9
