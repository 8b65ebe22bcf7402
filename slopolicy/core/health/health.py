"""The policy's view of service health: SLO trackers, engine signals, the ladder.

``Health`` records every finished request into per-lane and per-tenant SLO
trackers, keeps the engine's latest signals, and turns both into the
:class:`Pressure` that drives the fallback ladder:

* ``ttft_p95_fraction``: the watched lane's p95 TTFT over its target (0 when
  the window holds no first tokens: no traffic is no latency pressure);
* ``queue_wait_fraction``: the larger of the lane's p95 queue wait and the age
  of its oldest waiting request, over the same target, so a queue that is not
  moving shows pressure before anything finishes;
* ``kv_usage``: the larger of the KV ledger's forecast peak (the most its
  running requests will hold at once, the dispatcher's ``kv_ledger``) and the
  engine's report;
* ``decode_tps_drop``: from the engine's signals;
* ``tool_timeout_rate``: the larger of the reported one and the tool pool's
  own rolling rate (``tool_signal``, when its limits ask it to report one);
* ``tbt_p99_fraction``: the watched lane's p99 time between tokens over its
  ``tbt_p99`` target (0 without the target or without gaps in the window).

A signal that was reported and has gone stale is *unknown*, which holds the
ladder where it is (stale is never read as healthy); a signal no source has
ever reported counts as 0, so a deployment without it is not pinned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from slopolicy.core.health.diagnosis import diagnose
from slopolicy.core.health.findings import Finding
from slopolicy.core.health.signals import (
    SIGNAL_FIELDS,
    DecodeBaseline,
    EngineSignals,
    SignalBoard,
)
from slopolicy.core.ladder.events import LadderEvent
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.overload import OverloadState, overload_state
from slopolicy.core.ladder.pressure import Pressure
from slopolicy.core.ladder.rungs import AdmissionAction
from slopolicy.core.lifecycle import Entry
from slopolicy.core.outcome import Finished
from slopolicy.core.slo.gaps import GapWindow
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import CostModel
from slopolicy.core.slo.tracker_set import TrackerSet

__all__ = ("Health",)


class ToolSignal(Protocol):
    """What :meth:`ToolPool.signal <slopolicy.core.tools.pool.ToolPool.signal>` is: the pool's
    rolling rate at ``now`` (monotonic seconds), or ``None``."""

    def __call__(self, *, now: float) -> float | None: ...


class Health:
    """SLO trackers, engine signals and the fallback ladder for one policy.

    Args:
        targets: SLO targets per lane.
        watch_lane: lane whose SLO drives the ladder.
        ladder: the fallback ladder, or ``None`` for none.
        evaluate_every: seconds between automatic ladder evaluations.
        signal_max_age: seconds after which an engine signal is stale.
        max_tenants: per-tenant trackers kept (least recently used dropped).
        cost_model: cost of a finished request for cost-per-success (default:
            the cost units charged).
        tool_signal: the tool pool's rolling timeout (or failure) rate at a
            ``now``, or ``None`` when it reports none (``ToolPool.signal``).

    It is the policy's own part: each ``now`` its methods are given was
    checked once by the :class:`~slopolicy.Policy` call it serves, so
    :meth:`record` and :meth:`record_rejected` do not check it again; record
    from elsewhere through :attr:`trackers`, which checks.
    """

    __slots__ = (
        "_due",
        "_gap_windows",
        "_reported",
        "_tool_signal",
        "decode",
        "evaluate_every",
        "ladder",
        "signals",
        "trackers",
        "watch_lane",
    )

    def __init__(
        self,
        targets: Mapping[str, SLOTargets],
        *,
        watch_lane: str,
        ladder: FallbackLadder | None = None,
        evaluate_every: float = 1.0,
        signal_max_age: float = 10.0,
        max_tenants: int = 1024,
        cost_model: CostModel | None = None,
        tool_signal: ToolSignal | None = None,
    ) -> None:
        self.trackers = TrackerSet(targets, max_tenants=max_tenants, cost_model=cost_model)
        # Each lane's gap window and TBT bound (lane trackers always keep one).
        self._gap_windows: dict[str, tuple[GapWindow, float]] = {}
        for lane in self.trackers.lanes:
            tracker = self.trackers.lane(lane)
            window = tracker.gap_window
            assert window is not None
            self._gap_windows[lane] = (window, tracker.targets.slow_gap)
        self.watch_lane = watch_lane
        self.ladder = ladder
        self.evaluate_every = evaluate_every
        self.signals = SignalBoard(signal_max_age)
        self.decode = DecodeBaseline()
        self._reported: set[str] = set()
        self._tool_signal = tool_signal
        self._due = float("-inf")

    def record(self, finished: Finished, *, now: float) -> None:
        """Count a finished request the policy made (its timings come from checked
        monotonic times) in its lane's and tenant's trackers, at a checked ``now``;
        records from elsewhere go through :meth:`TrackerSet.record`, which checks."""
        self.trackers._record_checked(finished, now)

    def gap(self, entry: Entry, gap: float, *, now: float) -> None:
        """One gap of ``gap`` seconds between two chunks of ``entry``'s stream,
        at a checked ``now``: counted in its lane's TBT window and on the entry
        (``gaps``, and ``slow_gaps`` when above the lane's ``tbt_p99``)."""
        # Straight to the window: this runs once per chunk streamed. The gap
        # window is a ring of its own, so counting it now (not in the trackers'
        # next fold) reorders nothing.
        window, slow = self._gap_windows[entry.lane]
        window._add(gap, now)
        entry.gaps += 1
        if gap > slow:
            entry.slow_gaps += 1

    def record_rejected(self, lane: str, tenant: str, *, now: float) -> None:
        """Count a request refused at submit, at a checked ``now``."""
        self.trackers._record_rejected(lane, tenant, now)

    def observe(self, signals: EngineSignals) -> None:
        """Take the engine's latest report (fields left ``None`` are unchanged)."""
        self.signals.update(signals)
        self.decode.observe(signals)
        self._reported.update(name for name in SIGNAL_FIELDS if getattr(signals, name) is not None)

    def due(self, *, now: float) -> bool:
        """Whether an automatic ladder evaluation is due at ``now``."""
        return self.ladder is not None and now >= self._due

    @property
    def next_evaluation(self) -> float | None:
        """When the next automatic ladder evaluation is due (monotonic seconds;
        ``-inf`` before the first), or ``None`` without a ladder."""
        return None if self.ladder is None else self._due

    def pressure(self, *, now: float, kv_ledger: float, oldest_wait: float) -> Pressure:
        """The ladder's inputs at ``now``; see the module docstring."""
        tracker = self.trackers.lane(self.watch_lane)
        target = tracker.targets.ttft_target
        ttft = queued = tbt = 0.0
        if target is not None:
            ttft = (tracker.quantile("ttft", 0.95, now=now) or 0.0) / target
            queued = max(tracker.quantile("queue_wait", 0.95, now=now) or 0.0, oldest_wait) / target
        gap_target = tracker.targets.tbt_p99
        if gap_target is not None:
            tbt = (tracker.quantile("tbt", 0.99, now=now) or 0.0) / gap_target
        current = self.signals.current(now=now)
        return Pressure(
            ttft_p95_fraction=ttft,
            queue_wait_fraction=queued,
            kv_usage=self._known(current.kv_usage, "kv_usage", floor=kv_ledger),
            decode_tps_drop=self._known(self._decode_drop(current), "decode_tps"),
            tool_timeout_rate=self._tools(
                self._known(current.tool_timeout_rate, "tool_timeout_rate"), now
            ),
            tbt_p99_fraction=tbt,
        )

    def _tools(self, reported: float | None, now: float) -> float | None:
        """The tool timeout rate: the larger of ``reported`` and the pool's own."""
        own = None if self._tool_signal is None else self._tool_signal(now=now)
        if own is None:
            return reported
        return own if reported is None else max(own, reported)

    def _decode_drop(self, current: EngineSignals) -> float | None:
        # An engine known to run nothing is idle, not slow: no drop. (Unknown
        # here would pin the ladder, and a lane it paused could be all that is
        # left to run: the engine would stay idle and the lane paused for good.)
        if current.running == 0 and current.decode_tps is not None:
            return 0.0
        return self.decode.drop(current)

    def _known(self, value: float | None, name: str, floor: float = 0.0) -> float | None:
        if value is not None:
            return max(value, floor)
        # Never reported: the deployment has no such signal. Reported, now stale: unknown.
        return None if name in self._reported else floor

    def evaluate(self, *, now: float, kv_ledger: float, oldest_wait: float) -> LadderEvent | None:
        """Update the ladder from the current pressure; the move it made, if any."""
        self._due = now + self.evaluate_every
        if self.ladder is None:
            return None
        return self.ladder.update(
            self.pressure(now=now, kv_ledger=kv_ledger, oldest_wait=oldest_wait), now=now
        )

    def favour_waits(self) -> Mapping[str, float]:
        """The lanes the ladder puts first in dispatch now, each with the wait
        in seconds (its :meth:`FallbackLadder.favoured
        <slopolicy.core.ladder.ladder.FallbackLadder.favoured>` fraction of
        the lane's TTFT target) after which a queued request of it goes
        first (empty: none)."""
        if self.ladder is None or self.ladder.level == 0:  # no rung active: the usual case
            return {}
        waits = {}
        for lane, fraction in self.ladder.favoured().items():
            target = self.trackers.lane(lane).targets.ttft_target if fraction else None
            waits[lane] = 0.0 if target is None else fraction * target
        return waits

    def preempting(self, *, now: float) -> bool:
        """Whether the engine's latest fresh report has it preempting
        (``preemption_rate`` above 0: it evicts running requests for want of
        KV blocks); ``False`` when it reports none or the report is stale."""
        rate = self.signals.current(now=now).preemption_rate
        return rate is not None and rate > 0.0

    def paused(self, lane: str) -> bool:
        """Whether the ladder holds ``lane`` (its requests queue but do not start)."""
        if self.ladder is None or self.ladder.level == 0:  # no rung active: the usual case
            return False
        return any(
            rung.admission(lane) is AdmissionAction.PAUSE for rung in self.ladder.active_rungs
        )

    @property
    def settle_time(self) -> float | None:
        """Seconds of constant ladder inputs after which the fallback ladder has
        made every move it will (at most ``top`` moves, each within
        ``max(dwell, cooldown)`` plus one evaluation period of the last), or
        ``None`` without a ladder."""
        ladder, every = self.ladder, self.evaluate_every
        if ladder is None:
            return None
        return ladder.top * (max(ladder.dwell, ladder.cooldown) + every) + every

    def overload(self) -> tuple[OverloadState, str]:
        """The overload state and why."""
        if self.ladder is None:
            return OverloadState.NORMAL, "no fallback ladder configured"
        return overload_state(self.ladder)

    def tbt_p99(self, *, now: float) -> dict[str, float | None]:
        """Each lane's p99 gap between tokens at ``now`` (the latest the policy
        has seen, so the read moves no window), seconds; ``None`` when none."""
        if now == -math.inf:  # nothing seen yet
            return dict.fromkeys(self.trackers.lanes)
        trackers = self.trackers
        return {lane: trackers.lane(lane).quantile("tbt", 0.99, now=now) for lane in trackers.lanes}

    def snapshots(self, *, now: float) -> tuple[SLOSnapshot, ...]:
        """SLO snapshots of every lane and tracked tenant."""
        return tuple(self.trackers.snapshots(now=now))

    def diagnose(self, *, now: float) -> list[Finding]:
        """Likely causes of what the trackers and signals show, most severe first."""
        current = self.signals.current(now=now)
        tools = self._tools(current.tool_timeout_rate, now)
        if tools != current.tool_timeout_rate:
            current = replace(current, tool_timeout_rate=tools)
        return diagnose(self.snapshots(now=now), current, decode_drop=self.decode.drop(current))
