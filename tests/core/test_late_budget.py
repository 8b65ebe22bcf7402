"""The late budget: the check at dispatch spends the share of first tokens a
lane's TTFT target lets come late, and reads the expected TTFT once it has."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Hold, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.lateness import LATE_WINDOW_S, LateShare, late_budget
from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.errors import UsageError
from tests.core.test_ttft import _fitted_chat, _past_by_half_a_deviation


@given(
    events=st.lists(st.tuples(st.floats(0.0, 100.0, allow_nan=False), st.booleans()), max_size=60),
    window=st.floats(0.5, 600.0),
)
def test_the_late_share_is_late_first_tokens_weighted_by_age_over_all_of_them(
    events: list[tuple[float, bool]], window: float
) -> None:
    late = LateShare(window)
    now, times = 0.0, []
    for gap, was_late in events:
        now += gap
        times.append((now, was_late))
        late.observe(was_late, now=now)
    weights = [(math.exp((t - now) / window), was_late) for t, was_late in times]
    total = sum(w for w, _ in weights)
    expected = sum(w for w, was_late in weights if was_late) / total if total else 0.0
    assert late.share == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert 0.0 <= late.share <= 1.0
    for budget in (0.01, 0.05, 0.5):
        excess = sum(w for w, was_late in weights if was_late) - budget * total
        if abs(excess - 1.0) > 1e-9:  # (at the edge, rounding decides)
            assert late.spent(budget) == (excess >= 1.0)


def test_only_first_tokens_move_the_share_and_older_ones_count_less() -> None:
    late = LateShare()
    assert late.share == 0.0
    late.observe(True, now=10.0)
    assert late.share == 1.0  # however long ago: what the last ones did
    late.observe(False, now=10.0 + LATE_WINDOW_S)  # one window later, on time
    kept = math.exp(-1.0)
    assert late.share == pytest.approx(kept / (kept + 1.0))
    late.observe(False, now=5.0)  # a clock that went back counts as the latest seen
    assert late.share == pytest.approx(kept / (kept + 2.0))


def test_a_target_s_late_budget_is_what_its_quantile_leaves() -> None:
    assert late_budget(0.95) == 0.05
    assert late_budget(0.99) == 0.01
    assert SLOTargets(ttft_p95=0.5).ttft_quantile == 0.95
    assert SLOTargets(ttft_p99=0.5).ttft_quantile == 0.99
    assert SLOTargets(ttft_p95=0.5, ttft_p99=1.0).ttft_quantile == 0.95  # its target's
    assert SLOTargets(e2e_p95=5.0).ttft_quantile is None


@pytest.mark.parametrize("quantile", [0.0, 1.0, 1.0 - 1e-14, -0.5, math.nan, "0.95", None])
def test_a_quantile_that_leaves_no_budget_is_refused(quantile: object) -> None:
    with pytest.raises(UsageError, match="quantile"):
        late_budget(quantile)  # type: ignore[arg-type]


@pytest.mark.parametrize("budget", [-0.1, 1.5, math.nan, "0.05", None])
def test_a_budget_that_is_not_a_share_is_refused(budget: object) -> None:
    with pytest.raises(UsageError, match="budget"):
        LateShare().spent(budget)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [0.0, -1.0, math.inf, math.nan, "30"])
def test_a_window_that_is_not_a_positive_number_is_refused(window: object) -> None:
    with pytest.raises(UsageError, match="window"):
        LateShare(window)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("budgets", "match"),
    [
        ({"docs": 0.05}, "TTFT bound"),
        ({"chat": 0.0}, "late budget"),
        ({"chat": 1.0}, "late budget"),
    ],
)
def test_a_budget_for_no_bound_or_out_of_range_is_refused(
    budgets: dict[str, float], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        FirstTokenCheck(("chat", "docs"), {"chat": 0.5}, budgets=budgets)


def test_first_tokens_given_with_their_arrival_count_toward_their_lane_s_share() -> None:
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    check.started("c0", "chat", 1000, now=1.0)
    check.first_token("c0", now=1.6, arrival=1.0)  # 0.6 s: past 0.5
    assert check.late["chat"].share == 1.0
    check.started("c1", "chat", 1000, now=2.0)
    check.first_token("c1", now=2.1, arrival=1.7)  # 0.4 s: on time
    kept = math.exp(-0.5 / LATE_WINDOW_S)
    assert check.late["chat"].share == pytest.approx(kept / (kept + 1.0))
    check.started("c2", "chat", 1000, now=3.0)
    check.first_token("c2", now=4.0)  # no arrival given: not counted
    assert check.late["chat"].share == pytest.approx(kept / (kept + 1.0))
    assert check.late["docs"].share == 0.0  # each lane its own


def test_once_late_first_tokens_pass_the_budget_by_a_whole_one_the_expected_ttft_decides() -> None:
    """A chat request half a deviation past its target by the central
    reading is kept by the optimistic one while chat's late first tokens
    are within its budget or past it by less than a whole one, given up on
    once they pass it by one, and kept again when on-time first tokens
    bring them back within it."""
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    chat = _fitted_chat(check, 1.0)
    prompt = _past_by_half_a_deviation(chat)
    central = chat.expected(prompt, squares=float(prompt) ** 2)
    assert central is not None
    assert central > 0.5
    late = check.late["chat"]
    for _ in range(18):
        late.observe(False, now=5.0)
    late.observe(True, now=5.0)  # 1 in 19: past the p95's 0.95 of one, by a little
    assert not late.spent(0.05)
    assert not check.lost("chat", prompt, arrival=5.0, now=5.0)
    late.observe(True, now=5.0)  # 2 in 20: past the 1 allowed by a whole one
    assert late.spent(0.05)
    assert check.lost("chat", prompt, arrival=5.0, now=5.0)
    assert not check.lost("chat", prompt - 2000, arrival=5.0, now=5.0)  # 0.04 s less: it can
    late.observe(False, now=5.0)  # 2 in 21: back within it
    assert not check.lost("chat", prompt, arrival=5.0, now=5.0)


def test_a_spent_budget_takes_the_deviation_from_a_start_in_a_shadow_it_does_not_wait() -> None:
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0}, budgets={"chat": 0.2})
    chat = _fitted_chat(check, 0.0)
    check.started("d1", "docs", 40_000, now=10.0)  # 1 s of prefill
    prompt = _past_by_half_a_deviation(chat)
    assert not check.lost("chat", prompt, arrival=10.5, now=10.5)
    check.late["chat"].observe(True, now=10.5)
    check.late["chat"].observe(True, now=10.5)
    assert check.late["chat"].spent(0.2)
    assert check.lost("chat", prompt, arrival=10.5, now=10.5)


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 2000}],
            "engine": {"max_running": 64, "prefill_horizon_s": 0},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _after_first_tokens_in(*seconds: float) -> Policy:
    """A policy whose chat lane's first tokens so far came ``seconds`` after
    their arrivals, a second apart (1,000 tokens each, nothing beside
    them): too few for a fit."""
    policy = _policy()
    for i, ttft in enumerate(seconds):
        now = float(i)
        request = Request(id=f"c{i}", tenant="t", prompt_tokens=1000, max_new_tokens=8)
        policy.submit(request, now=now)
        (started,) = policy.dispatch(now=now).started
        policy.first_token(started.id, now=now + ttft)
        policy.finish(started.id, now=now + ttft + 0.1)
    assert policy.first_tokens.models["chat"].rate is None
    return policy


@pytest.mark.parametrize(
    ("seconds", "lost"), [((0.45, 0.45), False), ((0.55, 0.45), False), ((0.55, 0.55), True)]
)
def test_before_the_fit_a_spent_budget_reads_the_engine_s_ttft_so_far(
    seconds: tuple[float, ...], lost: bool
) -> None:
    """Before chat's fit nothing is given up on while its budget holds (one
    late first token in two is within a p95's luck); once two came late, a
    request that waited 0.2 s is given up on by the engine's seconds per
    token so far (0.55 s for 1,000 tokens ends past its target; a start at
    0.45 s would not have)."""
    policy = _after_first_tokens_in(*seconds)
    policy.submit(Request(id="next", tenant="t", prompt_tokens=1000, max_new_tokens=8), now=3.0)
    dispatch = policy.dispatch(now=3.2)
    if lost:
        assert [f.id for f in dispatch.expired] == ["next"]
        assert dispatch.expired[0].held_by is Hold.LATE
    else:
        assert [s.id for s in dispatch.started] == ["next"]


def test_the_policy_s_statistics_say_each_deadline_lane_s_late_share() -> None:
    assert _policy().statistics().ttft_late_share == {"chat": 0.0}
    late = _after_first_tokens_in(0.55, 0.45).statistics().ttft_late_share
    kept = math.exp(-0.9 / LATE_WINDOW_S)  # the late one (at 0.55 s) came 0.9 s before the other
    assert late == {"chat": pytest.approx(kept / (kept + 1.0))}
