"""``slopolicy calibrate``: probe an engine and fit the simulator's profile to it.

Probes, one kind at a time on an otherwise idle engine, timed on the client
as a replay times requests (streamed, send to first choice, first to last):

- **prefill**: one request alone at each of ``prompts`` lengths (those that
  fit a slot), ``repeats`` times, one output token; the median TTFT;
- **decode**: ``batch`` requests at once for each batch size (up to the
  engine's slots) with short prompts and ``decode_tokens`` output tokens,
  and one request with a long prompt (the context term), ``repeats`` times;
  the median TPOT;
- **start**: ``slots`` tiny requests at once (8-token prompts, one output
  token), ``3·repeats`` times; the median time from the first sent to the
  last first token, which sets each request's fixed cost ``T_start`` apart.

Medians, because other work on the engine's machine only adds time: run it
on an otherwise idle engine and machine.

The KV pool, the slots and their context come from what the engine reports
(:meth:`Target.facts <slopolicy.replay.target.Target.facts>`); the chunk a
prompt is computed in is ``max_num_batched_tokens`` (llama.cpp's ``-b``,
2048 unless started otherwise: it does not report it). On llama.cpp the
engine file's ``kind`` is ``llama.cpp`` (the simulator's slot model,
:mod:`slopolicy.sim.llama_engine`), on any other engine ``vllm``. The fit is
:func:`~slopolicy.replay.fit.fit_profile`; the result is an engine file
(:mod:`slopolicy.sim.engine_file`) ``simulate --engine`` and ``demo --engine`` read.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from slopolicy.errors import UsageError
from slopolicy.replay.fit import Decode, Prefill, Probe, Residual, Start, fit_profile
from slopolicy.replay.player import Attempt
from slopolicy.replay.prompts import build_prompts
from slopolicy.replay.senders import direct_sender
from slopolicy.replay.target import EngineFacts, Target
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.workload import SimRequest

__all__ = ("BATCHES", "PROMPTS", "Calibration", "calibrate", "residual_data")

PROMPTS = (64, 256, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fitted engine and each probe's residual."""

    engine: EngineSpec
    facts: EngineFacts
    residuals: tuple[Residual, ...]

    def describe(self) -> str:
        """The fitted terms and the residuals, for people."""
        p = self.engine.profile
        lines = [
            f"{p.name}: T_cpu {p.t_cpu * 1e3:.3f} ms, T_w {p.t_w * 1e3:.3f} ms, "
            f"T_s {p.t_sample * 1e3:.3f} ms/sequence, T_start {p.t_start * 1e3:.3f} ms/request, "
            f"a {p.a * 1e6:.3f} us/token, beta_p {p.beta_p * 1e6:.5f} us/pair, "
            f"beta_d {p.beta_d * 1e6:.4f} us/context token; KV {p.kv_tokens:,} tokens, "
            f"max_num_seqs {self.engine.max_num_seqs}, max_model_len {self.engine.model_len:,}, "
            f"max_num_batched_tokens {self.engine.max_num_batched_tokens:,}, "
            f"kind {self.engine.kind}",
            "probe                          measured    fitted   error",
        ]
        for residual in self.residuals:
            probe = residual.probe
            if isinstance(probe, Prefill):
                label = f"prefill {probe.prompt:>6} tokens"
            elif isinstance(probe, Start):
                label = f"start   {probe.requests:>2} x {probe.prompt} tokens"
            else:
                label = f"decode  batch {probe.batch:>2}, ctx {probe.context:>6.0f}"
            lines.append(
                f"{label:<30} {probe.seconds * 1e3:8.2f} ms {residual.predicted * 1e3:8.2f} ms"
                f" {residual.error:+7.1%}"
            )
        worst = max(abs(r.error) for r in self.residuals)
        lines.append(f"largest error {worst:.1%} over {len(self.residuals)} probes")
        return "\n".join(lines)


async def _timed(
    target: Target, facts: EngineFacts, prompts: Sequence[tuple[str, int]]
) -> list[tuple[float, Attempt]]:
    """Send ``(prompt, max_tokens)`` requests at once; when each was sent, and what it saw."""
    sent = [(0.0, Attempt()) for _ in prompts]
    async with target.openai_client(timeout=600.0) as client:
        send = direct_sender(client, facts.model, facts.extra_body())

        async def one(index: int, prompt: str, tokens: int) -> None:
            request = SimRequest(f"probe-{index}", 0.0, "calibrate", 1, tokens, tokens)
            sent[index] = (anyio.current_time(), sent[index][1])
            await send(request, prompt, sent[index][1])

        async with anyio.create_task_group() as group:
            for index, (prompt, tokens) in enumerate(prompts):
                group.start_soon(one, index, prompt, tokens)
    return sent


async def _prompt(target: Target, seed: int, tokens: int, offset: int) -> str:
    """A prompt of ``tokens`` tokens as the engine counts a request."""
    request = SimRequest("p", 0.0, "calibrate", tokens, 1, 1)
    return (await build_prompts([request], target.count, offset=offset, seed=seed))["p"]


async def calibrate(
    target: Target,
    *,
    prompts: Sequence[int] = PROMPTS,
    batches: Sequence[int] = BATCHES,
    repeats: int = 5,
    decode_tokens: int = 64,
    max_num_batched_tokens: int = 2048,
    name: str | None = None,
) -> Calibration:
    """Probe ``target`` and fit its profile (see the module doc)."""
    if repeats < 1 or decode_tokens < 2:
        raise UsageError("repeats must be >= 1 and decode_tokens >= 2")
    facts = await target.facts()
    room = (facts.slot_context or 8192) - decode_tokens - 8
    lengths = sorted({p for p in prompts if 1 <= p <= room})
    slots = facts.slots or max(batches)
    sizes = sorted({b for b in batches if 1 <= b <= slots})
    if not lengths or not sizes:
        raise UsageError(
            f"no probe fits the engine (slot context {facts.slot_context}, {slots} slots)"
        )
    seeds = itertools.count()
    offset = await target.prompt_offset(facts) if facts.tokenizes else 0
    probes: list[Probe] = []
    for length in lengths:
        seen = []
        for _ in range(repeats):
            prompt = await _prompt(target, next(seeds), length, offset)
            ((started, attempt),) = await _timed(target, facts, [(prompt, 1)])
            seen.append(_ttft(started, attempt))
        probes.append(Prefill(length, max_num_batched_tokens, statistics.median(seen)))
    for size, length in [(b, 32) for b in sizes] + [(1, lengths[-1])]:
        tpots = []
        for _ in range(repeats):
            batch = [
                (await _prompt(target, next(seeds), length, offset), decode_tokens)
                for _ in range(size)
            ]
            tpots += [_tpot(attempt) for _, attempt in await _timed(target, facts, batch)]
        probes.append(Decode(size, length + decode_tokens / 2, statistics.median(tpots)))
    probes.append(await _start_probe(target, facts, slots, 3 * repeats, seeds, offset))
    kv = facts.kv_tokens or slots * (facts.slot_context or 8192)
    llama = facts.kind == "llama.cpp"
    if llama and facts.slot_context:
        kv = max(kv, slots * facts.slot_context)  # every slot holds its context
    label = name or f"{facts.kind}:{facts.model.rsplit('/', 1)[-1]}"
    profile, residuals = fit_profile(label, probes, kv)
    engine = EngineSpec(
        profile, max_num_seqs=slots,
        max_num_batched_tokens=max(max_num_batched_tokens, slots),
        max_model_len=facts.slot_context, block_size=1 if llama else 16,
        kind="llama.cpp" if llama else "vllm",
    )  # fmt: skip
    return Calibration(engine, facts, residuals)


#: The prompt of each start probe's requests, in tokens.
_TINY = 8


async def _start_probe(
    target: Target,
    facts: EngineFacts,
    requests: int,
    repeats: int,
    seeds: itertools.count[int],
    offset: int,
) -> Start:
    """``requests`` tiny requests at once, ``repeats`` times (see the module doc)."""
    seen = []
    for _ in range(repeats):
        batch = [(await _prompt(target, next(seeds), _TINY, offset), 1) for _ in range(requests)]
        sent = await _timed(target, facts, batch)
        last = max(_ttft(started, attempt) + started for started, attempt in sent)
        seen.append(last - min(started for started, _ in sent))
    return Start(requests, _TINY, statistics.median(seen))


def _ttft(started: float, attempt: Attempt) -> float:
    if attempt.first is None:
        raise UsageError("a prefill probe produced no token: is the engine serving?")
    return attempt.first - started


def _tpot(attempt: Attempt) -> float:
    if attempt.first is None or attempt.finished is None or attempt.output < 2:
        raise UsageError(
            "a decode probe produced under 2 tokens: does the engine honour ignore_eos?"
        )
    return (attempt.finished - attempt.first) / (attempt.output - 1)


def residual_data(residual: Residual) -> dict[str, Any]:
    """One residual as an engine file keeps it (seconds)."""
    probe = residual.probe
    kind = {Prefill: "prefill", Decode: "decode", Start: "start"}[type(probe)]
    return {"probe": kind, **dataclasses.asdict(probe), "predicted": residual.predicted}
