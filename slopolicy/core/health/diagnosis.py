"""From symptoms to likely causes, with the numbers that point there.

The symptom table (seed, section 5):

===========================  ==================================================
symptom                      suspect first
===========================  ==================================================
TTFT bad, TPOT fine          queueing, or prefill interference (long prompts)
TTFT fine, TPOT bad          decode contention, KV pressure, slow tools
both bad                     overload, or fairness failing (one tenant hogging)
one tenant bad, lane fine    the tenant's quota, routing, or abnormal workload
===========================  ==================================================

A metric is **bad** when its measured quantile is over its target (p95 TTFT
over ``ttft_p95`` or p99 over ``ttft_p99``; p95 TPOT over ``tpot_p95``) with
at least ``min_requests`` values in the window; a metric without a target is
never bad. Engine signals should come from
:meth:`~slopolicy.core.health.signals.SignalBoard.current`, so stale ones are
``None``: a missing signal is reported as missing (``SIGNALS_MISSING``),
never read as healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from slopolicy.core.health.findings import DiagnosisThresholds, Finding, FindingCode, Severity
from slopolicy.core.health.signals import EngineSignals
from slopolicy.core.slo.snapshot import SLOSnapshot

__all__ = ("diagnose",)


_DEFAULT = DiagnosisThresholds()


def diagnose(
    snapshots: Iterable[SLOSnapshot],
    signals: EngineSignals | None = None,
    *,
    decode_drop: float | None = None,
    thresholds: DiagnosisThresholds = _DEFAULT,
) -> list[Finding]:
    """Likely causes for every symptom in ``snapshots``, most severe first.

    ``snapshots`` holds lane snapshots (``tenant is None``) and, optionally,
    tenant snapshots (as :meth:`TrackerSet.snapshots` returns them).
    ``signals`` are the fresh engine signals; ``decode_drop`` is
    :meth:`DecodeBaseline.drop` for them. A healthy system yields ``[]``.
    """
    all_snapshots = list(snapshots)
    lanes = {s.lane: s for s in all_snapshots if s.tenant is None}
    tenants = [s for s in all_snapshots if s.tenant is not None]
    found: list[Finding] = []
    for lane in lanes.values():
        in_lane = [t for t in tenants if t.lane == lane.lane]
        found.extend(_lane(lane, in_lane, signals, decode_drop, thresholds))
    for tenant in tenants:
        lane_snapshot = lanes.get(tenant.lane)
        if lane_snapshot is not None:
            found.extend(_tenant(tenant, lane_snapshot, thresholds))
    found.sort(key=lambda finding: -finding.severity)
    return found


@dataclass(frozen=True, slots=True)
class _Symptoms:
    ttft: float | None  # measured / target when over enough values, else None
    tpot: float | None

    @property
    def ttft_bad(self) -> bool:
        return self.ttft is not None and self.ttft > 1

    @property
    def tpot_bad(self) -> bool:
        return self.tpot is not None and self.tpot > 1


def _symptoms(s: SLOSnapshot, th: DiagnosisThresholds) -> _Symptoms:
    ttft = tpot = None
    t = s.targets
    if s.ttft is not None and s.ttft.count >= th.min_requests:
        ratios = [s.ttft.p95 / t.ttft_p95] if t.ttft_p95 is not None else []
        ratios += [s.ttft.p99 / t.ttft_p99] if t.ttft_p99 is not None else []
        ttft = max(ratios, default=None)
    if s.tpot is not None and s.tpot.count >= th.min_requests and t.tpot_p95 is not None:
        tpot = s.tpot.p95 / t.tpot_p95
    return _Symptoms(ttft, tpot)


def _severity(ratio: float, th: DiagnosisThresholds) -> Severity:
    return Severity.CRITICAL if ratio >= th.critical_ratio else Severity.WARNING


def _finding(
    code: FindingCode,
    severity: Severity,
    s: SLOSnapshot,
    message: str,
    evidence: Mapping[str, float | None],
    tenant: str | None = None,
) -> Finding:
    numbers = {key: value for key, value in evidence.items() if value is not None}
    where = s.lane if tenant is None else f"{s.lane}/{tenant}"
    return Finding(code, severity, s.lane, tenant, f"{where}: {message}", MappingProxyType(numbers))


def _lane(
    s: SLOSnapshot,
    tenants: list[SLOSnapshot],
    signals: EngineSignals | None,
    decode_drop: float | None,
    th: DiagnosisThresholds,
) -> list[Finding]:
    sym = _symptoms(s, th)
    found: list[Finding] = []
    if sym.ttft_bad and sym.tpot_bad:
        found.extend(_both_bad(s, sym, tenants, signals, th))
    elif sym.ttft_bad:
        found.extend(_ttft_bad(s, sym, th))
    elif sym.tpot_bad:
        found.extend(_tpot_bad(s, sym, signals, decode_drop, th))
    success = s.success_rate
    if success is not None and s.eligible >= th.min_requests:
        goal = s.targets.success_rate
        if success < goal:
            burn = (1 - success) / (1 - goal) if goal < 1 else float("inf")
            found.append(
                _finding(
                    FindingCode.ERROR_RATE,
                    _severity(burn, th),
                    s,
                    f"success rate {success:.1%} is below the {goal:.1%} target "
                    f"({s.failed} failed, {s.expired} expired in the window)",
                    {"success_rate": success, "success_target": goal, "failed": s.failed}
                    | {"expired": s.expired, "error_budget_ratio": burn},
                )
            )
    return found


def _share(s: SLOSnapshot, stage: str) -> float | None:
    """The stage's share of the slow requests' TTFT, else of all requests'."""
    if s.breakdown is not None:
        share = s.breakdown.stage(stage)
        value = share.slow_share if s.breakdown.slow_count else share.share
        if value is not None:
            return value
    if stage == "queue" and s.queue_wait is not None and s.ttft is not None and s.ttft.mean > 0:
        return min(1.0, s.queue_wait.mean / s.ttft.mean)
    return None


def _whose(s: SLOSnapshot) -> str:
    slow = s.breakdown is not None and s.breakdown.slow_count > 0
    return "the slow requests' TTFT" if slow else "TTFT"


def _ttft_bad(s: SLOSnapshot, sym: _Symptoms, th: DiagnosisThresholds) -> list[Finding]:
    assert s.ttft is not None
    assert sym.ttft is not None
    severity = _severity(sym.ttft, th)
    target = s.targets.ttft_target
    head = f"TTFT is {sym.ttft:.0%} of target (p95 {s.ttft.p95:.3g} s) while TPOT is fine"
    base = {"ttft_p95_s": s.ttft.p95, "ttft_target_s": target, "ttft_over_target": sym.ttft}
    queue, prefill = _share(s, "queue"), _share(s, "prefill")
    prompts = s.prompt_tokens
    ratio = prompts.p99 / max(prompts.p50, 1.0) if prompts is not None else None
    found: list[Finding] = []
    if queue is not None and queue >= th.stage_share:
        wait = s.queue_wait.p95 if s.queue_wait is not None else None
        found.append(
            _finding(
                FindingCode.QUEUEING,
                severity,
                s,
                f"{head}; queueing is {queue:.0%} of {_whose(s)}",
                base | {"queue_share": queue, "queue_wait_p95_s": wait},
            )
        )
    reasons = []
    if prompts is not None and ratio is not None and ratio >= th.long_prompt_ratio:
        reasons.append(
            f"long prompts share the lane (p99 {prompts.p99:.0f} vs p50 {prompts.p50:.0f} tokens)"
        )
    if prefill is not None and prefill >= th.stage_share:
        reasons.append(f"prefill is {prefill:.0%} of {_whose(s)}")
    if reasons:
        found.append(
            _finding(
                FindingCode.PREFILL_INTERFERENCE,
                severity,
                s,
                f"{head}; {'; '.join(reasons)}",
                base
                | {"prefill_share": prefill, "prompt_p99_over_p50": ratio}
                | _prompt_numbers(s),
            )
        )
    return found or [_unattributed(s, head, base, severity)]


def _prompt_numbers(s: SLOSnapshot) -> dict[str, float | None]:
    p = s.prompt_tokens
    if p is None:
        return {}
    return {"prompt_p50_tokens": p.p50, "prompt_p95_tokens": p.p95, "prompt_p99_tokens": p.p99}


def _unattributed(
    s: SLOSnapshot, head: str, base: dict[str, float | None], severity: Severity
) -> Finding:
    dominant = s.breakdown.dominant if s.breakdown is not None else None
    if dominant in ("schedule", "transfer"):
        shares = {f"{stage}_share": _share(s, stage) for stage in ("schedule", "transfer")}
        return _finding(
            FindingCode.SCHEDULE_OR_TRANSFER,
            severity,
            s,
            f"{head}; most of {_whose(s)} is spent in {dominant}",
            base | shares,
        )
    code = {"queue": FindingCode.QUEUEING, "prefill": FindingCode.PREFILL_INTERFERENCE}.get(
        dominant or "", FindingCode.LATENCY_UNATTRIBUTED
    )
    share = _share(s, dominant) if dominant is not None else None
    tail = f"{dominant} is the largest stage ({share:.0%})" if share else "no stage timings"
    return _finding(code, severity, s, f"{head}; {tail}", base | {f"{dominant}_share": share})


def _tpot_bad(
    s: SLOSnapshot,
    sym: _Symptoms,
    signals: EngineSignals | None,
    decode_drop: float | None,
    th: DiagnosisThresholds,
) -> list[Finding]:
    assert s.tpot is not None
    assert sym.tpot is not None
    severity = _severity(sym.tpot, th)
    head = f"TPOT is {sym.tpot:.0%} of target (p95 {s.tpot.p95 * 1000:.3g} ms) while TTFT is fine"
    base = {"tpot_p95_s": s.tpot.p95, "tpot_target_s": s.targets.tpot_p95}
    kv = signals.kv_usage if signals is not None else None
    tools = signals.tool_timeout_rate if signals is not None else None
    running = signals.running if signals is not None else None
    preempting = signals.preemption_rate if signals is not None else None
    found: list[Finding] = []
    full = kv is not None and kv >= th.kv_usage
    evicting = preempting is not None and preempting >= th.preemption_rate
    if full or evicting:
        # The engine's preemptions show KV pressure its usage may not: each
        # eviction frees the blocks it read just before.
        causes = [f"KV cache is {kv:.0%} full"] if full else []
        if evicting:
            causes.append(
                f"the engine preempts {preempting:.3g} requests/s to free KV blocks "
                "(each is computed again)"
            )
        found.append(
            _finding(
                FindingCode.KV_PRESSURE,
                severity,
                s,
                f"{head}; {' and '.join(causes)}",
                base | {"kv_usage": kv, "preemption_rate": preempting, "running": running},
            )
        )
    if tools is not None and tools >= th.tool_timeout_rate:
        found.append(
            _finding(
                FindingCode.SLOW_TOOLS,
                severity,
                s,
                f"{head}; {tools:.1%} of tool calls time out",
                base | {"tool_timeout_rate": tools},
            )
        )
    if not found or (decode_drop is not None and decode_drop >= th.decode_drop):
        why = "no KV or tool signal points elsewhere"
        if decode_drop:
            why = f"decode speed is down {decode_drop:.0%} at similar load"
        found.append(
            _finding(
                FindingCode.DECODE_CONTENTION,
                severity,
                s,
                f"{head}; decode contention: {why}",
                base
                | {"decode_drop": decode_drop, "running": running, "kv_usage": kv}
                | {"tool_timeout_rate": tools},
            )
        )
    missing = _missing(s, {"kv_usage": kv, "tool_timeout_rate": tools, "decode_drop": decode_drop})
    return found + missing


def _missing(s: SLOSnapshot, needed: Mapping[str, float | None]) -> list[Finding]:
    """An INFO finding naming the signals a diagnosis needed but did not have."""
    unknown = [name for name, value in needed.items() if value is None]
    if not unknown:
        return []
    message = f"TPOT is bad but {', '.join(unknown)} unknown or stale: not ruled out"
    return [_finding(FindingCode.SIGNALS_MISSING, Severity.INFO, s, message, {})]


def _both_bad(
    s: SLOSnapshot,
    sym: _Symptoms,
    tenants: list[SLOSnapshot],
    signals: EngineSignals | None,
    th: DiagnosisThresholds,
) -> list[Finding]:
    assert sym.ttft is not None
    assert sym.tpot is not None
    severity = _severity(max(sym.ttft, sym.tpot), th)
    head = f"TTFT ({sym.ttft:.0%} of target) and TPOT ({sym.tpot:.0%}) both over target"
    base = {"ttft_over_target": sym.ttft, "tpot_over_target": sym.tpot}
    if len(tenants) >= 2 and s.spend > 0:
        top = max(tenants, key=lambda t: t.spend)
        share = top.spend / s.spend
        if share >= th.dominant_share:
            return [
                _finding(
                    FindingCode.FAIRNESS_FAILURE,
                    severity,
                    s,
                    f"{head}; tenant {top.tenant!r} has {share:.0%} of the lane's spend",
                    base | {"tenant_share": share, "tenants": len(tenants)},
                    tenant=top.tenant,
                )
            ]
    engine: dict[str, float | None] = {}
    if signals is not None:
        engine = {"kv_usage": signals.kv_usage, "waiting": signals.waiting}
        engine["running"] = signals.running
        engine["preemption_rate"] = signals.preemption_rate
    return [
        _finding(
            FindingCode.OVERLOAD,
            severity,
            s,
            f"{head}; the lane is overloaded ({s.throughput:.3g} req/s completed, "
            f"{s.rejected_fraction or 0:.0%} rejected)",
            base
            | {"throughput_rps": s.throughput, "rejected_fraction": s.rejected_fraction}
            | engine,
        )
    ]


def _tenant(t: SLOSnapshot, lane: SLOSnapshot, th: DiagnosisThresholds) -> list[Finding]:
    sym, lane_sym = _symptoms(t, th), _symptoms(lane, th)
    if not (sym.ttft_bad or sym.tpot_bad) or lane_sym.ttft_bad or lane_sym.tpot_bad:
        return []
    ratio = max(r for r in (sym.ttft, sym.tpot) if r is not None)
    head = f"this tenant's latency is {ratio:.0%} of target while the lane is within it"
    code, tail, evidence = _tenant_cause(t, lane, sym, th)
    return [
        _finding(
            code,
            _severity(ratio, th),
            lane,
            f"{head}{tail}",
            {"tenant_over_target": ratio, **evidence},
            tenant=t.tenant,
        )
    ]


def _tenant_cause(
    t: SLOSnapshot, lane: SLOSnapshot, sym: _Symptoms, th: DiagnosisThresholds
) -> tuple[FindingCode, str, Mapping[str, float | None]]:
    """Why one tenant is slow in a healthy lane: its workload, its quota, or else routing."""
    if t.prompt_tokens is not None and lane.prompt_tokens is not None:
        mine, usual = t.prompt_tokens.p50, lane.prompt_tokens.p50
        ratio = mine / max(usual, 1.0)
        if ratio >= th.tenant_prompt_ratio:
            return (
                FindingCode.TENANT_WORKLOAD,
                f"; its median prompt is {ratio:.3g}x the lane's "
                f"({mine:.0f} vs {usual:.0f} tokens)",
                {"prompt_ratio": ratio, "tenant_prompt_p50_tokens": mine}
                | {"lane_prompt_p50_tokens": usual},
            )
    if t.queue_wait is not None and lane.queue_wait is not None:
        wait, usual = t.queue_wait.p95, lane.queue_wait.p95
        ratio_or_none = wait / usual if usual > 0 else None
        if wait > 0 and (ratio_or_none is None or ratio_or_none >= th.tenant_queue_ratio):
            return (
                FindingCode.TENANT_THROTTLED,
                f"; its p95 queue wait is {wait:.3g} s against the lane's {usual:.3g} s "
                "(check its quota and concurrency cap)",
                {"tenant_queue_wait_p95_s": wait, "queue_wait_ratio": ratio_or_none}
                | {"lane_queue_wait_p95_s": usual},
            )
    return (
        FindingCode.TENANT_OUTLIER,
        ", with prompts and queueing like the lane's (check its routing)",
        {"tenant_ttft_over_target": sym.ttft, "tenant_tpot_over_target": sym.tpot},
    )
