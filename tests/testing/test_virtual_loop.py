"""The virtual asyncio loop jumps over sleeps instead of waiting."""

from __future__ import annotations

import time

import anyio
import anyio.to_thread

from slopolicy.testing.virtual_loop import VirtualClock, virtual_event_loop


def test_sleeps_and_timeouts_take_no_wall_time() -> None:
    async def main() -> tuple[float, int]:
        start = anyio.current_time()
        await anyio.sleep(3600)
        with anyio.move_on_after(60):
            await anyio.sleep_forever()
        result = await anyio.to_thread.run_sync(lambda: 7)
        return anyio.current_time() - start, result

    wall = time.perf_counter()
    elapsed, result = anyio.run(
        main, backend="asyncio", backend_options={"loop_factory": virtual_event_loop}
    )
    assert elapsed == 3660
    assert result == 7
    assert time.perf_counter() - wall < 5


def test_the_clock_only_moves_forward() -> None:
    clock = VirtualClock(10.0)
    clock.jump(-5)
    clock.jump(0)
    assert clock.now == 10.0
    clock.jump(2.5)
    assert clock.now == 12.5
    loop = virtual_event_loop(start=100.0)
    try:
        assert loop.time() == 100.0
    finally:
        loop.close()
