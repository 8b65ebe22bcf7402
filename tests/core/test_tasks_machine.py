"""The policy's task bookkeeping under random turns, failures, cancellations and time.

Checked against a naive model: turns of one task start in order, every task
ends exactly once in exactly one outcome, and the slots tasks hold in their
lane (``max_tasks``) are given back exactly once, when the task ends.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.tasks import TaskEnded, TaskOutcome, TaskRef, TaskTrackers

LANE = "agent"
MAX_TASKS = 3
_prompts = st.sampled_from([10, 100])  # 100 is over the agent lane's budget


class _Recording(TaskTrackers):
    """Task trackers that also keep every ended task, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: list[TaskEnded] = []

    def record(self, ended: TaskEnded) -> None:
        self.ended.append(ended)
        super().record(ended)


class TaskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        config = PolicyConfig.model_validate(
            {
                "lanes": [
                    {
                        "name": LANE,
                        "slo_deadline": False,
                        # A turn whose context outgrows it moves to "big".
                        "max_prompt_tokens": 50,
                        "over_budget": "demote",
                        "task": {
                            "deadline_s": 40,
                            "idle_timeout_s": 15,
                            "max_tasks": MAX_TASKS,
                            "hold_new_tasks": True,
                        },
                    },
                    {"name": "big", "slo_deadline": False},
                ],
                "engine": {"max_running": 2},
            }
        )
        self.policy = Policy(config, counter=HeuristicCounter())
        self.recording = _Recording()
        self.policy._book.task_trackers = self.recording
        self.now = 0.0
        self.tasks = 0
        self.sent = 0
        self.turns: dict[str, int] = {}  # expected turns per task made
        self.started: dict[str, list[int]] = {}  # turn indices started, per task
        self.completed: dict[str, int] = {}  # the last turn completed, per task
        self.live: dict[str, TaskRef] = {}  # request id -> its turn
        self.opened: dict[str, int] = {}  # the turn each task was first admitted at
        self.tool_s: dict[str, float] = {}  # tool seconds counted, per task under way

    def _send(self, ref: TaskRef, prompt: int) -> None:
        self.sent += 1
        request = Request(id=f"r{self.sent}", tenant="t", prompt_tokens=prompt, task=ref)
        if self.policy.submit(request, now=self.now).accepted:
            self.live[request.id] = ref
            self.opened.setdefault(ref.id, ref.turn)

    @rule(turns=st.integers(1, 4), prompt=_prompts)
    def new_task(self, turns: int, prompt: int) -> None:
        self.tasks += 1
        task = f"task{self.tasks}"
        self.turns[task] = turns
        self._send(TaskRef(task, 0, expected_turns=turns), prompt)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), jump=st.integers(-1, 2), prompt=_prompts)
    def some_turn(self, data: st.DataObject, jump: int, prompt: int) -> None:
        """A turn of a task made before: the next one, or one out of order,
        in the task's lane or, its context grown, the next."""
        task = f"task{data.draw(st.integers(1, self.tasks))}"
        turn = max(0, len(self.started.get(task, [])) + jump)
        if turn < self.turns[task]:
            self._send(TaskRef(task, turn, expected_turns=self.turns[task]), prompt)

    @rule()
    def dispatch(self) -> None:
        result = self.policy.dispatch(now=self.now)
        for started in result:
            ref = self.live[started.id]
            # Never before a turn already completed, never behind one started.
            assert ref.turn > self.completed.get(ref.id, -1)
            assert ref.turn >= max(self.started.get(ref.id, [-1]))
            self.started.setdefault(ref.id, []).append(ref.turn)
        for expired in result.expired:
            del self.live[expired.id]

    @precondition(lambda self: self.policy.running)
    @rule(data=st.data(), outcome=st.sampled_from(["completed", "failed", "cancelled"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        running = sorted(i for i in self.live if self.policy.phase(i) == "running")
        request_id = data.draw(st.sampled_from(running))
        self.policy.finish(request_id, now=self.now, outcome=outcome)
        ref = self.live.pop(request_id)
        if outcome == "completed":
            self.completed[ref.id] = ref.turn

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.live)))
        self.policy.cancel(request_id, now=self.now)
        del self.live[request_id]

    @rule(dt=st.sampled_from([0.5, 3.0, 10.0, 20.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), seconds=st.sampled_from([0.0, 2.0, 12.0]))
    def tool_call(self, data: st.DataObject, seconds: float) -> None:
        """The host's tool call for a task, between its turns (or during one)."""
        task = f"task{data.draw(st.integers(1, self.tasks))}"
        self.now += seconds
        if task in self.policy.tasks:
            self.tool_s[task] = self.tool_s.get(task, 0.0) + seconds
        self.policy.tasks.tool_used(task, seconds, now=self.now)

    @invariant()
    def tool_time_is_counted_once_per_call(self) -> None:
        for task, turns in self.turns.items():
            if task in self.policy.tasks:
                budget = self.policy.tasks.budget(
                    TaskRef(task, 0, expected_turns=turns), now=self.now
                )
                assert budget.tool_s == self.tool_s.get(task, 0.0)

    @invariant()
    def one_turn_of_a_task_at_a_time(self) -> None:
        tasks = [ref.id for ref in self.live.values()]
        assert len(tasks) == len(set(tasks))

    @invariant()
    def every_task_ends_once_in_one_outcome(self) -> None:
        ids = [ended.id for ended in self.recording.ended]
        assert len(ids) == len(set(ids))
        assert all(isinstance(e.outcome, TaskOutcome) for e in self.recording.ended)
        for ended in self.recording.ended:
            assert ended.id not in self.policy.tasks
            if ended.outcome is TaskOutcome.COMPLETED:  # every turn from where it began
                assert ended.turns == self.turns[ended.id] - self.opened[ended.id]

    @invariant()
    def slots_are_held_by_tasks_under_way_only(self) -> None:
        stats = self.policy.tasks.statistics()
        ended = len(self.recording.ended)
        assert stats.started == stats.active + ended
        assert stats.completed + stats.failed + stats.abandoned == ended
        tasks = self.policy.tasks
        assert tasks.active(LANE) + tasks.active("big") == stats.active == len(tasks)
        assert tasks.active(LANE) <= MAX_TASKS
        queued = sum(1 for i in self.live if self.policy.phase(i) == "queued")
        assert 0 <= tasks.waiting(LANE) + tasks.waiting("big") <= queued

    def teardown(self) -> None:
        # Everything ends: cancel what is live, then let every task time out.
        for request_id in sorted(self.live):
            self.policy.cancel(request_id, now=self.now)
        self.policy.dispatch(now=self.now + 1000.0)
        tasks = self.policy.tasks
        assert tasks.active(LANE) == tasks.active("big") == len(tasks) == 0
        assert tasks.waiting(LANE) == tasks.waiting("big") == 0
        stats = self.policy.tasks.statistics()
        assert stats.started == len(self.recording.ended)


TaskMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_task_machine = TaskMachine.TestCase
