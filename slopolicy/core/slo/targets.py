"""SLO targets, the objectives they imply, and distribution summaries.

Definitions (DistServe; see ``SIMULATOR.md``): TTFT counts from arrival at the
gate, so queueing is included; TPOT is ``(t_last - t_first) / (n_out - 1)``.
A request **attains** its SLO iff it completed and each latency target that is
set holds for it: TTFT at most :attr:`SLOTargets.ttft_target`, TPOT at most
``tpot_p95`` and end-to-end at most ``e2e_p95`` (the last one so batch lanes,
which set only a drain-time target, have a meaningful goodput) and, with a
``tbt_p99`` target, its own p99 time between tokens: at most 1% of its gaps
(rounded down) above the target. A target that is unset, or a timing the
request never produced, skips that check.

**TBT** (time between tokens) is the gap between two consecutive arrivals of
output of one stream; a chunk that carries several tokens is one arrival, so
the gap is between chunks. A gap *misses* the target when it is above
``tbt_p99``; it is a **stall** when it is at least :attr:`SLOTargets.stall_threshold`
(``tbt_stall``, else ``tbt_p99``, else :data:`STALL_S`).

Each latency target is also an error-budget **objective**: "p95 TTFT <= 2 s"
is the same statement as "at least 95% of requests have TTFT <= 2 s", so a
request over 2 s spends that objective's budget (goal 0.95). ``success_rate``
is the goal of the success objective.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from slopolicy.core.slo.quantiles import QuantileSketch
from slopolicy.errors import UsageError

__all__ = ("STALL_S", "Objective", "SLOTargets", "Summary", "tbt_met")

#: The stall threshold of a lane without a TBT target, seconds (Sarathi-Serve's
#: P99 TBT target).
STALL_S = 0.2


class Objective(enum.Enum):
    """The error-budget objectives a lane can have; the value is the wire name."""

    SUCCESS = "success"
    TTFT_P95 = "ttft_p95"
    TTFT_P99 = "ttft_p99"
    TPOT_P95 = "tpot_p95"
    E2E_P95 = "e2e_p95"


# (objective, goal, the SLOTargets field holding its threshold)
_GOALS = (
    (Objective.TTFT_P95, 0.95, "ttft_p95"),
    (Objective.TTFT_P99, 0.99, "ttft_p99"),
    (Objective.TPOT_P95, 0.95, "tpot_p95"),
    (Objective.E2E_P95, 0.95, "e2e_p95"),
)


@dataclass(frozen=True, slots=True)
class SLOTargets:
    """A lane's targets. Latencies in seconds (``None``: no target);
    ``success_rate`` in (0, 1]; ``tbt_p99`` bounds the gaps between a stream's
    chunks and ``tbt_stall`` is the gap counted as a stall (see the module doc)."""

    ttft_p95: float | None = None
    ttft_p99: float | None = None
    tpot_p95: float | None = None
    e2e_p95: float | None = None
    success_rate: float = 0.99
    tbt_p99: float | None = None
    tbt_stall: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p95", "ttft_p99", "tpot_p95", "e2e_p95", "tbt_p99", "tbt_stall"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UsageError(f"{name} must be a finite number > 0 or None, got {value!r}")
        if not 0 < self.success_rate <= 1:
            raise UsageError(f"success_rate must be in (0, 1], got {self.success_rate!r}")
        if (
            self.ttft_p95 is not None
            and self.ttft_p99 is not None
            and self.ttft_p99 < self.ttft_p95
        ):
            raise UsageError("ttft_p99 must be >= ttft_p95")

    @property
    def ttft_target(self) -> float | None:
        """The per-request TTFT bound for attainment: ``ttft_p95``, else ``ttft_p99`` (seconds)."""
        return self.ttft_p95 if self.ttft_p95 is not None else self.ttft_p99

    @property
    def ttft_quantile(self) -> float | None:
        """The quantile :attr:`ttft_target` is at: 0.95 for ``ttft_p95``, else
        0.99 for ``ttft_p99`` (``None`` without a TTFT target)."""
        if self.ttft_p95 is not None:
            return 0.95
        return None if self.ttft_p99 is None else 0.99

    @property
    def stall_threshold(self) -> float:
        """The gap counted as a stall, seconds: ``tbt_stall``, else ``tbt_p99``,
        else :data:`STALL_S`."""
        if self.tbt_stall is not None:
            return self.tbt_stall
        return self.tbt_p99 if self.tbt_p99 is not None else STALL_S

    @property
    def slow_gap(self) -> float:
        """A gap above this misses the TBT target, seconds (``inf`` without one)."""
        return math.inf if self.tbt_p99 is None else self.tbt_p99

    def objectives(self) -> tuple[tuple[Objective, float, float | None], ...]:
        """``(objective, goal, threshold_s)`` for each objective these targets set,
        success first (its threshold is ``None``)."""
        found: list[tuple[Objective, float, float | None]] = [
            (Objective.SUCCESS, self.success_rate, None)
        ]
        for objective, goal, name in _GOALS:
            threshold = getattr(self, name)
            if threshold is not None:
                found.append((objective, goal, threshold))
        return tuple(found)

    def attains(
        self,
        ttft: float | None,
        tpot: float | None,
        e2e: float | None,
        gaps: int = 0,
        slow_gaps: int = 0,
    ) -> bool:
        """Whether a *completed* request with these timings (seconds) attains the
        SLO; ``gaps`` is how many gaps between tokens it had and ``slow_gaps``
        how many of them were above ``tbt_p99`` (see :func:`tbt_met`)."""
        # Written out: this runs once per recorded request.
        bound = self.ttft_p95 if self.ttft_p95 is not None else self.ttft_p99
        if ttft is not None and bound is not None and ttft > bound:
            return False
        if tpot is not None and self.tpot_p95 is not None and tpot > self.tpot_p95:
            return False
        if slow_gaps and self.tbt_p99 is not None and not tbt_met(gaps, slow_gaps):
            return False
        return e2e is None or self.e2e_p95 is None or e2e <= self.e2e_p95


def tbt_met(gaps: int, slow_gaps: int) -> bool:
    """Whether a request whose ``slow_gaps`` of ``gaps`` gaps were above its
    lane's ``tbt_p99`` met the target: its own p99 gap (nearest rank, the value
    of rank ``ceil(0.99 * gaps)``) is within the target exactly when at most
    ``floor(gaps / 100)`` gaps are above it. So a request with fewer than 100
    gaps misses on a single slow gap: one long prefill landing mid-stream."""
    return slow_gaps * 100 <= gaps


@dataclass(frozen=True, slots=True)
class Summary:
    """A distribution over a window: exact count, mean and max; quantiles within
    the sketch's relative error."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, sketch: QuantileSketch) -> Summary | None:
        """The summary of ``sketch``, or ``None`` when it is empty."""
        p50, p95, p99 = sketch.quantiles((0.5, 0.95, 0.99))
        if p50 is None or p95 is None or p99 is None:
            return None
        mean, top = sketch.mean, sketch.max
        assert mean is not None  # non-empty
        assert top is not None
        return cls(sketch.count, mean, p50, p95, p99, top)
