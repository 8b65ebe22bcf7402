"""The KV pool's turnover: blocks freed by ends per second, decayed
(slopolicy.core.kv.turnover), which reclaim weighs a head's deadline against."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.kv import Turnover
from slopolicy.errors import UsageError


def test_no_end_yet_is_no_rate_and_an_endless_wait() -> None:
    turnover = Turnover(30.0)
    assert turnover.rate(now=5.0) == 0.0
    assert turnover.wait(10, now=5.0) == math.inf
    assert turnover.wait(0, now=5.0) == 0.0


@given(
    blocks=st.integers(1, 500),
    every=st.floats(0.01, 10.0),
    window=st.floats(1.0, 120.0),
)
def test_a_steady_stream_of_ends_reads_as_its_rate(
    blocks: int, every: float, window: float
) -> None:
    turnover = Turnover(window)
    ends = max(2, math.ceil(8 * window / every))  # eight windows of history
    for k in range(ends):
        turnover.freed(blocks, now=k * every)
    rate = turnover.rate(now=(ends - 1) * every)
    # Read at an end, the decayed sum of ends every d is b / (1 - e^(-d/w))
    # over a window's worth of time w: from b / d up to e^(d/w) times it.
    steady = blocks / every
    assert steady * (1 - 1e-3) <= rate <= steady * math.exp(every / window) * (1 + 1e-3)
    assert turnover.wait(blocks, now=(ends - 1) * every) == pytest.approx(blocks / rate)


@given(gap=st.floats(0.1, 1000.0))
def test_without_ends_the_rate_fades(gap: float) -> None:
    turnover = Turnover(30.0)
    for k in range(100):
        turnover.freed(5, now=float(k))
    before = turnover.rate(now=99.0)
    after = turnover.rate(now=99.0 + gap)
    assert 0.0 < after < before


def test_a_time_before_the_latest_counts_as_the_latest() -> None:
    turnover = Turnover(10.0)
    turnover.freed(10, now=5.0)
    turnover.freed(10, now=6.0)
    rate = turnover.rate(now=6.0)
    turnover.freed(10, now=1.0)  # late: at 6 s
    assert turnover.rate(now=6.0) > rate
    assert turnover.rate(now=2.0) == turnover.rate(now=6.0)


@given(
    ends=st.lists(st.tuples(st.integers(1, 300), st.floats(0.0, 60.0)), min_size=1, max_size=12),
    blocks=st.integers(0, 2000),
    later=st.floats(0.0, 60.0),
    slack=st.floats(-5.0, 120.0),
)
def test_late_from_is_the_first_moment_the_wait_passes_the_deadline(
    ends: list[tuple[int, float]], blocks: int, later: float, slack: float
) -> None:
    turnover = Turnover(30.0)
    for freed, at in sorted(ends, key=lambda end: end[1]):
        turnover.freed(freed, now=at)
    now = max(at for _, at in ends) + later
    by = now + slack
    before = (turnover._freed, turnover._at, turnover._since)
    moment = turnover.late_from(blocks, by=by, now=now)
    assert (turnover._freed, turnover._at, turnover._since) == before  # a read
    if turnover.late(blocks, by=by, now=now):
        assert moment == now
    elif blocks == 0:
        assert moment == math.inf  # no wait: late only past the deadline itself
    else:
        # Not late now, late at the deadline (any wait is): the first moment
        # between, to the float, and the reads agree on both sides of it.
        assert now < moment <= by
        assert turnover.late(blocks, by=by, now=moment)
        assert not turnover.late(blocks, by=by, now=math.nextafter(moment, -math.inf))
        assert turnover.late_from(blocks, by=by, now=(now + moment) / 2) == moment


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: t.freed(-1, now=1.0), "blocks"),
        (lambda t: t.freed(1.5, now=1.0), "blocks"),
        (lambda t: t.freed(3, now=math.nan), "now"),
        (lambda t: t.rate(now=math.inf), "now"),
        (lambda t: t.wait(-2, now=1.0), "blocks"),
        (lambda t: t.wait(2, now="1"), "now"),
        (lambda t: t.late(-1, by=3.0, now=1.0), "blocks"),
        (lambda t: t.late(1, by=math.nan, now=1.0), "by"),
        (lambda t: t.late_from(1, by=3.0, now=math.inf), "now"),
        (lambda t: t.late_from(True, by=3.0, now=1.0), "blocks"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(call: object, match: str) -> None:
    turnover = Turnover(10.0)
    turnover.freed(10, now=1.0)
    before = (turnover._freed, turnover._at, turnover._since)
    with pytest.raises(UsageError, match=match):
        call(turnover)  # type: ignore[operator]
    assert (turnover._freed, turnover._at, turnover._since) == before


@pytest.mark.parametrize("window", [0.0, -1.0, math.inf, math.nan, 1e-4])
def test_a_bad_window_is_refused(window: float) -> None:
    with pytest.raises(UsageError, match="window_s"):
        Turnover(window)
