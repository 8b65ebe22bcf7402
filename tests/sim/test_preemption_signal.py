"""The simulator feeds the policy the engine's preemptions per second, as a
scrape of vLLM's ``vllm:num_preemptions_total`` would: the counter's growth
between two ticks over the time between them."""

from __future__ import annotations

import itertools
from collections.abc import Collection

import pytest

from slopolicy import PolicyConfig
from slopolicy.sim import EngineView, PolicyScheduler, SimRequest, Workload, simulate
from slopolicy.sim.engine import EngineSpec
from slopolicy.sim.ours import DEFAULT_SIGNALS
from slopolicy.sim.profiles import profile


class Watched(PolicyScheduler):
    """Ours, noting at every tick the engine's preemption count and the rate
    the policy then holds."""

    def __init__(self, signals: Collection[str]) -> None:
        super().__init__(PolicyConfig(), signals=signals)
        self.ticks: list[tuple[float, int, float | None]] = []

    def observe(self, engine: EngineView, now: float) -> None:
        super().observe(engine, now)
        held = self.policy.health.signals.current(now=now).preemption_rate
        self.ticks.append((now, engine.preemptions(), held))


def _overcommitted(signals: Collection[str]) -> tuple[Watched, int]:
    """The policy believes in the default pool (26,688 blocks) while the engine
    has 300: the answers outgrow the engine and it preempts."""
    requests = tuple(
        SimRequest(f"r{i}", i * 0.05, f"t{i % 4}", 200, 400, 512, stream="chat") for i in range(48)
    )
    scheduler = Watched(signals)
    engine = EngineSpec(profile("llama3-8b/h100"), num_blocks=300)
    result = simulate(Workload(requests, 3.0, "overcommitted"), scheduler, engine)
    return scheduler, result.engine.preemptions


def test_the_policy_holds_the_engines_preemptions_per_second() -> None:
    assert "preemption_rate" in DEFAULT_SIGNALS
    scheduler, preempted = _overcommitted(DEFAULT_SIGNALS)
    assert preempted > 0
    ticks = scheduler.ticks
    assert any(rate for _, _, rate in ticks)
    for (then, before, _), (now, count, rate) in itertools.pairwise(ticks):
        assert rate == pytest.approx((count - before) / (now - then))
    assert ticks[0][2] is None  # a rate needs two readings


def test_without_the_signal_the_policy_holds_none() -> None:
    scheduler, preempted = _overcommitted(("kv_usage", "waiting", "running"))
    assert preempted > 0
    assert all(rate is None for _, _, rate in scheduler.ticks)
