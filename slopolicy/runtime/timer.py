"""The :class:`~slopolicy.runtime.gate.Gate`'s background tasks: its dispatch
timer and its engine-signal poll."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import anyio
from anyio.lowlevel import checkpoint

from slopolicy.core.health.signals import EngineSignals, check_signals
from slopolicy.core.lifecycle import Dispatch
from slopolicy.core.policy import Policy
from slopolicy.runtime.loop import Clock

__all__ = ("DispatchTimer", "SignalSource", "poll_signals")

logger = logging.getLogger("slopolicy.gate")

#: Polls engine signals: returns the latest, or ``None`` when there is nothing new.
SignalSource = Callable[[], Awaitable[EngineSignals | None]]


class DispatchTimer:
    """Sleeps until :meth:`Policy.next_wakeup` (a queue deadline, a paced start
    or a ladder evaluation), dispatches, repeats. ``dispatch(now=now)`` is the
    gate's bounded dispatch; a batch of ``max_expired`` expiries means more may
    be overdue, so the timer goes on after a checkpoint."""

    __slots__ = ("_clock", "_dispatch", "_max_expired", "_policy", "_scope")

    def __init__(
        self, policy: Policy, dispatch: Callable[[float], Dispatch], max_expired: int
    ) -> None:
        self._policy = policy
        self._dispatch = dispatch
        self._max_expired = max_expired
        self._clock: Clock = anyio.current_time
        self._scope: anyio.CancelScope | None = None

    async def run(self, clock: Clock) -> None:
        """The timer task, on the loop whose ``clock`` it reads."""
        self._clock = clock
        while True:
            with anyio.CancelScope(deadline=self._next_wake()) as scope:
                self._scope = scope
                await anyio.sleep_forever()
            self._scope = None
            now = clock()
            while len(self._dispatch(now).expired) >= self._max_expired:
                await checkpoint()  # let others run between bounded batches
                now = clock()

    def watch(self) -> None:
        """A call may have brought the wake-up forward: move the sleep's deadline."""
        scope = self._scope
        if scope is not None:
            wake = self._next_wake()
            if wake < scope.deadline:
                scope.deadline = wake

    def wake(self) -> None:
        """Dispatch at once (more may be overdue than one dispatch expired)."""
        if self._scope is not None:
            self._scope.deadline = -math.inf

    def _next_wake(self) -> float:
        """The policy's next wake-up on the gate's clock (``inf``: none)."""
        wake = self._policy.next_wakeup(now=self._clock())
        return math.inf if wake is None else wake


async def poll_signals(
    source: SignalSource, every: float, observe: Callable[[EngineSignals], None]
) -> None:
    """Poll ``source`` every ``every`` seconds and ``observe`` what it returns."""
    while True:
        try:
            signals = await source()
            if signals is not None:
                check_signals(signals)  # a source returning junk fails like one raising
        except Exception:
            # A flaky metrics endpoint must not take the gate down; the
            # ladder treats signals that stop arriving as stale.
            logger.warning("polling engine signals failed", exc_info=True)
        else:
            if signals is not None:
                observe(signals)
        await anyio.sleep(every)
