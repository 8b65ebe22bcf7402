"""The running event loop's clock, bound once.

``anyio.current_time()`` looks up the async backend on every call (about a
microsecond, several times per request). A gate lives in one event loop, so it
binds that loop's clock when it is entered: the same clock anyio reads
(``loop.time()`` on asyncio, ``trio.current_time()`` on trio), virtual or
mocked clocks included.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

import anyio

__all__ = ("Clock", "bind_clock")

#: Monotonic seconds of the running event loop.
Clock = Callable[[], float]


def bind_clock() -> Clock:
    """The running event loop's clock (call inside it); anyio's lookup for
    backends other than asyncio and trio."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not asyncio
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.current_time()
        except RuntimeError:  # not trio either
            pass
        else:
            clock: Clock = trio.current_time
            return clock
    return anyio.current_time
