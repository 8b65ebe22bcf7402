"""The deterministic simulator: our policy against today's baselines, in virtual time.

A discrete-event model of a continuous-batching engine (vLLM v1's scheduler
and a calibrated cost model) runs a workload (synthetic streams, or a
recorded trace) under the real :class:`~slopolicy.Policy` and under the
baselines people run today (FCFS, static lane priority, VTC, requests per
minute, llm-d's flow control, Dynamo's router queue, vLLM's queue limits) or
your own schedulers, and reports TTFT, TPOT, TBT, attainment, goodput
(degraded answers apart) and fairness per policy, lane and tenant, computed
exactly from every request's record; :func:`sweep` finds each policy's
goodput capacity. Nothing of the policy is re-implemented; nothing reads the
wall clock. See ``docs/simulator.md``.

Quick start::

    from slopolicy.sim import run_scenario, seed_scenario

    comparison = run_scenario(seed_scenario())
    for name, report in comparison.reports.items():
        print(name, report.goodput_rps, report.lanes["interactive"].ttft_p99_s)

The rich console and the plots live in :mod:`slopolicy.sim.console` and
:mod:`slopolicy.sim.plot` (the latter needs ``slopolicy[plot]``).
"""

from __future__ import annotations

from slopolicy.errors import SimulationError as SimulationError
from slopolicy.errors import TraceError as TraceError
from slopolicy.sim.arrival_processes import ArrivalProcess as ArrivalProcess
from slopolicy.sim.arrival_processes import Burst as Burst
from slopolicy.sim.arrival_processes import GammaArrivals as GammaArrivals
from slopolicy.sim.arrival_processes import OnOff as OnOff
from slopolicy.sim.arrival_processes import Poisson as Poisson
from slopolicy.sim.arrival_processes import Ramp as Ramp
from slopolicy.sim.baselines import BASELINES as BASELINES
from slopolicy.sim.baselines import FCFS as FCFS
from slopolicy.sim.baselines import RPM as RPM
from slopolicy.sim.baselines import VTC as VTC
from slopolicy.sim.baselines import DynamoRouter as DynamoRouter
from slopolicy.sim.baselines import LanePriority as LanePriority
from slopolicy.sim.baselines import LlmdFlowControl as LlmdFlowControl
from slopolicy.sim.baselines import VLLMQueueLimits as VLLMQueueLimits
from slopolicy.sim.capacity import Capacity as Capacity
from slopolicy.sim.capacity import find_capacity as find_capacity
from slopolicy.sim.claims import Claim as Claim
from slopolicy.sim.claims import overload_claims as overload_claims
from slopolicy.sim.claims import seed_claims as seed_claims
from slopolicy.sim.comparison import OURS as OURS
from slopolicy.sim.comparison import POLICIES as POLICIES
from slopolicy.sim.comparison import Comparison as Comparison
from slopolicy.sim.comparison import classify as classify
from slopolicy.sim.comparison import compare as compare
from slopolicy.sim.comparison import evaluate as evaluate
from slopolicy.sim.comparison import lane_targets as lane_targets
from slopolicy.sim.comparison import make_scheduler as make_scheduler
from slopolicy.sim.engine import Engine as Engine
from slopolicy.sim.engine_spec import EngineSpec as EngineSpec
from slopolicy.sim.engine_spec import EngineStatistics as EngineStatistics
from slopolicy.sim.engine_spec import StepResult as StepResult
from slopolicy.sim.export import SCHEMA as SCHEMA
from slopolicy.sim.export import SWEEP_SCHEMA as SWEEP_SCHEMA
from slopolicy.sim.export import sweep_to_json as sweep_to_json
from slopolicy.sim.export import to_json as to_json
from slopolicy.sim.gaps import STALL_S as STALL_S
from slopolicy.sim.gaps import TBTSummary as TBTSummary
from slopolicy.sim.interface import BEHIND as BEHIND
from slopolicy.sim.interface import Release as Release
from slopolicy.sim.interface import Released as Released
from slopolicy.sim.interface import Scheduler as Scheduler
from slopolicy.sim.interface import SimAdmission as SimAdmission
from slopolicy.sim.lengths import Constant as Constant
from slopolicy.sim.lengths import Empirical as Empirical
from slopolicy.sim.lengths import LengthDistribution as LengthDistribution
from slopolicy.sim.lengths import LogNormal as LogNormal
from slopolicy.sim.lengths import Uniform as Uniform
from slopolicy.sim.offered_load import Load as Load
from slopolicy.sim.offered_load import capacity as capacity
from slopolicy.sim.offered_load import limit as limit
from slopolicy.sim.offered_load import load_outside_bursts as load_outside_bursts
from slopolicy.sim.offered_load import saturated_cost_rate as saturated_cost_rate
from slopolicy.sim.ours import LadderMove as LadderMove
from slopolicy.sim.ours import PolicyScheduler as PolicyScheduler
from slopolicy.sim.policies import PolicyFactory as PolicyFactory
from slopolicy.sim.policies import PolicySpec as PolicySpec
from slopolicy.sim.policies import resolve as resolve
from slopolicy.sim.profiles import PROFILES as PROFILES
from slopolicy.sim.profiles import EngineProfile as EngineProfile
from slopolicy.sim.profiles import profile as profile
from slopolicy.sim.records import RequestRecord as RequestRecord
from slopolicy.sim.records import SimOutcome as SimOutcome
from slopolicy.sim.reports import FallbackSummary as FallbackSummary
from slopolicy.sim.reports import LaneReport as LaneReport
from slopolicy.sim.reports import PolicyReport as PolicyReport
from slopolicy.sim.reports import TenantReport as TenantReport
from slopolicy.sim.reports import jain_index as jain_index
from slopolicy.sim.reports import quantile as quantile
from slopolicy.sim.reports import report as report
from slopolicy.sim.scenario import BUILTIN_SCENARIOS as BUILTIN_SCENARIOS
from slopolicy.sim.scenario import Scenario as Scenario
from slopolicy.sim.scenario import builtin_scenario as builtin_scenario
from slopolicy.sim.scenario import load_scenario as load_scenario
from slopolicy.sim.scenario import run_scenario as run_scenario
from slopolicy.sim.scenario import scenario_from_dict as scenario_from_dict
from slopolicy.sim.scenario import seed_scenario as seed_scenario
from slopolicy.sim.scenario_models import ScenarioModel as ScenarioModel
from slopolicy.sim.shares import InShare as InShare
from slopolicy.sim.shares import fair_shares as fair_shares
from slopolicy.sim.shares import in_share as in_share
from slopolicy.sim.shares import in_share_attainment as in_share_attainment
from slopolicy.sim.simulator import Client as Client
from slopolicy.sim.simulator import SimulationResult as SimulationResult
from slopolicy.sim.simulator import simulate as simulate
from slopolicy.sim.streams import Stream as Stream
from slopolicy.sim.streams import Tenants as Tenants
from slopolicy.sim.streams import build_workload as build_workload
from slopolicy.sim.sweep import NoHarm as NoHarm
from slopolicy.sim.sweep import PolicySweep as PolicySweep
from slopolicy.sim.sweep import Sweep as Sweep
from slopolicy.sim.sweep import SweepPoint as SweepPoint
from slopolicy.sim.sweep import sweep as sweep
from slopolicy.sim.traces import AZURE_2023 as AZURE_2023
from slopolicy.sim.traces import GATE_LOG as GATE_LOG
from slopolicy.sim.traces import TraceFormat as TraceFormat
from slopolicy.sim.traces import azure_2023 as azure_2023
from slopolicy.sim.traces import read_trace as read_trace
from slopolicy.sim.traces import read_traces as read_traces
from slopolicy.sim.view import EngineView as EngineView
from slopolicy.sim.workload import SimRequest as SimRequest
from slopolicy.sim.workload import Workload as Workload

__all__ = (
    "AZURE_2023",
    "BASELINES",
    "BEHIND",
    "BUILTIN_SCENARIOS",
    "FCFS",
    "GATE_LOG",
    "OURS",
    "POLICIES",
    "PROFILES",
    "RPM",
    "SCHEMA",
    "STALL_S",
    "SWEEP_SCHEMA",
    "VTC",
    "ArrivalProcess",
    "Burst",
    "Capacity",
    "Claim",
    "Client",
    "Comparison",
    "Constant",
    "DynamoRouter",
    "Empirical",
    "Engine",
    "EngineProfile",
    "EngineSpec",
    "EngineStatistics",
    "EngineView",
    "FallbackSummary",
    "GammaArrivals",
    "InShare",
    "LadderMove",
    "LanePriority",
    "LaneReport",
    "LengthDistribution",
    "LlmdFlowControl",
    "Load",
    "LogNormal",
    "NoHarm",
    "OnOff",
    "Poisson",
    "PolicyFactory",
    "PolicyReport",
    "PolicyScheduler",
    "PolicySpec",
    "PolicySweep",
    "Ramp",
    "Release",
    "Released",
    "RequestRecord",
    "Scenario",
    "ScenarioModel",
    "Scheduler",
    "SimAdmission",
    "SimOutcome",
    "SimRequest",
    "SimulationError",
    "SimulationResult",
    "StepResult",
    "Stream",
    "Sweep",
    "SweepPoint",
    "TBTSummary",
    "TenantReport",
    "Tenants",
    "TraceError",
    "TraceFormat",
    "Uniform",
    "VLLMQueueLimits",
    "Workload",
    "azure_2023",
    "build_workload",
    "builtin_scenario",
    "capacity",
    "classify",
    "compare",
    "evaluate",
    "fair_shares",
    "find_capacity",
    "in_share",
    "in_share_attainment",
    "jain_index",
    "lane_targets",
    "limit",
    "load_outside_bursts",
    "load_scenario",
    "make_scheduler",
    "overload_claims",
    "profile",
    "quantile",
    "read_trace",
    "read_traces",
    "report",
    "resolve",
    "run_scenario",
    "saturated_cost_rate",
    "scenario_from_dict",
    "seed_claims",
    "seed_scenario",
    "simulate",
    "sweep",
    "sweep_to_json",
    "to_json",
)
