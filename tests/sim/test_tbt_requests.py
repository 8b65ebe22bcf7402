"""Per-request TBT in the simulator: slow gaps against a naive reference, and the
report judging them with the runtime's rule."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.core.slo.targets import SLOTargets, tbt_met
from slopolicy.sim import EngineSpec, SimRequest, Workload, evaluate, make_scheduler, profile
from slopolicy.sim.gaps import Gaps, slow_in_run
from tests.sim.harness import Arrival, run_engine, run_reference
from tests.sim.test_engine import _cases

H100 = profile("llama3-8b/h100")


@given(st.floats(1e-3, 1.0), st.floats(0, 1e-2), st.integers(0, 3000), st.floats(1e-3, 30.0))
def test_slow_iterations_in_a_run_count_as_one_by_one(
    first: float, step: float, k: int, bound: float
) -> None:
    assert slow_in_run(first, step, k, bound) == sum(first + step * i > bound for i in range(k))


@settings(max_examples=100, deadline=None)
@given(_cases(), st.floats(0.05, 0.95), st.booleans())
def test_each_requests_slow_gaps_match_the_reference(
    case: tuple[EngineSpec, list[Arrival], bool], where: float, bulk: bool
) -> None:
    spec, arrivals, priority = case
    theirs = run_reference(spec, arrivals, priority=priority)
    gaps = sorted(g for outcome in theirs.values() for g in outcome.gaps)
    # Bounds between two gaps that differ by more than float rounding: no edge.
    bounds = [(a + b) / 2 for a, b in itertools.pairwise(gaps) if b > a * (1 + 1e-6)]
    if not bounds:
        return
    bound = bounds[min(int(where * len(bounds)), len(bounds) - 1)]
    targets = {a.id: SLOTargets(tbt_p99=bound) for a in arrivals}
    mine = run_engine(spec, arrivals, priority=priority, bulk=bulk, targets=targets)
    for request_id, expected in theirs.items():
        assert mine[request_id].slow == sum(g > bound for g in expected.gaps), request_id
        tbt = mine[request_id].tbt
        assert tbt is not None
        assert tbt.stalls == sum(g >= bound for g in expected.gaps)  # the target is the stall


def test_gaps_count_stalls_from_their_own_threshold() -> None:
    gaps = Gaps(stall_s=0.05)
    for value in (0.01, 0.049, 0.05, 0.3):
        gaps.add(value)
    assert gaps.stalls == 2
    assert gaps.summary().max_s == 0.3


def _config(tbt_p99_s: float | None) -> PolicyConfig:
    slo: dict[str, float] = {"ttft_p95_s": 30.0}
    if tbt_p99_s is not None:
        slo["tbt_p99_s"] = tbt_p99_s
    return PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "interactive", "slo": slo},
                {"name": "heavy", "max_prompt_tokens": 100_000},
            ],
            "tiers": {"default": {"rate": 1e9, "burst": 1e9}},
        }
    )


@pytest.mark.parametrize("tbt_p99_s", [None, 0.1])
def test_a_prefill_landing_mid_stream_misses_the_tbt_target_only_where_it_is_set(
    tbt_p99_s: float | None,
) -> None:
    config = _config(tbt_p99_s)
    workload = Workload.of(
        [
            SimRequest("chat", 0.0, "a", 200, 400, 1024, "interactive"),
            SimRequest("doc", 0.5, "b", 50_000, 5, 64, "heavy"),
        ]
    )
    result, report = evaluate(make_scheduler("fcfs", config), workload, EngineSpec(H100), config)
    chat = next(r for r in result.records if r.request.id == "chat")
    lane = report.lanes["interactive"]
    assert lane.completed == 1
    assert lane.tbt_max_s is not None
    assert lane.tbt_max_s > 0.1  # the doc's prefill chunks stall chat
    if tbt_p99_s is None:
        assert chat.slow_gaps == 0
        assert lane.attained == 1
        assert lane.tbt_stalls >= 1  # at least 0.2 s, the default threshold
    else:
        assert chat.slow_gaps >= 1
        assert not tbt_met(chat.gaps, chat.slow_gaps)  # a few slow gaps in 399
        assert lane.attained == 0
        assert lane.tbt_stalls == chat.slow_gaps  # the stall threshold is the target
