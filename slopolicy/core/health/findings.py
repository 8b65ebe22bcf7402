"""The values a diagnosis produces: finding codes, severities, findings, thresholds.

See :mod:`slopolicy.core.health.diagnosis` for how symptoms map to findings.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ("DiagnosisThresholds", "Finding", "FindingCode", "Severity")


class FindingCode(enum.Enum):
    """The closed set of likely causes; the value is the stable wire name."""

    QUEUEING = "queueing"
    PREFILL_INTERFERENCE = "prefill_interference"
    SCHEDULE_OR_TRANSFER = "schedule_or_transfer"
    LATENCY_UNATTRIBUTED = "latency_unattributed"
    DECODE_CONTENTION = "decode_contention"
    KV_PRESSURE = "kv_pressure"
    SLOW_TOOLS = "slow_tools"
    OVERLOAD = "overload"
    FAIRNESS_FAILURE = "fairness_failure"
    TENANT_WORKLOAD = "tenant_workload"
    TENANT_THROTTLED = "tenant_throttled"
    TENANT_OUTLIER = "tenant_outlier"
    ERROR_RATE = "error_rate"
    SIGNALS_MISSING = "signals_missing"


class Severity(enum.IntEnum):
    """How urgent a finding is; higher is worse."""

    INFO = 0
    WARNING = 1
    CRITICAL = 2


@dataclass(frozen=True, slots=True)
class Finding:
    """A likely cause: which, how bad, where, a sentence, and the numbers used
    (seconds, tokens, fractions 0-1 and ratios; keys name their unit)."""

    code: FindingCode
    severity: Severity
    lane: str
    tenant: str | None
    message: str
    evidence: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DiagnosisThresholds:
    """Where symptoms start (fractions are 0-1; ratios are plain numbers).

    Attributes:
        min_requests: values a window needs before its quantile is judged.
        stage_share: a TTFT stage at least this share of (slow) TTFT is a cause.
        long_prompt_ratio: lane prompt p99 / p50 at or above which long prompts
            are in the mix (prefill interference).
        kv_usage: KV usage at or above which KV pressure is a cause.
        preemption_rate: engine preemptions per second at or above which KV
            pressure is a cause, whatever the usage reads (the engine evicts
            running requests for want of blocks).
        tool_timeout_rate: tool timeout rate at or above which tools are a cause.
        decode_drop: decode-speed drop at similar load at or above which decode
            contention is evidenced.
        dominant_share: one tenant's share of a lane's spend at or above which
            it is hogging the lane (fairness failing).
        tenant_prompt_ratio: tenant / lane median prompt at or above which the
            tenant's workload is abnormal.
        tenant_queue_ratio: tenant / lane p95 queue wait at or above which the
            tenant is being held back (its quota or concurrency cap).
        critical_ratio: measured / target at or above which a finding is critical.
    """

    min_requests: int = 20
    stage_share: float = 0.5
    long_prompt_ratio: float = 8.0
    kv_usage: float = 0.9
    preemption_rate: float = 0.01
    tool_timeout_rate: float = 0.05
    decode_drop: float = 0.3
    dominant_share: float = 0.5
    tenant_prompt_ratio: float = 4.0
    tenant_queue_ratio: float = 2.0
    critical_ratio: float = 2.0
