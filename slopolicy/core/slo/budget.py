"""Where the TTFT budget went: per-stage latencies and their shares of TTFT.

``TTFT ~ t_queue + t_schedule + t_prefill + t_transfer`` (the stages of
:data:`~slopolicy.core.outcome.STAGES`). Each stage gets sliding quantiles,
and a **share of mean TTFT**: the stage's seconds summed over the requests in
the window divided by their TTFT summed. Shares of the mean add up (with
``other`` for time no marked stage covers), which shares of p95 would not:
quantiles of parts do not sum to the quantile of the whole. To keep the tail
in view the same shares are also computed over only the **slow** requests,
those with TTFT above ``slow_after`` (the lane's TTFT target), so "TTFT bad,
and queueing is 80% of it" reads directly as ``slow_share == 0.8``.

Window semantics are those of :mod:`slopolicy.core.slo.windows`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.core.outcome import STAGES
from slopolicy.core.slo.sketches import Slice, SlidingSketches
from slopolicy.errors import UsageError

__all__ = (
    "STAGE_FIELDS",
    "STAGE_METRICS",
    "Breakdown",
    "LatencyBudget",
    "StageShare",
    "add_stages",
    "check_stages",
    "stage_breakdown",
)

_N = len(STAGES)
# Window sums: [requests, ttft_sum, stage sums...] for all requests, then the same for slow
# ones, each run at these offsets from its start.
_REQUESTS, _TTFT_SUM, _STAGE_SUMS = 0, 1, 2
_SLOW = _STAGE_SUMS + _N
_STAGE_INDEX = {stage: index for index, stage in enumerate(STAGES)}


@dataclass(frozen=True, slots=True)
class StageShare:
    """One stage over the window: quantiles of its seconds, and its shares of TTFT (0-1).

    ``count`` is how many requests marked the stage; quantiles are ``None``
    when none did. ``share`` is over all requests with a TTFT, ``slow_share``
    over those slower than the breakdown's ``slow_after`` (``None`` when none were).
    """

    stage: str
    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    share: float | None
    slow_share: float | None


@dataclass(frozen=True, slots=True)
class Breakdown:
    """TTFT split by stage over a window.

    Attributes:
        count: requests with a TTFT in the window.
        ttft_mean: their mean TTFT, seconds.
        slow_after: the TTFT (seconds) above which a request counts as slow.
        slow_count: requests slower than ``slow_after``.
        slow_ttft_mean: their mean TTFT, seconds.
        stages: one :class:`StageShare` per stage, in :data:`STAGES` order.
        other_share: share of mean TTFT no stage accounts for (unmarked stages,
            gaps between marks); 0 when the stages overrun TTFT.
        slow_other_share: the same over the slow requests.
    """

    count: int
    ttft_mean: float | None
    slow_after: float | None
    slow_count: int
    slow_ttft_mean: float | None
    stages: tuple[StageShare, ...]
    other_share: float | None
    slow_other_share: float | None

    def stage(self, name: str) -> StageShare:
        """The share of stage ``name``."""
        for share in self.stages:
            if share.stage == name:
                return share
        raise UsageError(f"unknown stage {name!r}; stages are {', '.join(STAGES)}")

    @property
    def dominant(self) -> str | None:
        """The stage with the largest share of the slow requests' TTFT, or of all
        requests' when none was slow; ``None`` without data."""
        slow = self.slow_count > 0
        best: tuple[float, str] | None = None
        for share in self.stages:
            value = share.slow_share if slow else share.share
            if value is not None and value > 0 and (best is None or value > best[0]):
                best = (value, share.stage)
        return None if best is None else best[1]


class LatencyBudget:
    """Per-stage sliding quantiles and TTFT shares for one lane (see the module doc).

    ``slow_after`` is the TTFT in seconds above which a request is slow,
    normally the lane's TTFT target; ``None`` keeps only the all-request shares.
    """

    __slots__ = ("_window", "slow_after")

    def __init__(
        self,
        slow_after: float | None = None,
        *,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
    ) -> None:
        if slow_after is not None and not (math.isfinite(slow_after) and slow_after >= 0):
            raise UsageError(f"slow_after must be a finite number >= 0, got {slow_after!r}")
        self.slow_after = slow_after
        self._window = SlidingSketches(
            STAGE_METRICS, STAGE_FIELDS, window_s=window_s, slices=slices, alpha=alpha
        )

    def record(self, ttft: float | None, stages: Mapping[str, float], *, now: float) -> None:
        """Count one request's TTFT and stage seconds (from ``Finished``) at ``now``."""
        check_stages(stages)
        if ttft is not None and not (ttft >= 0 and ttft <= MAX_AMOUNT):
            raise UsageError(f"ttft must be a finite number >= 0, got {shown(ttft)}")
        check_now(now)
        add_stages(self._window.current(now=now), 0, 0, ttft, stages, self.slow_after)

    def breakdown(self, *, now: float) -> Breakdown:
        """The split over the window at ``now``."""
        check_now(now)
        return stage_breakdown(self._window, 0, 0, self.slow_after, now=now)


#: Sketches (one per stage) and sums a stage split takes in a :class:`SlidingSketches`.
STAGE_METRICS = _N
STAGE_FIELDS = 2 * _SLOW


def add_stages(
    piece: Slice,
    metric: int,
    field: int,
    ttft: float | None,
    stages: Mapping[str, float],
    slow_after: float | None,
) -> None:
    """Add one request's (checked) stages to ``piece``, whose stage sketches start
    at index ``metric`` and stage sums at ``field``."""
    pending, sums = piece.pending, piece.sums
    for stage, seconds in stages.items():
        pending[metric + _STAGE_INDEX[stage]].append(seconds)
    if ttft is None:
        return  # stage quantiles still learn from requests that never got a token
    slow = slow_after is not None and ttft > slow_after
    for offset in (field, field + _SLOW) if slow else (field,):
        sums[offset + _REQUESTS] += 1.0
        sums[offset + _TTFT_SUM] += ttft
        for stage, seconds in stages.items():
            sums[offset + _STAGE_SUMS + _STAGE_INDEX[stage]] += seconds


def stage_breakdown(
    window: SlidingSketches, metric: int, field: int, slow_after: float | None, *, now: float
) -> Breakdown:
    """The :class:`Breakdown` of the stages kept at ``metric``/``field`` in ``window``."""
    sums = window.totals(now=now)[field : field + STAGE_FIELDS]
    shares, other = _shares(sums, 0)
    slow_shares, slow_other = _shares(sums, _SLOW)
    stages = []
    for index, stage in enumerate(STAGES):
        sketch = window.sketch(metric + index, now=now)
        p50, p95, p99 = sketch.quantiles((0.5, 0.95, 0.99))
        stages.append(
            StageShare(stage, sketch.count, p50, p95, p99, shares[index], slow_shares[index])
        )
    count, slow_count = int(sums[_REQUESTS]), int(sums[_SLOW + _REQUESTS])
    return Breakdown(
        count=count,
        ttft_mean=sums[_TTFT_SUM] / count if count else None,
        slow_after=slow_after,
        slow_count=slow_count,
        slow_ttft_mean=sums[_SLOW + _TTFT_SUM] / slow_count if slow_count else None,
        stages=tuple(stages),
        other_share=other,
        slow_other_share=slow_other,
    )


def check_stages(stages: Mapping[str, float]) -> None:
    """Raise :class:`UsageError` unless ``stages`` maps known stages to seconds >= 0."""
    for stage, seconds in stages.items():
        if stage not in _STAGE_INDEX:
            raise UsageError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
        if not (seconds >= 0 and seconds <= MAX_AMOUNT):
            raise UsageError(f"stage {stage!r} must be finite seconds >= 0, got {shown(seconds)}")


def _shares(sums: list[float], offset: int) -> tuple[list[float | None], float | None]:
    total, first = sums[offset + _TTFT_SUM], offset + _STAGE_SUMS
    if sums[offset + _REQUESTS] == 0 or total <= 0:
        return [None] * _N, None
    shares: list[float | None] = [sums[first + i] / total for i in range(_N)]
    covered = sum(sums[first : first + _N]) / total
    return shares, max(0.0, 1.0 - covered)
