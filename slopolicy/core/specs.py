"""Plain, validated values the core objects are built from.

The pydantic models in :mod:`slopolicy.config` check user input and convert
to these; core objects never see pydantic.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from slopolicy.errors import UsageError

if TYPE_CHECKING:  # the policy's parts, named in annotations only: they import this module
    from slopolicy.core.cost.tokens import TokenCounter
    from slopolicy.core.ladder.ladder import FallbackLadder
    from slopolicy.core.queueing.pacing import DispatchPace
    from slopolicy.core.request import Request
    from slopolicy.core.routing.router import LaneRouter
    from slopolicy.core.routing.rules import RoutingRule
    from slopolicy.core.slo.targets import SLOTargets
    from slopolicy.core.tools.limits import ToolLimits

__all__ = (
    "LaneQuotaSpec",
    "LaneSpec",
    "OverBudget",
    "PolicySource",
    "PolicySpec",
    "TaskSLO",
    "TierSpec",
    "TierTable",
)


class OverBudget(enum.Enum):
    """What a lane does with a prompt over its ``max_prompt_tokens``."""

    DEMOTE = "demote"  # try the next lower lane
    DEFER = "defer"  # answer "not now" with a Retry-After
    REJECT = "reject"  # refuse: the prompt is too long for this service


@dataclass(frozen=True, slots=True)
class TaskSLO:
    """A lane's objective for agent tasks: every turn succeeds and the last one
    ends within ``deadline`` seconds of the first turn's admission.

    Attributes:
        deadline: the end-to-end task deadline (seconds), or ``None`` for none
            (tasks then only carry their own ``TaskRef.deadline``).
        idle_timeout: seconds without a turn after which a task counts as
            ``abandoned``.
        max_tasks: tasks under way in the lane at once (``None``: no cap);
            first turns beyond it are deferred, so started tasks can finish.
        hold_new: defer a new task's first turn while turns of tasks under
            way wait in the lane's queue (the engine is not keeping up with
            what started tasks still need).
    """

    deadline: float | None = None
    idle_timeout: float = 300.0
    max_tasks: int | None = None
    hold_new: bool = False

    def __post_init__(self) -> None:
        for name in ("deadline", "idle_timeout"):
            value = getattr(self, name)
            if value is None and name == "deadline":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0 < value < 1e11)
            ):
                raise UsageError(f"task {name} must be a number of seconds in (0, 1e11)")
        cap = self.max_tasks
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise UsageError(f"task max_tasks must be an int >= 1, got {cap!r}")
        if not isinstance(self.hold_new, bool):
            raise UsageError(f"task hold_new must be a bool, got {self.hold_new!r}")


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """One lane: its admission limits, queue and share of the engine.

    Attributes:
        name: lane name.
        max_new_tokens: cap applied to ``max_new_tokens`` on entry (tokens).
        max_prompt_tokens: prompt budget per request (tokens).
        over_budget: what happens to a prompt over the budget.
        max_cost: requests scoring more (cost units) move to the next lane.
        defer_retry_after: ``Retry-After`` for deferred requests (seconds).
        queue_capacity: requests that may wait in the lane.
        max_queue_wait: longest a request may wait before it expires (seconds).
        weight: share of dispatch relative to other lanes.
        kv_reserve: fraction of the KV pool only this lane may use (0-1).
        max_running: seats (sequences) this lane's requests hold at once
            (``None``: no cap); bounds how much of each engine iteration long
            prefills can take.
        seat_reserve: running seats only this lane may take (see
            :mod:`slopolicy.core.queueing.seats`).
        max_interference: requests of the earlier lanes one request may be
            expected to make miss their TTFT target by its prefill (``None``:
            no bound; see :mod:`slopolicy.core.queueing.interference`).
        slo_deadline: a queued request leaves (``expired``) once it has waited
            its lane's latency target (TTFT, else e2e), when it can only miss.
        task: the lane's task objective (``None``: tasks are tracked, with no
            deadline but their own and no cap).
        queue_order: the order inside each tenant's backlog in the lane's
            queue: ``"arrival"`` (FIFO) or ``"shortest"`` (fewest prompt
            tokens first, across the tenants within ``fair_slack`` too).
        fair_slack: how far above the least served tenant's counter a
            tenant's may be for its requests to be ordered by ``queue_order``
            against that tenant's (cost units per unit of tenant weight,
            finite, >= 0; see :mod:`slopolicy.core.queueing.fairqueue`).
    """

    name: str
    max_new_tokens: int | None = None
    max_prompt_tokens: int | None = None
    over_budget: OverBudget = OverBudget.DEMOTE
    max_cost: float | None = None
    defer_retry_after: float = 30.0
    queue_capacity: int = 1024
    max_queue_wait: float = 60.0
    weight: float = 1.0
    kv_reserve: float = 0.0
    max_running: int | None = None
    slo_deadline: bool = False
    task: TaskSLO | None = None
    seat_reserve: int = 0
    max_interference: float | None = None
    queue_order: Literal["arrival", "shortest"] = "arrival"
    fair_slack: float = 0.0

    def __post_init__(self) -> None:
        if self.queue_order not in ("arrival", "shortest"):
            raise UsageError(
                f"lane {self.name!r} queue_order must be 'arrival' or 'shortest', "
                f"got {self.queue_order!r}"
            )

    def queue_key(self, prompt_tokens: int) -> float:
        """The key a request waits at in this lane's queue: its prompt tokens
        for ``"shortest"``, else 0 (arrival order)."""
        return float(prompt_tokens) if self.queue_order == "shortest" else 0.0


@dataclass(frozen=True, slots=True)
class LaneQuotaSpec:
    """A tenant's split of its quota for one lane: a ``share`` (0-1] of the tier's
    rate and burst, and an optional concurrency cap."""

    lane: str
    share: float = 1.0
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class TierSpec:
    """A tenant tier: quota in cost units, caps, fairness weight and lanes.

    Attributes:
        name: tier name.
        rate: sustained cost units per second (``None``: unlimited).
        burst: bucket depth in cost units.
        max_concurrency: requests in flight per tenant.
        max_prompt_tokens: hard prompt cap per request (tokens).
        weight: fair-share weight against other tenants.
        default_lane: lane for requests without an allowed hint.
        allowed_lanes: lanes this tier may use (``None``: all).
        lane_quotas: per-lane splits of the quota.
    """

    name: str
    default_lane: str
    rate: float | None = None
    burst: float | None = None
    max_concurrency: int | None = None
    max_prompt_tokens: int | None = None
    weight: float = 1.0
    allowed_lanes: frozenset[str] | None = None
    lane_quotas: tuple[LaneQuotaSpec, ...] = ()

    def allows(self, lane: str) -> bool:
        """Whether this tier may use ``lane``."""
        return self.allowed_lanes is None or lane in self.allowed_lanes


class TierTable:
    """Tiers by name, and which tier each known tenant has.

    Tenants missing from ``tenants`` get the ``default`` tier.
    """

    __slots__ = ("_default", "_tenants", "_tiers")

    def __init__(
        self,
        tiers: Sequence[TierSpec],
        default: str,
        tenants: Mapping[str, str] | None = None,
    ) -> None:
        self._tiers = {tier.name: tier for tier in tiers}
        if default not in self._tiers:
            raise UsageError(f"default tier {default!r} is not among the tiers")
        self._default = self._tiers[default]
        self._tenants = dict(tenants or {})
        for tenant, tier in self._tenants.items():
            if tier not in self._tiers:
                raise UsageError(f"tenant {tenant!r} uses unknown tier {tier!r}")

    @property
    def tiers(self) -> Mapping[str, TierSpec]:
        """All tiers by name."""
        return self._tiers

    def get(self, name: str) -> TierSpec | None:
        """The tier called ``name``, or ``None``."""
        return self._tiers.get(name)

    def for_tenant(self, tenant: str) -> TierSpec:
        """The tier the table gives ``tenant``, or the default tier."""
        name = self._tenants.get(tenant)
        return self._default if name is None else self._tiers[name]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """Everything a :class:`Policy` is built from, as plain core objects.

    Attributes:
        router: routes requests to lanes (and owns the estimator and tiers).
        kv_blocks: blocks in the engine's KV pool (until the engine reports
            its own, with ``kv_follows_engine``).
        kv_block_size: tokens per block.
        kv_follows_engine: the ledger counts the pool the engine reports,
            larger or smaller; otherwise ``kv_blocks`` is a cap
            (:meth:`~slopolicy.core.kv.ledger.KVReservation.observe_capacity`).
        kv_output_quantile: a running request reserves its prompt plus the
            mean (``"mean"``) or this quantile of its tenant's recent answers
            in its lane (the lane's
            until the tenant has enough; per sequence, at most its
            ``max_new_tokens``; :class:`~slopolicy.core.cost.outputs.OutputForecast`),
            growing as its answer passes it; ``None``: the worst case,
            ``prompt + max_new_tokens``.
        max_running: seats (sequences) the engine may run at once.
        pace: paces starts to a rate in cost units per second, or ``None``.
        max_tenants: tenant quota states kept before idle ones are evicted.
        targets: SLO targets per lane (lanes without an entry have none).
        ladder: the fallback ladder, or ``None``.
        watch_lane: lane whose SLO drives the ladder (default: the first lane).
        evaluate_every: seconds between automatic ladder evaluations in dispatch.
        signal_max_age: seconds after which an engine signal is stale.
        max_tracked_tenants: per-tenant SLO trackers kept.
        prefill_horizon: seconds of prompt work the engine is handed ahead of
            a start (the prefill budget of
            :class:`~slopolicy.core.queueing.ttft.FirstTokenCheck`), or ``None``
            for no budget.
        tools: the limits of the tool pool (:attr:`Policy.tools`); ``None``
            limits nothing.
        share_window: seconds over which tenants' demand and the engine's
            service are compared (:class:`~slopolicy.core.queueing.demand.TenantDemand`):
            under saturation, inside a lane's slack, tenants within their
            max-min share go before those over it; also the window of the
            engine's saturation (:class:`~slopolicy.core.queueing.saturation.Saturation`);
            ``None``: not compared.
        reclaim: with a ``share_window``, end one running request of a tenant
            over its share (one whose release alone suffices) for each
            queued request of a tenant within its share, held back because
            its KV does not fit, that this lets start before its first-token
            deadline where the pool's ends would not
            (:attr:`Dispatch.revoked <slopolicy.Dispatch.revoked>`).
    """

    router: LaneRouter
    kv_blocks: int
    kv_block_size: int
    max_running: int
    kv_output_quantile: float | Literal["mean"] | None = None
    kv_follows_engine: bool = False
    pace: DispatchPace | None = None
    max_tenants: int = 100_000
    targets: Mapping[str, SLOTargets] = field(default_factory=dict)
    ladder: FallbackLadder | None = None
    watch_lane: str | None = None
    evaluate_every: float = 1.0
    signal_max_age: float = 10.0
    max_tracked_tenants: int = 1024
    prefill_horizon: float | None = None
    tools: ToolLimits | None = None
    share_window: float | None = None
    reclaim: bool = False


class PolicySource(Protocol):
    """Anything that builds a :class:`PolicySpec`, such as ``PolicyConfig``."""

    def to_spec(
        self,
        *,
        counter: TokenCounter | None = None,
        rules: Sequence[RoutingRule] = (),
        compress: Callable[[Request], Request] | None = None,
    ) -> PolicySpec: ...
