"""Comparisons as rich tables, and a progress bar for the runs.

Used by ``slopolicy demo`` and ``slopolicy simulate`` (``--sweep`` too); the
progress bar is the only place in the simulator that reads the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from slopolicy.core.outcome import BEHIND, Hold
from slopolicy.sim.claims import Claim
from slopolicy.sim.comparison import CompareProgress, Comparison
from slopolicy.sim.offered_load import Load
from slopolicy.sim.reports import LaneReport, PolicyReport
from slopolicy.sim.sweep import NoHarm, Sweep
from slopolicy.sim.task_report import TaskSummary, task_summaries

__all__ = ("make_console", "print_claims", "print_comparison", "print_sweep", "progress_bar")


def make_console() -> Console:
    """A console for reports: the terminal's width, or 120 columns when the
    output is a file or a pipe (rich would assume 80 and squeeze the tables)."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


@contextmanager
def progress_bar(console: Console, policies: Sequence[str]) -> Iterator[CompareProgress]:
    """A progress bar with one row per policy; yields the callback to pass
    to :func:`~slopolicy.sim.comparison.compare`."""
    columns = (
        TextColumn("{task.description:>10}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        tasks = {name: bar.add_task(name, total=1.0) for name in policies}

        def advance(name: str, fraction: float) -> None:
            bar.update(tasks[name], completed=fraction)

        yield advance


def _table(title: str, headers: Sequence[str]) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
    )
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index == 0 else "right", no_wrap=True)
    return table


def _summary(reports: Sequence[PolicyReport]) -> Table:
    table = _table(
        "Every lane together (rates per second; attainment counts refused requests as missed; "
        "degraded: answers cut short or downgraded, within target; done/s: throughput; "
        "preempted: the engine's preemptions by recompute)",
        (
            "policy",
            "goodput",
            "degraded",
            "done/s",
            "attain",
            "done",
            "refused",
            "expired",
            "preempted",
            "Jain",
            "worst tenant",
            "ladder",
        ),
    )
    for report in reports:
        climbs = "-" if report.fallback is None else f"{report.fallback.climbs} moves up"
        table.add_row(
            report.name,
            f"{report.goodput_rps:.2f}",
            f"{report.degraded_goodput_rps:.2f}",
            f"{report.throughput_rps:.2f}",
            _pct(report.attainment),
            f"{report.completed:,}",
            f"{report.rejected:,}",
            f"{report.expired:,}",
            f"{report.preemptions:,}",
            "-" if report.jain_attainment is None else f"{report.jain_attainment:.3f}",
            f"{report.worst_tenant} {_pct(report.worst_tenant_attainment)}",
            climbs,
        )
    return table


def _targets(lane: LaneReport) -> str:
    t = lane.targets
    parts = []
    if t.ttft_p95 is not None:
        parts.append(f"TTFT p95 {_s(t.ttft_p95)}")
    if t.ttft_p99 is not None:
        parts.append(f"p99 {_s(t.ttft_p99)}")
    if t.tpot_p95 is not None:
        parts.append(f"TPOT p95 {_s(t.tpot_p95)}")
    if t.e2e_p95 is not None:
        parts.append(f"end-to-end p95 {_s(t.e2e_p95)}")
    if t.tbt_p99 is not None:
        parts.append(f"TBT p99 {_s(t.tbt_p99)}")
    return ", ".join(parts) or "no latency target"


def _lane_table(lane: str, reports: Sequence[PolicyReport]) -> Table:
    first = reports[0].lanes[lane]
    table = _table(
        f"Lane {lane!r}: {first.offered:,} requests; targets {_targets(first)}",
        (
            "policy",
            "attain",
            "goodput",
            "degraded",
            "TTFT p50",
            "p95",
            "p99",
            "TPOT p95",
            "done",
            "refused",
            "expired",
            "drain",
        ),
    )
    for report in reports:
        row = report.lanes.get(lane)
        if row is None:
            continue
        table.add_row(
            report.name,
            _pct(row.attainment),
            f"{row.goodput_rps:.2f}",
            f"{row.degraded_goodput_rps:.2f}",
            _s(row.ttft_p50_s),
            _s(row.ttft_p95_s),
            _s(row.ttft_p99_s),
            _s(row.tpot_p95_s),
            f"{row.completed:,}",
            f"{row.rejected:,}",
            f"{row.expired:,}",
            _s(row.drain_s),
        )
    return table


def _gaps_table(reports: Sequence[PolicyReport]) -> Table:
    lanes = list(reports[0].lanes)
    headers = ["policy"]
    for lane in lanes:
        headers += [f"{lane} p99", "max", "stalls"]
    table = _table(
        "Time between tokens per lane: p99, largest gap, stalls (gaps >= the lane's "
        "stall threshold, 200 ms by default)",
        headers,
    )
    for report in reports:
        cells = [report.name]
        for lane in lanes:
            row = report.lanes.get(lane)
            if row is None:
                cells += ["-", "-", "-"]
            else:
                cells += [_s(row.tbt_p99_s), _s(row.tbt_max_s), f"{row.tbt_stalls:,}"]
        table.add_row(*cells)
    return table


#: Each cause of an expiry (its wire name), as :func:`_held_table` heads and explains it.
_HELD_BY = {
    Hold.LATE.value: ("late", "would have missed its TTFT target even started"),
    Hold.KV.value: ("kv", "its KV did not fit the ledger"),
    Hold.KV_SHARE.value: ("kv share", "its tenant held past its share of the pool, others owed"),
    Hold.PREFILL.value: ("prefill", "the prompt work ahead of it filled the prefill budget"),
    Hold.SEATS.value: ("seats", "its lane's seats were taken"),
    Hold.PAUSED.value: ("paused", "the ladder paused its lane"),
    Hold.PACE.value: ("pace", "the requests decoding were behind their TPOT pace"),
    BEHIND: ("behind", "never at its lane's front (behind its order, or every seat taken)"),
}


def _held_table(reports: Sequence[PolicyReport]) -> Table | None:
    """Per policy and lane that says, what its expired requests last waited
    on at the front of their lane; ``None`` when no policy says."""
    rows = [
        (report.name, lane, row.expired_by)
        for report in reports
        for lane, row in report.lanes.items()
        if row.expired_by
    ]
    if not rows:
        return None
    said = {cause for _, _, found in rows for cause in found}
    causes = [cause for cause in _HELD_BY if cause in said] + sorted(said - _HELD_BY.keys())
    table = _table(
        "Why queued requests expired: what each last waited on at its lane's front",
        ("policy", "lane", *(_HELD_BY[c][0] if c in _HELD_BY else c for c in causes)),
    )
    for name, lane, found in rows:
        table.add_row(name, lane, *(f"{found.get(cause, 0):,}" for cause in causes))
    named = (_HELD_BY[cause] for cause in causes if cause in _HELD_BY)
    table.caption = "; ".join(f"{head}: {meaning}" for head, meaning in named)
    table.caption_justify = "left"
    return table


def print_comparison(comparison: Comparison, console: Console, *, load: Load | None = None) -> None:
    """The summary table, one table per lane, and our fallback timeline."""
    reports = list(comparison.reports.values())
    workload = comparison.workload
    engine = comparison.engine
    console.print(
        f"[bold]{workload.name}[/]: {len(workload):,} requests from "
        f"{len(workload.tenants):,} tenants over {workload.duration:.0f} s on "
        f"{engine.profile.name} (max_num_seqs {engine.max_num_seqs}, "
        f"max_num_batched_tokens {engine.max_num_batched_tokens:,}, "
        f"long_prefill_token_threshold {engine.long_prefill_token_threshold:,})"
    )
    if load is not None:
        console.print(
            f"Load outside the bursts: {load.load:.0%} ({load.rate_rps:.2f} req/s offered, "
            f"capacity {load.capacity_rps:.2f} req/s for that mix)"
        )
    console.print(_summary(reports))
    for lane in reports[0].lanes:
        console.print(_lane_table(lane, reports))
    console.print(_gaps_table(reports))
    held = _held_table(reports)
    if held is not None:
        console.print(held)
    if any(request.task is not None for request in workload.requests):
        console.print(_tasks_table(comparison))
    for report in reports:
        _print_timeline(report, console)


def _tasks_table(comparison: Comparison) -> Table:
    """Each policy's agent tasks: completion rate and task e2e p50/p95, all
    tenants, then per tenant."""
    workload, results = comparison.workload, comparison.results
    summaries = {name: task_summaries(workload, result.records) for name, result in results.items()}
    tenants = [summary.tenant for summary in next(iter(summaries.values()))]
    headers = ["policy", *("all tenants" if t is None else t for t in tenants)]
    table = _table("Agent tasks: completion rate, task e2e p50/p95 (s)", headers)
    for name, found in summaries.items():
        table.add_row(name, *(_task_cell(summary) for summary in found))
    return table


def _task_cell(summary: TaskSummary) -> str:
    if summary.e2e_p50_s is None or summary.e2e_p95_s is None:
        return _pct(summary.completion_rate)
    return f"{_pct(summary.completion_rate)} {summary.e2e_p50_s:.0f}/{summary.e2e_p95_s:.0f}"


def _print_timeline(report: PolicyReport, console: Console) -> None:
    summary = report.fallback
    if summary is None:
        return
    if not summary.timeline:
        console.print(f"{report.name}: the fallback ladder never moved (overload state: normal).")
        return
    states = ", ".join(
        f"{state} {seconds:.0f} s" for state, seconds in summary.seconds_by_state.items()
    )
    console.print(f"{report.name} overload states: {states}")
    previous = 0
    for at, level, rung, state in summary.timeline:
        change = f"+{rung}" if level > previous else f"-{rung}"
        console.print(f"  t={at:7.1f} s  level {previous} -> {level}  {change:<25} {state}")
        previous = level


def print_claims(claims: Sequence[Claim], console: Console) -> None:
    """Each claim with a check mark or a cross."""
    for claim in claims:
        mark = "[green]✔[/]" if claim.holds else "[red]✘[/]"
        console.print(f"{mark} {claim.text}")


def print_sweep(sweep: Sweep, console: Console) -> None:
    """Each policy's capacity (and as a fraction of the limit), no harm
    against the reference, and attainment at every coarse grid point."""
    engine = sweep.engine
    console.print(
        f"[bold]{sweep.workload}[/]: {sweep.requests:,} requests on {engine.profile.name} "
        f"(max_num_seqs {engine.max_num_seqs}, max_num_batched_tokens "
        f"{engine.max_num_batched_tokens:,}, long_prefill_token_threshold "
        f"{engine.long_prefill_token_threshold:,}); limit {sweep.limit:.3g}x "
        f"(saturated cost throughput / offered cost rate / {sweep.target:g})"
    )
    harm = f"no harm vs {sweep.reference}" if sweep.reference else "no harm"
    table = _table(
        f"Goodput capacity: the highest rate scale with attainment >= {sweep.target:.0%} "
        f"(grid √2 apart, {sweep.refine} bisections, interpolated)",
        ("policy", "capacity", "of limit", "x best other", harm, "runs"),
    )
    for name, policy in sweep.policies.items():
        others = [p.capacity.scale for n, p in sweep.policies.items() if n != name]
        best = max(others, default=None)
        no_harm = sweep.no_harm.get(name)
        table.add_row(
            name,
            str(policy.capacity),
            f"{policy.capacity.scale / sweep.limit:.0%}",
            "-" if not best else f"{policy.capacity.scale / best:.2f}",
            _harm(no_harm),
            str(len(policy.points)),
        )
    console.print(table)
    grid = _table(
        "Attainment by rate scale (coarse grid; · not run there)",
        ("rate scale", *sweep.policies),
    )
    for scale in sweep.grid:
        cells = [policy.attainment(scale) for policy in sweep.policies.values()]
        grid.add_row(f"{scale:.3g}x", *("·" if a is None else f"{a:.1%}" for a in cells))
    console.print(grid)


def _harm(found: NoHarm | None) -> str:
    if found is None or found.worst is None or found.at is None:
        return "-"
    return f"{found.worst:+.3f} at {found.at:.3g}x ({found.low:.3g}-{found.high:.3g}x)"
