"""How far the simulator is from a real engine: llama-server calibrated, then
two workloads replayed live (direct and gated) and simulated on the fitted
profile, side by side.

Run from the repository root (needs the built server, see
``python -m slopolicy.testing.llama build``, and ``slopolicy[llama,openai]``),
holding the machine's live lock so no other timing run shares the CPUs::

    flock /tmp/llama-live.lock python -m benchmarks.bench_fidelity --priority -10  # ~8 minutes
    flock /tmp/llama-live.lock python -m benchmarks.bench_fidelity --quick         # ~4 minutes

``--json OUT`` writes the rows, the engine file, the claims and every
request's times, live and simulated (``records``: workload, then ``live``
or ``simulated``, then policy), for a request-by-request look at where the
model misses. ``--twice`` replays each workload live a second time and reports the second
replay against the first in the same terms: how close two live runs come on
this machine, the floor under how close a model can be shown to come.

``--priority N`` runs it, and the server, in a session of its own whose
autogroup has nice ``N`` (:func:`benchmarks.live_seed.raise_priority`): on a
machine shared with other jobs, without it their load moves every timing.

One server (``--slots`` slots of ``--slot-context`` tokens, ``-b``/``-ub``
``--batch``, the tiny random-weight model) is calibrated
(:func:`slopolicy.replay.calibrate.calibrate`), then each workload of
:mod:`benchmarks.fidelity` is replayed (:class:`slopolicy.replay.LiveReplay`:
``fcfs`` straight to the server, ``slopolicy`` through a Gate) and simulated with
the calibrated engine (:func:`slopolicy.sim.comparison.compare`, the same
requests with outputs forced to their recorded length). The table gives, per
workload, lane and policy, TTFT p50/p95, TPOT p50 and attainment, live and
simulated, and their ratio.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio

from benchmarks.fidelity import (
    Row,
    azure_config,
    azure_slice,
    rows,
    seed_config,
    seed_workload,
    table,
    within,
)
from benchmarks.live_seed import add_server_options, raise_priority, server_from
from slopolicy import PolicyConfig
from slopolicy.replay import LiveReplay, Target, forced_lengths, live_comparison, replay_lanes
from slopolicy.replay.calibrate import calibrate
from slopolicy.sim.claims import seed_claims
from slopolicy.sim.comparison import OURS, Comparison, compare
from slopolicy.sim.engine_file import engine_data
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.scenario import Scenario
from slopolicy.sim.workload import Workload


async def _live(
    target: Target, name: str, workload: Workload, config: PolicyConfig, engine: EngineSpec
) -> Comparison:
    """``workload`` replayed on ``target``, direct and gated, as a Comparison."""
    scenario = Scenario(name, workload, engine, config)
    live = LiveReplay(target, scenario, drain=120.0)
    plan = await live.prepare()
    runs = await replay_lanes(live, plan, ("fcfs", OURS), stop=anyio.Event())
    print(f"{name}: {live.fit(runs).describe()}", flush=True)
    for lane, run in runs.items():
        if run.client is not None:
            print(
                f"{name} {lane}: {run.client.describe()}; at most {run.peak_open} open", flush=True
            )
    return live_comparison(live, runs)


def _records(*comparisons: Comparison) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Each policy's requests, live then simulated, one dict each (seconds
    from the workload's start)."""
    return {
        source: {
            policy: [
                {
                    "id": r.request.id,
                    "lane": r.lane,
                    "prompt_tokens": r.request.prompt_tokens,
                    "arrival": r.request.arrival,
                    "outcome": r.outcome.value,
                    "dispatched": r.dispatched_at,
                    "first_token": r.first_token_at,
                    "finished": r.finished_at,
                    "output_tokens": r.output_tokens,
                }
                for r in result.records
            ]
            for policy, result in comparison.results.items()
        }
        for source, comparison in zip(("live", "simulated"), comparisons, strict=True)
    }


async def _both(
    target: Target,
    name: str,
    workload: Workload,
    config: PolicyConfig,
    engine: EngineSpec,
    again: list[Row] | None,
) -> tuple[list[Row], Comparison, Comparison]:
    """Live and simulated rows of ``workload``; with ``again``, a second live
    replay's rows against the first are added to it (the run-to-run noise)."""
    measured = await _live(target, name, workload, config, engine)
    if again is not None:
        again += rows(name, measured, await _live(target, name, workload, config, engine))
    # llama-server has no priority scheduling: ours sends it none, live and simulated.
    simulated = compare(
        forced_lengths(workload), config, engine, policies=(OURS, "fcfs"), engine_priority=False
    )
    return rows(name, measured, simulated), measured, simulated


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    server = server_from(args)
    context = server.context
    with server:
        async with Target(server.url) as target:
            calibration = await calibrate(
                target, repeats=args.repeats or (3 if args.quick else 5),
                max_num_batched_tokens=args.batch, ubatch_tokens=args.batch,
            )  # fmt: skip
            print(calibration.describe(), flush=True)
            engine = calibration.engine
            found_rows: list[Row] = []
            again: list[Row] | None = [] if args.twice else None
            seed = seed_workload(args.slot_context, quick=args.quick)
            more, *seeds = await _both(target, "seed", seed, seed_config(engine), engine, again)
            found_rows += more
            records = {"seed": _records(*seeds)}
            azure, scale = azure_slice(engine, seconds=40.0 if args.quick else 90.0, load=args.load)
            share = f"{args.load:.0%} of the calibrated capacity"
            print(f"azure slice: {len(azure)} requests over {azure.duration:.0f} s "
                  f"(rate scale {scale:.3f}, {share})", flush=True)  # fmt: skip
            more, *both = await _both(target, "azure", azure, azure_config(engine), engine, again)
            found_rows += more
            records["azure"] = _records(*both)
    print(f"llama-server -np {args.slots} -c {context} -b {args.batch} -t {args.threads}")
    print(table(found_rows))
    hits, total = within(found_rows)
    print(f"simulated within 25% of live: {hits} of {total} measures")
    if again is not None:
        print("live again against live (the 'sim' columns are the second replay's):")
        print(table(again))
        hits, total = within(again)
        print(f"a second live replay within 25% of the first: {hits} of {total} measures")
    claims = {}
    for label, comparison in zip(("live", "simulated"), seeds, strict=True):
        claims[label] = [(claim.holds, claim.text) for claim in seed_claims(comparison)]
        print(f"the demo's claims on the seed workload, {label}:")
        print("\n".join(f"  [{'x' if holds else ' '}] {text}" for holds, text in claims[label]))
    return {
        "engine": calibration.describe(),
        "engine_file": engine_data(calibration.engine),
        "claims": claims,
        "rows": [{"workload": r.workload, "lane": r.lane, "policy": r.policy,
                  "live": dict(r.live), "sim": dict(r.sim)} for r in found_rows],
        "live_again": [{"workload": r.workload, "lane": r.lane, "policy": r.policy,
                        "first": dict(r.live), "second": dict(r.sim)} for r in again or ()],
        "records": records,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases, fewer probes")
    add_server_options(parser)
    parser.add_argument(
        "--load",
        type=float,
        default=0.7,
        help="azure load: arrivals over the calibrated capacity for the slice (default 0.7)",
    )
    parser.add_argument("--json", metavar="OUT", help="write the rows as JSON")
    parser.add_argument(
        "--twice",
        action="store_true",
        help="replay each workload live a second time: the run-to-run noise, in the same terms",
    )
    parser.add_argument("--repeats", type=int, help="calibration rounds (default 5, quick 3)")
    parser.add_argument(
        "--priority", type=int, metavar="NICE",
        help="run in a session of its own with this autogroup nice (e.g. -10; see the doc)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.priority is not None:
        print(raise_priority(args.priority), flush=True)
    data = anyio.run(main_async, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)


if __name__ == "__main__":
    main()
