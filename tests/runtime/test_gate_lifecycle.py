"""The gate's lifetime, background work and hooks, on asyncio and trio."""

from __future__ import annotations

import logging

import anyio
import pytest

from slopolicy import (
    Expired,
    Gate,
    GateClosed,
    Hold,
    Reason,
    Rejected,
    Request,
    UsageError,
)
from slopolicy.core.health.signals import EngineSignals
from slopolicy.runtime import ArrivalRecord, Ticket
from tests.runtime.conftest import Dispatches, assert_clean, config, policy
from tests.runtime.conftest import make_request as _request

pytestmark = pytest.mark.anyio


async def test_closing_the_gate_refuses_its_waiters_and_later_admissions() -> None:
    p = policy()
    errors: list[BaseException] = []
    gate = Gate(p)
    with pytest.raises(UsageError, match="enter the gate"):
        await gate.admit(_request("early"))
    async with anyio.create_task_group() as group:
        async with gate:
            held = [await gate.admit(_request(f"h{k}")) for k in range(2)]

            async def wait(name: str) -> None:
                try:
                    await gate.admit(_request(name))
                except GateClosed as error:
                    errors.append(error)

            for k in range(3):
                group.start_soon(wait, f"w{k}")
            await anyio.sleep(0.1)
            assert gate.statistics().waiting == 3
        assert not gate.statistics().open
    assert len(errors) == 3
    assert all(isinstance(e, GateClosed) and e.http_status == 503 for e in errors)
    assert all(e.reason is Reason.GATE_CLOSED for e in errors if isinstance(e, Rejected))
    with pytest.raises(GateClosed):
        await gate.admit(_request("after"))
    with pytest.raises(UsageError, match="only once"):
        await gate.__aenter__()
    for ticket in held:  # tickets outlive the gate and still release
        ticket.finish()
    assert_clean(p)


async def test_the_gate_leaves_no_task_behind() -> None:
    before = len(anyio.get_running_tasks())

    async def signals() -> EngineSignals | None:
        return None

    async with Gate(policy(ladder={"enabled": True}), signals=signals) as gate:
        await anyio.sleep(5)
        assert len(anyio.get_running_tasks()) == before + 3  # timer, poll and telemetry
        assert gate.statistics().open
    assert len(anyio.get_running_tasks()) == before


async def test_the_ladder_is_evaluated_while_idle_without_busy_looping() -> None:
    p = policy(ladder={"enabled": True, "evaluate_every_s": 2.0})
    async with Gate(p) as gate:
        dispatches = Dispatches(gate)
        await anyio.sleep(20.5)
    assert 9 <= len(dispatches.calls) <= 11


async def test_signals_are_polled_and_a_failing_source_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []

    async def signals() -> EngineSignals | None:
        calls.append(anyio.current_time())
        if len(calls) == 2:
            raise OSError("metrics endpoint down")
        return EngineSignals(anyio.current_time(), kv_usage=0.5)

    p = policy()
    with caplog.at_level(logging.WARNING, logger="slopolicy.gate"):
        async with Gate(p, signals=signals, poll_every=0.5):
            await anyio.sleep(2.1)
    assert len(calls) == 5
    assert [r.message for r in caplog.records] == ["polling engine signals failed"]
    assert p.kv.statistics().engine_used_blocks == 200


async def test_a_source_returning_no_signals_is_logged_like_one_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    returned: list[object] = [{"kv_usage": 0.9}, "junk", 0.5]

    async def signals() -> EngineSignals | None:
        if returned:
            return returned.pop(0)  # type: ignore[return-value]
        return EngineSignals(anyio.current_time(), kv_usage=0.5)

    p = policy()
    with caplog.at_level(logging.WARNING, logger="slopolicy.gate"):
        async with Gate(p, signals=signals, poll_every=0.5) as gate:
            await anyio.sleep(2.1)
            assert gate.statistics().open  # the gate outlived the junk
            with await gate.admit(_request("after")):
                pass
    assert [r.message for r in caplog.records] == ["polling engine signals failed"] * 3
    assert "expected EngineSignals, got dict" in caplog.text
    assert p.kv.statistics().engine_used_blocks == 200  # the good polls still count
    assert_clean(p)


def test_the_policy_refuses_what_is_not_engine_signals_before_moving_time() -> None:
    p = policy()
    with pytest.raises(UsageError, match="expected EngineSignals, got dict"):
        p.observe({"kv_usage": 0.5}, now=100.0)  # type: ignore[arg-type]
    p.observe(EngineSignals(5.0, kv_usage=0.5), now=5.0)  # time did not jump to 100
    assert p.kv.statistics().last_observed_at == 5.0


async def test_on_end_sees_every_request_once() -> None:
    records: list[ArrivalRecord] = []
    p = policy()
    async with Gate(p, on_end=records.append) as gate:
        with await gate.admit(_request("a", prompt_tokens=40, max_new_tokens=500)) as ticket:
            ticket.tokens(7)
        with pytest.raises(Rejected):
            await gate.admit(Request(id="r", tenant="t", prompt="x " * 9000))
        with pytest.raises(Rejected):
            await gate.admit(_request("u", tier="nope"))
    assert [(r.id, r.outcome) for r in records] == [
        ("a", "completed"),
        ("r", "rejected"),
        ("u", "rejected"),
    ]
    assert records[0].max_new_tokens == 500
    assert records[0].output_tokens == 7
    assert records[0].lane == "interactive"
    assert records[0].prompt_tokens == 40
    assert records[1].prompt_tokens > 4000
    assert records[1].lane == "heavy"
    assert records[2].lane is None
    assert records[2].prompt_tokens == 50


def test_bad_settings_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        Gate(policy(), poll_every=0)
    with pytest.raises(UsageError):
        Gate(policy(), max_expired=0)
    gate = Gate(config(), signals=None)  # a config builds its own policy
    assert gate.policy.max_running == 2
    assert gate.policy.next_wakeup(now=0.0) is None  # no ladder, nothing queued: no timer


async def test_a_ticket_dropped_unreleased_is_reported() -> None:
    p = policy()
    async with Gate(p) as gate:
        ticket = await gate.admit(_request("dropped"))
        with pytest.warns(ResourceWarning, match="never released"):
            del ticket
    assert p.phase("dropped") == "running"  # lost: the warning is all that can be done


async def test_a_failing_on_end_hook_is_logged_and_waiters_still_wake(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def hook(record: ArrivalRecord) -> None:
        raise RuntimeError("hook bug")

    p = policy(lanes=[{"name": "only", "queue_capacity": 8, "max_queue_wait_s": 1.0}])
    expired: list[str] = []
    with caplog.at_level(logging.WARNING, logger="slopolicy.gate"):
        async with Gate(p, on_end=hook) as gate:
            held = [await gate.admit(_request(f"h{k}")) for k in range(2)]

            async def wait(name: str) -> None:
                with pytest.raises(Expired):
                    await gate.admit(_request(name))
                expired.append(name)

            async with anyio.create_task_group() as group:
                for k in range(3):
                    group.start_soon(wait, f"w{k}")
            for ticket in held:
                ticket.finish()
    assert sorted(expired) == ["w0", "w1", "w2"]
    assert len([r for r in caplog.records if "on_end raised" in r.message]) == 5
    assert_clean(p)


async def test_an_error_in_the_gates_block_propagates_as_raised() -> None:
    p = policy()
    held: list[Ticket] = []

    async def serve() -> None:
        async with Gate(p) as gate:
            held.append(await gate.admit(_request("a")))
            raise ValueError("host")

    with pytest.raises(ValueError, match="host"):
        await serve()
    held[0].finish()
    assert_clean(p)


async def test_cancelling_the_gates_block_stops_it_cleanly() -> None:
    p = policy()
    before = len(anyio.get_running_tasks())
    with anyio.move_on_after(1) as scope:
        async with Gate(p):
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert len(anyio.get_running_tasks()) == before


async def test_a_waiter_the_engines_smaller_pool_cannot_hold_ends_when_it_is_reported() -> None:
    p = policy()  # kv.num_blocks 400 (6,400 tokens): a cap
    ended: list[tuple[float, Expired]] = []

    async def second() -> None:
        try:
            await gate.admit(_request("b", lane="heavy", prompt_tokens=3000, max_new_tokens=256))
        except Expired as error:
            ended.append((anyio.current_time(), error))

    async with Gate(p) as gate:
        start = anyio.current_time()
        # 204 blocks each (prompt and ceiling): the second waits on the first's KV.
        with await gate.admit(_request("a", lane="heavy", prompt_tokens=3000, max_new_tokens=256)):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(second)
                await anyio.sleep(1.0)
                assert not ended  # waiting on KV, well within the lane's 30 s
                gate.observe(EngineSignals(anyio.current_time(), kv_capacity_tokens=3_200))
    assert len(ended) == 1
    at, error = ended[0]
    assert at == pytest.approx(start + 1.0)  # at the report, not at its deadline
    assert error.finished.held_by is Hold.KV
    assert p.kv.statistics().num_blocks == 200
    assert_clean(p)
