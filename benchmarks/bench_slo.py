"""SLO trackers: the cost of recording a request, and quantile-sketch accuracy.

Run from the repository root::

    python -m benchmarks.bench_slo [--quick]

Prints two tables. Times are medians over repeats (this machine is noisy, so
compare ratios). Accuracy is against exact quantiles of the same samples,
sorted, at the rank the sketch documents (``floor(q * (n - 1))``).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Protocol

from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.slo.quantiles import QuantileSketch
from slopolicy.core.slo.sketches import SlidingQuantiles
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import SLOTracker
from slopolicy.core.slo.tracker_set import TrackerSet

_TARGETS = SLOTargets(ttft_p95=1.0, ttft_p99=2.0, tpot_p95=0.1, success_rate=0.99)
_QS = (0.5, 0.95, 0.99)


class _Record(Protocol):
    def __call__(self, finished: Finished, *, now: float) -> None: ...


def _requests(count: int, tenants: int, seed: int = 7) -> list[Finished]:
    rng = random.Random(seed)
    found = []
    for index in range(count):
        queue = rng.lognormvariate(-3, 1)
        prefill = rng.lognormvariate(-2, 0.5)
        ttft = queue + 0.005 + prefill + 0.002
        tpot = rng.lognormvariate(-3.5, 0.3)
        output = rng.randint(1, 400)
        now = index * 0.01
        found.append(
            Finished(
                id=str(index),
                tenant=f"tenant-{rng.randrange(tenants)}",
                lane="interactive",
                outcome=Outcome.COMPLETED if rng.random() > 0.01 else Outcome.FAILED,
                arrival=now - ttft - tpot * (output - 1),
                finished_at=now,
                queue_wait=queue,
                ttft=ttft,
                tpot=tpot,
                prompt_tokens=rng.randint(10, 8000),
                output_tokens=output,
                cost=1000.0,
                stages={"queue": queue, "schedule": 0.005, "prefill": prefill, "transfer": 0.002},
            )
        )
    return found


def _median_us(run: Callable[[], None], batch: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) / batch * 1e6)
    return statistics.median(samples)


def _record_table(batch: int, repeats: int) -> list[str]:
    stream = _requests(batch * repeats, tenants=200)
    chunks = [stream[i * batch : (i + 1) * batch] for i in range(repeats)]

    def feed(record: _Record) -> Callable[[], None]:
        pending = iter(chunks)

        def run() -> None:
            for finished in next(pending):
                record(finished, now=finished.finished_at)

        return run

    lane = SLOTracker("interactive", _TARGETS)
    light = SLOTracker("interactive", _TARGETS, burn_rules=(), breakdown=False)
    trackers = TrackerSet({"interactive": _TARGETS}, max_tenants=1024)
    sketch = QuantileSketch()
    sliding = SlidingQuantiles()
    values = [f.ttft or 0.0 for f in stream[:batch]]

    def add_sketch() -> None:
        for value in values:
            sketch.add(value)

    def add_sliding() -> None:
        for index, value in enumerate(values):
            sliding.record(value, now=index * 0.01)

    rows = [
        ("QuantileSketch.add", _median_us(add_sketch, batch, repeats)),
        ("SlidingQuantiles.record", _median_us(add_sliding, batch, repeats)),
        ("SLOTracker.record, lane (burn + stages)", _median_us(feed(lane.record), batch, repeats)),
        ("SLOTracker.record, tenant-style", _median_us(feed(light.record), batch, repeats)),
        ("TrackerSet.record (lane + tenant)", _median_us(feed(trackers.record), batch, repeats)),
    ]
    end = stream[-1].finished_at
    start = time.perf_counter()
    snapshots = 20
    for _ in range(snapshots):
        lane.snapshot(now=end)
    snapshot_ms = (time.perf_counter() - start) / snapshots * 1e3
    lines = [
        f"Recording one finished request (median of {repeats} batches of {batch})",
        f"{'operation':<42}{'us/call':>10}",
    ]
    lines += [f"{label:<42}{us:>10.2f}" for label, us in rows]
    lines.append(f"{'SLOTracker.snapshot (full 60 s window)':<42}{snapshot_ms * 1e3:>10.0f}")
    return lines


def _distributions(n: int, seed: int = 11) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {
        "lognormal(0, 1.5)": [rng.lognormvariate(0, 1.5) for _ in range(n)],
        "bimodal 0.2 s / 5 s": [
            rng.lognormvariate(math.log(0.2), 0.2)
            if rng.random() < 0.9
            else rng.lognormvariate(math.log(5), 0.3)
            for _ in range(n)
        ],
        "uniform(0.001, 10)": [rng.uniform(0.001, 10) for _ in range(n)],
        "pareto(1.2) heavy tail": [rng.paretovariate(1.2) for _ in range(n)],
    }


def _memory_bytes(sketch: QuantileSketch) -> int:
    tracemalloc.start()
    twin = sketch.copy()
    used = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert twin.count == sketch.count
    return used


def _accuracy_table(n: int, alpha: float) -> list[str]:
    lines = [
        f"Quantile accuracy on {n:,} samples, alpha = {alpha:.0%} (relative error vs exact)",
        f"{'distribution':<24}{'p50 err':>9}{'p95 err':>9}{'p99 err':>9}{'max':>9}"
        f"{'buckets':>9}{'sketch KiB':>12}{'list MiB':>10}",
    ]
    for name, values in _distributions(n).items():
        sketch = QuantileSketch(alpha)
        for value in values:
            sketch.add(value)
        ordered = sorted(values)
        errors = []
        for q in _QS:
            truth = ordered[math.floor(q * (n - 1))]
            answer = sketch.quantile(q)
            assert answer is not None
            errors.append(abs(answer - truth) / truth)
        list_mib = (8 + 24) * n / 2**20  # a list of floats: pointer + float object each
        lines.append(
            f"{name:<24}{errors[0]:>9.3%}{errors[1]:>9.3%}{errors[2]:>9.3%}{max(errors):>9.3%}"
            f"{sketch.bucket_count:>9}{_memory_bytes(sketch) / 1024:>12.1f}{list_mib:>10.1f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10^5 samples, fewer repeats")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_000_000
    repeats = 5 if args.quick else 15
    print("\n".join(_record_table(batch=2000, repeats=repeats)))
    print()
    print("\n".join(_accuracy_table(n, 0.01)))


if __name__ == "__main__":
    main()
