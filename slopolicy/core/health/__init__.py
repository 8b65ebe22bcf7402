"""Service health: engine signals, the policy's health view, diagnosis and its findings.

A thin face: the public names of this wing, re-exported from its modules.
"""

from __future__ import annotations

from slopolicy.core.health.diagnosis import diagnose as diagnose
from slopolicy.core.health.findings import DiagnosisThresholds as DiagnosisThresholds
from slopolicy.core.health.findings import Finding as Finding
from slopolicy.core.health.findings import FindingCode as FindingCode
from slopolicy.core.health.findings import Severity as Severity
from slopolicy.core.health.health import Health as Health
from slopolicy.core.health.signals import DecodeBaseline as DecodeBaseline
from slopolicy.core.health.signals import EngineSignals as EngineSignals
from slopolicy.core.health.signals import SignalBoard as SignalBoard

__all__ = (
    "DecodeBaseline",
    "DiagnosisThresholds",
    "EngineSignals",
    "Finding",
    "FindingCode",
    "Health",
    "Severity",
    "SignalBoard",
    "diagnose",
)
