"""With no SDK, slopolicy records nothing, sets no global provider and keeps
no state per request; ``telemetry=False`` leaves the gate as it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import anyio
import pytest
from opentelemetry import trace

from slopolicy import Gate
from slopolicy.telemetry import default_telemetry
from tests.runtime.conftest import make_request, policy
from tests.telemetry.otel import Otel

NO_SDK = textwrap.dedent(
    """
    import importlib.abc
    import sys

    class NoSDK(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
                raise ImportError("the SDK is not installed here")
            return None

    sys.meta_path.insert(0, NoSDK())

    import anyio
    from opentelemetry import metrics, trace

    from slopolicy import Gate, Policy, PolicyConfig, Request
    from slopolicy.core.cost.tokens import HeuristicCounter
    from slopolicy.telemetry import default_telemetry

    async def main():
        policy = Policy(PolicyConfig(), counter=HeuristicCounter())
        async with Gate(policy) as gate:  # telemetry on, the default
            for k in range(20):
                request = Request(id=f"r{k}", tenant=f"t{k}", prompt="hello", max_new_tokens=8)
                async with gate.admit(request) as ticket:
                    ticket.tokens(3)
            assert gate._telemetry is not None and gate._telemetry.in_flight == 0

    anyio.run(main)
    assert not [name for name in sys.modules if name.startswith("opentelemetry.sdk")]
    assert type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    assert default_telemetry().tenants.statistics().observed == 0  # not even counted
    print("recorded nothing")
    """
)


def test_without_the_sdk_nothing_is_recorded_and_no_provider_is_set() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", NO_SDK],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "recorded nothing"


@pytest.mark.anyio
async def test_the_default_keeps_nothing_until_a_provider_is_set() -> None:
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("something in this process set a global tracer provider")
    async with Gate(policy()) as gate:
        assert gate._telemetry is not None
        with gate.admit_nowait(make_request("a")):
            assert gate._telemetry.in_flight == 0  # nothing listens: no flight kept
    assert default_telemetry().instruments.sources == ()


@pytest.mark.anyio
async def test_telemetry_false_records_nothing_and_starts_no_task(otel: Otel) -> None:
    before = len(anyio.get_running_tasks())
    async with Gate(policy(), telemetry=False) as gate:
        assert gate._telemetry is None
        assert len(anyio.get_running_tasks()) == before + 1  # the timer alone
        with gate.admit_nowait(make_request("a")):
            pass
    telemetry = otel.telemetry()
    async with Gate(policy(), telemetry=telemetry) as gate:
        assert len(anyio.get_running_tasks()) == before + 2  # the timer and telemetry
        with gate.admit_nowait(make_request("b")) as ticket:
            assert gate._telemetry is not None
            assert gate._telemetry.in_flight == 1
    assert ticket.released
    assert gate._telemetry.in_flight == 0
    assert telemetry.instruments.sources == ()


@pytest.mark.anyio
async def test_a_ticket_that_outlives_its_gate_is_still_recorded(otel: Otel) -> None:
    async with Gate(policy(), telemetry=otel.telemetry()) as gate:
        ticket = gate.admit_nowait(make_request("late"))
    ticket.finish(output_tokens=2)
    outcomes = otel.metrics()["slopolicy.request.outcomes"]
    assert outcomes.value(slopolicy__outcome="completed") == 1
    assert [span.name for span in otel.spans()] == ["slopolicy.request"]
