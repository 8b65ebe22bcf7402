"""A request of ``n`` sequences runs in the engine as ``n`` requests of its shape."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim.comparison import OURS, compare
from slopolicy.sim.engine import Engine
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.llama_engine import make_engine
from slopolicy.sim.profiles import profile
from slopolicy.sim.workload import SimRequest, Workload
from tests.sim.test_llama_engine import CPU

VLLM = EngineSpec(
    profile("llama2-7b/a100"), max_num_seqs=4, max_num_batched_tokens=64, num_blocks=40
)
LLAMA = EngineSpec(
    dataclasses.replace(CPU, kv_tokens=4 * 160), max_num_seqs=4, max_num_batched_tokens=64,
    block_size=1, kind="llama.cpp",
)  # fmt: skip

Shape = tuple[str, int, int, int]  # id, prompt, output, sequences


def _drive(engine: Engine, shapes: list[Shape], split: bool) -> dict[str, tuple[float, float, int]]:
    """Each request's (first token, finish, output), its sequences added as
    one request or (``split``) as separate ones."""
    for request_id, prompt, output, n in shapes:
        if split:
            for k in range(n):
                assert engine.add(f"{request_id}/{k}", prompt, output)
        else:
            assert engine.add(request_id, prompt, output, sequences=n)
    first: dict[str, float] = {}
    found: dict[str, tuple[float, float, int]] = {}
    now = 0.0
    while (end := engine.start(now)) is not None:
        result = engine.complete()
        now = end
        for rid in result.first_tokens:
            first.setdefault(rid.split("/")[0], now)
        for rid, output in result.finished:
            parent = rid.split("/")[0]
            _, _, before = found.get(parent, (0.0, 0.0, 0))
            found[parent] = (first[parent], now, before + output)
    assert engine.idle
    return found


@settings(max_examples=40, deadline=None)
@given(
    spec=st.sampled_from([VLLM, LLAMA]),
    shapes=st.lists(
        st.tuples(st.integers(1, 100), st.integers(1, 40), st.integers(1, 4)),
        min_size=1,
        max_size=5,
    ),
)
def test_n_sequences_run_as_n_requests(
    spec: EngineSpec, shapes: list[tuple[int, int, int]]
) -> None:
    named = [(f"r{i}", p, o, n) for i, (p, o, n) in enumerate(shapes)]
    together = _drive(make_engine(spec), named, split=False)
    apart = _drive(make_engine(spec), named, split=True)
    assert together.keys() == apart.keys()
    for request_id, (first, finished, output) in apart.items():
        got = together[request_id]
        assert got[0] == pytest.approx(first)
        assert got[1] == pytest.approx(finished)
        assert got[2] == output


def test_a_request_of_n_sequences_holds_n_seats_and_counts_every_token() -> None:
    engine = make_engine(LLAMA)
    assert engine.add("r", 10, 5, sequences=3)
    with pytest.raises(UsageError, match="already in the engine"):
        engine.add("r", 10, 5)
    with pytest.raises(UsageError, match="sequences"):
        engine.add("s", 10, 5, sequences=0)
    end = engine.start(0.0)
    assert end is not None
    assert engine.complete().first_tokens == ("r",)
    assert engine.running == 3
    assert engine.output_tokens("r") == 3


def test_the_simulator_runs_n_choices_as_n_sequences() -> None:
    request = SimRequest("r", 0.0, "t", 50, 20, 20, n=4)
    workload = Workload((request,), 1.0, "n")
    comparison = compare(workload, PolicyConfig(), LLAMA, policies=(OURS, "fcfs"))
    for policy in (OURS, "fcfs"):
        (record,) = comparison.results[policy].records
        assert record.output_tokens == 4 * 20
        assert record.tpot is not None
        # A step of four decoding sequences (not one), give or take the later
        # children's prompts computed among the first steps.
        four, one = CPU.iteration_time(4, 0, 4 * 60, 4), CPU.iteration_time(1, 0, 60, 1)
        assert record.tpot == pytest.approx(four, rel=0.3)
        assert record.tpot > 2 * one


def test_a_request_id_may_not_hold_the_sequence_separator() -> None:
    with pytest.raises(UsageError, match="U\\+001F"):
        SimRequest("a\x1f1", 0.0, "t", 5, 5, 5)
