"""Agent tasks: a request as one turn of a task, the table of tasks under way,
and task completion figures (see ``docs/tasks.md``)."""

from __future__ import annotations

from slopolicy.core.tasks.records import TaskBudget as TaskBudget
from slopolicy.core.tasks.records import TaskEnded as TaskEnded
from slopolicy.core.tasks.records import TaskOutcome as TaskOutcome
from slopolicy.core.tasks.records import TaskRefusal as TaskRefusal
from slopolicy.core.tasks.records import TaskStatistics as TaskStatistics
from slopolicy.core.tasks.ref import TaskRef as TaskRef
from slopolicy.core.tasks.table import TaskTable as TaskTable
from slopolicy.core.tasks.trackers import TaskSnapshot as TaskSnapshot
from slopolicy.core.tasks.trackers import TaskTracker as TaskTracker
from slopolicy.core.tasks.trackers import TaskTrackers as TaskTrackers

__all__ = (
    "TaskBudget",
    "TaskEnded",
    "TaskOutcome",
    "TaskRef",
    "TaskRefusal",
    "TaskSnapshot",
    "TaskStatistics",
    "TaskTable",
    "TaskTracker",
    "TaskTrackers",
)
