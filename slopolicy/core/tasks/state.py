"""The task table's state: one task under way, its deadline, and each refusal it gives.

Plain records the :class:`~slopolicy.core.tasks.table.TaskTable` owns and
changes; nothing here checks its arguments (the table's caller did).
"""

from __future__ import annotations

from slopolicy.core.reasons import Reason
from slopolicy.core.specs import TaskSLO
from slopolicy.core.tasks.records import TaskOutcome, TaskRefusal
from slopolicy.core.tasks.ref import TaskRef

__all__ = (
    "NO_SLO",
    "TaskState",
    "ended_refusal",
    "foreign_refusal",
    "late_tool_refusal",
    "lost_refusal",
    "new_task_refusal",
    "slow_task_refusal",
    "task_deadline",
    "turn_order_refusal",
)

#: The task SLO of a lane without one: the task's own deadline only.
NO_SLO = TaskSLO()


class TaskState:
    """One task under way (the table owns and changes it)."""

    __slots__ = (
        "deadline",
        "id",
        "idle_timeout",
        "lane",
        "live",
        "live_turn",
        "next_turn",
        "started_at",
        "tenant",
        "tool_s",
        "touched",
        "turns",
        "version",
        "waiting",
    )

    def __init__(self, ref: TaskRef, tenant: str, lane: str, slo: TaskSLO, *, now: float) -> None:
        self.id = ref.id
        self.tenant = tenant
        self.lane = lane
        self.started_at = now
        self.deadline = task_deadline(ref, slo, now)
        self.idle_timeout = slo.idle_timeout
        self.live: str | None = None  # the id of the turn queued or running
        self.live_turn = 0
        self.next_turn = 0  # the lowest turn index accepted next
        self.turns = 0
        self.tool_s = 0.0  # seconds of tool calls the host made for it (gate.tool(task=...))
        self.touched = now
        self.version = 0
        self.waiting = False  # its live turn continues it and is still queued


def task_deadline(ref: TaskRef, slo: TaskSLO, start: float) -> float | None:
    """The earlier of ``ref``'s own deadline and the lane's ``slo.deadline``
    after ``start`` (monotonic seconds), or ``None`` when neither is set."""
    lane = None if slo.deadline is None else start + slo.deadline
    if ref.deadline is None or lane is None:
        return ref.deadline if lane is None else lane
    return min(ref.deadline, lane)


def lost_refusal(ref: TaskRef) -> TaskRefusal:
    """The refusal of a turn of a task past its deadline."""
    return TaskRefusal(
        reason=Reason.TASK_DEADLINE_LOST,
        message=f"task {ref.id!r} has passed its deadline; turn {ref.turn} cannot make it complete",
        http_status=408,
    )


def late_tool_refusal(task_id: str) -> TaskRefusal:
    """The refusal of a tool call for a task past its deadline."""
    return TaskRefusal(
        reason=Reason.TASK_DEADLINE_LOST,
        message=f"task {task_id!r} has passed its deadline; its tool calls cannot help it finish",
        http_status=408,
    )


def slow_task_refusal(ref: TaskRef, left: int, turn_time: float) -> TaskRefusal:
    """The refusal of a turn whose task cannot finish its ``left`` turns by its
    deadline at ``turn_time`` seconds a turn."""
    return TaskRefusal(
        reason=Reason.TASK_DEADLINE_LOST,
        message=f"task {ref.id!r} cannot finish its {left} turns left by its deadline "
        f"at {turn_time:.3g} s a turn",
        http_status=408,
    )


def ended_refusal(ref: TaskRef, outcome: TaskOutcome) -> TaskRefusal:
    """The refusal of a turn of a task that has ended (``outcome``)."""
    return TaskRefusal(
        reason=Reason.TASK_OUT_OF_ORDER,
        message=f"task {ref.id!r} has already ended ({outcome.value}); start a new task id",
        http_status=409,
    )


def turn_order_refusal(ref: TaskRef, task: TaskState) -> TaskRefusal:
    """The refusal of a turn out of ``task``'s order: while another of its
    turns is live, or not the next one."""
    if task.live is not None:
        message = (
            f"turn {ref.turn} of task {ref.id!r} arrived while turn {task.live_turn} "
            "is still queued or running"
        )
    else:
        message = f"task {ref.id!r} expects turn {task.next_turn} next, not turn {ref.turn}"
    return TaskRefusal(reason=Reason.TASK_OUT_OF_ORDER, message=message, http_status=409)


def foreign_refusal(task_id: str) -> TaskRefusal:
    """The refusal of a turn or tool call naming another tenant's task."""
    return TaskRefusal(
        reason=Reason.TASK_OUT_OF_ORDER,
        message=f"task {task_id!r} belongs to another tenant",
        http_status=409,
    )


def new_task_refusal(
    ref: TaskRef, lane: str, slo: TaskSLO | None, active: int, waiting: int, *, now: float
) -> TaskRefusal | None:
    """Why the turn ``ref`` may not start a task in ``lane`` at ``now``, with
    ``active`` tasks under way there and ``waiting`` of their turns queued."""
    deadline = task_deadline(ref, slo or NO_SLO, now)
    if deadline is not None and now >= deadline:
        return lost_refusal(ref)
    # Any turn of a task not under way would start one (a host may resume a
    # task the table no longer holds), so the cap holds for all.
    cap = None if slo is None else slo.max_tasks
    if cap is not None and active >= cap:
        return TaskRefusal(
            reason=Reason.TASK_LIMIT,
            message=f"lane {lane!r} has {cap:,} tasks under way; new tasks wait for them",
            http_status=503,
        )
    if slo is not None and slo.hold_new and waiting:
        return TaskRefusal(
            reason=Reason.TASK_LIMIT,
            message=(
                f"{waiting:,} turns of tasks under way wait in lane {lane!r};"
                " new tasks wait for them"
            ),
            http_status=503,
        )
    return None
