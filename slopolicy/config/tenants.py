"""Tenant tiers: quota in cost units, caps, fairness weight, lane access."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel, CostUnits, Count, Weight
from slopolicy.config.lanes import LaneName
from slopolicy.core.specs import LaneQuotaSpec, TierSpec

__all__ = ("LaneQuotaConfig", "TierConfig")

_Count = Count


class LaneQuotaConfig(ConfigModel):
    """A tier's split for one lane: ``share`` (0-1] of its rate and burst, and
    an optional concurrency cap per tenant in that lane."""

    # At least 1e-6: a share of a rate must not round to no rate at all.
    share: Annotated[float, Field(ge=1e-6, le=1)] = 1.0
    max_concurrency: _Count | None = None


class TierConfig(ConfigModel):
    """A tenant tier.

    Attributes:
        rate: sustained cost units per second per tenant (unset: unlimited).
        burst: bucket depth in cost units; required with ``rate``.
        max_concurrency: requests in flight per tenant.
        max_prompt_tokens: hard prompt cap per request, in tokens.
        weight: fair-share weight against other tenants in a lane.
        default_lane: lane for requests without an allowed hint (default: the first lane).
        allowed_lanes: lanes the tier may use (unset: all).
        lanes: per-lane quota splits, e.g. ``{interactive: {share: 0.7}}``.
    """

    rate: CostUnits | None = None
    burst: CostUnits | None = None
    max_concurrency: _Count | None = None
    max_prompt_tokens: _Count | None = None
    weight: Weight = 1.0
    default_lane: LaneName | None = None
    allowed_lanes: list[LaneName] | None = None
    lanes: dict[LaneName, LaneQuotaConfig] = {}

    @model_validator(mode="after")
    def _burst_with_rate(self) -> TierConfig:
        if (self.rate is None) != (self.burst is None):
            raise ValueError("rate and burst must be set together")
        return self

    def to_spec(self, name: str, first_lane: str) -> TierSpec:
        """The plain core value for the tier called ``name``."""
        return TierSpec(
            name=name,
            default_lane=self.default_lane or first_lane,
            rate=self.rate,
            burst=self.burst,
            max_concurrency=self.max_concurrency,
            max_prompt_tokens=self.max_prompt_tokens,
            weight=self.weight,
            allowed_lanes=None if self.allowed_lanes is None else frozenset(self.allowed_lanes),
            lane_quotas=tuple(
                LaneQuotaSpec(lane, quota.share, quota.max_concurrency)
                for lane, quota in self.lanes.items()
            ),
        )
