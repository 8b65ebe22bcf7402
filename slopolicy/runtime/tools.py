"""Tool calls through the gate: ``async with gate.tool(tenant=..., name=...) as call``.

The host wraps each tool or retriever call it makes between turns; the gate's
:class:`~slopolicy.core.tools.ToolPool` (``gate.policy.tools``, configured by
``PolicyConfig.tools``) decides::

    async with gate.tool(tenant="acme", name="search", timeout_s=5.0) as call:
        hits = await search(query)
    budget_left -= call.time_s         # waited plus ran, seconds

Entering waits for a slot, fairly between tenants, and raises
:class:`~slopolicy.Rejected` when refused (``rate_limited``, ``queue_full``,
``unknown_tool``, ``tenant_table_full``; ``expired`` when the tool's
``max_wait_s`` passes first; :class:`~slopolicy.GateClosed`). The body runs
under the call's timeout (the caller's ``timeout_s`` or the tool's
``timeout_s``, the shorter): past it the body is cancelled and
:class:`~slopolicy.ToolTimeout` raised. The slot is given back exactly once
when the block ends, however it ends (cancelled while waiting, granted and
cancelled before the caller saw it, an error in the body), and handed on to
the next waiter at once, before any await.

Passed ``task=`` (the ``TaskRef`` of the agent's turns, or its id), the call
is part of that task: it is refused ``task_deadline_lost`` (408) once the
task's deadline has passed, it waits and runs at most until that deadline,
and its time (waited plus ran) is counted against the task
(``policy.tasks.budget(ref, now=now).tool_s``), which is not idle meanwhile.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
from anyio.lowlevel import cancel_shielded_checkpoint

from slopolicy.core.checks import shown
from slopolicy.core.reasons import Reason
from slopolicy.core.tasks.ref import MAX_TASK_ID_CHARS, TaskRef
from slopolicy.core.tools.calls import ToolLease, ToolOutcome, ToolRefused, ToolWaiting
from slopolicy.core.tools.limits import check_call
from slopolicy.errors import GateClosed, Rejected, ToolTimeout, UsageError
from slopolicy.runtime.loop import Parked

if TYPE_CHECKING:
    from slopolicy.runtime.gate import Gate

__all__ = ("TaskKey", "ToolCall", "ToolCalls")

#: The task a tool call is part of: its ``TaskRef``, its id, or ``None``.
TaskKey = TaskRef | str | None


def _task_id(task: object) -> str | None:
    if task is None or isinstance(task, TaskRef):
        return None if task is None else task.id
    if isinstance(task, str) and 1 <= len(task) <= MAX_TASK_ID_CHARS:
        return task
    raise UsageError(
        f"task must be a TaskRef, a task id of 1-{MAX_TASK_ID_CHARS} characters or None, "
        f"not {shown(task)}"
    )


def _rejected(refused: ToolRefused) -> Rejected:
    return Rejected(
        refused.reason,
        refused.message,
        http_status=refused.http_status,
        retry_after=refused.retry_after,
    )


class _Waiter:
    """A caller waiting for a slot: ``result`` is set once, to its lease or
    to the refusal to raise (pushed out of a full queue, the gate closed)."""

    __slots__ = ("event", "result")

    def __init__(self, event: Parked) -> None:
        self.event = event
        self.result: ToolLease | Rejected | None = None


class ToolCalls:
    """The gate's side of tool calls: waiting for slots, waking the callers a
    release starts, and recording telemetry. One per gate."""

    __slots__ = ("_gate", "_waiters")

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._waiters: dict[int, _Waiter] = {}

    async def acquire(
        self, tenant: str, name: str, run_limit: float | None, task: str | None = None
    ) -> ToolLease:
        """A slot for ``tenant``'s call of ``name``, to run at most ``run_limit``
        seconds (and the tool's own timeout), as part of ``task`` (an id) if
        given; see the module docstring."""
        gate = self._gate
        if gate._state != "open":
            if gate._state == "new":
                raise UsageError("enter the gate first: async with Gate(...) as gate")
            raise GateClosed()
        pool = gate.policy.tools
        now = gate.clock()
        until = None
        told = None if task is None else gate.policy.tasks.tool_check(task, tenant, now=now)
        if told is not None:
            result: ToolLease | ToolWaiting | ToolRefused = ToolRefused(
                reason=told.reason,
                message=told.message,
                http_status=told.http_status,
                tenant=tenant,
                tool=name,
            )
        else:
            until = self.task_deadline(task)
            result = pool.acquire(tenant, name, now=now, timeout=run_limit)
        telemetry = gate._telemetry
        if isinstance(result, ToolRefused):
            if telemetry is not None:
                spec = pool.limits.spec(name)
                telemetry.tool_refused(result, None if spec is None else spec.name)
            await cancel_shielded_checkpoint()
            raise _rejected(result)
        if isinstance(result, ToolLease):
            try:
                await gate._checkpoint()
            except BaseException:  # cancelled before the caller saw it: give it back
                self.release(result, ToolOutcome.CANCELLED, task)
                raise
            self._started(result)
            return result
        return await self._wait(result, until, task)

    async def _wait(self, result: ToolWaiting, until: float | None, task: str | None) -> ToolLease:
        """Wait for a queued call's slot until its deadline (``max_wait_s``, or
        ``until``, its task's deadline, if sooner)."""
        gate = self._gate
        telemetry = gate._telemetry
        if result.displaced is not None:
            self._wake(result.displaced.id, _rejected(result.displaced.refusal))
            if telemetry is not None:
                telemetry.tool_refused(result.displaced.refusal, result.group)
        waiter = self._waiters[result.id] = _Waiter(gate._park())
        deadline = math.inf if result.deadline is None else result.deadline
        if until is not None:
            deadline = min(deadline, until)
        try:
            with anyio.CancelScope(deadline=deadline):
                await waiter.event.wait()
        except BaseException:
            self._abandon(result.id, waiter, task)
            raise
        got = waiter.result
        if isinstance(got, ToolLease):
            self._started(got)
            return got
        if got is not None:
            raise got
        # Its max_wait passed with no slot: it leaves the queue, refused.
        del self._waiters[result.id]
        gate.policy.tools.withdraw(result.id, now=gate.clock(), expired=True)
        expired = ToolRefused(
            reason=Reason.EXPIRED,
            message=f"tool call waited {gate.clock() - result.queued_at:.3g} s for a slot "
            f"of tool {result.group!r} and passed its max_wait_s or its task's deadline",
            http_status=503,
            tenant=result.tenant,
            tool=result.tool,
        )
        if telemetry is not None:
            telemetry.tool_refused(expired, result.group)
        raise _rejected(expired)

    def task_deadline(self, task: str | None) -> float | None:
        """The deadline of ``task`` (an id) under way: the latest its calls may
        wait or run until (monotonic seconds); ``None`` for none."""
        return None if task is None else self._gate.policy.tasks.tool_deadline(task)

    def _started(self, lease: ToolLease) -> None:
        if self._gate._telemetry is not None:
            self._gate._telemetry.tool_started(lease)

    def _abandon(self, call: int, waiter: _Waiter, task: str | None) -> None:
        """The caller stopped waiting (cancelled): withdraw it, or give back the
        slot it was granted meanwhile."""
        result = waiter.result
        if result is None:
            del self._waiters[call]
            self._gate.policy.tools.withdraw(call, now=self._gate.clock())
        elif isinstance(result, ToolLease):
            self.release(result, ToolOutcome.CANCELLED, task)

    def _wake(self, call: int, result: ToolLease | Rejected) -> None:
        waiter = self._waiters.pop(call, None)
        if waiter is not None:
            waiter.result = result
            waiter.event.set()
        elif isinstance(result, ToolLease):  # pragma: no cover - the pool driven past the gate
            self.release(result, ToolOutcome.CANCELLED)

    def release(self, lease: ToolLease, outcome: ToolOutcome, task: str | None = None) -> None:
        """Give ``lease``'s slot back (once), count its time against ``task``
        (an id) if given, and wake the callers it starts."""
        gate = self._gate
        now = gate.clock()
        started = gate.policy.tools.release(lease.id, now=now, outcome=outcome)
        if task is not None:
            gate.policy.tasks.tool_used(task, now - lease.queued_at, now=now)
        if gate._telemetry is not None:
            gate._telemetry.tool_ended(lease, outcome, now)
        for lease_started in started:
            self._wake(lease_started.id, lease_started)

    def close(self) -> None:
        """The gate closed: every waiting caller gets :class:`~slopolicy.GateClosed`."""
        now = self._gate.clock()
        waiters, self._waiters = self._waiters, {}
        for call, waiter in waiters.items():
            self._gate.policy.tools.withdraw(call, now=now)
            waiter.result = GateClosed("the gate closed before the tool call could start")
            waiter.event.set()


class ToolCall:
    """One tool call: what :meth:`Gate.tool` returns, to ``async with``.

    Attributes:
        tenant: whose call it is.
        name: the tool's name.
        task: the id of the task it is part of, or ``None``.
        lease: the slot it holds (``None`` until entered).
        outcome: how it ended (``None`` until it has).

    Bad arguments raise :class:`~slopolicy.UsageError` here, before anything is held.
    """

    __slots__ = (
        "_calls", "_cut", "_ended_at", "_scope", "_timeout",
        "lease", "name", "outcome", "task", "tenant",
    )  # fmt: skip

    def __init__(
        self,
        calls: ToolCalls,
        tenant: str,
        name: str,
        timeout: float | None,
        task: TaskKey = None,
    ) -> None:
        check_call(tenant, name, timeout)
        self.task = _task_id(task)
        self._calls = calls
        self.tenant = tenant
        self.name = name
        self._timeout = timeout
        self._scope: anyio.CancelScope | None = None
        self._cut = False
        self._ended_at: float | None = None
        self.lease: ToolLease | None = None
        self.outcome: ToolOutcome | None = None

    @property
    def wait_s(self) -> float:
        """Seconds it waited for its slot (0.0 before it has one)."""
        return 0.0 if self.lease is None else self.lease.wait

    @property
    def duration_s(self) -> float:
        """Seconds it has run holding its slot: until now, or until it ended."""
        lease = self.lease
        if lease is None:
            return 0.0
        end = self._ended_at if self._ended_at is not None else self._calls._gate.clock()
        return end - lease.started_at

    @property
    def time_s(self) -> float:
        """Seconds waited plus run: what the call cost the caller's task."""
        return self.wait_s + self.duration_s

    async def __aenter__(self) -> ToolCall:
        if self.lease is not None:
            raise UsageError("a ToolCall can be entered only once")
        lease = self.lease = await self._calls.acquire(
            self.tenant, self.name, self._timeout, self.task
        )
        deadline = math.inf if lease.deadline is None else lease.deadline
        until = self._calls.task_deadline(self.task)
        if until is not None and until < deadline:  # the task's deadline comes first
            self._cut, deadline = True, until
        if deadline < math.inf:
            self._scope = anyio.CancelScope(deadline=deadline)
            self._scope.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        lease = self.lease
        assert lease is not None
        scope = self._scope
        swallowed = False
        if scope is not None:
            self._scope = None
            swallowed = bool(scope.__exit__(exc_type, exc, traceback))
        timed_out = scope is not None and scope.cancelled_caught
        if timed_out and self._cut:  # the task's deadline, not the tool, ended it
            outcome = ToolOutcome.CANCELLED
        elif timed_out:
            outcome = ToolOutcome.TIMEOUT
        elif exc is None:
            outcome = ToolOutcome.OK
        elif isinstance(exc, Exception):
            outcome = ToolOutcome.ERROR
        else:  # cancelled from outside, or the process is going down
            outcome = ToolOutcome.CANCELLED
        self.outcome = outcome
        self._ended_at = self._calls._gate.clock()
        # Before any await: the slot is handed on now.
        self._calls.release(lease, outcome, self.task)
        if timed_out and self._cut:
            raise Rejected(
                Reason.TASK_DEADLINE_LOST,
                f"task {self.task!r} reached its deadline during a call of tool {lease.tool!r}",
                http_status=408,
            ) from None
        if timed_out:
            assert lease.timeout is not None
            raise ToolTimeout(lease.tenant, lease.tool, lease.timeout) from None
        return swallowed
