"""Lane configuration: SLO targets, admission limits, queue and share."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel, CostUnits, Count, Seconds, Weight
from slopolicy.core.slo.targets import SLOTargets
from slopolicy.core.specs import LaneSpec, OverBudget, TaskSLO

__all__ = ("LaneConfig", "LaneName", "LaneSLO", "LaneTaskSLO")

#: Lane names: short lowercase identifiers (they become metric attributes).
LaneName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]


class LaneSLO(ConfigModel):
    """A lane's service-level objectives. Latencies in seconds; unset means no target.

    TTFT counts from arrival at the gate, so queueing is included; TPOT is
    ``(t_last - t_first) / (output_tokens - 1)``; ``e2e_p95_s`` suits batch lanes,
    where drain time matters more than the first token.

    ``tbt_p99_s`` bounds the time between tokens (TBT): the gaps between two
    chunks of a stream (a chunk counts once however many tokens it carries).
    A request attains only if its own p99 gap is within it, so at most 1% of
    its gaps (one in a short answer: none) may be longer. Mean TPOT hides a
    long prefill landing mid-stream; this does not. ``tbt_stall_s`` is the gap
    counted as a stall (default ``tbt_p99_s``, else 0.2 s); it is reported, not
    a target. Unset: TBT is measured but judges nothing.
    """

    ttft_p95_s: Seconds | None = None
    ttft_p99_s: Seconds | None = None
    tpot_p95_s: Seconds | None = None
    e2e_p95_s: Seconds | None = None
    tbt_p99_s: Seconds | None = None
    tbt_stall_s: Seconds | None = None
    success_rate: Annotated[float, Field(gt=0, le=1)] = 0.99

    @property
    def ttft_target_s(self) -> float | None:
        """The per-request TTFT bound: ``ttft_p95_s``, else ``ttft_p99_s``."""
        return self.ttft_p95_s if self.ttft_p95_s is not None else self.ttft_p99_s

    def to_targets(self) -> SLOTargets:
        """The plain core value the SLO trackers take."""
        return SLOTargets(
            ttft_p95=self.ttft_p95_s,
            ttft_p99=self.ttft_p99_s,
            tpot_p95=self.tpot_p95_s,
            e2e_p95=self.e2e_p95_s,
            success_rate=self.success_rate,
            tbt_p99=self.tbt_p99_s,
            tbt_stall=self.tbt_stall_s,
        )

    @model_validator(mode="after")
    def _p99_not_below_p95(self) -> LaneSLO:
        if (
            self.ttft_p95_s is not None
            and self.ttft_p99_s is not None
            and self.ttft_p99_s < self.ttft_p95_s
        ):
            raise ValueError("ttft_p99_s must be >= ttft_p95_s")
        return self


class LaneTaskSLO(ConfigModel):
    """A lane's objective for agent tasks (requests with a ``task``): every
    turn succeeds and the task ends within ``deadline_s`` of its first turn.

    Attributes:
        deadline_s: end-to-end task deadline, seconds (unset: only the
            task's own ``TaskRef.deadline``). Each turn waits in the queue at
            most until it, and a turn arriving after it is refused
            (``task_deadline_lost``).
        idle_timeout_s: seconds without a turn after which a task is
            ``abandoned``.
        max_tasks: tasks under way in the lane at once (unset: no cap); a first
            turn beyond it is deferred (503, ``task_limit``), so the tasks
            already started keep the capacity they still need.
        hold_new_tasks: defer a new task's first turn (503, ``task_limit``)
            while turns of tasks under way wait in the lane's queue: new
            tasks start only while the engine keeps up with the started ones.
    """

    deadline_s: Seconds | None = None
    idle_timeout_s: Seconds = 300.0
    max_tasks: Count | None = None
    hold_new_tasks: bool = False

    def to_spec(self) -> TaskSLO:
        """The plain core value."""
        return TaskSLO(self.deadline_s, self.idle_timeout_s, self.max_tasks, self.hold_new_tasks)


class LaneConfig(ConfigModel):
    """One lane. Lanes are listed from most interactive to least.

    Attributes:
        name: lane name.
        slo: targets for this lane.
        max_new_tokens: cap on ``max_new_tokens`` for requests in the lane.
        max_prompt_tokens: prompt budget per request, in tokens.
        over_budget: ``demote`` (next lane), ``defer`` (503 + Retry-After) or
            ``reject`` (413) a prompt over the budget.
        max_cost: requests scoring more (cost units) move to the next lane.
        defer_retry_after_s: Retry-After for deferred requests, seconds.
        queue_capacity: requests that may wait in the lane.
        max_queue_wait_s: longest wait in the queue before expiry, seconds.
        weight: dispatch share relative to other lanes.
        kv_reserve: fraction of the KV pool reserved for this lane, 0-1.
        max_running: engine seats this lane's requests hold at once (unset:
            no cap); a request takes one seat per sequence (``n``,
            ``best_of``). The engine gives running requests its token budget
            first, so a few long prompts prefilling side by side can take
            whole iterations; capping the heavy lane keeps room for chat.
        seat_reserve: engine seats (of ``engine.max_running``) only this lane
            may take: other lanes never take the last ones. For engines with
            few seats (llama.cpp's slots), where a burst of batch work would
            otherwise hold every seat when a chat arrives. The lanes'
            reserves add up to less than ``engine.max_running``.
        slo_deadline: a queued request leaves the queue (``expired``) once
            it has waited its lane's TTFT target (p95, else p99; the e2e
            target for lanes with only that), when it can only miss, instead
            of at ``max_queue_wait_s``. Work that would miss anyway gives its
            engine time to work that can still attain. With a ``ttft_p99_s``
            target, a started request with no first token by arrival + that
            target, while the engine reports preemptions, is revoked (the
            engine may be computing its prompt again and again). Off: queued
            requests wait up to ``max_queue_wait_s``, and started ones run.
        task: the lane's objective for agent tasks (unset: tasks are tracked,
            with their own deadlines only).
        max_interference: requests of the more urgent lanes (those listed
            before this one, with a TTFT target) that one request of this
            lane may be expected to make miss that target by its prefill
            holding the engine; one expected to do more is deferred (503,
            ``prefill_interference``); for a tenant asking for more than its
            max-min share under saturation, the bound times the part of its
            demand within the share. The cost is learned from the engine:
            on one that interleaves long prompts with other work it is near 0
            and nothing is deferred (see
            :mod:`slopolicy.core.queueing.interference`). Unset: never deferred.
        queue_order: the order of each tenant's waiting requests: ``shortest``
            (fewest prompt tokens first, the default) or ``arrival`` (first
            come, first served). With ``shortest``, the tenants whose
            fair-share counter is within ``fair_slack`` of the least served
            tenant's are ordered by their shortest request too, so under
            backlog more requests start in time for their TTFT target per
            unit of engine work. A long request is not starved: its deadline
            bounds its wait (it expires, refused in time, rather than waiting
            forever). The order only matters while requests wait in the
            policy's queues, which the prefill budget
            (``engine.prefill_horizon_s``) keeps them in under load.
        fair_slack: how far ahead of the least served tenant, in cost units
            per unit of tenant ``weight``, a tenant may be and still have its
            requests ordered by ``queue_order`` against that tenant's (unset:
            the cost of the largest prompt the lane takes, its
            ``max_prompt_tokens``, or 0 without one). Two tenants that stay
            backlogged then differ in served cost per unit weight by at most
            the largest request's cost per weight of each, plus twice the
            slack, over any interval: the default keeps that bound within a
            small multiple of the largest request, as VTC's own. Only
            ``shortest`` uses it.
    """

    name: LaneName
    slo: LaneSLO = LaneSLO()
    max_new_tokens: Count | None = None
    max_prompt_tokens: Count | None = None
    over_budget: Literal["demote", "defer", "reject"] = "demote"
    max_cost: CostUnits | None = None
    defer_retry_after_s: Seconds = 30.0
    queue_capacity: Count = 1024
    max_queue_wait_s: Seconds = 60.0
    weight: Weight = 1.0
    kv_reserve: Annotated[float, Field(ge=0, lt=1)] = 0.0
    max_running: Count | None = None
    slo_deadline: bool = True
    task: LaneTaskSLO | None = None
    seat_reserve: Annotated[int, Field(ge=0, le=2**53)] = 0
    max_interference: Annotated[float, Field(ge=0, le=1e9)] | None = 1.0
    queue_order: Literal["arrival", "shortest"] = "shortest"
    fair_slack: CostUnits | None = None

    def _slack(self, prompt_cost: float) -> float:
        """``fair_slack`` in cost units: unset, the cost of the largest prompt
        the lane takes (``max_prompt_tokens`` at ``prompt_cost`` per token;
        0 without a prompt budget)."""
        if self.fair_slack is not None:
            return self.fair_slack
        return 0.0 if self.max_prompt_tokens is None else self.max_prompt_tokens * prompt_cost

    def to_spec(self, prompt_cost: float = 1.0) -> LaneSpec:
        """The plain core value for this lane; ``prompt_cost`` is the cost of
        one prompt token (the cost weights' ``alpha``), which sizes the
        default ``fair_slack``."""
        return LaneSpec(
            name=self.name,
            max_new_tokens=self.max_new_tokens,
            max_prompt_tokens=self.max_prompt_tokens,
            over_budget=OverBudget(self.over_budget),
            max_cost=self.max_cost,
            defer_retry_after=self.defer_retry_after_s,
            queue_capacity=self.queue_capacity,
            max_queue_wait=self.max_queue_wait_s,
            weight=self.weight,
            kv_reserve=self.kv_reserve,
            max_running=self.max_running,
            slo_deadline=self.slo_deadline,
            task=None if self.task is None else self.task.to_spec(),
            seat_reserve=self.seat_reserve,
            max_interference=self.max_interference,
            queue_order=self.queue_order,
            fair_slack=self._slack(prompt_cost),
        )
