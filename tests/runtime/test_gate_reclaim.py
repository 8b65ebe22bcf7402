"""The gate under reclaim (``engine.reclaim``): a running request the policy
revokes for a tenant within its share raises :class:`~slopolicy.Revoked`
from its tracked stream at its next chunk, and the engine's stream is closed
(the engine aborts it), or at once from a ``revocable()`` block; the request
it was revoked for starts. On asyncio and trio, in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio
import pytest

from slopolicy import Gate, Outcome, Policy, Request, Revoked, Ticket
from slopolicy.core.decisions import Admit
from slopolicy.core.outcome import Finished
from slopolicy.runtime.http import error_status, outcome_status
from slopolicy.runtime.waiting import Waiter
from tests.core.pools import one_lane_policy

pytestmark = pytest.mark.anyio

#: The lane's TTFT target (seconds): the deadline a revocation keeps.
TTFT = 5.0
#: big's prompts, a start a second: four reserve 20 blocks, four 5 (the pool's 100).
BIG = [264] * 4 + [24] * 4

Call = Callable[[Request], Coroutine[Any, Any, None]]


async def _engine(name: str, closed: list[str], tokens: int = 40) -> AsyncIterator[str]:
    """An engine's stream: a token a second; ``closed`` hears when it stops."""
    try:
        for _ in range(tokens):
            await anyio.sleep(1.0)
            yield "token"
    finally:
        closed.append(name)


async def _fill_then_ask(big: Call, small: Call) -> None:
    """``big`` fills the pool with :data:`BIG`'s requests, a start a second;
    half a second after the last, ``small`` asks for 20 blocks."""
    async with anyio.create_task_group() as group:
        for k, prompt in enumerate(BIG):
            request = Request(id=f"big-{k}", tenant="big", prompt_tokens=prompt, max_new_tokens=56)
            group.start_soon(big, request)
            await anyio.sleep(1.0)
        await anyio.sleep(0.5)
        group.start_soon(
            small, Request(id="small-0", tenant="small", prompt_tokens=264, max_new_tokens=56)
        )


async def test_the_latest_over_share_stream_that_makes_room_is_revoked() -> None:
    policy = one_lane_policy(TTFT)
    closed: list[str] = []
    ended: dict[str, BaseException | None] = {}
    tickets: dict[str, Ticket] = {}
    small_started: list[float] = []

    async def big(request: Request) -> None:
        try:
            async with gate.admit(request) as ticket:
                tickets[request.id] = ticket
                async for _ in ticket.track(_engine(request.id, closed)):
                    pass
            ended[request.id] = None
        except Revoked as error:
            ended[request.id] = error

    async def small(request: Request) -> None:
        async with gate.admit(request) as ticket:
            small_started.append(anyio.current_time() - begin)
            async for _ in ticket.track(_engine(request.id, closed, tokens=3)):
                pass

    async with Gate(policy) as gate:
        begin = anyio.current_time()
        await _fill_then_ask(big, small)
    revoked = {name for name, error in ended.items() if error is not None}
    # The latest start that frees small's 20 blocks alone (not big's four
    # later starts of 5).
    assert revoked == {"big-3"}
    # small started at the first dispatch after the demand counted it (the
    # ladder's tick each second), in the room the revocation freed.
    assert len(small_started) == 1
    assert 8.5 < small_started[0] <= 10.0
    error = ended["big-3"]
    assert isinstance(error, Revoked)
    assert error.code == "revoked"
    assert error.http_status == error_status(error) == 503
    assert error.finished.outcome is Outcome.REVOKED
    assert outcome_status(error.finished) == 503
    assert tickets["big-3"].revoked is error
    assert tickets["big-3"].finished is error.finished
    # Every engine stream was closed: the revoked one at its next token.
    assert sorted(closed) == sorted([*ended, "small-0"])
    statistics = policy.statistics()
    assert statistics.outcomes[Outcome.REVOKED] == 1
    assert statistics.outcomes[Outcome.COMPLETED] == 8  # big's seven and small
    assert statistics.running == 0
    assert statistics.kv.used_blocks == 0


async def test_a_whole_call_in_a_revocable_block_is_cancelled_at_once() -> None:
    # A whole call reports no first token: no prefill budget holding the next
    # start until one was due (the lane's 5 s target from the first).
    policy = one_lane_policy(TTFT, prefill_horizon_s=0)
    ended: dict[str, float] = {}
    errors: dict[str, Revoked] = {}

    async def big(request: Request) -> None:
        try:
            async with gate.admit(request) as ticket:
                with ticket.revocable():
                    await anyio.sleep(40.0)  # the engine computing the whole answer
                ticket.finish(output_tokens=40)
        except Revoked as error:
            errors[request.id] = error
        ended[request.id] = anyio.current_time() - begin

    async def small(request: Request) -> None:
        async with gate.admit(request):
            ended[request.id] = anyio.current_time() - begin

    async with Gate(policy) as gate:
        begin = anyio.current_time()
        await _fill_then_ask(big, small)
    assert set(errors) == {"big-3"}
    # Cancelled at the revocation, when small started, not at the call's end.
    assert ended["big-3"] == ended["small-0"]
    assert ended["small-0"] < 10.0
    assert policy.statistics().outcomes[Outcome.COMPLETED] == 8  # big's seven and small


async def _small_after_big(policy: Policy, tokens: int = 40) -> tuple[list[float], list[str]]:
    """:func:`_fill_then_ask` through a gate in front of ``policy``, each of
    big's streams ``tokens`` long: when small started (seconds from the
    beginning) and which of big's requests were revoked."""
    closed: list[str] = []
    revoked: list[str] = []
    small_started: list[float] = []

    async def big(request: Request) -> None:
        try:
            async with gate.admit(request) as ticket:
                async for _ in ticket.track(_engine(request.id, closed, tokens)):
                    pass
        except Revoked:
            revoked.append(request.id)

    async def small(request: Request) -> None:
        async with gate.admit(request):
            small_started.append(anyio.current_time() - begin)

    async with Gate(policy) as gate:
        begin = anyio.current_time()
        await _fill_then_ask(big, small)
    return small_started, revoked


async def test_without_reclaim_the_within_share_request_waits_for_an_end() -> None:
    policy = one_lane_policy(reclaim=False)
    small_started, revoked = await _small_after_big(policy, tokens=30)
    # The first end that frees 20 blocks (big-0's, at 30 s) makes the room.
    assert small_started[0] >= 30.0
    assert revoked == []
    assert policy.statistics().outcomes[Outcome.REVOKED] == 0


async def test_with_no_ladder_ticking_the_gate_wakes_for_the_reclaim() -> None:
    # No tick each second: small's arrival at 8.5 s dispatches before the
    # demand estimate counts it, and the gate's timer wakes at the
    # estimate's next refresh (9 s), which revokes, rather than at small's
    # deadline (13.5 s), when it could only have expired.
    small_started, revoked = await _small_after_big(one_lane_policy(TTFT, ladder=False))
    assert revoked == ["big-3"]
    assert small_started == [pytest.approx(9.0)]


def test_a_waiter_revoked_before_it_resumed_raises_revoked() -> None:
    request = Request(id="r", tenant="big", prompt_tokens=24, max_new_tokens=56)
    decision = Admit(
        lane="chat", tier="default", request=request, prompt_tokens=24, cost=1.0, message="ok"
    )
    waiter = Waiter(request, decision)
    finished = Finished(
        id="r",
        tenant="big",
        lane="chat",
        outcome=Outcome.REVOKED,
        arrival=0.0,
        finished_at=2.0,
        queue_wait=1.0,
        ttft=None,
        tpot=None,
        prompt_tokens=24,
        output_tokens=0,
        cost=1.0,
    )
    waiter._revoke(finished)
    with pytest.raises(Revoked, match="over its share") as raised:
        waiter.ticket(None)  # type: ignore[arg-type]
    assert raised.value.finished is finished
    assert raised.value.decision is decision
