"""The scripted run the telemetry tests check, on virtual time: admit, queue,
reject, complete, fail, and a ladder step."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import anyio
from opentelemetry.trace import Span, Tracer

from slopolicy import EngineSignals, Finished, Gate, Message, Rejected, Request
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.runtime import Ticket
from slopolicy.telemetry import Telemetry
from slopolicy.testing.fake_engine import Chunk, EngineError, FakeEngine
from tests.runtime.conftest import policy

CHAT = (Message("user", "hello"),)


@dataclass
class Script:
    """What the run saw, to hold the telemetry against."""

    finished: dict[str, Finished] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    host: Span | None = None
    lanes: dict[str, SLOSnapshot] = field(default_factory=dict)


def _tokens(chunk: Chunk) -> int:
    return chunk.tokens


def chat(name: str, tenant: str = "acme", **fields: object) -> Request:
    values: dict[str, object] = {"messages": CHAT, "prompt_tokens": 50, "model": "m"}
    values.update(fields)
    return Request(id=name, tenant=tenant, **values)  # type: ignore[arg-type]


async def run_script(telemetry: Telemetry, host: Tracer) -> tuple[Gate, Script]:
    """Run the script through a gate and return it still open (the caller
    reads the gauges, then exits it) with what happened.

    1. ``first`` (acme, interactive) runs alone, inside the host's span;
    2. ``queued`` (acme) arrives while ``first`` holds the only engine slot;
    3. ``too-long`` (acme) asks the heavy lane for 5,000 prompt tokens: rejected;
    4. ``broken`` (globex) fails in the engine after 2 of 6 tokens;
    5. the engine reports KV at 99%: the ladder climbs to drop_optional_features;
    6. ``degraded`` (acme) asks for best_of=3, which the rung drops.
    """
    script = Script()
    engine = FakeEngine(ttft=0.05, per_token=0.01, tokens_per_chunk=2)
    p = policy(
        engine={"max_running": 1},
        # The seed's rungs (no favor_interactive): the first climb drops
        # optional features, which step 6 then sees applied.
        ladder={
            "enabled": True,
            "evaluate_every_s": 1.0,
            "dwell_s": 100.0,
            "rungs": [
                "drop_optional_features",
                "compress_prompt",
                "cheaper_model",
                "pause_background",
                "shed",
            ],
        },
    )
    gate = Gate(p, telemetry=telemetry)
    await gate.__aenter__()

    async def client(request: Request, fail_at: int | None = None, traced: bool = False) -> None:
        ticket: Ticket | None = None
        with contextlib.ExitStack() as stack:
            if traced:
                script.host = stack.enter_context(host.start_as_current_span("POST /chat"))
            try:
                async with gate.admit(request) as ticket:
                    stream = engine.stream(ticket.request, fail_at=fail_at)
                    with contextlib.suppress(EngineError):
                        async for _ in ticket.track(stream, tokens_of=_tokens):
                            pass
            except Rejected as error:
                script.rejected.append(error)
        if ticket is not None and ticket.finished is not None:
            script.finished[request.id] = ticket.finished

    async with anyio.create_task_group() as group:
        group.start_soon(client, chat("first", max_new_tokens=4), None, True)
        await anyio.sleep(0.01)
        group.start_soon(client, chat("queued", max_new_tokens=4))
        await anyio.sleep(0.01)
        await client(Request(id="too-long", tenant="acme", lane="heavy", prompt_tokens=5000))
    await client(chat("broken", tenant="globex", max_new_tokens=6), fail_at=2)
    gate.observe(EngineSignals(anyio.current_time(), kv_usage=0.99))
    await anyio.sleep(1.5)
    await client(chat("degraded", max_new_tokens=4, best_of=3))
    return gate, script
