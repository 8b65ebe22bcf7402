"""slopolicy: SLOs, cost-aware admission, fairness and fallback for LLM serving.

The public names live here; implementation sits in submodules. Adapters,
backends and the simulator are imported from their own packages. The async
runtime's names (``Gate``, ``Ticket``) load on first use, so importing the
core never imports anyio.
"""

from __future__ import annotations

import typing

from slopolicy._version import __version__ as __version__
from slopolicy.config import LaneConfig as LaneConfig
from slopolicy.config import PolicyConfig as PolicyConfig
from slopolicy.config import TierConfig as TierConfig
from slopolicy.config import ToolConfig as ToolConfig
from slopolicy.config import ToolsConfig as ToolsConfig
from slopolicy.core import Admit as Admit
from slopolicy.core import CostEstimator as CostEstimator
from slopolicy.core import CostWeights as CostWeights
from slopolicy.core import Decision as Decision
from slopolicy.core import Defer as Defer
from slopolicy.core import Demote as Demote
from slopolicy.core import Dispatch as Dispatch
from slopolicy.core import DispatchPace as DispatchPace
from slopolicy.core import Displaced as Displaced
from slopolicy.core import EngineSignals as EngineSignals
from slopolicy.core import FallbackLadder as FallbackLadder
from slopolicy.core import Finished as Finished
from slopolicy.core import Hold as Hold
from slopolicy.core import KVReservation as KVReservation
from slopolicy.core import LaneRouter as LaneRouter
from slopolicy.core import Message as Message
from slopolicy.core import Outcome as Outcome
from slopolicy.core import OverloadState as OverloadState
from slopolicy.core import Policy as Policy
from slopolicy.core import PolicySpec as PolicySpec
from slopolicy.core import Reason as Reason
from slopolicy.core import Reject as Reject
from slopolicy.core import Request as Request
from slopolicy.core import Revocation as Revocation
from slopolicy.core import SLOTracker as SLOTracker
from slopolicy.core import Started as Started
from slopolicy.core import TaskOutcome as TaskOutcome
from slopolicy.core import TaskRef as TaskRef
from slopolicy.core import TenantQuotas as TenantQuotas
from slopolicy.core import TokenBucket as TokenBucket
from slopolicy.core import ToolLimits as ToolLimits
from slopolicy.core import ToolOutcome as ToolOutcome
from slopolicy.core import ToolPool as ToolPool
from slopolicy.core import Verdict as Verdict
from slopolicy.errors import ConfigError as ConfigError
from slopolicy.errors import Expired as Expired
from slopolicy.errors import GateClosed as GateClosed
from slopolicy.errors import InvalidRequest as InvalidRequest
from slopolicy.errors import Rejected as Rejected
from slopolicy.errors import Revoked as Revoked
from slopolicy.errors import RoutingError as RoutingError
from slopolicy.errors import SlopolicyError as SlopolicyError
from slopolicy.errors import ToolTimeout as ToolTimeout
from slopolicy.errors import UsageError as UsageError
from slopolicy.errors import WouldBlock as WouldBlock

if typing.TYPE_CHECKING:
    from slopolicy.runtime import Gate as Gate
    from slopolicy.runtime import Ticket as Ticket
    from slopolicy.runtime import ToolCall as ToolCall


__all__ = (
    "Admit",
    "ConfigError",
    "CostEstimator",
    "CostWeights",
    "Decision",
    "Defer",
    "Demote",
    "Dispatch",
    "DispatchPace",
    "Displaced",
    "EngineSignals",
    "Expired",
    "FallbackLadder",
    "Finished",
    "Gate",
    "GateClosed",
    "Hold",
    "InvalidRequest",
    "KVReservation",
    "LaneConfig",
    "LaneRouter",
    "Message",
    "Outcome",
    "OverloadState",
    "Policy",
    "PolicyConfig",
    "PolicySpec",
    "Reason",
    "Reject",
    "Rejected",
    "Request",
    "Revocation",
    "Revoked",
    "RoutingError",
    "SLOTracker",
    "SlopolicyError",
    "Started",
    "TaskOutcome",
    "TaskRef",
    "TenantQuotas",
    "Ticket",
    "TierConfig",
    "TokenBucket",
    "ToolCall",
    "ToolConfig",
    "ToolLimits",
    "ToolOutcome",
    "ToolPool",
    "ToolTimeout",
    "ToolsConfig",
    "UsageError",
    "Verdict",
    "WouldBlock",
    "__version__",
)

_RUNTIME = frozenset({"Gate", "Ticket", "ToolCall"})


def __getattr__(name: str) -> typing.Any:
    # The runtime imports anyio; load it only when one of its names is used.
    if name in _RUNTIME:
        import slopolicy.runtime

        value = getattr(slopolicy.runtime, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_RUNTIME})
