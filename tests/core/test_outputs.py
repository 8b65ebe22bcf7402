"""The output forecast and the KV reservations the Policy takes from it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.errors import UsageError


def test_the_ceiling_until_a_lane_has_enough_answers() -> None:
    forecast = OutputForecast(["chat"], quantile=0.5, window=8, min_samples=3)
    forecast.record("chat", 10)
    forecast.record("chat", 30)
    assert forecast.forecast("chat") is None
    assert forecast.per_sequence("chat", 4096) == 4096
    forecast.record("chat", 20)
    assert forecast.forecast("chat") == 20
    assert forecast.per_sequence("chat", 4096) == 20
    assert forecast.per_sequence("chat", 12) == 12  # never above the request's own ceiling


@given(
    answers=st.lists(st.integers(0, 50_000), min_size=1, max_size=80),
    quantile=st.floats(0.01, 1.0),
    window=st.integers(1, 20),
)
def test_the_forecast_is_the_rank_of_the_recent_window(
    answers: list[int], quantile: float, window: int
) -> None:
    forecast = OutputForecast(["a"], quantile=quantile, window=window, min_samples=1)
    for answer in answers:
        forecast.record("a", answer)
    recent = sorted(answers[-window:])
    assert forecast.forecast("a") == max(1, recent[int(quantile * (len(recent) - 1))])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"quantile": 0.0}, "quantile"),
        ({"quantile": math.nan}, "quantile"),
        ({"quantile": 1.5}, "quantile"),
        ({"window": 0}, "window"),
        ({"min_samples": 0}, "min_samples"),
        ({"window": 4, "min_samples": 5}, "min_samples"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        OutputForecast(["a"], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 2.5, True, 2**53 + 1, "7"])
def test_a_bad_record_changes_nothing(bad: object) -> None:
    forecast = OutputForecast(["a"], min_samples=1)
    forecast.record("a", 100)
    with pytest.raises(UsageError):
        forecast.record("a", bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="unknown lane"):
        forecast.record("b", 5)
    assert forecast.forecast("a") == 100


def _policy(output_quantile: float | None) -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": 64, "max_queue_wait_s": 60.0}],
            "kv": {"num_blocks": 100, "block_size": 16, "output_quantile": output_quantile},
            "engine": {"max_running": 64},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _serve(policy: Policy, name: str, now: float, output: int) -> None:
    policy.submit(Request(id=name, tenant="t", prompt_tokens=16, max_new_tokens=1584), now=now)
    (started,) = policy.dispatch(now=now)
    policy.tokens(started.id, output, now=now)
    policy.finish(started.id, now=now)


def _running(policy: Policy, now: float, count: int) -> int:
    for i in range(count):
        request = Request(id=f"q{i}", tenant="t", prompt_tokens=16, max_new_tokens=1584)
        policy.submit(request, now=now)
    return len(policy.dispatch(now=now).started)


def test_worst_cases_hold_the_pool_that_forecasts_share() -> None:
    # 100 blocks of 16 tokens; each request may write 1,584 tokens (100 blocks
    # with its prompt) but its lane's answers have been 20 tokens long.
    worst, forecast = _policy(None), _policy(0.9)
    for policy in (worst, forecast):
        for i in range(16):
            _serve(policy, f"warm{i}", float(i), 20)
    assert _running(worst, 20.0, 20) == 1
    assert _running(forecast, 20.0, 20) == 20  # 3 blocks each: prompt + 20 tokens


def test_a_reservation_grows_as_its_answer_passes_it_and_is_released_whole() -> None:
    policy = _policy(0.9)
    for i in range(16):
        _serve(policy, f"warm{i}", float(i), 20)
    policy.submit(Request(id="long", tenant="t", prompt_tokens=16, max_new_tokens=1584), now=20.0)
    (started,) = policy.dispatch(now=20.0)
    assert started.kv_blocks == 3
    policy.tokens("long", 100, now=20.5)  # past the 20 it reserved: to end a block on
    stats = policy.kv.statistics()
    assert stats.used_blocks == math.ceil((16 + 100) / 16)  # what it holds now
    assert stats.peak_blocks == math.ceil((16 + 116) / 16)  # what it is forecast to reach
    policy.tokens("long", 1484, now=21.0)  # to the ceiling: the worst case, no more
    assert policy.kv.statistics().used_blocks == 100
    policy.finish("long", now=22.0)
    assert policy.kv.statistics().used_blocks == 0
    outputs = policy.reservations.outputs
    assert outputs is not None
    assert outputs.forecast("chat") == 20


def test_an_answer_past_its_forecast_is_forecast_to_go_on() -> None:
    policy = _policy(0.9)
    for i in range(16):
        _serve(policy, f"warm{i}", float(i), 20)
    assert _running(policy, 20.0, 34) == 33  # each 16 tokens now, 3 blocks at its end
    before = policy.kv.statistics()
    assert (before.used_blocks, before.peak_blocks) == (33, 99)
    policy.tokens("q0", 200, now=20.5)  # past its 20: forecast to end a block on (216)
    after = policy.kv.statistics()
    assert after.used_blocks == 32 + math.ceil((16 + 200) / 16)
    # Recorded whatever the pool: it is what the request does, not a grant;
    # new starts wait until the forecast peak fits again.
    assert after.peak_blocks > after.num_blocks
    policy.submit(Request(id="late", tenant="t", prompt_tokens=16, max_new_tokens=1584), now=21.0)
    assert policy.dispatch(now=21.0).started == ()


def test_without_a_forecast_nothing_is_recorded_or_grown() -> None:
    policy = _policy(None)
    assert policy.reservations.outputs is None
    _serve(policy, "one", 0.0, 20)
    assert policy.kv.statistics().used_blocks == 0
