from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from slopolicy.core.kv.ledger import KVReservation, KVStatistics
from slopolicy.errors import UsageError

_LANES = ("interactive", "heavy", "background")
_ANY_LANE = st.sampled_from((*_LANES, "adhoc", "other"))  # the last two never have a floor
_IDS = st.sampled_from([f"r{i}" for i in range(8)])  # few ids, so duplicates happen
_BACK = st.sampled_from([0.0, 0.0, 1.0])  # a caller's clock reading older than the latest


@st.composite
def _reserves(draw: st.DrawFn) -> dict[str, int]:
    """Percent of the pool per lane, summing below 100."""
    lanes = draw(st.lists(st.sampled_from(_LANES), unique=True, max_size=3))
    percents: dict[str, int] = {}
    left = 99
    for lane in lanes:
        percent = draw(st.integers(0, min(left, 60)))
        percents[lane] = percent
        left -= percent
    return percents


class _Model:
    """The naive ledger: everything recomputed from the live reservations."""

    def __init__(self, num_blocks: int, floors: dict[str, int], max_age: float | None) -> None:
        self.num_blocks = num_blocks
        self.floors = floors
        self.shared = num_blocks - sum(floors.values())
        self.max_age = max_age
        self.live: dict[str, tuple[str, int]] = {}
        self.unseen: dict[str, int] = {}
        self.now = 0.0  # the test's clock
        self.latest = -math.inf  # the latest ``now`` the ledger was given
        self.engine: int | None = None
        self.observed_at: float | None = None

    def used(self, lane: str) -> int:
        return sum(blocks for owner, blocks in self.live.values() if owner == lane)

    def lanes(self) -> set[str]:
        return set(self.floors) | {lane for lane, _ in self.live.values()}

    def at(self, back: float = 0.0) -> float:
        """A ``now`` to pass, ``back`` seconds behind the clock (an older reading)."""
        self.latest = max(self.latest, self.now - back)
        return self.now - back

    def engine_in_force(self) -> int | None:
        if self.observed_at is None:
            return None
        if self.max_age is not None and self.latest - self.observed_at > self.max_age:
            return None
        return self.engine

    def free(self, lane: str) -> int:
        overflow = sum(max(0, self.used(m) - self.floors.get(m, 0)) for m in self.lanes())
        unused = {m: max(0, r - self.used(m)) for m, r in self.floors.items()}
        ledger = unused.get(lane, 0) + self.shared - overflow
        engine_used = self.engine_in_force()
        if engine_used is None:
            return ledger
        others = sum(blocks for m, blocks in unused.items() if m != lane)
        engine = self.num_blocks - engine_used - sum(self.unseen.values()) - others
        return max(0, min(ledger, engine))


class KVMachine(RuleBasedStateMachine):
    kv: KVReservation
    model: _Model

    @initialize(
        num_blocks=st.integers(1, 300),
        block_size=st.sampled_from([1, 2, 16]),
        percents=_reserves(),
        max_age=st.none() | st.sampled_from([0.5, 5.0]),
    )
    def start(
        self, num_blocks: int, block_size: int, percents: dict[str, int], max_age: float | None
    ) -> None:
        reserves = {lane: percent / 100 for lane, percent in percents.items()}
        self.kv = KVReservation(num_blocks, block_size, reserves, max_observation_age=max_age)
        floors = {lane: percent * num_blocks // 100 for lane, percent in percents.items()}
        self.model = _Model(num_blocks, floors, max_age)

    def _tokens(self, blocks: int, cut: int) -> int:
        # The fewest tokens that need ``blocks`` blocks, plus up to a block less one.
        size = self.kv.block_size
        return 0 if blocks <= 0 else (blocks - 1) * size + 1 + cut % size

    def _reserve(self, request_id: str, lane: str, blocks: int) -> None:
        now = self.model.at()  # first: the call's ``now`` may expire the engine reading
        expected = blocks <= self.model.free(lane)
        got = self.kv.try_reserve(request_id, lane, self._tokens(blocks, 7), now=now)
        assert got is expected
        if got:
            self.model.live[request_id] = (lane, blocks)
            self.model.unseen[request_id] = blocks

    @rule(request_id=_IDS, lane=_ANY_LANE, blocks=st.integers(0, 320))
    def reserve(self, request_id: str, lane: str, blocks: int) -> None:
        if request_id in self.model.live:
            self._expect_usage_error(
                lambda: self.kv.try_reserve(request_id, lane, 1, now=self.model.now)
            )
        else:
            self._reserve(request_id, lane, blocks)

    @rule(request_id=_IDS, lane=_ANY_LANE, slack=st.integers(-2, 2))
    def reserve_at_the_edge(self, request_id: str, lane: str, slack: int) -> None:
        if request_id not in self.model.live:
            self.model.at()
            self._reserve(request_id, lane, max(0, self.model.free(lane) + slack))

    @rule(request_id=_IDS, blocks=st.integers(0, 320), cut=st.integers(0, 15))
    def resize(self, request_id: str, blocks: int, cut: int) -> None:
        tokens = self._tokens(blocks, cut)
        if request_id not in self.model.live:
            self._expect_usage_error(lambda: self.kv.resize(request_id, tokens, now=self.model.now))
            return
        lane, held = self.model.live[request_id]
        now = self.model.at()
        expected = blocks - held <= self.model.free(lane)
        assert self.kv.resize(request_id, tokens, now=now) is expected
        if expected:
            self.model.live[request_id] = (lane, blocks)
            unseen = self.model.unseen.get(request_id, 0)
            if blocks > held:
                self.model.unseen[request_id] = unseen + blocks - held
            else:
                self.model.unseen[request_id] = max(0, unseen - (held - blocks))

    @rule(request_id=_IDS, slack=st.integers(-2, 2), cut=st.integers(0, 15))
    def resize_at_the_edge(self, request_id: str, slack: int, cut: int) -> None:
        if request_id in self.model.live:
            self.model.at()
            lane, held = self.model.live[request_id]
            self.resize(request_id, max(0, held + self.model.free(lane) + slack), cut)

    @rule(request_id=_IDS, back=_BACK)
    def release(self, request_id: str, back: float) -> None:
        held = self.model.live.pop(request_id, ("", 0))[1]
        self.model.unseen.pop(request_id, None)
        assert self.kv.release(request_id, now=self.model.at(back)) == held
        assert self.kv.release(request_id, now=self.model.at()) == 0

    @rule(request_id=_IDS, lane=_ANY_LANE, slack=st.integers(-2, 2), back=_BACK)
    def drop(self, request_id: str, lane: str, slack: int, back: float) -> None:
        # A revocation: the what-if asked before it is what the ledger says
        # after, at the edge of the room it makes, and the engine's reading
        # loses the blocks it had counted.
        if request_id not in self.model.live:
            self._expect_usage_error(
                lambda: self.kv.fits_without(lane, 1, held=1, without=request_id)
            )
            return
        blocks = max(0, self.kv.free_blocks(lane) + self.model.live[request_id][1] + slack)
        tokens = self._tokens(blocks, 3)
        expected = self.kv.fits_without(lane, tokens, held=tokens, without=request_id)
        held = self.model.live.pop(request_id)[1]
        seen = held - self.model.unseen.pop(request_id, 0)
        assert self.kv.release(request_id, now=self.model.at(back), dropped=True) == held
        if self.model.engine is not None:
            self.model.engine = max(0, self.model.engine - seen)
        assert self.kv.fits(lane, tokens, held=tokens) is expected

    @rule(used=st.integers(0, 300), back=_BACK)
    def observe(self, used: int, back: float) -> None:
        used = min(used, self.model.num_blocks)
        self.kv.observe(used / self.model.num_blocks, now=self.model.at(back))
        self.model.engine = used
        self.model.observed_at = self.model.latest
        self.model.unseen.clear()

    @rule(dt=st.sampled_from([0.0, 0.1, 1.0, 10.0]))
    def advance(self, dt: float) -> None:
        self.model.now += dt
        self.kv.release("never-reserved", now=self.model.at())  # the ledger sees time through calls

    @rule(
        call=st.sampled_from(
            [
                lambda kv, now: kv.try_reserve("new", "heavy", -1, now=now),
                lambda kv, now: kv.try_reserve("new", "", 1, now=now),
                lambda kv, now: kv.try_reserve("new", "heavy", 1, now=math.nan),
                lambda kv, now: kv.resize("r0", -5, now=now),
                lambda kv, now: kv.release("r0", now=math.inf),
                lambda kv, now: kv.release("r0", now=10**400),
                lambda kv, now: kv.try_reserve("new", "heavy", 10**400, now=now),
                lambda kv, now: kv.resize("r0", 1, now=1.7e18),
                lambda kv, now: kv.observe(1.5, now=now),
                lambda kv, now: kv.observe(-0.01, now=now),
                lambda kv, now: kv.observe(math.nan, now=now),
                lambda kv, now: kv.observe(0.5, now=math.nan),
                lambda kv, now: kv.blocks_for(-1),
                lambda kv, now: kv.free_blocks(""),
                lambda kv, now: kv.release("r0", now=now, dropped=1),
                lambda kv, now: kv.fits_without("heavy", 1, held=2, without="r0"),
                lambda kv, now: kv.fits_without("heavy", -1, held=0, without="r0"),
                lambda kv, now: kv.fits_without("heavy", 1, held=1, without=""),
            ]
        )
    )
    def bad_input(self, call: Callable[[KVReservation, float], object]) -> None:
        self._expect_usage_error(lambda: call(self.kv, self.model.now + 100.0))

    @rule()
    def release_everything(self) -> None:
        for request_id, (_, blocks) in list(self.model.live.items()):
            assert self.kv.release(request_id, now=self.model.at()) == blocks
        self.model.live.clear()
        self.model.unseen.clear()
        stats = self.kv.statistics()
        assert stats.used_blocks == 0
        assert stats.shared_used_blocks == 0
        assert stats.reservations == 0
        assert set(stats.used_by_lane.values()) <= {0}
        if stats.engine_used_blocks is None:
            for lane in self.model.lanes() | {"adhoc"}:
                floor = self.model.floors.get(lane, 0)
                assert self.kv.free_blocks(lane) == floor + self.model.shared

    def _expect_usage_error(self, call: Callable[[], object]) -> None:
        before = self.kv.statistics()
        free = {lane: self.kv.free_blocks(lane) for lane in (*_LANES, "adhoc")}
        with pytest.raises(UsageError):
            call()
        assert self.kv.statistics() == before
        assert free == {lane: self.kv.free_blocks(lane) for lane in (*_LANES, "adhoc")}

    @invariant()
    def ledger_is_the_sum_of_live_reservations(self) -> None:
        stats = self.kv.statistics()
        by_lane = {lane: self.model.used(lane) for lane in self.model.lanes()}
        assert dict(stats.used_by_lane) == {
            lane: used for lane, used in by_lane.items() if used or lane in self.model.floors
        }
        assert stats.used_blocks == sum(by_lane.values())
        assert stats.reservations == len(self.model.live)
        assert dict(stats.reserved_by_lane) == self.model.floors
        assert stats.unseen_blocks == sum(self.model.unseen.values())
        assert stats.engine_used_blocks == self.model.engine_in_force()
        assert stats.last_observed_at == self.model.observed_at

    @invariant()
    def the_pool_and_every_floor_hold(self) -> None:
        stats = self.kv.statistics()
        used = stats.used_by_lane
        assert stats.used_blocks <= stats.num_blocks
        overflow = sum(max(0, u - stats.reserved_by_lane.get(m, 0)) for m, u in used.items())
        assert overflow == stats.shared_used_blocks <= stats.shared_blocks
        for lane, floor in stats.reserved_by_lane.items():
            others = sum(u for m, u in used.items() if m != lane)
            assert others <= stats.num_blocks - floor

    @invariant()
    def free_blocks_match_the_model(self) -> None:
        for lane in (*_LANES, "adhoc"):
            free = self.kv.free_blocks(lane)
            assert free == self.model.free(lane) >= 0

    def teardown(self) -> None:
        if hasattr(self, "kv"):
            self.release_everything()


KVMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestKVLedger = KVMachine.TestCase


def _fill(kv: KVReservation, lane: str, blocks: int, now: float = 0.0, tag: str = "") -> bool:
    return kv.try_reserve(f"{lane}{tag}-{blocks}", lane, blocks * kv.block_size, now=now)


# -- construction and units ---------------------------------------------------------------


def test_floors_are_the_fraction_the_user_wrote() -> None:
    stats = KVReservation(100, 16, {"interactive": 0.29, "heavy": 0.0}).statistics()
    assert dict(stats.reserved_by_lane) == {"interactive": 29, "heavy": 0}
    assert stats.shared_blocks == 71
    assert KVReservation(7, 16, {"interactive": 0.5}).statistics().reserved_by_lane == {
        "interactive": 3
    }


@pytest.mark.parametrize(
    "reserves",
    [
        {"a": 0.7, "b": 0.2, "c": 0.1},  # sums to exactly 1, though the floats do not
        {"a": 1.0},
        {"a": -0.1},
        {"a": math.nan},
        {"a": True},
        {"": 0.1},
    ],
)
def test_bad_reserves_raise(reserves: dict[str, float]) -> None:
    with pytest.raises(UsageError):
        KVReservation(100, 16, reserves)


@pytest.mark.parametrize(
    ("num_blocks", "block_size", "max_age"),
    [(0, 16, None), (10, 0, None), (True, 16, None), (10, 16, 0.0), (10, 16, math.nan)],
)
def test_bad_pools_raise(num_blocks: int, block_size: int, max_age: float | None) -> None:
    with pytest.raises(UsageError):
        KVReservation(num_blocks, block_size, max_observation_age=max_age)


def test_blocks_for_rounds_up() -> None:
    kv = KVReservation(10, 16)
    assert [kv.blocks_for(t) for t in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]
    with pytest.raises(UsageError):
        kv.blocks_for(-1)


@given(
    prompt=st.integers(0, 5000),
    new=st.integers(0, 3000),
    sequences=st.integers(1, 8),
    block_size=st.sampled_from([1, 8, 16, 32]),
)
def test_tokens_needed_is_the_worst_case_in_blocks(
    prompt: int, new: int, sequences: int, block_size: int
) -> None:
    kv = KVReservation(10, block_size)
    tokens = kv.tokens_needed(prompt, new, sequences)
    # Full prompt blocks are shared; every sequence holds the partial one and its output.
    shared, tail = divmod(prompt, block_size)
    worst = shared + sequences * math.ceil((tail + new) / block_size)
    assert kv.blocks_for(tokens) == worst
    assert tokens >= prompt + new * sequences
    if sequences == 1:
        assert tokens == prompt + new


def test_tokens_needed_rejects_bad_counts() -> None:
    kv = KVReservation(10, 16)
    for args in ((-1, 1, 1), (1, -1, 1), (1, 1, 0)):
        with pytest.raises(UsageError):
            kv.tokens_needed(*args)


# -- the ledger ---------------------------------------------------------------------------


def test_lanes_without_a_floor_use_only_the_shared_pool() -> None:
    kv = KVReservation(10, 1, {"interactive": 0.5})
    assert kv.free_blocks("background") == kv.free_blocks("never-configured") == 5
    assert not _fill(kv, "background", 6)
    assert _fill(kv, "background", 5)
    assert kv.free_blocks("background") == 0
    assert kv.free_blocks("interactive") == 5
    assert _fill(kv, "interactive", 5)
    assert kv.free_blocks("interactive") == 0


def test_a_lane_overflows_its_floor_into_the_shared_pool() -> None:
    kv = KVReservation(10, 1, {"interactive": 0.3})
    assert _fill(kv, "interactive", 8)
    stats = kv.statistics()
    assert stats.shared_used_blocks == 5
    assert kv.free_blocks("background") == 2
    assert kv.free_blocks("interactive") == 2


def test_resize_shrinks_always_and_grows_only_when_it_fits() -> None:
    kv = KVReservation(10, 4)
    assert kv.try_reserve("a", "heavy", 20, now=0.0)  # 5 blocks
    assert kv.try_reserve("b", "heavy", 16, now=0.0)  # 4 blocks
    assert not kv.resize("a", 28, now=1.0)  # 7 blocks: 2 more than the 1 free
    assert kv.statistics().used_blocks == 9
    assert kv.resize("a", 24, now=1.0)  # 6 blocks
    assert kv.resize("a", 0, now=2.0)
    assert kv.statistics().used_blocks == 4
    assert kv.release("a", now=3.0) == 0  # shrunk to nothing, still released once
    assert kv.release("a", now=3.0) == 0
    with pytest.raises(UsageError):
        kv.resize("a", 4, now=3.0)


def test_a_duplicate_id_raises_and_changes_nothing() -> None:
    kv = KVReservation(10, 1)
    assert kv.try_reserve("a", "heavy", 3, now=0.0)
    before = kv.statistics()
    with pytest.raises(UsageError):
        kv.try_reserve("a", "heavy", 1, now=1.0)
    assert kv.statistics() == before


def test_statistics_are_frozen_and_hashable() -> None:
    stats = KVReservation(10, 1, {"interactive": 0.2}).statistics()
    assert isinstance(stats, KVStatistics)
    hash(stats)
    with pytest.raises(TypeError):
        stats.used_by_lane["interactive"] = 5  # type: ignore[index]


# -- engine reconciliation ----------------------------------------------------------------


def test_engine_using_more_than_the_ledger_leaves_less_free() -> None:
    kv = KVReservation(100, 1)
    assert _fill(kv, "heavy", 10)
    kv.observe(0.5, now=1.0)  # 40 blocks of traffic we never saw
    assert kv.free_blocks("heavy") == 50
    assert _fill(kv, "heavy", 20, 2.0)  # not seen by the engine yet
    assert kv.free_blocks("heavy") == 30
    assert not _fill(kv, "heavy", 31, 2.0, "b")
    assert kv.statistics().engine_used_blocks == 50


def test_a_stale_low_reading_cannot_exceed_the_ledger() -> None:
    kv = KVReservation(100, 1)
    assert _fill(kv, "heavy", 80)
    kv.observe(0.1, now=1.0)  # the engine has only allocated the prompts so far
    assert kv.free_blocks("heavy") == 20
    assert not _fill(kv, "heavy", 21, 2.0)
    assert _fill(kv, "heavy", 20, 2.0)


def test_the_engine_view_never_spends_another_lanes_floor() -> None:
    kv = KVReservation(100, 1, {"interactive": 0.2})
    kv.observe(0.5, now=0.0)  # foreign traffic
    assert kv.free_blocks("background") == 30
    assert kv.free_blocks("interactive") == 50
    assert _fill(kv, "interactive", 15)
    assert kv.free_blocks("background") == 30 - 15 + 15  # its floor was already excluded


def test_releasing_blocks_the_engine_never_saw_gives_them_back_at_once() -> None:
    kv = KVReservation(100, 1)
    assert _fill(kv, "heavy", 30)
    kv.observe(0.3, now=1.0)
    assert _fill(kv, "heavy", 20, 2.0, "new")
    assert kv.free_blocks("heavy") == 50
    assert kv.release("heavy-30", now=3.0) == 30  # seen: stays used until the next reading
    assert kv.free_blocks("heavy") == 50
    assert kv.release("heavynew-20", now=3.0) == 20  # unseen: back at once
    assert kv.free_blocks("heavy") == 70
    kv.observe(0.0, now=4.0)
    assert kv.free_blocks("heavy") == 100


def test_an_old_observation_stops_counting() -> None:
    kv = KVReservation(100, 1, max_observation_age=5.0)
    kv.observe(1.0, now=0.0)
    assert kv.free_blocks("heavy") == 0
    assert not kv.try_reserve("a", "heavy", 1, now=5.0)
    assert kv.try_reserve("a", "heavy", 1, now=5.5)
    assert kv.statistics().engine_used_blocks is None
    assert kv.statistics().last_observed_at == 0.0


def test_a_float_reading_rounds_to_the_block_it_means() -> None:
    kv = KVReservation(10, 16)
    kv.observe(0.1 + 0.2, now=0.0)  # 0.30000000000000004
    assert kv.statistics().engine_used_blocks == 3
    kv.observe(0.25, now=1.0)  # 2.5 blocks: round up, the engine holds part of one
    assert kv.statistics().engine_used_blocks == 3


def test_an_earlier_now_counts_as_the_latest() -> None:
    kv = KVReservation(100, 1, max_observation_age=5.0)
    kv.observe(1.0, now=10.0)
    assert not kv.try_reserve("a", "heavy", 1, now=3.0)  # not 7 s before the reading
    assert kv.statistics().last_observed_at == 10.0


@pytest.mark.parametrize("usage", [1.0000001, -0.5, math.nan, math.inf, True])
def test_bad_readings_raise_and_change_nothing(usage: float) -> None:
    kv = KVReservation(10, 1)
    kv.observe(0.2, now=0.0)
    before = kv.statistics()
    with pytest.raises(UsageError):
        kv.observe(usage, now=1.0)
    assert kv.statistics() == before
