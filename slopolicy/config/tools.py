"""Tool-call limits: per-tool caps, rate limits and timeouts, and the pool's own."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel, Count, Seconds
from slopolicy.core.tools.limits import ANY_TOOL, ToolLimits, ToolSpec

__all__ = ("ToolConfig", "ToolName", "ToolsConfig")

#: A tool's name as configured (and as telemetry reports it), or ``"*"`` for
#: every tool not listed.
ToolName = Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9_.:-]{0,63})$")]
#: Calls, or calls per second: at least 1e-6 and at most 1e15.
Calls = Annotated[float, Field(ge=1e-6, le=1e15)]


class ToolConfig(ConfigModel):
    """One tool's limits (unset: no limit).

    Attributes:
        max_concurrency: calls running at once, all tenants.
        tenant_max_concurrency: calls running at once per tenant.
        rate: calls per second, all tenants; ``burst`` (calls, >= 1) with it.
        tenant_rate: calls per second per tenant; ``tenant_burst`` with it.
        timeout_s: seconds a call may run (a caller's shorter one wins).
        max_wait_s: seconds a call may wait for a slot.
        max_waiting: calls that may wait at once.
    """

    max_concurrency: Count | None = None
    tenant_max_concurrency: Count | None = None
    rate: Calls | None = None
    burst: Annotated[float, Field(ge=1, le=1e15)] | None = None
    tenant_rate: Calls | None = None
    tenant_burst: Annotated[float, Field(ge=1, le=1e15)] | None = None
    timeout_s: Seconds | None = None
    max_wait_s: Seconds | None = None
    max_waiting: Count = 1024

    @model_validator(mode="after")
    def _bursts_with_rates(self) -> ToolConfig:
        if (self.rate is None) != (self.burst is None):
            raise ValueError("rate and burst must be set together")
        if (self.tenant_rate is None) != (self.tenant_burst is None):
            raise ValueError("tenant_rate and tenant_burst must be set together")
        return self

    def to_spec(self, name: str) -> ToolSpec:
        """The plain core value for the tool called ``name``."""
        return ToolSpec(
            name,
            max_concurrency=self.max_concurrency,
            tenant_max_concurrency=self.tenant_max_concurrency,
            rate=self.rate,
            burst=self.burst,
            tenant_rate=self.tenant_rate,
            tenant_burst=self.tenant_burst,
            timeout=self.timeout_s,
            max_wait=self.max_wait_s,
            max_waiting=self.max_waiting,
        )


class ToolsConfig(ConfigModel):
    """Limits for the tool and retriever calls the host makes through ``gate.tool``.

    The default limits nothing: every tool name falls under ``"*"``, which
    has no caps. List tools by name to limit them; without a ``"*"`` entry,
    a call of an unlisted tool is refused (``unknown_tool``, HTTP 400).

    Attributes:
        limits: tool name -> its limits; ``"*"`` covers every unlisted name
            as one shared group.
        tenant_max_concurrency: tool calls running at once per tenant, all tools.
        max_tenants: tenants the tool pool keeps state for.
        window_s: seconds the rolling timeout and error rates look back.
        min_calls: calls a rate is divided by at least.
        ladder_signal: what feeds the ladder's ``tool_timeout_rate`` trigger
            and the diagnoser: ``timeouts``, ``failures`` (timeouts and
            errors), or ``off`` (the default: nothing).
        risk_horizon_s: seconds run per call that read as ``tool_risk`` 1
            for a tool with no ``timeout_s`` (``policy.tools.risk``).
    """

    limits: dict[ToolName, ToolConfig] = {ANY_TOOL: ToolConfig()}
    tenant_max_concurrency: Count | None = None
    max_tenants: Count = 100_000
    window_s: Seconds = 60.0
    min_calls: Count = 10
    ladder_signal: Literal["off", "timeouts", "failures"] = "off"
    risk_horizon_s: Seconds = 10.0

    def to_limits(self) -> ToolLimits:
        """The plain core value the tool pool is built from."""
        return ToolLimits(
            tools={name: tool.to_spec(name) for name, tool in self.limits.items()},
            tenant_max_concurrency=self.tenant_max_concurrency,
            max_tenants=self.max_tenants,
            window=self.window_s,
            min_calls=self.min_calls,
            signal=None if self.ladder_signal == "off" else self.ladder_signal,
            risk_horizon=self.risk_horizon_s,
        )
