"""The sans-IO core: synchronous objects that take time as ``now`` and never do I/O.

Only the standard library and tiktoken are imported here, so the simulator,
the async gate and the Redis backend can all drive the same objects.
"""

from __future__ import annotations

from slopolicy.core.cost.estimator import CostEstimate as CostEstimate
from slopolicy.core.cost.estimator import CostEstimator as CostEstimator
from slopolicy.core.cost.estimator import CostWeights as CostWeights
from slopolicy.core.cost.estimator import TokenEstimate as TokenEstimate
from slopolicy.core.cost.tokens import CallableCounter as CallableCounter
from slopolicy.core.cost.tokens import HeuristicCounter as HeuristicCounter
from slopolicy.core.cost.tokens import TiktokenCounter as TiktokenCounter
from slopolicy.core.cost.tokens import TokenCounter as TokenCounter
from slopolicy.core.cost.tokens import TokenizerFallbackWarning as TokenizerFallbackWarning
from slopolicy.core.cost.tokens import load_counter as load_counter
from slopolicy.core.decisions import Admit as Admit
from slopolicy.core.decisions import Decision as Decision
from slopolicy.core.decisions import Defer as Defer
from slopolicy.core.decisions import Demote as Demote
from slopolicy.core.decisions import Displaced as Displaced
from slopolicy.core.decisions import Reject as Reject
from slopolicy.core.decisions import Step as Step
from slopolicy.core.health.diagnosis import diagnose as diagnose
from slopolicy.core.health.findings import DiagnosisThresholds as DiagnosisThresholds
from slopolicy.core.health.findings import Finding as Finding
from slopolicy.core.health.findings import FindingCode as FindingCode
from slopolicy.core.health.findings import Severity as Severity
from slopolicy.core.health.health import Health as Health
from slopolicy.core.health.signals import DecodeBaseline as DecodeBaseline
from slopolicy.core.health.signals import EngineSignals as EngineSignals
from slopolicy.core.health.signals import SignalBoard as SignalBoard
from slopolicy.core.kv.ledger import KVReservation as KVReservation
from slopolicy.core.kv.peak import peak_fits as peak_fits
from slopolicy.core.kv.snapshot import KVStatistics as KVStatistics
from slopolicy.core.ladder.events import LadderCause as LadderCause
from slopolicy.core.ladder.events import LadderDirection as LadderDirection
from slopolicy.core.ladder.events import LadderEvent as LadderEvent
from slopolicy.core.ladder.events import LadderStatistics as LadderStatistics
from slopolicy.core.ladder.events import LadderVerdict as LadderVerdict
from slopolicy.core.ladder.ladder import FallbackLadder as FallbackLadder
from slopolicy.core.ladder.overload import OverloadState as OverloadState
from slopolicy.core.ladder.overload import overload_state as overload_state
from slopolicy.core.ladder.pressure import Pressure as Pressure
from slopolicy.core.ladder.pressure import Trigger as Trigger
from slopolicy.core.ladder.pressure import Zone as Zone
from slopolicy.core.ladder.pressure import default_triggers as default_triggers
from slopolicy.core.ladder.rungs import BUILTIN_RUNGS as BUILTIN_RUNGS
from slopolicy.core.ladder.rungs import AdmissionAction as AdmissionAction
from slopolicy.core.ladder.rungs import Rung as Rung
from slopolicy.core.ladder.rungs import default_rungs as default_rungs
from slopolicy.core.lifecycle import Dispatch as Dispatch
from slopolicy.core.lifecycle import PolicyStatistics as PolicyStatistics
from slopolicy.core.lifecycle import Started as Started
from slopolicy.core.outcome import STAGES as STAGES
from slopolicy.core.outcome import Finished as Finished
from slopolicy.core.outcome import Hold as Hold
from slopolicy.core.outcome import Outcome as Outcome
from slopolicy.core.outcome import Revocation as Revocation
from slopolicy.core.policy import Policy as Policy
from slopolicy.core.queueing.fairqueue import FairQueue as FairQueue
from slopolicy.core.queueing.fairqueue import FairQueueStatistics as FairQueueStatistics
from slopolicy.core.queueing.pacing import DispatchPace as DispatchPace
from slopolicy.core.queueing.scheduler import LaneScheduler as LaneScheduler
from slopolicy.core.quota.bucket import BucketStatistics as BucketStatistics
from slopolicy.core.quota.bucket import TokenBucket as TokenBucket
from slopolicy.core.quota.lease import Lease as Lease
from slopolicy.core.quota.refusals import QuotaRefusal as QuotaRefusal
from slopolicy.core.quota.tenants import QuotaStatistics as QuotaStatistics
from slopolicy.core.quota.tenants import TenantQuotas as TenantQuotas
from slopolicy.core.quota.tenants import TenantStatistics as TenantStatistics
from slopolicy.core.reasons import Reason as Reason
from slopolicy.core.request import Message as Message
from slopolicy.core.request import Request as Request
from slopolicy.core.routing.router import LaneRouter as LaneRouter
from slopolicy.core.routing.rules import RouteContext as RouteContext
from slopolicy.core.routing.rules import RoutingRule as RoutingRule
from slopolicy.core.routing.rules import Verdict as Verdict
from slopolicy.core.slo.budget import Breakdown as Breakdown
from slopolicy.core.slo.budget import LatencyBudget as LatencyBudget
from slopolicy.core.slo.budget import StageShare as StageShare
from slopolicy.core.slo.burn import DEFAULT_BURN_RULES as DEFAULT_BURN_RULES
from slopolicy.core.slo.burn import Alert as Alert
from slopolicy.core.slo.burn import AlertSeverity as AlertSeverity
from slopolicy.core.slo.burn import BurnRate as BurnRate
from slopolicy.core.slo.burn import BurnRule as BurnRule
from slopolicy.core.slo.quantiles import QuantileSketch as QuantileSketch
from slopolicy.core.slo.sketches import SlidingQuantiles as SlidingQuantiles
from slopolicy.core.slo.snapshot import SLOSnapshot as SLOSnapshot
from slopolicy.core.slo.targets import Objective as Objective
from slopolicy.core.slo.targets import SLOTargets as SLOTargets
from slopolicy.core.slo.targets import Summary as Summary
from slopolicy.core.slo.tracker import CostModel as CostModel
from slopolicy.core.slo.tracker import SLOTracker as SLOTracker
from slopolicy.core.slo.tracker_set import TrackerSet as TrackerSet
from slopolicy.core.specs import LaneQuotaSpec as LaneQuotaSpec
from slopolicy.core.specs import LaneSpec as LaneSpec
from slopolicy.core.specs import OverBudget as OverBudget
from slopolicy.core.specs import PolicySource as PolicySource
from slopolicy.core.specs import PolicySpec as PolicySpec
from slopolicy.core.specs import TierSpec as TierSpec
from slopolicy.core.specs import TierTable as TierTable
from slopolicy.core.tasks import TaskBudget as TaskBudget
from slopolicy.core.tasks import TaskEnded as TaskEnded
from slopolicy.core.tasks import TaskOutcome as TaskOutcome
from slopolicy.core.tasks import TaskRef as TaskRef
from slopolicy.core.tasks import TaskSnapshot as TaskSnapshot
from slopolicy.core.tasks import TaskTable as TaskTable
from slopolicy.core.tools import ToolDisplaced as ToolDisplaced
from slopolicy.core.tools import ToolLease as ToolLease
from slopolicy.core.tools import ToolLimits as ToolLimits
from slopolicy.core.tools import ToolOutcome as ToolOutcome
from slopolicy.core.tools import ToolPool as ToolPool
from slopolicy.core.tools import ToolPoolStatistics as ToolPoolStatistics
from slopolicy.core.tools import ToolRefused as ToolRefused
from slopolicy.core.tools import ToolSpec as ToolSpec
from slopolicy.core.tools import ToolStatistics as ToolStatistics
from slopolicy.core.tools import ToolWaiting as ToolWaiting

__all__ = (
    "BUILTIN_RUNGS",
    "DEFAULT_BURN_RULES",
    "STAGES",
    "AdmissionAction",
    "Admit",
    "Alert",
    "AlertSeverity",
    "Breakdown",
    "BucketStatistics",
    "BurnRate",
    "BurnRule",
    "CallableCounter",
    "CostEstimate",
    "CostEstimator",
    "CostModel",
    "CostWeights",
    "Decision",
    "DecodeBaseline",
    "Defer",
    "Demote",
    "DiagnosisThresholds",
    "Dispatch",
    "DispatchPace",
    "Displaced",
    "EngineSignals",
    "FairQueue",
    "FairQueueStatistics",
    "FallbackLadder",
    "Finding",
    "FindingCode",
    "Finished",
    "Health",
    "HeuristicCounter",
    "Hold",
    "KVReservation",
    "KVStatistics",
    "LadderCause",
    "LadderDirection",
    "LadderEvent",
    "LadderStatistics",
    "LadderVerdict",
    "LaneQuotaSpec",
    "LaneRouter",
    "LaneScheduler",
    "LaneSpec",
    "LatencyBudget",
    "Lease",
    "Message",
    "Objective",
    "Outcome",
    "OverBudget",
    "OverloadState",
    "Policy",
    "PolicySource",
    "PolicySpec",
    "PolicyStatistics",
    "Pressure",
    "QuantileSketch",
    "QuotaRefusal",
    "QuotaStatistics",
    "Reason",
    "Reject",
    "Request",
    "Revocation",
    "RouteContext",
    "RoutingRule",
    "Rung",
    "SLOSnapshot",
    "SLOTargets",
    "SLOTracker",
    "Severity",
    "SignalBoard",
    "SlidingQuantiles",
    "StageShare",
    "Started",
    "Step",
    "Summary",
    "TaskBudget",
    "TaskEnded",
    "TaskOutcome",
    "TaskRef",
    "TaskSnapshot",
    "TaskTable",
    "TenantQuotas",
    "TenantStatistics",
    "TierSpec",
    "TierTable",
    "TiktokenCounter",
    "TokenBucket",
    "TokenCounter",
    "TokenEstimate",
    "TokenizerFallbackWarning",
    "ToolDisplaced",
    "ToolLease",
    "ToolLimits",
    "ToolOutcome",
    "ToolPool",
    "ToolPoolStatistics",
    "ToolRefused",
    "ToolSpec",
    "ToolStatistics",
    "ToolWaiting",
    "TrackerSet",
    "Trigger",
    "Verdict",
    "Zone",
    "default_rungs",
    "default_triggers",
    "diagnose",
    "load_counter",
    "overload_state",
    "peak_fits",
)
