from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import InvalidRequest, Message, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.testing.strategies import requests


def test_a_known_token_count_is_enough() -> None:
    request = Request(tenant="acme", prompt_tokens=1200, max_new_tokens=256)
    assert request.prompt is None
    assert request.output_budget == 256


def test_ids_are_generated_and_unique() -> None:
    ids = {Request(prompt_tokens=1).id for _ in range(1000)}
    assert len(ids) == 1000


def test_sequences_multiply_the_output_budget() -> None:
    request = Request(prompt_tokens=10, max_new_tokens=100, n=2, best_of=5)
    assert request.sequences == 5
    assert request.output_budget == 500


def test_openai_style_messages_are_normalized() -> None:
    request = Request(
        messages=[  # type: ignore[arg-type]  # dicts are accepted at run time
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
            },
            {"role": "assistant", "content": None, "name": "bot"},
        ]
    )
    assert request.messages == (
        Message("system", "be brief"),
        Message("user", "hi there"),
        Message("assistant", "", "bot"),
    )


def test_non_text_parts_name_the_part() -> None:
    with pytest.raises(InvalidRequest) as info:
        Request(messages=[{"role": "user", "content": [{"type": "image_url"}]}])  # type: ignore[arg-type]
    assert info.value.field == "messages[0].content[0]"


def test_replace_validates_again() -> None:
    request = Request(prompt_tokens=10)
    assert request.replace(max_new_tokens=7).max_new_tokens == 7
    with pytest.raises(InvalidRequest, match="max_new_tokens"):
        request.replace(max_new_tokens=0)


_BAD_VALUES: list[tuple[str, Any]] = [
    ("tenant", ""),
    ("tenant", 7),
    ("tenant", "x" * 300),
    ("id", ""),
    ("prompt", b"bytes"),
    ("prompt_tokens", -1),
    ("prompt_tokens", True),
    ("prompt_tokens", 1.5),
    ("max_new_tokens", 0),
    ("max_new_tokens", "256"),
    ("n", 0),
    ("logprobs", -3),
    ("reasoning_effort", "extreme"),
    ("tool_risk", 1.5),
    ("tool_risk", float("nan")),
    ("lane", ""),
    ("deadline", float("inf")),
    ("messages", "hello"),
]


@pytest.mark.parametrize(("field", "value"), _BAD_VALUES)
def test_bad_fields_raise_typed_errors_naming_the_field(field: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"prompt_tokens": 10, field: value}
    with pytest.raises(InvalidRequest) as info:
        Request(**kwargs)
    assert info.value.field.startswith(field)
    assert info.value.http_status == 400


def test_best_of_below_n_is_rejected() -> None:
    with pytest.raises(InvalidRequest) as info:
        Request(prompt_tokens=1, n=3, best_of=2)
    assert info.value.field == "best_of"


def test_a_prompt_is_required() -> None:
    with pytest.raises(InvalidRequest) as info:
        Request(tenant="acme")
    assert info.value.field == "prompt"


_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_fields = st.sampled_from(
    [
        "tenant",
        "id",
        "prompt",
        "messages",
        "prompt_tokens",
        "max_new_tokens",
        "n",
        "best_of",
        "logprobs",
        "reasoning_effort",
        "tool_risk",
        "lane",
        "tier",
        "model",
        "deadline",
    ]
)


@given(st.dictionaries(_fields, _junk, min_size=1))
def test_random_malformed_requests_give_typed_errors(kwargs: dict[str, Any]) -> None:
    try:
        Request(**kwargs)
    except InvalidRequest as error:
        field = error.field.split("[")[0].split(".")[0]
        assert field in kwargs or field == "prompt"


@given(requests())
def test_generated_requests_are_valid_and_equal_to_their_copy(request: Request) -> None:
    assert request.replace() == request


_NUMERIC_FIELDS = (
    "prompt_tokens",
    "max_new_tokens",
    "n",
    "best_of",
    "logprobs",
    "tool_risk",
    "deadline",
)
# Any value a caller could pass: huge and tiny ints (10**5000 has no repr in
# Python >= 3.11), every kind of float, and things that are not numbers.
_any_number = st.one_of(
    st.integers(),
    st.integers(-(2**60), 2**60),
    st.sampled_from(
        [0, 1, 2**53, 2**53 + 1, -(2**53), 10**400, -(10**400), 10**5000, 1e11, 1.7e18, 1e308]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


@given(
    values=st.dictionaries(st.sampled_from(_NUMERIC_FIELDS), _any_number, min_size=1),
    now=st.sampled_from([0.0, 1e6, 1e11]),
)
def test_any_numeric_field_builds_a_request_that_scores_and_routes_or_is_invalid(
    values: dict[str, Any], now: float
) -> None:
    # Before the bounds, 10**400 as tool_risk or deadline raised OverflowError
    # here, and as n or best_of when the cost was scored.
    try:
        request = Request(**{"prompt_tokens": 10, **values})
    except InvalidRequest as error:
        field = error.field
        # A prompt_tokens of None leaves no prompt at all.
        assert field in values or (field == "prompt" and "prompt_tokens" in values)
        return
    policy = Policy(PolicyConfig(), counter=HeuristicCounter())
    estimate = policy.estimator.estimate(request)
    assert math.isfinite(estimate.cost)
    decision = policy.submit(request, now=now)
    for started in policy.dispatch(now=now):
        policy.finish(started.id, now=now, output_tokens=started.request.output_budget)
    if decision.accepted and policy.phase(request.id) is not None:
        policy.cancel(request.id, now=now)
    stats = policy.statistics()
    assert stats.running == stats.quotas.in_flight == stats.kv.used_blocks == 0


@pytest.mark.parametrize("field", ["prompt_tokens", "max_new_tokens", "n", "best_of", "logprobs"])
def test_counts_are_bounded_at_2_to_the_53(field: str) -> None:
    largest: dict[str, Any] = {"prompt_tokens": 10, field: 2**53}
    assert getattr(Request(**largest), field) == 2**53
    with pytest.raises(InvalidRequest, match=r"2\*\*53") as info:
        Request(**{**largest, field: 2**53 + 1})
    assert info.value.field == field


@pytest.mark.parametrize("deadline", [1.7e18, 1.7e12, 10**400, -(10**400), -1e12])
def test_a_deadline_past_the_clock_bound_is_invalid_and_says_why(deadline: float) -> None:
    with pytest.raises(InvalidRequest, match="nanoseconds") as info:
        Request(prompt_tokens=10, deadline=deadline)
    assert info.value.field == "deadline"


def test_an_error_about_a_huge_int_never_fails_to_print_it() -> None:
    with pytest.raises(InvalidRequest, match="digits"):
        Request(prompt_tokens=10**5000)
