"""Several gateway processes sharing one tenant through Redis never admit more than
``rate·T + burst`` cost units in any window of length T, and never hold more
than the concurrency cap between them."""

from __future__ import annotations

import multiprocessing
import queue
from typing import Any

import pytest

from tests.backends import _replica
from tests.backends.conftest import NO_REDIS_PY

pytest.importorskip("redis", reason=NO_REDIS_PY)

PROCESSES = 4
SECONDS = 1.5


def _max_excess(grants: list[tuple[float, float]], rate: float, burst: float) -> float:
    """max over windows [t_i, t_j] of granted - (rate·(t_j - t_i) + burst), in O(n):
    with S the running sum, that is S_j - rate·t_j + max_{i<=j}(rate·t_i - S_{i-1})."""
    best = -float("inf")
    total = 0.0
    lead = -float("inf")
    for time, cost in sorted(grants):
        lead = max(lead, rate * time - total)
        total += cost
        best = max(best, total - rate * time + lead - burst)
    return best


def _max_overlap(holds: list[tuple[float, float]]) -> int:
    # A release and an acquire at the same microsecond: count the release first.
    events = sorted([(start, 1) for start, _ in holds] + [(end, -1) for _, end in holds])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def test_replica_processes_share_one_tenants_rate_and_cap(redis_url: str, prefix: str) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results: Any = context.Queue()
    workers = [
        context.Process(
            target=_replica.run, args=(redis_url, prefix, SECONDS, seed, start, results)
        )
        for seed in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    start.set()
    reports = []
    try:
        for _ in workers:
            reports.append(results.get(timeout=120))
    except queue.Empty:  # pragma: no cover - a crashed worker
        pytest.fail("a replica process did not report")
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():  # pragma: no cover
                worker.kill()
    assert all(worker.exitcode == 0 for worker in workers)
    assert all(report["failures"] == 0 and report["pending"] == 0 for report in reports)

    tier = _replica.RATE_TIER
    assert tier.rate is not None
    assert tier.burst is not None
    grants = [grant for report in reports for grant in report["grants"]]
    assert len({report["grants"][0][0] for report in reports if report["grants"]}) > 1
    assert _max_excess(grants, tier.rate, tier.burst) <= 1e-6
    span = max(t for t, _ in grants) - min(t for t, _ in grants)
    granted = sum(cost for _, cost in grants)
    # All four competed, and together they got close to what the bucket allows.
    assert sum(1 for report in reports if report["grants"]) == PROCESSES
    assert granted >= 0.8 * (tier.rate * span + tier.burst)

    holds = [hold for report in reports for hold in report["holds"]]
    cap = _replica.CAP_TIER.max_concurrency
    assert sum(1 for report in reports if report["holds"]) == PROCESSES
    assert _max_overlap(holds) == cap  # reached, never exceeded


def test_the_checks_catch_a_violation() -> None:
    assert _max_excess([(0.0, 50.0), (0.25, 50.0)], 200.0, 50.0) == 0.0  # exactly at the bound
    assert _max_excess([(0.0, 50.0), (0.1, 21.0)], 200.0, 50.0) == 1.0
    assert _max_excess([(0.0, 10.0), (5.0, 50.0), (5.125, 26.0)], 200.0, 50.0) == 1.0
    assert _max_overlap([(0.0, 2.0), (1.0, 3.0), (2.0, 4.0)]) == 2
    assert _max_overlap([(0.0, 2.0), (1.0, 3.0), (1.5, 4.0)]) == 3
