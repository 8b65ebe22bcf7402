"""The task table: every agent task under way, its turns, and how it ended.

Sans-IO: every method takes ``now`` (monotonic seconds, checked by the
caller, the :class:`~slopolicy.Policy`). A task starts when its first turn is
admitted and ends exactly once, in one :class:`TaskOutcome`:

* ``completed``: its last turn (``TaskRef.last``) completed by the deadline;
* ``failed``: a turn failed or expired, or the deadline passed (a turn still
  running at the deadline finishes, but the task has failed);
* ``abandoned``: no turn for the lane's ``idle_timeout`` (the host gave up,
  or the table made room, see below).

Turns run in order: a turn is accepted only when none of its task's turns is
live and it is the turn after the last one completed, so no turn starts
before an earlier one and none is skipped (a turn refused or cancelled may be
sent again). A turn > 0 of a task the table does not hold starts it there
(the task began on another replica, or before a restart).

Bounded memory: at most ``max_tasks`` tasks are kept (the least recently
active idle one is abandoned to make room) and ``max_ended`` ended ones are
remembered, to tell a late turn its task is over.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict

from slopolicy.core.checks import MAX_NOW, is_number, shown
from slopolicy.core.outcome import Outcome
from slopolicy.core.specs import TaskSLO
from slopolicy.core.tasks.records import (
    TaskBudget,
    TaskEnded,
    TaskOutcome,
    TaskRefusal,
    TaskStatistics,
)
from slopolicy.core.tasks.ref import TaskRef
from slopolicy.core.tasks.state import (
    NO_SLO,
    TaskState,
    ended_refusal,
    foreign_refusal,
    late_tool_refusal,
    lost_refusal,
    new_task_refusal,
    slow_task_refusal,
    task_deadline,
    turn_order_refusal,
)
from slopolicy.errors import UsageError

__all__ = ("TaskTable",)

# The weight of the latest gap between turns in the lane's moving average.
_GAP_WEIGHT = 0.05


class TaskTable:
    """Agent tasks under way, keyed by task id (see the module docstring).

    Args:
        max_tasks: tasks kept at once (>= 1).
        max_ended: ended task ids remembered (>= 0).
    """

    __slots__ = (
        "_active",
        "_counts",
        "_due",
        "_ended",
        "_gaps",
        "_max_ended",
        "_max_tasks",
        "_seq",
        "_tasks",
        "_waiting",
    )

    def __init__(self, *, max_tasks: int = 100_000, max_ended: int = 100_000) -> None:
        for name, value, least in (("max_tasks", max_tasks, 1), ("max_ended", max_ended, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UsageError(f"{name} must be an int >= {least}, got {value!r}")
        self._max_tasks = max_tasks
        self._max_ended = max_ended
        self._tasks: OrderedDict[str, TaskState] = OrderedDict()  # least recently active first
        self._ended: OrderedDict[str, tuple[TaskOutcome, float | None]] = OrderedDict()
        self._active: dict[str, int] = {}  # tasks under way per lane
        self._counts = dict.fromkeys(TaskOutcome, 0)
        self._due: list[tuple[float, int, str, int]] = []  # idle tasks' timeouts
        self._seq = itertools.count()
        self._gaps: dict[str, float] = {}  # mean seconds between turns, per lane
        self._waiting: dict[str, int] = {}  # queued turns of tasks under way, per lane

    # -- reads ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def active(self, lane: str) -> int:
        """Tasks under way in ``lane``."""
        return self._active.get(lane, 0)

    def waiting(self, lane: str) -> int:
        """Queued turns (not yet started) of the tasks under way in ``lane``
        (a task's lane is its first turn's): what the running tasks still
        need that the engine has not taken yet."""
        return self._waiting.get(lane, 0)

    def tool_time(self, lane: str) -> float | None:
        """The mean seconds between a turn's end and its task's next turn in
        ``lane`` (the host's tool calls), a moving average; ``None`` before any."""
        return self._gaps.get(lane)

    def deadline(self, ref: TaskRef, slo: TaskSLO | None, *, now: float) -> float | None:
        """The deadline of ``ref``'s task (monotonic seconds): its own if it is
        under way, else the one it would get if admitted at ``now``."""
        task = self._tasks.get(ref.id)
        if task is not None:
            return task.deadline
        return task_deadline(ref, slo or NO_SLO, now)

    def budget(self, ref: TaskRef, *, now: float) -> TaskBudget:
        """What is left of ``ref``'s task's time at ``now``, for this turn, and
        the tool time it has spent (:meth:`tool_used`)."""
        task = self._tasks.get(ref.id)
        deadline = None if task is None else task.deadline
        remaining = None if deadline is None else max(0.0, deadline - now)
        left = ref.turns_left
        share = None if remaining is None or left is None else remaining / left
        return TaskBudget(deadline, remaining, left, share, 0.0 if task is None else task.tool_s)

    # -- tool calls between turns -------------------------------------------------

    def tool_check(self, task_id: str, tenant: str, *, now: float) -> TaskRefusal | None:
        """Why ``tenant``'s tool call for task ``task_id`` may not start at
        ``now``, or ``None``. A read. A task past its deadline refuses it
        (``task_deadline_lost``, 408: it cannot finish), as does another
        tenant's task (``task_out_of_order``, 409); a task the table does not
        hold (ended, or not begun here) refuses nothing."""
        task = self._tasks.get(task_id)
        if task is None:
            return None
        if task.tenant != tenant:
            return foreign_refusal(task_id)
        if task.deadline is not None and now >= task.deadline:
            return late_tool_refusal(task_id)
        return None

    def tool_deadline(self, task_id: str) -> float | None:
        """The deadline of task ``task_id`` under way (monotonic seconds): the
        latest a tool call for it should run or wait until; ``None`` if it has
        none or the table does not hold it."""
        task = self._tasks.get(task_id)
        return None if task is None else task.deadline

    def tool_used(self, task_id: str, seconds: float, *, now: float) -> None:
        """Count ``seconds`` (>= 0) of a tool call that ended at ``now`` against
        task ``task_id`` (its :meth:`budget`'s ``tool_s``). A task between turns
        is not idle while it calls tools: its idle timer restarts at ``now``.
        A task the table does not hold changes nothing."""
        if not (is_number(seconds) and 0.0 <= seconds <= MAX_NOW):
            raise UsageError(f"seconds must be a finite number >= 0, not {shown(seconds)}")
        task = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            return
        task.tool_s += seconds
        if task.live is None:
            self._idle_from(task, now)

    def check(
        self,
        ref: TaskRef,
        tenant: str,
        lane: str,
        slo: TaskSLO | None,
        *,
        now: float,
        turn_time: float | None = None,
    ) -> TaskRefusal | None:
        """Why the turn ``ref`` may not be admitted at ``now``, or ``None``. A read.

        ``turn_time`` is what one turn takes at the lane's current pace
        (seconds): a task with a known deadline and ``expected_turns`` whose
        turns left, with the lane's mean tool time between turns
        (:meth:`tool_time`), cannot all fit before the deadline is lost
        already, and told so now rather than served to fail."""
        refusal = self._check(ref, tenant, lane, slo, now)
        if refusal is not None or turn_time is None:
            return refusal
        left, deadline = ref.turns_left, self.deadline(ref, slo, now=now)
        gaps = 0.0 if left is None else (left - 1) * self._gaps.get(lane, 0.0)
        if left is not None and deadline is not None and now + left * turn_time + gaps > deadline:
            return slow_task_refusal(ref, left, turn_time)
        return None

    def _check(
        self, ref: TaskRef, tenant: str, lane: str, slo: TaskSLO | None, now: float
    ) -> TaskRefusal | None:
        task = self._tasks.get(ref.id)
        if task is None:
            ended = self._ended.get(ref.id)
            if ended is not None:
                outcome, deadline = ended
                if deadline is not None and now >= deadline:
                    return lost_refusal(ref)
                return ended_refusal(ref, outcome)
            return new_task_refusal(ref, lane, slo, self.active(lane), self.waiting(lane), now=now)
        if task.tenant != tenant:
            return foreign_refusal(ref.id)
        if task.deadline is not None and now >= task.deadline:
            return lost_refusal(ref)
        if task.live is not None or ref.turn != task.next_turn:
            # Every turn, in order: none while another is live, none skipped, none again.
            return turn_order_refusal(ref, task)
        return None

    def statistics(self) -> TaskStatistics:
        """A frozen snapshot of the counts."""
        counts = self._counts
        active = len(self._tasks)
        ended = sum(counts.values())
        return TaskStatistics(
            active,
            active + ended,
            counts[TaskOutcome.COMPLETED],
            counts[TaskOutcome.FAILED],
            counts[TaskOutcome.ABANDONED],
        )

    # -- changes ----------------------------------------------------------------

    def admitted(
        self,
        ref: TaskRef,
        request_id: str,
        tenant: str,
        lane: str,
        slo: TaskSLO | None,
        *,
        now: float,
    ) -> list[TaskEnded]:
        """The turn ``ref`` (request ``request_id``) was admitted, after
        :meth:`check` found nothing against it; returns the tasks abandoned to
        make room for a new one."""
        made_room: list[TaskEnded] = []
        task = self._tasks.get(ref.id)
        if task is None:
            while len(self._tasks) >= self._max_tasks:
                made_room.append(self._evict(now))
            task = TaskState(ref, tenant, lane, slo or NO_SLO, now=now)
            task.next_turn = ref.turn  # a task resumed here (another replica began it)
            self._tasks[ref.id] = task
            self._active[lane] = self._active.get(lane, 0) + 1
        else:
            self._tasks.move_to_end(ref.id)
            task.waiting = True
            # Counted in the task's lane (its first turn's), where it is taken
            # back: a later turn may route to another lane as its context grows.
            self._waiting[task.lane] = self._waiting.get(task.lane, 0) + 1
            if ref.turn == task.next_turn and task.turns:  # the gap after a completed turn
                gap = now - task.touched
                mean = self._gaps.get(lane)
                self._gaps[lane] = gap if mean is None else mean + _GAP_WEIGHT * (gap - mean)
        task.live, task.live_turn = request_id, ref.turn
        task.touched = now
        task.version += 1  # its idle timer, if any, is void
        return made_room

    def started(self, ref: TaskRef, request_id: str) -> None:
        """The turn ``ref`` (request ``request_id``) left the queue for the engine."""
        task = self._tasks.get(ref.id)
        if task is not None and task.live == request_id:
            self._unwait(task)

    def _unwait(self, task: TaskState) -> None:
        if task.waiting:
            task.waiting = False
            left = self._waiting[task.lane] - 1
            if left:
                self._waiting[task.lane] = left
            else:
                del self._waiting[task.lane]

    def turn_ended(
        self, ref: TaskRef, request_id: str, outcome: Outcome, *, now: float
    ) -> TaskEnded | None:
        """The turn ``ref`` (request ``request_id``) ended in ``outcome``; the
        task's end, if that ended it. A turn the table does not hold (its task
        ended or was evicted meanwhile) changes nothing."""
        task = self._tasks.get(ref.id)
        if task is None or task.live != request_id:
            return None
        self._unwait(task)
        task.live = None
        task.touched = now
        if outcome is Outcome.COMPLETED:
            task.turns += 1
            task.next_turn = ref.turn + 1
            if task.deadline is not None and now > task.deadline:
                return self._end(task, TaskOutcome.FAILED, "deadline", now)
            if ref.last:
                return self._end(task, TaskOutcome.COMPLETED, "completed", now)
        elif outcome is Outcome.FAILED or outcome is Outcome.EXPIRED:
            return self._end(task, TaskOutcome.FAILED, outcome.value, now)
        # Completed but not last, cancelled or pushed out: the next turn, or
        # this one again, may come; until then the idle timer runs.
        self._idle_from(task, now)
        return None

    def _idle_from(self, task: TaskState, now: float) -> None:
        """Start ``task``'s idle timer at ``now`` (due at its deadline, if sooner)."""
        self._tasks.move_to_end(task.id)
        task.version += 1
        due = now + task.idle_timeout
        if task.deadline is not None and task.deadline < due:
            due = task.deadline
        heapq.heappush(self._due, (due, next(self._seq), task.id, task.version))

    def lost(self, ref: TaskRef, *, now: float) -> TaskEnded | None:
        """A turn of ``ref``'s task was refused because its deadline passed:
        the task, if still under way (with no live turn), has failed."""
        task = self._tasks.get(ref.id)
        if task is None or task.live is not None:
            return None
        return self._end(task, TaskOutcome.FAILED, "deadline", now)

    def sweep(self, *, now: float) -> list[TaskEnded]:
        """End idle tasks whose idle timeout or deadline has passed by ``now``
        (``abandoned`` or ``failed``); amortized ``O(log n)`` per task."""
        ended: list[TaskEnded] = []
        due = self._due
        while due and due[0][0] <= now:
            _, _, task_id, version = heapq.heappop(due)
            task = self._tasks.get(task_id)
            if task is None or task.version != version or task.live is not None:
                continue  # it moved on since the timer was set
            if task.deadline is not None and now >= task.deadline:
                ended.append(self._end(task, TaskOutcome.FAILED, "deadline", now))
            else:
                ended.append(self._end(task, TaskOutcome.ABANDONED, "idle", now))
        if len(due) > 2 * len(self._tasks) + 64:  # mostly void timers: drop them
            self._due = [item for item in due if self._current(item)]
            heapq.heapify(self._due)
        return ended

    def next_due(self) -> float | None:
        """The earliest idle timer (monotonic seconds), or ``None``."""
        return self._due[0][0] if self._due else None

    def _current(self, item: tuple[float, int, str, int]) -> bool:
        task = self._tasks.get(item[2])
        return task is not None and task.version == item[3]

    def _evict(self, now: float) -> TaskEnded:
        # The least recently active task, preferring one with no live turn.
        victim = next((t for t in self._tasks.values() if t.live is None), None)
        if victim is None:
            victim = next(iter(self._tasks.values()))
        return self._end(victim, TaskOutcome.ABANDONED, "evicted", now)

    def _end(self, task: TaskState, outcome: TaskOutcome, why: str, now: float) -> TaskEnded:
        self._unwait(task)
        del self._tasks[task.id]
        left = self._active[task.lane] - 1
        if left:
            self._active[task.lane] = left
        else:
            del self._active[task.lane]
        self._counts[outcome] += 1
        if self._max_ended:
            ended = self._ended
            ended[task.id] = (outcome, task.deadline)
            ended.move_to_end(task.id)
            if len(ended) > self._max_ended:
                ended.popitem(last=False)
        return TaskEnded(
            id=task.id,
            tenant=task.tenant,
            lane=task.lane,
            outcome=outcome,
            why=why,
            started_at=task.started_at,
            ended_at=now,
            turns=task.turns,
        )
