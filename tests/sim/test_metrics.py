from __future__ import annotations

import pytest

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim import RequestRecord, SimOutcome, SimRequest, jain_index, quantile, report
from slopolicy.sim.reports import fallback_summary


def test_quantiles_interpolate_between_order_statistics() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.99) == 3.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([float(v) for v in range(101)], 0.95) == pytest.approx(95.0)
    assert quantile([0.0, 10.0], 0.99) == pytest.approx(9.9)


def test_jains_index_is_one_when_everyone_is_alike() -> None:
    assert jain_index([0.9, 0.9, 0.9]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None


def _record(
    rid: str,
    tenant: str,
    outcome: SimOutcome,
    *,
    arrival: float = 0.0,
    first: float | None = None,
    done: float | None = None,
    tokens: int = 11,
    lane: str = "chat",
    would: int | None = None,
    max_new: int = 100,
    model: str | None = None,
) -> RequestRecord:
    """``would``: what the model would have generated (default ``tokens``)."""
    request = SimRequest(rid, arrival, tenant, 100, would or tokens, 100)
    dispatched = arrival if first is not None else None
    return RequestRecord(
        request, lane, outcome, "admitted", dispatched, first, done, tokens, max_new, 0, 1, model
    )


def test_truncated_and_downgraded_answers_are_degraded_not_attained() -> None:
    ok = SimOutcome.COMPLETED
    records = [
        _record("full", "a", ok, first=0.1, done=1.1),
        # Capped at 11 by the scheduler where the model would have written 40.
        _record("cut", "a", ok, first=0.1, done=1.1, would=40, max_new=11),
        _record("cheap", "b", ok, first=0.1, done=1.1, model="small-model"),
        # Degraded and over its TTFT target: neither goodput.
        _record("cut_late", "b", ok, first=3.0, done=4.0, would=40, max_new=11),
        # The client's own max_new_tokens (100) at the cap is a full answer.
        _record("capped_by_client", "b", ok, first=0.1, done=1.1, tokens=100, would=500),
        _record("refused", "b", SimOutcome.REJECTED, done=0.0),
        _record("late", "b", SimOutcome.EXPIRED, done=5.0),
    ]
    assert [r.degraded for r in records] == [False, True, True, True, False, False, False]
    targets = {"chat": SLOTargets(ttft_p95=0.5)}
    result = report("x", records, targets, duration=10.0, end=5.0)
    chat = result.lanes["chat"]
    assert (chat.attained, chat.degraded, chat.completed) == (2, 3, 5)
    assert chat.goodput_rps == pytest.approx(0.2)
    assert chat.degraded_goodput_rps == pytest.approx(0.2)  # cut and cheap
    assert chat.attainment == pytest.approx(2 / 7)
    assert (result.attained, result.degraded) == (2, 3)
    assert result.degraded_goodput_rps == pytest.approx(0.2)
    assert (result.tenants["a"].attained, result.tenants["a"].degraded) == (1, 1)
    assert result.tenants["b"].degraded_goodput_rps == pytest.approx(0.1)


def test_attainment_counts_refused_requests_as_missed() -> None:
    records = [
        _record("fast", "a", SimOutcome.COMPLETED, first=0.2, done=1.2),
        _record("slow", "a", SimOutcome.COMPLETED, first=2.0, done=3.0),
        _record("choppy", "b", SimOutcome.COMPLETED, first=0.1, done=10.1),  # TPOT 1 s
        _record("refused", "b", SimOutcome.REJECTED, done=0.0),
        _record("late", "b", SimOutcome.EXPIRED, done=5.0),
        _record(
            "batch", "c", SimOutcome.COMPLETED, first=50.0, done=90.0, lane="batch", arrival=10.0
        ),
    ]
    targets = {"chat": SLOTargets(ttft_p95=0.5, tpot_p95=0.2), "batch": SLOTargets(e2e_p95=100)}
    result = report("x", records, targets, duration=10.0, end=90.0, preemptions=3)
    chat = result.lanes["chat"]
    assert (chat.offered, chat.completed, chat.rejected, chat.expired, chat.attained) == (
        5,
        3,
        1,
        1,
        1,
    )
    assert chat.attainment == pytest.approx(0.2)
    assert chat.goodput_rps == pytest.approx(0.1)
    assert chat.throughput_rps == pytest.approx(0.3)
    assert chat.ttft_p50_s == pytest.approx(0.2)
    assert chat.drain_s == pytest.approx(10.1)
    assert result.lanes["batch"].attainment == 1.0
    assert result.lanes["batch"].e2e_p95_s == pytest.approx(80.0)
    assert (result.attained, result.offered, result.preemptions) == (2, 6, 3)
    assert result.goodput_rps == pytest.approx(0.2)
    assert (result.worst_tenant, result.worst_tenant_attainment) == ("b", 0.0)
    assert result.tenants["a"].attainment == 0.5
    assert result.jain_attainment == pytest.approx((0.5 + 0 + 1) ** 2 / (3 * (0.25 + 1)))


def test_the_fallback_summary_times_each_overload_state() -> None:
    moves = [
        (10.0, 1, "cap", "degraded"),
        (20.0, 2, "pause", "batch_paused"),
        (50.0, 1, "pause", "degraded"),
    ]
    summary = fallback_summary(moves, rungs=["cap", "pause"], end=100.0)
    assert dict(summary.activations) == {"cap": 1, "pause": 1}
    assert summary.climbs == 2
    assert summary.max_level == 2
    assert dict(summary.seconds_by_state) == {
        "normal": 10.0,
        "degraded": 60.0,
        "batch_paused": 30.0,
    }
