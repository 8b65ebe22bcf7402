"""What a gate binds from its event loop once, when it is entered.

anyio looks up the running backend on every call to ``anyio.current_time()``
or ``anyio.lowlevel.checkpoint()`` (about a microsecond each, several times a
request), and ``anyio.Event`` wraps the backend's event (on asyncio an
``asyncio.Event``, its deque of waiters and a future per wait: four objects
and a few microseconds for every request that waits, each object one more for
the garbage collector to scan while it waits). A gate lives in one event
loop, so it binds that loop's own primitives when it is entered:

* the clock anyio reads (``loop.time()`` on asyncio, ``trio.current_time()``
  on trio), virtual or mocked clocks included;
* the checkpoint anyio would run (``asyncio.sleep(0)``,
  ``trio.lowlevel.checkpoint()``);
* a one-shot parking spot for a waiter: a bare future on asyncio,
  ``trio.Event`` on trio;
* a way back into the loop from a finalizer (:func:`bind_spawn`): the
  garbage collector may run one in the middle of any update, or on another
  thread, so what it must do is started as a task of the loop instead.

Outside asyncio and trio, anyio's own functions are used.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.lowlevel

__all__ = (
    "Checkpoint",
    "Clock",
    "Park",
    "Parked",
    "Spawn",
    "bind_checkpoint",
    "bind_clock",
    "bind_parking",
    "bind_spawn",
)

logger = logging.getLogger("slopolicy.gate")

#: Monotonic seconds of the running event loop.
Clock = Callable[[], float]

#: A cancel point and a schedule point, as ``anyio.lowlevel.checkpoint``.
Checkpoint = Callable[[], Awaitable[Any]]


class Parked(Protocol):
    """One parked caller: ``await parked.wait()`` until :meth:`set` (idempotent)."""

    def set(self) -> None: ...

    def wait(self) -> Awaitable[Any]: ...


#: Makes a :class:`Parked` on the running event loop.
Park = Callable[[], Parked]

#: Starts ``task()`` soon as a background task of the event loop it was bound
#: in, callable from any thread and from a finalizer; ``False`` when that loop
#: has ended (nothing will run).
Spawn = Callable[[Callable[[], Awaitable[object]]], bool]


class _ParkedFuture(asyncio.Future[None]):
    """asyncio: the future itself is the parking spot (one object per wait)."""

    __slots__ = ()

    def set(self) -> None:
        if not self.done():  # cancelled with its waiter, or set already
            self.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        return self  # pending when parked: awaiting it yields


def _running() -> str | None:
    """``"asyncio"`` or ``"trio"`` when that loop runs this code, else ``None``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio
        pass
    else:
        return "asyncio"
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # not trio either
            pass
        else:
            return "trio"
    return None


def bind_clock() -> Clock:
    """The running event loop's clock (call inside it)."""
    backend = _running()
    if backend == "asyncio":
        return asyncio.get_running_loop().time
    if backend == "trio":
        clock: Clock = sys.modules["trio"].current_time
        return clock
    return anyio.current_time


def bind_checkpoint() -> Checkpoint:
    """The running event loop's checkpoint (call inside it)."""
    backend = _running()
    if backend == "asyncio":
        return partial(asyncio.sleep, 0)  # what anyio's asyncio checkpoint awaits
    if backend == "trio":
        checkpoint: Checkpoint = sys.modules["trio"].lowlevel.checkpoint
        return checkpoint
    return anyio.lowlevel.checkpoint


def bind_parking() -> Park:
    """The running event loop's parking (call inside it)."""
    backend = _running()
    if backend == "asyncio":
        return partial(_ParkedFuture, loop=asyncio.get_running_loop())
    if backend == "trio":
        park: Park = sys.modules["trio"].Event
        return park
    return anyio.Event


def bind_spawn() -> Spawn | None:
    """A :data:`Spawn` for the running event loop (call inside it); ``None``
    outside asyncio and trio. A task that raises is logged, not propagated
    (on trio a failing system task would end the whole run)."""
    backend = _running()
    if backend == "asyncio":
        return partial(_spawn_asyncio, asyncio.get_running_loop())
    if backend == "trio":
        return partial(_spawn_trio, sys.modules["trio"].lowlevel.current_trio_token())
    return None


async def _guarded(task: Callable[[], Awaitable[object]]) -> None:
    try:
        await task()
    except Exception:
        logger.warning("a background clean-up task failed", exc_info=True)


# asyncio keeps only weak references to tasks: these are held until done.
_BACKGROUND: set[asyncio.Task[None]] = set()


def _start_asyncio(loop: asyncio.AbstractEventLoop, task: Callable[[], Awaitable[object]]) -> None:
    started = loop.create_task(_guarded(task))
    _BACKGROUND.add(started)
    started.add_done_callback(_BACKGROUND.discard)


def _spawn_asyncio(loop: asyncio.AbstractEventLoop, task: Callable[[], Awaitable[object]]) -> bool:
    try:
        loop.call_soon_threadsafe(_start_asyncio, loop, task)
    except RuntimeError:  # the loop is closed
        return False
    return True


def _start_trio(task: Callable[[], Awaitable[object]]) -> None:
    trio = sys.modules["trio"]
    try:
        trio.lowlevel.spawn_system_task(_guarded, task, name="slopolicy clean-up")
    except RuntimeError:  # the run is shutting down: system tasks can no longer start
        logger.debug("no clean-up task: the trio run is ending")


def _spawn_trio(token: Any, task: Callable[[], Awaitable[object]]) -> bool:
    try:
        token.run_sync_soon(_start_trio, task)
    except sys.modules["trio"].RunFinishedError:
        return False
    return True
