"""The engine model's abort path (vLLM's ``abort``), and a scheduler's
revocations in the simulator: the engine drops the request, its seat and KV
are free for the next iteration, nothing of it is reported again, and its
client gets a retryable refusal."""

from __future__ import annotations

import dataclasses

from slopolicy.sim import (
    FCFS,
    Engine,
    EngineSpec,
    EngineView,
    Released,
    SimRequest,
    Workload,
    profile,
    simulate,
)
from slopolicy.sim.llama_engine import make_engine
from slopolicy.sim.records import SimOutcome
from tests.sim.test_llama_engine import _llama

SPEC = EngineSpec(profile("llama2-7b/a100"), block_size=16, num_blocks=40, max_num_seqs=4)


def _run(engine: Engine, now: float = 0.0) -> tuple[float, list[str], list[str]]:
    """Run to the end: the time, the first tokens and the finished ids."""
    first: list[str] = []
    finished: list[str] = []
    while (end := engine.start(now)) is not None:
        result = engine.complete()
        now = end
        first.extend(result.first_tokens)
        finished.extend(i for i, _ in result.finished)
    return now, first, finished


def test_an_aborted_decoding_request_frees_its_seat_and_kv() -> None:
    engine = Engine(SPEC)
    engine.add("a", 100, 50)
    engine.add("b", 100, 50)
    now = 0.0
    for _ in range(3):  # both prefilled, then two decode iterations
        end = engine.start(now, horizon=now)
        assert end is not None
        engine.complete()
        now = end
    assert engine.output_tokens("a") == 3
    used = engine.used_blocks
    assert engine.abort("a")
    assert engine.running == 1
    assert engine.used_blocks < used
    assert engine.output_tokens("a") == 0
    _, _, finished = _run(engine, now)
    assert finished == ["b"]
    assert engine.idle
    assert engine.used_blocks == 0


def test_an_abort_while_an_iteration_runs_drops_its_results() -> None:
    engine = Engine(SPEC)
    engine.add("a", 100, 1)  # one token: its first is its last
    engine.add("b", 100, 3)
    end = engine.start(0.0)
    assert end is not None
    # It finished inside the iteration in flight: no longer in the engine,
    # and still nothing of it is reported.
    assert not engine.abort("a")
    result = engine.complete()
    assert "a" not in result.first_tokens
    assert all(i != "a" for i, _ in result.finished)
    assert result.first_tokens == ("b",)
    assert _run(engine, end)[2] == ["b"]


def test_a_waiting_request_aborts_before_it_starts() -> None:
    for priority in (False, True):
        spec = dataclasses.replace(SPEC, max_num_seqs=1)
        engine = Engine(spec, scheduling="priority" if priority else "fcfs")
        engine.add("a", 100, 5, priority=1)
        engine.add("b", 100, 5, priority=0 if priority else 1)
        engine.add("c", 100, 5, priority=2)
        assert engine.waiting == 3
        assert engine.abort("b")
        assert engine.waiting == 2
        assert engine.waiting_tokens == 200
        _, first, finished = _run(engine)
        assert sorted(first) == sorted(finished) == ["a", "c"]


def test_every_sequence_of_a_request_aborts_and_an_unknown_id_is_no_abort() -> None:
    engine = Engine(SPEC)
    engine.add("n", 50, 20, sequences=3)
    engine.add("one", 50, 20)
    end = engine.start(0.0)
    assert end is not None
    engine.complete()
    assert engine.running == 4
    assert engine.abort("n")
    assert engine.running == 1
    assert not engine.abort("n")
    assert not engine.abort("never")
    _, _, finished = _run(engine, end)
    assert finished == ["one"]
    engine.add("n", 50, 2)  # the id is free again
    assert _run(engine)[2] == ["n"]


def test_an_aborted_request_gives_its_llama_cpp_slot_back() -> None:
    engine = make_engine(_llama(slots=1), scheduling="fcfs")
    engine.add("a", 20, 30)
    engine.add("b", 20, 3)
    end = engine.start(0.0)
    assert end is not None
    engine.complete()
    assert engine.slot("a") == 0  # type: ignore[attr-defined]
    assert engine.abort("a")
    assert engine.slot("a") is None  # type: ignore[attr-defined]
    assert _run(engine, end)[2] == ["b"]


class _Revoking(FCFS):
    """FCFS that revokes ``victim`` at the first dispatch after it started
    (once), as a policy reclaiming its KV would."""

    name = "revoking"

    def __init__(self, victim: str) -> None:
        super().__init__()
        self.victim = victim
        self.started = False
        self.done = False
        self.finished: list[str] = []

    def dispatch(self, now: float, engine: EngineView) -> Released:
        released = super().dispatch(now, engine)
        if self.started and not self.done:
            self.done = True
            return Released(released.started, revoked=(self.victim,))
        self.started = self.started or any(r.id == self.victim for r in released.started)
        return released

    def finish(self, request_id: str, *, now: float, output_tokens: int) -> None:
        self.finished.append(request_id)


def _workload(retries: int) -> Workload:
    requests = (
        SimRequest("long", 0.0, "big", 200, 400, 400, retries=retries),
        SimRequest("short", 0.5, "small", 200, 20, 20),
    )
    return Workload(requests, 1.0)


def test_a_revoked_request_is_aborted_and_refused_retryably() -> None:
    scheduler = _Revoking("long")
    result = simulate(_workload(retries=0), scheduler, SPEC)
    long, short = result.records
    assert (long.outcome, long.reason) == (SimOutcome.REJECTED, "revoked")
    # Revoked at the dispatch after its start: its first iteration's end.
    assert long.finished_at is not None
    assert 0 < long.finished_at < 0.1
    assert long.first_token_at is None
    assert long.output_tokens == 0
    assert short.outcome is SimOutcome.COMPLETED
    assert scheduler.finished == ["short"]  # the engine reported nothing of it again


def test_a_client_that_may_retry_sends_a_revoked_request_again() -> None:
    scheduler = _Revoking("long")
    result = simulate(_workload(retries=1), scheduler, SPEC)
    long, _ = result.records
    assert long.outcome is SimOutcome.COMPLETED
    assert long.attempts == 2
    assert long.output_tokens == 400
    # Sent again after the client's backoff (0.5 s less up to 25% jitter).
    assert long.dispatched_at is not None
    assert long.dispatched_at > 0.375
