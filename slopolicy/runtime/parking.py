"""Parking a queued caller until the gate wakes it, on the event loop's own primitive.

``anyio.Event`` wraps the backend's event: on asyncio an ``asyncio.Event``,
its deque of waiters and a future per wait, four objects and a few
microseconds for every request that has to wait, and each object is one more
for the garbage collector to scan while it waits. A gate lives in one event
loop, so it binds that loop's cheapest one-shot wake-up when it is entered: a
bare future on asyncio, ``trio.Event`` on trio, ``anyio.Event`` elsewhere.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

import anyio

__all__ = ("Park", "Parked", "bind_parking")


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


def bind_parking() -> Park:
    """The running event loop's parking (call inside it)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio
        pass
    else:
        return partial(_ParkedFuture, loop=loop)
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # not trio either
            pass
        else:
            park: Park = trio.Event
            return park
    return anyio.Event
