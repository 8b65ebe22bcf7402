"""The llama.cpp engine kind: slots, the least recently used free slot, the
prompt budget in slot-index order and the start cost, against a naive reference."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy.errors import UsageError
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.llama_engine import LlamaEngine, make_engine
from slopolicy.sim.profiles import EngineProfile, profile
from slopolicy.sim.ubatches import split
from slopolicy.sim.workload import SimRequest
from tests.sim.harness import Arrival, run_engine, run_reference
from tests.sim.slot_reference import split_equal

CPU = EngineProfile(
    "cpu", 0.0004, 60e-6, 3e-6, 0.05e-6, 4096, 0.0007, 0.0018, 0.013, t_ubatch=0.0025, t_wake=6e-6
)


def _llama(
    slots: int = 2, budget: int = 64, context: int = 256, t_start: float = CPU.t_start
) -> EngineSpec:
    return EngineSpec(
        dataclasses.replace(CPU, kv_tokens=slots * context, t_start=t_start),
        max_num_seqs=slots,
        max_num_batched_tokens=budget,
        block_size=1,
        kind="llama.cpp",
    )


@st.composite
def _cases(draw: st.DrawFn) -> tuple[EngineSpec, list[Arrival]]:
    slots = draw(st.integers(1, 6))
    context = draw(st.integers(8, 300))
    budget = draw(st.integers(max(slots, 4), 200))
    spec = EngineSpec(
        dataclasses.replace(CPU, t_start=draw(st.sampled_from([0.0, 0.013]))),
        max_num_seqs=slots,
        max_num_batched_tokens=budget,
        block_size=draw(st.sampled_from([1, 16])),
        num_blocks=None,
        max_model_len=context,
        kind="llama.cpp",
        ubatch_tokens=draw(st.sampled_from([None, 1, 3, max(1, budget // 4)])),
    )
    spec = dataclasses.replace(
        spec,
        profile=dataclasses.replace(spec.profile, kv_tokens=slots * -(-context // 16) * 16),
    )
    arrivals = []
    for i in range(draw(st.integers(1, 14))):
        prompt = draw(st.integers(1, context - 1))
        output = draw(st.integers(1, context - prompt))
        at = draw(st.floats(0, 0.5, allow_nan=False))
        arrivals.append(Arrival(at, f"r{i}", prompt, output))
    arrivals.sort(key=lambda a: a.at)
    return spec, arrivals


@settings(max_examples=80, deadline=None)
@given(_cases())
def test_the_slot_engine_matches_a_naive_llama_server(
    case: tuple[EngineSpec, list[Arrival]],
) -> None:
    spec, arrivals = case
    theirs = run_reference(spec, arrivals)
    for bulk in (True, False):
        mine = run_engine(spec, arrivals, bulk=bulk)
        for request_id, expected in theirs.items():
            got = mine[request_id]
            assert got.output == expected.output, request_id
            assert got.preemptions == 0, request_id
            assert got.first == pytest.approx(expected.first, rel=1e-9, abs=1e-12), request_id
            assert got.finished == pytest.approx(expected.finished, rel=1e-9, abs=1e-12)


def test_a_lower_slot_computes_its_prompt_first_whoever_came_first() -> None:
    # Two free slots never used: the first request takes the highest (1), the
    # next slot 0, whose prompt then takes the budget first.
    spec = _llama(budget=32)
    arrivals = [Arrival(0.0, "early", 200, 2), Arrival(0.0001, "late", 200, 2)]
    found = run_engine(spec, arrivals)
    assert found["late"].first is not None
    assert found["early"].first is not None
    assert found["late"].first < found["early"].first
    vllm = run_engine(dataclasses.replace(spec, kind="vllm", block_size=16), arrivals)
    assert vllm["early"].first is not None
    assert vllm["late"].first is not None
    assert vllm["early"].first < vllm["late"].first  # vLLM: in running (start) order


def test_a_new_request_takes_the_least_recently_released_slot() -> None:
    engine = LlamaEngine(_llama(slots=3))
    for name in ("a", "b", "c"):
        engine.add(name, 4, 2)
    now = 0.0
    engine.start(now)
    assert [engine.slot(n) for n in "abc"] == [2, 1, 0]
    now = engine.complete().end
    engine.start(now)
    now = engine.complete().end  # all three finish together
    assert engine.idle
    engine.add("d", 4, 2)
    engine.add("e", 4, 2)
    engine.start(now)
    # Released together, in slot order: 0 first, then 1.
    assert (engine.slot("d"), engine.slot("e")) == (0, 1)
    assert engine.slot("a") is None


def test_each_request_started_costs_t_start() -> None:
    arrivals = [Arrival(0.0, f"r{i}", 4, 1) for i in range(3)]
    plain = run_engine(_llama(slots=3, t_start=0.0), arrivals)
    costly = run_engine(_llama(slots=3, t_start=0.01), arrivals)
    assert costly["r0"].first == pytest.approx(plain["r0"].first + 3 * 0.01)  # type: ignore[operator]
    vllm = EngineSpec(dataclasses.replace(profile("llama3-8b/h100"), t_start=0.01))
    assert run_engine(vllm, arrivals)["r0"].first == pytest.approx(
        run_engine(EngineSpec(profile("llama3-8b/h100")), arrivals)["r0"].first + 0.03  # type: ignore[operator]
    )


def test_requests_wait_for_a_slot_and_never_preempt() -> None:
    engine = make_engine(_llama(slots=2, context=64))
    assert isinstance(engine, LlamaEngine)
    assert not engine.add("big", 60, 10)  # longer than a slot's context: refused
    for name in "abc":
        assert engine.add(name, 40, 24)
    now, preempted = 0.0, list[str]()
    while (end := engine.start(now)) is not None:
        result = engine.complete()
        preempted += result.preempted
        now = end
        assert engine.running <= 2
    assert engine.idle
    assert preempted == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "sglang"}, "kind"),
        ({"long_prefill_token_threshold": 8}, "long_prefill_token_threshold"),
        ({"max_model_len": 300}, "every slot"),
    ],
)
def test_bad_llama_knobs_raise(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        dataclasses.replace(_llama(), **changes)


def test_a_slot_holds_the_cache_over_the_slots_by_default() -> None:
    assert _llama(slots=4, context=100).model_len == 100
    assert make_engine(EngineSpec(CPU)).__class__.__name__ == "Engine"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 7), st.integers(1, 9000)), unique_by=lambda d: d[0]).map(
        sorted
    ),
    st.lists(
        st.tuples(st.integers(8, 15), st.integers(1, 300), st.integers(0, 9000)),
        unique_by=lambda p: p[0],
    ).map(sorted),
    st.integers(1, 300),
    st.permutations(range(16)),
)
def test_micro_batches_follow_llamas_split_token_by_token(
    decoding: list[tuple[int, int]],
    prompts: list[tuple[int, int, int]],
    ubatch: int,
    names: list[int],
) -> None:
    # Any slot numbering: decoding slots and prompt slots drawn apart, then renamed.
    rename = dict(enumerate(names))
    decoding = sorted((rename[s], c) for s, c in decoding)
    prompts = sorted((rename[s], n, c) for s, n, c in prompts)
    tokens = [slot for slot, _ in decoding] + [slot for slot, n, _ in prompts for _ in range(n)]
    held = dict(decoding) | {slot: c for slot, _, c in prompts}
    step = split(decoding, prompts, ubatch)
    count, context, pairs = split_equal(tokens, ubatch, held, len(decoding))
    assert (step.count, step.context) == (count, context)
    assert step.pairs == pytest.approx(pairs, rel=1e-12)


def test_scattered_slots_decode_in_more_micro_batches() -> None:
    # Measured on llama-server (-np 8, -ub 256): four decoders in slots 0-3
    # one graph per step, in 0, 2, 4, 6 four.
    assert split([(0, 9), (1, 9), (2, 9), (3, 9)], [], 256).count == 1
    assert split([(0, 9), (2, 9), (4, 9), (6, 9)], [], 256).count == 4
    # Decoders in 0-2 and a prompt in 3: one token of each, then the prompt's rest.
    assert split([(0, 9), (1, 9), (2, 9)], [(3, 200, 0)], 256).count == 2
    # The prompt in 0: its slot is not after 2, so it goes alone.
    assert split([(1, 9), (2, 9)], [(0, 200, 0)], 256).count == 2
    # Two prompts side by side share micro-batches, as many tokens each.
    assert split([], [(4, 100, 0), (5, 100, 0)], 256).count == 1
    assert split([], [(4, 100, 0), (5, 150, 0)], 256).count == 2  # 100 + 100, then 50 of 5's
    assert split([], [(4, 100, 0), (5, 100, 0)], 128).count == 2  # 64 + 64, then 36 + 36


def test_decodes_beside_a_prompt_are_charged_its_context() -> None:
    # llama_kv_cache::get_n_kv: one span of cells for every stream of a
    # micro-batch, the largest; measured, it costs decodes only beside a prompt.
    assert split([(0, 100), (1, 5000)], [], 256).context == 100 + 5000
    assert split([(0, 100), (2, 5000)], [], 256).context == 100 + 5000
    # Beside a prompt 3,000 tokens in (its next token joins their micro-batch):
    # both decodes are charged 3,001 cells, and so is that token, computed as
    # a row; the prompt's other 199 tokens are tiled, beta_p's pairs.
    beside = split([(0, 100), (1, 50)], [(2, 200, 3000)], 256)
    assert beside.context == 2 * 3001 + 3001
    assert beside.pairs == 199 * (3001 + 199 / 2)
    # The same prompt in a slot apart: the decodes keep their own.
    apart = split([(0, 100), (1, 50)], [(5, 200, 3000)], 256)
    assert (apart.context, apart.pairs) == (100 + 50, 200 * (3000 + 200 / 2))


def test_a_long_prompt_cut_by_a_short_one_beside_it_is_computed_row_by_row() -> None:
    # Measured on llama-server (-ub 256, pinned slots, a 10,000-token prompt in
    # slot 7): a 63-token chat in slot 6 made the step that held it 245-263 ms
    # against 60-70 around it; a 64-token one cost nothing. split_equal gives
    # the long prompt as many tokens as the chat in their shared micro-batch,
    # and ggml-cpu tiles a sequence's attention only from 64 rows up.
    def cut(chat: int) -> tuple[int, float]:
        step = split([], [(6, chat, 0), (7, 256 - chat, 7000)], 256)
        return step.context, step.pairs

    context, pairs = cut(63)
    chat, rows = 63 * 64 // 2, 63 * 7000 + 63 * 64 // 2
    assert context == chat + rows
    assert pairs == 130 * (7063 + 130 / 2)
    context, pairs = cut(64)
    assert context == 0
    assert pairs == 64 * (0 + 32) + 64 * (7000 + 32) + 128 * (7064 + 64)
    # Apart (slot 0), the chat alone is rows over its own cells, the long prompt tiled.
    apart = split([], [(0, 63, 0), (7, 193, 7000)], 256)
    assert (apart.context, apart.pairs) == (63 * 64 // 2, 193 * (7000 + 193 / 2))


def test_slots_left_apart_cost_an_extra_micro_batch_each_step() -> None:
    # a, b, c take slots 2, 1, 0 and prefill together; b ends after its second
    # token, and a (slot 2) and c (slot 0) decode their last 18 tokens apart:
    # two micro-batches a step.
    arrivals = [Arrival(0.0, "a", 4, 20), Arrival(0.0, "b", 4, 2), Arrival(0.0, "c", 4, 20)]
    split = run_engine(_llama(slots=3), arrivals)
    flat = EngineSpec(
        dataclasses.replace(CPU, t_ubatch=0.0, kv_tokens=3 * 256),
        max_num_seqs=3, max_num_batched_tokens=64, block_size=1, kind="llama.cpp",
    )  # fmt: skip
    plain = run_engine(flat, arrivals)
    assert split["b"].finished == pytest.approx(plain["b"].finished)
    assert split["a"].finished - plain["a"].finished == pytest.approx(18 * CPU.t_ubatch)  # type: ignore[operator]


def test_queued_requests_slow_every_streamed_token() -> None:
    # T_wake: decode steps of the same batch take longer with requests queued behind it.
    arrivals = [Arrival(0.0, f"r{i}", 4, 30) for i in range(2)]
    queued = arrivals + [Arrival(0.001, f"q{i}", 4, 1) for i in range(40)]
    alone = run_engine(_llama(slots=2), arrivals)
    behind = run_engine(_llama(slots=2), queued)
    assert behind["r0"].finished > alone["r0"].finished  # type: ignore[operator]
    no_wake = EngineSpec(
        dataclasses.replace(CPU, t_wake=0.0, kv_tokens=2 * 256),
        max_num_seqs=2, max_num_batched_tokens=64, block_size=1, kind="llama.cpp",
    )  # fmt: skip
    assert run_engine(no_wake, queued)["r0"].finished == pytest.approx(
        run_engine(no_wake, arrivals)["r0"].finished
    )


def test_a_llama_servers_capacity_holds_its_backlog_in_front_of_it() -> None:
    # Queued inside llama-server, 2,000 requests would slow every token by
    # T_wake each; the capacity is measured with the slots kept full instead.
    from slopolicy.sim.offered_load import capacity

    requests = [SimRequest(f"r{i}", 0.0, "t", 40, 20, 20) for i in range(50)]
    spec = _llama(slots=4, budget=64, context=256)
    quiet = dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, t_wake=0.0))
    assert capacity(requests, spec) == pytest.approx(capacity(requests, quiet), rel=0.05)
    assert capacity(requests, spec) > 0
