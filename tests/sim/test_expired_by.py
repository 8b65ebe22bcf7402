"""Reports say what ours' expired requests last waited on; the console and the JSON show it."""

from __future__ import annotations

import functools
import io

from rich.console import Console

from slopolicy import Hold, PolicyConfig
from slopolicy.sim import BEHIND, Comparison, builtin_scenario, compare, to_json
from slopolicy.sim.console import print_comparison
from slopolicy.sim.interface import Released


@functools.cache
def _overloaded() -> Comparison:
    """The seed scenario's first minute at three times its rate: ours' and
    llm-d's queues expire requests (llm-d by its TTL)."""
    scenario = builtin_scenario("seed")
    workload = scenario.workload.window(0.0, 60.0).scaled(3.0)
    return compare(workload, PolicyConfig(), scenario.engine, policies=["slopolicy", "llm-d-slo"])


def test_ours_says_what_each_expired_request_last_waited_on() -> None:
    comparison = _overloaded()
    ours = comparison.reports["slopolicy"]
    assert ours.expired > 0
    for lane in ours.lanes.values():
        assert sum(lane.expired_by.values()) == lane.expired
    said = {cause for lane in ours.lanes.values() for cause in lane.expired_by}
    assert said <= {hold.value for hold in Hold} | {BEHIND}
    records = comparison.results["slopolicy"].records
    assert all(
        (record.held_by is not None) == (record.outcome.value == "expired") for record in records
    )


def test_a_scheduler_that_does_not_say_reports_no_causes() -> None:
    comparison = _overloaded()
    anchor = comparison.reports["llm-d-slo"]
    assert anchor.expired > 0
    assert all(not lane.expired_by for lane in anchor.lanes.values())
    assert Released().held_by == {}


def test_the_console_and_the_json_show_the_causes() -> None:
    comparison = _overloaded()
    out = io.StringIO()
    print_comparison(comparison, Console(file=out, width=200))
    printed = out.getvalue()
    assert "Why queued requests expired" in printed
    assert "llm-d-slo  interactive" not in printed  # only a policy that says gets a row
    lanes = to_json(comparison)["policies"]["slopolicy"]["lanes"]
    ours = comparison.reports["slopolicy"].lanes
    assert {name: lane["expired_by"] for name, lane in lanes.items()} == {
        name: dict(lane.expired_by) for name, lane in ours.items()
    }
