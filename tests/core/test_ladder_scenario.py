"""A scripted overload: a stream of 40k-token prompts, then recovery.

The pressure timeline stands in for what the SLO trackers and engine signals
will report once the Policy and simulator drive the ladder: while 40k-token
prompts pour into the heavy lane, the chat lane's queue wait and p95 TTFT
climb; the load ends at t=64 and the signals settle by t=70.
"""

from __future__ import annotations

from slopolicy.core.ladder.events import LadderCause, LadderDirection, LadderEvent
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.overload import OverloadState, overload_state
from slopolicy.core.ladder.pressure import Pressure, default_triggers
from slopolicy.core.ladder.rungs import BUILTIN_RUNGS, AdmissionAction, default_rungs
from slopolicy.core.request import Request

LOAD_ENDS = 64
SETTLED = 70
END = 250


def script(t: int) -> Pressure:
    """The signals at second ``t``."""
    if t <= LOAD_ENDS:
        return Pressure(
            ttft_p95_fraction=0.42 + 0.025 * t,  # 0.8 at ~15 s, 2.02 at 64 s
            queue_wait_fraction=0.1 + 0.015 * t,
            kv_usage=0.5 + 0.005 * t,
            decode_tps_drop=0.05 + 0.002 * t,
            tool_timeout_rate=0.0,
        )
    if t < SETTLED:  # draining: inside every hysteresis band, so the ladder holds
        return Pressure(
            ttft_p95_fraction=0.7,
            queue_wait_fraction=0.3,
            kv_usage=0.7,
            decode_tps_drop=0.05,
            tool_timeout_rate=0.0,
        )
    return Pressure(
        ttft_p95_fraction=0.3,
        queue_wait_fraction=0.05,
        kv_usage=0.4,
        decode_tps_drop=0.02,
        tool_timeout_rate=0.0,
    )


TRIGGERS = default_triggers()  # LadderConfig's defaults
#: The seed's six rungs, in its order (the built-ins less favor_interactive).
SEED_RUNGS = tuple(name for name in BUILTIN_RUNGS if name != "favor_interactive")
BY_NAME = {trigger.name: trigger for trigger in TRIGGERS}


def _ladder() -> FallbackLadder:
    rungs = default_rungs(
        interactive_lanes=["chat"],
        max_new_tokens=256,
        cheaper_model="small",
        downgrade_lanes=["heavy", "batch"],
        pause_lanes=["batch"],
        shed_retry_after=5.0,
        order=SEED_RUNGS,
    )
    return FallbackLadder(rungs, TRIGGERS, dwell=10.0, cooldown=30.0)


def _up(t: int, level: int, rung: str, *hot: str) -> LadderEvent:
    pressure = script(t)
    readings = tuple(BY_NAME[name].reading(pressure.signal(name) or 0.0) for name in hot)
    return LadderEvent(
        at=float(t),
        from_level=level - 1,
        to_level=level,
        rung=rung,
        direction=LadderDirection.UP,
        cause=LadderCause.PRESSURE,
        readings=readings,
    )


def _down(t: int, level: int, rung: str) -> LadderEvent:
    pressure = script(t)
    readings = tuple(trigger.reading(trigger.value(pressure) or 0.0) for trigger in TRIGGERS)
    return LadderEvent(
        at=float(t),
        from_level=level + 1,
        to_level=level,
        rung=rung,
        direction=LadderDirection.DOWN,
        cause=LadderCause.COOLDOWN,
        readings=readings,
    )


def test_a_long_prompt_storm_climbs_in_order_and_recovers_one_rung_per_cooldown() -> None:
    ladder = _ladder()
    events: list[LadderEvent] = []
    states: list[tuple[int, OverloadState]] = []
    for t in range(END):
        event = ladder.update(script(t), now=float(t))
        if event is not None:
            events.append(event)
        state, _ = overload_state(ladder)
        if not states or states[-1][1] is not state:
            states.append((t, state))

    assert events == [
        _up(16, 1, "drop_optional_features", "ttft_p95_fraction"),
        _up(26, 2, "cap_max_new_tokens", "ttft_p95_fraction"),
        _up(36, 3, "compress_prompt", "ttft_p95_fraction", "queue_wait_fraction"),
        _up(46, 4, "cheaper_model", "ttft_p95_fraction", "queue_wait_fraction"),
        _up(56, 5, "pause_background", "ttft_p95_fraction", "queue_wait_fraction"),
        # Load ends at 64, the band holds until 70, then one rung per 30 s cooldown.
        _down(100, 4, "pause_background"),
        _down(130, 3, "cheaper_model"),
        _down(160, 2, "compress_prompt"),
        _down(190, 1, "cap_max_new_tokens"),
        _down(220, 0, "drop_optional_features"),
    ]
    assert states == [
        (0, OverloadState.NORMAL),
        (16, OverloadState.DEGRADED),
        (56, OverloadState.BATCH_PAUSED),
        (100, OverloadState.DEGRADED),
        (220, OverloadState.NORMAL),
    ]
    paused_at = states[2][0]
    ttft_then = script(paused_at).ttft_p95_fraction
    assert ttft_then is not None
    assert ttft_then < 2.0  # background paused before chat TTFT doubles its target
    assert max(script(t).ttft_p95_fraction or 0.0 for t in range(END)) >= 2.0
    stats = ladder.statistics()
    assert stats.activations == dict.fromkeys(stats.activations, 1) | {"shed": 0}
    assert (stats.level, stats.climbs, stats.descents) == (0, 5, 5)
    # Seconds per level: 10 s per climb, 30 s per step down, 44 s paused (56 to 100).
    assert stats.time_by_level == (16.0 + 29.0, 40.0, 40.0, 40.0, 40.0, 44.0, 0.0)


def test_what_a_40k_prompt_meets_at_the_height_of_the_storm() -> None:
    ladder = _ladder()
    for t in range(57):
        ladder.update(script(t), now=float(t))
    assert ladder.level == 5
    contract = Request(
        tenant="acme", prompt_tokens=40_000, max_new_tokens=2048, n=2, best_of=4, logprobs=5
    )
    heavy, applied = ladder.apply(contract, "heavy")
    assert applied == ("drop_optional_features", "compress_prompt", "cheaper_model")
    assert (heavy.n, heavy.best_of, heavy.logprobs, heavy.model) == (1, None, None, "small")
    assert heavy.max_new_tokens == 2048  # the cap is for interactive lanes
    chat, applied = ladder.apply(Request(tenant="acme", prompt="hi", max_new_tokens=2048), "chat")
    assert (chat.max_new_tokens, applied) == (256, ("cap_max_new_tokens", "compress_prompt"))
    verdict = ladder.admission("batch")
    assert verdict is not None
    assert (verdict.action, verdict.retry_after) == (AdmissionAction.PAUSE, 30.0)
    assert ladder.admission("heavy") is None
    assert ladder.admission("chat") is None
    state, reason = overload_state(ladder)
    assert state is OverloadState.BATCH_PAUSED
    assert reason == (
        "batch_paused: level 5/6, up to rung 'pause_background'; lanes ['batch'] paused "
        "(last move at t=56: level 4 -> 5: pause_background on; "
        "ttft_p95_fraction=1.82 >= 0.8, queue_wait_fraction=0.94 >= 0.5)"
    )
