"""A request's place in an agent task: which task, which turn, and the task's own limits.

A leaf of the core (it imports only the shared checks), so the request can
carry it without importing the task table.
"""

from __future__ import annotations

from dataclasses import dataclass

from slopolicy.core.checks import count_problem, time_problem
from slopolicy.errors import InvalidRequest

__all__ = ("MAX_TASK_ID_CHARS", "TaskRef")

#: The longest task id taken, in characters (ids are keys, never metric attributes).
MAX_TASK_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class TaskRef:
    """The task a request is one turn of.

    An agent calls the model many times, with tool calls in between; the task
    succeeds only when every turn does, in time. Turns of one task are sent one
    after another: turn ``k + 1`` once turn ``k`` has ended.

    Attributes:
        id: the task's id, unique per task (1-256 characters).
        turn: the turn's index, 0 for the task's first turn.
        deadline: when the whole task must be done, in monotonic seconds on the
            policy's clock (``None``: the lane's task deadline only).
        expected_turns: how many turns the task takes, if known (>= 1, more
            than ``turn``): the task completes when its last turn completes.
        final: this is the task's last turn (for hosts that learn it as they
            go); a completed final turn completes the task.

    Bad values raise :class:`~slopolicy.InvalidRequest` naming ``task.<field>``.
    """

    id: str
    turn: int = 0
    deadline: float | None = None
    expected_turns: int | None = None
    final: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidRequest("task.id", "expected a non-empty string")
        if len(self.id) > MAX_TASK_ID_CHARS:
            raise InvalidRequest("task.id", f"longer than {MAX_TASK_ID_CHARS} characters")
        problem = count_problem(self.turn, 0)
        if problem is not None:
            raise InvalidRequest("task.turn", f"must be {problem}")
        if self.deadline is not None:
            problem = time_problem(self.deadline)
            if problem is not None:
                raise InvalidRequest("task.deadline", f"must be {problem}")
        if self.expected_turns is not None:
            problem = count_problem(self.expected_turns, self.turn + 1)
            if problem is not None:
                raise InvalidRequest("task.expected_turns", f"must be {problem}")
        if not isinstance(self.final, bool):
            raise InvalidRequest("task.final", "expected a bool")

    @property
    def first(self) -> bool:
        """Whether this is the task's first turn."""
        return self.turn == 0

    @property
    def last(self) -> bool:
        """Whether this turn, once completed, completes the task."""
        return self.final or (
            self.expected_turns is not None and self.turn + 1 == self.expected_turns
        )

    @property
    def turns_left(self) -> int | None:
        """Turns still to come, this one included, when ``expected_turns`` is known."""
        if self.final:
            return 1
        return None if self.expected_turns is None else self.expected_turns - self.turn
