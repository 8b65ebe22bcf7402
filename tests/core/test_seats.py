"""Running seats: one per sequence (``n``, ``best_of``), lane caps and lane
reserves, on their own and in the policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import Admit, ConfigError, Demote, Policy, PolicyConfig, Request
from slopolicy.config.describe import describe
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.seats import Seats
from slopolicy.errors import UsageError

_LANES = ("chat", "heavy", "batch")


@pytest.mark.parametrize(
    ("limit", "caps", "reserves"),
    [
        (0, {"chat": None}, {}),
        (True, {"chat": None}, {}),
        (4, {"chat": 0}, {}),
        (4, {"chat": None}, {"other": 1}),
        (4, {"chat": None}, {"chat": -1}),
        (4, {"chat": None, "batch": None}, {"chat": 4}),
        (4, {"chat": None, "batch": None}, {"chat": 2, "batch": 2}),
    ],
)
def test_bad_settings_are_refused(
    limit: Any, caps: dict[str, int | None], reserves: dict[str, int]
) -> None:
    with pytest.raises(UsageError):
        Seats(limit, caps, reserves)


@given(
    limit=st.integers(1, 8),
    caps=st.tuples(*(st.none() | st.integers(1, 8) for _ in _LANES)),
    reserves=st.tuples(*(st.integers(0, 3) for _ in _LANES)),
    steps=st.lists(
        st.tuples(st.sampled_from(_LANES), st.integers(1, 10)) | st.integers(0, 40), max_size=60
    ),
)
def test_seats_keep_caps_reserves_and_room(
    limit: int,
    caps: tuple[int | None, ...],
    reserves: tuple[int, ...],
    steps: list[tuple[str, int] | int],
) -> None:
    """Whatever starts and ends: the seats held never pass the limit or a
    lane's cap, every lane's unused reserve stays free, and each lane's next
    request could start on an empty engine (so none waits forever)."""
    if sum(reserves) >= limit:
        reserves = (0, 0, 0)
    lane_caps = dict(zip(_LANES, caps, strict=True))
    lane_reserves = dict(zip(_LANES, reserves, strict=True))
    seats = Seats(limit, lane_caps, lane_reserves)
    held: dict[str, tuple[str, int]] = {}
    for number, step in enumerate(steps):
        if isinstance(step, int):  # an end
            if held:
                request_id = sorted(held)[step % len(held)]
                seats.give(request_id)
                del held[request_id]
        else:
            lane, sequences = step
            needed = seats.needed(lane, sequences)
            assert 1 <= needed <= sequences
            if seats.fits(lane, needed):
                seats.take(str(number), lane, needed)
                held[str(number)] = (lane, needed)
        by_lane = {lane: sum(n for lane_, n in held.values() if lane_ == lane) for lane in _LANES}
        assert seats.used == sum(by_lane.values()) <= limit
        assert seats.by_lane == by_lane
        unused = sum(max(0, r - by_lane[lane]) for lane, r in zip(_LANES, reserves, strict=True))
        assert limit - seats.used >= unused
        for lane, cap in zip(_LANES, caps, strict=True):
            assert cap is None or by_lane[lane] <= cap
    empty = Seats(limit, lane_caps, lane_reserves)
    for lane in _LANES:
        assert empty.fits(lane, empty.needed(lane, 10))


def _policy(max_running: int, **lanes: dict[str, Any]) -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": name, "max_prompt_tokens": 1000, "over_budget": "reject", **extra}
                for name, extra in (lanes or {"interactive": {}}).items()
            ],
            "kv": {"num_blocks": 1000, "block_size": 16},
            "engine": {"max_running": max_running},
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _submit(policy: Policy, request_id: str, lane: str = "interactive", **fields: Any) -> None:
    request = Request(id=request_id, prompt_tokens=10, max_new_tokens=8, lane=lane, **fields)
    assert isinstance(policy.submit(request, now=0.0), Admit | Demote)


def test_n_choices_take_n_seats() -> None:
    """An engine runs ``n`` choices (or ``best_of``) as that many sequences,
    each in a seat (llama.cpp's slots, vLLM's max-num-seqs): with 4 seats, a
    request for 3 choices leaves room for one more single-choice request."""
    policy = _policy(4)
    _submit(policy, "three", n=3)
    _submit(policy, "one")
    _submit(policy, "best", best_of=2)
    started = policy.dispatch(now=0.0).started
    assert [s.id for s in started] == ["three", "one"]  # before: all three started
    assert policy.seats.used == 4
    assert not policy.can_start(now=0.0)
    policy.finish("three", now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0).started] == ["best"]
    assert policy.seats.used == 3


def test_more_choices_than_seats_run_alone_not_never() -> None:
    """A request asking for more sequences than the engine (or its lane) has
    seats takes them all once they are free: it waits, it is not stuck."""
    policy = _policy(2, interactive={}, heavy={"max_running": 1})
    _submit(policy, "first")
    _submit(policy, "wide", n=5)
    _submit(policy, "heavy", lane="heavy", n=3)
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["first", "heavy"]
    policy.finish("first", now=1.0)
    policy.finish("heavy", now=1.0)
    assert [s.id for s in policy.dispatch(now=1.0).started] == ["wide"]
    assert policy.seats.used == 2


def test_other_lanes_never_take_a_reserved_seat() -> None:
    policy = _policy(4, interactive={"seat_reserve": 2}, background={})
    for number in range(4):
        _submit(policy, f"batch-{number}", lane="background")
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["batch-0", "batch-1"]
    _submit(policy, "chat-0")
    _submit(policy, "chat-1")
    _submit(policy, "chat-2")
    # The reserve and nothing more: the third chat waits for a seat like the rest.
    assert [s.id for s in policy.dispatch(now=0.0).started] == ["chat-0", "chat-1"]
    policy.finish("chat-0", now=1.0)  # a reserved seat: chat's, though batch waited longer
    assert [s.id for s in policy.dispatch(now=1.0).started] == ["chat-2"]
    policy.finish("chat-1", now=2.0)
    policy.finish("chat-2", now=2.0)
    assert policy.dispatch(now=2.0).started == ()  # two seats free, both reserved
    policy.finish("batch-0", now=3.0)
    assert [s.id for s in policy.dispatch(now=3.0).started] == ["batch-2"]


def test_seat_reserves_must_leave_a_seat_for_every_lane() -> None:
    with pytest.raises(ConfigError, match="seat_reserve adds up to 4"):
        _policy(4, interactive={"seat_reserve": 3}, background={"seat_reserve": 1})


def test_the_description_says_what_is_reserved() -> None:
    lanes = PolicyConfig().to_dict()["lanes"]
    lanes[0]["seat_reserve"] = 4
    config = PolicyConfig.from_dict({"lanes": lanes, "engine": {"max_running": 8}})
    assert "4 engine seats reserved" in describe(config)
