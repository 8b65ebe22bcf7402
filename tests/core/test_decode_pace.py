"""DecodePace: starts wait while the requests decoding are behind their TPOT pace."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from slopolicy import Hold, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.queueing.decode_pace import DecodePace
from slopolicy.errors import UsageError

T = 0.1  # the TPOT target, seconds per token


def _pace(*lanes: str) -> DecodePace:
    """Lanes (``chat`` by default) whose answers have been late lately."""
    pace = DecodePace(dict.fromkeys(lanes or ("chat",), T))
    for lane in lanes or ("chat",):
        for _ in range(2):  # 10 gaps in 2 s: late
            pace.completed(lane, first_token_at=0.0, tokens=11, now=2.0)
    return pace


def test_nothing_is_held_until_answers_come_past_their_target() -> None:
    pace = DecodePace({"chat": T})
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=11, expected=101, now=5.0)
    assert pace.fits(math.inf)  # far behind, but no answer has been late lately
    pace.completed("chat", first_token_at=0.0, tokens=11, now=0.5)
    pace.completed("chat", first_token_at=0.0, tokens=11, now=2.0)  # late
    assert pace.fits(math.inf)  # one late in two: a p95's luck, not its breach
    pace.completed("chat", first_token_at=0.0, tokens=11, now=2.0)
    # Two: the lane's budget is spent. The pace is read from the next report
    # on (what came while nothing was held is not kept).
    assert pace.fits(math.inf)
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=12, expected=101, now=5.1)
    assert not pace.fits(0.0)
    for _ in range(40):
        pace.completed("chat", first_token_at=2.0, tokens=11, now=2.5)  # on time
    assert pace.fits(math.inf)  # two in 43: within it again
    assert pace._slack == {}  # and nothing is kept until answers come late again


def test_slack_is_projected_at_the_latest_pace_to_the_forecast_end() -> None:
    pace = _pace()
    # 11 tokens in 0.5 s: 0.5 s ahead; at 0.05 s a token for 90 more, 4.5 s more.
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=11, expected=101, now=0.5)
    assert pace.fits(4.99)
    assert not pace.fits(5.01)  # the one request measured would end behind
    # Its batch slowed, no prompt started meanwhile: 20 tokens in 3 s since.
    # Behind by 0.5 s now, and at that pace (0.15 s a token) 0.05 s more for
    # each of the 70 left: -4 s.
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=31, expected=101, now=3.5)
    assert not pace.fits(0.0)
    # Decoding faster again (0.06 s a token), it is 0.1 s behind but makes that
    # up by its end: -0.1 + 0.04 * 60 = 2.3 s.
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=41, expected=101, now=4.1)
    assert pace.fits(2.29)
    assert not pace.fits(2.31)


def test_the_pace_is_the_decoding_alone_the_prompts_started_beside_it_taken_off() -> None:
    pace = _pace()
    pace.first_token("a", lane="chat")
    pace.started(1.5)  # prompts the engine computes in 1.5 s started beside it
    # 21 tokens in 3 s: 1 s behind, but 1.5 s of it was those prompts, so it
    # decodes at 0.075 s a token and gains 0.025 s on each of the 80 left: 2 s,
    # 1 s more than it lost.
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=21, expected=101, now=3.0)
    assert pace.fits(0.99)
    assert not pace.fits(1.01)


def test_prompts_started_since_a_report_take_their_prefill_from_every_slack() -> None:
    pace = _pace()
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=11, expected=11, now=0.5)  # 0.5 s
    pace.started(0.3)
    assert pace.fits(0.19)
    assert not pace.fits(0.21)
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=12, expected=12, now=0.9)  # 0.2 s
    assert pace.fits(0.19)  # the report already holds what started before it


def test_the_share_behind_a_p95_lets_one_in_twenty_through() -> None:
    pace = _pace()
    for k in range(20):  # 20 requests on pace, 1 s ahead each
        pace.reported(f"r{k}", lane="chat", first_token_at=0.0, tokens=11, expected=11, now=0.0)
    pace.reported("r0", lane="chat", first_token_at=0.0, tokens=12, expected=31, now=1.2)  # behind
    assert pace.fits(0.5)  # one of 20 behind: 5%, what a p95 lets past it
    pace.reported("r1", lane="chat", first_token_at=0.0, tokens=12, expected=31, now=1.2)
    assert not pace.fits(0.0)  # two of 20: 10%
    pace.ended("r1")
    assert not pace.fits(0.0)  # one of 19: over 5%
    pace.reported("r20", lane="chat", first_token_at=0.0, tokens=11, expected=11, now=0.0)
    assert pace.fits(0.5)  # one of 20 again


def test_a_request_past_saving_counts_no_more() -> None:
    pace = _pace()
    # 2 s behind with 10 tokens left: even instant tokens bring back only 1 s.
    pace.reported("lost", lane="chat", first_token_at=0.0, tokens=11, expected=21, now=3.0)
    assert pace.fits(10.0)
    # 2 s behind with 30 left can still end within its target (from 0.1 s a token
    # down to 0.02, 2.4 s), so it is behind, and holds starts.
    pace.reported("late", lane="chat", first_token_at=0.0, tokens=11, expected=41, now=3.0)
    assert not pace.fits(0.0)


def test_lanes_without_a_target_and_first_tokens_alone_are_never_measured() -> None:
    pace = _pace()
    pace.reported("batch", lane="offline", first_token_at=0.0, tokens=50, expected=60, now=100.0)
    pace.reported("one", lane="chat", first_token_at=0.0, tokens=1, expected=60, now=100.0)
    pace.completed("offline", first_token_at=0.0, tokens=50, now=100.0)
    pace.completed("chat", first_token_at=0.0, tokens=1, now=100.0)
    assert pace.fits(math.inf)
    pace.ended("never-seen")  # nothing to end: nothing changes
    assert pace.fits(math.inf)


@pytest.mark.parametrize("bound", [0.0, -1.0, math.inf, math.nan, "0.1"])
def test_a_bad_bound_is_refused(bound: object) -> None:
    with pytest.raises(UsageError, match="TPOT bound"):
        DecodePace({"chat": bound})  # type: ignore[dict-item]


@pytest.mark.parametrize("seconds", [-0.1, math.nan, "0.1", None])
def test_a_bad_prefill_time_is_refused_and_changes_nothing(seconds: object) -> None:
    pace = _pace()
    pace.reported("a", lane="chat", first_token_at=0.0, tokens=11, expected=11, now=0.5)  # 0.5 s
    with pytest.raises(UsageError, match="prefill seconds"):
        pace.started(seconds)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="prefill seconds"):
        pace.fits(seconds)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="prefill seconds"):
        pace.started(math.inf)  # what started is finite
    assert pace.fits(0.49)
    assert not pace.fits(0.51)


@pytest.mark.parametrize("tokens", [-1, 1.5, "2", True])
def test_a_bad_token_count_is_refused(tokens: object) -> None:
    pace = _pace()
    with pytest.raises(UsageError, match="tokens"):
        pace.reported("a", lane="chat", first_token_at=0.0, tokens=tokens, expected=9, now=1.0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="tokens"):
        pace.completed("chat", first_token_at=0.0, tokens=tokens, now=1.0)  # type: ignore[arg-type]
    assert pace._slack == {}


@pytest.mark.parametrize("first", [math.nan, math.inf, "0", None])
def test_a_bad_first_token_time_is_refused(first: object) -> None:
    pace = _pace()
    with pytest.raises(UsageError, match="first_token_at"):
        pace.reported("a", lane="chat", first_token_at=first, tokens=11, expected=9, now=1.0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="first_token_at"):
        pace.completed("chat", first_token_at=first, tokens=11, now=1.0)  # type: ignore[arg-type]
    assert pace._slack == {}


def test_a_bad_quantile_is_refused() -> None:
    with pytest.raises(UsageError, match="quantile"):
        DecodePace({"chat": T}, quantile=1.0)


@given(
    slacks=st.lists(st.floats(-5.0, 5.0), min_size=1, max_size=40),
    small=st.floats(0.0, 3.0),
    extra=st.floats(0.0, 3.0),
)
def test_a_smaller_prompt_fits_wherever_a_larger_one_does(
    slacks: list[float], small: float, extra: float
) -> None:
    pace = _pace()
    kept = []
    for k, slack in enumerate(slacks):  # answers at their end: the slack is the one now
        now = 10.0 - slack
        pace.reported(f"r{k}", lane="chat", first_token_at=0.0, tokens=101, expected=101, now=now)
        kept.append(T * 100 - now)
    if pace.fits(small + extra):
        assert pace.fits(small)
    # Behind with nothing left to write is past saving: only the others count.
    measured = [slack for slack in kept if slack >= 0.0]
    late = sum(slack < small for slack in measured)
    assert pace.fits(small) == (late <= 0.05 * len(measured))


class PaceMachine(RuleBasedStateMachine):
    """Reports, starts and ends in any order: each lane's count is its
    measured requests, and nothing is measured once everything ended."""

    def __init__(self) -> None:
        super().__init__()
        self.pace = _pace("chat", "code")
        self.now = 0.0
        self.live: dict[str, tuple[str, int]] = {}  # id -> (lane, tokens)

    @rule(
        request=st.sampled_from([f"r{k}" for k in range(8)]),
        lane=st.sampled_from(["chat", "code", "batch"]),
        tokens=st.integers(0, 400),
        expected=st.integers(0, 400),
        dt=st.floats(0.0, 2.0),
    )
    def report(self, request: str, lane: str, tokens: int, expected: int, dt: float) -> None:
        lane = self.live.get(request, (lane, 0))[0]  # a request keeps its lane
        tokens = max(tokens, self.live.get(request, (lane, 0))[1])
        self.now += dt
        self.pace.reported(
            request, lane=lane, first_token_at=0.0, tokens=tokens, expected=expected, now=self.now
        )
        self.live[request] = (lane, tokens)

    @rule(
        request=st.sampled_from([f"r{k}" for k in range(8)]),
        lane=st.sampled_from(["chat", "code", "batch"]),
    )
    def first(self, request: str, lane: str) -> None:
        if request not in self.live:
            self.pace.first_token(request, lane=lane)
            self.live[request] = (lane, 1)

    @rule(lane=st.sampled_from(["chat", "code", "batch"]), late=st.booleans())
    def complete(self, lane: str, late: bool) -> None:
        self.pace.completed(
            lane, first_token_at=self.now - (2.0 if late else 0.5), tokens=11, now=self.now
        )

    @rule(seconds=st.floats(0.0, 5.0))
    def start(self, seconds: float) -> None:
        self.pace.started(seconds)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def end(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(sorted(self.live)))
        del self.live[request]
        self.pace.ended(request)

    @invariant()
    def only_live_requests_of_bound_lanes_are_kept(self) -> None:
        pace = self.pace
        assert set(pace._slack) <= set(self.live)
        assert set(pace._firsts) <= set(self.live)
        assert all(self.live[r][1] >= 2 and self.live[r][0] != "batch" for r in pace._slack)
        assert all(kept[0] == self.live[r][0] for r, kept in pace._slack.items())
        assert all(self.live[r][0] != "batch" for r in pace._firsts)
        if not pace._slack:
            assert pace.fits(math.inf)
        if not pace.active:
            assert pace._slack == {}
            assert pace.fits(math.inf)


TestPaceMachine = PaceMachine.TestCase


# -- through the policy ---------------------------------------------------------


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {
                    "name": "chat",
                    "slo": {"ttft_p95_s": 5.0, "tpot_p95_s": T},
                    "queue_capacity": 64,
                    "queue_order": "arrival",
                }
            ],
            "engine": {"max_running": 64, "prefill_horizon_s": 0},  # the pace alone
            "kv": {"output_quantile": None},  # each answer reserved at its ceiling
            "ladder": {"enabled": False},
        }
    )
    return Policy(config, counter=HeuristicCounter())


def _late_answers(policy: Policy, now: float) -> float:
    """Two chat answers past the TPOT target (10 gaps in 2 s), their prompts
    through prefill at 1,000 tokens a second; the time after."""
    for k in range(2):
        policy.submit(
            Request(id=f"slow{k}", tenant="s", prompt_tokens=10, max_new_tokens=11), now=now
        )
        (started,) = policy.dispatch(now=now)
        now += 0.01
        policy.first_token(started.id, now=now)
    for k in range(2):
        policy.finish(f"slow{k}", now=now + 2.0, output_tokens=11)
    return now + 2.0


def _learn(policy: Policy, rate: float) -> float:
    """The engine model's rate, from 32 prompts through prefill one at a time
    (each ends at its first token); the time after."""
    now = 0.0
    for k in range(32):
        tokens = 100 * (1 + k % 4)
        policy.submit(
            Request(id=f"warm{k}", tenant="w", prompt_tokens=tokens, max_new_tokens=1), now=now
        )
        (started,) = policy.dispatch(now=now)
        now += tokens / rate
        policy.first_token(started.id, now=now)
        policy.finish(started.id, now=now, output_tokens=1)
    assert policy.first_tokens.engine.rate == pytest.approx(rate)
    return now


def test_a_start_waits_until_the_requests_decoding_have_the_slack_its_prefill_takes() -> None:
    policy = _policy()
    now = _late_answers(policy, _learn(policy, 1000.0))
    for k in range(3):
        policy.submit(
            Request(id=f"d{k}", tenant="t", prompt_tokens=10, max_new_tokens=101), now=now
        )
    assert len(policy.dispatch(now=now).started) == 3
    for k in range(3):
        policy.first_token(f"d{k}", now=now)
    for k in range(3):
        policy.tokens(f"d{k}", 10, now=now + 0.9)  # 0.1 s a token: on pace, no slack
    assert policy.first_tokens.compute(400) == pytest.approx(0.4, abs=0.01)
    policy.submit(Request(id="doc", tenant="t", prompt_tokens=400), now=now + 0.9)
    dispatch = policy.dispatch(now=now + 0.9)
    assert dispatch.started == ()
    # Two of three decode fast (0.02 s a token: 0.08 s gained on each of 80 left).
    for k in range(2):
        policy.tokens(f"d{k}", 10, now=now + 1.1)
    assert policy.dispatch(now=now + 1.1).started == ()  # one of three still has none
    policy.finish("d2", now=now + 1.2, output_tokens=101)
    assert [s.id for s in policy.dispatch(now=now + 1.2).started] == ["doc"]


def test_a_request_that_expires_held_by_the_pace_says_so() -> None:
    policy = _policy()
    now = _late_answers(policy, _learn(policy, 1000.0))
    policy.submit(Request(id="d", tenant="t", prompt_tokens=10, max_new_tokens=101), now=now)
    policy.dispatch(now=now)
    policy.first_token("d", now=now)
    policy.tokens("d", 10, now=now + 1.5)  # 0.15 s a token: behind, and falling further
    policy.submit(Request(id="q", tenant="t", prompt_tokens=10), now=now + 1.5)
    assert policy.dispatch(now=now + 1.5).started == ()
    expired = policy.dispatch(now=now + 7.0).expired
    assert [(f.id, f.held_by) for f in expired] == [("q", Hold.PACE)]


def test_without_a_tpot_target_nothing_is_held_for_the_pace() -> None:
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "slo": {"ttft_p95_s": 5.0}}],
            "engine": {"prefill_horizon_s": 0},
            "ladder": {"enabled": False},
        }
    )
    policy = Policy(config, counter=HeuristicCounter())
    assert policy.decode_pace is None
    policy.submit(Request(id="d", tenant="t", prompt_tokens=10), now=0.0)
    policy.dispatch(now=0.0)
    policy.first_token("d", now=0.0)
    policy.tokens("d", 10, now=100.0)  # 10 s a token
    policy.submit(Request(id="q", tenant="t", prompt_tokens=10), now=100.0)
    assert [s.id for s in policy.dispatch(now=100.0).started] == ["q"]
