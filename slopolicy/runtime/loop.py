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
  ``trio.Event`` on trio.

Outside asyncio and trio, anyio's own functions are used.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.lowlevel

__all__ = ("Checkpoint", "Clock", "Park", "Parked", "bind_checkpoint", "bind_clock", "bind_parking")

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
