"""The prefill budget: what it counts, when it holds a start back, how
``engine.prefill_horizon_s`` resolves; and the policy's SLO deadlines built on it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Hold, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.outcome import Outcome
from slopolicy.core.queueing.ttft import FirstTokenCheck

_LANES = ("chat", "docs", "batch")
_STEP = st.tuples(
    st.sampled_from(["start", "first", "left"]),
    st.sampled_from(_LANES),
    st.integers(1, 20_000),
)


def _fitted(check: FirstTokenCheck, rate: float) -> None:
    """32 observations at ``rate`` tokens per second, from nothing ahead, into
    the engine model (the one the budget reads)."""
    for k in range(32):
        tokens = 500 + 500 * (k % 4)
        check.engine.observe(tokens, tokens / rate)


@given(st.lists(_STEP, max_size=60), st.floats(0.01, 2.0), st.sampled_from([None, 900.0, 4e4]))
def test_the_budget_counts_what_is_ahead_and_never_idles_the_engine(
    steps: list[tuple[str, str, int]], horizon: float, rate: float | None
) -> None:
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0}, horizon=horizon)
    if rate is not None:
        _fitted(check, rate)
    outstanding: list[tuple[str, str, int]] = []
    reported = False
    for n, (action, lane, tokens) in enumerate(steps):
        if action == "start":
            check.started(f"r{n}", lane, tokens, now=float(n))
            outstanding.append((f"r{n}", lane, tokens))
        elif outstanding:
            done = outstanding.pop(0)[0]
            if action == "first":
                check.first_token(done, now=float(n))
                reported = True
            else:
                check.left(done)
        budget = check.budget()
        engine = check.engine  # the model the budget reads
        # Nothing is held back until the host reports a first token; then
        # the budget is 0 until the engine model has a rate.
        assert (budget is None) == (not reported)
        assert budget != 0.0 or engine.rate is None
        for i, name in enumerate(_LANES):
            # A lane's prompts and the more interactive lanes' are ahead of it.
            ahead_of = [t for _, lane_, t in outstanding if _LANES.index(lane_) <= i]
            assert check.ahead(name) == sum(ahead_of)
            for prompt in (1, 5_000, 1_000_000):
                admits = check.admits(name, prompt)
                if budget is None or not ahead_of:
                    assert admits  # nothing to wait for: the engine never idles (invariant 4)
                elif engine.rate is None:
                    assert not admits  # no rate yet: one prompt at a time
                else:  # the engine's time for what is ahead and this prompt, within the horizon
                    squares = sum(float(t) ** 2 for t in (*ahead_of, prompt))
                    seconds = (sum(ahead_of) + prompt) / engine.rate
                    seconds += engine.quadratic * squares / 1e6
                    assert admits == (seconds <= horizon * (1 + 1e-9)) or math.isclose(
                        seconds, horizon, rel_tol=1e-9
                    )


def test_the_budget_is_zero_until_the_engine_model_has_a_rate_then_the_horizon_at_it() -> None:
    check = FirstTokenCheck(_LANES, {"chat": 0.5}, horizon=0.1)
    assert check.budget() is None  # no first token reported: nothing held back
    check.started("a", "chat", 100, now=0.0)
    assert check.admits("chat", 100)  # ...whatever is ahead
    check.first_token("a", now=100 / 40_000.0)
    assert check.budget() == 0.0  # reported, no rate yet: one prompt at a time
    check.started("huge", "chat", 10**9, now=1.0)
    assert not check.admits("chat", 1)
    assert check.admits("docs", 1) is False  # the chat prompt is ahead of the later lanes too
    check.left("huge")
    assert check.admits("docs", 10**9)  # nothing ahead: anything starts
    _fitted(check, 40_000.0)
    assert check.budget() == pytest.approx(4_000.0)
    check.started("huge", "chat", 10**9, now=2.0)
    assert not check.admits("chat", 1)  # a billion tokens are ahead
    assert check.admits("docs", 1) is False  # ...and ahead of the later lanes too
    assert FirstTokenCheck(_LANES, {"chat": 0.5}).budget() is None  # no horizon: no budget


def test_the_engine_model_learns_from_starts_no_later_prompt_stood_beside() -> None:
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0}, horizon=0.1)
    check.started("long", "docs", 50_000, now=0.0)
    check.started("beside", "chat", 500, now=0.0)  # in the docs prompt's shadow
    check.first_token("beside", now=2.0)
    assert check.engine._n == 0  # what it waited for is not the engine's speed alone
    check.first_token("long", now=2.0)
    assert check.engine._n == 1  # batch is the only lane after docs, and had nothing
    assert check.models["chat"].prefill(500) is None
    # Neither model fitted, chat has no first token it could learn from: the
    # engine's seconds per token so far (50,000 in 2 s).
    assert check.prefill("chat", 500) == pytest.approx(0.02)
    _fitted(check, 40_000.0)
    assert check.prefill("chat", 4_000) == pytest.approx(check.engine.prefill(4_000))


@pytest.mark.parametrize("horizon", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_horizon_is_refused(horizon: float) -> None:
    with pytest.raises(ValueError, match="horizon"):
        FirstTokenCheck(_LANES, {}, horizon=horizon)


def _config(**engine: object) -> PolicyConfig:
    return PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 1.0},
                    "max_queue_wait_s": 30.0,
                    "queue_capacity": 64,
                    "queue_order": "arrival",  # these tests are of the budget alone
                }
            ],
            "engine": {"max_running": 64, **engine},
            "ladder": {"enabled": False},
        }
    )


@pytest.mark.parametrize(
    ("lanes", "engine", "horizon"),
    [
        (None, {}, 0.075),  # the default lanes: 3/4 of interactive's 0.1 s TPOT target
        ([{"name": "a", "slo": {"ttft_p95_s": 2.0}}], {}, 0.5),  # 1/4 of the TTFT target
        ([{"name": "a", "slo": {"e2e_p95_s": 60.0}}], {}, None),  # neither: off
        (None, {"prefill_horizon_s": 0.3}, 0.3),
        (None, {"prefill_horizon_s": 0}, None),
        (None, {"prefill_horizon_s": None}, None),
    ],
)
def test_the_horizon_resolves_against_the_lanes_targets(
    lanes: list[dict[str, object]] | None, engine: dict[str, object], horizon: float | None
) -> None:
    data: dict[str, object] = {"engine": engine}
    if lanes is not None:
        data["lanes"] = lanes
    config = PolicyConfig.from_dict(data)
    assert config.prefill_horizon() == (None if horizon is None else pytest.approx(horizon))
    policy = Policy(config, counter=HeuristicCounter())
    assert policy.first_tokens.horizon == (None if horizon is None else pytest.approx(horizon))


def _learn(policy: Policy, rate: float, now: float = 0.0) -> float:
    """32 prompts of 100 to 400 tokens through prefill at ``rate`` tokens per
    second, one at a time; the time after."""
    for k in range(32):
        tokens = 100 * (1 + k % 4)
        assert policy.submit(
            Request(id=f"warm{k}", tenant="w", prompt_tokens=tokens), now=now
        ).accepted
        (started,) = policy.dispatch(now=now)
        now += tokens / rate
        policy.first_token(started.id, now=now)
        policy.finish(started.id, now=now, output_tokens=1)
    assert policy.first_tokens.models["chat"].rate == pytest.approx(rate)
    return now


def test_a_start_waits_for_a_first_token_when_the_budget_is_full() -> None:
    policy = Policy(_config(prefill_horizon_s=0.5), counter=HeuristicCounter())
    now = _learn(policy, 1000.0)  # a budget of 500 tokens
    for name, tokens in (("a", 300), ("c", 150), ("b", 100)):
        policy.submit(Request(id=name, tenant="t", prompt_tokens=tokens), now=now)
    assert [s.id for s in policy.dispatch(now=now).started] == ["a", "c"]
    assert policy.next_start() is None  # no time opens it: a first token or an end does
    assert [s.id for s in policy.dispatch(now=now + 0.1).started] == []
    policy.first_token("a", now=now + 0.3)
    assert [s.id for s in policy.dispatch(now=now + 0.3).started] == ["b"]


def test_a_prompt_larger_than_the_budget_starts_alone() -> None:
    policy = Policy(_config(prefill_horizon_s=0.5), counter=HeuristicCounter())
    now = _learn(policy, 1000.0)
    policy.submit(Request(id="big", tenant="t", prompt_tokens=800), now=now)  # 0.8 s of 1
    policy.submit(Request(id="small", tenant="t", prompt_tokens=10), now=now)
    assert [s.id for s in policy.dispatch(now=now).started] == ["big"]
    policy.finish("big", now=now + 0.5, outcome="failed", output_tokens=0)
    assert [s.id for s in policy.dispatch(now=now + 0.5).started] == ["small"]


def test_a_queued_request_leaves_when_its_ttft_target_is_lost() -> None:
    policy = Policy(_config(prefill_horizon_s=0.5), counter=HeuristicCounter())
    now = _learn(policy, 1000.0)
    for name, tokens in (("a", 300), ("c", 150)):
        policy.submit(Request(id=name, tenant="t", prompt_tokens=tokens), now=now)
        assert len(policy.dispatch(now=now).started) == 1
    policy.submit(Request(id="b", tenant="t", prompt_tokens=100), now=now)
    assert len(policy.dispatch(now=now).started) == 0
    # Its 1 s TTFT target, not the lane's 30 s wait bound, is its deadline.
    assert policy.next_deadline() == pytest.approx(now + 1.0)
    result = policy.dispatch(now=now + 1.01)
    assert [f.id for f in result.expired] == ["b"]
    assert result.expired[0].outcome is Outcome.EXPIRED
    assert result.expired[0].held_by is Hold.PREFILL  # the prompt work ahead filled the budget


def test_without_slo_deadlines_the_lane_wait_bound_applies() -> None:
    policy = Policy(
        PolicyConfig.from_dict(
            {
                "lanes": [
                    {
                        "name": "chat",
                        "slo": {"ttft_p95_s": 1.0},
                        "slo_deadline": False,
                        "queue_order": "arrival",
                    }
                ],
                "engine": {"prefill_horizon_s": 0.5},
                "ladder": {"enabled": False},
            }
        ),
        counter=HeuristicCounter(),
    )
    now = _learn(policy, 1000.0)
    policy.submit(Request(id="a", tenant="t", prompt_tokens=300), now=now)
    policy.submit(Request(id="c", tenant="t", prompt_tokens=150), now=now)
    policy.submit(Request(id="b", tenant="t", prompt_tokens=100), now=now)
    assert len(policy.dispatch(now=now).started) == 2
    assert policy.next_deadline() == pytest.approx(now + 60.0)  # the lane's default wait bound
