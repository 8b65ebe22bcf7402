"""The seed incident, live: chat, a tenant pasting long prompts and a batch
burst against llama.cpp's llama-server, directly (its own FCFS queue) and
through a Gate, in one run.

Run from the repository root (needs the built server, see
``python -m slopolicy.testing.llama build``, and ``slopolicy[llama,openai]``)::

    python -m benchmarks.bench_live_seed            # about 6 minutes
    python -m benchmarks.bench_live_seed --quick    # shorter, lighter phases

One server (``--slots`` slots of ``--slot-context`` tokens, the tiny
random-weight model) serves every phase, the same arrivals each. Before them
a few short chats on the idle server measure its unloaded TTFT, which scales
the default lanes' targets (see :class:`benchmarks.live_seed.Targets`). The
gated phases run ``PolicyConfig()`` with its running cap (``-np``), KV pool
(``-c``) and those targets set, and the server's own scraper as its signals:
``default`` nothing more, ``llama`` set up for llama-server as
``docs/llama-cpp.md`` says (half the slots reserved for chat with the
interactive lane's ``seat_reserve``, requests pinned to slots by lane with
:class:`~slopolicy.adapters.slots.SlotPinning`); ``--gated`` picks phases
(``reserve`` and ``pinned`` are each half of ``llama``). TTFT is measured on
the client, call to first text, in every phase.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from benchmarks.live_seed import (
    Arrival,
    Record,
    Targets,
    Workload,
    add_server_options,
    chat_seats,
    gated_config,
    server_from,
    summary,
)
from slopolicy import Gate, Policy, Rejected
from slopolicy.adapters import EngineError
from slopolicy.adapters.llamacpp import LlamaCppScraper
from slopolicy.adapters.openai import GatedOpenAI
from slopolicy.adapters.slots import SlotPinning
from slopolicy.testing.llama import LlamaServer

_BODY = {"ignore_eos": True, "cache_prompt": False}
Send = Callable[[Arrival, Record], Awaitable[None]]


async def _first_text(stream: Any, started: float, record: Record) -> None:
    """Read ``stream`` to its end, noting the first text's arrival."""
    async for chunk in stream:
        if record.ttft is None and chunk.choices and chunk.choices[0].delta.content:
            record.ttft = anyio.current_time() - started


async def _send_until_taken(send: Send, record: Record, attempts: int = 100) -> None:
    """Send; a refused batch summary or long prompt is sent again after the
    refusal's ``Retry-After`` (as a batch runner or a user retries), chat never."""
    for _ in range(attempts - 1):
        try:
            await send(record.arrival, record)
        except Rejected as refused:
            if record.arrival.kind == "chat":
                raise
            await anyio.sleep(refused.retry_after or 1.0)
        else:
            return
    await send(record.arrival, record)


async def _run(arrivals: list[Arrival], send: Send) -> list[Record]:
    """Send every arrival at its time; their records once all ended."""
    records = [Record(arrival) for arrival in arrivals]
    origin = anyio.current_time()

    async def one(record: Record) -> None:
        await anyio.sleep_until(origin + record.arrival.at)
        try:
            await _send_until_taken(send, record)
            record.outcome = "completed"
        except Rejected as refused:
            record.outcome = f"rejected: {refused.code}"
        except EngineError as error:
            record.outcome = f"{error.code}: {error.message[:60]}"
        except Exception as error:  # the direct client's own errors
            record.outcome = f"error: {type(error).__name__}"
        record.ended = anyio.current_time() - origin

    async with anyio.create_task_group() as group:
        for record in records:
            group.start_soon(one, record)
    return records


async def direct(server: LlamaServer, arrivals: list[Arrival]) -> list[Record]:
    """Every request straight to the server, as a client would send it."""
    async with server.openai_client(max_retries=0, timeout=900) as client:

        async def send(arrival: Arrival, record: Record) -> None:
            started = anyio.current_time()
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": arrival.prompt}],
                max_tokens=arrival.max_tokens, stream=True, extra_body=_BODY,
            )  # fmt: skip
            async with stream:
                await _first_text(stream, started, record)

        return await _run(arrivals, send)


async def _report(policy: Policy, every: float = 5.0) -> None:
    """Print the policy's state every ``every`` seconds (``--verbose``)."""
    origin = anyio.current_time()
    while True:
        await anyio.sleep(every)
        stats = policy.statistics()
        print(
            f"  {anyio.current_time() - origin:6.1f} s: running {stats.running}, "
            f"queued {dict(stats.queued)}, {stats.overload.value}, ladder {stats.ladder_level}",
            flush=True,
        )


async def gated(
    server: LlamaServer,
    arrivals: list[Arrival],
    policy: Policy,
    *,
    pin: bool = False,
    verbose: bool = False,
) -> list[Record]:
    """The same requests through a Gate; batch summaries say their lane.
    ``pin``: each request pinned to a slot by lane (:class:`SlotPinning`)."""
    async with (
        LlamaCppScraper(server.url) as scraper,
        Gate(policy, signals=scraper, poll_every=1.0) as gate,
        server.openai_client(timeout=900) as client,
        anyio.create_task_group() as watch,
    ):
        if verbose:
            watch.start_soon(_report, policy)
        slots = SlotPinning(server.slots) if pin else None
        gated_client = GatedOpenAI(client, gate, slots=slots)

        async def send(arrival: Arrival, record: Record) -> None:
            started = anyio.current_time()
            stream = await gated_client.chat_stream(
                model="tiny", messages=[{"role": "user", "content": arrival.prompt}],
                max_tokens=arrival.max_tokens, tenant=arrival.tenant,
                lane="background" if arrival.kind == "batch" else None, extra_body=_BODY,
            )  # fmt: skip
            async with stream:
                await _first_text(stream, started, record)
            if stream.finished is not None:
                record.queue_wait = stream.finished.queue_wait

        records = await _run(arrivals, send)
        watch.cancel_scope.cancel()
    return records


async def unloaded_ttft(server: LlamaServer, workload: Workload, count: int = 12) -> float:
    """The median TTFT of short chats sent one at a time to the idle server."""
    chats = [arrival for arrival in workload.arrivals() if arrival.kind == "chat"][:count]
    times: list[float] = []
    for chat in chats:
        records = await direct(server, [dataclasses.replace(chat, at=0.0)])
        if records[0].ttft is not None:
            times.append(records[0].ttft)
    return statistics.median(times)


def _table(rows: dict[str, dict[str, float]], targets: Targets) -> str:
    p95, p99 = targets.chat()
    lines = [
        f"targets: chat TTFT p95 {p95:.3f} s, p99 {p99:.3f} s (scale {targets.scale:.2f}: "
        f"unloaded chat TTFT {targets.unloaded_ttft * 1000:.1f} ms here, "
        f"{targets.reference_ttft * 1000:.1f} ms on the reference engine)",
        "                 chats  TTFT p50    p95     p99   <=p95 tgt  <=p99 tgt  chat  heavy  batch"
        "  batch drained  queue p95",
    ]
    for name, row in rows.items():
        lines.append(
            f"{name:<16} {row['chats']:5.0f} {row['p50']:8.3f} {row['p95']:7.3f} {row['p99']:7.3f}"
            f" {row['within_p95']:9.1%} {row['within_p99']:10.1%} {row['chat_done']:5.0%}"
            f" {row['heavy_done']:6.0%} {row['batch_done']:6.0%} {row['batch_drained']:10.1f} s"
            f" {row['queue_p95']:8.3f} s"
        )
    return "\n".join(lines)


def _claim(rows: dict[str, dict[str, float]], targets: Targets, gated_name: str) -> str:
    p95, p99 = targets.chat()
    direct_row, gated_row = rows["direct (FCFS)"], rows[gated_name]
    over = direct_row["p95"] / p95
    checks = [
        f"direct chat p95 is {over:.1f}x its target (claim: >= 3x): {over >= 3}",
        f"{gated_name}: chat p99 {gated_row['p99']:.3f} s within {p99:.3f} s: "
        f"{gated_row['p99'] <= p99}",
        f"{gated_name}: every long prompt and batch job completed: "
        f"{gated_row['heavy_done'] == 1 and gated_row['batch_done'] == 1}",
    ]
    return "\n".join(checks)


@dataclasses.dataclass(frozen=True)
class _Phase:
    """A gated phase: its row's name, lane seat caps and reserves, slot pinning."""

    name: str
    caps: dict[str, int] | None = None
    reserve: dict[str, int] | None = None
    pin: bool = False


def _phases(slots: int) -> dict[str, _Phase]:
    """The gated phases ``--gated`` chooses from. ``llama``: the default policy
    set up for llama-server as docs/llama-cpp.md says (seats reserved for chat,
    slots pinned by lane); ``reserve`` and ``pinned``: each half of that alone;
    ``seats``: lane caps on heavy and background instead."""
    reserve = {"interactive": chat_seats(slots)}
    return {
        "default": _Phase("gated (default)"),
        "llama": _Phase("gated (llama.cpp)", reserve=reserve, pin=True),
        "reserve": _Phase("gated (reserve)", reserve=reserve),
        "pinned": _Phase("gated (pinning)", pin=True),
        "seats": _Phase("gated (lane caps)", caps={"heavy": 1, "background": slots // 2}),
    }


async def main_async(args: argparse.Namespace) -> None:
    server = server_from(args)
    phases = _phases(args.slots)
    chosen = [phases[key] for key in args.gated.split(",") if key]
    workload = Workload(duration=20.0, batch=24) if args.quick else Workload()
    if args.summaries is not None:
        workload = dataclasses.replace(workload, batch=args.summaries)
    # As long as a slot holds: the prompt, the chat template and the output.
    workload = dataclasses.replace(workload, heavy_tokens=args.slot_context - 440)
    context = server.context
    with server:
        targets = Targets.measured(await unloaded_ttft(server, workload), prompt_tokens=50)
        arrivals = workload.arrivals()
        rows = {"direct (FCFS)": summary(await direct(server, arrivals), targets)}
        notes: list[str] = []
        for phase in chosen:
            config = gated_config(targets, args.slots, context, phase.caps, phase.reserve)
            policy = Policy(config)
            records = await gated(server, arrivals, policy, pin=phase.pin, verbose=args.verbose)
            rows[phase.name] = summary(records, targets)
            missed = sorted({r.outcome for r in records if r.outcome != "completed"})
            level = policy.statistics().ladder_level
            notes.append(
                f"{phase.name}: ladder level {level} at the end; not completed: {missed or '-'}"
            )
    print(
        f"llama-server -np {args.slots} -c {context} -b {args.batch} -t {args.threads}; "
        f"{len(arrivals)} requests a phase; chat seat reserve {chat_seats(args.slots)}"
    )
    print(_table(rows, targets))
    for phase in chosen:
        print(_claim(rows, targets, phase.name))
    print("\n".join(notes))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 s phases, 24 summaries")
    add_server_options(parser)
    parser.add_argument("--verbose", action="store_true", help="the gate's state every 5 s")
    parser.add_argument("--summaries", type=int, default=None, help="batch jobs (default 64)")
    parser.add_argument(
        "--gated",
        default="default,llama",
        help="gated phases, comma-separated: default, llama, reserve, pinned, seats "
        "(default: default,llama)",
    )
    args = parser.parse_args(argv)
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()
