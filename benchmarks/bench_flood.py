"""One tenant floods a lane: what the other tenants get (DESIGN.md invariant 9).

Run from the repository root::

    python -m benchmarks.bench_flood [--flood-rate R] [--tenants N]

The default policy with its tier's rate and concurrency caps removed (a tier
without ``max_concurrency``), in the simulator on Llama-3-8B on an H100: one
tenant sends ``--flood-rate`` requests per second for 10 s, ``--tenants``
others 2 per second each, prompts of 200-800 tokens and outputs of 50-300.
Prints, for the flood and for the others, the share of requests started and
how the rest ended (refused ``queue_full`` at once or pushed out later, or
expired waiting their fair turn).
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter

from slopolicy import PolicyConfig
from slopolicy.sim import EngineSpec, SimRequest, Workload, profile, simulate
from slopolicy.sim.ours import PolicyScheduler

_SECONDS = 10.0


def _workload(flood_rate: float, tenants: int) -> Workload:
    draw = random.Random(1)
    requests = [
        SimRequest(
            f"f{k}", k / flood_rate, "flood", draw.randint(200, 800), draw.randint(50, 300), 512
        )
        for k in range(int(flood_rate * _SECONDS))
    ]
    for tenant in range(tenants):
        for k in range(int(2 * _SECONDS)):
            arrival = draw.uniform(0, _SECONDS)
            prompt, output = draw.randint(200, 800), draw.randint(50, 300)
            requests.append(
                SimRequest(f"o{tenant}-{k}", arrival, f"t{tenant}", prompt, output, 512)
            )
    requests.sort(key=lambda request: request.arrival)
    return Workload(tuple(requests), _SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-rate", type=float, default=10_000.0, help="requests/s")
    parser.add_argument("--tenants", type=int, default=20, help="other tenants")
    args = parser.parse_args()
    data = PolicyConfig().to_dict()
    data["tiers"]["default"].update(rate=None, burst=None, max_concurrency=None)
    config = PolicyConfig.from_dict(data)
    workload = _workload(args.flood_rate, args.tenants)
    start = time.perf_counter()
    result = simulate(workload, PolicyScheduler(config), EngineSpec(profile("llama3-8b/h100")))
    took = time.perf_counter() - start
    sent: Counter[str] = Counter()
    ended: Counter[tuple[str, str]] = Counter()
    for record in result.records:
        who = "flood" if record.request.tenant == "flood" else "others"
        sent[who] += 1
        how = "started" if record.dispatched_at is not None else record.outcome.value
        if how == "rejected":
            how = f"rejected {record.reason}"
        ended[(who, how)] += 1
    kinds = sorted({how for _, how in ended})
    print(f"{'tenants':<8}{'requests':>10}" + "".join(f"{kind:>24}" for kind in kinds))
    for who in ("flood", "others"):
        cells = "".join(f"{ended[(who, kind)] / sent[who]:>24.1%}" for kind in kinds)
        print(f"{who:<8}{sent[who]:>10,}" + cells)
    print(f"({len(workload):,} requests simulated in {took:.1f} s)")


if __name__ == "__main__":
    main()
