"""The gate's admission, fair waiting, expiry and cancellation, on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import (
    Expired,
    Gate,
    Outcome,
    Reason,
    Rejected,
    Request,
    UsageError,
    WouldBlock,
)
from slopolicy.runtime import ArrivalRecord, Ticket
from tests.runtime.conftest import Dispatches, assert_clean, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


async def test_an_uncontended_request_starts_at_once_and_releases_on_exit() -> None:
    p = policy()
    async with Gate(p) as gate:
        start = anyio.current_time()
        async with gate.admit(_request("a", max_new_tokens=500)) as ticket:
            assert anyio.current_time() == start
            assert ticket.id == "a"
            assert ticket.tenant == "t"
            assert ticket.lane == "interactive"
            assert ticket.request.max_new_tokens == 64  # the lane's cap: what to run
            assert ticket.queue_wait == 0
            assert ticket.rungs == ()
            assert p.phase("a") == "running"
            assert not ticket.released
            ticket.tokens(3)
        assert ticket.finished is not None
        assert ticket.finished.outcome is Outcome.COMPLETED
        assert ticket.finished.output_tokens == 3
        assert "live" not in repr(ticket)
        assert "completed" in repr(ticket)
    assert_clean(p)


async def test_waiters_start_in_the_policys_order_when_capacity_frees() -> None:
    p = policy()
    order: list[str] = []
    async with Gate(p) as gate:
        held = [await gate.admit(_request(f"h{k}", "holder")) for k in range(2)]
        dispatches = Dispatches(gate)

        async def wait(name: str, tenant: str) -> None:
            async with gate.admit(_request(name, tenant)):
                order.append(name)
                # Distinct release times: one start per dispatch, so the resume
                # order is the grant order on trio too (it shuffles a batch).
                await anyio.sleep(0.25 + 0.01 * len(order))

        async with anyio.create_task_group() as group:
            # Tenant a queues three before b queues one: fair order interleaves them.
            for name, tenant in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")]:
                group.start_soon(wait, name, tenant)
                await anyio.sleep(0.001)
            await anyio.sleep(4)  # nothing moves while the engine is full...
            assert gate.statistics().waiting == 4
            assert order == []
            assert not dispatches.calls  # ...and nobody polls
            for ticket in held:
                with ticket:
                    await anyio.sleep(0.001)
        started = [s.id for call in dispatches.calls for s in call.started]
    assert order[:2] == started[:2] == ["a1", "b1"]
    assert order == started
    assert_clean(p)


async def test_a_refusal_raises_rejected_with_the_decisions_fields() -> None:
    p = policy()
    async with Gate(p) as gate:
        async with gate.admit(_request("s1", "small", prompt_tokens=10, max_new_tokens=10)):
            with pytest.raises(Rejected) as caught:
                await gate.admit(_request("s2", "small", prompt_tokens=10, max_new_tokens=10))
        error = caught.value
        assert error.reason is Reason.CONCURRENCY_LIMITED
        assert error.code == "concurrency_limited"
        assert error.http_status == 429
        assert error.decision is not None
        assert error.decision.reason is error.reason
        assert "small" in error.message
        assert "Rejected('concurrency_limited'" in repr(error)
        with pytest.raises(Rejected) as caught:
            await gate.admit(_request("big", prompt_tokens=10_000))
        assert (caught.value.reason, caught.value.http_status) == (Reason.PROMPT_TOO_LONG, 413)
        assert caught.value.retry_after is None
    assert_clean(p)


async def test_a_rate_limited_request_carries_its_retry_after() -> None:
    p = policy()
    async with Gate(p) as gate:
        for k in range(10):  # 30 cost units each, a burst of 300
            request = _request(f"s{k}", "small", prompt_tokens=10, max_new_tokens=10)
            with await gate.admit(request) as ticket:
                ticket.tokens(10)
        with pytest.raises(Rejected) as caught:
            await gate.admit(_request("s10", "small", prompt_tokens=10, max_new_tokens=10))
    assert caught.value.reason is Reason.RATE_LIMITED
    assert caught.value.retry_after == pytest.approx(3.0)
    assert_clean(p)


async def test_a_full_queue_is_refused_with_503() -> None:
    p = policy()
    async with Gate(p) as gate, anyio.create_task_group() as group:
        held = [await gate.admit(_request(f"h{k}")) for k in range(2)]
        for k in range(8):
            group.start_soon(_hold, gate, _request(f"w{k}"))
        await anyio.sleep(0.1)
        with pytest.raises(Rejected) as caught:
            await gate.admit(_request("over"))
        assert (caught.value.reason, caught.value.http_status) == (Reason.QUEUE_FULL, 503)
        for ticket in held:
            ticket.finish()
    assert_clean(p)


async def test_a_full_queue_pushes_out_the_floods_newest_waiter_as_rejected() -> None:
    """DESIGN.md 9: another tenant's arrival takes the flood's newest place;
    that waiter is woken at once with queue_full, and nothing of it is held."""
    p = policy()
    outcomes: dict[str, str] = {}
    messages: list[str] = []
    records: list[ArrivalRecord] = []

    async def wait(name: str, tenant: str) -> None:
        try:
            async with gate.admit(_request(name, tenant)):
                outcomes[name] = "started"
        except Rejected as error:
            outcomes[name] = f"{error.code} {error.http_status} {error.retry_after}"
            messages.append(error.message)

    async with Gate(p, on_end=records.append) as gate:
        held = [await gate.admit(_request(f"h{k}", "holder")) for k in range(2)]
        async with anyio.create_task_group() as group:
            for k in range(8):  # the flood fills the queue, in order (trio shuffles a batch)
                group.start_soon(wait, f"f{k}", "flood")
                await anyio.wait_all_tasks_blocked()
            start = anyio.current_time()
            group.start_soon(wait, "b", "other")
            await anyio.wait_all_tasks_blocked()
            # At once: the queue's deadline (5 s) is not what woke it.
            assert anyio.current_time() - start < 1.0
            assert outcomes == {"f7": "queue_full 503 5.0"}  # Retry-After: the lane's wait
            assert "pushed out" in messages[0]
            assert gate.statistics().waiting == 8
            assert p.statistics().queued["interactive"] == 8
            for ticket in held:
                ticket.finish()
    assert outcomes == {
        **{f"f{k}": "started" for k in range(7)},
        "f7": "queue_full 503 5.0",
        "b": "started",
    }
    assert [r.outcome for r in records if r.id == "f7"] == ["rejected"]
    assert_clean(p)


async def _hold(gate: Gate, request: Request, seconds: float = 0.5) -> None:
    async with gate.admit(request):
        await anyio.sleep(seconds)


async def test_a_waiter_past_its_deadline_gets_expired_at_that_moment() -> None:
    p = policy()
    async with Gate(p) as gate:
        held = [await gate.admit(_request(f"h{k}")) for k in range(2)]
        start = anyio.current_time()
        with pytest.raises(Expired) as caught:
            await gate.admit(_request("late"))  # the lane's 5 s wait passes
        assert anyio.current_time() - start == pytest.approx(5.0)
        # A request's own deadline, earlier than the lane's, moves the timer up.
        start = anyio.current_time()
        with pytest.raises(Expired):
            await gate.admit(_request("soon", deadline=start + 0.25))
        assert anyio.current_time() - start == pytest.approx(0.25)
        for ticket in held:
            ticket.finish()
    error = caught.value
    assert isinstance(error, Rejected)
    assert error.reason is Reason.EXPIRED
    assert error.http_status == 503
    assert error.retry_after is None
    assert error.finished.outcome is Outcome.EXPIRED
    assert error.finished.e2e == pytest.approx(5.0)
    assert error.decision is not None
    assert error.decision.accepted
    assert p.statistics().outcomes[Outcome.EXPIRED] == 2
    assert_clean(p)


async def test_expiry_is_done_in_bounded_batches() -> None:
    p = policy(
        lanes=[{"name": "only", "queue_capacity": 1000, "max_queue_wait_s": 1.0}],
        tiers={"default": {"max_concurrency": 2000}},
        tenants={},
    )
    expired: list[str] = []
    async with Gate(p, max_expired=64) as gate:
        dispatches = Dispatches(gate)
        held = [await gate.admit(_request(f"h{k}")) for k in range(2)]

        async def wait(name: str) -> None:
            with pytest.raises(Expired):
                await gate.admit(_request(name))
            expired.append(name)

        async with anyio.create_task_group() as group:
            for k in range(1000):
                group.start_soon(wait, f"w{k}")
        for ticket in held:
            ticket.finish()
    assert len(expired) == 1000
    sizes = [len(call.expired) for call in dispatches.calls]
    assert max(sizes) == 64
    assert sum(sizes) == 1000
    assert_clean(p)


async def test_cancelling_a_waiter_withdraws_it() -> None:
    p = policy()
    async with Gate(p) as gate:
        held = [await gate.admit(_request(f"h{k}")) for k in range(2)]
        with anyio.move_on_after(1):
            await gate.admit(_request("gone"))
        assert p.phase("gone") is None
        assert gate.statistics().waiting == 0
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
        for ticket in held:
            ticket.finish()
    assert_clean(p)


async def test_a_waiter_cancelled_right_after_its_grant_gives_the_slot_on() -> None:
    p = policy(engine={"max_running": 1})
    got: list[str] = []
    async with Gate(p) as gate:
        holder = await gate.admit(_request("holder"))

        async def wait(name: str, scope: anyio.CancelScope | None = None) -> None:
            with scope or anyio.CancelScope():
                async with gate.admit(_request(name)):
                    got.append(name)
                    await anyio.sleep(1)

        async with anyio.create_task_group() as group:
            scope = anyio.CancelScope()
            group.start_soon(wait, "victim", scope)
            await anyio.sleep(0.1)
            group.start_soon(wait, "next")
            await anyio.sleep(0.1)
            holder.finish()  # grants the victim...
            scope.cancel()  # ...which is cancelled before it runs
    assert got in (["next"], ["victim", "next"])  # trio may let the victim resume first
    assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert_clean(p)


async def test_a_request_is_submitted_before_its_caller_first_yields() -> None:
    # A burst of callers arrives at the policy in the order and at the time
    # they call admit, not one event-loop pass later.
    p = policy()
    submitted: list[int] = []
    async with Gate(p) as gate:

        async def call(name: str) -> None:
            submitted.append(p.statistics().submitted)
            async with gate.admit(_request(name)):
                await anyio.sleep(1)

        async with anyio.create_task_group() as group:
            for name in ("a", "b", "c"):
                group.start_soon(call, name)
    # Each caller saw every earlier caller's request already submitted.
    assert submitted == [0, 1, 2]
    assert_clean(p)


async def test_a_start_cancelled_at_the_checkpoint_after_admit_is_given_back() -> None:
    p = policy(engine={"max_running": 1})
    async with Gate(p) as gate:
        with anyio.CancelScope() as scope:
            scope.cancel()  # already cancelled: the submit starts it, the checkpoint ends it
            async with gate.admit(_request("gone")):
                pytest.fail("a cancelled caller must not run")  # pragma: no cover
        assert p.statistics().outcomes[Outcome.CANCELLED] == 1
        assert p.running == 0
        async with gate.admit(_request("next")) as ticket:  # the slot came back
            assert ticket.id == "next"
    assert_clean(p)


async def test_a_refusal_to_a_cancelled_caller_is_still_raised_as_a_refusal() -> None:
    p = policy()
    async with Gate(p) as gate:
        with anyio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(Rejected):  # recorded as rejected: the caller hears so
                await gate.admit(_request("r", lane="nope"))
    assert p.statistics().outcomes[Outcome.REJECTED] == 1
    assert_clean(p)


async def test_admit_nowait_starts_or_leaves_nothing_behind() -> None:
    p = policy()
    async with Gate(p) as gate:
        first = gate.admit_nowait(_request("a"))
        with gate.admit_nowait(_request("b")):
            with pytest.raises(WouldBlock) as caught:
                gate.admit_nowait(_request("c"))
            assert caught.value.decision.request.id == "c"
            assert p.phase("c") is None
            assert gate.statistics().waiting == 0
            with pytest.raises(Rejected):
                gate.admit_nowait(_request("huge", prompt_tokens=10_000))
        first.finish(output_tokens=5)
    assert p.statistics().outcomes[Outcome.CANCELLED] == 1
    assert_clean(p)


async def test_a_ticket_from_await_must_be_released_and_only_once() -> None:
    p = policy()
    async with Gate(p) as gate:
        ticket = await gate.admit(_request("a"))
        assert isinstance(ticket, Ticket)
        done = ticket.finish("failed", output_tokens=2)
        assert done.outcome is Outcome.FAILED
        assert done.output_tokens == 2
        with pytest.raises(UsageError, match="already released"):
            ticket.finish()
        assert ticket.cancel() is None
        ticket.tokens(1)  # ignored once released
        ticket.mark("prefill")
        second = await gate.admit(_request("b"))
        with pytest.raises(UsageError):
            second.finish("expired")
        with pytest.raises(UsageError):
            second.finish(output_tokens=-1)
        assert p.phase("b") == "running"  # the bad calls released nothing
        second.finish()
    assert_clean(p)


async def test_a_deadline_already_past_expires_at_submit() -> None:
    p = policy()
    records: list[ArrivalRecord] = []
    async with Gate(p, on_end=records.append) as gate:
        with pytest.raises(Expired):
            await gate.admit(_request("late", deadline=anyio.current_time() - 1))
        with pytest.raises(Expired):
            gate.admit_nowait(_request("later", deadline=anyio.current_time() - 1))
        assert gate.statistics().waiting == 0
    assert [(r.id, r.outcome) for r in records] == [("late", "expired"), ("later", "expired")]
    assert_clean(p)
