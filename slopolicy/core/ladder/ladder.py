"""The fallback ladder: degrade one rung at a time before the engine falls over.

Level 0 is normal; level ``k`` means rungs ``1..k`` are active. Each
:meth:`FallbackLadder.update` classifies every trigger's value as hot, warm,
cool or unknown (see :mod:`slopolicy.core.ladder.pressure`) and moves at most one
rung. Time is the caller's monotonic ``now`` in seconds; a ``now`` earlier
than one already seen counts as the latest.

Hysteresis, precisely:

* **Climb** on an update where any trigger is hot, unless the ladder is at
  the top or moved less than ``dwell`` seconds ago. The first climb is
  immediate: enter thresholds already sit below the SLO (0.8 of the TTFT
  target by default), so waiting a dwell would spend the budget the ladder
  exists to protect. Hot wins whatever other triggers say, unknown included.
* **Step down** on an update where every trigger is cool (known and below
  its exit) and has been on every update for at least ``cooldown`` seconds,
  the last move was at least ``dwell`` ago, and pressure is not rising
  (rising: since the previous update no value fell and at least one grew;
  pressure creeping back toward the band holds the level until it stops).
  The run of cool updates starts at the first cool update after the last
  move, or at the step down itself, so each further rung down waits a full
  ``cooldown`` more.
* **Hold** otherwise: a warm value (inside the hysteresis band) or an
  unknown one ends the cool run, so the cooldown restarts from the next
  all-cool update. Unknown therefore never relieves pressure and never
  causes a step down; a trigger that stays unknown pins the level.

Consecutive moves, in either direction, are always at least ``dwell`` apart.
Every move is returned as a :class:`~slopolicy.core.ladder.events.LadderEvent`.
:meth:`FallbackLadder.apply` runs the active rungs' request transforms and
:meth:`FallbackLadder.admission` answers for the admission rungs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slopolicy.core.checks import check_now
from slopolicy.core.ladder.events import (
    LadderCause,
    LadderDirection,
    LadderEvent,
    LadderStatistics,
    LadderVerdict,
)
from slopolicy.core.ladder.pressure import Pressure, Reading, Trigger, Zone
from slopolicy.core.ladder.rungs import AdmissionAction, Rung
from slopolicy.core.request import Request
from slopolicy.errors import UsageError

__all__ = ("FallbackLadder",)


def _positive_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be positive and finite, got {value}")
    return float(value)


def _unique(kind: str, names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise UsageError(f"{kind} names must be unique, got {list(names)}")


class FallbackLadder:
    """Climbs rungs under pressure and comes back down after a quiet cooldown.

    ``rungs`` are in climbing order, mildest first; ``triggers`` are read from
    each :class:`Pressure`. ``dwell`` is the least time between two moves and
    ``cooldown`` the all-cool time a step down needs, both in seconds.
    """

    __slots__ = (
        "_activations",
        "_applied",
        "_cool_since",
        "_cooldown",
        "_dwell",
        "_held",
        "_last_event",
        "_last_move",
        "_latest",
        "_level",
        "_previous",
        "_rungs",
        "_since",
        "_time_by_level",
        "_triggers",
    )

    def __init__(
        self,
        rungs: Sequence[Rung],
        triggers: Sequence[Trigger],
        *,
        dwell: float,
        cooldown: float,
    ) -> None:
        self._rungs = tuple(rungs)
        self._triggers = tuple(triggers)
        if not self._rungs or not all(isinstance(rung, Rung) for rung in self._rungs):
            raise UsageError("a ladder needs at least one Rung")
        if not self._triggers or not all(isinstance(t, Trigger) for t in self._triggers):
            raise UsageError("a ladder needs at least one Trigger")
        _unique("rung", [rung.name for rung in self._rungs])
        _unique("trigger", [trigger.name for trigger in self._triggers])
        self._dwell = _positive_seconds("dwell", dwell)
        self._cooldown = _positive_seconds("cooldown", cooldown)
        self._level = 0
        self._latest: float | None = None
        self._last_move: float | None = None
        self._cool_since: float | None = None
        self._previous: tuple[float | None, ...] | None = None
        self._since: float | None = None
        self._time_by_level = [0.0] * (len(self._rungs) + 1)
        self._last_event: LadderEvent | None = None
        self._activations = dict.fromkeys((rung.name for rung in self._rungs), 0)
        self._applied = dict(self._activations)
        self._held = dict(self._activations)

    def __repr__(self) -> str:
        rung = self.active_rungs[-1].name if self._level else None
        return f"<FallbackLadder level={self._level}/{self.top} rung={rung!r}>"

    @property
    def rungs(self) -> tuple[Rung, ...]:
        """Every rung, in climbing order."""
        return self._rungs

    @property
    def triggers(self) -> tuple[Trigger, ...]:
        """Every trigger."""
        return self._triggers

    @property
    def dwell(self) -> float:
        """Least time between two moves, in seconds."""
        return self._dwell

    @property
    def cooldown(self) -> float:
        """All-cool time a step down needs, in seconds."""
        return self._cooldown

    @property
    def top(self) -> int:
        """The highest level: the number of rungs."""
        return len(self._rungs)

    @property
    def level(self) -> int:
        """Current level: 0 is normal, ``k`` means rungs ``1..k`` are active."""
        return self._level

    @property
    def active_rungs(self) -> tuple[Rung, ...]:
        """The active rungs, in climbing order."""
        return self._rungs[: self._level]

    def favoured(self) -> Mapping[str, float]:
        """The lanes whose queued requests start first now, each with the
        fraction of its TTFT target a request must have waited first: the
        active rungs' ``favor_lanes`` and the least of their ``favor_after``
        (empty at level 0)."""
        lanes: dict[str, float] = {}
        for rung in self._rungs[: self._level]:
            for lane in rung.favor_lanes:
                lanes[lane] = min(lanes.get(lane, 1.0), rung.favor_after)
        return lanes

    @property
    def last_event(self) -> LadderEvent | None:
        """The most recent move, if any."""
        return self._last_event

    def update(self, pressure: Pressure, *, now: float) -> LadderEvent | None:
        """Feed the trigger inputs at ``now`` (monotonic seconds); the move made, if any."""
        if not isinstance(pressure, Pressure):
            raise UsageError(f"update() takes a Pressure, got {type(pressure).__name__}")
        check_now(now)
        # Read every trigger before changing anything: a bad reader leaves no trace.
        values = tuple(trigger.value(pressure) for trigger in self._triggers)
        now = float(now) if self._latest is None else max(float(now), self._latest)
        self._latest = now
        if self._since is None:
            self._since = now
        zones = [trigger.zone(value) for trigger, value in zip(self._triggers, values, strict=True)]
        rising = self._rising(values)
        self._previous = values
        cool = all(zone is Zone.COOL for zone in zones)
        if not cool:
            self._cool_since = None
        elif self._cool_since is None:
            self._cool_since = now
        hot = [
            trigger.reading(value)
            for trigger, value, zone in zip(self._triggers, values, zones, strict=True)
            if zone is Zone.HOT and value is not None
        ]
        if hot:
            return self._climb(now, tuple(hot))
        if cool and not rising:
            return self._descend(now, values)
        return None

    def _rising(self, values: tuple[float | None, ...]) -> bool:
        previous = self._previous
        if previous is None:
            return False
        known = [
            (v, b) for v, b in zip(values, previous, strict=True) if v is not None and b is not None
        ]
        if len(known) != len(values):  # not comparable; unknown blocks a step down anyway
            return False
        return all(v >= b for v, b in known) and any(v > b for v, b in known)

    def _may_move(self, now: float) -> bool:
        return self._last_move is None or now - self._last_move >= self.dwell

    def _climb(self, now: float, hot: tuple[Reading, ...]) -> LadderEvent | None:
        if self._level >= self.top or not self._may_move(now):
            return None
        return self._move(now, self._level + 1, LadderCause.PRESSURE, hot)

    def _descend(self, now: float, values: tuple[float | None, ...]) -> LadderEvent | None:
        cool_since = self._cool_since
        if self._level == 0 or cool_since is None or not self._may_move(now):
            return None
        if now - cool_since < self.cooldown:
            return None
        readings = tuple(
            trigger.reading(value)
            for trigger, value in zip(self._triggers, values, strict=True)
            if value is not None
        )
        event = self._move(now, self._level - 1, LadderCause.COOLDOWN, readings)
        self._cool_since = now  # the next rung down waits a full cooldown of its own
        return event

    def _move(
        self, now: float, to_level: int, cause: LadderCause, readings: tuple[Reading, ...]
    ) -> LadderEvent:
        assert self._since is not None
        from_level = self._level
        self._time_by_level[from_level] += now - self._since
        self._since = now
        self._level = to_level
        self._last_move = now
        if to_level > from_level:
            rung = self._rungs[to_level - 1].name
            self._activations[rung] += 1
            direction = LadderDirection.UP
        else:
            rung = self._rungs[from_level - 1].name
            direction = LadderDirection.DOWN
        event = LadderEvent(
            at=now,
            from_level=from_level,
            to_level=to_level,
            rung=rung,
            direction=direction,
            cause=cause,
            readings=readings,
        )
        self._last_event = event
        return event

    def apply(self, request: Request, lane: str) -> tuple[Request, tuple[str, ...]]:
        """``request`` with the active rungs' transforms composed in climbing
        order, for a request routed to ``lane``; and the names of the rungs
        that changed it or marked it (markers are listed, the host acts)."""
        applied: list[str] = []
        for rung in self.active_rungs:
            if not rung.covers(lane):
                continue
            if rung.marker:
                applied.append(rung.name)
            elif rung.transform is not None:
                changed = rung.transform(request, lane)
                _check_transformed(rung, request, changed)
                if changed != request:
                    applied.append(rung.name)
                    request = changed
        for name in applied:
            self._applied[name] += 1
        return request, tuple(applied)

    def sheds(self, lane: str) -> bool:
        """Whether an active rung sheds new requests in ``lane`` now."""
        return _sheds(self.active_rungs, lane)

    def may_shed(self, lane: str) -> bool:
        """Whether any rung, active or not, sheds new requests in ``lane``."""
        return _sheds(self._rungs, lane)

    def admission(self, lane: str, *, shed: bool = True) -> LadderVerdict | None:
        """Whether a new request in ``lane`` is held or refused now: the verdict
        of the highest active rung that acts on it, or ``None``. ``shed=False``
        spares it the shedding rungs (its tenant is within its fair share)."""
        for rung in reversed(self.active_rungs):
            action = rung.admission(lane, shed=shed)
            if action is None:
                continue
            retry_after = self.cooldown if rung.retry_after is None else rung.retry_after
            if action is AdmissionAction.SHED:
                message = f"lane {lane!r} shed by the fallback ladder ({rung.name})"
            else:
                message = f"lane {lane!r} paused by the fallback ladder ({rung.name})"
            self._held[rung.name] += 1
            return LadderVerdict(action, lane, rung.name, retry_after, message)
        return None

    def protection(self, lane: str) -> LadderVerdict | None:
        """The verdict shedding by share gives a new request in ``lane`` while
        the ladder reads pressure (level 1 or more) and no active rung sheds
        ``lane`` yet: the refusal of the first rung that would shed it, or
        ``None`` (level 0, or no rung ever sheds ``lane``). The policy asks
        only for a tenant over its max-min share while another is within
        its share: that excess goes before anyone is degraded (see
        :mod:`slopolicy.core.policy.intake`)."""
        if self._level == 0 or self.sheds(lane):
            return None
        for rung in self._rungs:
            if rung.admission(lane) is AdmissionAction.SHED:
                retry_after = self.cooldown if rung.retry_after is None else rung.retry_after
                message = (
                    f"lane {lane!r} shed by share under pressure (level {self._level}, "
                    f"before {rung.name!r})"
                )
                self._held[rung.name] += 1
                return LadderVerdict(AdmissionAction.SHED, lane, rung.name, retry_after, message)
        return None

    def statistics(self, *, now: float | None = None) -> LadderStatistics:
        """A frozen snapshot; ``now`` (monotonic seconds) defaults to the latest seen."""
        latest = self._latest
        if now is not None:
            check_now(now)
            if latest is not None:
                latest = max(float(now), latest)
        by_level = list(self._time_by_level)
        at_level = 0.0
        if self._since is not None and latest is not None:
            at_level = latest - self._since
            by_level[self._level] += at_level
        climbs = sum(self._activations.values())
        return LadderStatistics(
            level=self._level,
            rung=self._rungs[self._level - 1].name if self._level else None,
            since=self._since,
            time_at_level=at_level,
            time_by_level=tuple(by_level),
            climbs=climbs,
            descents=climbs - self._level,
            activations=dict(self._activations),
            applied=dict(self._applied),
            held=dict(self._held),
        )


def _sheds(rungs: Sequence[Rung], lane: str) -> bool:
    return any(rung.admission(lane) is AdmissionAction.SHED for rung in rungs)


def _check_transformed(rung: Rung, before: Request, after: object) -> None:
    if not isinstance(after, Request):
        raise UsageError(
            f"rung {rung.name!r} transform returned {type(after).__name__}, not a Request"
        )
    if after.id != before.id or after.tenant != before.tenant:
        raise UsageError(f"rung {rung.name!r} transform changed the request's id or tenant")
