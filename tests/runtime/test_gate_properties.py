"""Exactly one outcome per request and no leaks, whatever cancellations, engine
failures and deadlines do (DESIGN.md invariant 3), on asyncio and trio.

Clients arrive at random times and are cancelled at random times, which in
virtual time often coincide with the gate's own events (a grant, a deadline,
the engine's first token); engine streams fail at random token indexes;
deadlines pass while requests wait; hosts misbehave: their ``tokens_of`` and
``usage_of`` return counts that are no counts, they call ``finish`` with such a
count or the policy with a bad ``now`` (each must raise ``UsageError`` and
change nothing). Afterwards every request that reached the policy has exactly
one record, each client saw what its record says, and every slot, KV block,
quota lease and queue place is back.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slopolicy import Expired, Gate, Rejected, Request, UsageError, WouldBlock
from slopolicy.runtime import ArrivalRecord, Ticket
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine
from tests.runtime.conftest import assert_clean, policy

pytestmark = pytest.mark.anyio

_ACTIONS = ("stream", "stream", "await", "nowait", "stop_early", "finish_early")
# Times that coincide with events: the engine's first token (0.05), a token
# (0.01 steps), a deadline drawn from the same values.
_EDGES = st.sampled_from([0.0, 0.01, 0.05, 0.06, 0.1, 0.25, 0.5])


@dataclass(frozen=True, slots=True)
class Client:
    arrive: float
    tenant: str
    prompt: int
    max_new: int
    lane: str | None
    deadline: float | None
    output: int
    fail_at: int | None
    cancel_after: float | None
    action: str
    misuse: tuple[str, Any] | None


# Counts that are no counts (json.loads yields NaN) and times that are no
# monotonic seconds (a time.time_ns() value, an int too large for a float).
_BAD_COUNTS = st.sampled_from([math.nan, -1, "7", 10**400, 2**53 + 1, True, 2.0])
_BAD_NOWS = st.sampled_from([math.nan, math.inf, 1.7e18, 10**400, "1"])
_MISUSE = (
    st.none()
    | st.tuples(st.sampled_from(["tokens_of", "usage_of", "finish"]), _BAD_COUNTS)
    | st.tuples(st.just("now"), _BAD_NOWS)
)


clients = st.builds(
    Client,
    arrive=st.one_of(_EDGES, st.floats(0, 1.5)),
    tenant=st.sampled_from(["t0", "t1", "t2", "small"]),
    prompt=st.integers(0, 3000),
    max_new=st.integers(1, 40),
    lane=st.none() | st.sampled_from(["interactive", "heavy"]),
    deadline=st.none() | _EDGES | st.floats(0.01, 2.0),
    output=st.integers(0, 30),
    fail_at=st.none() | st.integers(0, 30),
    cancel_after=st.none() | _EDGES | st.floats(0, 3.0),
    action=st.sampled_from(_ACTIONS),
    misuse=_MISUSE,
)


def _expected(seen: str, client: Client) -> set[str]:
    """Outcomes a record may show for what the client saw."""
    if seen == "cancelled":
        # A grant, an expiry or a push out of a full queue can land in the same
        # instant the caller is cancelled: an expired or rejected record with a
        # cancelled caller is consistent.
        return {"cancelled", "expired", "rejected"}
    if seen == "done":
        # Stopping after the second chunk cuts the stream short only if it has one.
        stopped = client.action == "stop_early" and min(client.output, client.max_new) >= 2
        return {"cancelled"} if stopped else {"completed"}
    return {seen}


def _misuse(gate: Gate, ticket: Ticket, client: Client) -> None:
    """A host's bad call: it raises ``UsageError`` and changes nothing (nothing
    awaits in between, so nothing else can)."""
    if client.misuse is None or client.misuse[0] not in ("now", "finish"):
        return
    kind, bad = client.misuse
    before = gate.policy.statistics()
    call: Callable[[], object] = partial(gate.policy.tokens, ticket.id, 1, now=bad)
    if kind == "finish":
        call = partial(ticket.finish, output_tokens=bad)
    with pytest.raises(UsageError):
        call()
    assert gate.policy.statistics() == before
    assert not ticket.released


def _counter(client: Client, source: str) -> Callable[[Chunk], Any]:
    """``tokens_of`` or ``usage_of`` for the client: a bad count from the second chunk on."""
    bad = client.misuse[1] if client.misuse is not None and client.misuse[0] == source else None

    def count(chunk: Chunk) -> Any:
        if bad is not None and chunk.index >= 1:
            return bad
        return chunk.tokens if source == "tokens_of" else None

    return count


async def _run(
    gate: Gate,
    engine: FakeEngine,
    client: Client,
    key: str,
    seen: dict[str, str],
    count_errors: dict[str, UsageError | None],
) -> None:
    await anyio.sleep(client.arrive)
    now = anyio.current_time()
    request = Request(
        id=key,
        tenant=client.tenant,
        prompt_tokens=client.prompt,
        max_new_tokens=client.max_new,
        lane=client.lane,
        deadline=None if client.deadline is None else now + client.deadline,
    )
    stream_args = {"output_tokens": min(client.output, client.max_new), "fail_at": client.fail_at}
    seen[key] = "unsubmitted"
    with anyio.move_on_after(
        math.inf if client.cancel_after is None else client.cancel_after
    ) as scope:
        try:
            if client.action == "nowait":
                with gate.admit_nowait(request) as ticket:
                    seen[key] = "submitted"
                    _misuse(gate, ticket, client)
                    await engine.complete(ticket.request, **stream_args)
            elif client.action == "await":
                ticket = await gate.admit(request)
                with ticket:
                    seen[key] = "submitted"
                    _misuse(gate, ticket, client)
                    await engine.complete(ticket.request, **stream_args)
            else:
                async with gate.admit(request) as ticket:
                    seen[key] = "submitted"
                    _misuse(gate, ticket, client)
                    stream = ticket.track(
                        engine.stream(ticket.request, **stream_args),
                        tokens_of=_counter(client, "tokens_of"),
                        usage_of=_counter(client, "usage_of"),
                    )
                    count_errors[key] = ticket.count_error  # None so far
                    async for chunk in stream:
                        if client.action == "stop_early" and chunk.index >= 1:
                            break
                        if client.action == "finish_early":
                            ticket.finish(output_tokens=chunk.index + 1)
                            break
                    count_errors[key] = ticket.count_error
            seen[key] = "done"
        except Expired:
            seen[key] = "expired"
        except Rejected:
            seen[key] = "rejected"
        except WouldBlock:
            seen[key] = "cancelled"
        except EngineError:
            seen[key] = "failed"
    if scope.cancelled_caught:
        seen[key] = "cancelled"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(clients, min_size=1, max_size=24))
async def test_every_request_ends_once_and_nothing_leaks(plan: list[Client]) -> None:
    p = policy()
    engine = FakeEngine(ttft=0.05, per_token=0.01)
    records: list[ArrivalRecord] = []
    seen: dict[str, str] = {}
    count_errors: dict[str, UsageError | None] = {}
    before = len(anyio.get_running_tasks())
    async with Gate(p, on_end=records.append) as gate:
        async with anyio.create_task_group() as group:
            for index, client in enumerate(plan):
                group.start_soon(_run, gate, engine, client, f"c{index}", seen, count_errors)
        assert gate.statistics().waiting == 0
        assert_clean(p)
    assert len(anyio.get_running_tasks()) == before
    assert engine.active == 0
    assert engine.peak <= p.max_running
    counts = Counter(record.id for record in records)
    assert all(count == 1 for count in counts.values()), counts
    assert len(records) == p.statistics().submitted
    outcomes = {record.id: record.outcome for record in records}
    for index, client in enumerate(plan):
        key = f"c{index}"
        if key not in outcomes:  # cancelled before it reached the policy
            assert seen[key] in ("cancelled", "unsubmitted"), (key, seen[key])
            continue
        if count_errors.get(key) is not None:  # only a bad callback count sets it
            assert client.misuse is not None
            assert client.misuse[0] in ("tokens_of", "usage_of")
        assert outcomes[key] in _expected(seen[key], client), (
            key,
            seen[key],
            outcomes[key],
            client,
        )
