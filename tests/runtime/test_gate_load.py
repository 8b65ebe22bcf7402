"""Many requests, 10,000 concurrent waiters: all complete, fairly, in bounded
memory, and nothing runs once the gate is closed.

The suite runs two rounds of 12,000 requests per backend through one gate;
``python -m benchmarks.bench_gate --load`` runs the full 100,000.
"""

from __future__ import annotations

import gc
import sys

import anyio
import pytest

from slopolicy import Gate, Policy
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.load import load_config, run_load
from tests.runtime.conftest import assert_clean

pytestmark = pytest.mark.anyio

REQUESTS = 12_000
WAITERS = 10_000
PROMPTS = {"a": 100, "b": 200, "c": 300, "d": 400}


def _blocks() -> int:
    gc.collect()
    return sys.getallocatedblocks()


async def test_many_requests_through_10000_waiters() -> None:
    policy = Policy(load_config(WAITERS), counter=HeuristicCounter())
    before = len(anyio.get_running_tasks())
    retained: list[int] = []
    async with Gate(policy) as gate:
        for _ in range(2):
            report = await run_load(gate, requests=REQUESTS, concurrency=WAITERS, prompts=PROMPTS)
            assert gate.statistics().waiting == 0
            assert_clean(policy)
            assert report.issued == report.completed == REQUESTS
            assert report.peak_waiting == WAITERS
            assert report.peak_running == policy.max_running
            # Prompts differ 4x, yet while all four tenants waited their
            # service in cost units stayed within the VTC bound of each other.
            assert report.max_gap <= report.gap_bound
            retained.append(_blocks())
    assert len(anyio.get_running_tasks()) == before
    # The first round fills what is sized by the load (tenant state, SLO
    # windows, queues' lazily pruned indexes); a second round of as many
    # requests adds next to nothing, where a leak would add its share again.
    assert retained[1] - retained[0] < 5_000, retained
