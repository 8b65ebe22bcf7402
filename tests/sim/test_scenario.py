from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slopolicy.errors import SimulationError
from slopolicy.sim import builtin_scenario, load_scenario, scenario_from_dict, seed_scenario
from slopolicy.sim.scenario import builtin_data


def _chat(**changes: Any) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "name": "chat",
        "arrivals": {"kind": "poisson", "rate": 2},
        "prompt_tokens": {"kind": "lognormal", "median": 500, "sigma": 0.5},
        "output_tokens": {"kind": "uniform", "low": 10, "high": 50},
        "tenants": {"count": 3, "prefix": "user-"},
    }
    stream.update(changes)
    return stream


def test_the_seed_scenario_is_the_seed_texts_incident() -> None:
    scenario = seed_scenario()
    streams = {r.stream for r in scenario.workload}
    assert streams == {"chat", "contracts", "summaries"}
    assert scenario.workload.bursts == frozenset({"contracts", "summaries"})
    contracts = [r for r in scenario.workload if r.stream == "contracts"]
    assert len(contracts) == 4
    assert all(r.prompt_tokens >= 45_000 and r.tenant == "acme" for r in contracts)
    assert sum(r.stream == "summaries" for r in scenario.workload) == 300
    assert scenario.engine.long_prefill_token_threshold == 1024
    assert [lane.name for lane in scenario.policy.lanes] == ["interactive", "heavy", "background"]
    short = seed_scenario(short=True)
    assert short.workload.duration == 150
    assert sum(r.stream == "summaries" for r in short.workload) == 150


def test_the_azure_scenario_compresses_the_trace() -> None:
    scenario = builtin_scenario("azure-2023")
    assert len(scenario.workload) == 28_185
    assert scenario.workload.duration == pytest.approx(3_513.2 / 2, abs=1)
    assert scenario.rpm_limit == 600
    assert [lane.name for lane in scenario.policy.lanes] == ["interactive", "code"]


def test_a_scenario_file_finds_its_policy_and_traces_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        "lanes:\n  - {name: interactive}\n  - {name: batch, slo: {e2e_p95_s: 100}}\n"
    )
    (tmp_path / "log.csv").write_text("arrival,prompt_tokens,output_tokens,lane\n5,10,3,batch\n")
    (tmp_path / "s.yaml").write_text(
        "name: mine\nseed: 3\nduration_s: 10\nrate_scale: 2\npolicy: policy.yaml\n"
        "engine: {profile: llama2-7b/a100, max_num_seqs: 8, t_cpu_ms: 1}\n"
        "traces: [{path: log.csv, retries: 2}]\n"
        "streams:\n"
        "  - name: chat\n"
        "    arrivals: {kind: gamma, rate: 1, cv: 3}\n"
        "    prompt_tokens: {kind: constant, value: 100}\n"
        "    output_tokens: {kind: empirical, values: [5, 10]}\n"
        "    tenants: {names: [a, b], skew: 1}\n"
        "    lane: interactive\n"
    )
    scenario = load_scenario(tmp_path / "s.yaml")
    assert scenario.name == "mine"
    assert scenario.engine.profile.name == "llama2-7b/a100"
    assert scenario.engine.profile.t_cpu == pytest.approx(0.001)
    assert scenario.workload.duration == 5  # 10 s at twice the rate
    traced = [r for r in scenario.workload if r.stream == "log"]
    assert [(r.lane, r.retries, r.tenant) for r in traced] == [("batch", 2, "log")]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (
            {"duration_s": 10, "streams": [_chat(arrivals={"kind": "poison", "rate": 1})]},
            "streams.0.arrivals",
        ),
        ({"streams": [_chat()]}, "duration_s is required"),
        ({"duration_s": 10, "streams": [_chat(tenants={})]}, "either names or count"),
        ({"duration_s": 10, "streams": [_chat(), _chat()]}, "unique"),
        ({"duration_s": 10}, "streams or traces"),
        ({"duration_s": 10, "streams": [_chat()], "engine": {"profile": "tpu"}}, "profile"),
        ({"duration_s": 10, "streams": [_chat()], "colour": "red"}, "colour"),
        ({"traces": [{"path": "x.csv", "time_col": "t"}]}, "together"),
    ],
)
def test_bad_scenarios_name_each_bad_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(SimulationError, match="invalid scenario") as caught:
        scenario_from_dict(data, source="s.yaml")
    assert field in str(caught.value)
    assert str(caught.value).startswith("s.yaml: ")


def test_lane_hints_must_exist_in_the_policy() -> None:
    data = {"duration_s": 10, "streams": [_chat(lane="vip")]}
    with pytest.raises(SimulationError, match=r"hints lanes \['vip'\]"):
        scenario_from_dict(data)


def test_streams_can_name_tenant_weights_and_a_tier() -> None:
    data = {
        "duration_s": 60,
        "streams": [_chat(tenants={"names": ["a", "b"], "weights": [1, 0]}, tier="default")],
    }
    scenario = scenario_from_dict(data)
    assert {r.tenant for r in scenario.workload} == {"a"}
    assert {r.tier for r in scenario.workload} == {"default"}
    data["streams"] = [_chat(tier="gold")]
    with pytest.raises(SimulationError, match=r"tiers \['gold'\]"):
        scenario_from_dict(data)
    data["streams"] = [_chat(tenants={"names": ["a"], "weights": [1, 2]})]
    with pytest.raises(SimulationError, match="one weight per name"):
        scenario_from_dict(data)


def test_a_bad_policy_file_is_reported_with_its_fields(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("lanes: [{name: interactive, weight: -1}]\n")
    data = {"duration_s": 10, "streams": [_chat()], "policy": "p.yaml"}
    with pytest.raises(SimulationError, match=r"lanes\.0\.weight"):
        scenario_from_dict(data, base=tmp_path)


def test_unreadable_scenarios_and_unknown_builtins_raise(tmp_path: Path) -> None:
    broken = tmp_path / "b.yaml"
    broken.write_text("streams: [\n")
    with pytest.raises(SimulationError, match="invalid YAML"):
        load_scenario(broken)
    with pytest.raises(SimulationError, match="seed, azure-2023"):
        builtin_scenario("nope")
    assert builtin_data("seed")["name"] == "seed"
