"""Tickets: a started request's hold on the engine, released exactly once.

A :class:`Ticket` comes from ``async with gate.admit(request) as ticket`` (or
``await gate.admit(request)`` / ``gate.admit_nowait(request)``, then
``with ticket:`` or ``async with ticket:``). It releases the request's engine
slot, KV blocks and quota exactly once, on the first of these:

::

    what happens                                          outcome
    ----------------------------------------------------  ---------------------------------
    the tracked stream runs to its end                    completed
    the tracked stream raises an Exception                failed
    the tracked stream raises anything else               cancelled
      (cancellation, KeyboardInterrupt)
    tracked.aclose() before the stream's end              cancelled
      (a client disconnect)
    ticket.finish(outcome, output_tokens=...)             as given (default completed)
    ticket.cancel()                                       cancelled
    the policy revokes it (``engine.reclaim``,            revoked: the tracked stream
      or a stalled start)                                   raises Revoked at its next
                                                            chunk (at once before the
                                                            first), and closes
    the block exits with an Exception                     failed
    the block exits with anything else                    cancelled
      (cancellation, GeneratorExit from a closed
      response generator)
    the block exits normally, a tracked stream            cancelled (the reader stopped
      unfinished                                            early; call finish() first
                                                            if that was on purpose)
    the block exits normally, nothing tracked             completed, with the tokens
                                                            reported through tokens()
                                                            (0 if none)

Later events are no-ops, except an explicit second ``finish()``, which raises
:class:`~slopolicy.UsageError`. A revocation ends the ticket at once (its slot
goes to the request it was revoked for); the engine's stream is closed, so
the engine aborts the request, when the tracked stream next yields a chunk
(within one token gap of a decoding request), or at once while it waits
for the first (a stalled start may never yield one). A whole call (not a stream)
run in ``with ticket.revocable():`` is cancelled at once, and the block
raises :class:`~slopolicy.Revoked`; a host that does neither reads
:attr:`Ticket.revoked`. ``async with`` also closes a tracked stream
that was left unfinished (so the engine aborts the request); ``with`` cannot.
A ticket from ``await gate.admit()`` or ``admit_nowait()`` that is never
released keeps its slot; dropping it emits a ``ResourceWarning``.

A count the host's ``tokens_of`` or ``usage_of`` returns that is not a token
count (NaN from ``json.loads``, a negative, a string, a float, past 2**53) is
left out, never passed on to the policy, so it cannot stop the release: the
ticket settles on the tokens counted without it. The first such count is kept
as :attr:`Ticket.count_error` (the :class:`~slopolicy.UsageError` describing
it) and logged once per ticket as a warning on the ``slopolicy.gate`` logger.
An explicit ``finish(output_tokens=...)`` or ``tokens(count)`` with a bad count
raises ``UsageError`` instead, releasing nothing: the caller can call again.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import anyio

from slopolicy.core.checks import check_count, count_problem
from slopolicy.core.decisions import Admit, Demote
from slopolicy.core.lifecycle import Started
from slopolicy.core.outcome import Finished, Outcome, ending
from slopolicy.core.request import Request
from slopolicy.errors import Revoked, UsageError

if TYPE_CHECKING:
    from slopolicy.runtime.gate import Gate

__all__ = ("Ticket", "TrackedStream")

logger = logging.getLogger("slopolicy.gate")

T = TypeVar("T")


def _outcome_of(error: BaseException | None) -> Outcome:
    if error is None:
        return Outcome.COMPLETED
    # Engine and host errors are failures; cancellation, GeneratorExit and
    # interrupts mean nobody is waiting for the answer any more.
    return Outcome.FAILED if isinstance(error, Exception) else Outcome.CANCELLED


class Ticket:
    """A started request. ``request`` is what to send to the engine: the
    caller's request after lane caps and fallback-ladder transforms.

    Attributes:
        decision: the ``Admit``/``Demote`` it was accepted with.
        started: the policy's :class:`~slopolicy.Started` record.
    """

    __slots__ = (
        "__weakref__",
        "_count_error",
        "_error",
        "_finished",
        "_gate",
        "_origin",
        "_prefilled",
        "_revoked",
        "_scope",
        "_stream",
        "_usage",
        "decision",
        "started",
    )

    def __init__(
        self, gate: Gate, started: Started, decision: Admit | Demote, origin: Request
    ) -> None:
        self._gate = gate
        self.started = started
        self.decision = decision
        self._origin = origin
        self._finished: Finished | None = None
        self._stream: TrackedStream[Any] | None = None
        self._usage: int | None = None
        self._error: Exception | None = None  # what failed it, for telemetry
        self._prefilled = False
        self._count_error: UsageError | None = None
        self._revoked: Revoked | None = None
        self._scope: anyio.CancelScope | None = None  # the revocable() block's
        gate._holders[started.id] = self

    @property
    def id(self) -> str:
        """The request id."""
        return self.started.id

    @property
    def tenant(self) -> str:
        """Who pays for it."""
        return self.started.tenant

    @property
    def lane(self) -> str:
        """The lane it was dispatched from."""
        return self.started.lane

    @property
    def request(self) -> Request:
        """The request to run: lane caps and ladder transforms applied."""
        return self.started.request

    @property
    def rungs(self) -> tuple[str, ...]:
        """Ladder rungs that changed or marked the request (``compress_prompt``
        asks the host to compress the prompt itself)."""
        return self.started.rungs

    @property
    def queue_wait(self) -> float:
        """Seconds it waited in its lane's queue."""
        return self.started.queue_wait

    @property
    def finished(self) -> Finished | None:
        """The policy's record once released, else ``None``."""
        return self._finished

    @property
    def released(self) -> bool:
        """Whether the ticket has been released."""
        return self._finished is not None

    @property
    def revoked(self) -> Revoked | None:
        """The :class:`~slopolicy.Revoked` error once the policy revoked the
        request (``engine.reclaim``): stop it on the engine and answer with
        it (503). ``None`` otherwise."""
        return self._revoked

    def _revoke(self, finished: Finished) -> None:
        """The policy ended this running request as ``revoked`` (its record
        ``finished``): release the ticket; a tracked stream raises at its next chunk."""
        self._revoked = error = Revoked(finished, self.decision)
        self._finished = finished
        self._gate._records.ended(finished, self._origin, error)
        if self._scope is not None:
            self._scope.cancel()

    @contextmanager
    def revocable(self) -> Iterator[None]:
        """Run a whole engine call (not a tracked stream) in this block: a
        revocation cancels it (the engine aborts the call), and the block
        raises :class:`~slopolicy.Revoked`. One block at a time."""
        if self._scope is not None:
            raise UsageError(f"request {self.id!r} is already in a revocable block")
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                yield
            finally:
                self._scope = None
        if scope.cancelled_caught and self._revoked is not None:
            raise self._revoked

    @property
    def count_error(self) -> UsageError | None:
        """The first bad count a tracked stream's ``tokens_of`` or ``usage_of``
        returned, as the :class:`~slopolicy.UsageError` describing it; ``None``
        when every count was good. The ticket counted on without it."""
        return self._count_error

    def _counted(self, value: object, source: str) -> int | None:
        """``value`` if it is a token count; otherwise record it as
        :attr:`count_error` (and a warning, once per ticket) and return ``None``."""
        problem = count_problem(value)
        if problem is None:
            assert isinstance(value, int)
            return value
        if self._count_error is None:
            self._count_error = UsageError(
                f"{source} must return {problem}; request {self.id!r} counts on without it"
            )
            logger.warning("%s", self._count_error)
        return None

    def track(
        self,
        stream: AsyncIterable[T],
        *,
        tokens_of: Callable[[T], int] | None = None,
        usage_of: Callable[[T], int | None] | None = None,
    ) -> TrackedStream[T]:
        """Wrap the engine's ``stream`` of chunks: iterate the result instead.

        The first ``__anext__`` marks the ``schedule`` stage; each chunk adds
        ``tokens_of(chunk)`` output tokens (default 1), and the first chunk
        carrying a token is the first token (TTFT). The time between two chunks
        carrying tokens is one TBT gap, however many tokens each carries.
        ``usage_of(chunk)``, when it returns a number, is the engine's own
        output-token count and replaces the counted total at release. A count
        from either that is not an int in ``[0, 2**53]`` is left out and kept
        as :attr:`count_error` (see the module docstring). The stream's end,
        error or cancellation releases the ticket.
        """
        if self._stream is not None:
            raise UsageError(f"request {self.id!r} is already tracking a stream")
        tracked = TrackedStream(self, stream, tokens_of, usage_of)
        self._stream = tracked
        return tracked

    def tokens(self, count: int) -> None:
        """``count`` more output tokens arrived (for hosts that do not use :meth:`track`)."""
        if self._finished is None:
            gate = self._gate
            now = gate.clock()
            gap = gate.policy.tokens(self.id, count, now=now)
            if gap is not None and gate._telemetry is not None:
                gate._telemetry.gap(self.id, gap)
            if not self._prefilled:  # the first token: its prompt left the prefill backlog
                self._prefilled = True
                gate._prefilled(now)

    def mark(self, stage: str) -> None:
        """A TTFT stage ended now: ``"schedule"`` or ``"prefill"`` (see ``Policy.mark``)."""
        if self._finished is None:
            self._gate.policy.mark(self.id, stage, now=self._gate.clock())

    def finish(
        self, outcome: Outcome | str = Outcome.COMPLETED, *, output_tokens: int | None = None
    ) -> Finished:
        """Release now as ``outcome`` (``completed``, ``failed`` or ``cancelled``);
        ``output_tokens`` is the engine's usage count, if known. Raises
        :class:`~slopolicy.UsageError` if the ticket was already released."""
        end = ending(outcome)
        if output_tokens is not None:
            check_count("output_tokens", output_tokens)
        if self._finished is not None:
            raise UsageError(
                f"request {self.id!r} was already released ({self._finished.outcome.value})"
            )
        return self._release(end, self._usage if output_tokens is None else output_tokens)

    def cancel(self) -> Finished | None:
        """Release as ``cancelled`` unless already released; the record, if this released it."""
        if self._finished is not None:
            return None
        return self._release(Outcome.CANCELLED, self._usage)

    def _end(self, outcome: Outcome, error: BaseException | None = None) -> None:
        if self._finished is None:
            if isinstance(error, Exception):
                self._error = error
            self._release(outcome, self._usage)

    def _release(self, outcome: Outcome, output_tokens: int | None) -> Finished:
        finished = self._gate._release(self, outcome, output_tokens)
        self._finished = finished
        return finished

    def _exit(self, error: BaseException | None) -> None:
        if self._finished is not None:
            return
        outcome = _outcome_of(error)
        if isinstance(error, Exception):
            self._error = error
        stream = self._stream
        if outcome is Outcome.COMPLETED and stream is not None and not stream.ended:
            outcome = Outcome.CANCELLED
        self._release(outcome, self._usage)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._exit(exc)

    async def __aenter__(self) -> Ticket:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Release first, synchronously: nothing below can lose the slot.
        self._exit(exc)
        stream = self._stream
        if stream is not None and not stream.ended:
            await stream.aclose()

    def __del__(self) -> None:
        # Releasing here could re-enter the policy from inside the garbage
        # collector, mid-update; say so instead: the slot is lost until restart.
        if getattr(self, "_finished", True) is None:
            warnings.warn(
                f"ticket for request {self.started.id!r} was never released; "
                "its engine slot and KV blocks are lost",
                ResourceWarning,
                stacklevel=1,
            )

    def __repr__(self) -> str:
        state = "live" if self._finished is None else self._finished.outcome.value
        return f"<Ticket {self.id!r} tenant={self.tenant!r} lane={self.lane!r} {state}>"


class TrackedStream(Generic[T]):
    """An engine stream seen through a ticket: chunks pass through unchanged
    while tokens, TTFT and the end of the stream are reported to the policy."""

    __slots__ = ("_chunked", "_iterator", "_source", "_ticket", "_tokens_of", "_usage_of", "ended")

    def __init__(
        self,
        ticket: Ticket,
        source: AsyncIterable[T],
        tokens_of: Callable[[T], int] | None,
        usage_of: Callable[[T], int | None] | None,
    ) -> None:
        self._ticket = ticket
        self._source = source
        self._iterator: AsyncIterator[T] | None = None
        self._tokens_of = tokens_of
        self._usage_of = usage_of
        self._chunked = False  # whether the engine yielded a chunk yet
        self.ended = False  # the source ran out, raised, or was closed

    def __aiter__(self) -> TrackedStream[T]:
        return self

    async def __anext__(self) -> T:
        ticket = self._ticket
        if ticket._revoked is not None:
            await self._stop_revoked(ticket._revoked)
        iterator = self._iterator
        if iterator is None:
            if self.ended:
                raise StopAsyncIteration
            iterator = self._iterator = aiter(self._source)
            ticket.mark("schedule")
        try:
            if self._chunked or ticket._scope is not None:
                chunk = await iterator.__anext__()
            else:
                chunk = await self._first_chunk(iterator)
                self._chunked = True
        except StopAsyncIteration:
            self.ended = True
            ticket._end(Outcome.COMPLETED)
            raise
        except BaseException as error:
            self.ended = True
            ticket._end(_outcome_of(error), error)
            raise
        if ticket._finished is None:
            tokens_of, usage_of = self._tokens_of, self._usage_of
            count = 1 if tokens_of is None else ticket._counted(tokens_of(chunk), "tokens_of")
            if count:
                ticket.tokens(count)
            if usage_of is not None:
                usage = usage_of(chunk)
                if usage is not None:
                    usage = ticket._counted(usage, "usage_of")
                    if usage is not None:  # a bad one leaves the last good count
                        ticket._usage = usage
        elif ticket._revoked is not None:  # revoked while the engine computed this chunk
            await self._stop_revoked(ticket._revoked)
        return chunk

    async def _first_chunk(self, iterator: AsyncIterator[T]) -> T:
        """The engine's first chunk, awaited so that a revocation cancels the
        wait (a start that stalls before its first token may wait long, so
        its next chunk is no bound): then the engine's stream is closed and
        :class:`~slopolicy.Revoked` raised. Later chunks come a token gap
        apart, and a revocation stops the stream at the next one."""
        ticket = self._ticket
        with anyio.CancelScope() as scope:
            ticket._scope = scope
            try:
                return await iterator.__anext__()
            finally:
                ticket._scope = None
        revoked = ticket._revoked
        assert revoked is not None  # only a revocation cancels the scope
        return await self._stop_revoked(revoked)

    async def _stop_revoked(self, revoked: Revoked) -> NoReturn:
        """The ticket was revoked: close the engine's stream (the engine
        aborts the request) and raise ``revoked``."""
        if not self.ended:
            self.ended = True
            close = getattr(self._iterator, "aclose", None)
            if close is not None:
                await close()
        raise revoked

    async def aclose(self) -> None:
        """Stop early (the client went away): release as ``cancelled`` unless
        already released, and close the engine's stream."""
        if self.ended:
            return
        self.ended = True
        self._ticket._end(Outcome.CANCELLED)
        close = getattr(self._iterator, "aclose", None)
        if close is not None:
            await close()
