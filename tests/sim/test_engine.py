from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy.errors import UsageError
from slopolicy.sim import Engine, EngineSpec, profile
from slopolicy.sim.profiles import PROFILES, EngineProfile
from tests.sim.harness import Arrival, run_engine, run_reference

A100 = profile("llama3-8b/a100")


def _single(spec: EngineSpec, prompt: int, output: int) -> tuple[float, float]:
    engine = Engine(spec)
    engine.add("r", prompt, output)
    now, first = 0.0, None
    while (end := engine.start(now)) is not None:
        result = engine.complete()
        now = end
        if result.first_tokens:
            first = now
    assert first is not None
    return first, now


def test_a_single_stream_decodes_at_about_75_tokens_per_second_on_an_a100() -> None:
    # SIMULATOR.md: Llama-3.1-8B single stream ~75 tok/s (~13 ms/token) on an A100.
    first, last = _single(EngineSpec(A100), 500, 201)
    per_token = (last - first) / 200
    assert per_token == pytest.approx(0.013, rel=0.15)
    assert 1 / per_token == pytest.approx(75, rel=0.15)


def test_a_2k_prompt_prefills_in_about_150_ms_on_an_a100() -> None:
    first, _ = _single(EngineSpec(A100), 2048, 1)
    assert first == pytest.approx(0.150, rel=0.15)


def test_every_profile_is_faster_on_an_h100() -> None:
    for model in ("llama2-7b", "llama3-8b"):
        slow, fast = PROFILES[f"{model}/a100"], PROFILES[f"{model}/h100"]
        assert fast.iteration_time(2048, 2048 * 1024, 0) < slow.iteration_time(2048, 2048 * 1024, 0)


def test_the_iteration_time_is_the_calibrated_formula() -> None:
    p = EngineProfile("x", t_w=0.01, a=1e-4, beta_d=1e-7, beta_p=1e-9, kv_tokens=1000, t_cpu=0.002)
    expected = (
        0.002 + math.sqrt(0.01**2 + (1e-4 * 300) ** 2) + 1e-9 * 250 * (50 + 125) + 1e-7 * 4000
    )
    assert p.iteration_time(300, 250 * (50 + 125), 4000) == pytest.approx(expected)


def test_each_sampled_sequence_costs_t_sample() -> None:
    # A lone request samples once per iteration: its first token after its
    # prompt, then each output token (the prompt's other chunks sample nothing).
    spec = EngineSpec(A100, max_num_batched_tokens=512)
    sampling = EngineSpec(dataclasses.replace(A100, t_sample=0.002), max_num_batched_tokens=512)
    (first, last), (first_s, last_s) = _single(spec, 2000, 11), _single(sampling, 2000, 11)
    assert first_s - first == pytest.approx(0.002)
    assert (last_s - first_s) - (last - first) == pytest.approx(10 * 0.002)


@given(
    k=st.integers(1, 5000),
    n=st.integers(1, 256),
    context=st.integers(1, 10**6),
    seconds=st.floats(1e-4, 100),
    t_sample=st.sampled_from([0.0, 0.002]),
    ubatches=st.integers(1, 8),
    open_requests=st.integers(0, 300),
)
def test_decode_runs_are_the_sum_of_their_iterations(
    k: int, n: int, context: int, seconds: float, t_sample: float, ubatches: int,
    open_requests: int,
) -> None:  # fmt: skip
    p = dataclasses.replace(A100, t_sample=t_sample, t_ubatch=0.0025, t_wake=5e-6)
    shape = {"ubatches": ubatches, "open_requests": open_requests}
    total = sum(p.iteration_time(n, 0, context + n * i, n, **shape) for i in range(min(k, 50)))
    assert p.decode_time(min(k, 50), n, context, **shape) == pytest.approx(total, rel=1e-9)
    fewest = p.decode_iterations(seconds, n, context, **shape)
    assert p.decode_time(fewest, n, context, **shape) >= seconds
    assert fewest == 1 or p.decode_time(fewest - 1, n, context, **shape) < seconds


@st.composite
def _cases(draw: st.DrawFn) -> tuple[EngineSpec, list[Arrival], bool]:
    block = draw(st.sampled_from([4, 16]))
    blocks = draw(st.integers(20, 120))
    seqs = draw(st.integers(1, 8))
    spec = EngineSpec(
        profile("llama2-7b/a100"),
        max_num_seqs=seqs,
        # Small budgets with a prefill cap leave decoders behind a prefill
        # without a token (they stall), so that path is exercised too.
        max_num_batched_tokens=draw(st.integers(max(seqs, 8), 300) | st.just(max(seqs, 8))),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 5, 7, 40])),
        block_size=block,
        num_blocks=blocks,
    )
    capacity = blocks * block
    count = draw(st.integers(1, 14))
    arrivals = []
    for i in range(count):
        prompt = draw(st.integers(1, min(400, capacity - 1)))
        output = draw(st.integers(1, min(80, capacity - prompt)))
        at = draw(st.floats(0, 3, allow_nan=False))
        arrivals.append(Arrival(at, f"r{i}", prompt, output, draw(st.integers(0, 2))))
    arrivals.sort(key=lambda a: a.at)
    return spec, arrivals, draw(st.booleans())


@settings(max_examples=150)
@given(_cases())
def test_the_engine_matches_a_naive_reference(case: tuple[EngineSpec, list[Arrival], bool]) -> None:
    spec, arrivals, priority = case
    mine = run_engine(spec, arrivals, priority=priority)
    theirs = run_reference(spec, arrivals, priority=priority)
    assert mine.keys() == theirs.keys()
    for request_id, expected in theirs.items():
        got = mine[request_id]
        assert got.output == expected.output, request_id
        assert got.preemptions == expected.preemptions, request_id
        assert got.first == pytest.approx(expected.first, rel=1e-9, abs=1e-12), request_id
        assert got.finished == pytest.approx(expected.finished, rel=1e-9, abs=1e-12), request_id


@settings(max_examples=60)
@given(_cases())
def test_bulk_decode_runs_change_nothing(case: tuple[EngineSpec, list[Arrival], bool]) -> None:
    spec, arrivals, priority = case
    bulk = run_engine(spec, arrivals, priority=priority)
    single = run_engine(spec, arrivals, priority=priority, bulk=False)
    assert bulk.keys() == single.keys()
    for request_id, expected in single.items():
        got = bulk[request_id]
        assert (got.output, got.preemptions) == (expected.output, expected.preemptions)
        assert got.finished == pytest.approx(expected.finished, rel=1e-9, abs=1e-12)


def test_a_long_prefill_takes_the_whole_budget_unless_capped() -> None:
    h100 = profile("llama3-8b/h100")
    arrivals = [Arrival(0.0, "doc", 50_000, 10), Arrival(0.05, "chat", 500, 10)]
    plain = run_engine(EngineSpec(h100), arrivals)
    capped = run_engine(EngineSpec(h100, long_prefill_token_threshold=1024), arrivals)
    assert plain["chat"].first is not None
    assert capped["chat"].first is not None
    assert plain["chat"].first > 1.5  # waits for the whole 50k prefill
    assert capped["chat"].first < 0.3


def test_kv_exhaustion_preempts_the_latest_under_fcfs_and_the_lowest_priority_otherwise() -> None:
    spec = EngineSpec(profile("llama2-7b/a100"), block_size=16, num_blocks=12, max_num_seqs=4)
    arrivals = [Arrival(0.0, "a", 60, 60, 1), Arrival(0.0, "b", 60, 60, 0)]
    fcfs = run_engine(spec, arrivals)
    assert fcfs["b"].preemptions > 0
    assert fcfs["a"].preemptions == 0
    by_priority = run_engine(spec, arrivals, priority=True)
    assert by_priority["a"].preemptions > 0
    assert by_priority["b"].preemptions == 0
    assert all(o.output == 60 for o in (*fcfs.values(), *by_priority.values()))


def test_requests_longer_than_the_model_length_are_refused() -> None:
    engine = Engine(EngineSpec(profile("llama2-7b/a100"), num_blocks=10, block_size=16))
    assert not engine.add("big", 150, 20)
    assert engine.add("fits", 100, 60)
    with pytest.raises(UsageError, match="already in the engine"):
        engine.add("fits", 1, 1)


def test_start_twice_and_complete_without_start_are_misuse() -> None:
    engine = Engine(EngineSpec(A100))
    with pytest.raises(UsageError, match="no iteration"):
        engine.complete()
    assert engine.start(0.0) is None
    engine.add("r", 10, 2)
    engine.start(0.0)
    with pytest.raises(UsageError, match="in flight"):
        engine.start(0.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": 4, "max_num_seqs": 8}, "max_num_batched_tokens"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold"),
        ({"num_blocks": 10, "max_model_len": 1000}, "max_model_len"),
    ],
)
def test_bad_engine_knobs_raise(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        EngineSpec(A100, **changes)


def test_unknown_profiles_name_the_known_ones() -> None:
    with pytest.raises(UsageError, match="llama3-8b/h100"):
        profile("gpt-5/tpu")
