from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.health.signals import DecodeBaseline, EngineSignals, SignalBoard
from slopolicy.errors import UsageError


def test_age_and_staleness() -> None:
    signals = EngineSignals(observed_at=100.0, kv_usage=0.5)
    assert signals.age(now=103.0) == 3.0
    assert signals.age(now=90.0) == 0.0
    assert not signals.is_stale(now=105.0, max_age=5.0)
    assert signals.is_stale(now=105.5, max_age=5.0)
    assert not signals.empty
    assert EngineSignals(observed_at=0.0).empty


def test_stale_fields_read_as_unknown_never_as_healthy() -> None:
    board = SignalBoard(max_age=10.0)
    board.update(
        EngineSignals(
            observed_at=100.0, kv_usage=0.4, running=8, decode_tps=400.0, preemption_rate=0.5
        )
    )
    board.update(EngineSignals(observed_at=105.0, tool_timeout_rate=0.2))  # another scraper
    now = board.current(now=108.0)
    assert (now.kv_usage, now.running, now.tool_timeout_rate) == (0.4, 8, 0.2)
    assert now.preemption_rate == 0.5
    assert now.observed_at == 100.0  # the oldest number returned
    later = board.current(now=112.0)  # engine numbers are 12 s old: unknown
    assert later.kv_usage is None
    assert later.running is None
    assert later.decode_tps is None
    assert later.preemption_rate is None
    assert later.tool_timeout_rate == 0.2
    assert later.observed_at == 105.0
    gone = board.current(now=200.0)
    assert gone.empty
    assert board.current(now=108.0).empty  # an earlier now counts as the latest seen
    assert board.age("kv_usage", now=200.0) == 100.0
    assert board.age("waiting", now=200.0) is None


def test_older_reports_do_not_overwrite_newer_ones() -> None:
    board = SignalBoard()
    board.update(EngineSignals(observed_at=50.0, kv_usage=0.9))
    board.update(EngineSignals(observed_at=40.0, kv_usage=0.1, waiting=3))
    current = board.current(now=48.0)
    assert current.kv_usage == 0.9
    assert current.waiting == 3  # nothing newer held for it


@given(
    st.lists(st.tuples(st.floats(0, 1000), st.none() | st.floats(0, 1)), min_size=1, max_size=20),
    st.floats(0, 1100),
)
def test_the_board_answers_the_newest_fresh_value(
    reports: list[tuple[float, float | None]], now: float
) -> None:
    board = SignalBoard(max_age=10.0)
    for at, kv in reports:
        board.update(EngineSignals(observed_at=at, kv_usage=kv))
    known = [(at, kv) for at, kv in reports if kv is not None]
    newest = max(known, key=lambda pair: pair[0], default=None)
    answer = board.current(now=now).kv_usage
    if newest is None or now - newest[0] > 10.0:
        assert answer is None
    else:
        assert answer in {kv for at, kv in known if at == newest[0]}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kv_usage": 1.5},
        {"tool_timeout_rate": -0.1},
        {"waiting": -1},
        {"decode_tps": math.inf},
        {"preemption_rate": -1.0},
        {"preemption_rate": math.inf},
        {"observed_at": math.nan},
    ],
)
def test_impossible_signals_are_refused(kwargs: dict[str, float]) -> None:
    values: dict[str, float] = {"observed_at": 0.0} | kwargs
    with pytest.raises(UsageError):
        EngineSignals(**values)  # type: ignore[arg-type]


def _at(t: float, running: int, tps: float) -> EngineSignals:
    return EngineSignals(observed_at=t, running=running, decode_tps=tps)


def test_decode_drop_is_measured_at_similar_load() -> None:
    baseline = DecodeBaseline(warmup=3)
    for step in range(10):
        baseline.observe(_at(step, 8, 8 * 50.0))  # 50 tok/s per request at 8 running
        baseline.observe(_at(step, 1, 90.0))  # a lone request decodes faster
    assert baseline.baseline(8) == pytest.approx(50.0)
    assert baseline.baseline(12) == pytest.approx(50.0)  # same band: 8-15
    assert baseline.baseline(1) == pytest.approx(90.0)
    assert baseline.drop(_at(20, 10, 10 * 30.0)) == pytest.approx(0.4)
    assert baseline.drop(_at(20, 8, 8 * 60.0)) == 0.0  # faster is no drop
    assert baseline.drop(_at(20, 3, 100.0)) is None  # band 2-3 never seen
    assert baseline.drop(_at(20, 0, 0.0)) is None  # nothing decoding
    assert baseline.drop(EngineSignals(observed_at=20)) is None


def test_a_slow_engine_does_not_teach_the_baseline_that_slow_is_normal() -> None:
    baseline = DecodeBaseline(warmup=2, half_life_s=60.0)
    for step in range(5):
        baseline.observe(_at(step, 4, 4 * 50.0))
    for step in range(5, 500):
        assert baseline.observe(_at(step, 4, 4 * 20.0)) == pytest.approx(0.6)
    assert baseline.baseline(4) == pytest.approx(50.0)
    # Small healthy drifts are learned (time-weighted).
    for step in range(500, 1000):
        baseline.observe(_at(step, 4, 4 * 46.0))
    assert baseline.baseline(4) == pytest.approx(46.0, rel=0.01)
    baseline.reset()
    assert baseline.baseline(4) is None


def test_baseline_settings_are_checked() -> None:
    with pytest.raises(UsageError):
        DecodeBaseline(half_life_s=0.0)
    with pytest.raises(UsageError):
        DecodeBaseline(warmup=0)
    with pytest.raises(UsageError):
        SignalBoard(max_age=0.0)
    with pytest.raises(UsageError, match="unknown signal"):
        SignalBoard().age("gpu_temp", now=0.0)
