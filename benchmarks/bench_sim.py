"""The simulator's speed: the merged one-hour Azure 2023 trace, per policy.

Run from the repository root::

    python -m benchmarks.bench_sim [--quick] [--rate-scale X] [--repeats N]

Replays the bundled Azure LLM inference traces 2023 (code and conversation,
28,185 requests over 58.6 minutes) on the built-in ``azure-2023`` scenario's
engine (Llama-3-8B on an H100) and policy, at the trace's own rate unless
``--rate-scale`` says otherwise, once per policy, and prints simulated seconds
per wall-clock second ("x real time", the median over ``--repeats`` runs).
Ours includes the real Policy's cost (about 100 µs per request lifecycle and
a 1 ms SLO snapshot per ladder evaluation, once per simulated second). The
simulator is single-threaded, so this is one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time

from slopolicy.sim import POLICIES, Scenario, builtin_scenario, classify, evaluate, make_scheduler
from slopolicy.sim.traces import azure_2023


def _run(scenario: Scenario, name: str, lanes: dict[str, str]) -> tuple[float, int, int]:
    chosen = make_scheduler(
        name,
        scenario.policy,
        rpm_limit=scenario.rpm_limit,
        signals=scenario.signals,
        engine_priority=scenario.engine_priority,
    )
    gc.collect()
    start = time.perf_counter()
    result, _ = evaluate(
        chosen,
        scenario.workload,
        scenario.engine,
        scenario.policy,
        lanes=lanes,
        drain=scenario.drain_s,
        client=scenario.client,
    )
    return time.perf_counter() - start, result.engine.iterations, len(result.records)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first 10 minutes only")
    parser.add_argument("--rate-scale", type=float, default=1.0, help="compress time by X")
    parser.add_argument("--repeats", type=int, default=1, help="runs per policy (median)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    args = parser.parse_args(argv)
    workload = azure_2023(rate_scale=args.rate_scale)
    if args.quick:
        workload = workload.window(0, 600 / args.rate_scale)
    scenario = dataclasses.replace(builtin_scenario("azure-2023"), workload=workload)
    lanes = classify(workload, scenario.policy)
    simulated = workload.duration
    print(
        f"{len(workload):,} requests over {simulated:,.0f} simulated s "
        f"(rate x{args.rate_scale:g}) on {scenario.engine.profile.name}"
    )
    print(f"{'policy':<10}{'wall s':>9}{'x real time':>13}{'iterations':>12}{'µs/request':>12}")
    for name in args.policies.split(","):
        runs = [_run(scenario, name, lanes) for _ in range(max(args.repeats, 1))]
        wall = statistics.median(run[0] for run in runs)
        iterations, requests = runs[0][1], runs[0][2]
        print(
            f"{name:<10}{wall:>9.2f}{simulated / wall:>12.0f}x{iterations:>12,}"
            f"{wall / requests * 1e6:>12.0f}"
        )


if __name__ == "__main__":
    main()
