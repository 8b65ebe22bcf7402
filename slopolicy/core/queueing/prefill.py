"""How much prompt work the engine has been handed, and how fast it gets through it.

An engine takes what it is given in its own order (vLLM's and llama.cpp's
queues are FCFS): once the policy has released a request, nothing in front
of the engine can reorder it. :class:`PrefillGate` keeps the policy in charge
of the order without starving the engine. It counts the *prefill backlog*
(prompt tokens of started requests whose first token has not come yet) and
learns the engine's *prefill rate* (prompt tokens per second, measured only
while the backlog was non-empty, so idle time does not dilute it). What is
left of the backlog drains at that rate between first tokens (a long prompt
is computed chunk by chunk, so it does not hold the gate shut for its whole
prefill, and counts for at most one budget), and a first token takes its
prompt out at once. A start is held
back while what is left would take more than ``horizon`` seconds to clear;
with nothing left anything starts, so the engine never idles while work
waits (invariant 4), and however large a prompt is it starts once the
backlog is under budget (no starvation; the overshoot is one request).

Before the first measurement nothing is held back. The rate is an
exponentially weighted mean over busy windows of at least ``window`` seconds
of backlog time; it follows the engine as decode load, prompt mix and
hardware change, so the gate needs no engine profile.

Time is the policy's ``now`` (monotonic seconds); this object is sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("PrefillGate", "PrefillStatistics")


@dataclass(frozen=True, slots=True)
class PrefillStatistics:
    """A snapshot: ``backlog`` prompt tokens handed over and not yet through
    prefill, ``uncomputed`` the estimate of those not yet computed, ``rate``
    the learned prefill rate (tokens per second, ``None`` before the first
    measurement) and ``budget`` the backlog at which starts are held back
    (tokens, ``None`` while unknown)."""

    backlog: int
    uncomputed: float
    rate: float | None
    budget: float | None


class PrefillGate:
    """The prefill backlog and learned prefill rate of one engine.

    Args:
        horizon: seconds of prefill backlog the engine is given ahead (at
            least one engine iteration; a fraction of the tightest TTFT
            target leaves the rest of the target to the policy's order).
        window: seconds of busy time per rate measurement.
        smoothing: weight of a new measurement in the moving mean, (0, 1].
    """

    __slots__ = (
        "_busy",
        "_done",
        "_last",
        "backlog",
        "horizon",
        "rate",
        "smoothing",
        "uncomputed",
        "window",
    )

    def __init__(self, horizon: float, *, window: float = 0.25, smoothing: float = 0.3) -> None:
        for name, value in (("horizon", horizon), ("window", window)):
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (isinstance(smoothing, int | float) and 0 < smoothing <= 1):
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self.horizon = float(horizon)
        self.window = float(window)
        self.smoothing = float(smoothing)
        #: Prompt tokens started whose first token has not come.
        self.backlog = 0
        #: Of those, the tokens estimated not yet computed.
        self.uncomputed = 0.0
        #: Learned prefill rate, tokens per second (``None``: not yet measured).
        self.rate: float | None = None
        self._busy = 0.0  # backlog seconds in the current measurement
        self._done = 0  # prompt tokens through prefill in it
        self._last = float("-inf")

    def ready(self, *, now: float) -> bool:
        """Whether another request may start at ``now`` (its size does not matter)."""
        self._tick(now)
        rate = self.rate
        return rate is None or self.uncomputed <= rate * self.horizon

    def ready_at(self, *, now: float) -> float:
        """The earliest time at or after ``now`` at which :meth:`ready` holds
        if no first token comes first (the backlog drains at the rate)."""
        held = self.held_back(now=now)
        rate = self.rate
        # Just past the budget, so the start is not held again by rounding.
        return now if rate is None or held == 0 else now + held / rate * (1 + 1e-9) + 1e-9

    def held_back(self, *, now: float) -> float:
        """Prompt tokens the backlog must shed after ``now`` before the next
        start (0 when a start may go now)."""
        self._tick(now)
        rate = self.rate
        return 0.0 if rate is None else max(0.0, self.uncomputed - rate * self.horizon)

    def started(self, tokens: int, *, now: float) -> None:
        """A request with ``tokens`` prompt tokens was handed to the engine."""
        self._tick(now)
        self.backlog += tokens
        rate = self.rate
        # A prompt longer than the budget counts as one budget: engines compute
        # long prompts in chunks beside other work (vLLM's chunked prefill with
        # a long_prefill_token_threshold, llama.cpp's slots), so one long
        # prompt holds the next start back for about one horizon, not for its
        # whole prefill.
        self.uncomputed += tokens if rate is None else min(tokens, rate * self.horizon)

    def first_token(self, tokens: int, *, now: float) -> None:
        """A started request's first token came: its prompt is through prefill."""
        self._tick(now)
        self.backlog -= tokens
        self.uncomputed = min(self.uncomputed, self.backlog)
        self._done += tokens
        if self._busy >= self.window and self._done > 0:
            measured = self._done / self._busy
            rate = self.rate
            self.rate = measured if rate is None else rate + self.smoothing * (measured - rate)
            self._busy = 0.0
            self._done = 0

    def left(self, tokens: int, *, now: float) -> None:
        """A started request ended before its first token: its prompt leaves
        the backlog unmeasured."""
        self._tick(now)
        self.backlog -= tokens
        self.uncomputed = min(self.uncomputed, self.backlog)

    def statistics(self) -> PrefillStatistics:
        """A frozen snapshot."""
        rate = self.rate
        budget = None if rate is None else rate * self.horizon
        return PrefillStatistics(self.backlog, self.uncomputed, rate, budget)

    def _tick(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed <= 0:
            return
        self._last = now
        if self.backlog > 0:
            self._busy += elapsed
            if self.rate is not None:
                self.uncomputed = max(0.0, self.uncomputed - self.rate * elapsed)
