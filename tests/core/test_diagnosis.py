from __future__ import annotations

from typing import Any

import pytest

from slopolicy.core.health.diagnosis import diagnose
from slopolicy.core.health.findings import DiagnosisThresholds, Finding, FindingCode, Severity
from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.outcome import Outcome
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.slo.tracker_set import TrackerSet
from tests.core.records import finished

LANE = "interactive"
TARGETS = SLOTargets(ttft_p95=1.0, tpot_p95=0.1, success_rate=0.99)
HEALTHY_ENGINE = EngineSignals(
    observed_at=50.0, kv_usage=0.5, waiting=2, running=16, tool_timeout_rate=0.0
)
TENANTS = ("acme", "globex", "initech", "umbrella")


def _fast(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "ttft": 0.3,
        "tpot": 0.03,
        "queue": 0.05,
        "prompt_tokens": 500,
        "stages": {"queue": 0.05, "schedule": 0.01, "prefill": 0.2, "transfer": 0.02},
    }
    spec.update(changes)
    return spec


def _run(specs: list[dict[str, Any]]) -> tuple[SLOSnapshot, ...]:
    """Feed the requests 0.05 s apart (all in one window) and snapshot everything."""
    trackers = TrackerSet({LANE: TARGETS})
    for index, spec in enumerate(specs):
        spec.setdefault("tenant", TENANTS[index % len(TENANTS)])
        now = index * 0.05
        trackers.record(finished(now, lane=LANE, **spec), now=now)
    return trackers.snapshots(now=len(specs) * 0.05)


def _codes(findings: list[Finding]) -> list[FindingCode]:
    return [finding.code for finding in findings]


def test_a_healthy_run_has_no_findings() -> None:
    snaps = _run([_fast() for _ in range(1000)])
    assert diagnose(snaps, HEALTHY_ENGINE, decode_drop=0.0) == []
    assert diagnose(snaps) == []  # missing signals alone are no symptom


def test_too_few_requests_are_not_judged() -> None:
    snaps = _run([_fast(ttft=5.0) for _ in range(10)])
    assert diagnose(snaps, HEALTHY_ENGINE) == []


def test_ttft_bad_tpot_fine_with_queueing() -> None:
    stages = {"queue": 2.5, "schedule": 0.01, "prefill": 0.2, "transfer": 0.02}
    findings = diagnose(_run([_fast(ttft=3.0, queue=2.5, stages=stages) for _ in range(200)]))
    assert _codes(findings) == [FindingCode.QUEUEING]
    finding = findings[0]
    assert finding.severity is Severity.CRITICAL  # 3x the target
    assert finding.evidence["queue_share"] == pytest.approx(2.5 / 3.0)
    assert finding.evidence["ttft_p95_s"] == pytest.approx(3.0, rel=0.01)
    assert finding.evidence["ttft_target_s"] == 1.0
    assert finding.lane == LANE
    assert finding.tenant is None
    assert "queueing is 83%" in finding.message


def test_ttft_bad_tpot_fine_with_long_prompts_in_the_lane() -> None:
    stages = {"queue": 0.3, "schedule": 0.01, "prefill": 1.4, "transfer": 0.02}
    specs = [
        _fast(ttft=1.8, stages=stages, prompt_tokens=40_000 if index % 20 == 0 else 500)
        for index in range(400)
    ]
    findings = diagnose(_run(specs))
    assert _codes(findings) == [FindingCode.PREFILL_INTERFERENCE]
    evidence = findings[0].evidence
    assert evidence["prompt_p99_tokens"] == pytest.approx(40_000, rel=0.01)
    assert evidence["prompt_p50_tokens"] == pytest.approx(500, rel=0.01)
    assert evidence["prompt_p99_over_p50"] > 8
    assert evidence["prefill_share"] == pytest.approx(1.4 / 1.8)
    assert findings[0].severity is Severity.WARNING


def test_ttft_bad_in_schedule_or_transfer() -> None:
    stages = {"queue": 0.05, "schedule": 0.01, "prefill": 0.2, "transfer": 1.5}
    findings = diagnose(_run([_fast(ttft=1.8, stages=stages) for _ in range(100)]))
    assert _codes(findings) == [FindingCode.SCHEDULE_OR_TRANSFER]
    assert findings[0].evidence["transfer_share"] == pytest.approx(1.5 / 1.8)


def test_ttft_bad_without_stage_timings_is_unattributed() -> None:
    findings = diagnose(_run([_fast(ttft=1.8, queue=None, stages={}) for _ in range(100)]))
    assert _codes(findings) == [FindingCode.LATENCY_UNATTRIBUTED]
    assert "no stage timings" in findings[0].message


def _slow_decode() -> tuple[SLOSnapshot, ...]:
    return _run([_fast(tpot=0.3) for _ in range(200)])


def test_tpot_bad_with_kv_pressure() -> None:
    signals = EngineSignals(observed_at=9.0, kv_usage=0.97, running=64, tool_timeout_rate=0.0)
    findings = diagnose(_slow_decode(), signals, decode_drop=0.1)
    assert _codes(findings) == [FindingCode.KV_PRESSURE]
    assert findings[0].evidence["kv_usage"] == 0.97
    assert findings[0].evidence["tpot_p95_s"] == pytest.approx(0.3, rel=0.01)
    assert findings[0].severity is Severity.CRITICAL


@pytest.mark.parametrize(
    ("kv", "rate", "says"),
    [
        (0.8, 2.0, ["preempts 2 requests/s"]),  # usage under the threshold: the evictions tell
        (0.97, 2.0, ["97% full", "preempts 2 requests/s"]),
    ],
)
def test_tpot_bad_with_the_engine_preempting(kv: float, rate: float, says: list[str]) -> None:
    signals = EngineSignals(
        observed_at=9.0, kv_usage=kv, running=64, tool_timeout_rate=0.0, preemption_rate=rate
    )
    findings = diagnose(_slow_decode(), signals, decode_drop=0.1)
    assert _codes(findings) == [FindingCode.KV_PRESSURE]
    assert findings[0].evidence["preemption_rate"] == rate
    assert all(phrase in findings[0].message for phrase in says)
    assert ("full" in findings[0].message) is (kv >= 0.9)


def test_preemptions_below_the_threshold_point_nowhere() -> None:
    signals = EngineSignals(
        observed_at=9.0, kv_usage=0.5, tool_timeout_rate=0.0, preemption_rate=0.001
    )
    findings = diagnose(_slow_decode(), signals, decode_drop=0.0)
    assert _codes(findings) == [FindingCode.DECODE_CONTENTION]
    lower = DiagnosisThresholds(preemption_rate=0.0005)
    findings = diagnose(_slow_decode(), signals, decode_drop=0.0, thresholds=lower)
    assert _codes(findings) == [FindingCode.KV_PRESSURE]


def test_tpot_bad_with_slow_tools() -> None:
    signals = EngineSignals(observed_at=9.0, kv_usage=0.5, tool_timeout_rate=0.2)
    findings = diagnose(_slow_decode(), signals, decode_drop=0.0)
    assert _codes(findings) == [FindingCode.SLOW_TOOLS]
    assert findings[0].evidence["tool_timeout_rate"] == 0.2


def test_tpot_bad_with_decode_contention() -> None:
    findings = diagnose(_slow_decode(), HEALTHY_ENGINE, decode_drop=0.45)
    assert _codes(findings) == [FindingCode.DECODE_CONTENTION]
    assert findings[0].evidence["decode_drop"] == 0.45
    assert "down 45% at similar load" in findings[0].message


def test_tpot_bad_with_stale_signals_says_what_is_unknown() -> None:
    findings = diagnose(_slow_decode(), None)
    assert _codes(findings) == [FindingCode.DECODE_CONTENTION, FindingCode.SIGNALS_MISSING]
    missing = findings[1]
    assert missing.severity is Severity.INFO
    assert "kv_usage, tool_timeout_rate, decode_drop unknown or stale" in missing.message
    assert "kv_usage" not in findings[0].evidence  # unknown numbers are left out, not zeroed


def test_both_bad_is_overload_when_no_tenant_dominates() -> None:
    specs = [_fast(ttft=2.5, tpot=0.25) for _ in range(400)]
    findings = diagnose(_run(specs), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.OVERLOAD]
    evidence = findings[0].evidence
    assert evidence["ttft_over_target"] == pytest.approx(2.5, rel=0.01)
    assert evidence["tpot_over_target"] == pytest.approx(2.5, rel=0.01)
    assert evidence["throughput_rps"] > 0
    assert evidence["kv_usage"] == 0.5
    assert "preemption_rate" not in evidence  # not reported: left out
    preempting = EngineSignals(observed_at=50.0, kv_usage=0.5, preemption_rate=3.0)
    assert diagnose(_run(specs), preempting)[0].evidence["preemption_rate"] == 3.0


def test_both_bad_is_failed_fairness_when_one_tenant_hogs_the_lane() -> None:
    specs = [
        _fast(ttft=2.5, tpot=0.25, tenant="hog" if index % 5 else TENANTS[index % 4])
        for index in range(400)
    ]
    findings = diagnose(_run(specs), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.FAIRNESS_FAILURE]
    assert findings[0].tenant == "hog"
    assert findings[0].evidence["tenant_share"] == pytest.approx(0.8)


def _one_tenant(**changes: Any) -> list[dict[str, Any]]:
    return [
        _fast(tenant="bigco", **changes) if index % 50 == 0 else _fast() for index in range(1000)
    ]


def test_one_tenant_bad_with_an_abnormal_workload() -> None:
    findings = diagnose(_run(_one_tenant(ttft=2.0, prompt_tokens=20_000)), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.TENANT_WORKLOAD]
    finding = findings[0]
    assert finding.tenant == "bigco"
    assert finding.evidence["prompt_ratio"] == pytest.approx(40, rel=0.02)
    assert finding.evidence["tenant_prompt_p50_tokens"] == pytest.approx(20_000, rel=0.01)


def test_one_tenant_bad_because_it_is_held_back() -> None:
    stages = {"queue": 1.8, "schedule": 0.01, "prefill": 0.2, "transfer": 0.02}
    findings = diagnose(_run(_one_tenant(ttft=2.0, queue=1.8, stages=stages)), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.TENANT_THROTTLED]
    evidence = findings[0].evidence
    assert evidence["tenant_queue_wait_p95_s"] == pytest.approx(1.8, rel=0.01)
    assert evidence["lane_queue_wait_p95_s"] == pytest.approx(0.05, rel=0.01)


def test_one_tenant_bad_otherwise_points_at_routing() -> None:
    findings = diagnose(_run(_one_tenant(ttft=2.0)), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.TENANT_OUTLIER]
    assert "routing" in findings[0].message
    assert findings[0].evidence["tenant_ttft_over_target"] == pytest.approx(2.0, rel=0.01)


def test_a_low_success_rate_is_an_error_rate_finding() -> None:
    specs = [
        _fast(outcome=Outcome.FAILED if i % 10 == 0 else Outcome.COMPLETED) for i in range(200)
    ]
    findings = diagnose(_run(specs), HEALTHY_ENGINE)
    assert _codes(findings) == [FindingCode.ERROR_RATE]
    assert findings[0].evidence["success_rate"] == pytest.approx(0.9)
    assert findings[0].severity is Severity.CRITICAL  # 10x the error budget


def test_findings_come_most_severe_first_and_thresholds_are_tunable() -> None:
    specs = [
        _fast(ttft=3.0, outcome=Outcome.FAILED if i % 100 == 0 else Outcome.COMPLETED)
        for i in range(400)
    ]
    findings = diagnose(_run(specs), HEALTHY_ENGINE)
    assert [f.severity for f in findings] == sorted((f.severity for f in findings), reverse=True)
    lenient = DiagnosisThresholds(min_requests=10_000)
    assert diagnose(_run(specs), HEALTHY_ENGINE, thresholds=lenient) == []
