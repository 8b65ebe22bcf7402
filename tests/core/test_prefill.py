"""The prefill gate: the backlog it counts, the rate it learns, when it opens;
and the policy's SLO deadlines built on it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Outcome
from slopolicy.core.queueing.prefill import PrefillGate

_STEP = st.tuples(
    st.sampled_from(["start", "first", "left", "wait"]),
    st.integers(1, 20_000),
    st.floats(0.0, 2.0),
)


@given(st.lists(_STEP, max_size=60), st.floats(0.01, 2.0))
def test_the_backlog_is_what_was_started_and_not_through_prefill(
    steps: list[tuple[str, int, float]], horizon: float
) -> None:
    gate = PrefillGate(horizon)
    outstanding: list[int] = []
    now = 0.0
    for action, tokens, dt in steps:
        now += dt
        if action == "start":
            gate.started(tokens, now=now)
            outstanding.append(tokens)
        elif action in ("first", "left") and outstanding:
            done = outstanding.pop(0)
            (gate.first_token if action == "first" else gate.left)(done, now=now)
        assert gate.backlog == sum(outstanding)
        assert 0 <= gate.uncomputed <= gate.backlog
        assert gate.rate is None or (gate.rate > 0 and math.isfinite(gate.rate))
        # Work conserving: with nothing left to compute, anything may start.
        if gate.uncomputed == 0:
            assert gate.ready(now=now)
        # The time it names is one at which a start may go, if nothing else
        # happens first (time then moves on to it).
        at = gate.ready_at(now=now)
        assert at >= now
        assert gate.ready(now=at)
        now = at


@pytest.mark.parametrize("rate", [900.0, 40_000.0])
def test_it_learns_the_prefill_rate_of_a_serial_engine(rate: float) -> None:
    gate = PrefillGate(0.1)
    now = 0.0
    for k in range(200):  # prompts of 500..1500 tokens, computed one after the other
        tokens = 500 + (k * 37) % 1000
        gate.started(tokens, now=now)
        now += tokens / rate
        gate.first_token(tokens, now=now)
        now += 0.5  # idle gaps do not count
    assert gate.rate == pytest.approx(rate, rel=0.01)


def test_a_long_prompt_holds_the_next_start_for_about_one_horizon() -> None:
    gate = PrefillGate(0.1)
    gate.started(1000, now=0.0)
    gate.first_token(1000, now=1.0)  # 1,000 tokens/s once the window is full...
    gate.started(1000, now=1.0)
    gate.first_token(1000, now=2.0)
    assert gate.rate == pytest.approx(1000.0)
    gate.started(50_000, now=2.0)  # ...then a 50k prompt: counts as one budget (100 tokens)
    assert gate.ready(now=2.0)  # at the budget, not past it
    gate.started(10, now=2.0)
    assert not gate.ready(now=2.0)
    assert gate.ready_at(now=2.0) == pytest.approx(2.01, abs=1e-6)  # 10 tokens at 1,000/s
    assert gate.ready(now=2.011)
    assert gate.backlog == 50_010


def _policy(**engine: object) -> Policy:
    return Policy(
        PolicyConfig.from_dict(
            {
                "lanes": [
                    {
                        "name": "chat",
                        "slo": {"ttft_p95_s": 1.0},
                        "max_queue_wait_s": 30.0,
                        "queue_capacity": 64,
                    }
                ],
                "engine": {"max_running": 64, **engine},
                "ladder": {"enabled": False},
            }
        ),
        counter=HeuristicCounter(),
    )


def _gated() -> Policy:
    return _policy(prefill_horizon_s=0.5)


def _learn(policy: Policy, rate: float, now: float = 0.0) -> float:
    """Serve two 300-token prompts at ``rate`` tokens/s; the time after."""
    for k in range(2):
        assert policy.submit(
            Request(id=f"warm{k}", tenant="w", prompt_tokens=300), now=now
        ).accepted
        (started,) = policy.dispatch(now=now)
        now += 300 / rate
        policy.first_token(started.id, now=now)
        policy.finish(started.id, now=now, output_tokens=1)
    assert policy.prefill is not None
    assert policy.prefill["chat"].rate == pytest.approx(rate)
    return now


def test_the_gate_is_off_unless_a_horizon_is_set() -> None:
    assert _policy().prefill is None
    assert _policy(prefill_horizon_s=0).prefill is None
    policy = _policy(prefill_horizon_s=0.5)
    assert policy.prefill is not None
    assert set(policy.prefill) == {"chat"}
    assert policy.prefill["chat"].horizon == 0.5


def test_a_queued_request_leaves_when_its_ttft_target_is_lost() -> None:
    policy = _gated()
    now = _learn(policy, 1000.0)
    # Two prompts fill the gate's 500-token budget (0.5 s at the rate): the
    # next start waits while they are computed.
    for name, tokens in (("a", 800), ("c", 400)):
        policy.submit(Request(id=name, tenant="t", prompt_tokens=tokens), now=now)
        assert len(policy.dispatch(now=now).started) == 1
    policy.submit(Request(id="b", tenant="t", prompt_tokens=200), now=now)
    assert len(policy.dispatch(now=now).started) == 0
    assert policy.next_start() == pytest.approx(now + 0.4)
    # Its 1 s TTFT target, not the lane's 30 s wait bound, is its deadline.
    assert policy.next_deadline() == pytest.approx(now + 1.0)
    result = policy.dispatch(now=now + 1.01)
    assert [f.id for f in result.expired] == ["b"]
    assert result.expired[0].outcome is Outcome.EXPIRED


def test_without_slo_deadlines_the_lane_wait_bound_applies() -> None:
    policy = Policy(
        PolicyConfig.from_dict(
            {
                "lanes": [{"name": "chat", "slo": {"ttft_p95_s": 1.0}, "slo_deadline": False}],
                "engine": {"prefill_horizon_s": 0.5},
                "ladder": {"enabled": False},
            }
        ),
        counter=HeuristicCounter(),
    )
    now = _learn(policy, 1000.0)
    policy.submit(Request(id="a", tenant="t", prompt_tokens=800), now=now)
    policy.submit(Request(id="c", tenant="t", prompt_tokens=400), now=now)
    policy.submit(Request(id="b", tenant="t", prompt_tokens=200), now=now)
    assert len(policy.dispatch(now=now).started) == 2
    assert policy.next_deadline() == pytest.approx(now + 60.0)  # the lane's default wait bound
