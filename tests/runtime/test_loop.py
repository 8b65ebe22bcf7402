"""What the gate binds from its loop: the clock anyio reads, the loop's own
checkpoint, a parking spot safe to set twice or late, and a way back into the
loop for finalizers."""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from slopolicy.runtime.loop import Spawn, bind_checkpoint, bind_clock, bind_parking, bind_spawn


@pytest.mark.anyio
async def test_the_bound_clock_reads_what_anyio_reads() -> None:
    clock = bind_clock()
    assert clock is not anyio.current_time  # bound to the loop, no lookup per call
    before = anyio.current_time()
    await anyio.sleep(0.5)  # virtual time in these tests
    assert clock() == pytest.approx(anyio.current_time())
    assert clock() - before == pytest.approx(0.5)


@pytest.mark.anyio
async def test_the_bound_checkpoint_is_a_cancel_point_and_a_schedule_point() -> None:
    checkpoint = bind_checkpoint()
    assert checkpoint is not anyio.lowlevel.checkpoint
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with anyio.create_task_group() as group:
        group.start_soon(other)
        for _ in range(3):  # trio may run a batch's tasks in either order
            await checkpoint()  # lets the other task run
        ran.append("after")
    assert ran == ["other", "after"]
    with anyio.CancelScope() as scope:
        scope.cancel()
        await checkpoint()
        pytest.fail("a cancelled checkpoint must raise")  # pragma: no cover
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_a_parked_caller_wakes_when_set() -> None:
    parked = bind_parking()()
    woke: list[float] = []

    async def wait() -> None:
        await parked.wait()
        woke.append(anyio.current_time())

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        await anyio.sleep(1)
        assert woke == []
        start = anyio.current_time()
        parked.set()
        parked.set()  # idempotent
    assert woke == [start]


@pytest.mark.anyio
async def test_setting_a_spot_whose_waiter_was_cancelled_is_harmless() -> None:
    parked = bind_parking()()
    with anyio.move_on_after(1) as scope:
        await parked.wait()
    assert scope.cancelled_caught
    parked.set()  # the gate may wake a waiter whose cancel it has not seen yet


@pytest.mark.anyio
async def test_each_backend_gets_its_own_parking(anyio_backend_name: str) -> None:
    parked = bind_parking()()
    if anyio_backend_name == "asyncio":
        assert isinstance(parked, asyncio.Future)
    else:
        import trio

        assert isinstance(parked, trio.Event)


def test_outside_any_loop_anyio_is_used() -> None:
    assert bind_clock() is anyio.current_time
    assert bind_checkpoint() is anyio.lowlevel.checkpoint
    assert bind_parking() is anyio.Event
    assert bind_spawn() is None  # no loop to come back to


@pytest.mark.anyio
async def test_a_spawned_task_runs_on_the_loop_from_any_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spawn = bind_spawn()
    assert spawn is not None
    loop_thread = threading.get_ident()
    ran = anyio.Event()
    where: list[int] = []

    async def task() -> None:
        await anyio.lowlevel.checkpoint()
        where.append(threading.get_ident())
        ran.set()

    async def fails() -> None:
        raise RuntimeError("boom")  # on trio, a system task raising would end the run

    assert await anyio.to_thread.run_sync(spawn, fails)
    assert await anyio.to_thread.run_sync(spawn, task)
    with anyio.fail_after(5):
        await ran.wait()
    assert where == [loop_thread]
    assert "clean-up task failed" in caplog.text
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_spawning_into_a_loop_that_ended_starts_nothing(backend: str) -> None:
    async def bind() -> Spawn | None:
        return bind_spawn()

    spawn = anyio.run(bind, backend=backend)
    assert spawn is not None

    async def task() -> None:
        raise AssertionError("never runs")  # pragma: no cover

    assert spawn(task) is False
