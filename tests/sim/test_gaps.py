"""Token gaps (TBT): the histogram, and the engine's gaps against a naive reference."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.sim import Engine, EngineSpec, profile, simulate
from slopolicy.sim.gaps import RATIO, STALL_S, Gaps
from tests.sim.harness import Arrival, run_engine, run_reference
from tests.sim.test_engine import _cases

H100 = profile("llama3-8b/h100")
_TOLERANCE = math.sqrt(RATIO) - 1 + 1e-9


def _nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@given(st.lists(st.floats(1e-4, 5.0), min_size=1, max_size=200), st.floats(0, 1))
def test_quantiles_are_within_a_quarter_percent_and_stalls_exact(
    values: list[float], q: float
) -> None:
    gaps = Gaps()
    for value in values:
        gaps.add(value)
    got = gaps.quantile(q)
    assert got is not None
    assert got == pytest.approx(_nearest_rank(values, q), rel=_TOLERANCE)
    assert gaps.stalls == sum(v >= STALL_S for v in values)
    assert (gaps.count, gaps.maximum) == (len(values), max(values))


@given(
    st.floats(1e-3, 1.0),
    st.floats(0, 1e-3),
    st.integers(1, 3000),
    st.integers(1, 5),
)
def test_a_run_counts_as_its_iterations_one_by_one(
    first: float, step: float, k: int, count: int
) -> None:
    run, single = Gaps(), Gaps()
    run.add_run(first, step, k, count)
    for i in range(k):
        single.add(first + step * i, count)
    assert (run.count, run.stalls) == (single.count, single.stalls)
    assert run.summary() == single.summary()


def test_no_gaps_give_no_quantiles() -> None:
    assert Gaps().summary().p99_s is None
    assert Gaps().summary().gaps == 0


@settings(max_examples=100)
@given(_cases())
def test_the_engine_counts_every_gap_the_reference_sees(
    case: tuple[EngineSpec, list[Arrival], bool],
) -> None:
    spec, arrivals, priority = case
    mine = run_engine(spec, arrivals, priority=priority)
    theirs = run_reference(spec, arrivals, priority=priority)
    for request_id, expected in theirs.items():
        got = mine[request_id].tbt
        assert got is not None
        assert got.gaps == len(expected.gaps), request_id
        if expected.gaps:
            assert got.max_s == pytest.approx(max(expected.gaps), rel=1e-9)
            assert got.p99_s == pytest.approx(
                _nearest_rank(expected.gaps, 0.99), rel=_TOLERANCE + 1e-9
            )
            assert got.stalls == sum(g >= STALL_S * (1 + 1e-9) for g in expected.gaps)


def _chat_behind_a_contract(threshold: int) -> tuple[int, float | None]:
    engine = Engine(EngineSpec(H100, long_prefill_token_threshold=threshold))
    engine.add("chat", 200, 400, group="chat")
    now, contract_added = 0.0, False
    while (end := engine.start(now, now + 0.5)) is not None:
        engine.complete()
        now = end
        if now > 0.5 and not contract_added:  # mid-stream
            engine.add("contract", 50_000, 5, group="contract")
            contract_added = True
    summary = engine.tbt()["chat"]
    return summary.stalls, summary.max_s


def test_a_long_prefill_landing_mid_stream_shows_as_a_stall_unless_capped() -> None:
    # Decoding requests are served first, so chat gets a token every
    # iteration, but each one carries an 8k-token chunk of the contract.
    stalls, longest = _chat_behind_a_contract(0)
    assert stalls >= 3
    assert longest is not None
    assert longest > 0.4
    capped_stalls, capped_longest = _chat_behind_a_contract(1024)
    assert capped_stalls == 0
    assert capped_longest is not None
    assert capped_longest < 0.1


def test_reports_carry_each_lanes_tbt() -> None:
    from slopolicy.sim import SimRequest, Workload, evaluate, make_scheduler

    config = PolicyConfig()
    workload = Workload.of(
        [SimRequest("chat", 0.0, "a", 200, 400, 1024), SimRequest("doc", 0.5, "b", 50_000, 5, 64)]
    )
    _, report = evaluate(make_scheduler("fcfs", config), workload, EngineSpec(H100), config)
    chat = report.lanes["interactive"]
    assert chat.tbt_stalls >= 1
    assert chat.tbt_max_s is not None
    assert chat.tbt_max_s > STALL_S
    assert chat.tbt_p99_s is not None
    assert chat.tbt_p99_s <= chat.tbt_max_s
    assert report.lanes["heavy"].tbt_stalls == 0  # five tokens after its own prefill
    result = simulate(workload, make_scheduler("fcfs", config), EngineSpec(H100))
    assert set(result.tbt) == {"default"}  # no lanes given: the scheduler's, else "default"
