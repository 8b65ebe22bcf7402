from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import (
    Admit,
    CostEstimator,
    Defer,
    Demote,
    LaneRouter,
    PolicyConfig,
    Reason,
    Reject,
    Request,
    RoutingError,
    Verdict,
)
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.routing import RouteContext
from slopolicy.core.specs import LaneSpec, OverBudget, TierSpec, TierTable
from slopolicy.testing.strategies import policy_configs, requests

_ESTIMATOR = CostEstimator(counter=HeuristicCounter())
_LANES = (
    LaneSpec("interactive", max_new_tokens=1024, max_prompt_tokens=8192),
    LaneSpec("heavy", max_new_tokens=4096, max_prompt_tokens=100_000, max_cost=100_000),
    LaneSpec("background", max_prompt_tokens=200_000, over_budget=OverBudget.REJECT),
)
_TIERS = TierTable(
    [
        TierSpec("standard", "interactive"),
        TierSpec(
            "free",
            "interactive",
            max_prompt_tokens=16_000,
            allowed_lanes=frozenset({"interactive", "background"}),
        ),
    ],
    "standard",
    {"cheapskate": "free"},
)


def _router(*lanes: LaneSpec, **kwargs: object) -> LaneRouter:
    return LaneRouter(lanes or _LANES, estimator=_ESTIMATOR, tiers=_TIERS, **kwargs)  # type: ignore[arg-type]


def test_a_chat_turn_is_admitted_with_its_cap() -> None:
    decision = _router().route(Request(tenant="acme", prompt_tokens=500, max_new_tokens=4000))
    assert isinstance(decision, Admit)
    assert decision.lane == "interactive"
    assert decision.request.max_new_tokens == 1024
    assert decision.cost == 500 + 2 * 1024
    assert decision.http_status == 200
    assert decision.retry_after is None
    assert [step.rule for step in decision.steps] == ["tier", "estimate", "max_new_tokens cap"]


def test_the_estimate_step_says_how_the_prompt_was_counted() -> None:
    given = _router().route(Request(tenant="acme", prompt_tokens=1500, max_new_tokens=10))
    assert given.steps[1].detail == "1,500 prompt tokens (given)"
    estimator = CostEstimator(counter=HeuristicCounter(), exact_max_chars=100)
    sampled = LaneRouter(_LANES, estimator=estimator, tiers=_TIERS).route(
        Request(tenant="acme", prompt="lorem ipsum dolor sit amet " * 400, max_new_tokens=10)
    )
    detail = sampled.steps[1].detail
    assert detail.startswith("~")
    assert "prompt tokens (+-" in detail
    assert detail.endswith("%, sampled:heuristic)")
    # The arguments are plain values: nothing but the numbers is kept per decision.
    assert all(isinstance(arg, (int, float, str)) for arg in sampled.steps[1].args)


def test_a_long_prompt_is_demoted_with_the_lower_lanes_cap() -> None:
    decision = _router().route(Request(tenant="acme", prompt_tokens=50_000, max_new_tokens=4000))
    assert isinstance(decision, Demote)
    assert (decision.lane, decision.from_lane) == ("heavy", "interactive")
    assert decision.reason is Reason.PROMPT_OVER_BUDGET
    assert decision.request.max_new_tokens == 4000  # the cap of 'heavy', not 'interactive'
    text = decision.explain()
    assert "over the 8,192-token budget" in text
    assert text.endswith("demoted from 'interactive' (prompt_over_budget)")


def test_costly_work_moves_down_but_the_last_lane_keeps_it() -> None:
    router = _router()
    fits = router.route(Request(tenant="acme", prompt_tokens=90_000, max_new_tokens=4000))
    assert isinstance(fits, Demote)
    assert fits.lane == "heavy"  # costs 90k + 2 * 4k = 98k, within heavy's 100k
    costly = router.route(Request(tenant="acme", prompt_tokens=95_000, max_new_tokens=4000))
    assert isinstance(costly, Demote)
    assert costly.lane == "background"
    assert costly.reason is Reason.PROMPT_OVER_BUDGET  # the first reason it moved
    assert "cost 103,000 over the lane's 100,000" in costly.explain()
    lanes = (LaneSpec("a", max_cost=10), LaneSpec("b", max_cost=20))
    router = LaneRouter(lanes, estimator=_ESTIMATOR)
    kept = router.route(Request(prompt_tokens=100))
    assert isinstance(kept, Demote)
    assert kept.lane == "b"
    assert kept.reason is Reason.COST_OVER_LIMIT
    assert "no lower lane; stays" in kept.explain()


def test_over_budget_can_defer_with_a_retry_after() -> None:
    lanes = (
        LaneSpec(
            "only", max_prompt_tokens=10, over_budget=OverBudget.DEFER, defer_retry_after=12.5
        ),
    )
    decision = LaneRouter(lanes, estimator=_ESTIMATOR).route(Request(prompt_tokens=11))
    assert isinstance(decision, Defer)
    assert (decision.http_status, decision.retry_after) == (503, 12.5)
    assert decision.reason is Reason.PROMPT_OVER_BUDGET
    assert not decision.accepted


def test_over_every_budget_is_too_long() -> None:
    decision = _router().route(Request(tenant="acme", prompt_tokens=250_000))
    assert isinstance(decision, Reject)
    assert (decision.reason, decision.http_status) == (Reason.PROMPT_TOO_LONG, 413)
    lanes = (LaneSpec("a", max_prompt_tokens=10), LaneSpec("b", max_prompt_tokens=20))
    demoted_off_the_end = LaneRouter(lanes, estimator=_ESTIMATOR).route(Request(prompt_tokens=30))
    assert isinstance(demoted_off_the_end, Reject)
    assert demoted_off_the_end.reason is Reason.PROMPT_TOO_LONG


def test_a_tier_cap_rejects_before_routing() -> None:
    decision = _router().route(Request(tenant="cheapskate", prompt_tokens=20_000))
    assert isinstance(decision, Reject)
    assert decision.http_status == 413
    assert "tier 'free' cap" in decision.message


def test_demotion_skips_lanes_the_tier_may_not_use() -> None:
    decision = _router().route(Request(tenant="cheapskate", prompt_tokens=9_000))
    assert isinstance(decision, Demote)
    assert decision.lane == "background"


def test_lane_hints_are_honoured_within_the_tier() -> None:
    router = _router()
    hinted = router.route(Request(tenant="acme", prompt_tokens=10, lane="background"))
    assert isinstance(hinted, Admit)
    assert hinted.lane == "background"
    refused = router.route(Request(tenant="cheapskate", prompt_tokens=10, lane="heavy"))
    assert isinstance(refused, Admit)
    assert refused.lane == "interactive"
    assert "not allowed for tier 'free'" in refused.explain()


def test_unknown_lanes_and_tiers_are_bad_requests() -> None:
    router = _router()
    lane = router.route(Request(prompt_tokens=10, lane="nope"))
    tier = router.route(Request(prompt_tokens=10, tier="platinum"))
    assert isinstance(lane, Reject)
    assert isinstance(tier, Reject)
    assert (lane.reason, lane.http_status) == (Reason.UNKNOWN_LANE, 400)
    assert (tier.reason, tier.http_status) == (Reason.UNKNOWN_TIER, 400)


def test_a_requested_tier_overrides_the_table() -> None:
    decision = _router().route(Request(tenant="cheapskate", tier="standard", prompt_tokens=20_000))
    assert isinstance(decision, Demote)
    assert decision.lane == "heavy"


def test_custom_rules_by_callable() -> None:
    def no_logprobs_for_free(context: RouteContext) -> Verdict | None:
        if context.tier.name == "free" and context.request.logprobs is not None:
            return Verdict.rewrite(context.request.replace(logprobs=None), "logprobs dropped")
        return None

    def background_needs_batch_ids(context: RouteContext) -> Verdict | None:
        if context.lane.name == "background" and not context.request.id.startswith("batch-"):
            return Verdict.reject("background work needs a batch id", http_status=422)
        return None

    router = _router(rules=[no_logprobs_for_free, background_needs_batch_ids])
    rewritten = router.route(Request(tenant="cheapskate", prompt_tokens=10, logprobs=5))
    assert isinstance(rewritten, Admit)
    assert rewritten.request.logprobs is None
    assert "no_logprobs_for_free [interactive]: logprobs dropped" in rewritten.explain()
    refused = router.route(Request(tenant="cheapskate", prompt_tokens=9_000))
    assert isinstance(refused, Reject)
    assert (refused.reason, refused.http_status) == (Reason.RULE, 422)


def test_custom_rules_by_subclass_and_rewrites_rescore() -> None:
    class HalveOutputs(LaneRouter):
        def check(self, context: RouteContext) -> Verdict | None:
            if context.request.max_new_tokens > 100:
                smaller = context.request.replace(max_new_tokens=100)
                return Verdict.rewrite(smaller, "outputs capped at 100 tokens")
            return None

    router = HalveOutputs(_LANES, estimator=_ESTIMATOR, tiers=_TIERS)
    decision = router.route(Request(prompt_tokens=10, max_new_tokens=500))
    assert isinstance(decision, Admit)
    assert decision.cost == 10 + 2 * 100
    assert "HalveOutputs.check [interactive]: outputs capped at 100 tokens" in decision.explain()


def test_a_rule_that_demotes_with_nowhere_to_go_rejects() -> None:
    router = LaneRouter(
        (LaneSpec("only"),),
        estimator=_ESTIMATOR,
        rules=[lambda context: Verdict.demote("not here")],
    )
    decision = router.route(Request(prompt_tokens=1))
    assert isinstance(decision, Reject)
    assert (decision.reason, decision.http_status) == (Reason.RULE, 403)


def test_a_rule_returning_junk_is_a_routing_error() -> None:
    router = _router(rules=[lambda context: "admit please"])
    with pytest.raises(RoutingError, match="<lambda> returned str"):
        router.route(Request(prompt_tokens=1))


@pytest.mark.parametrize(
    ("lanes", "tiers", "message"),
    [
        ((), None, "at least one lane"),
        ((LaneSpec("a"), LaneSpec("a")), None, "unique"),
        ((LaneSpec("a"),), TierTable([TierSpec("t", "b")], "t"), "unknown lanes"),
    ],
)
def test_inconsistent_routers_are_refused(
    lanes: tuple[LaneSpec, ...], tiers: TierTable | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LaneRouter(lanes, estimator=_ESTIMATOR, tiers=tiers)


def _rank(router: LaneRouter, request: Request) -> int:
    decision = router.route(request)
    if isinstance(decision, (Admit, Demote)):
        return router.rank(decision.lane)
    return len(router.lanes)  # refused: past the last lane


_configs = policy_configs()


@given(_configs, requests(lanes=["interactive", "x"]))
def test_routing_is_total(config: PolicyConfig, request: Request) -> None:
    router = config.build_router(_ESTIMATOR)
    decision = router.route(request)
    assert isinstance(decision, (Admit, Demote, Defer, Reject))
    assert decision.steps
    assert decision.explain().splitlines()[-1].startswith("=> ")
    if isinstance(decision, (Admit, Demote)):
        tier = (
            router.tiers.get(request.tier)
            if request.tier
            else router.tiers.for_tenant(request.tenant)
        )
        assert tier is not None
        assert tier.allows(decision.lane)
        cap = router.lanes[router.rank(decision.lane)].max_new_tokens
        assert cap is None or decision.request.max_new_tokens <= cap
        assert decision.request.prompt == request.prompt
    else:
        assert decision.http_status >= 400


@given(
    _configs,
    st.sampled_from(["acme", "globex"]),
    st.integers(0, 300_000),
    st.integers(0, 300_000),
    st.integers(1, 8192),
    st.integers(1, 8192),
)
def test_bigger_requests_never_move_to_a_more_interactive_lane(
    config: PolicyConfig, tenant: str, p1: int, p2: int, m1: int, m2: int
) -> None:
    router = config.build_router(_ESTIMATOR)
    small = Request(tenant=tenant, prompt_tokens=min(p1, p2), max_new_tokens=min(m1, m2))
    assert _rank(router, small) <= _rank(router, small.replace(prompt_tokens=max(p1, p2)))
    assert _rank(router, small) <= _rank(router, small.replace(max_new_tokens=max(m1, m2)))
