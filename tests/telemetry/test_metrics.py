"""The metrics of a scripted run, read back through the SDK's InMemoryMetricReader:
names, kinds, units, advisory buckets, attribute sets and values."""

from __future__ import annotations

import anyio
import pytest
from opentelemetry.trace import StatusCode

from slopolicy import Expired, Finished, Gate, Outcome, Policy, Rejected, Request
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.telemetry import TopLabels
from slopolicy.telemetry import names as n
from tests.core.conftest import RecordingCounter, estimate_calls
from tests.runtime.conftest import config, policy
from tests.telemetry.otel import Metric, Otel
from tests.telemetry.scenario import Script, chat, run_script

pytestmark = pytest.mark.anyio

BASE = {"gen_ai.provider.name": "fake", "server.address": "engine-a"}

#: name -> (kind, unit, monotonic for sums)
EXPECTED = {
    n.TTFT: ("histogram", "s", None),
    n.TPOT: ("histogram", "s", None),
    n.REQUEST_DURATION: ("histogram", "s", None),
    n.TOKEN_USAGE: ("histogram", "{token}", None),
    n.ADMISSIONS: ("sum", "{request}", True),
    n.OUTCOMES: ("sum", "{request}", True),
    n.ACTIVE: ("sum", "{request}", False),
    n.QUEUE_WAIT: ("histogram", "s", None),
    n.PROMPT_TOKENS: ("histogram", "{token}", None),
    n.OUTPUT_TOKENS: ("histogram", "{token}", None),
    n.PHASE_DURATION: ("histogram", "s", None),
    n.TBT: ("histogram", "s", None),
    n.LADDER_TRANSITIONS: ("sum", "{transition}", True),
    n.LADDER_APPLIED: ("sum", "{request}", True),
    n.KV_UTILIZATION: ("gauge", "1", None),
    n.KV_USAGE: ("sum", "{block}", False),
    n.QUEUE_SIZE: ("sum", "{request}", False),
    n.OVERLOAD_STATE: ("gauge", "1", None),
    n.LADDER_LEVEL: ("gauge", "1", None),
    n.SLO_ATTAINMENT: ("gauge", "1", None),
    n.SLO_GOODPUT: ("gauge", "{request}/s", None),
    n.ENGINE_SATURATION: ("gauge", "1", None),
}

# The conventions' advice, written out rather than imported.
TTFT_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
DURATION_BOUNDS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
TOKEN_BOUNDS = tuple(float(4**k) for k in range(14))
LATENCY_BOUNDS = (*TTFT_BOUNDS, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
BUCKETS = {
    n.TTFT: TTFT_BOUNDS,
    n.TPOT: (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5),
    n.REQUEST_DURATION: DURATION_BOUNDS,
    n.TOKEN_USAGE: TOKEN_BOUNDS,
    n.PROMPT_TOKENS: TOKEN_BOUNDS,
    n.OUTPUT_TOKENS: TOKEN_BOUNDS,
    n.QUEUE_WAIT: LATENCY_BOUNDS,
    n.PHASE_DURATION: LATENCY_BOUNDS,
    n.TBT: (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0),
}

GENAI = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", **BASE}


async def _run(otel: Otel) -> tuple[dict[str, Metric], Script]:
    telemetry = otel.telemetry(tenants=TopLabels(["acme"]), attributes=BASE)
    gate, script = await run_script(telemetry, otel.tracers.get_tracer("host"))
    try:
        metrics = otel.metrics()  # collected on the gate's loop: the gauges read it live
        now = anyio.current_time()
        script.lanes = {
            s.lane: s for s in gate.policy.slo_trackers.snapshots(now=now, tenants=False)
        }
        return metrics, script
    finally:
        await gate.__aexit__(None, None, None)


def _attrs(metric: Metric) -> list[dict[str, object]]:
    return sorted((dict(a) for a in metric.attribute_sets()), key=lambda d: sorted(d.items()))


def _sets(metric: Metric) -> set[frozenset[tuple[str, object]]]:
    return {frozenset(attributes) for attributes in metric.attribute_sets()}


async def test_every_instrument_has_its_name_kind_unit_and_buckets(otel: Otel) -> None:
    metrics, _ = await _run(otel)
    assert set(metrics) == set(EXPECTED)
    for name, (kind, unit, monotonic) in EXPECTED.items():
        metric = metrics[name]
        assert (metric.kind, metric.unit, metric.monotonic) == (kind, unit, monotonic), name
        for attributes in metric.attribute_sets():  # the constant attributes ride along
            assert BASE.items() <= dict(attributes).items(), name
    for name, bounds in BUCKETS.items():
        for point in metrics[name].points.values():
            assert tuple(point.explicit_bounds) == bounds, name  # type: ignore[union-attr]


async def test_genai_histograms_hold_each_requests_timings(otel: Otel) -> None:
    metrics, script = await _run(otel)
    done: list[Finished] = [f for f in script.finished.values() if f.outcome is Outcome.COMPLETED]
    (broken,) = [f for f in script.finished.values() if f.outcome is Outcome.FAILED]
    assert len(done) == 3  # first, queued, degraded

    ttft = metrics[n.TTFT]
    assert _attrs(ttft) == [{**GENAI, "slopolicy.lane": "interactive"}]
    point = ttft.histogram()
    assert point.count == 3
    assert point.sum == pytest.approx(sum(f.ttft or 0.0 for f in done))
    assert point.sum == pytest.approx(0.05 + 0.11 + 0.05)  # "queued" waited 0.06 s for its turn

    tpot = metrics[n.TPOT].histogram()
    assert tpot.count == 3
    assert tpot.sum == pytest.approx(sum(f.tpot or 0.0 for f in done))

    duration = metrics[n.REQUEST_DURATION]
    ok = duration.histogram(error__type=None)
    assert ok.count == 3
    assert ok.sum == pytest.approx(sum(f.e2e for f in done))
    failed = duration.histogram(error__type="slopolicy.testing.fake_engine.EngineError")
    assert failed.count == 1
    assert failed.sum == pytest.approx(broken.e2e)

    usage = metrics[n.TOKEN_USAGE]
    inputs = usage.histogram(gen_ai__token__type="input")
    outputs = usage.histogram(gen_ai__token__type="output")
    assert (inputs.count, inputs.sum) == (4, 4 * 50)
    assert (outputs.count, outputs.sum) == (4, 3 * 4 + 2)  # "broken" got 2 tokens out
    assert _sets(usage) == {
        frozenset({**GENAI, "slopolicy.lane": "interactive", "gen_ai.token.type": kind}.items())
        for kind in ("input", "output")
    }


async def test_admissions_outcomes_and_concurrency_by_tenant(otel: Otel) -> None:
    metrics, script = await _run(otel)
    (refusal,) = script.rejected
    admissions = metrics[n.ADMISSIONS]
    assert _attrs(admissions) == [
        {**BASE, "slopolicy.decision": "admit", "slopolicy.reason": "admitted"}
        | {"slopolicy.lane": "interactive", "slopolicy.tenant": "acme"},
        {**BASE, "slopolicy.decision": "admit", "slopolicy.reason": "admitted"}
        | {"slopolicy.lane": "interactive", "slopolicy.tenant": "other"},  # globex: not listed
        {**BASE, "slopolicy.decision": "reject", "slopolicy.reason": refusal.reason.value}
        | {"slopolicy.lane": "heavy", "slopolicy.tenant": "acme"},
    ]
    assert admissions.value(slopolicy__decision="admit", slopolicy__tenant="acme") == 3
    assert admissions.value(slopolicy__tenant="other") == 1
    assert admissions.value(slopolicy__decision="reject") == 1
    assert refusal.reason.value == "prompt_too_long"

    outcomes = metrics[n.OUTCOMES]
    assert outcomes.value(slopolicy__outcome="completed") == 3
    assert outcomes.value(slopolicy__outcome="failed", slopolicy__tenant="other") == 1
    assert outcomes.value(slopolicy__outcome="rejected", slopolicy__lane="heavy") == 1

    active = metrics[n.ACTIVE]  # every request ended: each tenant's count is back to 0
    assert {attrs: point.value for attrs, point in active.points.items()} == {  # type: ignore[union-attr]
        frozenset({**BASE, "slopolicy.lane": "interactive", "slopolicy.tenant": t}.items()): 0
        for t in ("acme", "other")
    }


async def test_queue_prompt_output_and_phase_distributions(otel: Otel) -> None:
    metrics, script = await _run(otel)
    queue = metrics[n.QUEUE_WAIT]
    waited = queue.histogram(slopolicy__queue__result="dispatched")
    assert waited.count == 4
    assert waited.sum == pytest.approx(sum(f.queue_wait or 0.0 for f in script.finished.values()))
    assert waited.sum == pytest.approx(0.06)

    prompts = metrics[n.PROMPT_TOKENS]
    assert prompts.histogram(slopolicy__decision="admit").sum == 4 * 50
    refused = prompts.histogram(slopolicy__decision="reject", slopolicy__lane="heavy")
    assert (refused.count, refused.sum) == (1, 5000)

    outputs = metrics[n.OUTPUT_TOKENS]
    assert outputs.histogram(slopolicy__outcome="completed").sum == 12
    assert outputs.histogram(slopolicy__outcome="failed").sum == 2

    phases = metrics[n.PHASE_DURATION]
    assert {dict(a)["slopolicy.phase"] for a in phases.attribute_sets()} == {
        "schedule",
        "prefill",
        "decode",
    }
    finished = script.finished.values()
    prefill = phases.histogram(slopolicy__phase="prefill")
    decode = phases.histogram(slopolicy__phase="decode")
    # Prefill + schedule + queue is the time to the first token; decode the rest.
    assert prefill.sum == pytest.approx(
        sum((f.ttft or 0.0) - (f.queue_wait or 0.0) - f.stages["schedule"] for f in finished)
    )
    assert decode.sum == pytest.approx(sum(f.e2e - (f.ttft or 0.0) for f in finished))
    assert prefill.sum == pytest.approx(4 * 0.05)  # the fake engine's time to first token


async def test_the_ladder_step_and_the_gauges(otel: Otel) -> None:
    metrics, script = await _run(otel)
    transitions = metrics[n.LADDER_TRANSITIONS]
    assert _attrs(transitions) == [
        {**BASE, "slopolicy.ladder.rung": "drop_optional_features"}
        | {"slopolicy.ladder.direction": "up", "slopolicy.ladder.cause": "pressure"}
    ]
    assert transitions.total() == 1
    applied = metrics[n.LADDER_APPLIED]
    assert applied.value(slopolicy__ladder__rung="drop_optional_features") == 1

    assert metrics[n.LADDER_LEVEL].value() == 1
    state = metrics[n.OVERLOAD_STATE]
    assert {dict(a)["slopolicy.overload.state"]: p.value for a, p in state.points.items()} == {  # type: ignore[union-attr]
        "normal": 0,
        "degraded": 1,
        "batch_paused": 0,
        "interactive_only": 0,
    }
    kv = metrics[n.KV_UTILIZATION]
    assert kv.value(slopolicy__kv__source="ledger") == 0.0  # nothing running now
    assert kv.value(slopolicy__kv__source="engine") == pytest.approx(0.99)
    assert metrics[n.QUEUE_SIZE].total() == 0
    usage = metrics[n.KV_USAGE]  # every lane, holding blocks or not
    assert {dict(a)["slopolicy.lane"]: p.value for a, p in usage.points.items()} == {  # type: ignore[union-attr]
        "interactive": 0,
        "heavy": 0,
    }
    # Three of the four eligible requests attained (the failed one did not).
    attainment = metrics[n.SLO_ATTAINMENT]
    assert attainment.value(slopolicy__lane="interactive") == 0.75
    assert len(attainment.points) == 1  # heavy had nothing eligible: no value at all
    goodput = metrics[n.SLO_GOODPUT]
    interactive = script.lanes["interactive"]
    assert goodput.value(slopolicy__lane="interactive") == pytest.approx(interactive.goodput)
    assert interactive.goodput == pytest.approx(3 / interactive.span_s)
    assert goodput.value(slopolicy__lane="heavy") == 0


async def test_requests_that_never_leave_the_queue(otel: Otel) -> None:
    """One expires in its queue, one is withdrawn by its caller."""
    async with Gate(policy(), telemetry=otel.telemetry()) as gate:
        held = [gate.admit_nowait(chat(f"hold{k}")) for k in range(2)]  # the engine is full
        with pytest.raises(Expired):
            await gate.admit(chat("late"))  # interactive lanes wait at most 5 s
        with anyio.move_on_after(1.0):
            await gate.admit(chat("gave-up"))
        for ticket in held:
            ticket.finish()
    metrics = otel.metrics()
    queue = metrics[n.QUEUE_WAIT]
    expired = queue.histogram(slopolicy__queue__result="expired")
    assert expired.count == 1
    assert expired.sum == pytest.approx(5.0)
    # Every seat was taken, so it never was its lane's next to start.
    behind = queue.histogram(slopolicy__queue__result="expired", slopolicy__queue__held_by="behind")
    assert behind.count == 1
    cancelled = queue.histogram(slopolicy__queue__result="cancelled")
    assert cancelled.count == 1
    assert cancelled.sum == pytest.approx(1.0)
    duration = metrics[n.REQUEST_DURATION]
    assert duration.histogram(error__type="expired").count == 1
    assert duration.histogram(error__type="cancelled").count == 1
    assert duration.histogram(error__type=None).count == 2
    assert n.TTFT not in metrics  # nothing completed with a first token
    outcomes = metrics[n.OUTCOMES]
    assert outcomes.value(slopolicy__outcome="expired") == 1
    assert outcomes.value(slopolicy__outcome="cancelled") == 1
    assert metrics[n.ACTIVE].total() == 0
    spans = {(s.attributes or {})["slopolicy.request.id"]: s for s in otel.spans()}
    assert spans["late"].status.status_code is StatusCode.ERROR
    assert (spans["late"].attributes or {})["error.type"] == "expired"
    assert (spans["late"].attributes or {})["slopolicy.queue.held_by"] == "behind"
    assert "slopolicy.queue.held_by" not in (spans["hold0"].attributes or {})  # it started
    assert [e.name for e in spans["late"].events] == ["slopolicy.queued", "slopolicy.finished"]
    assert spans["gave-up"].status.status_code is StatusCode.UNSET


async def test_a_paced_gate_reports_its_dispatch_backlog(otel: Otel) -> None:
    paced = policy(
        engine={"max_running": 8, "dispatch_rate": 1000.0, "dispatch_burst": 0.0},
        cost={"alpha": 1.0, "beta": 0.0},
    )
    async with Gate(paced, telemetry=otel.telemetry()) as gate:
        ticket = gate.admit_nowait(chat("first", prompt_tokens=200))  # 0.2 s at 1,000/s
        await anyio.sleep(0.05)
        metrics = otel.metrics()  # collected on the gate's loop: read live
        assert metrics[n.DISPATCH_BACKLOG].value() == pytest.approx(150.0)
        ticket.finish()
    # Without a dispatch rate there is no series: the instrument test's run has none.
    assert n.DISPATCH_BACKLOG not in EXPECTED


@pytest.mark.parametrize(
    ("target", "metric"),
    [("ttft_p95_s", n.TTFT_LATE_SHARE), ("tpot_p95_s", n.TPOT_LATE_SHARE)],
)
async def test_a_lane_with_a_target_reports_the_share_of_its_requests_late(
    otel: Otel, target: str, metric: str
) -> None:
    lanes = config().lanes
    bounded = policy(
        lanes=[
            {**lanes[0].model_dump(), "slo": {target: 0.001}},  # 1 ms: anything is late
            lanes[1].model_dump(),
        ]
    )
    async with Gate(bounded, telemetry=otel.telemetry()) as gate:
        ticket = gate.admit_nowait(chat("first"))
        for _ in range(2):  # a late first token, then a late gap
            await anyio.sleep(0.01)
            ticket.tokens(1)
        ticket.finish()
        late = otel.metrics()[metric]
        assert (late.kind, late.unit, late.monotonic) == ("gauge", "1", None)
        assert _attrs(late) == [{n.LANE: "interactive"}]  # only the lane with the target
        assert late.value() == 1.0
    # Without such a target there is no series: the instrument test's run has none.
    assert metric not in EXPECTED


@pytest.mark.parametrize(
    ("refused", "decision"),
    [
        # A chat the tenant's quota refuses: its length is recorded, as counted.
        (
            Request(id="r", tenant="small", messages=({"role": "user", "content": "hi all"},)),  # type: ignore[arg-type]
            "defer",
        ),
        # Over the heavy lane's budget: recorded too, and not counted twice.
        (Request(id="r", tenant="a", lane="heavy", prompt="lorem ipsum " * 2_000), "reject"),
    ],
)
async def test_a_refusal_records_the_routers_count_and_counts_nothing_again(
    otel: Otel, refused: Request, decision: str
) -> None:
    recording = RecordingCounter(HeuristicCounter())
    target = Policy(config(), counter=recording)
    async with Gate(target, telemetry=otel.telemetry()) as gate:
        with gate.admit_nowait(Request(id="first", tenant="small", prompt_tokens=10)):
            recording.reset()
            with pytest.raises(Rejected):
                await gate.admit(refused)
            assert recording.calls == estimate_calls(refused, HeuristicCounter())
    tokens = target.estimator.prompt_tokens(refused).tokens
    prompts = otel.metrics()[n.PROMPT_TOKENS].histogram(slopolicy__decision=decision)
    assert (prompts.count, prompts.sum) == (1, tokens)
