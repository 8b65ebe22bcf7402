"""Observable gauges: read live on the gate's loop, published for readers on
other threads, and never read from the live policy off its loop."""

from __future__ import annotations

import threading

import anyio
import pytest

from slopolicy import Gate, Policy
from slopolicy.core.lifecycle import PolicyStatistics
from slopolicy.telemetry import names as n
from tests.runtime.conftest import config, make_request
from tests.telemetry.otel import Metric, Otel

pytestmark = pytest.mark.anyio


class WatchedPolicy(Policy):
    """Notes the thread of every statistics() call."""

    threads: set[int]

    def statistics(self, now: float | None = None) -> PolicyStatistics:
        self.threads.add(threading.get_ident())
        return super().statistics(now=now)


def _from_another_thread(otel: Otel) -> dict[str, Metric]:
    """Collect on a fresh thread and wait for it, holding the loop still: with
    worker threads the virtual clocks jump ahead while they run, which would
    let the loop refresh (and the SLO window slide) at unknown moments."""
    found: list[dict[str, Metric]] = []
    reader = threading.Thread(target=lambda: found.append(otel.metrics()))
    reader.start()
    reader.join()
    return found[0]


def _policy() -> WatchedPolicy:
    from slopolicy.core.cost.tokens import HeuristicCounter

    watched = WatchedPolicy(config(), counter=HeuristicCounter())
    watched.threads = set()
    return watched


async def test_the_loop_reads_live_and_other_threads_read_what_the_loop_published(
    otel: Otel,
) -> None:
    p = _policy()
    async with Gate(p, telemetry=otel.telemetry(refresh_every=1.0)) as gate:
        loop = threading.get_ident()
        ticket = gate.admit_nowait(make_request("a", prompt_tokens=100, max_new_tokens=60))
        held = p.kv.statistics().used_blocks / p.kv.num_blocks
        assert held > 0
        live = otel.metrics()  # on the loop: the policy as it is now
        assert live[n.KV_UTILIZATION].value(slopolicy__kv__source="ledger") == held

        first = _from_another_thread(otel)  # nothing published yet: this asks for it
        assert n.KV_UTILIZATION not in first
        await anyio.sleep(1.5)
        published = _from_another_thread(otel)
        assert published[n.KV_UTILIZATION].value(slopolicy__kv__source="ledger") == held
        assert published[n.SLO_GOODPUT].value(slopolicy__lane="interactive") == 0

        ticket.finish()
        stale = _from_another_thread(otel)  # still the last reading taken
        assert stale[n.KV_UTILIZATION].value(slopolicy__kv__source="ledger") == held
        await anyio.sleep(1.5)  # the next refresh sees the blocks come back
        later = _from_another_thread(otel)
        assert later[n.KV_UTILIZATION].value(slopolicy__kv__source="ledger") == 0
        assert later[n.SLO_GOODPUT].value(slopolicy__lane="interactive") > 0
    assert p.threads == {loop}  # the policy was only ever read on its own loop


async def test_a_closed_gate_leaves_the_gauges(otel: Otel) -> None:
    async with Gate(_policy(), telemetry=otel.telemetry()):
        assert n.QUEUE_SIZE in otel.metrics()
    assert otel.telemetry().instruments.sources == ()
    metrics = otel.metrics()
    assert n.QUEUE_SIZE not in metrics or not metrics[n.QUEUE_SIZE].points
