"""An agent loop behind the Gate: every model call is one turn of one task.

Run it: ``python examples/agent_loop.py``. Each turn carries a ``TaskRef``
(task id, turn index, expected turns, the task's deadline); the policy keeps
the turns in order, refuses a turn once its task cannot finish in time, and
counts task completion per lane and tenant; the tool calls between turns go
through ``gate.tool(..., task=...)``, so their time counts against the task.
The engine and the tool are in-process fakes; put your own in their place.
"""

from __future__ import annotations

import anyio

from slopolicy import Gate, PolicyConfig, Rejected, Request, TaskRef
from slopolicy.testing.fake_engine import FakeEngine

CONFIG = PolicyConfig.from_dict(
    {
        "lanes": [
            {"name": "interactive", "slo": {"ttft_p95_s": 0.5}},
            {
                "name": "agent",
                "slo_deadline": False,
                "task": {"deadline_s": 30, "idle_timeout_s": 60, "max_tasks": 16},
            },
        ],
        "tiers": {"standard": {"default_lane": "agent"}},
        "default_tier": "standard",
    }
)


async def call_tool(answer: int) -> str:
    await anyio.sleep(0.01)  # a search, a shell command, a retriever...
    return f"tool output for an answer of {answer} tokens"


async def run_task(gate: Gate, engine: FakeEngine, task_id: str, turns: int) -> bool:
    """One agent task: ``turns`` model calls with a tool call after each."""
    deadline = gate.clock() + 30.0  # the task's own deadline, on the Gate's clock
    context = "You are a coding agent. Fix the failing test."
    for turn in range(turns):
        request = Request(
            tenant="acme",
            prompt=context,
            max_new_tokens=32,
            task=TaskRef(task_id, turn, deadline=deadline, expected_turns=turns),
        )
        try:
            async with gate.admit(request) as ticket:
                async for _chunk in ticket.track(engine.stream(ticket.request)):
                    pass
        except Rejected as error:  # task_deadline_lost: stop now, it cannot finish
            print(f"{task_id}: turn {turn} refused ({error.code})")
            return False
        done = ticket.finished
        assert done is not None
        ref = request.task
        try:  # the tool call's time counts against the task (its budget's tool_s)
            async with gate.tool(tenant="acme", name="search", task=ref):
                context += f"\n[answer {turn}]\n" + await call_tool(done.output_tokens)
        except Rejected as error:  # task_deadline_lost: the task ran out of time meanwhile
            print(f"{task_id}: tool call after turn {turn} refused ({error.code})")
            return False
    return True


async def main() -> None:
    engine = FakeEngine(ttft=0.01, per_token=0.001)
    async with Gate(CONFIG) as gate:
        async with anyio.create_task_group() as group:
            for index in range(3):
                group.start_soon(run_task, gate, engine, f"task-{index}", 3)
        stats = gate.policy.tasks.statistics()
        print(f"tasks: {stats.completed} completed, {stats.failed} failed of {stats.started}")
        for snapshot in gate.policy.task_trackers.snapshots(now=gate.clock()):
            who = snapshot.tenant or "every tenant"
            print(f"lane {snapshot.lane}, {who}: completion {snapshot.completion_rate:.0%}")


if __name__ == "__main__":
    anyio.run(main)
