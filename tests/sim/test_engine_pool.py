"""The simulator tells the policy its engine's KV pool, as vLLM's
``vllm:cache_config_info`` does: a default config on a smaller engine
counts that engine's pool, not the one it was configured with."""

from __future__ import annotations

import dataclasses

import pytest

from slopolicy import PolicyConfig
from slopolicy.sim import PolicyScheduler, seed_scenario, simulate
from slopolicy.sim.ours import DEFAULT_SIGNALS
from slopolicy.sim.profiles import profile

SEED = seed_scenario(short=True)


@pytest.mark.parametrize("told", [True, False])
def test_a_default_config_counts_a_smaller_engines_pool(told: bool) -> None:
    engine = dataclasses.replace(SEED.engine, profile=profile("llama2-7b/h100"))
    assert engine.blocks * engine.block_size == 112_000
    signals = [s for s in DEFAULT_SIGNALS if told or s != "kv_capacity_tokens"]
    scheduler = PolicyScheduler(PolicyConfig(), signals=signals)
    result = simulate(SEED.workload, scheduler, engine)
    assert result.records
    stats = scheduler.policy.kv.statistics()
    assert stats.num_blocks == (7_000 if told else 26_688)
    assert stats.reserved_by_lane["interactive"] == (1_400 if told else 5_337)
