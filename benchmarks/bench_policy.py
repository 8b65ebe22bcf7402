"""The sans-IO Policy: cost of one request's whole lifecycle.

Run from the repository root::

    python -m benchmarks.bench_policy [--quick]

Each step finishes the running request, submits a new one and dispatches the
next: submit + dispatch + finish per request, with 1,000 requests kept queued
and tenants rotating over 1, 1,000 or 100,000 ids. Prompt token counts are
given, so no tokenizer time is included. Prints the median per request over
repeats (this machine is noisy: compare ratios), the same with SLO recording
switched off (``Health.record`` made a no-op: what the trackers' share is),
and the floor: the same loop on ``benchmarks/policy_floor.py``, the bare
bookkeeping written inline.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from unittest import mock

from benchmarks.policy_floor import FloorPolicy
from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.health.health import Health

_QUEUED = 1_000


def _config(tenants: int) -> PolicyConfig:
    return PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": 2 * _QUEUED, "max_queue_wait_s": 1e9}],
            "tiers": {"default": {"rate": 1e12, "burst": 1e12, "max_concurrency": 10_000}},
            "kv": {"num_blocks": 1_000_000, "block_size": 16},
            "engine": {"max_running": 1},
            "max_tenants": max(tenants, 1_000),
        }
    )


def _requests(count: int, tenants: int) -> list[Request]:
    return [
        Request(
            id=f"r{index}",
            tenant=f"tenant-{index % tenants}",
            prompt_tokens=800,
            max_new_tokens=200,
        )
        for index in range(count)
    ]


def _run(tenants: int, steps: int) -> float:
    policy = Policy(_config(tenants), counter=HeuristicCounter())
    requests = _requests(_QUEUED + steps + 1, tenants)
    now = 0.0
    for request in requests[: _QUEUED + 1]:
        policy.submit(request, now=now)
    (running,) = policy.dispatch(now=now).started
    pending = iter(requests[_QUEUED + 1 :])
    gc.collect()
    start = time.perf_counter()
    for request in pending:
        now += 0.001
        policy.finish(running.id, now=now, output_tokens=150)
        policy.submit(request, now=now)
        (running,) = policy.dispatch(now=now).started
    return (time.perf_counter() - start) / steps


def _run_without_slo(tenants: int, steps: int) -> float:
    """:func:`_run` with SLO recording switched off, to size its share (a plain
    function: a mock's own call would cost more than what it replaces)."""
    with mock.patch.object(Health, "record", _record_nothing):
        return _run(tenants, steps)


def _record_nothing(self: Health, finished: object, now: float) -> None:
    return None


def _run_floor(tenants: int, steps: int) -> float:
    """The same loop on :class:`FloorPolicy`: the bare bookkeeping's cost."""
    policy = FloorPolicy()
    now = 0.0
    for index in range(_QUEUED + 1):
        policy.submit(f"r{index}", f"tenant-{index % tenants}", 800, 200, now)
    running = policy.dispatch(now)
    pending = [
        (f"r{index}", f"tenant-{index % tenants}")
        for index in range(_QUEUED + 1, _QUEUED + 1 + steps)
    ]
    gc.collect()
    start = time.perf_counter()
    for request_id, tenant in pending:
        now += 0.001
        policy.finish(running, now=now, output_tokens=150)
        policy.submit(request_id, tenant, 800, 200, now)
        running = policy.dispatch(now)
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args(argv)
    steps, repeats = (5_000, 3) if args.quick else (50_000, 5)
    print(f"submit + dispatch + finish, {_QUEUED:,} queued (median of {repeats} runs)")
    print(
        f"{'tenants':>9}{'us/request':>12}{'requests/s':>12}{'no SLO us':>11}"
        f"{'floor us':>10}{'x floor':>9}"
    )
    for tenants in (1, 1_000, 100_000):
        runs: dict[str, list[float]] = {"all": [], "no slo": [], "floor": []}
        for _ in range(repeats):  # interleaved: drift hits each column alike
            runs["all"].append(_run(tenants, steps))
            runs["no slo"].append(_run_without_slo(tenants, steps))
            runs["floor"].append(_run_floor(tenants, steps))
        seconds, without, floor = (statistics.median(values) for values in runs.values())
        print(
            f"{tenants:>9,}{seconds * 1e6:>12.2f}{1 / seconds:>12,.0f}{without * 1e6:>11.2f}"
            f"{floor * 1e6:>10.2f}{seconds / floor:>8.1f}x"
        )


if __name__ == "__main__":
    main()
