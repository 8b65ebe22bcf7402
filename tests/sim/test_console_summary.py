"""The console's table over every lane shows each policy's preemptions by
recompute, and each tenant's report counts those of its own requests."""

from __future__ import annotations

import functools
import io

from rich.console import Console

from slopolicy import PolicyConfig
from slopolicy.sim import Comparison, builtin_scenario, compare
from slopolicy.sim.console import print_comparison


@functools.cache  # one run for both tests: they only read it
def _seed() -> Comparison:
    """The seed scenario's first 150 s (the contracts and the summaries
    land): FCFS's engine preempts, ours' does not."""
    scenario = builtin_scenario("seed")
    workload = scenario.workload.window(0.0, 150.0)
    return compare(workload, PolicyConfig(), scenario.engine, policies=["slopolicy", "fcfs"])


def _column(printed: str, header: str) -> dict[str, str]:
    """Each policy's cell under ``header`` in the first table that has it
    (the cells are right-justified under it)."""
    lines = printed.splitlines()
    at = next(k for k, line in enumerate(lines) if f" {header} " in f"{line} ")
    end = lines[at].index(f" {header}") + 1 + len(header)
    cells: dict[str, str] = {}
    for line in lines[at + 2 :]:
        if not line.strip():
            break
        cells[line.split()[0]] = line[:end].split()[-1]
    return cells


def test_the_summary_shows_each_policys_preemptions() -> None:
    comparison = _seed()
    reports = comparison.reports
    assert reports["fcfs"].preemptions > 0  # the premise: FCFS fills the KV cache
    out = io.StringIO()
    print_comparison(comparison, Console(file=out, width=200))
    printed = out.getvalue()
    assert "preempted: the engine's preemptions by recompute" in printed
    assert _column(printed, "preempted") == {
        name: f"{report.preemptions:,}" for name, report in reports.items()
    }


def test_each_tenant_counts_the_preemptions_of_its_own_requests() -> None:
    comparison = _seed()
    for name, found in comparison.reports.items():
        records = comparison.results[name].records
        for tenant, counted in found.tenants.items():
            own = sum(r.preemptions for r in records if r.request.tenant == tenant)
            assert counted.preempted == own, (name, tenant)
        assert sum(t.preempted for t in found.tenants.values()) == found.preemptions
    assert any(t.preempted for t in comparison.reports["fcfs"].tenants.values())
