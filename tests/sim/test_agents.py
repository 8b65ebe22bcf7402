"""Agent workloads in the simulator: closed-loop turns and task summaries."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from slopolicy.config import PolicyConfig
from slopolicy.sim import POLICIES, builtin_scenario, run_scenario
from slopolicy.sim.baselines import FCFS
from slopolicy.sim.comparison import compare
from slopolicy.sim.console import print_comparison
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import profile
from slopolicy.sim.simulator import simulate
from slopolicy.sim.task_report import task_summaries
from slopolicy.sim.workload import SimRequest, Workload


def _task(task: str, turns: int, *, deadline: float | None = None) -> list[SimRequest]:
    return [
        SimRequest(
            id=f"{task}.{turn}",
            arrival=0.0,
            tenant="a",
            prompt_tokens=100 * (turn + 1),
            output_tokens=10,
            max_new_tokens=10,
            task=task,
            turn=turn,
            turns=turns,
            tool_wait=2.5 if turn else 0.0,
            task_deadline=deadline,
        )
        for turn in range(turns)
    ]


def test_a_later_turn_arrives_its_tool_wait_after_the_turn_before_it_finished() -> None:
    workload = Workload.of(_task("t", 3))
    result = simulate(workload, FCFS(), EngineSpec(profile("llama3-8b/h100")))
    records = {r.request.id: r for r in result.records}
    for turn in (1, 2):
        before, this = records[f"t.{turn - 1}"], records[f"t.{turn}"]
        assert before.finished_at is not None
        assert this.request.arrival == before.finished_at + 2.5
        assert this.dispatched_at is not None
        assert this.dispatched_at >= this.request.arrival
    (overall, tenant) = task_summaries(workload, result.records)
    assert (overall.tasks, overall.completed, tenant.tenant) == (1, 1, "a")


def test_a_task_past_its_deadline_does_not_complete() -> None:
    workload = Workload.of(_task("t", 2, deadline=1.0))
    result = simulate(workload, FCFS(), EngineSpec(profile("llama3-8b/h100")))
    assert task_summaries(workload, result.records)[0].completion_rate == 0.0


def test_ours_completes_half_again_fcfss_tasks_where_requests_still_attain() -> None:
    """The issue's must-show, on the built-in agents scenario at the load the
    benchmark runs (``python -m benchmarks.bench_agent``): FCFS keeps 95%+ of
    requests within their targets but completes about half of the tasks."""
    scenario = builtin_scenario("agents")
    scenario = dataclasses.replace(scenario, workload=scenario.workload.scaled(0.83))
    comparison = run_scenario(scenario, policies=POLICIES)
    rates = {}
    for name, result in comparison.results.items():
        rate = task_summaries(scenario.workload, result.records)[0].completion_rate
        assert rate is not None
        rates[name] = rate
    fcfs = comparison.reports["fcfs"]
    assert fcfs.attainment is not None
    assert fcfs.attainment >= 0.95  # per-request, all looks well
    assert rates["slopolicy"] >= 1.5 * rates["fcfs"], rates
    assert rates["slopolicy"] > max(v for k, v in rates.items() if k != "slopolicy"), rates
    chat = comparison.reports["slopolicy"].lanes["interactive"]
    assert chat.ttft_p95_s is not None
    assert chat.ttft_p95_s <= 0.5


def test_the_console_report_shows_agent_tasks_per_tenant() -> None:
    workload = Workload.of(_task("t", 2))
    comparison = compare(
        workload, PolicyConfig(), EngineSpec(profile("llama3-8b/h100")), policies=["fcfs"]
    )
    console = Console(width=120, record=True)
    print_comparison(comparison, console)
    text = console.export_text()
    assert "Agent tasks" in text
    assert "100.0%" in text.split("Agent tasks")[1]
