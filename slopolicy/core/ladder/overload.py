"""Explicit overload states, derived from the fallback ladder's active rungs.

The state is the most severe effect among the active rungs, judged by what
each rung does (not its name), so custom rungs map too:

| active rungs include | state | built-in rungs | new requests |
|---|---|---|---|
| none (level 0) | ``normal`` | | all admitted |
| reorders, transforms, markers | ``degraded`` | the first five | admitted, reordered, degraded |
| a rung with ``pause_lanes`` | ``batch_paused`` | ``pause_background`` | paused lanes held |
| a rung with ``shed`` | ``interactive_only`` | ``shed`` | only ``keep_lanes`` |

The first five built-in rungs are ``favor_interactive``,
``drop_optional_features``, ``cap_max_new_tokens``, ``compress_prompt`` and
``cheaper_model``.
The reason names the level, the highest active rung and the ladder's last
move (which triggers, with their values, or the cooldown).
"""

from __future__ import annotations

import enum

from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.rungs import Rung

__all__ = ("OverloadState", "overload_state", "rung_state")


class OverloadState(enum.Enum):
    """The service's overload state; the value is the stable wire name.

    Members are in order of severity, so ``max`` over states is meaningful
    through :attr:`severity`.
    """

    NORMAL = "normal"
    DEGRADED = "degraded"
    BATCH_PAUSED = "batch_paused"
    INTERACTIVE_ONLY = "interactive_only"

    @property
    def severity(self) -> int:
        """0 for normal up to 3 for interactive_only."""
        return _SEVERITY[self]


_SEVERITY = {state: index for index, state in enumerate(OverloadState)}


def rung_state(rung: Rung) -> OverloadState:
    """The state one active rung puts the service in on its own."""
    if rung.shed:
        return OverloadState.INTERACTIVE_ONLY
    if rung.pause_lanes:
        return OverloadState.BATCH_PAUSED
    return OverloadState.DEGRADED


def overload_state(ladder: FallbackLadder) -> tuple[OverloadState, str]:
    """The ladder's overload state and a sentence saying why."""
    active = ladder.active_rungs
    if not active:
        return OverloadState.NORMAL, "no fallback rung is active"
    state = max((rung_state(rung) for rung in active), key=lambda s: s.severity)
    top = active[-1]
    reason = f"{state.value}: level {ladder.level}/{ladder.top}, up to rung {top.name!r}"
    if state is OverloadState.BATCH_PAUSED:
        paused = frozenset().union(*(rung.pause_lanes for rung in active))
        reason += f"; lanes {sorted(paused)} paused"
    elif state is OverloadState.INTERACTIVE_ONLY:
        # Each shed rung spares its own keep_lanes; only lanes every one spares get in.
        kept = frozenset.intersection(*(rung.keep_lanes for rung in active if rung.shed))
        reason += f"; only lanes {sorted(kept)} admitted"
    event = ladder.last_event
    if event is not None:
        reason += f" (last move at t={event.at:g}: {event.message})"
    return state, reason
