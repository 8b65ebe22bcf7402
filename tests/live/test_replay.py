"""``slopolicy replay`` and ``slopolicy calibrate`` against the real llama-server
(short runs): prompts land on their recorded lengths as the server counts
them, outputs run to their recorded length, a stop mid-replay frees every
slot, and calibration reads the server's shape and fits its probes."""

from __future__ import annotations

import anyio
import pytest

from slopolicy.adapters.llamacpp import LlamaCppScraper
from slopolicy.replay import LiveReplay, Target, live_comparison, replay_lanes
from slopolicy.replay.calibrate import calibrate
from slopolicy.replay.fit import Decode
from slopolicy.sim.comparison import OURS
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import profile
from slopolicy.sim.records import SimOutcome
from slopolicy.sim.scenario import Scenario
from slopolicy.sim.workload import SimRequest, Workload
from slopolicy.testing.llama.server import LlamaServer
from tests.live.conftest import CONTEXT, SLOTS, config, poll

pytestmark = pytest.mark.anyio


def scenario(count: int, output: int, spacing: float) -> Scenario:
    requests = [
        SimRequest(f"r{i}", spacing * i, f"t{i % 2}", 40 + 37 * i, output, output)
        for i in range(count)
    ]
    workload = Workload.of(requests, name="live")
    return Scenario("live", workload, EngineSpec(profile("llama3-8b/h100")), config())


async def test_replay_sends_the_recorded_lengths_and_reports_every_request(
    server: LlamaServer,
) -> None:
    async with Target(server.url) as target:
        live = LiveReplay(target, scenario(8, 6, 0.05))
        plan = await live.prepare()
        runs = await replay_lanes(live, plan, ("fcfs", OURS), stop=anyio.Event())
    assert live.known.kind == "llama.cpp"
    assert (live.known.slots, live.known.slot_context) == (SLOTS, CONTEXT // SLOTS)
    fit = live.fit(runs)
    assert (fit.counted, fit.exact) == (16, 16)  # every prompt exact, both lanes
    comparison = live_comparison(live, runs)
    for name, run in runs.items():
        assert not run.interrupted
        assert {r.outcome for r in run.records} == {SimOutcome.COMPLETED}, name
        assert all(r.output_tokens == 6 for r in run.records), name  # ignore_eos
        assert comparison.reports[name].completed == 8
        assert comparison.reports[name].lanes["interactive"].ttft_p50_s is not None


async def test_stopping_a_replay_frees_every_slot(server: LlamaServer) -> None:
    async with Target(server.url) as target, LlamaCppScraper(server.url) as scraper:
        live = LiveReplay(target, scenario(SLOTS, 600, 0.0))  # seconds of decoding each
        plan = await live.prepare()
        stop = anyio.Event()
        async with anyio.create_task_group() as group:

            async def stopper() -> None:
                await poll(scraper, lambda reading: reading.running == SLOTS)
                stop.set()

            group.start_soon(stopper)
            with anyio.fail_after(30):
                run = await live.run("fcfs", plan, stop=stop, tell=None)
        after = await poll(scraper, lambda reading: reading.running == 0)
    assert run.interrupted
    assert {r.outcome for r in run.records} == {SimOutcome.UNFINISHED}
    assert after.kv_tokens == 0


async def test_calibrate_reads_the_servers_shape_and_fits_its_probes(
    server: LlamaServer,
) -> None:
    async with Target(server.url) as target:
        found = await calibrate(
            target, prompts=(64, 512), batches=(1, 2), repeats=2, decode_tokens=8
        )
    assert found.engine.max_num_seqs == SLOTS
    assert found.engine.model_len == CONTEXT // SLOTS
    assert found.engine.profile.kv_tokens == CONTEXT
    # Two prefills, two batches, the long context, start; llama.cpp's scattered
    # slots, queued requests and a prompt beside decodes.
    kinds = [type(r.probe).__name__ for r in found.residuals]
    assert kinds == ["Prefill"] * 2 + ["Decode"] * 3 + ["Start", "Decode", "Decode", "Mixed"]
    scattered, queued = found.residuals[6].probe, found.residuals[7].probe
    assert isinstance(scattered, Decode)
    assert (scattered.batch, scattered.ubatches) == (2, 2)  # slots 0 and 2
    assert isinstance(queued, Decode)
    assert (queued.batch, queued.waiting) == (SLOTS, 16 * SLOTS)
    assert found.engine.kind == "llama.cpp"
    assert found.engine.profile.t_start > 0  # HTTP, tokenizing, the slot's start
    assert all(r.probe.seconds > 0 for r in found.residuals)
    assert len(found.rounds) == len(found.round_fits) == 2
    assert all(len(r) == len(found.residuals) for r in found.rounds)
    low, _, high = found.spread()["t_cpu"]
    assert low <= high
    assert "rounds" in found.describe()


async def test_a_replay_starts_from_a_fresh_servers_order_of_slots(server: LlamaServer) -> None:
    """llama-server gives a request its least recently released free slot;
    whatever the slots' history, after ``fresh_slot_order`` requests take
    them from the highest index down, as on a server just started (and in
    the simulator's engine model)."""
    async with Target(server.url) as target:
        facts = await target.facts()
        # A history: slots used low to high, so the server would pick 0 next.
        for slot in range(SLOTS):
            answer = await target.http.post(
                "/completion", json={"prompt": "of", "n_predict": 1, "id_slot": slot}
            )
            assert answer.json()["id_slot"] == slot
        await target.fresh_slot_order(facts)
        taken = []
        for first in ("and", "in", "was"):
            # Long and unlike any slot's prompt: a prompt sharing over a
            # tenth of a slot's cached tokens would be given that slot.
            prompt = " ".join([first] + ["to"] * 40)
            answer = await target.http.post("/completion", json={"prompt": prompt, "n_predict": 1})
            taken.append(answer.json()["id_slot"])
    assert taken == [SLOTS - 1, SLOTS - 2, SLOTS - 3]
