"""Idle time costs nothing: the simulator skips it, and skipping it changes
nothing the run reports."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pytest

from slopolicy import PolicyConfig
from slopolicy.config.ladder import Threshold
from slopolicy.sim import (
    EngineView,
    PolicyScheduler,
    Released,
    SimOutcome,
    SimRequest,
    SimulationResult,
    Workload,
    seed_scenario,
    simulate,
)
from slopolicy.sim.ours import DEFAULT_SIGNALS, SIGNALS

DAY = 86_400.0
_SHORT = seed_scenario(short=True)
# The seed with the ladder's TTFT trigger on (off by default), so its overload
# moves the ladder and the test sees ladder moves before and after the gap.
SEED = dataclasses.replace(
    _SHORT,
    policy=_SHORT.policy.model_copy(
        update={
            "ladder": _SHORT.policy.ladder.model_copy(
                update={"ttft_p95_fraction": Threshold(enter=0.8, exit=0.6)}
            )
        }
    ),
)


class Counted(PolicyScheduler):
    """Ours, counting its dispatches, and failing past ``limit`` rather than
    running for hours."""

    def __init__(
        self, config: PolicyConfig, *, limit: int, signals: Collection[str], skip: bool = True
    ) -> None:
        super().__init__(config, signals=signals)
        self.dispatches = 0
        self.limit = limit
        self.skip = skip

    def dispatch(self, now: float, engine: EngineView) -> Released:
        self.dispatches += 1
        assert self.dispatches <= self.limit, f"{self.dispatches} dispatches by {now:.0f} s"
        return super().dispatch(now, engine)

    def _settled(self, now: float) -> bool:
        return super()._settled(now) if self.skip else False


def _with_late_request(workload: Workload, gap: float) -> Workload:
    last = workload.requests[-1].arrival
    late = SimRequest(
        id="late",
        arrival=last + gap,
        tenant="late",
        prompt_tokens=200,
        output_tokens=40,
        max_new_tokens=64,
        stream="late",
    )
    return Workload((*workload.requests, late), 0.0, workload.name, workload.bursts)


def _run(
    workload: Workload, *, limit: int, signals: Collection[str] = DEFAULT_SIGNALS, skip: bool = True
) -> tuple[SimulationResult, Counted]:
    scheduler = Counted(SEED.policy, limit=limit, signals=signals, skip=skip)
    return simulate(workload, scheduler, SEED.engine), scheduler


def test_a_month_long_gap_costs_a_bounded_number_of_steps() -> None:
    before, counted = _run(SEED.workload, limit=10**6)
    assert counted.moves, "the seed's overload moves the ladder"
    after, late = _run(_with_late_request(SEED.workload, 30 * DAY), limit=counted.dispatches + 2000)
    assert after.records[:-1] == before.records  # the same run up to the gap
    assert late.moves[: len(counted.moves)] == counted.moves
    record = after.records[-1]
    assert (record.request.id, record.outcome) == ("late", SimOutcome.COMPLETED)
    assert record.ttft is not None
    assert record.ttft < 1.0
    assert after.end > 30 * DAY


@pytest.mark.parametrize("signals", [DEFAULT_SIGNALS, SIGNALS])
def test_skipping_idle_time_reports_what_ticking_through_it_does(
    signals: Collection[str],
) -> None:
    workload = _with_late_request(SEED.workload, 6 * 3600.0)
    skipped, asleep = _run(workload, limit=10**6, signals=signals)
    ticked, awake = _run(workload, limit=10**6, signals=signals, skip=False)
    if "decode_tps" in signals:  # its baseline moves while idle: ticked through
        assert asleep.dispatches == awake.dispatches
    else:
        assert asleep.dispatches < awake.dispatches - 10_000  # it slept through hours
    assert skipped.records == ticked.records
    assert asleep.moves == awake.moves
