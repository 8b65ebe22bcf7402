"""The ladder's hysteresis against a naive model that rescans the whole history."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from slopolicy.core.ladder.events import LadderCause, LadderDirection, LadderEvent
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.pressure import Pressure, Trigger
from slopolicy.core.ladder.rungs import Rung

ENTER, EXIT = 0.8, 0.6
# Values on, around and between the thresholds, and unknown.
VALUES = (None, 0.0, 0.3, 0.59, EXIT, 0.7, 0.79, ENTER, 0.95, 1.5)
KNOWN = tuple(value for value in VALUES if value is not None)
COOL = tuple(value for value in KNOWN if value < EXIT)
Values = tuple["float | None", ...]


def _retriever(pressure: Pressure) -> float | None:
    return pressure.extra.get("retriever")


TRIGGERS = (
    Trigger("ttft_p95_fraction", ENTER, EXIT),
    Trigger("kv_usage", ENTER, EXIT),
    Trigger("retriever", ENTER, EXIT, read=_retriever),
)


def _pressure(values: Values) -> Pressure:
    ttft, kv, retriever = values
    return Pressure(ttft_p95_fraction=ttft, kv_usage=kv, extra={"retriever": retriever})


def _hot(values: Values) -> bool:
    return any(value is not None and value >= ENTER for value in values)


def _cool(values: Values) -> bool:
    return all(value is not None and value < EXIT for value in values)


def _rising(values: Values, before: Values) -> bool:
    pairs = list(zip(values, before, strict=True))
    if any(v is None or b is None for v, b in pairs):
        return False
    known = [(v, b) for v, b in pairs if v is not None and b is not None]
    return all(v >= b for v, b in known) and any(v > b for v, b in known)


@dataclass
class Model:
    """Recomputes each decision from the full update history."""

    top: int
    dwell: float
    cooldown: float
    level: int = 0

    def __post_init__(self) -> None:
        self.history: list[tuple[float, Values]] = []
        self.moves: list[tuple[float, int, int]] = []

    def decide(self, now: float, values: Values) -> int:
        """Feed one update; the new level."""
        if self.history:
            now = max(now, self.history[-1][0])
        before = self.history[-1][1] if self.history else None
        self.history.append((now, values))
        last = self.moves[-1][0] if self.moves else None
        may_move = last is None or now - last >= self.dwell
        target = self.level
        if _hot(values):
            if self.level < self.top and may_move:
                target = self.level + 1
        elif _cool(values) and self.level > 0 and may_move:
            start = now
            for when, seen in reversed(self.history):
                if (last is not None and when < last) or not _cool(seen):
                    break
                start = when
            rising = before is not None and _rising(values, before)
            if now - start >= self.cooldown and not rising:
                target = self.level - 1
        if target != self.level:
            self.moves.append((now, self.level, target))
            self.level = target
        return target


class LadderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.values: Values = (None, None, None)
        self.events: list[LadderEvent] = []
        self.event_updates: list[int] = []  # index into updates of each event's update
        self.updates: list[tuple[float, Values, int, int]] = []  # at, values, before, after

    @initialize(
        top=st.integers(1, 6),
        dwell=st.sampled_from([0.5, 1.0, 2.0]),
        cooldown=st.sampled_from([0.5, 1.0, 3.0]),
        start=st.sampled_from([0.0, 100.0]),
    )
    def build(self, top: int, dwell: float, cooldown: float, start: float) -> None:
        rungs = [Rung(f"rung{i}", marker=True) for i in range(1, top + 1)]
        self.ladder = FallbackLadder(rungs, TRIGGERS, dwell=dwell, cooldown=cooldown)
        self.model = Model(top, dwell, cooldown)
        self.now = start

    def _feed(self, values: Values, now: float | None = None) -> None:
        at = self.now if now is None else now
        before = self.ladder.level
        event = self.ladder.update(_pressure(values), now=at)
        expected = self.model.decide(at, values)
        assert self.ladder.level == expected
        assert (event is not None) == (expected != before)
        effective = self.model.history[-1][0]
        self.updates.append((effective, values, before, self.ladder.level))
        if event is not None:
            assert event.at == effective
            self.events.append(event)
            self.event_updates.append(len(self.updates) - 1)
        self.values = values
        if self.updates and len(self.updates) >= 2:
            previous = self.updates[-2][1]
            if _rising(values, previous):  # the rung never falls while pressure rises
                assert self.ladder.level >= before
        if any(value is None for value in values):  # unknown never steps down
            assert self.ladder.level >= before

    @rule(dt=st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 2.5, 4.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(values=st.tuples(*[st.sampled_from(VALUES)] * 3))
    def update(self, values: Values) -> None:
        self._feed(values)

    @rule()
    def update_same(self) -> None:
        self._feed(self.values)

    @rule(values=st.tuples(*[st.sampled_from(COOL)] * 3))
    def update_cool(self, values: Values) -> None:
        self._feed(values)

    @rule(data=st.data(), cool=st.booleans())
    def update_rising(self, data: st.DataObject, cool: bool) -> None:
        pool = COOL if cool and _cool(self.values) else KNOWN
        values = tuple(
            data.draw(st.sampled_from([v for v in pool if v >= (b if b is not None else 0.0)]))
            for b in self.values
        )
        self._feed(values)

    @precondition(lambda self: self.now > 0)
    @rule(back=st.sampled_from([0.25, 1.0, 10.0]), values=st.tuples(*[st.sampled_from(VALUES)] * 3))
    def update_in_the_past(self, back: float, values: Values) -> None:
        self._feed(values, now=self.now - back)

    @invariant()
    def level_in_range(self) -> None:
        assert 0 <= self.ladder.level <= self.ladder.top

    @invariant()
    def at_most_one_rung_per_dwell(self) -> None:
        for earlier, later in itertools.pairwise(self.events):
            assert later.at - earlier.at >= self.ladder.dwell
            assert later.from_level == earlier.to_level
        for event in self.events:
            assert abs(event.to_level - event.from_level) == 1

    @invariant()
    def steps_down_only_after_a_full_cooldown_below_exit(self) -> None:
        previous = 0
        for event, index in zip(self.events, self.event_updates, strict=True):
            floor, previous = previous, index
            if event.direction is not LadderDirection.DOWN:
                continue
            assert event.cause is LadderCause.COOLDOWN
            assert all(reading.value < reading.exit for reading in event.readings)
            assert len(event.readings) == len(TRIGGERS)
            # An unbroken cool run since the previous move began a cooldown before the step.
            first = index
            while first > floor and _cool(self.updates[first - 1][1]):
                first -= 1
            assert event.at - self.updates[first][0] >= self.ladder.cooldown

    @invariant()
    def climbs_name_hot_triggers(self) -> None:
        for event in self.events:
            if event.direction is LadderDirection.UP:
                assert event.cause is LadderCause.PRESSURE
                assert event.readings
                assert all(reading.value >= reading.enter for reading in event.readings)

    @invariant()
    def statistics_agree(self) -> None:
        stats = self.ladder.statistics()
        assert stats.level == self.ladder.level
        assert stats.climbs - stats.descents == stats.level
        assert stats.moves == len(self.events)
        assert sum(stats.activations.values()) == stats.climbs
        if self.updates:
            span = self.updates[-1][0] - self.updates[0][0]
            assert math.isclose(sum(stats.time_by_level), span, abs_tol=1e-9)


LadderMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60)
TestLadderHysteresis = LadderMachine.TestCase


@settings(max_examples=150)
@given(
    climb_to=st.integers(0, 4),
    values=st.tuples(*[st.sampled_from(VALUES)] * 3),
    interval=st.sampled_from([0.25, 0.5, 1.0, 3.0]),
)
def test_constant_pressure_moves_one_way_and_settles(
    climb_to: int, values: Values, interval: float
) -> None:
    ladder = FallbackLadder(
        [Rung(f"rung{i}", marker=True) for i in range(1, 5)], TRIGGERS, dwell=1.0, cooldown=2.0
    )
    now = 0.0
    hot = (1.0, None, None)
    while ladder.level < climb_to:
        ladder.update(_pressure(hot), now=now)
        now += 1.0
    levels = []
    for _ in range(200):  # 200 updates span more than 4 rungs x (cooldown + dwell)
        ladder.update(_pressure(values), now=now)
        levels.append(ladder.level)
        now += interval
    steps = {b - a for a, b in itertools.pairwise(levels)} - {0}
    assert len(steps) <= 1  # monotone: only climbs, or only descents
    if _hot(values):
        assert levels[-1] == ladder.top
    elif _cool(values):
        assert levels[-1] == 0
    else:  # warm or unknown: holds wherever it was
        assert levels[-1] == climb_to
