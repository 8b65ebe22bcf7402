"""The engine TTFT the Policy learns, and the queued requests it gives up on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Outcome, Policy, PolicyConfig, Request
from slopolicy.core.cost.ranks import RecentRank
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.ttft import FirstTokenModel


@given(
    values=st.lists(st.floats(0, 1e9), min_size=1, max_size=60),
    quantile=st.floats(0.01, 1.0),
    window=st.integers(1, 16),
    min_samples=st.integers(1, 16),
)
def test_a_recent_rank_is_the_rank_of_the_last_window(
    values: list[float], quantile: float, window: int, min_samples: int
) -> None:
    min_samples = min(min_samples, window)
    rank = RecentRank(quantile, window, min_samples)
    for value in values:
        rank.add(value)
    recent = sorted(values[-window:])
    if len(recent) < min_samples:
        assert rank.value is None
    else:
        assert rank.value == recent[int(quantile * (len(recent) - 1))]


def test_the_model_fits_a_floor_and_a_rate_once_it_has_enough() -> None:
    model = FirstTokenModel(min_samples=3)
    model.observe(1000, 0.12)
    model.observe(2000, 0.22)
    model.observe(2000, -1.0)  # a clock that went back: left out
    assert model.expected(1000) is None
    model.observe(4000, 0.42)  # 0.02 s + 10,000 tokens per second
    assert model.rate == pytest.approx(10_000.0)
    assert model.floor == pytest.approx(0.02)
    assert model.expected(5000) == pytest.approx(0.52)


def test_a_model_that_explains_little_says_nothing() -> None:
    # TTFT driven by something the tokens ahead do not show: R² near 0.
    model = FirstTokenModel(min_samples=4)
    for ahead, seconds in [(1000, 0.9), (2000, 0.1), (3000, 1.0), (4000, 0.2)] * 4:
        model.observe(ahead, seconds)
    assert model.r2 < 0.5
    assert model.expected(3000) is None


@pytest.mark.parametrize(
    "kwargs",
    [{"half_life": 0.5}, {"min_samples": 1}, {"min_samples": True}, {"min_r2": 1.5}],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"half_life|min_samples|min_r2"):
        FirstTokenModel(**kwargs)  # type: ignore[arg-type]


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 0.55},
                    "max_prompt_tokens": 2000,
                    "queue_capacity": 4096,
                },
                {"name": "docs", "slo": {"ttft_p95_s": 30.0}, "queue_capacity": 64},
            ],
            "engine": {"max_running": 64},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _chat(name: str, tokens: int = 1000, lane: str = "chat") -> Request:
    return Request(id=name, tenant="t", prompt_tokens=tokens, max_new_tokens=8, lane=lane)


def _warm(policy: Policy) -> float:
    """32 chats alone, of 500 to 2,000 tokens: 10,000 prompt tokens per second."""
    now = 0.0
    for i in range(32):
        tokens = 500 + 500 * (i % 4)
        policy.submit(_chat(f"w{i}", tokens), now=now)
        (started,) = policy.dispatch(now=now).started
        policy.first_token(started.id, now=now + tokens / 10_000)
        policy.finish(started.id, now=now + 0.3)
        now += 1.0
    return now


def test_a_burst_past_what_the_engine_can_prefill_in_time_leaves_the_queue() -> None:
    policy = _policy()
    now = _warm(policy)
    assert policy.first_tokens.models["chat"].rate == pytest.approx(10_000.0)
    for i in range(20):
        policy.submit(_chat(f"b{i}"), now=now)
    dispatch = policy.dispatch(now=now)
    # 5,000 tokens ahead is 0.5 s of 0.55: the first five can still attain; the rest are
    # expected to miss, so they leave instead of slowing the five down.
    assert [s.id for s in dispatch.started] == [f"b{i}" for i in range(5)]
    assert [f.id for f in dispatch.expired] == [f"b{i}" for i in range(5, 20)]
    assert {f.outcome for f in dispatch.expired} == {Outcome.EXPIRED}
    assert policy.statistics().outcomes[Outcome.EXPIRED] == 15


def test_requests_that_come_one_at_a_time_are_never_given_up_on() -> None:
    policy = _policy()
    now = _warm(policy)
    for i in range(50):
        policy.submit(_chat(f"s{i}"), now=now)
        (started,) = policy.dispatch(now=now).started
        policy.first_token(started.id, now=now + 0.1)
        policy.finish(started.id, now=now + 0.2)
        now += 0.3
    assert policy.statistics().outcomes[Outcome.EXPIRED] == 0


def test_prompts_of_a_later_lane_are_not_ahead_of_an_earlier_one() -> None:
    policy = _policy()
    now = _warm(policy)
    policy.submit(_chat("doc", tokens=50_000, lane="docs"), now=now)
    policy.submit(_chat("c"), now=now)
    started = policy.dispatch(now=now).started
    assert {s.id for s in started} == {"doc", "c"}  # the document is behind the chat
    policy.first_token("c", now=now + 0.1)
    policy.submit(_chat("after"), now=now + 0.2)
    assert [s.id for s in policy.dispatch(now=now + 0.2).started] == ["after"]


def test_a_burst_of_thousands_lost_at_once_leaves_in_one_dispatch() -> None:
    # One dispatch gives up on every lost head in a loop, however many there are.
    policy = _policy()
    now = _warm(policy)
    for i in range(3000):
        policy.submit(_chat(f"b{i}", tokens=1000), now=now)
    dispatch = policy.dispatch(now=now)
    assert len(dispatch.started) == 5
    assert len(dispatch.expired) == 3000 - 5
