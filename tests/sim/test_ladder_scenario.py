"""Issue 4's scenario: a stream of 40k-token prompts lands on a busy system.

The ladder must climb in the seed's order, pause batch before any chat request
misses its TTFT target by 2x (or keep chat within it without pausing), and
step back down once the load ends.
"""

from __future__ import annotations

import functools
import itertools
import math

import pytest

from slopolicy.sim import builtin_scenario, evaluate
from slopolicy.sim.ours import LadderMove, PolicyScheduler
from slopolicy.sim.records import RequestRecord
from slopolicy.sim.scenario import Scenario

# The default ladder's rungs in order (``cap_max_new_tokens`` is opt-in: it
# truncates answers).
_RUNGS = [
    "favor_interactive",
    "drop_optional_features",
    "compress_prompt",
    "cheaper_model",
    "pause_background",
    "shed",
]


Run = tuple[Scenario, list[LadderMove], tuple[RequestRecord, ...]]


@functools.cache
def _run(rate: float) -> Run:
    """The scenario with its arrivals ``rate`` times as fast."""
    scenario = builtin_scenario("long-prompts")
    scheduler = PolicyScheduler(
        scenario.policy, signals=scenario.signals, engine_priority=scenario.engine_priority
    )
    result, _ = evaluate(
        scheduler,
        scenario.workload.scaled(rate),
        scenario.engine,
        scenario.policy,
        client=scenario.client,
        drain=scenario.drain_s,
    )
    return scenario, scheduler.moves, result.records


@pytest.fixture(scope="module", params=[1.0, 1.1], ids=["as-written", "a-tenth-faster"])
def run(request: pytest.FixtureRequest) -> Run:
    rate: float = request.param
    return _run(rate)


def test_the_ladder_climbs_in_the_seeds_order() -> None:
    # A tenth faster than written: as written, since chat turns that land in
    # a long prefill leave from the first start in one, the load only takes
    # the ladder to its first rung.
    _, moves, _ = _run(1.1)
    # One rung at a time, in order, as far as the pressure takes it.
    climb = list(itertools.takewhile(lambda move: move.level > 0, moves))
    top = max(move.level for move in climb)
    first = climb[:top]
    assert top >= 3
    assert [move.level for move in first] == list(range(1, top + 1))
    assert [move.rung for move in first] == _RUNGS[:top]
    # at most one rung per dwell period (2 s)
    assert all(b.at - a.at >= 2.0 for a, b in itertools.pairwise(moves))


def test_batch_pauses_before_chat_misses_twice_its_target(run: Run) -> None:
    scenario, moves, records = run
    target = scenario.policy.lanes[0].slo.ttft_p95_s
    assert target == 0.5
    paused = min((move.at for move in moves if move.state == "batch_paused"), default=math.inf)
    misses = [
        record.first_token_at
        for record in records
        if record.lane == "interactive"
        and record.first_token_at is not None
        and record.first_token_at - record.request.arrival > 2 * target
    ]
    assert all(paused < at for at in misses), (paused, min(misses))
    # Paused or not, chat keeps its target over the run (p95 of first tokens).
    ttfts = sorted(
        record.first_token_at - record.request.arrival
        for record in records
        if record.lane == "interactive" and record.first_token_at is not None
    )
    assert ttfts[int(0.95 * len(ttfts))] <= target


def test_the_ladder_comes_back_down_after_the_load(run: Run) -> None:
    _, moves, records = run
    documents_done = max(record.finished_at or 0.0 for record in records if record.lane == "heavy")
    after = [move for move in moves if move.at > documents_done]
    assert after, "no move once the documents were through"
    assert after[-1].level == 0
    assert after[-1].state == "normal"
    assert [move.level for move in after] == sorted((m.level for m in after), reverse=True)
