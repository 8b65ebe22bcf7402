"""The seed incident's workload for a real llama-server, and how its runs are scored.

Used by :mod:`benchmarks.bench_live_seed`. Times are seconds from the start
of a phase; prompts are built from common English words that are one token
in both Llama 3's tokenizer (the server's) and cl100k (the gate's counter),
so both count a prompt alike.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from slopolicy import PolicyConfig
from slopolicy.replay.prompts import words as text
from slopolicy.sim.profiles import profile
from slopolicy.testing.llama import LlamaServer, find_llama_server, tiny_model

__all__ = (
    "Arrival",
    "Record",
    "Targets",
    "Workload",
    "add_server_options",
    "chat_seats",
    "gated_config",
    "percentile",
    "raise_priority",
    "server_from",
    "summary",
)

#: The engine the default policy's targets are written for (the simulator's profile).
REFERENCE = "llama3-8b/h100"


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request: when (s), who, what kind, its prompt and output budget."""

    at: float
    kind: str  # "chat", "heavy" or "batch"
    tenant: str
    prompt: str
    max_tokens: int


@dataclass(slots=True)
class Record:
    """How one request went, measured on the client (TTFT: call to first text)."""

    arrival: Arrival
    ttft: float | None = None
    outcome: str = "pending"  # completed, or why not
    ended: float | None = None
    queue_wait: float | None = None  # in the gate's queue (gated phases)


@dataclass(frozen=True, slots=True)
class Workload:
    """Chat from many tenants, one tenant pasting prompts as long as a slot
    holds, and a burst of batch summaries.

    Attributes:
        duration: seconds over which chat arrives (Poisson, ``chat_rate``/s).
        chat_tenants: tenants the chat comes from.
        heavy_every: seconds between long prompts, from ``heavy_start``.
        heavy_tokens: a long prompt's length in tokens.
        batch: summaries, arriving over one second at ``batch_at``.
        batch_tokens: a summary's prompt length in tokens.
    """

    duration: float = 40.0
    chat_rate: float = 1.5
    chat_tenants: int = 16
    chat_words: tuple[int, int] = (20, 60)
    chat_output: int = 16
    heavy_start: float = 4.0
    heavy_every: float = 10.0
    heavy_tokens: int = 9800
    heavy_output: int = 32
    batch: int = 64
    batch_at: float = 8.0
    batch_tokens: int = 1000
    batch_output: int = 32
    seed: int = 7

    def arrivals(self) -> list[Arrival]:
        """Every request of one phase, by arrival time (the same each call)."""
        rng = random.Random(self.seed)
        found: list[Arrival] = []
        at = rng.expovariate(self.chat_rate)
        while at < self.duration:
            words = rng.randint(*self.chat_words)
            tenant = f"chat-{rng.randrange(self.chat_tenants)}"
            found.append(Arrival(at, "chat", tenant, text(rng, words), self.chat_output))
            at += rng.expovariate(self.chat_rate)
        heavy = self.heavy_start
        while heavy < self.duration:
            found.append(
                Arrival(heavy, "heavy", "acme", text(rng, self.heavy_tokens), self.heavy_output)
            )
            heavy += self.heavy_every
        for number in range(self.batch):
            at = self.batch_at + number / max(1, self.batch)
            prompt = text(rng, self.batch_tokens)
            found.append(Arrival(at, "batch", "nightly-batch", prompt, self.batch_output))
        return sorted(found, key=lambda arrival: arrival.at)


@dataclass(frozen=True, slots=True)
class Targets:
    """The default lanes' latency targets scaled to this engine.

    ``scale`` = the engine's unloaded TTFT for a short chat over the reference
    engine's (:data:`REFERENCE`, whose speed the defaults were written for)
    for the same prompt: every lane's TTFT, TPOT and end-to-end target is
    multiplied by it, so each target keeps its multiple of an unloaded chat.
    """

    unloaded_ttft: float
    reference_ttft: float

    @property
    def scale(self) -> float:
        return self.unloaded_ttft / self.reference_ttft

    @classmethod
    def measured(cls, unloaded_ttft: float, prompt_tokens: int) -> Targets:
        engine = profile(REFERENCE)
        reference = engine.iteration_time(prompt_tokens, prompt_tokens * prompt_tokens / 2, 0)
        return cls(unloaded_ttft, reference)

    def chat(self) -> tuple[float, float]:
        """The interactive lane's p95 and p99 TTFT targets, seconds."""
        slo = PolicyConfig().lanes[0].slo
        assert slo.ttft_p95_s is not None
        assert slo.ttft_p99_s is not None
        return slo.ttft_p95_s * self.scale, slo.ttft_p99_s * self.scale


def chat_seats(slots: int) -> int:
    """Seats reserved for the interactive lane on a server with ``slots``
    slots: half of them. llama-server's prefill is compute-bound: one or two
    prompts fill each iteration's ``-b`` budget, so batch work in more than
    half the slots adds interference, not throughput, while chat's
    concurrency rises as the machine slows."""
    return slots // 2


def gated_config(
    targets: Targets,
    slots: int,
    context: int,
    seats: dict[str, int] | None = None,
    reserve: dict[str, int] | None = None,
    base: PolicyConfig | None = None,
) -> PolicyConfig:
    """``base`` (default ``PolicyConfig()``) with its running cap at the
    server's slots (``-np``), its KV pool the server's (``-c`` tokens) and
    every lane time in seconds (the SLO targets and the longest queue wait)
    scaled; nothing else changed. ``seats`` (lane -> ``max_running``) and
    ``reserve`` (lane -> ``seat_reserve``) are what the other rows add."""
    data = (base or PolicyConfig()).model_dump(mode="json")
    for lane in data["lanes"]:
        for name in ("ttft_p95_s", "ttft_p99_s", "tpot_p95_s", "e2e_p95_s"):
            if lane["slo"][name] is not None:
                lane["slo"][name] *= targets.scale
        lane["max_queue_wait_s"] *= targets.scale
        if seats and lane["name"] in seats:
            lane["max_running"] = seats[lane["name"]]
        if reserve and lane["name"] in reserve:
            lane["seat_reserve"] = reserve[lane["name"]]
    data["engine"]["max_running"] = slots
    data["kv"] = {"num_blocks": context // 16, "block_size": 16}
    return PolicyConfig.from_dict(data)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (``inf`` counts: a request with no first token)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(records: list[Record], targets: Targets) -> dict[str, float]:
    """Chat TTFT p50/p95/p99 (a chat that never got a token counts as
    infinite), attainment (chats with a first token within the p95 target,
    then within the p99 one) and the heavy and batch completion shares."""
    p95_target, p99_target = targets.chat()
    chats = [record for record in records if record.arrival.kind == "chat"]
    ttfts = [math.inf if record.ttft is None else record.ttft for record in chats]

    def done(kind: str) -> float:
        group = [record for record in records if record.arrival.kind == kind]
        return sum(record.outcome == "completed" for record in group) / max(1, len(group))

    batch_ends = [r.ended for r in records if r.arrival.kind == "batch" and r.ended is not None]
    waits = [record.queue_wait for record in chats if record.queue_wait is not None]
    return {
        "chats": len(chats),
        "p50": percentile(ttfts, 0.50),
        "p95": percentile(ttfts, 0.95),
        "p99": percentile(ttfts, 0.99),
        "within_p95": sum(t <= p95_target for t in ttfts) / max(1, len(ttfts)),
        "within_p99": sum(t <= p99_target for t in ttfts) / max(1, len(ttfts)),
        "chat_done": done("chat"),
        "heavy_done": done("heavy"),
        "batch_done": done("batch"),
        "batch_drained": max(batch_ends, default=math.nan),
        "queue_p95": percentile(waits, 0.95),
    }


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """The live benchmarks' server: ``--slots``, ``--slot-context``, ``--batch``, ``--threads``."""
    parser.add_argument("--slots", type=int, default=8, help="-np (default 8)")
    parser.add_argument("--slot-context", type=int, default=10_240, help="tokens per slot")
    parser.add_argument("--batch", type=int, default=256, help="-b and -ub (default 256)")
    parser.add_argument("--threads", type=int, default=2, help="-t (default 2)")


def server_from(args: argparse.Namespace) -> LlamaServer:
    """The server :func:`add_server_options` describes, on the tiny model (not started)."""
    found = find_llama_server()
    if found is None:
        raise SystemExit("llama-server is not built: python -m slopolicy.testing.llama build")
    return LlamaServer(
        found, tiny_model(found.vocab), slots=args.slots, context=args.slots * args.slot_context,
        threads=args.threads, extra_args=["-b", str(args.batch), "-ub", str(args.batch)],
    )  # fmt: skip


def raise_priority(nice: int) -> str:
    """Go on in a session of one's own whose autogroup's CPU weight is ``nice``
    (the server started after inherits it); what was done, for the log.

    On Linux with autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``),
    the scheduler shares the CPUs between sessions first and a nice value
    counts only within its session, so on a machine shared with other
    people's jobs only the session's own weight keeps them from slowing the
    engine, which calibration and replay would then measure. A process group
    leader cannot start a session: it forks and waits for the child (passing
    on SIGINT and SIGTERM), which goes on.
    """
    autogroup = Path("/proc/self/autogroup")
    if not autogroup.exists():
        return "no autogroups here: priority unchanged"
    if os.getpid() == os.getpgrp():
        child = os.fork()
        if child:
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, lambda got, _: os.kill(child, got))
            _, status = os.waitpid(child, 0)
            sys.stdout.flush()
            os._exit(os.waitstatus_to_exitcode(status))
    os.setsid()
    try:
        autogroup.write_text(f"{nice}\n")
    except OSError as error:
        return f"own session, but its autogroup's nice stays 0 ({error.strerror})"
    return f"own session, autogroup nice {nice} ({autogroup.read_text().strip()})"
