"""The console example runs, on virtual time, and its numbers move."""

from __future__ import annotations

import io
import re

import pytest
from opentelemetry import trace

from examples.telemetry_console import main

pytestmark = pytest.mark.anyio


def _count(report: str, name: str) -> int:
    """Requests counted on ``name``'s line of one report (0 when it has none yet)."""
    for line in report.splitlines():
        if line.strip().startswith(f"{name} "):
            return sum(int(n) for n in re.findall(r"\bn=(\d+)", line))
    return 0


async def test_the_console_example_reports_numbers_that_move() -> None:
    metrics, spans = io.StringIO(), io.StringIO()
    await main(4.0, metric_out=metrics, span_out=spans)
    reports = re.split(r"^--- t=[\d.]+ s ---$", metrics.getvalue(), flags=re.MULTILINE)[1:]
    assert len(reports) >= 4  # one a second of the gate's clock
    first_token = [_count(report, "gen_ai.server.time_to_first_token") for report in reports]
    assert first_token == sorted(first_token)  # cumulative: it only grows...
    assert first_token[-1] > first_token[0] > 0  # ...and it did, as the load ran
    last = reports[-1]
    for name in (
        "slopolicy.admission.decisions",
        "slopolicy.queue.wait",
        "slopolicy.ladder.level",
        "slopolicy.slo.attainment",
        "slopolicy.kv.utilization",
    ):
        assert f"  {name} [" in last, name
    assert "slopolicy.tenant" not in last  # shown by value: acme, globex or other
    assert re.search(r"interactive/(acme|globex|other)=", last)
    lines = spans.getvalue().splitlines()
    assert len(lines) >= first_token[-1]
    assert all(line.startswith("span slopolicy.request ") for line in lines)
    # The example hands its providers to slopolicy; nothing global was set.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
