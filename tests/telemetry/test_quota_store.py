"""With a quota store, every decision is recorded once: those the store refuses too."""

from __future__ import annotations

import anyio
import pytest

from slopolicy import Gate, Rejected
from slopolicy.backends import MemoryQuotaStore
from slopolicy.telemetry import names as n
from tests.runtime.conftest import make_request as request
from tests.runtime.conftest import policy
from tests.telemetry.otel import Otel

pytestmark = pytest.mark.anyio


async def test_admissions_and_store_refusals_are_recorded(otel: Otel) -> None:
    store = MemoryQuotaStore()
    async with Gate(policy(), quota_store=store, telemetry=otel.telemetry()) as gate:
        async with gate.admit(request("a", "small")):  # tier "tiny": one in flight
            with pytest.raises(Rejected):
                await gate.admit(request("b", "small"))  # refused by the store
        with pytest.raises(Rejected):
            await gate.admit(request("c", "small", prompt_tokens=9000))  # by the policy
        await anyio.wait_all_tasks_blocked()
    admissions = otel.metrics()[n.ADMISSIONS]
    assert admissions.total() == 3
    assert admissions.value(slopolicy__reason="admitted") == 1
    assert admissions.value(slopolicy__reason="concurrency_limited") == 1
    assert store.statistics().in_flight == 0
