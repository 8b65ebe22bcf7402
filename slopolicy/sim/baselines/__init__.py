"""What people run today, on the same engine model as ours.

Without a queue of their own (:mod:`~slopolicy.sim.baselines.simple`):
``fcfs`` (vLLM's default), ``priority`` (vLLM ``--scheduling-policy
priority`` by lane), ``rpm`` (a LiteLLM-style requests-per-minute limit).
Holding requests until the engine can take them: ``vtc`` (Virtual Token
Counters, :mod:`~slopolicy.sim.baselines.vtc`), ``llm-d`` and ``llm-d-slo``
(the llm-d router's flow control, with its default 60 s TTL and with each
lane's TTFT target as the TTL, :mod:`~slopolicy.sim.baselines.llmd`),
``dynamo`` (NVIDIA Dynamo's deficit round-robin router queue,
:mod:`~slopolicy.sim.baselines.dynamo`). Refusing at the engine's queue:
``vllm-queue`` (vLLM's queue limits, :mod:`~slopolicy.sim.baselines.vllm_queue`).
``docs/simulator.md`` cites each one's source.
"""

from __future__ import annotations

from slopolicy.sim.baselines.dynamo import DynamoRouter as DynamoRouter
from slopolicy.sim.baselines.llmd import LlmdFlowControl as LlmdFlowControl
from slopolicy.sim.baselines.simple import FCFS as FCFS
from slopolicy.sim.baselines.simple import RPM as RPM
from slopolicy.sim.baselines.simple import LanePriority as LanePriority
from slopolicy.sim.baselines.simple import Lanes as Lanes
from slopolicy.sim.baselines.simple import lane_of as lane_of
from slopolicy.sim.baselines.vllm_queue import VLLMQueueLimits as VLLMQueueLimits
from slopolicy.sim.baselines.vtc import VTC as VTC

__all__ = (
    "BASELINES",
    "FCFS",
    "RPM",
    "VTC",
    "DynamoRouter",
    "LanePriority",
    "Lanes",
    "LlmdFlowControl",
    "VLLMQueueLimits",
    "lane_of",
)

#: The built-in baselines' names, in the order reports list them.
BASELINES = ("fcfs", "priority", "vtc", "rpm", "llm-d", "llm-d-slo", "dynamo", "vllm-queue")
