from __future__ import annotations

from hypothesis import given

from slopolicy.core.health.signals import EngineSignals
from slopolicy.sim import EngineSpec, SimRequest, Workload
from slopolicy.testing.strategies import (
    engine_specs,
    signal_sequences,
    sim_requests,
    tenants,
    workloads,
)


@given(tenants(min_size=2, max_size=4))
def test_tenants_are_distinct_names(names: tuple[str, ...]) -> None:
    assert 2 <= len(names) == len(set(names)) <= 4


@given(sim_requests(tenants=["a"], lanes=["chat"], max_prompt_tokens=10, max_arrival=5))
def test_sim_requests_stay_within_their_bounds(request: SimRequest) -> None:
    assert request.tenant == "a"
    assert request.lane in (None, "chat")
    assert 1 <= request.prompt_tokens <= 10
    assert 0 <= request.arrival <= 5


@given(workloads(tenants=["x", "y"], lanes=["interactive"], max_requests=50))
def test_workloads_are_sorted_and_bounded(workload: Workload) -> None:
    assert len(workload) <= 50
    arrivals = [r.arrival for r in workload]
    assert arrivals == sorted(arrivals)
    assert {r.tenant for r in workload} <= {"x", "y"}
    assert all(r.lane == "interactive" for r in workload)
    assert all(r.arrival <= workload.duration for r in workload)


@given(engine_specs(max_blocks=200))
def test_engine_specs_are_small_engines(spec: EngineSpec) -> None:
    assert spec.blocks <= 200
    assert spec.max_num_batched_tokens >= spec.max_num_seqs


@given(signal_sequences(start=5.0, max_size=10))
def test_signal_sequences_move_forward(reports: list[EngineSignals]) -> None:
    times = [r.observed_at for r in reports]
    assert times == sorted(times)
    assert times[0] >= 5.0
