"""What the tool pool enforces: one :class:`ToolSpec` per tool, and the pool's own limits.

Plain, validated core values (the pydantic ``ToolsConfig`` builds them). A
tool's name is the name the host passes to ``acquire``; the spec named
:data:`ANY_TOOL` (``"*"``) covers every name the limits do not list, as one
shared group. Without it, an unlisted name is refused (``unknown_tool``), so
the names the pool keeps state for, and telemetry reports, are the
configured ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from slopolicy.core.checks import MAX_COUNT, shown
from slopolicy.errors import UsageError

__all__ = ("ANY_TOOL", "SIGNALS", "ToolLimits", "ToolSpec", "check_call")

#: The spec that covers every tool name the limits do not list.
ANY_TOOL = "*"
#: What the pool's rolling rate reports to the ladder: timed-out calls, or
#: timed-out and failed calls; ``None`` reports nothing.
SIGNALS = ("timeouts", "failures")
_MAX_NAME = 256


def _check_name(what: str, value: object) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= _MAX_NAME:
        raise UsageError(f"{what} must be a string of 1-{_MAX_NAME} characters, not {shown(value)}")


def _positive_count(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise UsageError(f"{name} must be an integer >= 1 or None, not {shown(value)}")


def _positive_seconds(name: str, value: object, *, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and 1e-6 <= value <= 1e9)
    ):
        raise UsageError(f"{name} must be finite seconds in [1e-6, 1e9], not {shown(value)}")


def check_call(tenant: object, tool: object, timeout: object) -> None:
    """Raise :class:`UsageError` unless ``tenant`` and ``tool`` are names and
    ``timeout`` is ``None`` or seconds within [1e-6, 1e9]: a call's arguments."""
    _check_name("tenant", tenant)
    _check_name("tool", tool)
    _positive_seconds("timeout", timeout)


def _rate_pair(where: str, rate: float | None, burst: float | None) -> None:
    if (rate is None) != (burst is None):
        raise UsageError(f"{where}: rate and burst must be set together")
    for name, value in (("rate", rate), ("burst", burst)):
        if value is not None and not (
            not isinstance(value, bool)
            and isinstance(value, (int, float))
            and math.isfinite(value)
            and 0 < value <= 1e15
        ):
            raise UsageError(f"{where}: {name} must be a finite number > 0, not {shown(value)}")
    if burst is not None and burst < 1:
        raise UsageError(f"{where}: burst must be >= 1 call (a call takes 1), not {shown(burst)}")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Limits of one tool (or of every unlisted tool, for :data:`ANY_TOOL`).

    Attributes:
        name: the tool's name.
        max_concurrency: calls running at once, all tenants (``None``: no cap).
        tenant_max_concurrency: calls running at once per tenant (``None``: no cap).
        rate, burst: calls per second and bucket depth in calls, all tenants.
        tenant_rate, tenant_burst: the same per tenant.
        timeout: seconds a call may run before it counts as timed out
            (``None``: the caller's own, or none).
        max_wait: seconds a call may wait for a slot (``None``: as long as it takes).
        max_waiting: calls that may wait for this tool at once; a full queue
            pushes out the most backlogged tenant's newest waiter before it
            refuses anyone else.
    """

    name: str
    max_concurrency: int | None = None
    tenant_max_concurrency: int | None = None
    rate: float | None = None
    burst: float | None = None
    tenant_rate: float | None = None
    tenant_burst: float | None = None
    timeout: float | None = None
    max_wait: float | None = None
    max_waiting: int = 1024

    def __post_init__(self) -> None:
        _check_name("a tool name", self.name)
        where = f"tool {self.name!r}"
        _positive_count(f"{where}: max_concurrency", self.max_concurrency)
        _positive_count(f"{where}: tenant_max_concurrency", self.tenant_max_concurrency)
        _positive_count(f"{where}: max_waiting", self.max_waiting)
        _rate_pair(where, self.rate, self.burst)
        _rate_pair(f"{where} (per tenant)", self.tenant_rate, self.tenant_burst)
        _positive_seconds(f"{where}: timeout", self.timeout)
        _positive_seconds(f"{where}: max_wait", self.max_wait)


def _default_tools() -> Mapping[str, ToolSpec]:
    return {ANY_TOOL: ToolSpec(ANY_TOOL)}


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """The tool pool's limits.

    Attributes:
        tools: tool name -> its spec (each spec's ``name`` its key). The
            default, one unlimited :data:`ANY_TOOL`, limits nothing.
        tenant_max_concurrency: tool calls running at once per tenant, all
            tools together (``None``: no cap).
        max_tenants: tenants the pool keeps state for; idle ones are dropped
            first, and a new tenant past it is refused (``tenant_table_full``).
        window: seconds the rolling timeout and error rates look back.
        min_calls: calls a rate is divided by at least, so two calls and one
            timeout read as 1/min_calls, not 50 %.
        signal: what the pool reports to the ladder's ``tool_timeout_rate``
            trigger: ``"timeouts"``, ``"failures"`` (timeouts and errors), or
            ``None`` (nothing: the default).
        risk_horizon: seconds run per call that read as ``tool_risk`` 1 for
            a tool with no ``timeout`` (see :mod:`slopolicy.core.tools.risk`).
    """

    tools: Mapping[str, ToolSpec] = field(default_factory=_default_tools)
    tenant_max_concurrency: int | None = None
    max_tenants: int = 100_000
    window: float = 60.0
    min_calls: int = 10
    signal: str | None = None
    risk_horizon: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.tools, Mapping):
            raise UsageError(
                f"tools must be a mapping of name to ToolSpec, not {shown(self.tools)}"
            )
        tools = dict(self.tools)
        for name, spec in tools.items():
            if not isinstance(spec, ToolSpec) or spec.name != name:
                raise UsageError(f"tools[{name!r}] must be a ToolSpec named {name!r}")
        _positive_count("tenant_max_concurrency", self.tenant_max_concurrency)
        _positive_count("max_tenants", self.max_tenants)
        _positive_count("min_calls", self.min_calls)
        _positive_seconds("window", self.window, allow_none=False)
        _positive_seconds("risk_horizon", self.risk_horizon, allow_none=False)
        if self.signal is not None and self.signal not in SIGNALS:
            raise UsageError(f"signal must be one of {SIGNALS} or None, not {shown(self.signal)}")
        object.__setattr__(self, "tools", tools)  # a copy: the caller's dict may change

    def spec(self, tool: str) -> ToolSpec | None:
        """The spec that covers ``tool``: its own, else :data:`ANY_TOOL`'s, else ``None``."""
        spec = self.tools.get(tool)
        return spec if spec is not None else self.tools.get(ANY_TOOL)
