"""The output forecast and the KV reservations the Policy takes from it."""

from __future__ import annotations

import math
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Policy, PolicyConfig, Request
from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.errors import ConfigError, UsageError


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
        ({"tenant_window": 0}, "tenant_window"),
        ({"tenant_min_samples": 0}, "tenant_min_samples"),
        ({"tenant_window": 4, "tenant_min_samples": 5}, "tenant_min_samples"),
        ({"quantile": "median"}, "quantile"),
        ({"quantile": "0.5"}, "quantile"),
        ({"quantile": None}, "quantile"),
        ({"max_tenants": -1}, "max_tenants"),
        ({"max_tenants": 1.5}, "max_tenants"),
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
    for tenant in ("", 7):
        with pytest.raises(UsageError, match="tenant"):
            forecast.record("a", 5, tenant=tenant)  # type: ignore[arg-type]
    assert forecast.forecast("a") == 100


def test_by_default_the_forecast_is_the_mean_of_recent_answers() -> None:
    forecast = OutputForecast(["chat"], window=3, min_samples=2, tenant_min_samples=2)
    assert forecast.quantile == "mean"
    forecast.record("chat", 100, tenant="t")
    assert forecast.forecast("chat") is None
    forecast.record("chat", 301, tenant="t")
    assert forecast.forecast("chat") == forecast.forecast("chat", tenant="t") == 200  # 200.5, whole
    forecast.record("chat", 2000, tenant="u")
    forecast.record("chat", 9, tenant="u")
    assert forecast.forecast("chat") == 770  # the last three: 301, 2,000 and 9
    assert forecast.forecast("chat", tenant="u") == 1004


def test_a_tenant_with_enough_answers_is_forecast_by_its_own() -> None:
    forecast = OutputForecast(["chat"], quantile=0.5, min_samples=2, tenant_min_samples=3)
    for tokens in (4000, 4200, 3800):
        forecast.record("chat", tokens, tenant="reasoner")
    forecast.record("chat", 100, tenant="coder")
    forecast.record("chat", 120, tenant="coder")
    assert forecast.forecast("chat") == 3800  # the lane: all five answers
    assert forecast.forecast("chat", tenant="reasoner") == 4000  # its own three
    assert forecast.forecast("chat", tenant="coder") == 3800  # two: the lane's still
    assert forecast.forecast("chat", tenant="new") == 3800
    forecast.record("chat", 80, tenant="coder")
    assert forecast.forecast("chat", tenant="coder") == 100
    assert forecast.per_sequence("chat", 90, tenant="coder") == 90  # the ceiling binds
    with pytest.raises(UsageError, match="unknown lane"):
        forecast.forecast("code", tenant="coder")


def test_the_least_recently_answered_tenant_is_forgotten_first() -> None:
    forecast = OutputForecast(
        ["a"], quantile=1.0, min_samples=1, tenant_min_samples=1, max_tenants=2
    )
    forecast.record("a", 10, tenant="x")
    forecast.record("a", 20, tenant="y")
    forecast.record("a", 11, tenant="x")  # x is now the more recent
    forecast.record("a", 30, tenant="z")  # y goes
    assert (forecast.forecast("a", tenant="x"), forecast.forecast("a", tenant="z")) == (11, 30)
    assert (
        forecast.forecast("a", tenant="y") == forecast.forecast("a") == 30
    )  # the lane's, not its 20
    lanes_only = OutputForecast(
        ["a"], quantile=1.0, min_samples=1, tenant_min_samples=1, max_tenants=0
    )
    lanes_only.record("a", 10, tenant="x")
    lanes_only.record("a", 500, tenant="y")
    assert lanes_only.forecast("a", tenant="x") == lanes_only.forecast("a") == 500


@given(
    answers=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]), st.sampled_from(["t", "u", "v"]), st.integers(0, 999)
        ),
        max_size=60,
    ),
    quantile=st.one_of(st.just("mean"), st.floats(0.01, 1.0)),
    max_tenants=st.integers(0, 3),
)
def test_each_forecast_is_its_own_recent_answers_else_the_lanes(
    answers: list[tuple[str, str, int]], quantile: float | Literal["mean"], max_tenants: int
) -> None:
    forecast = OutputForecast(
        ["a", "b"],
        quantile=quantile,
        window=6,
        min_samples=2,
        tenant_window=4,
        tenant_min_samples=3,
        max_tenants=max_tenants,
    )
    lanes: dict[str, list[int]] = {"a": [], "b": []}
    kept: dict[tuple[str, str], list[int]] = {}  # least recently recorded first
    for lane, tenant, tokens in answers:
        forecast.record(lane, tokens, tenant=tenant)
        lanes[lane].append(tokens)
        if max_tenants:
            own = kept.pop((lane, tenant), [])
            if len(kept) == max_tenants:
                del kept[next(iter(kept))]
            kept[(lane, tenant)] = [*own, tokens]

    def rank(values: list[int], window: int, least: int) -> int | None:
        recent = sorted(values[-window:])
        if len(recent) < least:
            return None
        if quantile == "mean":
            return max(1, sum(recent) // len(recent))
        return max(1, recent[int(quantile * (len(recent) - 1))])

    for lane in ("a", "b"):
        assert forecast.forecast(lane) == rank(lanes[lane], 6, 2)
        for tenant in ("t", "u", "v"):
            mine = rank(kept.get((lane, tenant), []), 4, 3)
            assert forecast.forecast(lane, tenant=tenant) == (
                mine if mine is not None else rank(lanes[lane], 6, 2)
            )


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


def test_each_tenant_reserves_what_its_own_answers_have_been() -> None:
    policy = _policy(0.9)
    for i in range(16):  # "t" writes 20 tokens, "long" 400: the lane's p90 is 400
        _serve(policy, f"warm{i}", float(i), 20)
        request = Request(id=f"l{i}", tenant="long", prompt_tokens=16, max_new_tokens=1584)
        policy.submit(request, now=float(i))
        (started,) = policy.dispatch(now=float(i))
        policy.tokens(started.id, 400, now=float(i))
        policy.finish(started.id, now=float(i))
    kept = {}
    for tenant in ("t", "long", "new"):
        request = Request(id=tenant, tenant=tenant, prompt_tokens=16, max_new_tokens=1584)
        policy.submit(request, now=20.0)
        (started,) = policy.dispatch(now=20.0)
        kept[tenant] = started.kv_blocks
    # Its prompt plus its own p90 answer; a tenant never seen, the lane's.
    assert kept == {
        "t": math.ceil(36 / 16),
        "long": math.ceil(416 / 16),
        "new": math.ceil(416 / 16),
    }


def test_the_config_takes_the_mean_a_quantile_or_the_ceiling() -> None:
    assert PolicyConfig().kv.output_quantile == "mean"
    for value in ("mean", 0.9, None):
        config = PolicyConfig.from_dict({"kv": {"output_quantile": value}})
        assert config.kv.output_quantile == value
    with pytest.raises(ConfigError, match=r"kv\.output_quantile"):
        PolicyConfig.from_dict({"kv": {"output_quantile": "median"}})


def test_the_tenant_is_named_by_keyword() -> None:
    # A lane and a tenant are both strings: positionally they could be swapped unseen.
    forecast = OutputForecast(["chat"])
    with pytest.raises(TypeError):
        forecast.forecast("chat", "t")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        forecast.record("chat", 10, "t")  # type: ignore[call-arg]
