"""The async gate: waiting in fair lane queues around the sans-IO :class:`Policy`.

::

    async with Gate(config) as gate:
        async with gate.admit(request) as ticket:      # waits its fair turn
            async for chunk in ticket.track(engine.stream(ticket.request)):
                ...

``admit`` submits to the policy. A refusal raises :class:`~slopolicy.Rejected`
at once. An accepted request waits until :meth:`Policy.dispatch` starts it: a
release dispatches and wakes exactly the waiters it started, in the order the
policy chose (no polling). One timer task sleeps until the earliest queue
deadline, ladder evaluation, reclaim check or stalled start's bound
(:meth:`Policy.next_wakeup`), and dispatches then, so an overdue waiter
gets :class:`~slopolicy.Expired`. A running request the policy revokes
(``engine.reclaim``, or a stalled start) gets :class:`~slopolicy.Revoked`
from its tracked stream, or from ``admit`` if it has not resumed yet. A waiter whose request an
arrival pushes out of a full queue (see :meth:`Policy.submit`) gets
:class:`~slopolicy.Rejected` (``queue_full``) at once. A waiter cancelled while
queued is cancelled in the policy; one cancelled just after being started
gives its slot back and the slot is handed on. Each dispatch expires at most
``max_expired`` requests and starts at most the free engine slots, so no call
holds the event loop long. Runs on asyncio and trio; time is the event
loop's clock (what ``anyio.current_time()`` reads, bound once as
:attr:`Gate.clock`). The gate owns its policy: drive it only through the gate.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from functools import partial
from types import TracebackType
from typing import IO

import anyio
from anyio.abc import TaskGroup
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint

from slopolicy.backends.base import QuotaStore
from slopolicy.core.decisions import Decision, Defer, Displaced, Reject
from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.lifecycle import Dispatch
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.policy import Policy
from slopolicy.core.request import Request
from slopolicy.core.specs import PolicySource, PolicySpec
from slopolicy.errors import GateClosed, Rejected, UsageError, WouldBlock
from slopolicy.runtime.arrivals import ArrivalLog, ArrivalRecord
from slopolicy.runtime.end_records import EndRecords
from slopolicy.runtime.gate_statistics import GateStatistics
from slopolicy.runtime.loop import (
    Checkpoint,
    Clock,
    Park,
    bind_checkpoint,
    bind_clock,
    bind_parking,
)
from slopolicy.runtime.quota import LocalQuota, QuotaStrategy
from slopolicy.runtime.store_quota import StoreQuota
from slopolicy.runtime.ticket import Ticket
from slopolicy.runtime.timer import DispatchTimer, SignalSource, poll_signals
from slopolicy.runtime.tools import TaskKey, ToolCall, ToolCalls
from slopolicy.runtime.waiting import GateAdmission, Waiter, WaitingRoom
from slopolicy.telemetry.config import Telemetry, recorder_for

__all__ = ("Gate", "GateStatistics", "SignalSource")


class Gate:
    """Admission, fair waiting and exactly-once release for one engine.

    Args:
        policy: a :class:`Policy`, or a ``PolicyConfig``/``PolicySpec`` to build one.
        signals: polled every ``poll_every`` seconds for engine signals
            (KV usage, queue depth, decode speed) that feed the ladder.
        poll_every: seconds between signal polls.
        arrival_log: an :class:`ArrivalLog`, or a path/text stream to log to
            (see :mod:`slopolicy.runtime.arrivals`).
        on_end: called with each request's :class:`ArrivalRecord` as it ends.
        max_expired: most overdue requests one dispatch expires.
        quota_store: where tenant quotas live instead of the policy's own
            table: a :class:`~slopolicy.backends.redis.RedisQuotaStore` shares
            them between gateway replicas (see ``docs/scale-out.md``).
        telemetry: a :class:`~slopolicy.telemetry.Telemetry` to record metrics
            and spans through; ``True`` (the default) records through the
            global providers, a no-op until the host installs an SDK;
            ``False`` records nothing.
    """

    __slots__ = (
        "_checkpoint",
        "_group",
        "_holders",
        "_log",
        "_max_expired",
        "_park",
        "_poll",
        "_quota",
        "_records",
        "_state",
        "_telemetry",
        "_timer",
        "_tools",
        "_waiters",
        "clock",
        "policy",
    )

    def __init__(
        self,
        policy: Policy | PolicySource | PolicySpec,
        *,
        signals: SignalSource | None = None,
        poll_every: float = 1.0,
        arrival_log: ArrivalLog | str | os.PathLike[str] | IO[str] | None = None,
        on_end: Callable[[ArrivalRecord], None] | None = None,
        max_expired: int = 256,
        quota_store: QuotaStore | None = None,
        telemetry: Telemetry | bool = True,
    ) -> None:
        if not poll_every > 0:
            raise UsageError(f"poll_every must be > 0 seconds, got {poll_every!r}")
        if max_expired < 1:
            raise UsageError(f"max_expired must be >= 1, got {max_expired!r}")
        self.policy = policy if isinstance(policy, Policy) else Policy(policy)
        # The signal poll task, started when entered.
        self._poll = None if signals is None else partial(poll_signals, signals, poll_every)
        if arrival_log is not None and not isinstance(arrival_log, ArrivalLog):
            arrival_log = ArrivalLog(arrival_log)
        self._log = arrival_log
        self._max_expired = max_expired
        self._state = "new"  # -> "open" -> "closed"
        self._group: TaskGroup | None = None
        self._quota: QuotaStrategy = (
            LocalQuota(self.policy) if quota_store is None else StoreQuota(self.policy, quota_store)
        )
        self._telemetry = recorder_for(telemetry, self.policy)
        self._records = EndRecords(
            estimator=self.policy.estimator,
            quota=self._quota,
            telemetry=self._telemetry,
            log=arrival_log,
            on_end=on_end,
        )
        self._waiters = WaitingRoom(self._records)
        # Who holds each started request: its ticket, or its waiter until
        # the caller resumes (weakly: a ticket dropped unreleased still warns).
        self._holders: weakref.WeakValueDictionary[str, Ticket | Waiter] = (
            weakref.WeakValueDictionary()
        )
        self._timer = DispatchTimer(self.policy, self._dispatch, max_expired)
        self._tools = ToolCalls(self)
        #: Monotonic seconds on the gate's event loop (bound when entered).
        self.clock: Clock = anyio.current_time
        # The loop's own parking and checkpoint, bound when entered.
        self._park: Park = anyio.Event
        self._checkpoint: Checkpoint = checkpoint

    # -- lifetime -------------------------------------------------------------

    async def __aenter__(self) -> Gate:
        if self._state != "new":
            raise UsageError("a Gate can be entered only once")
        if self._log is not None:
            await self._log.open()  # an unwritable log fails here, before any traffic
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group, self._state = group, "open"
        self.clock = bind_clock()
        self._park = bind_parking()
        self._checkpoint = bind_checkpoint()
        self._records.epoch = self.clock()
        group.start_soon(self._timer.run, self.clock, name="slopolicy gate timer")
        if self._poll is not None:
            group.start_soon(self._poll, self.observe, name="slopolicy signal poll")
        if self._log is not None:
            group.start_soon(self._log.run, name="slopolicy arrival log")
        await group.start(self._quota.run, name="slopolicy quota leases")
        if self._telemetry is not None:
            await group.start(self._telemetry.watch, name="slopolicy telemetry")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._group is not None
        self._state = "closed"
        self._waiters.close(self.policy, self.clock())
        self._tools.close()
        self._group.cancel_scope.cancel()
        try:
            if isinstance(exc, Exception):
                # The host's own error: stop the background tasks as on a clean
                # exit and let it propagate as raised, not in an exception group.
                await self._group.__aexit__(None, None, None)
                return None
            return await self._group.__aexit__(exc_type, exc, traceback)
        finally:
            if self._log is not None:
                with anyio.CancelScope(shield=True):
                    await self._log.aclose()

    # -- admission ------------------------------------------------------------

    def admit(self, request: Request) -> GateAdmission:
        """Wait for ``request``'s turn: ``async with gate.admit(r) as ticket``, or
        ``ticket = await gate.admit(r)`` (then release it with ``with ticket``).

        Raises :class:`~slopolicy.Rejected` when refused (``queue_full`` also
        while it waits, if another tenant's arrival pushes it out of a full
        queue), :class:`~slopolicy.Expired` when its deadline passes while
        queued, :class:`~slopolicy.GateClosed` when the gate closes first.
        Cancelling the caller while it waits withdraws the request; nothing is
        left queued or held.
        """
        return GateAdmission(self, request)

    def admit_nowait(self, request: Request) -> Ticket:
        """Admit ``request`` only if it can start at once; else raise
        :class:`~slopolicy.WouldBlock` (nothing left queued; the policy counts
        the attempt as cancelled) or :class:`~slopolicy.Rejected`. Not with a
        ``quota_store``: taking quota there is a round trip."""
        if self._quota.waits:
            raise UsageError("admit_nowait cannot wait for a quota store; await admit()")
        waiter = self._submit(request)
        if isinstance(waiter, Ticket):
            return waiter
        if isinstance(waiter, Rejected):
            raise waiter
        if waiter.result is None:
            self._waiters.cancel(waiter, self.policy, self.clock())
            raise WouldBlock(waiter.decision)
        return waiter.ticket(self)

    def tool(
        self, *, tenant: str, name: str, timeout_s: float | None = None, task: TaskKey = None
    ) -> ToolCall:
        """A tool or retriever call of ``tenant``'s, between turns:
        ``async with gate.tool(tenant=t, name="search") as call: ...``.

        Waits fairly for a slot under ``policy.tools``'s limits, runs the body
        under ``timeout_s`` (seconds; the tool's own if shorter) and gives the
        slot back exactly once; ``task`` (a ``TaskRef`` or task id) counts the
        call's time against that task; see :mod:`slopolicy.runtime.tools`.
        """
        return ToolCall(self._tools, tenant, name, timeout_s, task)

    async def _admit(self, request: Request, admission: GateAdmission | None = None) -> Ticket:
        # The request arrives (and may start) when the caller asks, not one
        # event-loop pass later, so a burst of arrivals is submitted, and
        # paced, as it comes. The checkpoint follows: a cancel delivered there
        # gives back a start; a refusal or an expiry, already recorded, is
        # raised as it is (the cancel reaches the caller's next checkpoint).
        waiter = await self._arrive(request)
        if isinstance(waiter, Ticket):
            ticket = waiter
            try:
                await self._checkpoint()
            except BaseException:  # cancelled before the caller saw it: give it back
                ticket.cancel()
                raise
        elif isinstance(waiter, Rejected):
            await cancel_shielded_checkpoint()
            raise waiter
        else:
            if waiter.result is None:
                waiter.event = event = self._park()
                self._timer.watch()
                try:
                    await event.wait()
                except BaseException:
                    self._abandon(waiter)
                    raise
            else:  # expired on arrival: nothing is held
                await cancel_shielded_checkpoint()
            ticket = waiter.ticket(self)
        if admission is not None:
            admission._ticket = ticket
        return ticket

    def _closed(self) -> GateClosed | None:
        """``GateClosed`` to refuse an arrival with once the gate has closed."""
        if self._state == "open":
            return None
        if self._state == "new":
            raise UsageError("enter the gate first: async with Gate(...) as gate")
        return GateClosed()

    def _is_open(self) -> bool:
        return self._state == "open"

    def _submit(self, request: Request) -> Ticket | Waiter | Rejected:
        """Submit without waiting (:meth:`admit_nowait`): see :meth:`_queued`."""
        closed = self._closed()
        if closed is not None:
            return closed
        now = self.clock()
        return self._queued(request, self._quota.admit_now(request, now), now)

    async def _arrive(self, request: Request) -> Ticket | Waiter | Rejected:
        """Submit through the quota strategy (a round trip for a store): see :meth:`_queued`."""
        closed = self._closed()
        if closed is not None:
            return closed
        try:
            decision = await self._quota.admit(request, self.clock, self._is_open)
        except GateClosed as refused:  # closed during the strategy's round trip
            return refused
        return self._queued(request, decision, self.clock())

    def _queued(
        self, request: Request, decision: Decision, now: float
    ) -> Ticket | Waiter | Rejected:
        """Act on the strategy's decision: a ticket if it starts at once, else
        its waiter (queued, or already expired), or the refusal to raise."""
        policy = self.policy
        if isinstance(decision, (Defer, Reject)):
            return self._records.refused(request, decision, now)
        if decision.displaced is not None:  # it took a full queue's room from another
            self._waiters.end(decision.displaced)
        if self._telemetry is not None:
            self._telemetry.submitted(request, decision, now)
        # With the engine full, or the dispatch rate holding starts back, no
        # dispatch can start anything; expiry, the ladder and paced starts are
        # the timer's, so skip the dispatch on the contended path.
        if policy.can_start(now=now):
            result = self._dispatch(now, request.id)
            for started in result.started:
                if started.id == request.id:  # the uncontended path: no waiting
                    return Ticket(self, started, decision, request)
            for finished in result.expired:
                if finished.id == request.id:  # its own deadline had passed
                    waiter = Waiter(request, decision)
                    waiter.result = finished
                    self._records.ended(finished, request)
                    return waiter
        return self._waiters.add(request, decision)

    def _abandon(self, waiter: Waiter) -> None:
        """The caller stopped waiting (cancelled): withdraw or give back."""
        result = waiter.result
        if isinstance(result, Finished | Displaced):
            return  # expired, displaced or closed: nothing is held
        now = self.clock()
        self._waiters.cancel(waiter, self.policy, now)
        self._holders.pop(waiter.request.id, None)
        if result is not None and self._waiters:
            self._dispatch(now)

    # -- dispatch ------------------------------------------------------------

    def _dispatch(self, now: float, own: str | None = None) -> Dispatch:
        """One bounded dispatch: wake the waiters it started or expired, in the
        policy's order (``own``: a request being submitted, which has none)."""
        result = self.policy.dispatch(now=now, max_expired=self._max_expired)
        if self._telemetry is not None:
            self._telemetry.dispatched(result, now)
        waiters = self._waiters
        for finished in result.expired:
            waiters.end(finished)
        holders = self._holders
        for started in result.started:
            waiter = waiters.start(started)
            if waiter is not None:
                holders[started.id] = waiter
            elif started.id != own:  # pragma: no cover
                self.policy.cancel(started.id, now=now)  # the policy was driven past the gate
        for finished in result.revoked:
            holder = holders.pop(finished.id, None)
            if holder is not None:
                holder._revoke(finished)  # a ticket records its own end
                if isinstance(holder, Waiter):  # started, its caller not yet resumed
                    self._records.ended(finished, holder.request)
        if len(result.expired) >= self._max_expired:
            self._timer.wake()  # more may be overdue: the timer goes on after a checkpoint
        return result

    def _release(self, ticket: Ticket, outcome: Outcome, output_tokens: int | None) -> Finished:
        """End a started request (called by its ticket, once) and hand its slot on."""
        now = self.clock()
        finished = self.policy.finish(
            ticket.id, now=now, outcome=outcome, output_tokens=output_tokens
        )
        self._holders.pop(ticket.id, None)
        self._records.ended(finished, ticket._origin, ticket._error)
        if self._waiters:
            self._hand_on(now)
        return finished

    def _prefilled(self, now: float) -> None:
        """A started request's first token came: the prefill budget may have
        room now."""
        if self._waiters:
            self._hand_on(now)

    def _hand_on(self, now: float) -> None:
        """A seat, or the prefill budget, may have opened at ``now``: start what can,
        else tell the timer (a paced start's settled cost may have moved it)."""
        if self.policy.can_start(now=now):
            self._dispatch(now)
        else:
            self._timer.watch()

    def observe(self, signals: EngineSignals) -> None:
        """Take the engine's latest signals now (KV usage may free capacity,
        and preemptions bring a stalled start's revocation forward)."""
        now = self.clock()
        self.policy.observe(signals, now=now)
        if self._state != "open":
            return
        if self._waiters:
            self._dispatch(now)
        else:
            self._timer.watch()

    def statistics(self) -> GateStatistics:
        """A frozen snapshot of the gate and its policy."""
        is_open = self._state == "open"
        policy = self.policy.statistics(now=self.clock() if is_open else None)
        return GateStatistics(len(self._waiters), is_open, policy)
