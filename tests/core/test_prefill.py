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
    first_start: float | None = None
    for n, (action, lane, tokens) in enumerate(steps):
        now = n / 10  # a tenth of a second a step: half chat's target is 2.5 steps
        if action == "start":
            check.started(f"r{n}", lane, tokens, now=now)
            outstanding.append((f"r{n}", lane, tokens))
            first_start = now if first_start is None else first_start
        elif outstanding:
            done = outstanding.pop(0)[0]
            if action == "first":
                check.first_token(done, now=now)
                reported = True
            else:
                check.left(done)
        budget = check.budget(now=now)
        engine = check.engine  # the model the budget reads
        # Nothing is held back before a start, nor once half the tightest
        # target has passed since the first one with no first token reported
        # (the host does not stream); otherwise the budget is 0 until the
        # engine model has a rate.
        held = reported or (first_start is not None and now < first_start + 0.25)
        assert (budget is None) == (horizon is None or not held)
        assert budget != 0.0 or engine.rate is None
        assert check.report_due() == (
            None if reported or first_start is None or horizon is None else first_start + 0.25
        )
        for i, name in enumerate(_LANES):
            # A lane's prompts and the more interactive lanes' are ahead of it.
            ahead_of = [t for _, lane_, t in outstanding if _LANES.index(lane_) <= i]
            assert check.ahead(name) == sum(ahead_of)
            for prompt in (1, 5_000, 1_000_000):
                admits = check.admits(name, prompt, now=now)
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
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0}, horizon=0.1)
    assert check.budget(now=0.0) is None  # nothing started: nothing to hold back
    assert check.report_due() is None
    check.started("a", "chat", 100, now=0.0)
    # A first token is due well within the tightest target: till half of it,
    # one prompt at a time.
    assert check.report_due() == 0.25
    assert check.budget(now=0.0) == 0.0
    assert not check.admits("chat", 100, now=0.0)
    assert not check.admits("docs", 100, now=0.24)
    assert check.admits("batch", 100, now=0.0) is False  # chat's prompt is ahead of every lane
    check.first_token("a", now=100 / 40_000.0)
    assert check.report_due() is None
    assert check.budget(now=1.0) == 0.0  # reported, no rate yet: one prompt at a time
    check.started("huge", "chat", 10**9, now=1.0)
    assert not check.admits("chat", 1, now=1.0)
    assert check.admits("docs", 1, now=1e6) is False  # a reported host is held however late
    check.left("huge")
    assert check.admits("docs", 10**9, now=1.0)  # nothing ahead: anything starts
    _fitted(check, 40_000.0)
    assert check.budget(now=1.0) == pytest.approx(4_000.0)
    check.started("huge", "chat", 10**9, now=2.0)
    assert not check.admits("chat", 1, now=2.0)  # a billion tokens are ahead
    assert check.admits("docs", 1, now=2.0) is False  # ...and ahead of the later lanes too
    # No horizon: no budget.
    assert FirstTokenCheck(_LANES, {"chat": 0.5}).budget(now=0.0) is None


def test_a_host_with_no_first_token_by_half_the_tightest_target_is_not_held_back() -> None:
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0}, horizon=0.1)
    check.started("long", "docs", 50_000, now=10.0)  # the first start: half chat's 0.5 s on
    assert check.report_due() == 10.25
    assert not check.admits("docs", 100, now=10.2)
    assert check.admits("docs", 100, now=10.25)  # none reported: the host does not stream
    assert check.budget(now=10.25) is None
    check.started("next", "docs", 100, now=11.0)
    assert check.report_due() == 10.25  # the first start's, not the latest
    # A report, however late, says it streams: from then on the budget holds.
    check.first_token("long", now=12.0)
    assert check.report_due() is None
    assert not check.admits("docs", 100, now=12.0)


def test_without_ttft_targets_a_host_that_reports_nothing_is_never_held() -> None:
    check = FirstTokenCheck(_LANES, {}, horizon=0.1)
    check.started("a", "chat", 100, now=0.0)
    assert check.report_due() is None
    assert check.admits("chat", 100, now=0.0)


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


def _two_lanes() -> PolicyConfig:
    return PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 1.0},
                    "queue_order": "shortest",
                    "max_prompt_tokens": 4096,
                    "over_budget": "demote",
                },
                {"name": "docs", "slo": {"ttft_p95_s": 15.0}, "queue_order": "shortest"},
            ],
            "engine": {"prefill_horizon_s": 0.5, "max_running": 64},
            "ladder": {"enabled": False},
        }
    )


def test_a_cold_start_burst_goes_to_the_engine_a_prompt_at_a_time_shortest_first() -> None:
    # Before the host has reported any first token, a burst that came at
    # once is not handed over whole: the engine's FCFS queue would put the
    # long prompt ahead of every turn that comes after it.
    policy = Policy(_two_lanes(), counter=HeuristicCounter())
    for name, tokens in (("long", 14_500), ("c300", 300), ("c150", 150), ("c200", 200)):
        assert policy.submit(Request(id=name, tenant="t", prompt_tokens=tokens), now=0.0).accepted
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["c150"]
    assert policy.next_wakeup(now=0.0) == pytest.approx(0.5)  # by then a first token is due
    order, running = [], "c150"
    for k in range(3):  # one at a time: each starts at the first token before it
        now = 0.01 * (k + 1)
        policy.first_token(running, now=now)
        (started,) = policy.dispatch(now=now).started
        order.append(running := started.id)
    assert order == ["c200", "c300", "long"]


def test_a_host_that_never_reports_a_first_token_is_held_only_until_one_was_due() -> None:
    policy = Policy(_two_lanes(), counter=HeuristicCounter())
    for name in ("d1", "d2", "d3"):
        assert policy.submit(Request(id=name, tenant="t", prompt_tokens=5_000), now=0.0).accepted
    assert len(policy.dispatch(now=0.0).started) == 1
    assert policy.dispatch(now=0.4).started == ()
    # The first start plus half the tightest target (chat's 1 s), not docs' 15 s deadline.
    assert policy.next_wakeup(now=0.4) == pytest.approx(0.5)
    assert len(policy.dispatch(now=0.5).started) == 2  # no report by then: it does not stream
    wakeup = policy.next_wakeup(now=0.5)
    assert wakeup is None or wakeup > 0.5  # lifted: no timer for it, and none that spins


def test_turns_held_behind_a_first_start_that_reports_nothing_start_within_their_target() -> None:
    # Their deadline is their 1 s target: the hold lifts at half of it.
    policy = Policy(_two_lanes(), counter=HeuristicCounter())
    for name in ("c1", "c2", "c3"):
        assert policy.submit(Request(id=name, tenant="t", prompt_tokens=100), now=0.0).accepted
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["c1"]
    result = policy.dispatch(now=0.5)
    assert sorted(s.id for s in result.started) == ["c2", "c3"]
    assert result.expired == ()
