from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from slopolicy import ConfigError, PolicyConfig
from slopolicy.config import DEFAULT_LANES, LaneConfig
from slopolicy.core.specs import OverBudget
from slopolicy.testing.strategies import policy_configs

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_the_default_has_three_lanes_most_interactive_first() -> None:
    config = PolicyConfig()
    assert [lane.name for lane in config.lanes] == ["interactive", "heavy", "background"]
    assert config.lanes == list(DEFAULT_LANES)
    assert config.lanes[0].slo.ttft_p95_s == 0.5
    assert config.kv.capacity_tokens == 26_688 * 16


def test_specs_carry_every_lane_and_tier_setting() -> None:
    config = PolicyConfig.from_file(str(EXAMPLES / "policy.yaml"))
    interactive = config.lane_specs()[0]
    assert interactive.over_budget is OverBudget.DEMOTE
    assert (interactive.max_queue_wait, interactive.kv_reserve) == (2.0, 0.2)
    tiers = config.tier_table()
    enterprise = tiers.for_tenant("acme")
    assert enterprise.name == "enterprise"
    assert [(q.lane, q.share) for q in enterprise.lane_quotas] == [
        ("interactive", 0.7),
        ("background", 0.3),
    ]
    assert tiers.for_tenant("stranger").name == "free"
    assert tiers.for_tenant("nightly-evals").default_lane == "background"


@given(policy_configs())
def test_configs_round_trip_through_json_and_yaml(config: PolicyConfig) -> None:
    assert PolicyConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert PolicyConfig.from_yaml(config.to_yaml()) == config


def test_toml_yaml_and_json_files_load_alike(tmp_path: Path) -> None:
    from_yaml = PolicyConfig.from_file(str(EXAMPLES / "policy.yaml"))
    from_toml = PolicyConfig.from_file(str(EXAMPLES / "policy.toml"))
    assert from_toml == from_yaml
    as_json = tmp_path / "policy.json"
    as_json.write_text(json.dumps(from_yaml.to_dict()))
    assert PolicyConfig.from_file(str(as_json)) == from_yaml


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        PolicyConfig.from_dict(data, source="test.yaml")
    assert "test.yaml" in str(info.value)
    return {error.path: error.message for error in info.value.errors}


def _default() -> dict[str, Any]:
    return PolicyConfig().to_dict()


def test_cross_references_are_checked_with_their_paths() -> None:
    data = _default()
    data["lanes"][2]["name"] = "interactive"
    data["default_tier"] = "gold"
    data["tenants"] = {"acme": "platinum"}
    data["tiers"]["default"]["default_lane"] = "nope"
    data["tiers"]["default"]["lanes"] = {"ghost": {"share": 0.5}}
    data["ladder"]["pause_lanes"] = ["batch"]
    errors = _errors(data)
    assert errors["lanes.2.name"] == "lane 'interactive' is defined twice"
    assert errors["default_tier"] == "unknown tier 'gold'"
    assert errors["tenants.acme"] == "unknown tier 'platinum'"
    assert errors["tiers.default.default_lane"] == "unknown lane 'nope'"
    assert errors["tiers.default.lanes.ghost"] == "unknown lane 'ghost'"
    assert errors["ladder.pause_lanes.0"] == "unknown lane 'batch'"


def test_default_lane_must_be_allowed() -> None:
    data = _default()
    data["tiers"]["default"]["allowed_lanes"] = ["heavy"]
    assert _errors(data) == {
        "tiers.default.default_lane": "default lane 'interactive' is not in allowed_lanes"
    }


@pytest.mark.parametrize(
    ("path", "value", "where", "fragment"),
    [
        (("lanes", 0, "weight"), -1, "lanes.0.weight", "greater than or equal to 0.000001"),
        (("lanes", 0, "weight"), float("nan"), "lanes.0.weight", "finite"),
        (("lanes", 0, "queue_capacity"), True, "lanes.0.queue_capacity", "valid integer"),
        (("lanes", 0, "queue_capacity"), "10", "lanes.0.queue_capacity", "valid integer"),
        (("lanes", 0, "over_budget"), "drop", "lanes.0.over_budget", "'demote'"),
        (("lanes", 0, "name"), "Bad Name", "lanes.0.name", "pattern"),
        (("lanes", 0, "colour"), "red", "lanes.0.colour", "Extra inputs"),
        (("lanes", 0, "slo", "ttft_p99_s"), 0.1, "lanes.0.slo", "ttft_p99_s must be >= ttft_p95_s"),
        (("lanes", 0, "slo", "tbt_p99_s"), 0.0, "lanes.0.slo.tbt_p99_s", "greater than or equal"),
        (("lanes", 0, "slo", "tbt_stall_s"), "x", "lanes.0.slo.tbt_stall_s", "valid number"),
        (("tiers", "default", "rate"), 100.0, "tiers.default", "rate and burst"),
        (("ladder", "kv_usage", "exit"), 0.99, "ladder.kv_usage", "exit must be below enter"),
        (("ladder", "rungs"), ["shed", "shed"], "ladder", "must not repeat"),
        (("version",), 2, "version", "1"),
    ],
)
def test_bad_fields_name_their_path(
    path: tuple[str | int, ...], value: object, where: str, fragment: str
) -> None:
    data = _default()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    errors = _errors(data)
    assert where in errors, errors
    assert fragment in errors[where]


def test_kv_reserves_must_leave_a_shared_pool() -> None:
    data = _default()
    for lane in data["lanes"]:
        lane["kv_reserve"] = 0.4
    assert "must stay below 1" in _errors(data)["lanes"]


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))] + [
            path
        ]
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*path, i))] + [path]
    return [path]


_junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@given(st.data(), policy_configs())
def test_random_malformed_configs_give_typed_errors(
    data: st.DataObject, config: PolicyConfig
) -> None:
    document = config.to_dict()
    mutated = copy.deepcopy(document)
    leaves = [leaf for leaf in _leaves(mutated) if leaf]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(leaves))
        target: Any = mutated
        try:
            for key in path[:-1]:
                target = target[key]
            if data.draw(st.booleans()) or not isinstance(target, dict):
                target[path[-1]] = data.draw(_junk)
            else:
                target.pop(path[-1], None)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced this branch
    try:
        PolicyConfig.from_dict(mutated)
    except ConfigError as error:
        assert error.errors  # noqa: PT017 - valid mutations must pass, so no pytest.raises
        assert all(item.message for item in error.errors)  # noqa: PT017


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("policy.yaml", "lanes: [", "invalid YAML"),
        ("policy.toml", "lanes = [", "invalid TOML"),
        ("policy.json", "{", "invalid JSON"),
        ("policy.yaml", "- just\n- a list\n", "expected a mapping"),
        ("policy.ini", "", "unknown file type"),
    ],
)
def test_unreadable_files_are_config_errors(
    tmp_path: Path, name: str, content: str, fragment: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError, match=fragment) as info:
        PolicyConfig.from_file(str(path))
    assert info.value.source == str(path)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        PolicyConfig.from_file(str(tmp_path / "absent.yaml"))


def test_the_json_schema_forbids_unknown_keys() -> None:
    schema = PolicyConfig.model_json_schema()
    assert schema["additionalProperties"] is False
    lane = schema["$defs"]["LaneConfig"]
    assert lane["additionalProperties"] is False
    assert set(lane["properties"]) >= {"name", "slo", "max_new_tokens", "kv_reserve"}
    yaml.safe_dump(schema)  # plain data


def test_configs_are_frozen() -> None:
    lane = LaneConfig(name="x")
    with pytest.raises(ValueError, match="frozen"):
        lane.weight = 3  # type: ignore[misc]
