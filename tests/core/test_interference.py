"""The harm a long prompt's prefill does to the more urgent lanes, and the
requests deferred for it: priced from what the engine does, never on an
engine that interleaves long prompts with other work."""

from __future__ import annotations

import collections
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from slopolicy import PolicyConfig
from slopolicy.core.queueing.interference import ArrivalRate, PrefillInterference
from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.errors import UsageError
from slopolicy.sim import EngineSpec, LogNormal, Poisson, Stream, Tenants, build_workload, profile
from slopolicy.sim.comparison import evaluate
from slopolicy.sim.ours import PolicyScheduler
from slopolicy.sim.records import SimOutcome

_LANES = ("chat", "docs")


def test_an_arrival_rate_follows_a_steady_stream_and_decays_when_quiet() -> None:
    rate = ArrivalRate(window=10.0)
    for k in range(2000):  # 4 per second for 500 s
        rate.arrived(now=k / 4)
    assert rate.rate(now=500.0) == pytest.approx(4.0, rel=0.02)
    assert rate.rate(now=510.0) == pytest.approx(rate.rate(now=500.0) / math.e, rel=1e-9)
    assert rate.rate(now=499.0) == rate.rate(now=499.75)  # before the last arrival: its value


def test_an_arrival_rate_reads_a_steady_stream_from_its_first_seconds() -> None:
    # A window that began empty would read 1 - e^(-t / 30) of the rate t
    # seconds in: about a sixth of it at 5 s. The first arrival starts the clock.
    rate = ArrivalRate(window=30.0)
    rate.arrived(now=0.0)
    assert rate.rate(now=0.0) == 0.0  # one arrival is no interval yet
    assert rate.rate(now=1.0) == 0.0
    for k in range(1, 41):  # 4 per second for 10 s
        rate.arrived(now=k / 4)
        if k % 8 == 0:
            assert rate.rate(now=k / 4) == pytest.approx(4.0, rel=0.02)


@given(st.lists(st.floats(0, 1e6), max_size=50))
@example([0.0, 5e-324])  # a second arrival a denormal after the first
@example([0.0, 2.2250738585e-313])  # ... and one whose rate would overflow
def test_an_arrival_rate_is_never_negative_nor_infinite(times: list[float]) -> None:
    rate = ArrivalRate()
    for at in times:
        rate.arrived(now=at)
        assert 0 <= rate.rate(now=at) < math.inf


def _check(blocking: float) -> FirstTokenCheck:
    """Chat (0.5 s target) and docs, both fitted: docs prefill at 50,000
    tokens per second; a chat started in the shadow of docs' prefill waits
    ``blocking`` of what is left of it."""
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0})
    docs, chat = check.models["docs"], check.models["chat"]
    for k in range(64):
        doc = 10_000 + 1000 * (k % 8)
        docs.observe(doc, 0.01 + doc / 50_000)
        prompt, shadow = 500 + 100 * (k % 5), 0.2 * (k % 3)
        chat.observe(prompt, 0.02 + prompt / 50_000 + blocking * shadow, shadow=shadow)
    return check


def test_the_harm_is_the_urgent_lane_s_arrivals_in_the_time_the_prefill_holds_it() -> None:
    check = _check(1.0)
    interference = PrefillInterference(_LANES, {"chat": 0.5}, check, {"docs": 1.0})
    for k in range(300):  # chat at 2 per second for 150 s
        interference.arrived("chat", now=k / 2)
    rate = interference.rates["chat"].rate(now=150.0)
    floor = check.models["chat"].floor
    assert floor is not None
    assert check.models["chat"].blocking == pytest.approx(1.0)
    # A 100k-token document: 2.01 s of prefill, all of it holding chat up.
    held = 0.01 + 100_000 / 50_000 - (0.5 - floor)
    assert interference.harm("docs", 100_000, now=150.0) == pytest.approx(rate * held)
    assert interference.refuses("docs", 100_000, now=150.0) == pytest.approx(rate * held)
    # A prompt costing chat 0.75 requests may queue, unless it is worth half
    # a request (its tenant asks for twice its share): the limit scales.
    prompt = round(50_000 * (0.75 / rate - 0.01 + 0.5 - floor))
    harm = interference.harm("docs", prompt, now=150.0)
    assert harm == pytest.approx(0.75, abs=1e-3)
    assert interference.refuses("docs", prompt, now=150.0) is None
    assert interference.refuses("docs", prompt, now=150.0, worth=0.5) == harm
    for bad in (-0.1, 1.5, math.nan, "1"):
        with pytest.raises(UsageError, match="worth"):
            interference.refuses("docs", prompt, now=150.0, worth=bad)  # type: ignore[arg-type]
    # Short enough to fit in chat's slack: no harm at all.
    assert interference.harm("docs", 10_000, now=150.0) == 0.0
    assert interference.refuses("docs", 10_000, now=150.0) is None
    # Nothing is ahead of the first lane: it is never deferred.
    assert interference.refuses("chat", 10**6, now=150.0) is None


def test_an_engine_that_interleaves_is_never_priced() -> None:
    check = _check(0.0)
    interference = PrefillInterference(_LANES, {"chat": 0.5}, check, {"docs": 1.0})
    for k in range(3000):
        interference.arrived("chat", now=k / 20)
    assert check.models["chat"].blocking == 0.0
    assert interference.harm("docs", 10**6, now=150.0) == 0.0


def _engine_fitted_only() -> tuple[FirstTokenCheck, PrefillInterference]:
    """Only the engine model fitted (docs alone, 50,000 tokens per second),
    and chat arriving at 2 per second for 150 s."""
    check = FirstTokenCheck(_LANES, {"chat": 0.5, "docs": 15.0})
    for k in range(32):
        doc = 10_000 + 1000 * (k % 8)
        check.engine.observe(doc, 0.01 + doc / 50_000)
    interference = PrefillInterference(_LANES, {"chat": 0.5}, check, {"docs": 1.0})
    for k in range(300):
        interference.arrived("chat", now=k / 2)
    return check, interference


def test_until_chat_has_started_beside_a_long_prefill_it_is_taken_to_wait_for_all_of_it() -> None:
    """Only the engine model fitted (chat never started in a shadow): a docs
    prompt that would start beside nothing is not priced (it is what
    teaches chat how much it waits); one that lengthens a running docs
    prefill is priced at blocking 1 from the engine model's floor and
    prefill time. Once chat has measured its blocking, the measure rules."""
    check, interference = _engine_fitted_only()
    rate = interference.rates["chat"].rate(now=150.0)
    assert check.models["chat"].floor is None
    assert check.models["docs"].rate is None
    assert interference.harm("docs", 100_000, now=150.0) == 0.0  # nothing running: explore
    check.started("running", "docs", 100_000, now=150.0)  # 2.01 s of prefill from 150 s
    floor = check.engine.floor
    assert floor is not None
    shadow = check.shadow("chat", now=150.0)
    assert shadow is not None
    assert shadow == pytest.approx(0.01 + 100_000 / 50_000)
    slack = 0.5 - floor
    added = max(0.0, 2 * shadow - slack) - max(0.0, shadow - slack)
    assert interference.harm("docs", 100_000, now=150.0) == pytest.approx(rate * added)
    assert interference.refuses("docs", 100_000, now=150.0) is not None
    # Chat fitted from starts beside docs that did not wait for them: blocking
    # measured at 0, and nothing is priced however long the shadow.
    chat = check.models["chat"]
    for k in range(32):
        prompt, beside = 500 + 100 * (k % 5), 0.5 * (k % 3)
        chat.observe(prompt, 0.02 + prompt / 50_000, shadow=beside)
    assert chat.shadowed
    assert chat.blocking == pytest.approx(0.0, abs=1e-9)
    assert interference.harm("docs", 100_000, now=150.0) == pytest.approx(0.0, abs=1e-9)


def test_after_the_first_test_every_long_prompt_is_priced_at_the_prior() -> None:
    """Once a chat request has started beside a long prefill (the first
    test), a prompt with nothing running beside it is priced at blocking 1
    too, until chat's fit measures its blocking: the test is not repeated at
    the cost of every long prompt that comes meanwhile."""
    check, interference = _engine_fitted_only()
    rate = interference.rates["chat"].rate(now=150.0)
    chat = check.models["chat"]
    assert not chat.beside
    assert interference.harm("docs", 100_000, now=150.0) == 0.0  # the first test
    chat.observe(600, 1.5, shadow=1.45)  # one chat start beside a docs prefill
    assert chat.beside
    assert chat.floor is None  # nothing measured: the prior, from the engine's floor
    floor, seconds = check.engine.floor, check.prefill("docs", 100_000)
    assert floor is not None
    assert seconds is not None
    held = seconds - (0.5 - floor)
    assert interference.harm("docs", 100_000, now=150.0) == pytest.approx(rate * held)
    assert interference.refuses("docs", 100_000, now=150.0) is not None
    assert interference.harm("docs", 20_000, now=150.0) == 0.0  # within chat's slack


def test_a_quiet_urgent_lane_prices_nothing_and_a_lane_without_a_limit_is_never_deferred() -> None:
    check = _check(1.0)
    quiet = PrefillInterference(_LANES, {"chat": 0.5}, check, {"docs": 1.0})
    assert quiet.refuses("docs", 10**6, now=0.0) is None  # no chat has arrived
    unlimited = PrefillInterference(_LANES, {"chat": 0.5}, check, {})
    for k in range(3000):
        unlimited.arrived("chat", now=k / 20)
    assert unlimited.harm("docs", 100_000, now=150.0) > 1
    assert unlimited.refuses("docs", 100_000, now=150.0) is None


_DOCS_TENANTS = Tenants.numbered("docs-", 2)


def _mixed(
    seconds: float,
    *,
    chat_rate: float = 1.2,
    docs_rate: float = 0.4,
    docs_tenants: Tenants = _DOCS_TENANTS,
    seed: int = 3,
) -> object:
    """Chat from four tenants beside long documents (median 20k tokens)."""
    chat = Stream(
        "chat",
        Poisson(chat_rate),
        LogNormal(600, 0.8, 16, 6000),
        LogNormal(120, 0.6, 8, 512),
        Tenants.numbered("chat-", 4),
        max_new_tokens=512,
    )
    docs = Stream(
        "docs",
        Poisson(docs_rate),
        LogNormal(20_000, 0.7, 9000, 100_000),
        LogNormal(100, 0.5, 8, 512),
        docs_tenants,
        max_new_tokens=512,
    )
    return build_workload([chat, docs], duration=seconds, seed=seed, name="mixed")


@pytest.mark.parametrize(("threshold", "deferred"), [(0, True), (1024, False)])
def test_long_prompts_are_deferred_only_where_their_prefill_holds_chat_up(
    threshold: int, deferred: bool
) -> None:
    """The same traffic on vLLM's default (a running prefill takes whole
    iterations) and with ``long_prefill_token_threshold`` 1,024 (chat
    interleaves): the policy learns which engine it is in front of. Until
    chat has started beside a long prefill it is taken to wait for it (the
    prior), so on the interleaving engine a prompt may be deferred in the
    first minute, never after."""
    engine = EngineSpec(profile("llama3-8b/h100"), long_prefill_token_threshold=threshold)
    workload = _mixed(240.0)
    config = PolicyConfig()
    result, _ = evaluate(PolicyScheduler(config), workload, engine, config)  # type: ignore[arg-type]
    refused = [
        r
        for r in result.records
        if r.outcome is SimOutcome.REJECTED and r.reason == "prefill_interference"
    ]
    late = [r for r in refused if r.request.arrival >= 60.0]
    assert bool(late) == deferred
    if deferred:  # the longest prompts, and only in the lane behind chat
        served = [r.request.prompt_tokens for r in result.records if r.lane == "heavy"]
        longest = sorted(served)[len(served) // 2 :]
        assert sum(r.request.prompt_tokens for r in refused) / len(refused) > min(longest)
        assert all(r.lane == "heavy" for r in refused)


def test_an_over_share_tenant_s_long_prompts_are_deferred_at_less_harm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past saturation the harm a prompt of a tenant over its max-min share
    may do is bounded by the part of its demand within the share: more of
    its prompts are deferred than with every request worth one, and none
    more of the tenant within its share."""
    engine = EngineSpec(profile("llama3-8b/h100"))
    # Documents at 1.2/s, 90% of them from one tenant: past saturation.
    workload = _mixed(
        180.0,
        chat_rate=1.5,
        docs_rate=1.2,
        docs_tenants=Tenants(("big", "small"), weights=(0.9, 0.1)),
        seed=5,
    )
    config = PolicyConfig()
    deferred: dict[bool, collections.Counter[str]] = {}
    refuses = PrefillInterference.refuses

    def worth_one(
        self: PrefillInterference, lane: str, prompt: int, now: float, *, worth: float = 1.0
    ) -> float | None:
        return refuses(self, lane, prompt, now)

    for scaled in (True, False):
        if not scaled:
            monkeypatch.setattr(PrefillInterference, "refuses", worth_one)
        result, _ = evaluate(PolicyScheduler(config), workload, engine, config)  # type: ignore[arg-type]
        deferred[scaled] = collections.Counter(
            r.request.tenant
            for r in result.records
            if r.outcome is SimOutcome.REJECTED and r.reason == "prefill_interference"
        )
    assert deferred[True]["big"] > deferred[False]["big"]
    assert deferred[True]["small"] <= deferred[False]["small"]
