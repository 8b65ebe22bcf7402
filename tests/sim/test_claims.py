"""CI guards for what the demo and the trace replay claim, on shortened runs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from slopolicy.sim import (
    OURS,
    POLICIES,
    SCHEMA,
    Comparison,
    builtin_scenario,
    load_outside_bursts,
    overload_claims,
    run_scenario,
    seed_claims,
    seed_scenario,
    to_json,
)


@pytest.fixture(scope="module")
def seed() -> Comparison:
    return run_scenario(seed_scenario(short=True))


def test_the_short_seed_scenario_keeps_every_demo_claim(seed: Comparison) -> None:
    claims = seed_claims(seed)
    assert len(claims) == 6
    assert all(claim.holds for claim in claims), [c.text for c in claims if not c.holds]


def test_the_demo_numbers_directly(seed: Comparison) -> None:
    ours, fcfs = seed.reports[OURS], seed.reports["fcfs"]
    chat = ours.lanes["interactive"]
    assert fcfs.lanes["interactive"].ttft_p95_s is not None
    assert fcfs.lanes["interactive"].ttft_p95_s >= 3 * 0.5
    assert chat.ttft_p99_s is not None
    assert chat.ttft_p99_s <= 1.0
    assert chat.attainment is not None
    assert chat.attainment >= 0.99
    assert all(ours.goodput_rps >= r.goodput_rps for r in seed.reports.values())
    for lane in ("heavy", "background"):
        assert ours.lanes[lane].completed == ours.lanes[lane].offered
        assert ours.lanes[lane].drain_s is not None


def test_the_load_outside_the_bursts_is_below_70_percent() -> None:
    scenario = seed_scenario()
    load = load_outside_bursts(scenario.workload, scenario.engine)
    assert 0.2 < load.load < 0.7
    assert load.rate_rps == pytest.approx(10, rel=0.05)


def test_the_azure_trace_at_twice_its_rate_keeps_the_overload_claims() -> None:
    scenario = builtin_scenario("azure-2023")
    first_ten_minutes = dataclasses.replace(scenario, workload=scenario.workload.window(0, 600))
    comparison = run_scenario(first_ten_minutes)
    claims = overload_claims(comparison)
    assert all(claim.holds for claim in claims), [c.text for c in claims if not c.holds]


def test_the_json_report_has_the_documented_schema(seed: Comparison) -> None:
    data = json.loads(json.dumps(to_json(seed, description="short")))
    assert data["schema"] == SCHEMA
    assert data["scenario"]["requests"] == len(seed.workload)
    assert set(data["policies"]) == set(POLICIES)
    ours = data["policies"][OURS]
    for key in (
        "goodput_rps",
        "throughput_rps",
        "attainment",
        "completed",
        "rejected",
        "expired",
        "jain_attainment",
        "worst_tenant_attainment",
    ):
        assert isinstance(ours[key], (int, float)), key
    lane = ours["lanes"]["interactive"]
    for key in (
        "ttft_p50_s",
        "ttft_p95_s",
        "ttft_p99_s",
        "tpot_p95_s",
        "attainment",
        "goodput_rps",
        "completed",
        "rejected",
    ):
        assert isinstance(lane[key], (int, float)), key
    tenant = ours["tenants"]["acme"]
    assert set(tenant) >= {"attainment", "goodput_rps", "completed", "rejected", "preempted"}
    assert tenant["preempted"] == seed.reports[OURS].tenants["acme"].preempted
    assert ours["fallback"]["max_level"] >= 0
    assert data["policies"]["fcfs"]["fallback"] is None
