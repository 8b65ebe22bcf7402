"""``slopolicy replay`` against a local vLLM-like engine (real HTTP on 127.0.0.1,
real time, short runs): the report in simulate's schema, prompts made to
their recorded lengths, the concurrency cap, and a clean stop mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from slopolicy import PolicyConfig
from slopolicy.cli import main
from slopolicy.errors import UsageError
from slopolicy.replay import LiveReplay, Plan, Target, live_comparison
from slopolicy.replay.target import EngineFacts
from slopolicy.sim.export import SCHEMA
from slopolicy.sim.records import SimOutcome
from slopolicy.sim.scenario import Scenario
from slopolicy.sim.workload import SimRequest, Workload
from tests.adapters.servers import Recorder, Script, ServerThread
from tests.replay.engine import ReplayApp

pytest.importorskip("openai")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real time on both backends: the engine is a real socket."""
    return str(request.param)


@pytest.fixture
def engine() -> Iterator[tuple[ReplayApp, Recorder, str]]:
    """A fresh engine per test (its stream counts start at 0)."""
    recorder = Recorder()
    recorder.script("default", Script(tokens=10_000, ttft=0.01, tpot=0.002))
    app = ReplayApp(recorder)
    server = ServerThread(app).start()
    yield app, recorder, server.url
    server.stop()


def trace(path: Path, count: int, spacing: float) -> Path:
    rows = [f"{i * spacing:.3f},{20 + 7 * i},{3 + i % 5},t{i % 3}" for i in range(count)]
    path.write_text("arrival,prompt_tokens,output_tokens,tenant\n" + "\n".join(rows) + "\n")
    return path


def test_replay_reports_in_simulates_schema(
    engine: tuple[ReplayApp, Recorder, str], tmp_path: Path
) -> None:
    _, recorder, url = engine
    out = tmp_path / "live.json"
    args = ["replay", "--target", url, "--trace", str(trace(tmp_path / "t.csv", 12, 0.02))]
    assert main([*args, "--json", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA
    assert set(data["policies"]) == {"fcfs", "slopolicy"}
    for name in ("fcfs", "slopolicy"):
        assert data["policies"][name]["completed"] == 12, name
    live = data["live"]
    assert live["prompt_fit"] == {"counted": 24, "exact": 24, "mean_error": 0.0,
                                  "max_error_tokens": 0}  # fmt: skip
    assert not any(lane["interrupted"] for lane in live["lanes"].values())
    for lane in live["lanes"].values():  # what the replayer itself cost
        client = lane["client"]
        assert client["cpu_s"] > 0
        assert 0 <= client["lag_p50_s"] <= client["lag_p95_s"] <= client["lag_max_s"] < 5
    # Outputs forced to their recorded length (ignore_eos, max_tokens).
    sent = [hit.body for hit in recorder.hits["default"] if hit.path == "/v1/completions"]
    streamed = [body for body in sent if body.get("stream")]
    assert sorted(b["max_tokens"] for b in streamed) == sorted(2 * [3 + i % 5 for i in range(12)])
    assert all(b["ignore_eos"] is True for b in streamed)


def test_max_concurrency_bounds_the_engines_streams(
    engine: tuple[ReplayApp, Recorder, str], tmp_path: Path
) -> None:
    app, recorder, url = engine
    recorder.script("default", Script(tokens=10_000, ttft=0.02, tpot=0.01))
    args = ["replay", "--target", url, "--trace", str(trace(tmp_path / "t.csv", 10, 0.0))]
    assert main([*args, "--lanes", "fcfs", "--max-concurrency", "2", "--no-progress"]) == 0
    assert app.peak == 2  # 10 arrivals at once, never more than 2 streams


def scenario(count: int) -> Scenario:
    requests = [SimRequest(f"r{i}", 0.01 * i, "t", 30, 200, 200) for i in range(count)]
    workload = Workload.of(requests, name="slow")
    from slopolicy.sim.engine_spec import EngineSpec
    from slopolicy.sim.profiles import profile

    return Scenario("slow", workload, EngineSpec(profile("llama3-8b/h100")), PolicyConfig())


async def until(done: Callable[[], bool], within: float = 5.0) -> None:
    """Wait until ``done()`` (polling the server thread's counts)."""
    with anyio.fail_after(within):
        while True:
            if done():
                return
            await anyio.sleep(0.01)


def streaming(recorder: Recorder, tokens: int) -> int:
    """Streams open on the server that have sent at least ``tokens`` tokens."""
    hits = recorder.hits["default"]
    return sum(len(h.sent_at) >= tokens and not h.done.is_set() for h in hits)


@pytest.mark.anyio
async def test_stop_mid_replay_closes_every_stream(engine: tuple[ReplayApp, Recorder, str]) -> None:
    app, recorder, url = engine
    recorder.script("default", Script(tokens=10_000, ttft=0.01, tpot=0.02))  # 4 s streams
    async with Target(url) as target:
        live = LiveReplay(target, scenario(6))
        plan = await live.prepare()
        for name in ("fcfs", "slopolicy"):
            stop = anyio.Event()
            async with anyio.create_task_group() as group:

                async def stopper(stop: anyio.Event = stop) -> None:
                    await until(lambda: streaming(recorder, 5) >= 3)
                    stop.set()

                group.start_soon(stopper)
                with anyio.fail_after(3):  # bounded: far less than one stream lasts
                    run = await live.run(name, plan, stop=stop, tell=None)
            assert run.interrupted
            outcomes = {r.outcome for r in run.records}
            assert SimOutcome.UNFINISHED in outcomes, name
            assert any(r.first_token_at is not None for r in run.records), name
            await until(lambda: app.open == 0, within=2)  # the server saw every stream go
            report = live_comparison(live, {name: run}).reports[name]
            assert report.unfinished == sum(r.outcome is SimOutcome.UNFINISHED for r in run.records)
    hits = [h for h in recorder.hits["default"] if h.body.get("stream")]
    assert hits
    assert all(h.done.is_set() for h in hits)
    assert any(h.disconnected for h in hits)


def test_ctrl_c_writes_the_partial_report(
    engine: tuple[ReplayApp, Recorder, str], tmp_path: Path
) -> None:
    app, recorder, url = engine
    recorder.script("default", Script(tokens=10_000, ttft=0.01, tpot=0.05))  # 10 s streams
    rows = "\n".join(f"{0.01 * i:.2f},30,200,t" for i in range(4))
    path = tmp_path / "t.csv"
    path.write_text("arrival,prompt_tokens,output_tokens,tenant\n" + rows + "\n")
    out = tmp_path / "partial.json"
    run = "import sys; from slopolicy.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", run, "replay", "--target", url, "--trace", str(path),
               "--json", str(out), "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while app.open < 4:  # polling a child process's requests on the server
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the replay never opened its streams"
            time.sleep(0.02)
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=5)  # bounded: the streams would run 10 s
    finally:
        process.kill()
        _, err = process.communicate()
    assert status == 130, err
    data = json.loads(out.read_text())
    assert data["live"]["lanes"]["fcfs"]["interrupted"] is True
    assert "slopolicy" not in data["policies"]  # stopped in the first lane
    assert data["policies"]["fcfs"]["unfinished"] == 4
    deadline = time.monotonic() + 2
    while app.open:  # the server saw every stream closed
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_target_that_is_no_engine_is_one_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from slopolicy.testing.redis_server import free_port

    path = str(trace(tmp_path / "t.csv", 2, 0.0))
    assert main(["replay", "--target", "ftp://127.0.0.1", "--trace", path]) == 1
    assert "http(s) URL" in capsys.readouterr().err
    nobody = f"http://127.0.0.1:{free_port()}"
    assert main(["replay", "--target", nobody, "--trace", path, "--no-progress"]) == 1
    assert "no OpenAI-compatible /v1/models answered" in capsys.readouterr().err
    assert main(["replay", "--target", nobody, "--trace", path, "--lanes", "direct"]) == 1
    assert "--lanes" in capsys.readouterr().err


@pytest.mark.anyio
async def test_facts_read_vllms_kv_pool_from_its_metrics(
    engine: tuple[ReplayApp, Recorder, str],
) -> None:
    _, recorder, url = engine
    recorder.metrics_page = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.9",'
        'num_gpu_blocks="2500"} 1.0\n'
    )
    async with Target(url) as target:
        facts = await target.facts()
    assert (facts.kind, facts.model, facts.kv_tokens) == ("vllm", "fake-model", 40_000)
    assert facts.tokenizes
    assert facts.slots is None
    assert facts.extra_body() == {"ignore_eos": True}


def test_a_plan_refuses_bad_limits_before_anything_is_sent() -> None:
    workload = scenario(2).workload
    prompts = {r.id: "the" for r in workload}
    for bad in ({"max_concurrency": 0}, {"max_concurrency": 2.5}, {"drain": float("nan")}):
        with pytest.raises(UsageError):
            Plan(workload, {}, prompts, **bad)
    with pytest.raises(UsageError, match="no prompt"):
        Plan(workload, {}, {})


@pytest.mark.anyio
async def test_the_gate_is_fed_only_the_signals_the_scenario_names() -> None:
    # As the simulator feeds its policy: by default no decode rate, whose drop
    # trigger reads prefill interference as a sick engine.
    from slopolicy.core.health.signals import EngineSignals
    from slopolicy.replay.live import only
    from slopolicy.sim.ours import DEFAULT_SIGNALS

    full = EngineSignals(observed_at=1.0, kv_usage=0.5, waiting=3, running=8, decode_tps=90.0)

    async def scraper() -> EngineSignals:
        return full

    fed = await only(scraper, DEFAULT_SIGNALS)()
    assert fed == EngineSignals(observed_at=1.0, kv_usage=0.5, waiting=3, running=8)
    assert await only(scraper, (*DEFAULT_SIGNALS, "decode_tps"))() == full

    async def nothing() -> None:
        return None

    assert await only(nothing, DEFAULT_SIGNALS)() is None


@pytest.mark.anyio
async def test_fresh_slot_order_pins_one_request_a_slot_highest_first(
    engine: tuple[ReplayApp, Recorder, str],
) -> None:
    _, recorder, url = engine
    recorder.script("pinned", Script(tokens=1))
    recorder.script("refused", Script(status=400, message="id_slot is not supported"))
    async with Target(url) as target:
        await target.fresh_slot_order(EngineFacts("llama.cpp", "pinned", slots=4))
        # A server that refuses a pinned request is left as it is: no error.
        await target.fresh_slot_order(EngineFacts("llama.cpp", "refused", slots=4))
        await target.fresh_slot_order(EngineFacts("vllm", "pinned"))  # not llama.cpp: nothing
    assert [hit.body["id_slot"] for hit in recorder.hits["pinned"]] == [3, 2, 1, 0]
    assert all(hit.body["max_tokens"] == 1 for hit in recorder.hits["pinned"])
    assert [hit.body["id_slot"] for hit in recorder.hits["refused"]] == [3]
