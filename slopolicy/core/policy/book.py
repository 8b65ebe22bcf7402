"""The live requests of one :class:`~slopolicy.core.policy.Policy`, and how they end.

The book is what the submit path (:mod:`~slopolicy.core.policy.intake`), the
dispatcher (:mod:`~slopolicy.core.policy.dispatcher`) and the running path
(:mod:`~slopolicy.core.policy.serving`) share: the entry of every live request, the
latest ``now`` seen, the counts of outcomes, and the end of a request that
never started (cancelled, expired, or pushed out of a full queue).
"""

from __future__ import annotations

from collections.abc import Sequence

from slopolicy.core.checks import check_now
from slopolicy.core.decisions import Decision
from slopolicy.core.health.health import Health
from slopolicy.core.lifecycle import Entry, Phase
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.quota.tenants import TenantQuotas
from slopolicy.core.tasks.records import TaskEnded
from slopolicy.core.tasks.table import TaskTable
from slopolicy.core.tasks.trackers import TaskTrackers
from slopolicy.errors import UsageError

__all__ = ("Book",)


class Book:
    """Live entries, the policy's clock and outcome counts, shared by its paths.

    Attributes:
        entries: every live request's entry (queued or running), by id.
        prepared: ids :meth:`Policy.prepare` accepted that await their outcome.
        now: the latest ``now`` seen (monotonic seconds; ``-inf`` before any).
        running: requests dispatched and not yet finished.
        submitted: submits so far.
        outcomes: requests ended so far, per outcome.
        quota_delegated: whether tenant quotas are taken outside the policy.
        task_trackers: the per-lane and per-tenant task SLO trackers.
    """

    __slots__ = (
        "_first_lane",
        "_health",
        "_quotas",
        "_tasks",
        "entries",
        "now",
        "outcomes",
        "prepared",
        "quota_delegated",
        "running",
        "submitted",
        "task_trackers",
    )

    def __init__(
        self,
        *,
        health: Health,
        quotas: TenantQuotas,
        tasks: TaskTable,
        task_trackers: TaskTrackers,
        first_lane: str,
    ) -> None:
        self._health = health
        self._quotas = quotas
        self._tasks = tasks
        self._first_lane = first_lane
        self.task_trackers = task_trackers
        self.entries: dict[str, Entry] = {}
        self.prepared: set[str] = set()
        self.now = float("-inf")
        self.running = 0
        self.submitted = 0
        self.outcomes = dict.fromkeys(Outcome, 0)
        self.quota_delegated = False

    def advance(self, *, now: float) -> float:
        """Check ``now`` and return the latest ``now`` seen, ``now`` included."""
        # The one check of ``now`` for every call: the components below are
        # passed the latest ``now`` seen, through their trusted (checked-input)
        # methods, so they need not check it again.
        check_now(now)
        if now > self.now:
            self.now = now
        return self.now

    def running_entry(self, request_id: str) -> Entry:
        """The entry of a started request, or :class:`UsageError`."""
        entry = self.entries.get(request_id)
        if entry is None or entry.phase is not Phase.RUNNING:
            state = "not live" if entry is None else "still queued"
            raise UsageError(f"request {request_id!r} is {state}")
        return entry

    def rejected(self, decision: Decision, tenant: str, *, now: float) -> None:
        """Count a refusal, and tell the SLO trackers."""
        self.outcomes[Outcome.REJECTED] += 1
        self._health.record_rejected(decision.lane or self._first_lane, tenant, now=now)

    def settle(self, entry: Entry, cost: float, *, now: float) -> None:
        """Settle and release the entry's quota, when the policy holds it."""
        if not self.quota_delegated:  # its own live grant, checked values
            self._quotas._close_held(entry.tenant, entry.lane, entry.cost, cost, now)

    def end_queued(self, entry: Entry, outcome: Outcome, *, now: float) -> Finished:
        """End ``entry``, already out of its lane queue, before it started."""
        # Nothing was served: the whole estimated cost goes back to the tenant.
        self.settle(entry, 0.0, now=now)
        del self.entries[entry.id]
        self.outcomes[outcome] += 1
        self.turn_ended(entry, outcome, now=now)
        finished = entry.finished(outcome, now=now, cost=0.0)
        if outcome is Outcome.REJECTED:  # displaced: a refusal to the SLO trackers
            self._health.record_rejected(entry.lane, entry.tenant, now=now)
        else:
            self._health.record(finished, now=now)
        return finished

    def turn_ended(self, entry: Entry, outcome: Outcome, *, now: float) -> None:
        """Tell the task table that ``entry``'s turn of its task ended."""
        task = entry.request.task
        if task is not None:
            self.tasks_ended([self._tasks.turn_ended(task, entry.id, outcome, now=now)])

    def tasks_ended(self, ended: Sequence[TaskEnded | None]) -> None:
        """Record the tasks that ended (``None``: a call that ended none)."""
        for task in ended:
            if task is not None:
                self.task_trackers.record(task)
