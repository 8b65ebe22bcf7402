"""The gateway anchors' mechanisms on small hand-made workloads: llm-d flow
control, Dynamo's router queue, vLLM's queue limits."""

from __future__ import annotations

import pytest

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim import (
    POLICIES,
    DynamoRouter,
    EngineSpec,
    LlmdFlowControl,
    VLLMQueueLimits,
    Workload,
    classify,
    evaluate,
    make_scheduler,
    profile,
)
from slopolicy.sim.workload import SimRequest
from tests.sim.harness import engine_view, sim_request, started_ids

CONFIG = PolicyConfig()  # lanes interactive (weight 8), heavy (2), background (1)


def _one_at_a_time(scheduler: LlmdFlowControl | DynamoRouter, count: int) -> list[str]:
    """The order ``count`` dispatches through one free seat release requests in."""
    order: list[str] = []
    for _ in range(count):
        _, view = engine_view(seats=1)
        order.extend(started_ids(scheduler.dispatch(0.0, view)))
    return order


# -- llm-d flow control ---------------------------------------------------------


def test_llmd_stops_releasing_at_the_queue_depth_threshold() -> None:
    llmd = LlmdFlowControl(CONFIG)
    for index in range(8):
        llmd.submit(sim_request(f"r{index}"), now=0.0)
    _engine, view = engine_view()
    assert len(llmd.dispatch(0.0, view).started) == 5  # waiting 5 / 5 = saturated
    assert llmd.saturation(view) == 1.0


def test_llmd_holds_everything_while_kv_is_past_its_threshold() -> None:
    engine, view = engine_view(blocks=100)
    assert engine.add("running", 1_400, 50)  # 88 of 100 blocks once it starts
    assert engine.start(0.0) is not None
    llmd = LlmdFlowControl(CONFIG)
    llmd.submit(sim_request("r"), now=0.0)
    assert view.kv_usage() >= 0.8
    assert llmd.dispatch(0.0, view).started == ()


def test_llmd_serves_the_highest_band_first() -> None:
    llmd = LlmdFlowControl(CONFIG)
    llmd.submit(sim_request("batch", lane="background"), now=0.0)
    llmd.submit(sim_request("doc", prompt=50_000), now=0.0)  # demoted to heavy
    llmd.submit(sim_request("chat"), now=0.0)
    assert _one_at_a_time(llmd, 3) == ["chat", "doc", "batch"]


def test_llmd_picks_the_flow_with_the_least_attained_service() -> None:
    llmd = LlmdFlowControl(CONFIG)
    llmd.submit(sim_request("a0", "a"), now=0.0)
    assert _one_at_a_time(llmd, 1) == ["a0"]
    llmd.finish("a0", now=1.0, output_tokens=10)  # a has attained 100 + 2*10 tokens
    llmd.submit(sim_request("a1", "a", arrival=1.0), now=1.0)
    llmd.submit(sim_request("b0", "b", arrival=1.1), now=1.1)
    llmd.submit(sim_request("c0", "c", arrival=1.2), now=1.2)
    # b and c have attained nothing (b seen first); a goes last.
    assert _one_at_a_time(llmd, 3) == ["b0", "c0", "a1"]


def test_llmd_orders_a_flow_by_ttft_deadline() -> None:
    llmd = LlmdFlowControl(CONFIG)
    llmd.submit(sim_request("later", arrival=5.0), now=5.0)
    # A client's retry: submitted after, but its deadline (arrival + 0.5 s) is earlier.
    llmd.submit(sim_request("retried", arrival=1.0), now=5.1)
    assert _one_at_a_time(llmd, 2) == ["retried", "later"]


def test_llmd_evicts_requests_queued_past_their_ttl() -> None:
    llmd = LlmdFlowControl(CONFIG)
    slo = LlmdFlowControl(CONFIG, ttl="ttft", name="llm-d-slo")
    for scheduler in (llmd, slo):
        scheduler.submit(sim_request("chat"), now=0.0)
        scheduler.submit(sim_request("batch", lane="background"), now=0.0)
    assert (llmd.wakeup(), slo.wakeup()) == (60.0, 0.5)  # the TTFT target of 'interactive'
    _, full = engine_view()
    for _ in range(5):
        full.release(1)  # five waiting: saturated
    expired = slo.dispatch(0.6, full)
    assert (expired.started, expired.expired) == ((), ("chat",))
    assert slo.wakeup() == 60.0  # background has no TTFT target: llm-d's 60 s
    assert llmd.dispatch(59.0, full).expired == ()
    assert llmd.dispatch(60.0, engine_view()[1]).expired == ("chat", "batch")


def test_llmd_refuses_past_a_bands_capacity() -> None:
    llmd = LlmdFlowControl(CONFIG, band_capacity=2)
    assert llmd.submit(sim_request("a"), now=0.0).accepted
    assert llmd.submit(sim_request("b"), now=0.0).accepted
    refused = llmd.submit(sim_request("c"), now=0.0)
    assert (refused.accepted, refused.reason, refused.retryable) == (False, "queue_full", True)
    assert llmd.submit(sim_request("d", lane="background"), now=0.0).accepted  # another band


@pytest.mark.parametrize(
    "changes",
    [
        {"ttl": 0.0},
        {"ttl": "soon"},
        {"ttl": True},
        {"queue_depth_threshold": 0},
        {"kv_threshold": 1.5},
    ],
)
def test_llmd_rejects_bad_settings(changes: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        LlmdFlowControl(CONFIG, **changes)  # type: ignore[arg-type]


# -- Dynamo's router ----------------------------------------------------------------


def test_dynamo_shares_prompt_tokens_by_each_class_quantum() -> None:
    dynamo = DynamoRouter(CONFIG, quantum=1000)  # interactive 8,000 a round, background 1,000
    for index in range(20):
        dynamo.submit(sim_request(f"chat{index}", prompt=1000), now=0.0)
        dynamo.submit(sim_request(f"batch{index}", prompt=1000, lane="background"), now=0.0)
    order = _one_at_a_time(dynamo, 18)
    assert order[:9] == [*(f"chat{i}" for i in range(8)), "batch0"]
    assert sum(name.startswith("chat") for name in order) == 16


def test_dynamo_charges_what_a_request_costs_not_a_request_count() -> None:
    dynamo = DynamoRouter(CONFIG, quantum=1000)
    for index in range(4):
        dynamo.submit(
            sim_request(f"long{index}", prompt=4000), now=0.0
        )  # interactive, 8,000 a round
        dynamo.submit(sim_request(f"short{index}", prompt=500, lane="background"), now=0.0)
    # A round buys interactive two 4,000-token prompts and background two of 500.
    assert _one_at_a_time(dynamo, 4) == ["long0", "long1", "short0", "short1"]


def test_dynamo_is_work_conserving_past_a_head_that_cannot_start() -> None:
    dynamo = DynamoRouter(CONFIG)
    dynamo.submit(sim_request("doc", prompt=3000), now=0.0)  # needs 188 blocks
    dynamo.submit(sim_request("batch", prompt=100, lane="background"), now=0.0)
    _, view = engine_view(blocks=100)
    assert started_ids(dynamo.dispatch(0.0, view)) == ["batch"]


def test_dynamo_rejects_queued_work_past_its_class_slo() -> None:
    dynamo = DynamoRouter(CONFIG)
    dynamo.submit(sim_request("chat"), now=0.0)
    dynamo.submit(sim_request("batch", lane="background"), now=0.0)
    assert dynamo.wakeup() == 0.5  # interactive's TTFT target
    _, full = engine_view(seats=1)
    full.release(1)
    assert dynamo.dispatch(0.5, full).expired == ("chat",)
    assert dynamo.wakeup() is None  # background has no TTFT target: it never expires
    assert started_ids(dynamo.dispatch(1000.0, engine_view()[1])) == ["batch"]


# -- vLLM's queue limits ----------------------------------------------------------------


def test_vllm_refuses_with_503_once_its_queue_is_full() -> None:
    vllm = VLLMQueueLimits(max_num_queued_reqs=2, max_num_queued_tokens=1000)
    assert vllm.submit(sim_request("a"), now=0.0).accepted
    assert vllm.submit(sim_request("b"), now=0.0).accepted
    refused = vllm.submit(sim_request("c"), now=0.0)  # two already queued (not yet released)
    assert (refused.accepted, refused.reason, refused.retryable) == (False, "queue_full", True)
    engine, view = engine_view(seats=1)
    assert started_ids(vllm.dispatch(0.0, view)) == ["a", "b"]  # then FCFS
    view.settle()
    for release in ("a", "b"):
        assert engine.add(release, 100, 10)
    assert engine.start(0.0) is not None  # one seat: a runs, b waits
    assert vllm.submit(sim_request("d"), now=0.1).accepted  # b and d queued
    assert not vllm.submit(sim_request("e"), now=0.1).accepted


def test_vllm_refuses_prompts_past_its_token_limit() -> None:
    vllm = VLLMQueueLimits(max_num_queued_reqs=10, max_num_queued_tokens=1000)
    assert vllm.submit(sim_request("a", prompt=600), now=0.0).accepted
    assert not vllm.submit(sim_request("b", prompt=500), now=0.0).accepted
    assert vllm.submit(sim_request("c", prompt=400), now=0.0).accepted


def test_a_lane_hint_the_config_lacks_routes_by_size_for_every_baseline() -> None:
    # A scenario's hint ("agent") that the policy config has no lane for once
    # stopped llm-d, dynamo and priority with a KeyError; they route it as the
    # config would route a request without the hint.
    config = PolicyConfig()
    requests = tuple(
        SimRequest(
            id=f"r{k}",
            arrival=0.1 * k,
            tenant=f"t{k % 3}",
            prompt_tokens=200 if k % 2 else 20_000,
            output_tokens=20,
            max_new_tokens=50,
            lane="agent",
        )
        for k in range(20)
    )
    workload = Workload(requests, 2.0)
    lanes = classify(workload, config)
    assert {lanes["r1"], lanes["r0"]} == {"interactive", "heavy"}
    engine = EngineSpec(profile("llama3-8b/h100"))
    for name in POLICIES:
        if name == "slopolicy":
            continue  # ours refuses a hint naming no lane (unknown_lane), as the Policy does
        _, report = evaluate(make_scheduler(name, config), workload, engine, config)
        assert report.offered == 20, name
