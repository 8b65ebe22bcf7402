"""The engine TTFT the Policy learns, and the queued requests it gives up on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.workloads import long_conversation
from slopolicy import Hold, Outcome, Policy, PolicyConfig, Request
from slopolicy.core.cost.ranks import RecentRank
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.ttft import FirstTokenCheck, FirstTokenModel
from slopolicy.sim import EngineSpec, profile
from slopolicy.sim.comparison import evaluate
from slopolicy.sim.ours import PolicyScheduler


@given(
    values=st.lists(st.floats(0, 1e9), min_size=1, max_size=60),
    quantile=st.floats(0.01, 1.0),
    window=st.integers(1, 16),
    min_samples=st.integers(1, 16),
)
def test_a_recent_rank_is_the_rank_of_the_last_window(
    values: list[float], quantile: float, window: int, min_samples: int
) -> None:
    min_samples = min(min_samples, window)
    rank = RecentRank(quantile, window, min_samples)
    mean = RecentRank(None, window, min_samples)
    for value in values:
        rank.add(value)
        mean.add(value)
    recent = sorted(values[-window:])
    if len(recent) < min_samples:
        assert rank.value is None
        assert mean.value is None
    else:
        assert rank.value == recent[int(quantile * (len(recent) - 1))]
        # A running sum: rounding of what left it stays, far below a token.
        assert mean.value == pytest.approx(sum(recent) / len(recent), rel=1e-9, abs=1e-3)


@given(values=st.lists(st.integers(0, 2**31), min_size=1, max_size=80), window=st.integers(1, 16))
def test_the_mean_of_whole_numbers_is_exact(values: list[int], window: int) -> None:
    rank = RecentRank(None, window, 1)
    for value in values:
        rank.add(value)
    recent = values[-window:]
    assert rank.value == sum(recent) / len(recent)


def test_the_model_fits_a_floor_and_a_rate_once_it_has_enough() -> None:
    model = FirstTokenModel(min_samples=3)
    model.observe(1000, 0.12)
    model.observe(2000, 0.22)
    model.observe(2000, -1.0)  # a clock that went back: left out
    assert model.expected(1000) is None
    model.observe(4000, 0.42)  # 0.02 s + 10,000 tokens per second
    assert model.rate == pytest.approx(10_000.0)
    assert model.floor == pytest.approx(0.02)
    assert model.expected(5000) == pytest.approx(0.52)


def test_before_the_fit_a_prefill_time_is_the_seconds_per_token_so_far() -> None:
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    assert check.prefill("docs", 40_000) is None  # no first token yet
    check.started("d1", "docs", 20_000, now=0.0)
    check.first_token("d1", now=0.5)  # 20,000 tokens in 0.5 s, nothing beside it
    assert check.models["docs"].rate is None  # far from a fit
    assert check.prefill("docs", 40_000) == pytest.approx(1.0)
    # Chat has no first token of its own: the engine's ratio (every lane's
    # starts with nothing of a later lane beside them) stands in.
    assert check.prefill("chat", 2000) == pytest.approx(0.05)
    check.started("c1", "chat", 1000, now=1.0)
    check.first_token("c1", now=1.04)  # chat's own: the floor counted per token
    assert check.prefill("chat", 2000) == pytest.approx(0.08)
    # Once docs' own model is fitted, the fit answers (attention's square too).
    docs = check.models["docs"]
    for k in range(docs.min_samples):
        tokens = 10_000 + 5000 * (k % 4)
        docs.observe(tokens, 0.01 + tokens / 50_000, squares=float(tokens) ** 2)
    assert check.prefill("docs", 40_000) == docs.prefill(40_000)
    # (the first start, slower than the line, still weighs in a little)
    assert docs.prefill(40_000) == pytest.approx(0.01 + 40_000 / 50_000, rel=0.02)


def test_the_share_of_its_shadows_a_lane_waited_for_is_read_from_its_first_start_in_one() -> None:
    # A start waited for its shadow when its TTFT passed the unhindered one by
    # half the shadow or more; its shadow counts whole or not at all, and the
    # share is of the shadows summed, weighted like the fit.
    model = FirstTokenModel()
    assert model.waited_share is None
    model.observe(1000, 0.1)  # no shadow: nothing to read yet
    assert model.waited_share is None
    model.observe(1000, 1.3, shadow=1.5, unhindered=0.1)  # waited 1.2 of 1.5 s
    assert model.waited_share == 1.0
    model.observe(1000, 0.3, shadow=2.0, unhindered=0.1)  # waited 0.2 of 2 s: interleaved
    decay = 0.5 ** (1 / 256)
    assert model.waited_share == pytest.approx(1.5 * decay / (1.5 * decay + 2.0))
    model.observe(1000, 0.1)  # a start with no shadow decays both sums alike
    assert model.waited_share == pytest.approx(1.5 * decay / (1.5 * decay + 2.0))
    # Without an unhindered TTFT the whole TTFT is taken as waited.
    unknown = FirstTokenModel()
    unknown.observe(1000, 0.6, shadow=1.0)
    assert unknown.waited_share == 1.0
    assert not unknown.measured


def test_before_its_fit_a_lane_in_a_shadow_is_given_up_on_by_the_share_it_waited() -> None:
    """Before chat's fit measures its blocking, a chat request that would
    start in a docs prefill's shadow is lost when the engine's TTFT with
    nothing beside, plus the share of their shadows chat's starts waited
    for times this one, passes what its target leaves; before any chat
    start in a shadow (the first is the test) nothing is given up on, and
    on an engine chat was seen not to wait, nothing is."""
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    check.started("d0", "docs", 20_000, now=0.0)
    check.first_token("d0", now=0.5)  # docs: 40,000 tokens per second
    check.started("c0", "chat", 1000, now=1.0)
    check.first_token("c0", now=1.05)  # chat alone: 0.05 s (the engine: 20,000 per s)
    check.started("d1", "docs", 40_000, now=2.0)  # 1 s of prefill
    shadow = check.shadow("chat", now=2.2)
    assert shadow == pytest.approx(0.8)
    assert not check.lost("chat", 1000, arrival=2.2, now=2.2)  # the test
    chat = check.models["chat"]
    check.started("c1", "chat", 1000, now=2.2)
    check.first_token("c1", now=3.05)  # waited out the shadow
    assert chat.waited_share == 1.0
    assert not chat.measured
    check.started("d2", "docs", 40_000, now=4.0)
    own = check.engine.provisional(1000)  # the engine's TTFT with nothing beside
    assert own is not None
    assert 0.3 + own < 0.5 < 0.6 + own
    assert not check.lost("chat", 1000, arrival=4.7, now=4.7)  # 0.3 s of shadow left
    assert check.lost("chat", 1000, arrival=4.4, now=4.4)  # 0.6 s left: it cannot attain
    # The same start on an engine that interleaves: chat did not wait.
    other = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    other.started("d0", "docs", 20_000, now=0.0)
    other.first_token("d0", now=0.5)
    other.started("c0", "chat", 1000, now=1.0)
    other.first_token("c0", now=1.05)
    other.started("d1", "docs", 40_000, now=2.0)
    other.started("c1", "chat", 1000, now=2.2)
    other.first_token("c1", now=2.27)
    assert other.models["chat"].waited_share == 0.0
    other.started("d2", "docs", 40_000, now=4.0)
    assert not other.lost("chat", 1000, arrival=4.4, now=4.4)


def _fitted_chat(check: FirstTokenCheck, waits: float) -> FirstTokenModel:
    """Chat's model in ``check`` fitted to 0.05 s + 50,000 tokens per second
    + ``waits`` of the shadow, ±0.05 s (docs: 40,000 tokens per second)."""
    chat = check.models["chat"]
    for k in range(64):
        ahead, shadow = 1000 + 500 * (k % 7), 0.1 * (k % 6)
        noise = 0.05 if k % 4 < 2 else -0.05
        chat.observe(ahead, 0.05 + ahead / 50_000 + waits * shadow + noise, shadow=shadow)
    check.started("d0", "docs", 20_000, now=0.0)
    check.first_token("d0", now=0.5)
    assert chat.measured
    assert chat.blocking == pytest.approx(waits, abs=0.1)
    assert chat.spread > 0.03
    return chat


def _past_by_half_a_deviation(chat: FirstTokenModel) -> int:
    """A prompt whose central reading, with nothing ahead or beside, is half
    of ``chat``'s residual deviation past 0.5 s (its fit's 50,000 tokens a
    second, as :func:`_fitted_chat` makes it)."""
    assert chat.floor is not None
    return round((0.5 + chat.spread / 2 - chat.floor) * 50_000)


def test_after_its_fit_a_start_in_a_shadow_it_waits_out_is_read_centrally() -> None:
    """Once chat's fit measures that its starts wait out a docs prefill, a
    chat request in one is lost when the fit's central reading passes its
    target (what starts wait of a shadow is skewed: the fitted blocking, a
    mean, sits below what most wait). With no shadow the optimistic reading
    (one residual deviation less) still decides, so a request a lucky
    moment could save is kept."""
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    chat = _fitted_chat(check, 1.0)
    assert chat.floor is not None
    # No shadow: a prompt whose central reading is half a deviation past the
    # target, kept by the optimistic one.
    prompt = _past_by_half_a_deviation(chat)
    central = chat.expected(prompt, squares=float(prompt) ** 2)
    optimistic = chat.optimistic(prompt, squares=float(prompt) ** 2)
    assert central is not None
    assert optimistic is not None
    assert optimistic < 0.5 < central
    assert not check.lost("chat", prompt, arrival=5.0, now=5.0)
    # In a shadow: the same margin past the target, and it is lost.
    check.started("d1", "docs", 40_000, now=10.0)  # 1 s of prefill
    own = chat.compute(1000, squares=1e6)
    assert own is not None
    shadow = (0.5 + chat.spread / 2 - chat.floor - own) / chat.blocking
    now = 11.0 - shadow
    assert check.shadow("chat", now) == pytest.approx(shadow)
    optimistic = chat.optimistic(1000, squares=1e6, shadow=shadow)
    assert optimistic is not None
    assert optimistic < 0.5
    assert check.lost("chat", 1000, arrival=now, now=now)
    assert not check.lost("chat", 1000, arrival=now + 0.1, now=now + 0.1)  # 0.1 s less of it


def test_after_its_fit_a_start_in_a_shadow_it_does_not_wait_is_read_optimistically() -> None:
    """Where chat's starts wait for none of a docs prefill (an engine that
    interleaves), a request in one is read as any other: half a deviation
    past its target by the central reading, it is kept."""
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    chat = _fitted_chat(check, 0.0)
    assert chat.floor is not None
    check.started("d1", "docs", 40_000, now=10.0)  # 1 s of prefill
    prompt = _past_by_half_a_deviation(chat)
    central = chat.expected(prompt, squares=float(prompt) ** 2, shadow=0.5)
    assert central is not None
    assert central > 0.5
    assert check.shadow("chat", 10.5) == pytest.approx(0.5)
    assert not check.lost("chat", prompt, arrival=10.5, now=10.5)
    assert check.lost("chat", prompt + round(chat.spread * 50_000), arrival=10.5, now=10.5)


def test_prompts_ahead_already_in_prefill_count_only_for_what_is_left_of_them() -> None:
    """A long prompt that started a while ago is partly computed: a request
    behind it is judged by what is left of it, not by the whole prompt
    again. (On a long-conversation trace at low load, heavy turns behind a
    120k-token prompt under way were given up on at 11 s predicted where
    FCFS served them in 7-10 s.) Never less than its own prompt alone."""
    check = FirstTokenCheck(("chat", "docs"), {"chat": 0.5, "docs": 15.0})
    docs = check.models["docs"]
    for k in range(64):
        ahead = 10_000 + 5_000 * (k % 7)
        docs.observe(ahead, 0.01 + ahead / 10_000 + (0.01 if k % 2 else -0.01))
    assert docs.floor is not None
    check.started("big", "docs", 150_000, now=0.0)  # 15 s of prefill
    # Read in full at 5 s, the 170,000 tokens ahead would take 17 s: past 20 s.
    full = docs.optimistic(170_000, squares=150_000.0**2 + 20_000.0**2)
    assert full is not None
    assert 5.0 + full > 20.0
    # Five seconds of it are done: 12 s left, in time.
    assert not check.lost("docs", 20_000, arrival=5.0, now=5.0)
    # One that arrived at 0.5 s cannot make 15.5 s even so.
    assert check.lost("docs", 20_000, arrival=0.5, now=5.0)
    # Past what the prompt ahead should have taken, its own prefill is left.
    alone = check.prefill("docs", 20_000)
    assert alone is not None
    assert not check.lost("docs", 20_000, arrival=30.0 + alone - 15.0, now=30.0)
    assert check.lost("docs", 20_000, arrival=30.0 + alone - 15.1, now=30.0)


def test_a_model_that_explains_little_reads_optimistically_by_its_wide_residuals() -> None:
    # TTFT driven by something the tokens ahead do not show: R² near 0, and
    # the optimistic reading sits a residual standard deviation below the line.
    model = FirstTokenModel(min_samples=4, half_life=1e9)
    points = [(1000, 0.1), (2000, 0.9), (3000, 0.2), (4000, 1.0)] * 4
    for ahead, seconds in points:
        model.observe(ahead, seconds)
    assert model.r2 < 0.5
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    residuals = [y - (my + slope * (x - mx)) for x, y in points]
    spread = (sum(r * r for r in residuals) / len(residuals)) ** 0.5
    assert model.spread == pytest.approx(spread)
    expected = model.expected(3000)
    assert expected is not None
    assert model.optimistic(3000) == pytest.approx(expected - spread)


def test_an_exact_fit_reads_the_same_optimistically() -> None:
    model = FirstTokenModel(min_samples=3)
    for ahead in (1000, 2000, 4000):
        model.observe(ahead, 0.02 + ahead / 10_000)
    assert model.spread == pytest.approx(0.0, abs=1e-6)
    assert model.optimistic(5000) == pytest.approx(0.52)


def test_the_quadratic_and_blocking_terms_are_recovered() -> None:
    # TTFT = 0.01 s + ahead / 50,000 + 0.0005 s per million tokens² of squared
    # prompts + 0.9 of the later lanes' prefill left, over varied starts.
    model = FirstTokenModel(half_life=1e9, min_samples=8)
    for k in range(400):
        prompt = 200 + (k * 7919) % 40_000
        others = (k * 104_729) % 3_000
        shadow = 0.0 if k % 3 else (k * 15_485_863) % 3000 / 1000
        ahead, squares = prompt + others, float(prompt) ** 2 + float(others) ** 2
        seconds = 0.01 + ahead / 50_000 + 0.0005 * squares / 1e6 + 0.9 * shadow
        model.observe(ahead, seconds, squares=squares, shadow=shadow)
    assert model.rate == pytest.approx(50_000, rel=1e-6)
    assert model.quadratic == pytest.approx(0.0005, rel=1e-6)
    assert model.blocking == pytest.approx(0.9, rel=1e-6)
    assert model.floor == pytest.approx(0.01, rel=1e-6)
    assert model.prefill(20_000) == pytest.approx(0.01 + 0.4 + 0.2)


def test_terms_the_data_cannot_support_are_left_out() -> None:
    # Never in another lane's shadow, and a shadow that shortened TTFT (a
    # fit would give blocking < 0): both fits keep to the terms that hold.
    alone = FirstTokenModel(half_life=1e9, min_samples=4)
    odd = FirstTokenModel(half_life=1e9, min_samples=4)
    for k, ahead in enumerate((1000, 2000, 3000, 4000) * 5):
        alone.observe(ahead, 0.02 + ahead / 10_000)
        shadow = 0.1 * (k % 5)
        odd.observe(ahead, 0.02 + ahead / 10_000 - 0.001 * shadow, shadow=shadow)
    for model in (alone, odd):
        assert model.blocking == 0.0
        assert model.rate is not None
        assert model.rate > 0
    # Never in a shadow: blocking is not measured; a shadow that varied, is.
    assert not alone.shadowed
    assert odd.shadowed


def test_of_two_terms_that_each_hold_the_closer_fit_is_kept() -> None:
    # Blocking 1, plus a small negative quadratic effect the full fit cannot
    # keep; squares follow the shadow, so squares alone also holds, but
    # explains less than the shadow alone.
    model = FirstTokenModel()
    for k in range(64):
        prompt = 1000 + 500 * (k % 7)
        shadow = 0.05 * (k % 5) + 0.02 * (prompt / 1000) ** 2
        seconds = 0.05 + prompt / 50_000 + shadow - 0.004 * (prompt / 1000) ** 2
        model.observe(prompt, seconds, squares=float(prompt) ** 2, shadow=shadow)
    assert model.quadratic == 0.0
    assert model.blocking == pytest.approx(1.0, abs=0.02)
    assert model.spread < 0.01


def test_blocking_is_held_at_one_and_the_rest_fitted_to_what_the_shadow_leaves() -> None:
    # Starts in a later lane's shadow waited 1.5x it (the shadow ran long, or
    # the engine was full): a free fit would read blocking 1.5, which would
    # make every start in a short shadow look lost. Held at 1, the rate and
    # floor are fitted to the TTFT less the shadow.
    model = FirstTokenModel(half_life=1e9, min_samples=8)
    for k in range(200):
        ahead = 500 + (k * 7919) % 8000
        shadow = 0.0 if k % 2 else (k * 104_729) % 2000 / 1000
        model.observe(ahead, 0.03 + ahead / 40_000 + 1.5 * shadow, shadow=shadow)
    assert model.blocking == 1.0
    assert model.rate is not None
    assert model.rate > 0
    free = FirstTokenModel(half_life=1e9, min_samples=8)
    for k in range(200):  # the same starts with the shadow's excess taken out
        ahead = 500 + (k * 7919) % 8000
        shadow = 0.0 if k % 2 else (k * 104_729) % 2000 / 1000
        free.observe(ahead, 0.03 + ahead / 40_000 + 1.5 * shadow - shadow)
    assert model.rate == pytest.approx(free.rate)
    assert model.floor == pytest.approx(free.floor)
    assert model.spread == pytest.approx(free.spread, abs=1e-9)


@given(
    st.lists(
        st.tuples(st.integers(1, 200_000), st.floats(0, 1e4), st.floats(0, 1e4)),
        min_size=1,
        max_size=80,
    )
)
def test_every_fit_is_finite_and_never_negative(points: list[tuple[int, float, float]]) -> None:
    model = FirstTokenModel(min_samples=2)
    for ahead, seconds, shadow in points:
        model.observe(ahead, seconds, squares=float(ahead) ** 2, shadow=shadow)
        if model.rate is not None:
            assert model.rate > 0
            assert model.floor is not None
            for value in (model.floor, model.quadratic, model.blocking, model.spread):
                assert value >= 0
                assert value < float("inf")
            assert model.blocking <= 1
            assert 0 <= model.r2 <= 1
        provisional = model.provisional(1000)
        assert provisional is not None
        assert 0 <= provisional < float("inf")
        share = model.waited_share
        assert share is None or 0 <= share <= 1


@pytest.mark.parametrize(
    "kwargs",
    [{"half_life": 0.5}, {"min_samples": 1}, {"min_samples": True}],
)
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"half_life|min_samples"):
        FirstTokenModel(**kwargs)  # type: ignore[arg-type]


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 0.55},
                    "max_prompt_tokens": 2000,
                    "queue_capacity": 4096,
                },
                {"name": "docs", "slo": {"ttft_p95_s": 30.0}, "queue_capacity": 64},
            ],
            # The prefill budget off: these tests are of the TTFT check alone.
            "engine": {"max_running": 64, "prefill_horizon_s": 0},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _chat(name: str, tokens: int = 1000, lane: str = "chat") -> Request:
    return Request(id=name, tenant="t", prompt_tokens=tokens, max_new_tokens=8, lane=lane)


def _warm(policy: Policy) -> float:
    """32 chats alone, of 500 to 2,000 tokens: 10,000 prompt tokens per second."""
    now = 0.0
    for i in range(32):
        tokens = 500 + 500 * (i % 4)
        policy.submit(_chat(f"w{i}", tokens), now=now)
        (started,) = policy.dispatch(now=now).started
        policy.first_token(started.id, now=now + tokens / 10_000)
        policy.finish(started.id, now=now + 0.3)
        now += 1.0
    return now


def test_a_burst_past_what_the_engine_can_prefill_in_time_leaves_the_queue() -> None:
    policy = _policy()
    now = _warm(policy)
    assert policy.first_tokens.models["chat"].rate == pytest.approx(10_000.0)
    for i in range(20):
        policy.submit(_chat(f"b{i}"), now=now)
    dispatch = policy.dispatch(now=now)
    # 5,000 tokens ahead is 0.5 s of 0.55: the first five can still attain; the rest are
    # expected to miss, so they leave instead of slowing the five down.
    assert [s.id for s in dispatch.started] == [f"b{i}" for i in range(5)]
    assert [f.id for f in dispatch.expired] == [f"b{i}" for i in range(5, 20)]
    assert {f.outcome for f in dispatch.expired} == {Outcome.EXPIRED}
    assert {f.held_by for f in dispatch.expired} == {Hold.LATE}
    assert policy.statistics().outcomes[Outcome.EXPIRED] == 15


def test_requests_that_come_one_at_a_time_are_never_given_up_on() -> None:
    policy = _policy()
    now = _warm(policy)
    for i in range(50):
        policy.submit(_chat(f"s{i}"), now=now)
        (started,) = policy.dispatch(now=now).started
        policy.first_token(started.id, now=now + 0.1)
        policy.finish(started.id, now=now + 0.2)
        now += 0.3
    assert policy.statistics().outcomes[Outcome.EXPIRED] == 0


def test_prompts_of_a_later_lane_are_not_ahead_of_an_earlier_one() -> None:
    policy = _policy()
    now = _warm(policy)
    policy.submit(_chat("doc", tokens=50_000, lane="docs"), now=now)
    policy.submit(_chat("c"), now=now)
    started = policy.dispatch(now=now).started
    assert {s.id for s in started} == {"doc", "c"}  # the document is behind the chat
    policy.first_token("c", now=now + 0.1)
    policy.submit(_chat("after"), now=now + 0.2)
    assert [s.id for s in policy.dispatch(now=now + 0.2).started] == ["after"]


def test_a_burst_of_thousands_lost_at_once_leaves_in_one_dispatch() -> None:
    # One dispatch gives up on every lost head in a loop, however many there are.
    policy = _policy()
    now = _warm(policy)
    for i in range(3000):
        policy.submit(_chat(f"b{i}", tokens=1000), now=now)
    dispatch = policy.dispatch(now=now)
    assert len(dispatch.started) == 5
    assert len(dispatch.expired) == 3000 - 5


def test_before_chat_s_fit_a_turn_in_a_prefill_it_would_wait_out_leaves_instead_of_coming_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first two minutes of a long-context conversation past its knee,
    on vLLM's default engine (a running prefill takes whole iterations):
    with the share of their shadows chat's starts waited for standing in
    for its blocking until the fit, chat turns that would start in a long
    prefill they cannot wait out leave then, and far fewer come late
    (against the lane's p95) than without the stand-in, over four draws."""
    engine = EngineSpec(profile("llama3-8b/h100"))
    config = PolicyConfig()
    late: dict[bool, int] = {}
    for stand_in in (True, False):
        if not stand_in:
            monkeypatch.setattr(FirstTokenModel, "waited_share", property(lambda self: None))
        late[stand_in] = 0
        for seed in (1, 2, 3, 4):
            workload = long_conversation(120.0, seed=seed).scaled(0.45)
            result, _ = evaluate(PolicyScheduler(config), workload, engine, config)
            late[stand_in] += sum(
                1
                for r in result.records
                if r.lane == "interactive" and r.ttft is not None and r.ttft > 0.5
            )
    assert late[True] <= 0.75 * late[False]
