"""What each mechanism of the default policy is worth: its capacity without it.

Run from the repository root::

    python -m benchmarks.bench_ablation [--traces azure,seed] [--variants default,...]
                                        [--full] [--jobs 2]

For each trace of :mod:`benchmarks.bench_capacity` (half of each, unless
``--full``), the goodput capacity (:func:`slopolicy.sim.sweep`, attainment
>= 0.9) of the default ``PolicyConfig()`` and of the same config with one
mechanism turned off, then the attainment of the tenants within their
max-min share at twice FCFS's capacity (FCFS's capacity read from the same
sweep). One table: a row per variant, a column per trace, capacity then
in-share attainment. Deterministic: the same code gives the same table.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from benchmarks.bench_capacity import TRACES
from slopolicy import PolicyConfig
from slopolicy.sim import classify, evaluate, in_share, in_share_attainment, make_scheduler, sweep

__all__ = ("VARIANTS", "main")


def _lanes(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        for lane in config["lanes"]:
            lane[field] = value

    return change


def _engine(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        config["engine"][field] = value

    return change


def _no_favor(config: dict[str, Any]) -> None:
    rungs = config["ladder"]["rungs"]
    config["ladder"]["rungs"] = [rung for rung in rungs if rung != "favor_interactive"]


def _no_ladder(config: dict[str, Any]) -> None:
    config["ladder"]["enabled"] = False


def _worst_case_kv(config: dict[str, Any]) -> None:
    config["kv"]["output_quantile"] = None


#: Each variant: what it turns off, as a change to the default config's dict.
VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {
    "default": lambda config: None,
    "no share window": _engine("share_window_s", None),
    "no prefill budget": _engine("prefill_horizon_s", 0),
    "arrival order": _lanes("queue_order", "arrival"),
    "no interference price": _lanes("max_interference", None),
    "no favor_interactive": _no_favor,
    "no ladder": _no_ladder,
    "KV worst case": _worst_case_kv,
    "max_running 128": _engine("max_running", 128),
}


def _config(variant: str) -> PolicyConfig:
    config = PolicyConfig().model_dump(mode="json")
    VARIANTS[variant](config)
    return PolicyConfig.from_dict(config)


def _run(job: tuple[str, str, bool]) -> tuple[str, str, float, float | None]:
    variant, trace, full = job
    found = TRACES[trace](not full)
    config = _config(variant)
    swept = sweep(found.workload, config, found.engine, policies=["slopolicy", "fcfs"], target=0.9)
    at = 2 * swept.policies["fcfs"].capacity.scale
    workload = found.workload.scaled(at)
    share = in_share(workload, found.engine)
    _, report = evaluate(
        make_scheduler("slopolicy", config),
        workload,
        found.engine,
        config,
        lanes=classify(workload, config),
    )
    kept = in_share_attainment(share, report).attainment if share.offered else None
    return variant, trace, swept.policies["slopolicy"].capacity.scale, kept


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES), help="comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--full", action="store_true", help="whole traces (default: half)")
    parser.add_argument("--jobs", type=int, default=2, help="sweeps run in parallel")
    args = parser.parse_args(argv)
    traces, variants = args.traces.split(","), args.variants.split(",")
    unknown = [t for t in traces if t not in TRACES] + [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    began = time.perf_counter()
    jobs = [(variant, trace, args.full) for variant in variants for trace in traces]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_run, jobs))
    table = {(variant, trace): (cap, kept) for variant, trace, cap, kept in results}
    print("capacity (in-share attainment at 2x FCFS)", "whole traces" if args.full else "half")
    widths = [max(16, len(trace) + 2) for trace in traces]
    print(f"{'variant':<24}" + "".join(f"{t:>{w}}" for t, w in zip(traces, widths, strict=True)))
    for variant in variants:
        cells = []
        for trace in traces:
            cap, kept = table[variant, trace]
            cells.append(f"{cap:.3g}x ({'-' if kept is None else f'{kept:.2f}'})")
        print(f"{variant:<24}" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    print(f"\n{time.perf_counter() - began:.0f} s in all")


if __name__ == "__main__":
    main()
