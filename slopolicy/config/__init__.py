"""Policy configuration as frozen pydantic models, loaded from dict, YAML, TOML or JSON.

Models check user input and convert to the plain values in
:mod:`slopolicy.core.specs`; the core never imports pydantic.
"""

from __future__ import annotations

from slopolicy.config.engine import CostConfig as CostConfig
from slopolicy.config.engine import KVPoolConfig as KVPoolConfig
from slopolicy.config.engine import TokenizerConfig as TokenizerConfig
from slopolicy.config.ladder import RUNGS as RUNGS
from slopolicy.config.ladder import LadderConfig as LadderConfig
from slopolicy.config.ladder import RungName as RungName
from slopolicy.config.ladder import Threshold as Threshold
from slopolicy.config.lanes import LaneConfig as LaneConfig
from slopolicy.config.lanes import LaneSLO as LaneSLO
from slopolicy.config.policy import DEFAULT_LANES as DEFAULT_LANES
from slopolicy.config.policy import PolicyConfig as PolicyConfig
from slopolicy.config.tenants import LaneQuotaConfig as LaneQuotaConfig
from slopolicy.config.tenants import TierConfig as TierConfig
from slopolicy.config.tools import ToolConfig as ToolConfig
from slopolicy.config.tools import ToolsConfig as ToolsConfig

__all__ = (
    "DEFAULT_LANES",
    "RUNGS",
    "CostConfig",
    "KVPoolConfig",
    "LadderConfig",
    "LaneConfig",
    "LaneQuotaConfig",
    "LaneSLO",
    "PolicyConfig",
    "RungName",
    "Threshold",
    "TierConfig",
    "TokenizerConfig",
    "ToolConfig",
    "ToolsConfig",
)
