from __future__ import annotations

import pytest

from slopolicy.core.outcome import STAGES
from slopolicy.core.slo.budget import LatencyBudget
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker import SLOTracker
from slopolicy.errors import UsageError
from tests.core.records import finished


def _stages(queue: float, prefill: float) -> dict[str, float]:
    return {"queue": queue, "schedule": 0.01, "prefill": prefill, "transfer": 0.01}


def test_shares_are_of_mean_ttft_and_add_up_with_other() -> None:
    budget = LatencyBudget(slow_after=1.0)
    # Fast requests: TTFT 0.5 = 0.1 queue + 0.01 + 0.3 prefill + 0.01 (+0.08 unmarked).
    for index in range(80):
        budget.record(0.5, _stages(0.1, 0.3), now=index * 0.5)
    # Slow requests: TTFT 4 = 3.2 queue + 0.01 + 0.5 prefill + 0.01 (+0.28 unmarked).
    for index in range(20):
        budget.record(4.0, _stages(3.2, 0.5), now=40.0 + index * 0.5)
    split = budget.breakdown(now=50.0)
    assert split.count == 100
    assert split.slow_count == 20
    assert split.ttft_mean == pytest.approx((80 * 0.5 + 20 * 4.0) / 100)
    assert split.slow_ttft_mean == pytest.approx(4.0)
    queue = split.stage("queue")
    assert queue.share == pytest.approx((80 * 0.1 + 20 * 3.2) / 120.0)
    assert queue.slow_share == pytest.approx(0.8)  # "TTFT bad, queue is 80% of it"
    assert split.stage("prefill").slow_share == pytest.approx(0.125)
    shares = [s.share for s in split.stages]
    assert split.other_share is not None
    assert sum(s or 0.0 for s in shares) + split.other_share == pytest.approx(1.0)
    assert split.slow_other_share == pytest.approx(0.28 / 4.0)
    assert split.dominant == "queue"
    assert [s.stage for s in split.stages] == list(STAGES)


def test_stage_quantiles() -> None:
    budget = LatencyBudget()
    for index in range(100):
        budget.record(1.0, {"queue": (index + 1) / 100}, now=float(index))
    queue = budget.breakdown(now=99.0).stage("queue")
    # The window (60 s) keeps the last 55-60 values: 0.41 .. 1.00 here.
    assert queue.count == 60
    assert queue.p50 == pytest.approx(0.70, rel=0.01)
    assert queue.p99 == pytest.approx(0.99, rel=0.01)
    assert budget.breakdown(now=99.0).stage("prefill").p95 is None


def test_dominance_falls_back_to_all_requests_when_none_is_slow() -> None:
    budget = LatencyBudget(slow_after=10.0)
    budget.record(1.0, _stages(0.1, 0.8), now=1.0)
    split = budget.breakdown(now=1.0)
    assert split.slow_count == 0
    assert split.stage("prefill").slow_share is None
    assert split.dominant == "prefill"


def test_without_data_nothing_is_attributed() -> None:
    split = LatencyBudget().breakdown(now=0.0)
    assert split.count == 0
    assert split.dominant is None
    assert split.other_share is None
    budget = LatencyBudget()
    budget.record(None, {"queue": 5.0}, now=1.0)  # expired before a token: quantiles only
    split = budget.breakdown(now=1.0)
    assert split.count == 0
    assert split.stage("queue").count == 1


def test_the_tracker_keeps_the_split_with_the_lane_target() -> None:
    tracker = SLOTracker("interactive", SLOTargets(ttft_p95=1.0))
    for index in range(10):
        tracker.record(finished(index, ttft=2.0, stages=_stages(1.5, 0.4)), now=index)
    split = tracker.breakdown(now=10.0)
    assert split is not None
    assert split.slow_after == 1.0
    assert split.slow_count == 10
    assert split.stage("queue").slow_share == pytest.approx(0.75)


def test_misuse() -> None:
    with pytest.raises(UsageError, match="unknown stage"):
        LatencyBudget().record(1.0, {"decode": 1.0}, now=0.0)
    with pytest.raises(UsageError, match="unknown stage"):
        LatencyBudget().breakdown(now=0.0).stage("decode")
    with pytest.raises(UsageError, match="slow_after"):
        LatencyBudget(slow_after=-1.0)
    with pytest.raises(UsageError, match="ttft"):
        LatencyBudget().record(-1.0, {}, now=0.0)
