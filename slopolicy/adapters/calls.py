"""An engine call that owns its ticket: sent, answered whole or streamed, released once.

These are the pieces every adapter builds on. A new adapter needs a
``classify`` for its client's exceptions (to
:class:`~slopolicy.adapters.common.EngineError`) and, for streams, a
``watch``/``settle`` pair for its chunks (see :func:`relay`):

- build the engine call inside ``with holding(ticket):`` (a bad argument
  releases the ticket);
- :func:`answer` awaits a whole answer and settles the ticket with the
  engine's token count; :func:`sent` awaits a stream's response;
- :func:`stream` wraps the engine's stream in a :class:`GatedStream`.

The engine's own token counts pass through :func:`~slopolicy.adapters.common.engine_count`
on their way to the ticket: a server that answers garbage there charges the
tokens counted (or the budget), it does not break the release.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterator,
)
from contextlib import contextmanager
from functools import partial
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio

from slopolicy.adapters.common import EngineError, EngineFault, Reply, engine_count
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.request import Request
from slopolicy.runtime.loop import bind_spawn
from slopolicy.runtime.ticket import Ticket, TrackedStream

__all__ = ("GatedStream", "answer", "close_quietly", "fail", "holding", "relay", "sent", "stream")

T = TypeVar("T")

logger = logging.getLogger("slopolicy.adapters")


def fail(ticket: Ticket, error: EngineError) -> EngineError:
    """Release ``ticket`` as ``error`` says (unless already released); return ``error``."""
    if not ticket.released:
        error.finished = ticket.finish(error.outcome)
    else:
        error.finished = ticket.finished
    return error


def _failed(
    ticket: Ticket, classify: Callable[[Exception], EngineError], error: Exception
) -> EngineError:
    """Release ``ticket`` as ``classify(error)`` says; return that. A classifier
    that raises (an engine's error it cannot read) is logged, and the ticket
    released as failed all the same: no bad answer skips a release."""
    try:
        engine_error = classify(error)
    except Exception:
        logger.warning("classifying %s failed", type(error).__name__, exc_info=True)
        engine_error = EngineError(EngineFault.FAILED, f"{type(error).__name__}: {error}")
    return fail(ticket, engine_error)


@contextmanager
def holding(ticket: Ticket) -> Iterator[None]:
    """Release ``ticket`` as cancelled if the block raises before the engine
    has the request (a bad argument found after admission must not hold a slot)."""
    try:
        yield
    except BaseException:
        ticket.cancel()  # a no-op when fail() already released it
        raise


async def sent(
    ticket: Ticket, pending: Awaitable[T], *, classify: Callable[[Exception], EngineError]
) -> T:
    """Await the engine's answer to the call (a whole response, or a stream's
    response headers), releasing ``ticket`` if it fails: the client's
    exceptions as ``classify`` says, raised as :class:`EngineError`;
    cancellation as cancelled (the connection closes and the engine stops)."""
    try:
        return await pending
    except Exception as error:
        raise _failed(ticket, classify, error) from error
    except BaseException:
        ticket.cancel()
        raise


async def answer(
    ticket: Ticket,
    pending: Awaitable[T],
    *,
    classify: Callable[[Exception], EngineError],
    output_tokens: Callable[[T], object],
) -> Reply[T]:
    """Await the engine's whole answer and finish ``ticket`` with it.

    ``output_tokens(response)`` is the engine's own count, read without
    raising; when it sent none or garbage (see
    :func:`~slopolicy.adapters.common.engine_count`), the ticket is charged the
    output budget it was allowed, not zero. Failures are raised as
    :func:`sent` says; a revocation (``engine.reclaim``) cancels the call
    and raises :class:`~slopolicy.Revoked`.
    """
    with ticket.revocable():  # a revocation cancels the call: the engine aborts it
        response = await sent(ticket, pending, classify=classify)
    budget = ticket.request.output_budget
    counted = engine_count(output_tokens(response), budget)
    tokens = budget if counted is None else counted
    return Reply(response, ticket.finish(Outcome.COMPLETED, output_tokens=tokens))


async def close_quietly(close: Callable[[], Awaitable[object]] | None) -> None:
    """Close an engine stream, shielded: cancellation must not leave it open
    (an open HTTP stream or vLLM request keeps generating for nobody)."""
    if close is None:
        return
    with anyio.CancelScope(shield=True):
        await close()


async def relay(
    ticket: Ticket,
    source: AsyncIterable[T],
    *,
    watch: Callable[[T], bool],
    classify: Callable[[Exception], EngineError],
    settle: Callable[[], object],
    close: Callable[[], Awaitable[object]] | None = None,
) -> AsyncGenerator[T, None]:
    """Pass the engine's chunks on, turning its failures into :class:`EngineError`.

    ``watch(chunk)`` inspects each chunk (and may raise ``EngineError``);
    chunks it returns ``False`` for are consumed but not passed on (a usage
    chunk the caller did not ask for). At the end, ``settle()`` returns the
    engine's own output-token count (``None`` or garbage: keep the counted
    tokens) and the ticket is finished with it, or raises ``EngineError`` when
    the stream ended wrong. ``classify`` turns the client library's exceptions
    into ``EngineError``; closing this generator (or cancelling its reader)
    releases the ticket as cancelled. ``close`` closes the engine's stream
    however this ends, after the release.
    """
    try:
        async for chunk in source:
            if watch(chunk):
                yield chunk
        output_tokens = engine_count(settle(), ticket.request.output_budget)
    except EngineError as error:
        fail(ticket, error)
        raise
    except Exception as error:
        raise _failed(ticket, classify, error) from error
    except BaseException:
        ticket.cancel()  # closed or cancelled: nobody reads the rest
        raise
    finally:
        await close_quietly(close)
    if not ticket.released:
        ticket.finish(Outcome.COMPLETED, output_tokens=output_tokens)


def stream(
    ticket: Ticket,
    source: AsyncIterable[T],
    *,
    watch: Callable[[T], bool],
    classify: Callable[[Exception], EngineError],
    settle: Callable[[], object],
    close: Callable[[], Awaitable[object]] | None,
    tokens_of: Callable[[T], int] | None = None,
) -> GatedStream[T]:
    """The engine's ``source`` as a :class:`GatedStream`: relayed (see
    :func:`relay`) and tracked by the ticket, ``tokens_of(chunk)`` output
    tokens per chunk (``None``: one per chunk)."""
    relayed = relay(ticket, source, watch=watch, classify=classify, settle=settle, close=close)
    return GatedStream(ticket, ticket.track(relayed, tokens_of=tokens_of), close=close)


class GatedStream(Generic[T]):
    """An engine stream that owns its ticket: iterate it, and the ticket is
    released however the stream ends (see :mod:`slopolicy.runtime.ticket`).

    Use it as ``async with`` (or call :meth:`aclose`) so an abandoned stream
    releases its ticket and closes the engine's stream at once. One dropped
    unfinished without either is released as ``cancelled`` and closed when it
    is garbage collected, from a task on its event loop, with a
    ``ResourceWarning``: until then it holds its slot. Tokens, TTFT and TPOT
    are measured as chunks arrive; :attr:`finished` holds the policy's record
    once released.
    """

    __slots__ = ("_close", "_spawn", "_tracked", "ticket")

    def __init__(
        self,
        ticket: Ticket,
        tracked: TrackedStream[T],
        close: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.ticket = ticket
        self._tracked = tracked
        self._close = close
        self._spawn = bind_spawn()  # the way back into this loop for __del__

    @property
    def finished(self) -> Finished | None:
        """The policy's record once the stream ended (``ttft``/``tpot`` in seconds)."""
        return self.ticket.finished

    @property
    def request(self) -> Request:
        """What was sent: the request after lane caps and ladder transforms."""
        return self.ticket.request

    def __aiter__(self) -> GatedStream[T]:
        return self

    async def __anext__(self) -> T:
        return await self._tracked.__anext__()

    async def aclose(self) -> None:
        """Stop early: release the ticket as ``cancelled`` (unless already
        released) and close the engine's stream, so the engine stops too."""
        await _shut(self._tracked, self._close)

    async def __aenter__(self) -> GatedStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception) and not self.ticket.released:
            # As a ticket's own block does: the host's error fails the request.
            self.ticket.finish(Outcome.FAILED)
        await self.aclose()

    def __del__(self) -> None:
        tracked = getattr(self, "_tracked", None)
        if tracked is None or tracked.ended:
            return
        # Dropped unfinished. Releasing here could re-enter the policy from
        # inside the garbage collector, mid-update (or from another thread):
        # the loop's own task does it (and holds the ticket until then, so
        # the ticket never sees itself dropped unreleased).
        spawn = getattr(self, "_spawn", None)
        if spawn is not None and spawn(partial(_shut, tracked, self._close)):
            warnings.warn(
                f"stream of request {self.ticket.id!r} was never closed; released "
                "as cancelled when collected (use 'async with' to release it at once)",
                ResourceWarning,
                stacklevel=1,
            )

    def __repr__(self) -> str:
        return f"<GatedStream {self.ticket!r}>"


async def _shut(tracked: TrackedStream[Any], close: Callable[[], Awaitable[object]] | None) -> None:
    """Release as cancelled (unless released) and close the engine's stream."""
    await tracked.aclose()
    # The tracked stream closes the relay only once iteration began; the
    # engine's stream may be open before that (its headers arrived).
    await close_quietly(close)
