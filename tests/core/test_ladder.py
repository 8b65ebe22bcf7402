from __future__ import annotations

import math

import pytest

from slopolicy.core.ladder.events import LadderCause, LadderDirection, LadderEvent, LadderVerdict
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.pressure import Pressure, Reading, Trigger
from slopolicy.core.ladder.rungs import AdmissionAction, Rung, Transform, default_rungs
from slopolicy.core.request import Request
from slopolicy.errors import UsageError

TTFT = Trigger("ttft_p95_fraction", 0.8, 0.6)
KV = Trigger("kv_usage", 0.92, 0.8)
HOT = Pressure(ttft_p95_fraction=0.9, kv_usage=0.5)
WARM = Pressure(ttft_p95_fraction=0.7, kv_usage=0.5)
COOL = Pressure(ttft_p95_fraction=0.3, kv_usage=0.5)
UNKNOWN_KV = Pressure(ttft_p95_fraction=0.3)


def _ladder(rungs: int = 3, *, dwell: float = 10.0, cooldown: float = 30.0) -> FallbackLadder:
    return FallbackLadder(
        [Rung(f"r{i}", marker=True) for i in range(1, rungs + 1)],
        [TTFT, KV],
        dwell=dwell,
        cooldown=cooldown,
    )


def _levels(ladder: FallbackLadder, script: list[tuple[float, Pressure]]) -> list[int]:
    levels = []
    for now, pressure in script:
        ladder.update(pressure, now=now)
        levels.append(ladder.level)
    return levels


def test_the_first_climb_is_immediate_and_the_next_waits_a_dwell() -> None:
    ladder = _ladder()
    assert ladder.update(COOL, now=0.0) is None
    event = ladder.update(HOT, now=5.0)
    assert event == LadderEvent(
        at=5.0,
        from_level=0,
        to_level=1,
        rung="r1",
        direction=LadderDirection.UP,
        cause=LadderCause.PRESSURE,
        readings=(TTFT.reading(0.9),),
    )
    assert _levels(ladder, [(6.0, HOT), (14.9, HOT), (15.0, HOT), (20.0, HOT)]) == [1, 1, 2, 2]
    assert _levels(ladder, [(25.0, HOT), (35.0, HOT), (99.0, HOT)]) == [3, 3, 3]  # top


def test_pressure_returning_after_a_quiet_dwell_climbs_at_once() -> None:
    ladder = _ladder()
    ladder.update(HOT, now=0.0)
    assert _levels(ladder, [(5.0, WARM), (12.0, WARM), (12.5, HOT)]) == [1, 1, 2]


def test_the_hysteresis_band_holds_the_level_forever() -> None:
    ladder = _ladder()
    _levels(ladder, [(0.0, HOT), (10.0, HOT)])
    assert set(_levels(ladder, [(10.0 + t, WARM) for t in range(1, 500)])) == {2}


def test_each_step_down_waits_a_full_cooldown_of_its_own() -> None:
    ladder = _ladder()
    _levels(ladder, [(0.0, HOT), (10.0, HOT)])
    assert ladder.update(COOL, now=20.0) is None  # the cool run starts here
    assert ladder.update(COOL, now=49.9) is None
    event = ladder.update(COOL, now=50.0)
    assert event is not None
    assert (event.from_level, event.to_level, event.rung) == (2, 1, "r2")
    assert (event.direction, event.cause) == (LadderDirection.DOWN, LadderCause.COOLDOWN)
    assert event.readings == (TTFT.reading(0.3), KV.reading(0.5))
    assert _levels(ladder, [(60.0, COOL), (79.9, COOL), (80.0, COOL), (500.0, COOL)]) == [
        1,
        1,
        0,
        0,
    ]


def test_a_warm_or_unknown_reading_restarts_the_cooldown() -> None:
    for interruption in (WARM, UNKNOWN_KV):
        ladder = _ladder()
        ladder.update(HOT, now=0.0)
        levels = _levels(ladder, [(10.0, COOL), (35.0, interruption), (36.0, COOL), (65.0, COOL)])
        assert levels == [1, 1, 1, 1]
        assert _levels(ladder, [(66.0, COOL)]) == [0]


def test_unknown_never_relieves_a_hot_trigger_and_never_steps_down() -> None:
    ladder = _ladder()
    assert ladder.update(Pressure(ttft_p95_fraction=0.9), now=0.0) is not None  # kv unknown
    assert set(_levels(ladder, [(t, Pressure()) for t in range(10, 1000, 10)])) == {1}


def test_cooldown_shorter_than_dwell_still_moves_once_per_dwell() -> None:
    ladder = _ladder(dwell=10.0, cooldown=1.0)
    ladder.update(HOT, now=0.0)
    assert _levels(ladder, [(1.0, COOL), (2.0, COOL), (9.9, COOL), (10.0, COOL)]) == [1, 1, 1, 0]


def test_pressure_rising_below_exit_holds_the_step_down() -> None:
    ladder = _ladder()
    ladder.update(HOT, now=0.0)
    rising = [
        (10.0 + t, Pressure(ttft_p95_fraction=0.1 + t / 200, kv_usage=0.5)) for t in range(60)
    ]
    assert set(_levels(ladder, rising)) == {1}
    # Level again: the cool run never broke, so the step comes at once.
    assert _levels(ladder, [(70.0, Pressure(ttft_p95_fraction=0.395, kv_usage=0.5))]) == [0]


def test_now_earlier_than_seen_counts_as_the_latest() -> None:
    ladder = _ladder()
    ladder.update(HOT, now=100.0)
    assert ladder.update(HOT, now=50.0) is None  # still 100: within the dwell
    event = ladder.update(HOT, now=110.0)
    assert event is not None
    assert event.at == 110.0
    assert ladder.update(HOT, now=0.0) is None
    assert ladder.statistics().since == 110.0


def test_statistics_count_time_moves_and_use() -> None:
    ladder = FallbackLadder(
        default_rungs(
            interactive_lanes=["chat"],
            pause_lanes=["batch"],
            order=["cap_max_new_tokens", "pause_background"],
        ),
        [TTFT],
        dwell=10.0,
        cooldown=30.0,
    )
    empty = ladder.statistics(now=5.0)
    assert (empty.level, empty.since, empty.time_at_level, empty.moves) == (0, None, 0.0, 0)
    _levels(ladder, [(100.0, COOL), (110.0, HOT), (120.0, HOT), (125.0, COOL)])
    ladder.apply(Request(prompt_tokens=10, max_new_tokens=4096), "chat")
    ladder.apply(Request(prompt_tokens=10, max_new_tokens=4), "chat")  # already under the cap
    ladder.admission("batch")
    ladder.admission("chat")
    stats = ladder.statistics(now=130.0)
    assert (stats.level, stats.rung, stats.since, stats.time_at_level) == (
        2,
        "pause_background",
        120.0,
        10.0,
    )
    assert stats.time_by_level == (10.0, 10.0, 10.0)
    assert (stats.climbs, stats.descents, stats.moves) == (2, 0, 2)
    assert stats.activations == {"cap_max_new_tokens": 1, "pause_background": 1}
    assert stats.applied == {"cap_max_new_tokens": 1, "pause_background": 0}
    assert stats.held == {"cap_max_new_tokens": 0, "pause_background": 1}
    assert ladder.statistics().time_at_level == 5.0  # the latest now seen is 125


def test_apply_composes_the_active_transforms_in_rung_order() -> None:
    def halve(request: Request, lane: str) -> Request:
        return request.replace(max_new_tokens=max(1, request.max_new_tokens // 2))

    def cap_100(request: Request, lane: str) -> Request:
        return request.replace(max_new_tokens=min(100, request.max_new_tokens))

    ladder = FallbackLadder(
        [Rung("cap", cap_100), Rung("halve", halve), Rung("never", halve)],
        [TTFT],
        dwell=1.0,
        cooldown=1.0,
    )
    request = Request(prompt_tokens=5, max_new_tokens=1000)
    assert ladder.apply(request, "chat") == (request, ())
    _levels(ladder, [(0.0, HOT), (1.0, HOT)])
    result, applied = ladder.apply(request, "chat")
    assert result == halve(cap_100(request, "chat"), "chat")
    assert result.max_new_tokens == 50  # halve-then-cap would give 100
    assert applied == ("cap", "halve")
    assert request.max_new_tokens == 1000


def test_apply_respects_lanes_and_lists_markers_and_only_real_changes() -> None:
    ladder = FallbackLadder(
        [
            Rung(
                "heavy_only", lambda r, lane: r.replace(model="small"), lanes=frozenset({"heavy"})
            ),
            Rung("mark", marker=True, lanes=frozenset({"heavy", "chat"})),
            Rung("same", lambda r, lane: r.replace()),  # an equal copy is no change
        ],
        [TTFT],
        dwell=1.0,
        cooldown=1.0,
    )
    _levels(ladder, [(0.0, HOT), (1.0, HOT), (2.0, HOT)])
    request = Request(prompt_tokens=5)
    heavy, applied = ladder.apply(request, "heavy")
    assert (heavy.model, applied) == ("small", ("heavy_only", "mark"))
    assert ladder.apply(request, "chat") == (request, ("mark",))
    assert ladder.apply(request, "batch") == (request, ())


@pytest.mark.parametrize(
    "bad",
    [
        lambda r, lane: "not a request",
        lambda r, lane: r.replace(id="other"),
        lambda r, lane: r.replace(tenant="other"),
    ],
)
def test_a_transform_breaking_its_contract_is_a_usage_error(bad: Transform) -> None:
    ladder = FallbackLadder([Rung("bad", bad)], [TTFT], dwell=1.0, cooldown=1.0)
    ladder.update(HOT, now=0.0)
    with pytest.raises(UsageError, match="rung 'bad'"):
        ladder.apply(Request(prompt_tokens=5), "chat")


def test_admission_gives_the_highest_active_rungs_verdict() -> None:
    rungs = default_rungs(
        interactive_lanes=["chat"],
        pause_lanes=["batch"],
        shed_retry_after=7.0,
        order=["pause_background", "shed"],
    )
    ladder = FallbackLadder(rungs, [TTFT], dwell=10.0, cooldown=30.0)
    assert [ladder.admission(lane) for lane in ("chat", "heavy", "batch")] == [None] * 3
    ladder.update(HOT, now=0.0)
    assert ladder.admission("batch") == LadderVerdict(
        AdmissionAction.PAUSE,
        "batch",
        "pause_background",
        30.0,  # no retry_after on the rung: the cooldown, the soonest it can lift
        "lane 'batch' paused by the fallback ladder (pause_background)",
    )
    assert ladder.admission("heavy") is None
    ladder.update(HOT, now=10.0)
    verdicts = {lane: ladder.admission(lane) for lane in ("chat", "heavy", "batch")}
    assert verdicts["chat"] is None
    for lane in ("heavy", "batch"):
        verdict = verdicts[lane]
        assert verdict is not None
        assert (verdict.action, verdict.rung, verdict.retry_after) == (
            AdmissionAction.SHED,
            "shed",
            7.0,
        )
        assert verdict.http_status == 503


def test_custom_triggers_read_anything_in_the_snapshot() -> None:
    def worst_tool_signal(pressure: Pressure) -> float | None:
        values = [pressure.tool_timeout_rate, pressure.extra.get("retriever_timeouts")]
        known = [value for value in values if value is not None]
        return max(known) if known else None

    tools = Trigger("tools", 0.05, 0.02, read=worst_tool_signal)
    custom = Trigger("retriever_p95_fraction", 1.0, 0.7)  # reads extra by name
    ladder = FallbackLadder([Rung("r1", marker=True)], [tools, custom], dwell=1.0, cooldown=1.0)
    event = ladder.update(
        Pressure(extra={"retriever_timeouts": 0.1, "retriever_p95_fraction": 2}), now=0
    )
    assert event is not None
    assert event.readings == (
        Reading("tools", 0.1, 0.05, 0.02),
        Reading("retriever_p95_fraction", 2.0, 1.0, 0.7),
    )
    assert "tools=0.1 >= 0.05" in event.message


def test_event_messages_say_what_moved_and_why() -> None:
    ladder = _ladder()
    up = ladder.update(HOT, now=0.0)
    assert up is not None
    assert up.message == "level 0 -> 1: r1 on; ttft_p95_fraction=0.9 >= 0.8"
    ladder.update(COOL, now=10.0)
    down = ladder.update(COOL, now=40.0)
    assert down is not None
    assert down.message == (
        "level 1 -> 0: r1 off; cooldown elapsed (ttft_p95_fraction=0.3 < 0.6, kv_usage=0.5 < 0.8)"
    )
    assert ladder.last_event == down
    assert repr(ladder) == "<FallbackLadder level=0/3 rung=None>"


def test_a_failed_update_changes_nothing() -> None:
    calls = []

    def flaky(pressure: Pressure) -> float | None:
        calls.append(pressure)
        return math.nan if len(calls) == 2 else 0.9

    ladder = FallbackLadder(
        [Rung("r1", marker=True), Rung("r2", marker=True)],
        [TTFT, Trigger("flaky", 0.8, 0.6, read=flaky)],
        dwell=1.0,
        cooldown=1.0,
    )
    ladder.update(COOL, now=0.0)
    before = ladder.statistics()
    with pytest.raises(UsageError, match="trigger 'flaky'"):
        ladder.update(HOT, now=50.0)
    assert ladder.statistics() == before
    assert ladder.update(HOT, now=1.0) is not None  # 50 was never seen


@pytest.mark.parametrize("now", [math.nan, math.inf, True, "1"])
def test_update_rejects_a_bad_now(now: object) -> None:
    with pytest.raises(UsageError, match="now"):
        _ladder().update(HOT, now=now)  # type: ignore[arg-type]


def test_update_takes_only_a_pressure() -> None:
    with pytest.raises(UsageError, match="Pressure"):
        _ladder().update({"ttft_p95_fraction": 0.9}, now=0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rungs", "triggers", "dwell", "cooldown", "match"),
    [
        ([], [TTFT], 1.0, 1.0, "Rung"),
        ([Rung("a", marker=True)], [], 1.0, 1.0, "Trigger"),
        (["a"], [TTFT], 1.0, 1.0, "Rung"),
        ([Rung("a", marker=True)] * 2, [TTFT], 1.0, 1.0, "unique"),
        ([Rung("a", marker=True)], [TTFT, TTFT], 1.0, 1.0, "unique"),
        ([Rung("a", marker=True)], [TTFT], 0.0, 1.0, "dwell"),
        ([Rung("a", marker=True)], [TTFT], 1.0, math.inf, "cooldown"),
        ([Rung("a", marker=True)], [TTFT], 1.0, True, "cooldown"),
    ],
)
def test_construction_misuse_is_a_usage_error(
    rungs: list[Rung], triggers: list[Trigger], dwell: float, cooldown: float, match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        FallbackLadder(rungs, triggers, dwell=dwell, cooldown=cooldown)


def test_statistics_rejects_a_bad_now() -> None:
    with pytest.raises(UsageError, match="now"):
        _ladder().statistics(now=math.nan)


def test_the_favoured_lanes_come_with_the_least_wait_their_rungs_ask() -> None:
    ladder = FallbackLadder(
        [
            Rung("late", favor_lanes=frozenset({"chat", "voice"}), favor_after=0.5),
            Rung("sooner", favor_lanes=frozenset({"chat"}), favor_after=0.1),
        ],
        [TTFT],
        dwell=10.0,
        cooldown=30.0,
    )
    assert ladder.favoured() == {}
    _levels(ladder, [(0.0, HOT)])
    assert ladder.favoured() == {"chat": 0.5, "voice": 0.5}
    _levels(ladder, [(10.0, HOT)])
    assert ladder.favoured() == {"chat": 0.1, "voice": 0.5}
