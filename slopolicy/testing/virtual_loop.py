"""Virtual time for asyncio, as trio's ``MockClock(autojump_threshold=0)`` gives trio.

``virtual_event_loop()`` builds an asyncio event loop whose clock is virtual:
whenever every task is blocked and only timers are pending, the clock jumps to
the next timer instead of sleeping. ``anyio.current_time()``, ``anyio.sleep``
and cancel-scope deadlines all read the loop's clock, so code under test runs
its timeouts in microseconds of real time. Use it with anyio's pytest plugin::

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(request):
        if request.param == "asyncio":
            return "asyncio", {"loop_factory": virtual_event_loop}
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}

As with trio's autojump, time also jumps while worker threads run, and a wait
on I/O with no timer pending blocks for real (it cannot be jumped over).
"""

from __future__ import annotations

import asyncio
import selectors

__all__ = ("VirtualClock", "virtual_event_loop")


class VirtualClock:
    """The loop's clock: seconds, starting at ``start``; only moves forward."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def jump(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward (ignored unless positive)."""
        if seconds > 0:
            self.now += seconds


class _JumpingSelector(selectors.DefaultSelector):
    """Polls for I/O without waiting; when nothing is ready, jumps the clock
    by the timeout the loop would have slept instead of sleeping."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # nothing scheduled: only I/O (a thread) can wake the loop
            blocked: list[tuple[selectors.SelectorKey, int]] = super().select(None)
            return blocked
        self._clock.jump(timeout)
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_JumpingSelector(clock))
        self.clock = clock

    def time(self) -> float:
        return self.clock.now


def virtual_event_loop(start: float = 0.0) -> asyncio.AbstractEventLoop:
    """A new asyncio event loop on a :class:`VirtualClock` starting at ``start``
    seconds (the clock is the loop's ``clock`` attribute)."""
    return _VirtualLoop(VirtualClock(start))
