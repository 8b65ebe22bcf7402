"""What a shared quota store does while it cannot reach its server.

Two policy objects, chosen by configuration (``on_failure=``):

- :class:`FailOpen`: admit on local limits, an in-memory store in this
  process (optionally scaled to this replica's share), and say so: the
  leases are marked ``fallback``, ``statistics().degraded`` is true and a
  warning is logged when the breaker opens.
- :class:`FailClosed`: refuse with ``QUOTA_STORE_UNAVAILABLE`` (HTTP 503) and
  a ``retry_after`` of the breaker's wait before its next trial.

A :class:`CircuitBreaker` decides when to stop trying the server (after
``failures`` consecutive failed calls) and when to try again (one trial
call after ``reset_after`` seconds; success closes it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Protocol

from anyio import current_time

from slopolicy.backends.base import Lease, QuotaStore, is_real
from slopolicy.backends.memory import MemoryQuotaStore
from slopolicy.core.decisions import Reason
from slopolicy.core.quota.refusals import QuotaRefusal
from slopolicy.core.specs import LaneQuotaSpec, TierSpec
from slopolicy.errors import UsageError

__all__ = ("CircuitBreaker", "FailClosed", "FailOpen", "FailurePolicy")


class FailurePolicy(Protocol):
    """Answers admissions while the shared store is unavailable."""

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float, retry_after: float
    ) -> Lease | QuotaRefusal:
        """The answer for one admission; ``retry_after`` is the breaker's wait
        (seconds) before it tries the server again."""
        ...

    @property
    def local(self) -> QuotaStore | None:
        """The store that holds fallback leases (``None``: none are granted)."""
        ...


class FailClosed:
    """Refuse every admission while the store is unavailable: 503
    ``QUOTA_STORE_UNAVAILABLE``, ``Retry-After`` the breaker's wait (at least
    ``min_retry_after`` seconds)."""

    __slots__ = ("min_retry_after",)

    def __init__(self, *, min_retry_after: float = 1.0) -> None:
        if not (is_real(min_retry_after) and 0.0 <= min_retry_after < math.inf):
            raise UsageError(
                f"min_retry_after must be finite seconds >= 0, not {min_retry_after!r}"
            )
        self.min_retry_after = min_retry_after

    def __repr__(self) -> str:
        return f"FailClosed(min_retry_after={self.min_retry_after!r})"

    @property
    def local(self) -> None:
        """No fallback leases."""
        return None

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float, retry_after: float
    ) -> QuotaRefusal:
        """``QUOTA_STORE_UNAVAILABLE``, 503."""
        wait = max(retry_after, self.min_retry_after)
        return QuotaRefusal(
            reason=Reason.QUOTA_STORE_UNAVAILABLE,
            message=(
                f"the shared quota store is unavailable and fails closed; retry in {wait:.3g} s"
            ),
            retry_after=wait,
            http_status=503,
        )


class FailOpen:
    """Admit on local limits while the store is unavailable.

    Args:
        local: the store for fallback leases (default: a new
            :class:`MemoryQuotaStore` on ``anyio.current_time``).
        share: this replica's share (0, 1] of each tier's rate and concurrency
            caps while failing open; ``1/N`` for N replicas keeps the fleet
            near the shared limits. Bursts stay whole, so a request that fits
            the shared burst still fits. Default 1: every replica enforces
            the full limits on its own.
    """

    __slots__ = ("_local", "_scaled", "share")

    def __init__(self, local: QuotaStore | None = None, *, share: float = 1.0) -> None:
        if not (is_real(share) and 0.0 < share <= 1.0):
            raise UsageError(f"share must be in (0, 1], not {share!r}")
        self._local: QuotaStore = MemoryQuotaStore() if local is None else local
        self.share = share
        self._scaled: dict[int, tuple[TierSpec, TierSpec]] = {}

    def __repr__(self) -> str:
        return f"FailOpen(local={self._local!r}, share={self.share!r})"

    @property
    def local(self) -> QuotaStore:
        """The store holding fallback leases."""
        return self._local

    async def acquire(
        self, tenant: str, tier: TierSpec, lane: str, cost: float, retry_after: float
    ) -> Lease | QuotaRefusal:
        """The local store's answer, on the tier scaled to ``share``."""
        return await self._local.acquire(tenant, self._scale(tier), lane, cost)

    def _scale(self, tier: TierSpec) -> TierSpec:
        if self.share == 1.0:
            return tier
        cached = self._scaled.get(id(tier))
        if cached is not None and cached[0] is tier:
            return cached[1]
        scaled = dataclasses.replace(
            tier,
            rate=None if tier.rate is None else tier.rate * self.share,
            max_concurrency=_cap(tier.max_concurrency, self.share),
            lane_quotas=tuple(
                LaneQuotaSpec(q.lane, q.share, _cap(q.max_concurrency, self.share))
                for q in tier.lane_quotas
            ),
        )
        if len(self._scaled) >= 256:
            self._scaled.clear()
        self._scaled[id(tier)] = (tier, scaled)
        return scaled


def _cap(cap: int | None, share: float) -> int | None:
    return None if cap is None else max(1, math.floor(cap * share))


class CircuitBreaker:
    """Closed (calls go to the server) → open after ``failures`` consecutive
    failed calls (none go; the failure policy answers) → after ``reset_after``
    seconds, half open: one trial call; success closes it, failure opens it
    again. ``clock`` is monotonic seconds (default ``anyio.current_time``)."""

    __slots__ = ("_clock", "_consecutive", "_opened_at", "_state", "failures", "reset_after")

    def __init__(
        self,
        *,
        failures: int = 2,
        reset_after: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise UsageError(f"failures must be an integer >= 1, not {failures!r}")
        if not (is_real(reset_after) and 0.0 < reset_after < math.inf):
            raise UsageError(f"reset_after must be finite seconds > 0, not {reset_after!r}")
        self.failures = failures
        self.reset_after = reset_after
        self._clock = current_time if clock is None else clock
        self._state = "closed"
        self._consecutive = 0
        self._opened_at = -math.inf

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(failures={self.failures!r}, reset_after={self.reset_after!r}) "
            f"<{self._state}>"
        )

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        return self._state

    def allow(self) -> bool:
        """Whether a call may go to the server now. Past ``reset_after`` an open
        breaker lets exactly one trial through and turns half open."""
        if self._state == "closed":
            return True
        if self._state == "open" and self._clock() >= self._opened_at + self.reset_after:
            self._state = "half_open"
            return True
        return False

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial through (0 if calls may go)."""
        if self._state != "open":
            return 0.0
        return max(0.0, self._opened_at + self.reset_after - self._clock())

    def success(self) -> bool:
        """A call succeeded. True if this closed the breaker (it was not closed)."""
        self._consecutive = 0
        if self._state == "closed":
            return False
        self._state = "closed"
        return True

    def failure(self) -> bool:
        """A call failed. True if this opened the breaker (it was closed)."""
        self._consecutive += 1
        if self._state == "half_open" or (
            self._state == "closed" and self._consecutive >= self.failures
        ):
            opened = self._state == "closed"
            self._state = "open"
            self._opened_at = self._clock()
            return opened
        return False

    def abandon(self) -> None:
        """A call was cancelled before it could tell: a half-open breaker goes
        back to open, due at once, so the next caller makes the trial."""
        if self._state == "half_open":
            self._state = "open"
