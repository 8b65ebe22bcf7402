"""Parking binds the running loop's own one-shot wake-up, safe to set twice or late."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from slopolicy.runtime.parking import bind_parking

pytestmark = pytest.mark.anyio


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


async def test_setting_a_spot_whose_waiter_was_cancelled_is_harmless() -> None:
    parked = bind_parking()()
    with anyio.move_on_after(1) as scope:
        await parked.wait()
    assert scope.cancelled_caught
    parked.set()  # the gate may wake a waiter whose cancel it has not seen yet


async def test_each_backend_gets_its_own_primitive(anyio_backend_name: str) -> None:
    parked = bind_parking()()
    if anyio_backend_name == "asyncio":
        assert isinstance(parked, asyncio.Future)
    else:
        import trio

        assert isinstance(parked, trio.Event)


def test_outside_any_loop_it_falls_back_to_anyio() -> None:
    assert bind_parking() is anyio.Event
