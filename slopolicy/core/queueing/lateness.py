"""How often a lane's first tokens come past its TTFT target, lately.

A lane's TTFT target is a quantile (``ttft_p95``: 95% of first tokens by
the target), so it leaves a *late budget*: the share of first tokens that
may come past it, 5% for a p95 and 1% for a p99. :class:`LateShare` measures
the share that did, over an exponential window of :data:`LATE_WINDOW_S`
seconds, for the check at dispatch to spend the budget on
(:meth:`~slopolicy.core.queueing.ttft.FirstTokenCheck.lost`): it is spent
once the late ones pass what the budget allows of them by a whole first
token (:meth:`LateShare.spent`). Read as a bare share, one late first token
among the last few spent it; on a held-out long-conversation trace that gave
up on seven more of the in-share tenants' turns, at twice FCFS's capacity,
to save one late one (their attainment 0.931 -> 0.887; by a whole one,
0.918).

Sans-IO: times are the caller's ``now`` (monotonic seconds).
"""

from __future__ import annotations

import math

from slopolicy.errors import UsageError

__all__ = ("LATE_WINDOW_S", "LateShare", "late_budget")

#: Seconds over which a lane's late share is measured (exponential window):
#: the half-minute the lanes' arrival rates are measured over
#: (:data:`~slopolicy.core.queueing.interference.RATE_WINDOW_S`), so the
#: share follows the load on the same time scale as the harm priced from them.
LATE_WINDOW_S = 30.0


def late_budget(quantile: float) -> float:
    """The share of first tokens a target at ``quantile`` (0 to 1, e.g. 0.95
    for a p95) lets come past it: ``1 - quantile`` (to 12 places, so a p95's
    is 0.05, not a rounding above it)."""
    budget = round(1.0 - quantile, 12) if isinstance(quantile, int | float) else math.nan
    if not 0.0 < budget < 1.0:
        raise UsageError(f"quantile must be a number in (0, 1 - 1e-12), got {quantile!r}")
    return budget


class LateShare:
    """The share of a lane's first tokens that came past its target, each
    weighted ``e^(-age / window)`` (``window`` seconds, > 0); 0 before the
    first. Only first tokens move it: it says what the last ones did, however
    long ago they came. (:mod:`~slopolicy.core.queueing.decode_pace` keeps
    one of completed answers against the TPOT target, the same way.)"""

    __slots__ = ("_all", "_at", "_late", "window")

    def __init__(self, window: float = LATE_WINDOW_S) -> None:
        if not (isinstance(window, int | float) and 0 < window < math.inf):
            raise UsageError(f"window must be a finite number > 0, got {window!r}")
        self.window = float(window)
        self._late = 0.0  # late first tokens, weighted as of ``_at``
        self._all = 0.0  # every first token, weighted as of ``_at``
        self._at = -math.inf

    def observe(self, late: bool, *, now: float) -> None:
        """A first token came at ``now`` (seconds; earlier times count as the
        latest seen), past the target if ``late``."""
        at = self._at
        if now > at:
            if self._all:
                kept = math.exp((at - now) / self.window)
                self._late *= kept
                self._all *= kept
            self._at = now
        self._all += 1.0
        if late:
            self._late += 1.0

    @property
    def share(self) -> float:
        """Late first tokens over all of them, as weighted (0 to 1)."""
        return self._late / self._all if self._all else 0.0

    def spent(self, budget: float) -> bool:
        """Whether the late first tokens, as weighted, have passed what
        ``budget`` (a share, 0 to 1) allows of them by a whole one: the
        budget is spent. Not by a fraction of one: a p95 over the last ten
        first tokens allows half a late one, and one late turn in ten is
        a p95's luck, not its breach."""
        if not (isinstance(budget, int | float) and 0.0 <= budget <= 1.0):
            raise UsageError(f"budget must be a number from 0 to 1, got {budget!r}")
        return self._spent(budget)

    def _spent(self, budget: float) -> bool:
        """:meth:`spent` for a caller that checked ``budget``."""
        return self._late - budget * self._all >= 1.0
