from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slopolicy.config.ladder import RUNGS
from slopolicy.core.ladder.rungs import (
    BUILTIN_RUNGS,
    FAVOR_AFTER,
    AdmissionAction,
    CapMaxNewTokens,
    CompressPrompt,
    DropOptionalFeatures,
    Rung,
    UseModel,
    default_rungs,
)
from slopolicy.core.request import Request
from slopolicy.errors import UsageError
from slopolicy.testing.strategies import requests

LANES = ("chat", "heavy", "batch")


def _truncate(request: Request) -> Request:
    """A pure compression hook: keep a tenth of the prompt."""
    tokens = request.prompt_tokens if request.prompt_tokens is not None else 1000
    return request.replace(prompt=None, messages=None, prompt_tokens=tokens // 10)


def _rungs() -> tuple[Rung, ...]:
    return default_rungs(
        interactive_lanes=["chat"],
        max_new_tokens=128,
        compress=_truncate,
        cheaper_model="small",
        downgrade_lanes=["heavy", "batch"],
        pause_lanes=["batch"],
    )


def test_the_builtin_rungs_are_the_configs_in_the_seeds_order() -> None:
    assert BUILTIN_RUNGS == RUNGS
    assert tuple(rung.name for rung in _rungs()) == BUILTIN_RUNGS


@settings(max_examples=200)
@given(request=requests(lanes=LANES), lane=st.sampled_from(LANES))
def test_every_builtin_transform_is_pure(request: Request, lane: str) -> None:
    snapshot = dataclasses.astuple(request)
    for rung in _rungs():
        if rung.transform is None:
            continue
        first = rung.transform(request, lane)
        assert rung.transform(request, lane) == first  # same input, same output
        if not isinstance(rung.transform, CompressPrompt):  # the host's hook may go on
            assert rung.transform(first, lane) == first  # a second pass changes nothing
        assert dataclasses.astuple(request) == snapshot  # the input is untouched
        assert (first.id, first.tenant) == (request.id, request.tenant)


def test_drop_optional_features_turns_off_the_costly_options() -> None:
    drop = DropOptionalFeatures()
    full = Request(prompt_tokens=10, n=3, best_of=5, logprobs=5, reasoning_effort="high")
    dropped = drop(full, "chat")
    assert (dropped.n, dropped.best_of, dropped.logprobs, dropped.reasoning_effort) == (
        1,
        None,
        None,
        "low",
    )
    assert dropped.output_budget == full.max_new_tokens
    for effort in (None, "minimal", "low"):  # already cheap: left as asked
        plain = Request(prompt_tokens=10, reasoning_effort=effort)
        assert drop(plain, "chat") is plain
    assert drop(Request(prompt_tokens=1, reasoning_effort="medium"), "x").reasoning_effort == "low"
    minimal = DropOptionalFeatures("minimal")
    assert minimal(Request(prompt_tokens=1, reasoning_effort="low"), "x").reasoning_effort == (
        "minimal"
    )
    with pytest.raises(UsageError, match="reasoning_effort"):
        DropOptionalFeatures("none")


def test_cap_max_new_tokens_only_lowers() -> None:
    cap = CapMaxNewTokens(256)
    assert cap(Request(prompt_tokens=1, max_new_tokens=4096), "chat").max_new_tokens == 256
    short = Request(prompt_tokens=1, max_new_tokens=100)
    assert cap(short, "chat") is short
    for bad in (0, 1.5, True):
        with pytest.raises(UsageError, match="cap"):
            CapMaxNewTokens(bad)  # type: ignore[arg-type]


def test_compress_prompt_runs_the_hosts_hook() -> None:
    compress = CompressPrompt(_truncate)
    assert compress(Request(prompt_tokens=40_000), "heavy").prompt_tokens == 4_000


def test_use_model_switches_the_model() -> None:
    use = UseModel("small")
    assert use(Request(prompt_tokens=1, model="large"), "heavy").model == "small"
    assert use(Request(prompt_tokens=1), "heavy").model == "small"
    small = Request(prompt_tokens=1, model="small")
    assert use(small, "heavy") is small
    with pytest.raises(UsageError, match="cheaper_model"):
        UseModel("")


def test_default_rungs_scope_each_rung_to_its_lanes() -> None:
    favor, drop, cap, compress, cheaper, pause, shed = _rungs()
    assert favor.favor_lanes == frozenset({"chat"})
    assert favor.favor_after == FAVOR_AFTER == 0.25  # a quarter of chat's TTFT target
    assert (favor.transform, favor.marker, favor.lanes) == (None, False, None)
    assert [favor.admission(lane) for lane in LANES] == [None] * 3  # refuses nothing
    assert drop.lanes is None
    assert cap.lanes == frozenset({"chat"})
    assert (cap.transform, compress.transform) == (CapMaxNewTokens(128), CompressPrompt(_truncate))
    assert compress.lanes is None
    assert not compress.marker
    assert cheaper.lanes == frozenset({"heavy", "batch"})
    assert cheaper.transform == UseModel("small")
    assert pause.transform is None
    assert pause.pause_lanes == frozenset({"batch"})
    assert [pause.admission(lane) for lane in LANES] == [None, None, AdmissionAction.PAUSE]
    assert (shed.shed, shed.retry_after) == (True, 5.0)
    assert shed.keep_lanes == frozenset({"chat"})
    assert [shed.admission(lane) for lane in LANES] == [None] + [AdmissionAction.SHED] * 2


def test_without_hooks_compress_is_a_marker_and_cheaper_model_a_no_op() -> None:
    rungs = {rung.name: rung for rung in default_rungs(interactive_lanes=["chat"])}
    compress, cheaper = rungs["compress_prompt"], rungs["cheaper_model"]
    assert (compress.marker, compress.transform) == (True, None)
    assert compress.covers("heavy")
    assert (cheaper.marker, cheaper.transform, cheaper.lanes) == (False, None, frozenset())
    scoped = default_rungs(interactive_lanes=["chat"], compress_lanes=["heavy"])[3]
    assert (scoped.covers("heavy"), scoped.covers("chat")) == (True, False)


def test_default_rungs_pick_and_order_by_name() -> None:
    rungs = default_rungs(interactive_lanes=["chat"], order=["shed", "cap_max_new_tokens"])
    assert [rung.name for rung in rungs] == ["shed", "cap_max_new_tokens"]
    for order in (["shed", "shed"], ["nap"], "shed"):
        with pytest.raises(UsageError, match="order"):
            default_rungs(interactive_lanes=["chat"], order=order)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"interactive_lanes": []}, "at least one lane"),
        ({"interactive_lanes": "chat"}, "the string 'chat'"),
        ({"interactive_lanes": ["chat"], "pause_lanes": [""]}, "non-empty"),
        ({"interactive_lanes": ["chat"], "max_new_tokens": 0}, "cap"),
        ({"interactive_lanes": ["chat"], "shed_retry_after": 0}, "retry_after"),
        ({"interactive_lanes": ["chat"], "cheaper_model": ""}, "cheaper_model"),
    ],
)
def test_default_rungs_misuse_is_a_usage_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        default_rungs(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "name"),
        ({"name": "r", "transform": 3}, "callable"),
        ({"name": "r", "transform": lambda r, lane: r, "marker": True}, "marker"),
        ({"name": "r", "keep_lanes": frozenset({"chat"})}, "shed=True"),
        ({"name": "r", "shed": True, "retry_after": -1.0}, "retry_after"),
        ({"name": "r", "pause_lanes": "batch"}, "the string"),
    ],
)
def test_a_bad_rung_is_a_usage_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Rung(**kwargs)  # type: ignore[arg-type]


def test_custom_rungs_take_any_iterable_of_lanes() -> None:
    rung = Rung("hold_heavy", pause_lanes={"heavy"}, retry_after=2)  # type: ignore[arg-type]
    assert rung.pause_lanes == frozenset({"heavy"})
    assert rung.admission("heavy") is AdmissionAction.PAUSE
    assert rung.covers("anything")


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf"), True, "0.5", None])
def test_a_favour_wait_outside_zero_to_one_is_refused(bad: object) -> None:
    with pytest.raises(UsageError, match="favor_after must be a number from 0 to 1"):
        Rung("f", favor_lanes=frozenset({"chat"}), favor_after=bad)  # type: ignore[arg-type]
    assert Rung("f", favor_lanes=frozenset({"chat"}), favor_after=1).favor_after == 1
