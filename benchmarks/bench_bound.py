"""The most a gateway could attain on a trace when long prefills run whole.

Run from the repository root::

    python -m benchmarks.bench_bound long-conversation 0.349 0.412
    python -m benchmarks.bench_bound long-conversation-narrow 0.846 --held-out
    python -m benchmarks.bench_bound long-conv-s9 0.592 --held-out --in-share

On an engine that runs a prompt's prefill in whole iterations (vLLM with its
default ``long_prefill_token_threshold`` of 0), a request that arrives while a
long prompt is in prefill waits for it, whatever the gateway does. The bound
is clairvoyant and counts no queueing at all:

- each request of the protected (first) lane of the default
  ``PolicyConfig()``, routed as it routes, is *urgent*: it has a *slack*, its
  TTFT target less its own prefill alone; one with no slack always misses;
- each request of the other lanes holds the engine for its whole prefill,
  ``D``: its chunks of ``max_num_batched_tokens`` at the engine profile's
  iteration time, attention's quadratic term included;
- for a *cut* ``c``, every such prompt with ``D > c`` is refused (one miss
  each) and every other one is served, and an urgent request that arrives in
  a served prefill with less than its slack left misses: with urgent
  arrivals at ``lambda`` a second, ``lambda * sum over served of
  mean(max(0, D - slack))`` of them, the mean over the urgent requests'
  slacks.

The bound at a rate is the best cut's attainment. A gateway that cannot
split a running prefill (every one in front of an engine) cannot beat it
by more than the luck of where the arrivals fall; with a chunk cap
(``long_prefill_token_threshold``) prefills interleave and the bound does
not apply, so the script says so and stops.

With ``--in-share`` the bound is of the tenants within their max-min share
at each rate (``slopolicy.sim.in_share``, as the capacity bench's in-share
check names them), on their requests alone: as if every other tenant's
request were refused, the most a gateway could give them. Where it is
under 0.9 at twice FCFS's capacity, no gateway passes that check; where it
is above, the shortfall is the gateway's.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from benchmarks.bench_capacity import HELD_OUT, TRACES
from slopolicy import PolicyConfig
from slopolicy.sim import EngineSpec, Workload, classify, in_share, lane_targets

#: Refusal cuts tried (seconds of whole prefill); ``inf`` refuses nothing.
CUTS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 15.0, math.inf)


def prefill_seconds(prompt_tokens: int, engine: EngineSpec) -> float:
    """A prompt's whole prefill on ``engine`` with nothing beside it (seconds)."""
    profile, chunk = engine.profile, engine.max_num_batched_tokens
    seconds, done = 0.0, 0
    while done < prompt_tokens:
        tokens = min(chunk, prompt_tokens - done)
        seconds += profile.iteration_time(tokens, tokens * (done + tokens / 2), 0, 1, 1)
        done += tokens
    return seconds


def bound(workload: Workload, engine: EngineSpec, scale: float) -> list[tuple[float, int, float]]:
    """``(cut, refused, attainment bound)`` for each of :data:`CUTS` at ``scale``."""
    config = PolicyConfig()
    lanes, targets = classify(workload, config), lane_targets(config)
    urgent, long = [], []
    for request in workload:
        target = targets[lanes[request.id]].ttft_p95
        prefill = prefill_seconds(request.prompt_tokens, engine)
        if target is not None and lanes[request.id] == config.lanes[0].name:
            urgent.append(target - prefill)
        else:
            long.append(prefill)
    never = sum(1 for slack in urgent if slack <= 0)
    slacks = [max(0.0, slack) for slack in urgent]
    rate = len(urgent) / (workload.duration / scale)
    rows = []
    for cut in CUTS:
        served = [d for d in long if d <= cut]
        lost = 0.0
        if slacks:  # no urgent lane: nothing to lose to a prefill
            lost = rate * sum(sum(max(0.0, d - s) for s in slacks) / len(slacks) for d in served)
        misses = (len(long) - len(served)) + never + lost
        rows.append((cut, len(long) - len(served), 1.0 - misses / len(workload)))
    return rows


def within_share(workload: Workload, engine: EngineSpec, scale: float) -> Workload:
    """The requests of ``workload``'s tenants within their max-min share of
    ``engine`` at ``scale``, over the same duration (unscaled, as
    :func:`bound` takes it)."""
    tenants = in_share(workload.scaled(scale), engine).tenants
    kept = tuple(request for request in workload if request.tenant in tenants)
    return Workload(kept, workload.duration, workload.name)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a trace of benchmarks.bench_capacity")
    parser.add_argument("scales", nargs="+", type=float, help="rate scales")
    parser.add_argument("--held-out", action="store_true", help="a held-out trace")
    parser.add_argument(
        "--in-share",
        action="store_true",
        help="the bound of the tenants within their fair share, on their requests alone",
    )
    args = parser.parse_args(argv)
    known = HELD_OUT if args.held_out else TRACES
    if args.trace not in known or any(not 0 < s < math.inf for s in args.scales):
        parser.error(f"traces are {', '.join(known)}; scales are numbers > 0")
    trace = known[args.trace](False)
    if trace.engine.long_prefill_token_threshold:
        print(f"{args.trace}: prefills interleave (a chunk cap): the bound does not apply")
        return
    whose = " of the tenants within their fair share" if args.in_share else ""
    print(f"{args.trace} on {trace.engine.profile.name}: the best refusal cut's attainment{whose}")
    print("   scale   cut (s)  refused  bound")
    for scale in args.scales:
        workload = trace.workload
        if args.in_share:
            workload = within_share(workload, trace.engine, scale)
            if not len(workload):
                print(f"  {scale:6.3f}x  no tenant is within its fair share at this rate")
                continue
        rows = bound(workload, trace.engine, scale)
        cut, refused, best = max(rows, key=lambda row: row[2])
        none = rows[-1][2]
        shown = "none" if math.isinf(cut) else f"{cut:g}"
        print(f"  {scale:6.3f}x  {shown:>7}  {refused:7d}  {best:.3f}  (refusing none: {none:.3f})")


if __name__ == "__main__":
    main()
