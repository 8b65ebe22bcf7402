"""What an SLO tracker knows at one time: :class:`SLOSnapshot`, frozen, with
the rates and fractions derived from its counts (see
:mod:`slopolicy.core.slo.tracker` for what counts where)."""

from __future__ import annotations

from dataclasses import dataclass

from slopolicy.core.slo.budget import Breakdown
from slopolicy.core.slo.burn import Alert, BurnRate
from slopolicy.core.slo.targets import SLOTargets, Summary

__all__ = ("SLOSnapshot",)


@dataclass(frozen=True, slots=True)
class SLOSnapshot:
    """Everything a tracker knows at ``at``, over its window (counts are requests).

    Latency summaries are in seconds (``prompt_tokens`` in tokens), ``None``
    when the window holds no value. ``spend`` is in the cost model's unit.
    ``tbt`` summarises the gaps between tokens and ``tbt_stalls`` counts the
    stalls among them (``None`` and 0 for a tracker that keeps no TBT).
    ``revoked`` counts running requests the policy ended to reclaim their KV
    (``engine.reclaim``): errors, like ``failed``.
    """

    at: float
    lane: str
    tenant: str | None
    targets: SLOTargets
    window_s: float
    span_s: float
    completed: int
    failed: int
    expired: int
    cancelled: int
    rejected: int
    attained: int
    spend: float
    output_tokens: int
    ttft: Summary | None
    tpot: Summary | None
    queue_wait: Summary | None
    e2e: Summary | None
    prompt_tokens: Summary | None
    breakdown: Breakdown | None
    burn_rates: tuple[BurnRate, ...]
    alerts: tuple[Alert, ...]
    rejected_are_errors: bool = False
    tbt: Summary | None = None
    tbt_stalls: int = 0
    revoked: int = 0

    @property
    def eligible(self) -> int:
        """The success-rate denominator: completed + failed + expired + revoked
        (+ rejected if errors)."""
        extra = self.rejected if self.rejected_are_errors else 0
        return self.completed + self.failed + self.expired + self.revoked + extra

    @property
    def success_rate(self) -> float | None:
        """completed / eligible, or ``None`` with nothing eligible."""
        return self.completed / self.eligible if self.eligible else None

    @property
    def attainment(self) -> float | None:
        """attained / eligible, or ``None`` with nothing eligible."""
        return self.attained / self.eligible if self.eligible else None

    @property
    def throughput(self) -> float:
        """Completed requests per second."""
        return self.completed / self.span_s

    @property
    def goodput(self) -> float:
        """Requests per second that attained the SLO (never above :attr:`throughput`)."""
        return self.attained / self.span_s

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens per second, over every finished request."""
        return self.output_tokens / self.span_s

    @property
    def cost_per_success(self) -> float | None:
        """spend / completed, or ``None`` with nothing completed."""
        return self.spend / self.completed if self.completed else None

    @property
    def rejected_fraction(self) -> float | None:
        """rejected / (rejected + every finished request), or ``None`` with none."""
        offered = (
            self.completed
            + self.failed
            + self.expired
            + self.cancelled
            + self.rejected
            + self.revoked
        )
        return self.rejected / offered if offered else None

    @property
    def ttft_p95_fraction(self) -> float | None:
        """p95 TTFT / the TTFT target (the ladder's trigger), or ``None``."""
        target = self.targets.ttft_target
        return None if self.ttft is None or target is None else self.ttft.p95 / target

    @property
    def tbt_p99_fraction(self) -> float | None:
        """p99 TBT / the ``tbt_p99`` target, or ``None``."""
        target = self.targets.tbt_p99
        return None if self.tbt is None or target is None else self.tbt.p99 / target

    @property
    def queue_wait_fraction(self) -> float | None:
        """p95 queue wait / the TTFT target (the ladder's trigger), or ``None``."""
        target = self.targets.ttft_target
        return None if self.queue_wait is None or target is None else self.queue_wait.p95 / target
