"""The whole policy: lanes, tiers, cost, tokenizer, KV pool, ladder."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from slopolicy.config._base import ConfigModel, Count
from slopolicy.config.engine import CostConfig, EngineConfig, KVPoolConfig, TokenizerConfig
from slopolicy.config.ladder import LadderConfig
from slopolicy.config.lanes import LaneConfig, LaneSLO
from slopolicy.config.tenants import TierConfig
from slopolicy.config.tools import ToolsConfig
from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.cost.tokens import TokenCounter
from slopolicy.core.request import Request
from slopolicy.core.routing import LaneRouter, RoutingRule
from slopolicy.core.specs import LaneSpec, PolicySpec, TierTable

__all__ = ("DEFAULT_LANES", "PolicyConfig")

#: ``engine.prefill_horizon_s: auto``: the prompt work handed to the engine
#: ahead of a start is what it computes in this share of the tightest TPOT
#: target (an iteration's prompt chunk then leaves a quarter of the target to
#: the decode work beside it), or, without TPOT targets, of the tightest TTFT
#: target (the rest of it is the policy's to order).
_TPOT_SHARE = 0.75
_TTFT_SHARE = 0.25

#: The documented default: chat, long-prompt work, and offline jobs.
DEFAULT_LANES: tuple[LaneConfig, ...] = (
    LaneConfig(
        name="interactive",
        slo=LaneSLO(ttft_p95_s=0.5, ttft_p99_s=1.0, tpot_p95_s=0.1, success_rate=0.999),
        max_new_tokens=None,
        max_prompt_tokens=8192,
        over_budget="demote",
        queue_capacity=256,
        max_queue_wait_s=2.0,
        weight=8.0,
        kv_reserve=0.2,
    ),
    LaneConfig(
        name="heavy",
        slo=LaneSLO(ttft_p95_s=15.0, ttft_p99_s=30.0, tpot_p95_s=0.15, success_rate=0.99),
        max_new_tokens=None,
        max_prompt_tokens=131_072,
        over_budget="reject",
        queue_capacity=512,
        max_queue_wait_s=120.0,
        weight=2.0,
    ),
    LaneConfig(
        name="background",
        slo=LaneSLO(e2e_p95_s=600.0, success_rate=0.99),
        max_new_tokens=None,
        max_prompt_tokens=131_072,
        over_budget="reject",
        queue_capacity=4096,
        max_queue_wait_s=3600.0,
        weight=1.0,
    ),
)

#: The default tier carries no contract limits (rate, concurrency): those are
#: a service's promises to its tenants and refuse work whether or not the
#: engine has room. Protection (fair queues, fair queue admission, the
#: prefill gate, SLO deadlines, the ladder) binds only under saturation.
_DEFAULT_TIER = TierConfig(max_prompt_tokens=131_072)


class PolicyConfig(ConfigModel):
    """The whole policy. ``PolicyConfig()`` is the documented default.

    Load one with :meth:`from_file` (YAML, TOML or JSON) or :meth:`from_dict`;
    both raise :class:`~slopolicy.ConfigError` listing every bad field.

    Attributes:
        lanes: lanes from most interactive to least.
        tiers: tenant tiers by name.
        default_tier: tier for tenants not in ``tenants``.
        tenants: tenant id -> tier name.
        cost: cost-score weights.
        tokenizer: prompt counting.
        kv: the engine's KV block pool.
        engine: how many requests the engine may run at once.
        max_tenants: tenant quota states kept; idle ones beyond are evicted.
        ladder: the fallback ladder.
        tools: limits for the host's tool calls (``gate.tool``); the default
            limits nothing.
    """

    version: Literal[1] = 1
    lanes: Annotated[list[LaneConfig], Field(min_length=1)] = list(DEFAULT_LANES)
    tiers: Annotated[dict[str, TierConfig], Field(min_length=1)] = {"default": _DEFAULT_TIER}
    default_tier: str = "default"
    tenants: dict[Annotated[str, Field(min_length=1, max_length=256)], str] = {}
    cost: CostConfig = CostConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    kv: KVPoolConfig = KVPoolConfig()
    engine: EngineConfig = EngineConfig()
    max_tenants: Count = 100_000
    ladder: LadderConfig = LadderConfig()
    tools: ToolsConfig = ToolsConfig()

    @model_validator(mode="after")
    def _cross_references(self) -> PolicyConfig:
        problems = list(self._problems())
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("policy", message), loc=loc, input=value
                    )
                    for loc, message, value in problems
                ],
            )
        return self

    def _problems(self) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        names = [lane.name for lane in self.lanes]
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                yield ("lanes", index, "name"), f"lane {name!r} is defined twice", name
            seen.add(name)
        reserved = sum(lane.kv_reserve for lane in self.lanes)
        if reserved >= 1:
            yield ("lanes",), f"kv_reserve adds up to {reserved:g}; it must stay below 1", reserved
        seats = sum(lane.seat_reserve for lane in self.lanes)
        if seats >= self.engine.max_running:
            message = f"seat_reserve adds up to {seats}; it must stay below engine.max_running"
            yield ("lanes",), message, seats
        if self.default_tier not in self.tiers:
            yield ("default_tier",), f"unknown tier {self.default_tier!r}", self.default_tier
        for tenant, tier_name in self.tenants.items():
            if tier_name not in self.tiers:
                yield ("tenants", tenant), f"unknown tier {tier_name!r}", tier_name
        for tier_name, tier in self.tiers.items():
            yield from _tier_problems(tier_name, tier, names)
        yield from _ladder_problems(self.ladder, seen)

    def lane_specs(self) -> tuple[LaneSpec, ...]:
        """Plain core values for the lanes, in order."""
        return tuple(lane.to_spec(self.cost.alpha) for lane in self.lanes)

    def tier_table(self) -> TierTable:
        """The tenant-to-tier table."""
        first = self.lanes[0].name
        return TierTable(
            [tier.to_spec(name, first) for name, tier in self.tiers.items()],
            self.default_tier,
            self.tenants,
        )

    def build_estimator(self, counter: TokenCounter | None = None) -> CostEstimator:
        """The cost estimator this policy describes (``counter`` overrides the encoding)."""
        return self.tokenizer.build_estimator(self.cost.to_weights(), counter)

    def build_router(
        self, estimator: CostEstimator | None = None, rules: Sequence[RoutingRule] = ()
    ) -> LaneRouter:
        """The lane router this policy describes, with optional custom ``rules``."""
        return LaneRouter(
            self.lane_specs(),
            estimator=estimator if estimator is not None else self.build_estimator(),
            tiers=self.tier_table(),
            rules=rules,
        )

    def to_spec(
        self,
        *,
        counter: TokenCounter | None = None,
        rules: Sequence[RoutingRule] = (),
        compress: Callable[[Request], Request] | None = None,
    ) -> PolicySpec:
        """The plain core values a :class:`~slopolicy.Policy` is built from:
        ``counter`` overrides the tokenizer, ``rules`` adds routing rules,
        ``compress`` is the ladder's prompt-compression hook."""
        names = [lane.name for lane in self.lanes]
        return PolicySpec(
            router=self.build_router(self.build_estimator(counter), rules),
            kv_blocks=self.kv.blocks,
            kv_block_size=self.kv.block_size,
            kv_follows_engine=self.kv.num_blocks is None,
            kv_output_quantile=self.kv.output_quantile,
            max_running=self.engine.max_running,
            pace=self.engine.build_pace(),
            max_tenants=self.max_tenants,
            targets={lane.name: lane.slo.to_targets() for lane in self.lanes},
            ladder=self.ladder.build(
                names,
                compress,
                untimed={lane.name for lane in self.lanes if lane.slo.ttft_target_s is None},
            ),
            watch_lane=self.ladder.watch_lane or names[0],
            evaluate_every=self.ladder.evaluate_every_s,
            signal_max_age=self.ladder.signal_max_age_s,
            prefill_horizon=self.prefill_horizon(),
            tools=self.tools.to_limits(),
            share_window=self.engine.share_window_s,
            reclaim=self.engine.reclaim,
        )

    def prefill_horizon(self) -> float | None:
        """``engine.prefill_horizon_s`` in seconds, ``"auto"`` resolved
        against the lanes' targets (see :class:`EngineConfig`); ``None``: off."""
        horizon = self.engine.prefill_horizon_s
        if horizon != "auto":
            return horizon or None
        tpot = [lane.slo.tpot_p95_s for lane in self.lanes if lane.slo.tpot_p95_s is not None]
        if tpot:
            return _TPOT_SHARE * min(tpot)
        ttft = [t for lane in self.lanes if (t := lane.slo.ttft_target_s) is not None]
        return _TTFT_SHARE * min(ttft) if ttft else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> PolicyConfig:
        """Validate a mapping; raises :class:`~slopolicy.ConfigError`."""
        from slopolicy.config.loading import validate

        return validate(cls, data, source)

    @classmethod
    def from_file(cls, path: str) -> PolicyConfig:
        """Load a ``.yaml``/``.yml``, ``.toml`` or ``.json`` file; raises
        :class:`~slopolicy.ConfigError` for unreadable or invalid files."""
        from slopolicy.config.loading import load_file

        return cls.from_dict(load_file(path), source=path)

    @classmethod
    def from_yaml(cls, text: str, *, source: str | None = None) -> PolicyConfig:
        """Validate YAML text."""
        from slopolicy.config.loading import parse_text

        return cls.from_dict(parse_text(text, "yaml", source), source=source)

    @classmethod
    def from_toml(cls, text: str, *, source: str | None = None) -> PolicyConfig:
        """Validate TOML text."""
        from slopolicy.config.loading import parse_text

        return cls.from_dict(parse_text(text, "toml", source), source=source)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible data that :meth:`from_dict` reads back."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        """YAML text that :meth:`from_yaml` reads back."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _tier_problems(
    name: str, tier: TierConfig, lanes: list[str]
) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    where = ("tiers", name)
    for index, lane in enumerate(tier.allowed_lanes or ()):
        if lane not in lanes:
            yield (*where, "allowed_lanes", index), f"unknown lane {lane!r}", lane
    default = tier.default_lane or lanes[0]
    if default not in lanes:
        yield (*where, "default_lane"), f"unknown lane {default!r}", default
    elif tier.allowed_lanes is not None and default not in tier.allowed_lanes:
        message = f"default lane {default!r} is not in allowed_lanes"
        yield (*where, "default_lane"), message, default
    for lane in tier.lanes:
        if lane not in lanes:
            yield (*where, "lanes", lane), f"unknown lane {lane!r}", lane


def _ladder_problems(
    ladder: LadderConfig, lanes: set[str]
) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
    if ladder.watch_lane is not None and ladder.watch_lane not in lanes:
        yield ("ladder", "watch_lane"), f"unknown lane {ladder.watch_lane!r}", ladder.watch_lane
    for field in ("downgrade_lanes", "pause_lanes"):
        for index, lane in enumerate(getattr(ladder, field) or ()):
            if lane not in lanes:
                yield ("ladder", field, index), f"unknown lane {lane!r}", lane
