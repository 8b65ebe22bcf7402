from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import CostEstimator, CostWeights, Message, Request
from slopolicy.core.cost.tokens import TiktokenCounter

_tokens = st.integers(0, 10**7)
_risk = st.floats(0, 1)
_weights = st.builds(CostWeights, st.floats(0, 10), st.floats(0, 10), st.floats(0, 1e4))


@given(_weights, _tokens, _tokens, _tokens, _tokens, _risk, _risk)
def test_cost_is_monotone_in_each_input(
    weights: CostWeights, p1: int, p2: int, o1: int, o2: int, r1: float, r2: float
) -> None:
    estimator = CostEstimator(weights, counter=TiktokenCounter())
    low = estimator.score(min(p1, p2), min(o1, o2), min(r1, r2))
    assert estimator.score(max(p1, p2), min(o1, o2), min(r1, r2)) >= low
    assert estimator.score(min(p1, p2), max(o1, o2), min(r1, r2)) >= low
    assert estimator.score(min(p1, p2), min(o1, o2), max(r1, r2)) >= low


def test_the_score_is_the_documented_formula(estimator: CostEstimator) -> None:
    request = Request(prompt_tokens=1000, max_new_tokens=256, n=2, tool_risk=0.5)
    estimate = estimator.estimate(request)
    assert estimate.output_tokens == 512
    assert estimate.cost == 1.0 * 1000 + 2.0 * 512 + 1000.0 * 0.5


def test_given_counts_are_used_as_is(estimator: CostEstimator) -> None:
    estimate = estimator.prompt_tokens(Request(prompt="ignored text", prompt_tokens=42))
    assert (estimate.tokens, estimate.exact, estimate.method) == (42, True, "given")


def test_chat_formatting_matches_openais_published_usage(estimator: CostEstimator) -> None:
    # OpenAI's API reference reports 9 prompt tokens for a lone user "Hello!"
    # on cl100k models: 3 per message + role + content, and 3 to prime the reply.
    estimate = estimator.prompt_tokens(Request(messages=(Message("user", "Hello!"),)))
    assert estimate.tokens == 9
    assert estimate.exact


def test_names_add_their_overhead(estimator: CostEstimator, counter: TiktokenCounter) -> None:
    plain = estimator.count_messages([Message("user", "hi")]).tokens
    named = estimator.count_messages([Message("user", "hi", name="alice")]).tokens
    assert named - plain == 1 + counter.count("alice")


def test_long_chats_are_sampled_in_bounded_time(counter: TiktokenCounter) -> None:
    conversation = [Message("user", "lorem ipsum dolor sit amet " * 400) for _ in range(200)]
    estimate = CostEstimator(counter=counter).count_messages(conversation)
    exact = sum(3 + 1 + counter.count(m.content) for m in conversation) + 3
    assert not estimate.exact
    assert abs(estimate.tokens - exact) / exact < 0.03


def test_upper_bound_covers_the_error(estimator: CostEstimator) -> None:
    estimate = estimator.count_texts(["alpha beta gamma delta " * 5000])
    assert estimate.upper >= estimate.tokens


@pytest.mark.parametrize(
    "kwargs", [{"exact_max_chars": -1}, {"sample_windows": 4}, {"max_rounds": 0}]
)
def test_bad_settings_are_refused(kwargs: dict[str, int], counter: TiktokenCounter) -> None:
    with pytest.raises(ValueError, match="must be"):
        CostEstimator(counter=counter, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["alpha", "beta", "gamma"])
def test_negative_or_infinite_weights_are_refused(field: str) -> None:
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=field):
            CostWeights(**{field: bad})
