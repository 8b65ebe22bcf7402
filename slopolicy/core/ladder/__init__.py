"""The fallback ladder: pressure triggers, rungs, the ladder itself, its events and overload states.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.ladder.events import LadderCause as LadderCause
from slopolicy.core.ladder.events import LadderDirection as LadderDirection
from slopolicy.core.ladder.events import LadderEvent as LadderEvent
from slopolicy.core.ladder.events import LadderStatistics as LadderStatistics
from slopolicy.core.ladder.events import LadderVerdict as LadderVerdict
from slopolicy.core.ladder.ladder import FallbackLadder as FallbackLadder
from slopolicy.core.ladder.overload import OverloadState as OverloadState
from slopolicy.core.ladder.overload import overload_state as overload_state
from slopolicy.core.ladder.pressure import Pressure as Pressure
from slopolicy.core.ladder.pressure import Trigger as Trigger
from slopolicy.core.ladder.pressure import Zone as Zone
from slopolicy.core.ladder.pressure import default_triggers as default_triggers
from slopolicy.core.ladder.rungs import BUILTIN_RUNGS as BUILTIN_RUNGS
from slopolicy.core.ladder.rungs import AdmissionAction as AdmissionAction
from slopolicy.core.ladder.rungs import Rung as Rung
from slopolicy.core.ladder.rungs import default_rungs as default_rungs

__all__ = (
    "BUILTIN_RUNGS",
    "AdmissionAction",
    "FallbackLadder",
    "LadderCause",
    "LadderDirection",
    "LadderEvent",
    "LadderStatistics",
    "LadderVerdict",
    "OverloadState",
    "Pressure",
    "Rung",
    "Trigger",
    "Zone",
    "default_rungs",
    "default_triggers",
    "overload_state",
)
