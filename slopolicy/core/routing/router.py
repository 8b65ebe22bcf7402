"""Lane routing: the seed's admission rules, applied before a request queues.

Lanes are ordered from most interactive to least. A request starts in its lane
hint (when its tier allows it) or its tier's default lane, then walks down:

1. the lane's ``max_new_tokens`` cap is applied (the original request's value
   is capped afresh in each lane, so a lower lane's looser cap applies there);
2. a prompt over the lane's ``max_prompt_tokens`` is demoted, deferred or
   rejected, as the lane says;
3. a request scoring more than the lane's ``max_cost`` moves down if a lower
   lane exists, so very long work does not sit in front of active decode;
4. custom rules run in order, then :meth:`LaneRouter.check`.

The walk only moves down, so a longer prompt or a larger ``max_new_tokens``
never lands in a more interactive lane. Every decision lists the steps taken.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slopolicy.core.cost.estimator import CostEstimator, TokenEstimate
from slopolicy.core.decisions import Admit, Decision, Defer, Demote, Reason, Reject, Step
from slopolicy.core.request import Request
from slopolicy.core.routing.rules import RouteContext, RoutingRule, Verdict, VerdictKind, rule_name
from slopolicy.core.specs import LaneSpec, OverBudget, TierSpec, TierTable
from slopolicy.errors import RoutingError, UsageError

__all__ = ("LaneRouter",)


class LaneRouter:
    """Routes requests to lanes, explaining each decision.

    Custom rules are callables taking a :class:`RouteContext`; subclasses may
    also override :meth:`check`. Routing is synchronous and stateless.
    """

    def __init__(
        self,
        lanes: Sequence[LaneSpec],
        *,
        estimator: CostEstimator,
        tiers: TierTable | None = None,
        rules: Sequence[RoutingRule] = (),
    ) -> None:
        if not lanes:
            raise UsageError("at least one lane is required")
        self._lanes = tuple(lanes)
        self._index = {lane.name: i for i, lane in enumerate(self._lanes)}
        if len(self._index) != len(self._lanes):
            raise UsageError("lane names must be unique")
        self.estimator = estimator
        self.tiers = tiers or TierTable([TierSpec("default", lanes[0].name)], "default")
        for tier in self.tiers.tiers.values():
            unknown = {tier.default_lane} | set(tier.allowed_lanes or ())
            unknown -= self._index.keys()
            if unknown:
                raise UsageError(f"tier {tier.name!r} names unknown lanes {sorted(unknown)}")
        self.rules = tuple(rules)
        custom = [(rule_name(rule), rule) for rule in self.rules]
        if type(self).check is not LaneRouter.check:
            custom.append((f"{type(self).__name__}.check", self.check))
        self._custom: tuple[tuple[str, RoutingRule], ...] = tuple(custom)

    @property
    def lanes(self) -> tuple[LaneSpec, ...]:
        """Lanes from most interactive to least."""
        return self._lanes

    def rank(self, lane: str) -> int:
        """Position of ``lane``: 0 is the most interactive."""
        return self._index[lane]

    def check(self, context: RouteContext) -> Verdict | None:
        """Subclass hook, run after the custom rules in every lane visited."""
        return None

    def route(self, request: Request, *, prompt: TokenEstimate | None = None) -> Decision:
        """Decide the lane for ``request``; ``prompt`` skips counting when known."""
        if request.tier is not None:
            tier = self.tiers.get(request.tier)
            if tier is None:
                message = f"unknown tier {request.tier!r}"
                return Reject(
                    reason=Reason.UNKNOWN_TIER,
                    message=message,
                    http_status=400,
                    steps=(Step("tier", None, message),),
                )
            step = Step("tier", None, "tier {!r} requested", (tier.name,))
        else:
            tier = self.tiers.for_tenant(request.tenant)
            step = Step("tier", None, "tenant {!r} has tier {!r}", (request.tenant, tier.name))
        steps = [step]
        if request.lane is None:
            start = self._index[tier.default_lane]
        else:
            hinted = self._start_lane(request.lane, tier, steps)
            if isinstance(hinted, Reject):
                return hinted
            start = hinted
        if prompt is None and request.prompt_tokens is None:
            prompt = self.estimator.prompt_tokens(request)
        if prompt is None:  # given: no estimate object unless a custom rule asks
            tokens = request.prompt_tokens
            assert tokens is not None
            steps.append(_estimate_step(tokens, True, 0.0, "given"))
        else:
            tokens = prompt.tokens
            steps.append(_estimate_step(tokens, prompt.exact, prompt.rel_stderr, prompt.method))
        cap = tier.max_prompt_tokens
        if cap is not None and tokens > cap:
            message = f"prompt of {tokens:,} tokens exceeds tier {tier.name!r} cap of {cap:,}"
            steps.append(Step("tier prompt cap", None, message))
            return Reject(
                reason=Reason.PROMPT_TOO_LONG,
                message=message,
                http_status=413,
                steps=tuple(steps),
                prompt_tokens=tokens,
            )
        return self._walk(request, tier, start, tokens, prompt, steps)

    def _start_lane(self, hint: str, tier: TierSpec, steps: list[Step]) -> int | Reject:
        index = self._index.get(hint)
        if index is None:
            message = f"unknown lane {hint!r}"
            steps.append(Step("lane hint", None, message))
            return Reject(
                reason=Reason.UNKNOWN_LANE, message=message, http_status=400, steps=tuple(steps)
            )
        if tier.allows(hint):
            steps.append(Step("lane hint", hint, "honoured"))
            return index
        steps.append(
            Step("lane hint", hint, "not allowed for tier {!r}; using its default", (tier.name,))
        )
        return self._index[tier.default_lane]

    def _lower(self, index: int, tier: TierSpec) -> int | None:
        for lower in range(index + 1, len(self._lanes)):
            if tier.allows(self._lanes[lower].name):
                return lower
        return None

    def _walk(
        self,
        request: Request,
        tier: TierSpec,
        start: int,
        tokens: int,
        prompt: TokenEstimate | None,
        steps: list[Step],
    ) -> Decision:
        """Visit lanes from ``start`` down until one takes the request. ``prompt``
        is ``None`` when the count was given (``tokens``)."""
        index = start
        demoted_by: Reason | None = None
        while True:
            lane = self._lanes[index]
            visit = self._visit(request, lane, tier, index, tokens, prompt, steps)
            if not isinstance(visit, Verdict):
                admitted, cost = visit
                return self._accept(admitted, lane, tier, start, tokens, cost, demoted_by, steps)
            verdict = visit
            if verdict.kind is VerdictKind.DEFER:
                assert verdict.retry_after is not None
                assert verdict.http_status is not None
                message = f"deferred from lane {lane.name!r}: {verdict.note}"
                return Defer(
                    reason=verdict.reason,
                    message=message,
                    retry_after=verdict.retry_after,
                    http_status=verdict.http_status,
                    lane=lane.name,
                    steps=tuple(steps),
                    prompt_tokens=tokens,
                )
            if verdict.kind is VerdictKind.REJECT:
                assert verdict.http_status is not None
                message = f"rejected in lane {lane.name!r}: {verdict.note}"
                return Reject(
                    reason=verdict.reason,
                    message=message,
                    http_status=verdict.http_status,
                    lane=lane.name,
                    steps=tuple(steps),
                    prompt_tokens=tokens,
                )
            lower = self._lower(index, tier)
            if lower is None:  # a demotion with nowhere to go
                if not verdict.required:
                    steps.append(Step("demote", lane.name, "no lower lane; stays"))
                    capped = self._capped(request, lane, None)
                    cost = self.estimator.score(tokens, capped.output_budget, capped.tool_risk)
                    return self._accept(capped, lane, tier, start, tokens, cost, demoted_by, steps)
                reason = (
                    Reason.PROMPT_TOO_LONG
                    if verdict.reason is Reason.PROMPT_OVER_BUDGET
                    else verdict.reason
                )
                status = 413 if reason is Reason.PROMPT_TOO_LONG else 403
                message = f"no lane below {lane.name!r} takes it: {verdict.note}"
                return Reject(
                    reason=reason,
                    message=message,
                    http_status=status,
                    lane=lane.name,
                    steps=tuple(steps),
                    prompt_tokens=tokens,
                )
            demoted_by = demoted_by or verdict.reason
            steps.append(Step("demote", lane.name, "moved to {!r}", (self._lanes[lower].name,)))
            index = lower

    def _visit(
        self,
        request: Request,
        lane: LaneSpec,
        tier: TierSpec,
        index: int,
        tokens: int,
        prompt: TokenEstimate | None,
        steps: list[Step],
    ) -> tuple[Request, float] | Verdict:
        """One lane's checks: the request to admit and its cost, or the verdict
        that ends the visit. Rewrites by custom rules apply and continue."""
        capped = self._capped(request, lane, steps)
        cost = self.estimator.score(tokens, capped.output_budget, capped.tool_risk)
        # The built-in checks, in order; each names its rule only when it fires.
        budget = lane.max_prompt_tokens
        if budget is not None and tokens > budget:
            verdict = _prompt_budget(lane, tokens)
            steps.append(Step("prompt budget", lane.name, verdict.note))
            return verdict
        limit = lane.max_cost
        if limit is not None and cost > limit:
            note = f"cost {cost:,.0f} over the lane's {limit:,.0f}"
            steps.append(Step("cost limit", lane.name, note))
            return Verdict.demote(note, reason=Reason.COST_OVER_LIMIT, required=False)
        if not self._custom:
            return capped, cost
        # Custom rules see a context; built only when there are custom rules.
        lower = self._lower(index, tier)
        lower_name = None if lower is None else self._lanes[lower].name
        if prompt is None:
            prompt = TokenEstimate(tokens=tokens, exact=True, rel_stderr=0.0, method="given")
        context = RouteContext(capped, request, lane, tier, prompt, cost, lower_name)
        for name, rule in self._custom:
            answer = rule(context)
            if answer is None:
                continue
            if not isinstance(answer, Verdict):
                raise RoutingError(
                    f"routing rule {name} returned {type(answer).__name__}, not a Verdict or None"
                )
            steps.append(Step(name, lane.name, answer.note))
            if answer.kind is not VerdictKind.REWRITE:
                return answer
            assert answer.request is not None
            rewritten = answer.request
            cost = self.estimator.score(tokens, rewritten.output_budget, rewritten.tool_risk)
            context = replace(context, request=rewritten, cost=cost)
        return context.request, context.cost

    @staticmethod
    def _capped(request: Request, lane: LaneSpec, steps: list[Step] | None) -> Request:
        cap = lane.max_new_tokens
        if cap is None or request.max_new_tokens <= cap:
            return request
        if steps is not None:
            steps.append(
                Step("max_new_tokens cap", lane.name, "{:,} -> {:,}", (request.max_new_tokens, cap))
            )
        return request.with_max_new_tokens(cap)

    def _accept(
        self,
        request: Request,
        lane: LaneSpec,
        tier: TierSpec,
        start: int,
        tokens: int,
        cost: float,
        demoted_by: Reason | None,
        steps: list[Step],
    ) -> Admit | Demote:
        if demoted_by is None:
            return Admit(
                lane=lane.name,
                tier=tier.name,
                request=request,
                prompt_tokens=tokens,
                cost=cost,
                message=f"admitted to lane {lane.name!r}",
                steps=tuple(steps),
            )
        origin = self._lanes[start].name
        return Demote(
            lane=lane.name,
            from_lane=origin,
            tier=tier.name,
            request=request,
            prompt_tokens=tokens,
            cost=cost,
            message=f"admitted to lane {lane.name!r}, demoted from {origin!r} ({demoted_by.code})",
            reason=demoted_by,
            steps=tuple(steps),
        )


def _prompt_budget(lane: LaneSpec, prompt_tokens: int) -> Verdict:
    """The verdict on a prompt over ``lane``'s ``max_prompt_tokens``."""
    note = f"prompt of {prompt_tokens:,} tokens over the {lane.max_prompt_tokens:,}-token budget"
    reason = Reason.PROMPT_OVER_BUDGET
    if lane.over_budget is OverBudget.DEMOTE:
        return Verdict.demote(note, reason=reason)
    if lane.over_budget is OverBudget.DEFER:
        return Verdict.defer(note, lane.defer_retry_after, reason=reason)
    return Verdict.reject(note, reason=Reason.PROMPT_TOO_LONG, http_status=413)


def _estimate_step(tokens: int, exact: bool, rel_stderr: float, method: str) -> Step:
    """The estimate's step (a :class:`TokenEstimate`'s fields), its arguments
    plain values, formatted only when read."""
    if exact:
        return Step("estimate", None, "{:,} prompt tokens ({})", (tokens, method))
    return Step(
        "estimate", None, "~{:,} prompt tokens (+-{:.1%}, {})", (tokens, rel_stderr, method)
    )
