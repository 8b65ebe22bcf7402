"""Agent tasks in the core: TaskRef, the task table and the policy's task decisions."""

from __future__ import annotations

import pytest

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.decisions import Defer, Reject
from slopolicy.core.ladder.pressure import Pressure
from slopolicy.core.outcome import Outcome
from slopolicy.core.reasons import Reason
from slopolicy.core.specs import TaskSLO
from slopolicy.core.tasks import TaskOutcome, TaskRef, TaskTable, TaskTrackers
from slopolicy.errors import ConfigError, InvalidRequest, UsageError


def _policy(**task: object) -> Policy:
    config = PolicyConfig.model_validate(
        {"lanes": [{"name": "agent", "slo_deadline": False, "task": task}]}
    )
    return Policy(config, counter=HeuristicCounter())


def _turn(task: str, turn: int, *, turns: int | None = None, tenant: str = "t") -> Request:
    return Request(
        id=f"{task}.{turn}",
        tenant=tenant,
        prompt_tokens=10,
        task=TaskRef(task, turn, expected_turns=turns),
    )


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"id": ""}, "task.id"),
        ({"id": "x" * 257}, "task.id"),
        ({"id": "a", "turn": -1}, "task.turn"),
        ({"id": "a", "turn": True}, "task.turn"),
        ({"id": "a", "deadline": float("nan")}, "task.deadline"),
        ({"id": "a", "turn": 3, "expected_turns": 3}, "task.expected_turns"),
        ({"id": "a", "final": 1}, "task.final"),
    ],
)
def test_task_ref_refuses_bad_fields(fields: dict[str, object], where: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        TaskRef(**fields)  # type: ignore[arg-type]
    assert where in str(raised.value)


def test_request_refuses_a_task_that_is_not_a_task_ref() -> None:
    with pytest.raises(InvalidRequest, match="TaskRef"):
        Request(prompt_tokens=1, task="t1")  # type: ignore[arg-type]


def test_task_slo_and_config_refuse_bad_values() -> None:
    with pytest.raises(UsageError):
        TaskSLO(deadline=0.0)
    with pytest.raises(UsageError):
        TaskSLO(max_tasks=0)
    with pytest.raises(ConfigError):
        PolicyConfig.from_dict({"lanes": [{"name": "agent", "task": {"max_tasks": 0}}]})


def test_a_task_completes_with_its_last_turn() -> None:
    policy = _policy(deadline_s=100)
    for turn in range(3):
        assert policy.submit(_turn("a", turn, turns=3), now=float(turn * 10)).accepted
        policy.dispatch(now=float(turn * 10))
        policy.finish(f"a.{turn}", now=turn * 10 + 5.0)
    assert policy.tasks.statistics().completed == 1
    snapshot = policy.task_trackers.snapshots(now=30.0)[0]
    assert (snapshot.completed, snapshot.completion_rate) == (1, 1.0)
    assert snapshot.e2e_p50 == pytest.approx(25.0, rel=0.02)
    # A later turn of the ended task is told so.
    late = policy.submit(_turn("a", 3), now=31.0)
    assert isinstance(late, Reject)
    assert late.reason is Reason.TASK_OUT_OF_ORDER


def test_a_turn_while_another_is_live_or_an_old_turn_is_refused() -> None:
    policy = _policy()
    assert policy.submit(_turn("a", 0), now=0.0).accepted
    busy = policy.submit(_turn("a", 1), now=0.0)
    assert isinstance(busy, Reject)
    assert busy.reason is Reason.TASK_OUT_OF_ORDER
    assert busy.http_status == 409
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    again = policy.submit(
        Request(id="a.0b", tenant="t", prompt_tokens=1, task=TaskRef("a", 0)), now=2.0
    )
    assert isinstance(again, Reject)
    assert again.reason is Reason.TASK_OUT_OF_ORDER
    other = policy.submit(_turn("a", 1, tenant="u"), now=2.0)
    assert isinstance(other, Reject)
    assert other.reason is Reason.TASK_OUT_OF_ORDER


def test_a_turn_past_the_deadline_is_refused_and_its_task_fails() -> None:
    policy = _policy(deadline_s=10)
    policy.submit(_turn("a", 0), now=0.0)
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=2.0)
    lost = policy.submit(_turn("a", 1), now=11.0)
    assert isinstance(lost, Reject)
    assert lost.reason is Reason.TASK_DEADLINE_LOST
    assert lost.http_status == 408
    assert policy.tasks.statistics().failed == 1
    assert len(policy.tasks) == 0


def test_a_turn_that_cannot_finish_at_the_lanes_pace_is_refused_early() -> None:
    policy = _policy(deadline_s=100)
    for index in range(3):  # turns of 30 s each set the lane's pace
        policy.submit(_turn(f"w{index}", 0), now=0.0)
    policy.dispatch(now=0.0)
    for index in range(3):
        policy.finish(f"w{index}.0", now=30.0)
    refused = policy.submit(_turn("long", 0, turns=4), now=30.0)  # 4 x 30 s > 100 s
    assert isinstance(refused, Reject)
    assert refused.reason is Reason.TASK_DEADLINE_LOST
    assert policy.submit(_turn("short", 0, turns=2), now=30.0).accepted


def test_the_queue_deadline_of_a_turn_is_its_tasks_deadline() -> None:
    policy = _policy(deadline_s=10)
    config_cap = Request(id="blocker", prompt_tokens=10)
    policy.submit(config_cap, now=0.0)
    policy.max_running = 1
    policy.dispatch(now=0.0)
    policy.submit(_turn("a", 0), now=0.0)
    dispatch = policy.dispatch(now=10.0)
    assert [f.id for f in dispatch.expired] == ["a.0"]
    assert policy.tasks.statistics().failed == 1


def test_max_tasks_defers_new_tasks_but_not_turns_of_running_ones() -> None:
    policy = _policy(max_tasks=1)
    policy.submit(_turn("a", 0), now=0.0)
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    deferred = policy.submit(_turn("b", 0), now=1.0)
    assert isinstance(deferred, Defer)
    assert deferred.reason is Reason.TASK_LIMIT
    assert policy.submit(_turn("a", 1), now=1.0).accepted


def test_idle_tasks_are_abandoned_and_their_slot_freed() -> None:
    policy = _policy(idle_timeout_s=5, max_tasks=1)
    policy.submit(_turn("a", 0), now=0.0)
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    policy.dispatch(now=6.0)
    stats = policy.tasks.statistics()
    assert (stats.abandoned, stats.active) == (1, 0)
    assert policy.submit(_turn("b", 0), now=6.0).accepted


def test_a_cancelled_turn_may_be_sent_again() -> None:
    policy = _policy()
    policy.submit(_turn("a", 0), now=0.0)
    policy.cancel("a.0", now=1.0)
    assert policy.submit(_turn("a", 0), now=2.0).accepted
    assert policy.tasks.statistics().started == 1


def test_the_table_is_bounded_and_evicts_idle_tasks_first() -> None:
    table = TaskTable(max_tasks=2, max_ended=1)
    slo = TaskSLO()
    table.admitted(TaskRef("a"), "a.0", "t", "lane", slo, now=0.0)
    table.turn_ended(TaskRef("a"), "a.0", Outcome.COMPLETED, now=1.0)
    table.admitted(TaskRef("b"), "b.0", "t", "lane", slo, now=2.0)
    made_room = table.admitted(TaskRef("c"), "c.0", "t", "lane", slo, now=3.0)
    assert [(e.id, e.outcome, e.why) for e in made_room] == [
        ("a", TaskOutcome.ABANDONED, "evicted")
    ]
    assert len(table) == 2
    assert table.active("lane") == 2
    with pytest.raises(UsageError):
        TaskTable(max_tasks=0)


def test_budget_shares_what_is_left_over_the_turns_left() -> None:
    table = TaskTable()
    ref = TaskRef("a", 0, deadline=100.0, expected_turns=4)
    table.admitted(ref, "a.0", "t", "lane", None, now=20.0)
    budget = table.budget(TaskRef("a", 2, deadline=100.0, expected_turns=4), now=60.0)
    assert (budget.remaining, budget.turns_left, budget.per_turn) == (40.0, 2, 20.0)


def test_trackers_keep_a_bounded_number_of_tenants() -> None:
    trackers = TaskTrackers(max_tenants=2)
    table = TaskTable()
    for index in range(5):
        ref = TaskRef(f"x{index}", final=True)
        table.admitted(ref, f"r{index}", f"tenant{index}", "lane", None, now=0.0)
        ended = table.turn_ended(ref, f"r{index}", Outcome.COMPLETED, now=1.0)
        assert ended is not None
        trackers.record(ended)
    snapshots = trackers.snapshots(now=1.0)
    assert [s.tenant for s in snapshots] == [None, "tenant3", "tenant4"]
    assert snapshots[0].completed == 5


def test_hold_new_defers_new_tasks_while_turns_of_running_ones_wait() -> None:
    policy = _policy(hold_new_tasks=True)
    policy.max_running = 1
    policy.submit(_turn("a", 0), now=0.0)
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    policy.submit(Request(id="blocker", prompt_tokens=10), now=1.0)
    policy.dispatch(now=1.0)  # the engine is full: a's next turn will wait
    assert policy.submit(_turn("a", 1), now=1.0).accepted
    held = policy.submit(_turn("b", 0), now=1.0)
    assert isinstance(held, Defer)
    assert held.reason is Reason.TASK_LIMIT
    policy.finish("blocker", now=2.0)
    policy.dispatch(now=2.0)  # a's turn starts: nothing of a running task waits now
    assert policy.tasks.waiting("agent") == 0
    assert policy.submit(_turn("b", 0), now=2.0).accepted


def test_task_goodput_counts_completed_tasks_per_second_of_the_window() -> None:
    trackers = TaskTrackers()
    table = TaskTable()
    for index in range(4):
        ref = TaskRef(f"g{index}", final=True)
        table.admitted(ref, f"g{index}", "t", "lane", None, now=0.0)
        ended = table.turn_ended(ref, f"g{index}", Outcome.COMPLETED, now=100.0 + index)
        assert ended is not None
        trackers.record(ended)
    lane = trackers.lane("lane")
    assert lane is not None
    snapshot = lane.snapshot(now=200.0)
    assert snapshot.span_s == 100.0  # from the first task's end, not the window's start
    assert snapshot.goodput == pytest.approx(0.04)


def test_under_the_ladder_first_turns_are_shed_and_turns_under_way_go_on() -> None:
    config = PolicyConfig.model_validate(
        {"lanes": [{"name": "agent", "task": {}}], "ladder": {"dwell_s": 1, "cooldown_s": 1}}
    )
    policy = Policy(config, counter=HeuristicCounter())
    policy.submit(_turn("a", 0), now=0.0)
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    ladder = policy.health.ladder
    assert ladder is not None
    assert ladder.update(Pressure(ttft_p95_fraction=2.0, kv_usage=0.99), now=1.0) is not None
    shed = policy.submit(_turn("b", 0), now=1.0)
    assert isinstance(shed, Defer)
    assert shed.reason is Reason.OVERLOAD_SHED
    assert policy.submit(_turn("a", 1), now=1.0).accepted


def test_tool_time_counts_against_a_task_under_way_and_restarts_its_idle_timer() -> None:
    table = TaskTable()
    slo = TaskSLO(deadline=30.0, idle_timeout=5.0)
    ref = TaskRef("t", 0, expected_turns=2)
    table.admitted(ref, "r0", "a", "lane", slo, now=0.0)
    table.turn_ended(ref, "r0", Outcome.COMPLETED, now=1.0)
    assert table.tool_check("t", "a", now=2.0) is None
    assert table.tool_deadline("t") == 30.0
    table.tool_used("t", 4.0, now=5.0)
    table.tool_used("t", 4.0, now=9.0)  # 8 s since the turn: idle, were it not for the calls
    assert table.sweep(now=9.0) == []
    assert table.budget(TaskRef("t", 1, expected_turns=2), now=9.0).tool_s == 8.0
    assert [e.why for e in table.sweep(now=14.0)] == ["idle"]  # 5 s after the last call
    table.tool_used("t", 1.0, now=15.0)  # a task not held: nothing counts
    assert table.tool_deadline("t") is None
    assert table.tool_check("t", "a", now=15.0) is None


def test_tool_calls_of_a_lost_or_foreign_task_are_refused() -> None:
    table = TaskTable()
    table.admitted(TaskRef("t", 0), "r0", "a", "lane", TaskSLO(deadline=10.0), now=0.0)
    foreign = table.tool_check("t", "b", now=1.0)
    assert foreign is not None
    assert foreign.reason is Reason.TASK_OUT_OF_ORDER
    lost = table.tool_check("t", "a", now=10.0)
    assert lost is not None
    assert (lost.reason, lost.http_status) == (Reason.TASK_DEADLINE_LOST, 408)


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf"), "2", True])
def test_bad_tool_time_raises_and_changes_nothing(seconds: object) -> None:
    table = TaskTable()
    ref = TaskRef("t", 0)
    table.admitted(ref, "r0", "a", "lane", None, now=0.0)
    with pytest.raises(UsageError, match="seconds"):
        table.tool_used("t", seconds, now=1.0)  # type: ignore[arg-type]
    assert table.budget(ref, now=1.0).tool_s == 0.0


def test_a_task_whose_context_outgrows_its_lane_moves_lanes_and_is_counted_in_its_own() -> None:
    # The first turn routes to chat, the second (its context grown past chat's
    # prompt budget) to heavy: starting it once took a count from the wrong lane.
    config = PolicyConfig.model_validate(
        {
            "lanes": [
                {"name": "chat", "max_prompt_tokens": 100, "over_budget": "demote"},
                {"name": "heavy"},
            ]
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    first = Request(id="a.0", tenant="t", prompt_tokens=50, task=TaskRef("a", 0))
    assert policy.submit(first, now=0.0).lane == "chat"
    policy.dispatch(now=0.0)
    policy.finish("a.0", now=1.0)
    second = Request(id="a.1", tenant="t", prompt_tokens=500, task=TaskRef("a", 1))
    assert policy.submit(second, now=2.0).lane == "heavy"
    assert policy.tasks.waiting("chat") == 1  # the task's lane
    assert [s.id for s in policy.dispatch(now=2.0)] == ["a.1"]
    assert policy.tasks.waiting("chat") == policy.tasks.waiting("heavy") == 0
    policy.finish("a.1", now=3.0)
