"""Comparing your own schedulers: by object, class, factory or import path."""

from __future__ import annotations

import pytest

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim import (
    BASELINES,
    POLICIES,
    EngineSpec,
    SimRequest,
    Workload,
    compare,
    profile,
    resolve,
)
from tests.sim.custom import HALVING, Halving

H100 = EngineSpec(profile("llama3-8b/h100"))
CONFIG = PolicyConfig()


def _workload() -> Workload:
    return Workload.of([SimRequest(f"r{i}", i * 0.1, "t", 200, 60, 100) for i in range(6)])


def test_compare_runs_a_scheduler_object_as_is() -> None:
    mine = Halving()
    comparison = compare(_workload(), CONFIG, H100, policies=("fcfs", mine))
    assert list(comparison.reports) == ["fcfs", "halving"]
    halving = comparison.reports["halving"]
    # Every answer was cut to 50 of 60 tokens: all degraded, none attained.
    assert (halving.degraded, halving.attained, comparison.reports["fcfs"].degraded) == (6, 0, 0)
    assert halving.degraded_goodput_rps > 0
    records = comparison.results["halving"].records
    assert [r.model for r in records] == [None, "small", None, "small", None, "small"]
    assert mine._pending == []  # the object given is the one that ran


@pytest.mark.parametrize(
    "path",
    ["tests.sim.custom:Halving", "tests.sim.custom:HALVING", "tests.sim.custom:make_halving"],
)
def test_compare_imports_a_scheduler_a_class_or_a_factory_by_path(path: str) -> None:
    comparison = compare(_workload(), CONFIG, H100, policies=(path,))
    assert list(comparison.reports) == ["halving"]
    assert comparison.reports["halving"].degraded == 6


def test_a_factory_makes_a_fresh_scheduler_and_an_object_is_copied() -> None:
    for spec in ("tests.sim.custom:Halving", HALVING):
        factory = resolve(spec, CONFIG)
        assert factory.make() is not factory.make()
    assert resolve(HALVING, CONFIG).first() is HALVING
    assert resolve(HALVING, CONFIG).make() is not HALVING


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown policy 'nope'"),
        ("tests.sim.missing:X", "cannot import"),
        ("tests.sim.custom:Missing", "cannot import"),
        ("tests.sim.custom:NOT_A_SCHEDULER", "neither a scheduler"),
        ("slopolicy.sim:Client", "is not a scheduler"),
    ],
)
def test_bad_policies_raise_usage_errors(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        compare(_workload(), CONFIG, H100, policies=(spec,))


def test_names_must_be_unique() -> None:
    with pytest.raises(UsageError, match="unique"):
        compare(_workload(), CONFIG, H100, policies=(Halving(), "tests.sim.custom:Halving"))
    with pytest.raises(UsageError, match="at least one"):
        compare(_workload(), CONFIG, H100, policies=())


def test_every_builtin_policy_resolves_to_its_own_name() -> None:
    assert POLICIES[1:] == BASELINES
    for name in POLICIES:
        assert resolve(name, CONFIG).make().name == name
