"""The deadline index against a naive model: earliest deadline first, oldest per lane."""

from __future__ import annotations

import math

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from slopolicy import Request
from slopolicy.core.lifecycle import Entry, Phase
from slopolicy.core.queueing.deadlines import Deadlines

_LANES = {"fast": 2.0, "slow": 10.0, "open": math.inf}
_MIN_REBUILD = 4


class DeadlineIndex(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index = Deadlines(_LANES, min_rebuild=_MIN_REBUILD)  # small: rebuilds happen
        self.now = 0.0
        self.queued: list[Entry] = []
        self.peak = dict.fromkeys(_LANES, 0)
        self.early: set[str] = set()  # queued with their own, earlier deadline
        self.peak_heap = 0
        self.count = 0

    @rule(
        lane=st.sampled_from(sorted(_LANES)),
        own=st.none() | st.floats(0.0, 12.0),
        step=st.sampled_from([0.0, 0.0, 0.25, 1.0]),
    )
    def add(self, lane: str, own: float | None, step: float) -> None:
        self.now += step
        lane_deadline = self.now + _LANES[lane]
        deadline = lane_deadline if own is None else min(lane_deadline, self.now + own)
        self.count += 1
        request = Request(id=f"r{self.count}", prompt_tokens=1, max_new_tokens=1)
        entry = Entry(request, lane, 1.0, 1, 1, 1.0, self.now, deadline)
        self.index.add(entry, lane_deadline)
        self.queued.append(entry)
        if deadline < lane_deadline:
            self.early.add(entry.id)
            self.peak_heap = max(self.peak_heap, len(self.early & self._ids()))
        in_lane = sum(e.lane == lane for e in self.queued)
        self.peak[lane] = max(self.peak[lane], in_lane)

    def _ids(self) -> set[str]:
        return {e.id for e in self.queued}

    @precondition(lambda self: self.queued)
    @rule(data=st.data(), phase=st.sampled_from([Phase.RUNNING, Phase.DONE]))
    def leave(self, data: st.DataObject, phase: Phase) -> None:
        # Dispatched or cancelled, in any order: the index learns it lazily.
        entry = data.draw(st.sampled_from(self.queued))
        entry.phase = phase
        self.queued.remove(entry)

    @rule(step=st.floats(0.0, 5.0))
    def expire(self, step: float) -> None:
        self.now += step
        while True:
            entry = self.index.pop_overdue(now=self.now)
            overdue = [e for e in self.queued if e.deadline <= self.now]
            if entry is None:
                assert overdue == []
                return
            assert entry in overdue
            assert entry.deadline == min(e.deadline for e in overdue)
            entry.phase = Phase.DONE
            self.queued.remove(entry)

    @invariant()
    def next_is_the_earliest_queued_deadline(self) -> None:
        expected = min((e.deadline for e in self.queued), default=None)
        assert self.index.next() == expected

    @invariant()
    def the_floor_is_never_above_the_earliest_deadline(self) -> None:
        assert self.index.floor <= min((e.deadline for e in self.queued), default=math.inf)

    @invariant()
    def oldest_is_each_lanes_first_queued_arrival(self) -> None:
        for lane in _LANES:
            waiting = [e for e in self.queued if e.lane == lane]
            assert self.index.oldest(lane) is (waiting[0] if waiting else None)

    @invariant()
    def memory_is_bounded_by_twice_the_peak(self) -> None:
        for lane, fifo in self.index._fifos.items():
            assert len(fifo.entries) <= max(_MIN_REBUILD, 2 * self.peak[lane]) + 1
        assert len(self.index._heap) <= max(_MIN_REBUILD, 2 * self.peak_heap) + 1


TestDeadlineIndex = DeadlineIndex.TestCase


def test_entries_left_behind_a_waiting_head_are_dropped_in_rebuilds() -> None:
    index = Deadlines(["lane"], min_rebuild=4)
    head = _entry("head", 0.0, 10.0)
    index.add(head, 10.0)
    for k in range(100):  # each one dispatched before the head leaves
        entry = _entry(f"r{k}", 0.0, 10.0)
        index.add(entry, 10.0)
        entry.phase = Phase.RUNNING
    assert len(index._fifos["lane"].entries) <= 4
    assert index.oldest("lane") is head


def _entry(name: str, arrival: float, deadline: float) -> Entry:
    request = Request(id=name, prompt_tokens=1, max_new_tokens=1)
    return Entry(request, "lane", 1.0, 1, 1, 1.0, arrival, deadline)
