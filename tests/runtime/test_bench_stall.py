"""``benchmarks/bench_stall.py`` keeps running: every case, on tiny inputs, on
both backends (virtual time; no timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks.bench_stall import cases, measure, table
from slopolicy.core.cost.tokens import HeuristicCounter

pytestmark = pytest.mark.anyio


async def test_the_stall_benchmark_measures_every_case() -> None:
    selected = cases(chars=2_000)
    results = await measure(selected, repeats=2, counter=HeuristicCounter())
    outcomes = {name: {stall.outcome for stall in runs} for name, runs in results.items()}
    # Refused for its size, or turned away when the request is built.
    (huge,) = outcomes.pop("huge numeric fields")
    assert huge == "refused:prompt_too_long" or huge.startswith("invalid:")
    assert outcomes == {
        "no request (ticker jitter)": {"-"},
        "0.002 MB prompt": {"admitted"},
        "200-emoji prompt": {"admitted"},
        "0.002 MB role": {"admitted"},
        "0.002 MB name": {"admitted"},
        "20 tiny messages": {"admitted"},
    }
    gaps = [
        gap for runs in results.values() for stall in runs for gap in (stall.build, stall.admit)
    ]
    assert all(gap.wall >= 0 and gap.cpu >= 0 for gap in gaps)
    lines = table({"backend": results}, 2)
    assert len(lines) == 2 + len(selected)
