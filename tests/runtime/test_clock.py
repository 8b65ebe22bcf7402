"""The gate's bound clock is the running loop's clock, as anyio reads it."""

from __future__ import annotations

import anyio
import pytest

from slopolicy.runtime.clock import bind_clock


@pytest.mark.anyio
async def test_the_bound_clock_reads_what_anyio_reads() -> None:
    clock = bind_clock()
    assert clock is not anyio.current_time  # bound to the loop, no lookup per call
    before = anyio.current_time()
    await anyio.sleep(0.5)  # virtual time in these tests
    assert clock() == pytest.approx(anyio.current_time())
    assert clock() - before == pytest.approx(0.5)


def test_outside_any_loop_it_falls_back_to_anyio() -> None:
    assert bind_clock() is anyio.current_time
