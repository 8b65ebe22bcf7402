"""The workloads and the table of :mod:`benchmarks.bench_fidelity`: live
replays against llama-server next to simulations on its calibrated profile.

Two workloads, both scaled to the engine:

- **seed**: the live seed incident of :mod:`benchmarks.live_seed` (chat from
  16 tenants, one tenant's prompts as long as a slot holds, a burst of batch
  summaries), as simulator requests;
- **azure**: a slice of the merged Azure 2023 traces (code and conversation),
  its rate scaled so that what arrives is ``load`` times the calibrated
  engine's capacity for the slice's own mix (the simulator's capacity
  measure, :func:`slopolicy.sim.offered_load.capacity`; the window's own rate
  and mix, found by a few rounds of fixed point: the code trace is bursty,
  so the trace's average rate puts a window well above ``load``).

Both run under their policy (the default one, or the built-in azure-2023
scenario's) with every lane time scaled by the engine's unloaded chat TTFT
over the reference engine's, its running cap at the server's slots and its
KV pool the server's (:func:`benchmarks.live_seed.gated_config`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from benchmarks.live_seed import Targets, gated_config
from benchmarks.live_seed import Workload as SeedWorkload
from slopolicy import PolicyConfig
from slopolicy.sim.comparison import Comparison
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.offered_load import capacity
from slopolicy.sim.reports import quantile
from slopolicy.sim.scenario import builtin_scenario
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("Row", "azure_slice", "rows", "seed_workload", "table", "targets_for", "within")

#: Tokens the chat template would add; a completion prompt has none, and the BOS is counted.
_BOS = 1


def targets_for(engine: EngineSpec, prompt_tokens: int = 50) -> Targets:
    """The target scale from the calibrated engine's unloaded TTFT for a short chat."""
    unloaded = engine.profile.iteration_time(prompt_tokens, prompt_tokens * prompt_tokens / 2, 0)
    return Targets.measured(unloaded, prompt_tokens)


def seed_workload(slot_context: int, *, quick: bool = False) -> Workload:
    """The live seed incident as simulator requests: its heavy prompts as long
    as a slot holds with their output, batch summaries in the background lane."""
    shape = SeedWorkload(duration=20.0, batch=24) if quick else SeedWorkload()
    shape = dataclasses.replace(shape, heavy_tokens=slot_context - shape.heavy_output - 8)
    requests = [
        SimRequest(
            f"{arrival.kind}-{index}",
            arrival.at,
            arrival.tenant,
            len(arrival.prompt.split()) + _BOS,
            arrival.max_tokens,
            arrival.max_tokens,
            lane="background" if arrival.kind == "batch" else None,
            stream=arrival.kind,
        )
        for index, arrival in enumerate(shape.arrivals())
    ]
    return Workload(tuple(requests), shape.duration, "live seed", frozenset({"batch"}))


def seed_config(engine: EngineSpec) -> PolicyConfig:
    """The default policy scaled to ``engine`` (see the module doc)."""
    return gated_config(targets_for(engine), engine.max_num_seqs, engine.blocks * engine.block_size)


def azure_slice(engine: EngineSpec, *, seconds: float, load: float) -> tuple[Workload, float]:
    """``seconds`` of the Azure 2023 traces, replayed so the engine is at
    ``load`` of its capacity; the workload and its rate scale. Outputs are
    capped at 256 tokens and prompts that do not fit a slot are left out."""
    scenario = builtin_scenario("azure-2023")
    room = engine.model_len
    whole = scenario.workload
    fits = [
        dataclasses.replace(
            r, output_tokens=min(r.output_tokens, 256), max_new_tokens=min(r.max_new_tokens, 256)
        )
        for r in whole
        if r.prompt_tokens + min(r.output_tokens, 256) <= room
    ]
    trace = Workload(tuple(fits), whole.duration, "azure-2023 slice")
    scale = load * capacity(list(trace)[:400], engine) * trace.duration / len(trace)  # a guess
    for _ in range(3):  # the window's own rate and mix (the code trace is bursty)
        window = trace.window(600.0, 600.0 + seconds * scale)  # ten minutes in: past the start-up
        own_rate = len(window) / (seconds * scale)  # requests per second of the trace
        scale = load * capacity(list(window), engine) / own_rate
    return trace.window(600.0, 600.0 + seconds * scale).scaled(scale), scale


def azure_config(engine: EngineSpec) -> PolicyConfig:
    """The built-in azure-2023 scenario's policy scaled to ``engine``."""
    base = builtin_scenario("azure-2023").policy
    return gated_config(
        targets_for(engine), engine.max_num_seqs, engine.blocks * engine.block_size, base=base
    )


@dataclass(frozen=True, slots=True)
class Row:
    """One workload, lane and policy: live and simulated (seconds, 0-1)."""

    workload: str
    lane: str
    policy: str
    live: Mapping[str, float | None]
    sim: Mapping[str, float | None]


_MEASURES = ("ttft_p50", "ttft_p95", "tpot_p50", "attainment")
#: The measures issue 20's target holds to 25% (attainment is held to its verdict).
_TIMED = ("ttft_p50", "ttft_p95", "tpot_p50")


def _measures(comparison: Comparison, policy: str, lane: str) -> dict[str, float | None]:
    report = comparison.reports[policy].lanes[lane]
    records = [r for r in comparison.results[policy].records if r.lane == lane]
    tpots = [t for r in records if (t := r.tpot) is not None]
    return {
        "ttft_p50": report.ttft_p50_s,
        "ttft_p95": report.ttft_p95_s,
        "tpot_p50": quantile(tpots, 0.5),
        "attainment": report.attainment,
    }


def rows(name: str, live: Comparison, sim: Comparison) -> list[Row]:
    """A row per lane and policy both runs have."""
    found = []
    for policy in live.reports:
        for lane in live.reports[policy].lanes:
            if lane in sim.reports[policy].lanes:
                found.append(
                    Row(
                        name,
                        lane,
                        policy,
                        _measures(live, policy, lane),
                        _measures(sim, policy, lane),
                    )
                )
    return found


def _cell(value: float | None, percent: bool) -> str:
    if value is None or math.isnan(value):
        return "-"
    return (
        f"{value:.1%}" if percent else f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    )


def table(found: list[Row]) -> str:
    """The fidelity table in Markdown: each measure live, simulated, sim/live."""
    head = ["workload", "lane", "policy"]
    for measure in _MEASURES:
        head += [f"{measure} live", "sim", "sim/live"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in found:
        cells = [row.workload, row.lane, row.policy]
        for measure in _MEASURES:
            live, sim = row.live[measure], row.sim[measure]
            ratio = sim / live if live and sim is not None else None
            percent = measure == "attainment"
            cells += [
                _cell(live, percent),
                _cell(sim, percent),
                "-" if ratio is None else f"{ratio:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def within(found: list[Row], tolerance: float = 0.25) -> tuple[int, int]:
    """How many of the rows' TTFT p50/p95 and TPOT p50 measures have
    ``sim`` within ``tolerance`` of ``live`` (a ratio in ``1 ± tolerance``),
    of how many both sides measured."""
    hits = total = 0
    for row in found:
        for measure in _TIMED:
            live, sim = row.live[measure], row.sim[measure]
            if live and sim is not None and not math.isnan(live) and not math.isnan(sim):
                total += 1
                hits += abs(sim / live - 1.0) <= tolerance
    return hits, total
