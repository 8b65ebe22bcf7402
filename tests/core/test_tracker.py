from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.slo.burn import AlertSeverity
from slopolicy.core.slo.targets import Objective, SLOTargets
from slopolicy.core.slo.tracker import SLOTracker
from slopolicy.errors import UsageError
from tests.core.records import finished

TARGETS = SLOTargets(ttft_p95=1.0, tpot_p95=0.1, success_rate=0.99)

_seconds = st.floats(min_value=0.0, max_value=10.0)
_outcomes = st.sampled_from(list(Outcome))


@st.composite
def records(draw: st.DrawFn) -> list[tuple[float, Finished]]:
    """Finished requests at non-decreasing times, any outcome and timing."""
    found = []
    now = draw(st.floats(min_value=0.0, max_value=1000.0))
    for _ in range(draw(st.integers(min_value=0, max_value=40))):
        now += draw(st.sampled_from([0.0, 0.5, 3.0, 20.0, 70.0]))
        record = finished(
            now,
            ttft=draw(st.none() | _seconds),
            tpot=draw(st.none() | st.floats(min_value=0.0, max_value=0.5)),
            outcome=draw(_outcomes),
            cost=draw(st.floats(min_value=0.0, max_value=1e4)),
        )
        found.append((now, record))
    return found


def _loosen(bound: float | None, factor: float | None) -> float | None:
    if bound is None or factor is None:
        return None  # no target at all is the loosest
    return bound * factor


_bounds = st.none() | st.floats(min_value=0.01, max_value=10.0)
_factors = st.none() | st.floats(min_value=1.0, max_value=10.0)


@given(records(), _bounds, _bounds, _bounds, _factors, _factors, _factors)
def test_attainment_never_falls_when_targets_loosen(
    stream: list[tuple[float, Finished]],
    ttft: float | None,
    tpot: float | None,
    e2e: float | None,
    f_ttft: float | None,
    f_tpot: float | None,
    f_e2e: float | None,
) -> None:
    tight = SLOTargets(ttft_p95=ttft, tpot_p95=tpot, e2e_p95=e2e)
    loose = SLOTargets(
        ttft_p95=_loosen(ttft, f_ttft), tpot_p95=_loosen(tpot, f_tpot), e2e_p95=_loosen(e2e, f_e2e)
    )
    a, b = SLOTracker("lane", tight), SLOTracker("lane", loose)
    for now, record in stream:
        a.record(record, now=now)
        b.record(record, now=now)
    end = stream[-1][0] if stream else 0.0
    sa, sb = a.snapshot(now=end), b.snapshot(now=end)
    assert sb.attained >= sa.attained
    assert (sb.attainment or 0.0) >= (sa.attainment or 0.0)
    assert sb.goodput >= sa.goodput


@given(records(), st.floats(min_value=0.0, max_value=200.0))
def test_goodput_never_exceeds_throughput(
    stream: list[tuple[float, Finished]], later: float
) -> None:
    tracker = SLOTracker("lane", TARGETS)
    for now, record in stream:
        tracker.record(record, now=now)
        snapshot = tracker.snapshot(now=now)
        assert snapshot.goodput <= snapshot.throughput
        assert snapshot.attained <= snapshot.completed
    end = (stream[-1][0] if stream else 0.0) + later
    snapshot = tracker.snapshot(now=end)
    assert snapshot.goodput <= snapshot.throughput
    assert 0.0 <= (snapshot.success_rate or 0.0) <= 1.0
    assert snapshot.span_s >= 5.0


def test_success_rate_leaves_out_cancelled_and_rejected() -> None:
    tracker = SLOTracker("lane", TARGETS)
    for index, outcome in enumerate(
        [Outcome.COMPLETED] * 6 + [Outcome.FAILED, Outcome.EXPIRED] + [Outcome.CANCELLED] * 5
    ):
        tracker.record(finished(10.0 + index, outcome=outcome), now=10.0 + index)
    tracker.record_rejected(now=30.0)
    tracker.record(finished(30.0, outcome=Outcome.REJECTED), now=30.0)
    snap = tracker.snapshot(now=30.0)
    assert (snap.completed, snap.failed, snap.expired, snap.cancelled, snap.rejected) == (
        6,
        1,
        1,
        5,
        2,
    )
    assert snap.eligible == 8
    assert snap.success_rate == 6 / 8
    assert snap.rejected_fraction == 2 / 15


def test_rejected_can_count_as_errors() -> None:
    tracker = SLOTracker("lane", TARGETS, rejected_are_errors=True)
    tracker.record(finished(1.0), now=1.0)
    tracker.record_rejected(now=2.0)
    snap = tracker.snapshot(now=2.0)
    assert snap.success_rate == 0.5
    success_5m = next(
        r for r in snap.burn_rates if r.objective is Objective.SUCCESS and r.window_s == 300.0
    )
    assert (success_5m.events, success_5m.bad) == (2, 1)


def test_attainment_goodput_and_cost_per_success() -> None:
    tracker = SLOTracker("lane", TARGETS, start=0.0)
    for second in range(60):
        slow = second % 4 == 0  # a quarter miss the TTFT target
        tracker.record(
            finished(second + 0.5, ttft=2.0 if slow else 0.5, cost=100.0), now=second + 0.5
        )
    tracker.record(finished(59.5, outcome=Outcome.FAILED, cost=40.0), now=59.5)
    snap = tracker.snapshot(now=59.9)
    assert snap.completed == 60
    assert snap.attained == 45
    assert snap.attainment == 45 / 61
    # At 59.9 the live slices are [0, 5) .. [55, 60): the window covers 59.9 s.
    assert snap.span_s == pytest.approx(59.9)
    assert snap.throughput == pytest.approx(60 / 59.9)
    assert snap.goodput == pytest.approx(45 / 59.9)
    # Failed requests cost too: total spend over successes.
    assert snap.cost_per_success == pytest.approx((60 * 100.0 + 40.0) / 60)
    later = tracker.snapshot(now=70.0)  # now [15, 70]: the first 15 s are gone
    assert later.completed == 45
    assert later.span_s == pytest.approx(55.0)


def test_a_user_cost_model_prices_requests() -> None:
    dollars = SLOTracker(
        "lane", cost_model=lambda f: 1e-6 * (f.prompt_tokens + 3 * f.output_tokens)
    )
    dollars.record(finished(1.0, prompt_tokens=1000, output_tokens=100), now=1.0)
    assert dollars.snapshot(now=1.0).cost_per_success == pytest.approx(1.3e-3)
    bad = SLOTracker("lane", cost_model=lambda f: math.nan)
    with pytest.raises(UsageError, match="cost model"):
        bad.record(finished(1.0), now=1.0)
    assert bad.snapshot(now=1.0).completed == 0


def test_latency_populations() -> None:
    tracker = SLOTracker("lane", TARGETS)
    tracker.record(finished(1.0, ttft=0.3, tpot=0.05, queue=0.1), now=1.0)
    # Cancelled mid-stream: its TTFT and queue wait count, its TPOT and e2e do not.
    tracker.record(
        finished(2.0, ttft=5.0, tpot=0.5, queue=4.0, outcome=Outcome.CANCELLED, e2e=9.0), now=2.0
    )
    snap = tracker.snapshot(now=2.0)
    assert snap.ttft is not None
    assert snap.tpot is not None
    assert snap.e2e is not None
    assert snap.queue_wait is not None
    assert (snap.ttft.count, snap.queue_wait.count, snap.tpot.count, snap.e2e.count) == (2, 2, 1, 1)
    assert snap.ttft.max == 5.0
    assert snap.tpot.max == 0.05
    assert snap.prompt_tokens is not None
    assert snap.prompt_tokens.count == 2


def test_requests_that_never_started_still_spend_the_ttft_budget() -> None:
    tracker = SLOTracker("lane", TARGETS)
    tracker.record(finished(10.0, ttft=None, tpot=None, e2e=8.0, outcome=Outcome.EXPIRED), now=10.0)
    tracker.record(
        finished(11.0, ttft=None, tpot=None, e2e=0.5, outcome=Outcome.CANCELLED), now=11.0
    )
    rate = next(
        r
        for r in tracker.burn_rates(now=11.0)
        if r.objective is Objective.TTFT_P95 and r.window_s == 300.0
    )
    # Waited 8 s without a token: certainly over 1 s. Cancelled at 0.5 s: unknown.
    assert (rate.events, rate.bad) == (1, 1)


def test_ladder_trigger_fractions() -> None:
    tracker = SLOTracker("lane", SLOTargets(ttft_p95=2.0))
    for index in range(100):
        tracker.record(finished(index * 0.1, ttft=1.0, queue=0.5), now=index * 0.1)
    snap = tracker.snapshot(now=10.0)
    assert snap.ttft_p95_fraction == pytest.approx(0.5, rel=0.01)
    assert snap.queue_wait_fraction == pytest.approx(0.25, rel=0.01)
    assert SLOTracker("lane").snapshot(now=0.0).ttft_p95_fraction is None


def test_sustained_slow_ttft_pages_on_its_objective() -> None:
    tracker = SLOTracker("lane", TARGETS)
    for index in range(7200):
        t = index * 1.0
        tracker.record(finished(t, ttft=3.0 if index >= 4500 else 0.2), now=t)
    alerts = tracker.alerts(now=7199.0)
    # The last 45 min all slow: the hour burns at ~15x, the 6 h at ~7.5x, 3 d at ~7.5x.
    assert {(a.objective, a.severity, a.long.window_s) for a in alerts} == {
        (Objective.TTFT_P95, AlertSeverity.PAGE, 3600.0),
        (Objective.TTFT_P95, AlertSeverity.PAGE, 21600.0),
        (Objective.TTFT_P95, AlertSeverity.TICKET, 259200.0),
    }
    assert all(a.long.rate is not None and a.long.rate > a.threshold for a in alerts)
    assert tracker.snapshot(now=7199.0).alerts == alerts


def test_the_window_forgets_and_an_earlier_now_counts_as_the_latest() -> None:
    tracker = SLOTracker("lane", TARGETS, start=0.0)
    tracker.record(finished(1.0), now=1.0)
    assert tracker.snapshot(now=50.0).completed == 1
    assert tracker.snapshot(now=61.0).completed == 0
    tracker.record(finished(2.0), now=2.0)  # late: counts now
    assert tracker.snapshot(now=0.0).completed == 1
    assert tracker.snapshot(now=0.0).at == 61.0


@pytest.mark.parametrize(
    "change",
    [
        {"ttft": -0.1},
        {"tpot": math.nan},
        {"queue_wait": math.inf},
        {"finished_at": -5.0},
        {"prompt_tokens": -1},
        {"stages": {"warp": 1.0}},
        {"stages": {"queue": -1.0}},
    ],
)
def test_bad_records_are_refused_and_change_nothing(change: dict[str, object]) -> None:
    tracker = SLOTracker("lane", TARGETS)
    tracker.record(finished(1.0), now=1.0)
    before = tracker.snapshot(now=1.0)
    with pytest.raises(UsageError):
        tracker.record(replace(finished(1.0), **change), now=1.0)  # type: ignore[arg-type]
    assert tracker.snapshot(now=1.0) == before


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_now_must_be_a_finite_number(bad: float) -> None:
    tracker = SLOTracker("lane")
    tracker.record_rejected(now=1.0)
    with pytest.raises(UsageError, match="now"):
        tracker.record_rejected(now=bad)
    assert tracker.snapshot(now=2.0).rejected == 1


def test_targets_are_checked() -> None:
    with pytest.raises(UsageError, match="ttft_p95"):
        SLOTargets(ttft_p95=0.0)
    with pytest.raises(UsageError, match="success_rate"):
        SLOTargets(success_rate=0.0)
    with pytest.raises(UsageError, match="ttft_p99"):
        SLOTargets(ttft_p95=2.0, ttft_p99=1.0)
    assert SLOTargets(ttft_p99=3.0).ttft_target == 3.0
    objectives = [o for o, _, _ in SLOTargets(ttft_p95=1.0, e2e_p95=30.0).objectives()]
    assert objectives == [Objective.SUCCESS, Objective.TTFT_P95, Objective.E2E_P95]


def test_trackers_without_burn_or_breakdown() -> None:
    tracker = SLOTracker("lane", TARGETS, burn_rules=(), breakdown=False)
    tracker.record(finished(1.0, queue=0.1), now=1.0)
    snap = tracker.snapshot(now=1.0)
    assert snap.burn_rates == ()
    assert snap.alerts == ()
    assert snap.breakdown is None
