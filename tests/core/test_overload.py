from __future__ import annotations

from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.overload import OverloadState, overload_state, rung_state
from slopolicy.core.ladder.pressure import Pressure, Trigger
from slopolicy.core.ladder.rungs import Rung, default_rungs

TTFT = Trigger("ttft_p95_fraction", 0.8, 0.6)
HOT = Pressure(ttft_p95_fraction=1.0)


def _climb(ladder: FallbackLadder, levels: int) -> None:
    """Climb ``levels`` rungs, one dwell apart, after the last move."""
    event = ladder.last_event
    start = 0.0 if event is None else event.at + ladder.dwell
    for step in range(levels):
        assert ladder.update(HOT, now=start + step * ladder.dwell) is not None


def test_each_builtin_level_maps_to_the_seeds_state() -> None:
    rungs = default_rungs(interactive_lanes=["chat"], pause_lanes=["batch"])
    # favor_interactive, drop_optional_features, cap_max_new_tokens,
    # compress_prompt and cheaper_model refuse nothing.
    expected = [OverloadState.NORMAL] + [OverloadState.DEGRADED] * 5
    expected += [OverloadState.BATCH_PAUSED, OverloadState.INTERACTIVE_ONLY]
    for level, state in enumerate(expected):
        ladder = FallbackLadder(rungs, [TTFT], dwell=1.0, cooldown=1.0)
        _climb(ladder, level)
        assert overload_state(ladder)[0] is state, level


def test_the_state_follows_what_rungs_do_not_their_names() -> None:
    rungs = [
        Rung("stop_exports", shed=True, keep_lanes=frozenset({"chat", "batch"})),
        Rung("trim", lambda request, lane: request),
        Rung("hold_batch", pause_lanes=frozenset({"batch"})),
        Rung("stop_batch", shed=True, keep_lanes=frozenset({"chat", "heavy"})),
    ]
    assert [rung_state(rung) for rung in rungs] == [
        OverloadState.INTERACTIVE_ONLY,
        OverloadState.DEGRADED,
        OverloadState.BATCH_PAUSED,
        OverloadState.INTERACTIVE_ONLY,
    ]
    ladder = FallbackLadder(rungs, [TTFT], dwell=1.0, cooldown=1.0)
    _climb(ladder, 3)
    state, reason = overload_state(ladder)
    assert state is OverloadState.INTERACTIVE_ONLY  # the most severe active rung wins
    assert reason.startswith(
        "interactive_only: level 3/4, up to rung 'hold_batch'; "
        "only lanes ['batch', 'chat'] admitted"
    )
    _climb(ladder, 1)  # only lanes every shed rung spares get in
    assert "only lanes ['chat'] admitted" in overload_state(ladder)[1]


def test_the_reason_names_the_rung_and_the_last_move() -> None:
    ladder = FallbackLadder(
        default_rungs(interactive_lanes=["chat"], order=["cap_max_new_tokens"]),
        [TTFT],
        dwell=1.0,
        cooldown=1.0,
    )
    assert overload_state(ladder) == (OverloadState.NORMAL, "no fallback rung is active")
    ladder.update(HOT, now=3.0)
    assert overload_state(ladder) == (
        OverloadState.DEGRADED,
        "degraded: level 1/1, up to rung 'cap_max_new_tokens' (last move at t=3: "
        "level 0 -> 1: cap_max_new_tokens on; ttft_p95_fraction=1 >= 0.8)",
    )


def test_states_are_ordered_by_severity() -> None:
    assert [state.severity for state in OverloadState] == [0, 1, 2, 3]
    assert [state.value for state in OverloadState] == [
        "normal",
        "degraded",
        "batch_paused",
        "interactive_only",
    ]
