"""Live replay and calibration: the simulator's workloads played against a real engine.

- :mod:`~slopolicy.replay.target`: the engine at a URL and what it reports
  about itself (:class:`Target`, :class:`EngineFacts`);
- :mod:`~slopolicy.replay.prompts`: prompts made to recorded token counts;
- :mod:`~slopolicy.replay.player`: one lane played in real time
  (:func:`play`), recorded as the simulator records requests;
- :mod:`~slopolicy.replay.live`: the ``fcfs`` (direct) and ``slopolicy`` (gated)
  lanes against one target, reported as a simulator comparison;
- :mod:`~slopolicy.replay.commands`: ``slopolicy replay``.

Needs ``slopolicy[openai,prometheus]``. ``docs/replay.md`` has the commands.
"""

from __future__ import annotations

from slopolicy.replay.live import LiveReplay as LiveReplay
from slopolicy.replay.live import forced_lengths as forced_lengths
from slopolicy.replay.live import live_comparison as live_comparison
from slopolicy.replay.live import replay_lanes as replay_lanes
from slopolicy.replay.player import LaneRun as LaneRun
from slopolicy.replay.player import Plan as Plan
from slopolicy.replay.player import play as play
from slopolicy.replay.prompts import PromptFit as PromptFit
from slopolicy.replay.target import EngineFacts as EngineFacts
from slopolicy.replay.target import Target as Target

__all__ = (
    "EngineFacts",
    "LaneRun",
    "LiveReplay",
    "Plan",
    "PromptFit",
    "Target",
    "forced_lengths",
    "live_comparison",
    "play",
    "replay_lanes",
)
