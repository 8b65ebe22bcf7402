"""Error-budget burn rates over long windows, and multi-window alerts.

``burn rate = error rate / (1 - goal)`` over a window (Google SRE workbook):
1 spends the budget exactly over the SLO period, 14.4 spends 2% of a 30-day
budget in an hour. An alert fires when **both** its long and its short window
burn **strictly faster** than its threshold; the short window makes it stop
soon after the burning stops. The default rules are those of ``SIMULATOR.md``:

========  ======  ======  =========
severity  long    short   threshold
========  ======  ======  =========
page      1 h     5 min   14.4
page      6 h     30 min  6
ticket    3 d     6 h     1
========  ======  ======  =========

Each distinct window is a :class:`~slopolicy.core.slo.windows.SlidingCounts` of
``buckets`` slices (default 60), so a window covers between
``window * (1 - 1/buckets)`` and ``window`` seconds (see
:mod:`slopolicy.core.slo.windows`) and memory is bounded: five windows of 60
slices, whatever the traffic. A window with no events has no rate (``None``)
and fires nothing. With a goal of 1 any error burns at ``inf``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.core.checks import check_now
from slopolicy.core.slo.targets import Objective
from slopolicy.core.slo.windows import SlidingCounts
from slopolicy.errors import UsageError

__all__ = ("DEFAULT_BURN_RULES", "Alert", "AlertSeverity", "BurnRate", "BurnRule", "BurnWindows")


class AlertSeverity(enum.Enum):
    """How loudly an alert should be raised; the value is the wire name."""

    PAGE = "page"
    TICKET = "ticket"


@dataclass(frozen=True, slots=True)
class BurnRule:
    """Alert at ``severity`` when both windows (seconds) burn faster than ``threshold``."""

    severity: AlertSeverity
    long_s: float
    short_s: float
    threshold: float

    def __post_init__(self) -> None:
        if not (0 < self.short_s <= self.long_s < math.inf) or not self.threshold >= 0:
            raise UsageError(f"a burn rule needs 0 < short_s <= long_s and threshold >= 0: {self}")


#: The multi-window rules of ``SIMULATOR.md`` for a 30-day SLO.
DEFAULT_BURN_RULES = (
    BurnRule(AlertSeverity.PAGE, 3600.0, 300.0, 14.4),
    BurnRule(AlertSeverity.PAGE, 21600.0, 1800.0, 6.0),
    BurnRule(AlertSeverity.TICKET, 259200.0, 21600.0, 1.0),
)


@dataclass(frozen=True, slots=True)
class BurnRate:
    """One objective over one window: ``events`` counted, ``bad`` of them errors.

    ``rate`` is ``(bad / events) / (1 - goal)``; ``None`` with no events.
    """

    objective: Objective
    window_s: float
    goal: float
    events: int
    bad: int

    @property
    def error_rate(self) -> float | None:
        """Fraction of events that were errors, or ``None`` with no events."""
        return self.bad / self.events if self.events else None

    @property
    def rate(self) -> float | None:
        """The burn rate, or ``None`` with no events."""
        error_rate = self.error_rate
        if error_rate is None:
            return None
        budget = 1.0 - self.goal
        if budget <= 0:
            return math.inf if self.bad else 0.0
        return error_rate / budget


@dataclass(frozen=True, slots=True)
class Alert:
    """A firing multi-window rule, with both windows' measured burn."""

    objective: Objective
    severity: AlertSeverity
    threshold: float
    long: BurnRate
    short: BurnRate

    @property
    def message(self) -> str:
        """A sentence for people."""
        return (
            f"{self.severity.value}: {self.objective.value} burning error budget at "
            f"{self.long.rate:.3g}x over {_duration(self.long.window_s)} and "
            f"{self.short.rate:.3g}x over {_duration(self.short.window_s)} "
            f"(threshold {self.threshold:g}x)"
        )


class BurnWindows:
    """Good and bad events per objective over every window the rules name.

    ``goals`` lists ``(objective, goal)`` pairs; :meth:`record` takes one
    verdict per pair, in that order: ``True`` an error, ``False`` good,
    ``None`` not an event for that objective.
    """

    __slots__ = (
        "_batch",
        "_goals",
        "_pending",
        "_pending_at",
        "_pending_slice",
        "_windows",
        "rules",
    )

    def __init__(
        self,
        goals: Sequence[tuple[Objective, float]],
        rules: Sequence[BurnRule] = DEFAULT_BURN_RULES,
        *,
        buckets: int = 60,
    ) -> None:
        if not goals:
            raise UsageError("burn windows need at least one objective")
        self._goals = tuple(goals)
        self.rules = tuple(rules)
        lengths = sorted({w for rule in self.rules for w in (rule.long_s, rule.short_s)})
        fields = 2 * len(self._goals)
        self._windows = {w: SlidingCounts(w, buckets, fields) for w in lengths}
        # Requests ending within one slice of the finest window land in the same
        # bucket of every window when every slice width is a whole multiple of
        # the finest: count them once and add them to the windows per slice,
        # not per request.
        widths = [window.width for window in self._windows.values()]
        finest = min(widths, default=0.0)
        exact = finest > 0 and all(_whole_multiple(width, finest) for width in widths)
        self._batch = finest if exact else 0.0
        self._pending = [0.0] * fields
        self._pending_slice: int | None = None
        self._pending_at = 0.0

    @property
    def goals(self) -> tuple[tuple[Objective, float], ...]:
        """The ``(objective, goal)`` pairs, in record order."""
        return self._goals

    @property
    def windows(self) -> tuple[float, ...]:
        """The window lengths kept, seconds, shortest first."""
        return tuple(self._windows)

    def record(self, *, now: float, verdicts: Sequence[bool | None]) -> None:
        """Count one request's verdicts (one per goal) at ``now`` (monotonic seconds)."""
        if len(verdicts) != len(self._goals):
            raise UsageError(f"expected {len(self._goals)} verdicts, got {len(verdicts)}")
        check_now(now)
        self._record(now, verdicts)

    def _record(self, now: float, verdicts: Sequence[bool | None]) -> None:
        """:meth:`record` for a caller that checked ``now`` and the verdicts' count."""
        if self._batch:
            current = math.floor(now / self._batch)
            if current != self._pending_slice:
                self._flush()
                self._pending_slice, self._pending_at = current, now
            self._add(self._pending, verdicts)
            return
        for window in self._windows.values():
            self._add(window.bucket(now=now), verdicts)

    @staticmethod
    def _add(counts: list[float], verdicts: Sequence[bool | None]) -> None:
        for index, bad in enumerate(verdicts):
            if bad is not None:
                counts[2 * index] += 1.0
                if bad:
                    counts[2 * index + 1] += 1.0

    def _flush(self) -> None:
        if self._pending_slice is None:
            return
        pending = self._pending
        for window in self._windows.values():
            bucket = window.bucket(now=self._pending_at)
            for index, value in enumerate(pending):
                bucket[index] += value
        self._pending = [0.0] * len(pending)
        self._pending_slice = None

    def rates(self, *, now: float) -> tuple[BurnRate, ...]:
        """Every objective's burn over every window, objective by objective."""
        check_now(now)
        return self._rates(now)

    def _rates(self, now: float) -> tuple[BurnRate, ...]:
        """:meth:`rates` at a checked ``now``."""
        self._flush()
        per_window = {w: counts.totals(now=now) for w, counts in self._windows.items()}
        return tuple(
            BurnRate(objective, w, goal, int(totals[2 * i]), int(totals[2 * i + 1]))
            for i, (objective, goal) in enumerate(self._goals)
            for w, totals in per_window.items()
        )

    def alerts(self, *, now: float) -> tuple[Alert, ...]:
        """The rules firing at ``now``, for each objective, in rule order."""
        check_now(now)
        return self._alerts(now)

    def _alerts(self, now: float) -> tuple[Alert, ...]:
        """:meth:`alerts` at a checked ``now``."""
        by_key = {(rate.objective, rate.window_s): rate for rate in self._rates(now)}
        fired: list[Alert] = []
        for objective, _ in self._goals:
            for rule in self.rules:
                long = by_key[objective, rule.long_s]
                short = by_key[objective, rule.short_s]
                if _exceeds(long, rule.threshold) and _exceeds(short, rule.threshold):
                    fired.append(Alert(objective, rule.severity, rule.threshold, long, short))
        return tuple(fired)


def _exceeds(burn: BurnRate, threshold: float) -> bool:
    rate = burn.rate
    return rate is not None and rate > threshold


def _whole_multiple(width: float, unit: float) -> bool:
    ratio = width / unit
    return abs(ratio - round(ratio)) < 1e-9 * ratio


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
