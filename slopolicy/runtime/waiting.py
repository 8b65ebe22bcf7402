"""Waiting for a turn: the record of a queued caller, the room of them all, and
what ``Gate.admit`` returns."""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from slopolicy.core.decisions import Admit, Demote, Displaced
from slopolicy.core.lifecycle import Started
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.policy import Policy
from slopolicy.core.request import Request
from slopolicy.errors import Expired, GateClosed, Rejected, Revoked
from slopolicy.runtime.end_records import EndRecords
from slopolicy.runtime.loop import Parked
from slopolicy.runtime.ticket import Ticket

if TYPE_CHECKING:
    from slopolicy.runtime.gate import Gate

__all__ = ("GateAdmission", "Waiter", "WaitingRoom")


class Waiter:
    """A queued request's caller. ``result`` is set once: the ``Started`` that
    lets it run, the ``Finished`` that ended it (expired, or the gate closed),
    or the ``Displaced`` record of its refusal (pushed out of a full queue)."""

    __slots__ = ("__weakref__", "decision", "event", "request", "result")

    def __init__(self, request: Request, decision: Admit | Demote) -> None:
        self.request = request
        self.decision = decision
        self.event: Parked | None = None  # made only if the caller has to wait
        self.result: Started | Finished | Displaced | None = None

    def wake(self, result: Started | Finished | Displaced) -> None:
        """Set the waiter's one ``result`` and wake its caller, if it waits."""
        self.result = result
        if self.event is not None:
            self.event.set()

    def _revoke(self, finished: Finished) -> None:
        """The policy revoked the request it started before its caller
        resumed: the caller gets :class:`~slopolicy.Revoked` instead of a ticket."""
        self.result = finished

    def ticket(self, gate: Gate) -> Ticket:
        """The ticket of a started waiter; else the error its ``result`` means."""
        result = self.result
        if isinstance(result, Started):
            return Ticket(gate, result, self.decision, self.request)
        if isinstance(result, Displaced):
            raise Rejected.of(result.refusal)
        assert result is not None
        if result.outcome is Outcome.EXPIRED:
            message = (
                f"request {result.id!r} waited {result.e2e:.3g} s in lane {result.lane!r} "
                "and could no longer start in time: its deadline passed, or the engine "
                "was too far behind for it to meet its lane's TTFT target"
            )
            raise Expired(message, result, self.decision)
        if result.outcome is Outcome.REVOKED:
            raise Revoked(result, self.decision)
        raise GateClosed("the gate closed before the request could start", self.decision)


class WaitingRoom:
    """The callers waiting in ``Gate.admit`` for their turn, by request id; each
    leaves once, woken with its result (the end recorded when it ended)."""

    __slots__ = ("_records", "_waiting")

    def __init__(self, records: EndRecords) -> None:
        self._records = records
        self._waiting: dict[str, Waiter] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, request: Request, decision: Admit | Demote) -> Waiter:
        """A caller starts waiting for ``request``'s turn."""
        waiter = self._waiting[request.id] = Waiter(request, decision)
        return waiter

    def cancel(self, waiter: Waiter, policy: Policy, now: float) -> None:
        """``waiter``'s caller went away: cancel its request in ``policy`` at
        ``now`` (queued: it leaves its queue; started: its seats and blocks
        come back) and record the end."""
        if waiter.result is None:
            del self._waiting[waiter.request.id]
        finished = policy.cancel(waiter.request.id, now=now)
        self._records.ended(finished, waiter.request)

    def start(self, started: Started) -> Waiter | None:
        """Wake the caller of a request the policy started; its waiter, if one waited."""
        waiter = self._waiting.pop(started.id, None)
        if waiter is not None:
            waiter.wake(started)
        return waiter

    def end(self, result: Finished | Displaced) -> None:
        """Wake the caller of a request that ended queued, and record its end."""
        finished = result if isinstance(result, Finished) else result.finished
        waiter = self._waiting.pop(finished.id, None)
        if waiter is not None:
            waiter.wake(result)
            self._records.ended(finished, waiter.request)

    def close(self, policy: Policy, now: float) -> None:
        """The gate closes: cancel every waiting request in ``policy`` at ``now``."""
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            finished = policy.cancel(waiter.request.id, now=now)
            waiter.wake(finished)
            self._records.ended(finished, waiter.request)


class GateAdmission:
    """What :meth:`Gate.admit` returns: ``async with`` it, or ``await`` it for the ticket."""

    __slots__ = ("_gate", "_request", "_ticket")

    def __init__(self, gate: Gate, request: Request) -> None:
        self._gate = gate
        self._request = request
        self._ticket: Ticket | None = None

    def __await__(self) -> Generator[Any, None, Ticket]:
        return self._gate._admit(self._request).__await__()

    def __aenter__(self) -> Coroutine[Any, Any, Ticket]:
        # The gate's coroutine itself (it records the ticket here): no wrapper
        # coroutine on the admission path.
        return self._gate._admit(self._request, self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        ticket = self._ticket
        assert ticket is not None
        ticket._exit(exc)  # released before any await (see Ticket.__aexit__)
        stream = ticket._stream
        if stream is not None and not stream.ended:
            await stream.aclose()
