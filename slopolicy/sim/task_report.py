"""Agent task outcomes of one run: task completion rate and task e2e, per tenant.

A task **completes** iff every one of its turns completed, none degraded
(cut short or switched to another model, as for request attainment), and
its last turn finished by the task's deadline. Task e2e runs from its first
turn's arrival to its last turn's finish. Turns never sent (the task broke
before them) count against their task, not as requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.sim.records import RequestRecord, SimOutcome
from slopolicy.sim.reports import quantile
from slopolicy.sim.workload import SimRequest, Workload

__all__ = ("TaskSummary", "task_summaries")


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """Tasks of one tenant (``tenant`` ``None``: every tenant) under one policy;
    e2e in seconds, over completed tasks."""

    tenant: str | None
    tasks: int
    completed: int
    e2e_p50_s: float | None
    e2e_p95_s: float | None

    @property
    def completion_rate(self) -> float | None:
        """Completed tasks over tasks offered, or ``None`` without tasks."""
        return self.completed / self.tasks if self.tasks else None


def task_summaries(workload: Workload, records: Sequence[RequestRecord]) -> tuple[TaskSummary, ...]:
    """Every tenant's tasks together first, then each tenant's, in order of first arrival."""
    by_id = {record.request.id: record for record in records}
    tasks: dict[str, list[SimRequest]] = {}
    for request in workload.requests:
        if request.task is not None:
            tasks.setdefault(request.task, []).append(request)
    outcomes: dict[str | None, list[float | None]] = {None: []}
    for turns in tasks.values():
        e2e = _task_e2e(turns, by_id)
        outcomes[None].append(e2e)
        outcomes.setdefault(turns[0].tenant, []).append(e2e)
    return tuple(_summary(tenant, found) for tenant, found in outcomes.items())


def _task_e2e(turns: list[SimRequest], by_id: dict[str, RequestRecord]) -> float | None:
    """The task's e2e seconds if it completed, else ``None``."""
    first = min(turns, key=lambda t: t.turn)
    last_finish = first.arrival
    for turn in turns:
        record = by_id.get(turn.id)
        if record is None or record.outcome is not SimOutcome.COMPLETED or record.degraded:
            return None
        assert record.finished_at is not None
        last_finish = max(last_finish, record.finished_at)
    deadline = first.task_deadline
    if deadline is not None and last_finish > deadline:
        return None
    return last_finish - first.arrival


def _summary(tenant: str | None, found: list[float | None]) -> TaskSummary:
    done = sorted(e for e in found if e is not None)
    return TaskSummary(tenant, len(found), len(done), quantile(done, 0.5), quantile(done, 0.95))
