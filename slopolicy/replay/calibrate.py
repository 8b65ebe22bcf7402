"""``slopolicy calibrate``: probe an engine and fit the simulator's profile to it.

Probes (:mod:`slopolicy.replay.probes`), timed on the client as a replay
times requests (streamed, send to first choice, first to last):

- **prefill**: one request alone at each of ``prompts`` lengths (those that
  fit a slot), one output token: its TTFT;
- **decode**: ``batch`` requests at once for each batch size (up to the
  engine's slots) with short prompts and ``decode_tokens`` output tokens,
  and one request with a long prompt (the context term): their TPOT;
- **start**: ``slots`` tiny requests at once (8-token prompts, one output
  token), three times a round: from the first sent to the last first token,
  which sets each request's fixed cost ``T_start`` apart;
- on llama.cpp, with the decodes pinned to slots 0, 1, ... (``id_slot``):
  **scattered**, a decode batch in every other slot (as many micro-batches
  a step as requests: ``T_ub``); **queued**, every slot decoding with
  sixteen times as many tiny requests queued behind them (``T_wake``); **mixed**, a
  prompt computed while requests decode beside it.

**Rounds.** Other work on the engine's machine moves every probe, and it
comes and goes: so each of ``repeats`` rounds runs every probe once, in turn
(the order reversed every other round), rather than one probe ``repeats``
times in a row. The profile is fitted to each probe's median over the
rounds; each round is also fitted alone, and :meth:`Calibration.describe`
prints every fitted term's spread over the rounds (and each probe's), which
says how far to trust the file.

The KV pool, the slots and their context come from what the engine reports
(:meth:`Target.facts <slopolicy.replay.target.Target.facts>`); the chunk a
prompt is computed in is ``max_num_batched_tokens`` (llama.cpp's ``-b``,
2048 unless started otherwise: it does not report it) and a micro-batch
``ubatch_tokens`` (``-ub``; default the same). On llama.cpp the engine
file's ``kind`` is ``llama.cpp`` (the simulator's slot model,
:mod:`slopolicy.sim.llama_engine`), on any other engine ``vllm``. The fit is
:func:`~slopolicy.replay.fit.fit_profile`; the result is an engine file
(:mod:`slopolicy.sim.engine_file`) ``simulate --engine`` and ``demo --engine`` read.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slopolicy.errors import UsageError
from slopolicy.replay.fit import (
    Decode,
    Mixed,
    Prefill,
    Probe,
    Residual,
    Start,
    fit_profile,
)
from slopolicy.replay.probes import Prober
from slopolicy.replay.target import EngineFacts, Target
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import EngineProfile

__all__ = ("BATCHES", "PROMPTS", "Calibration", "calibrate", "residual_data")

PROMPTS = (64, 256, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8)

#: The terms as :meth:`Calibration.describe` prints them: name, unit, scale.
_SHOWN = (
    ("T_cpu", "t_cpu", "ms", 1e3),
    ("T_w", "t_w", "ms", 1e3),
    ("T_s", "t_sample", "ms/sequence", 1e3),
    ("T_start", "t_start", "ms/request", 1e3),
    ("T_ub", "t_ubatch", "ms/micro-batch", 1e3),
    ("T_wake", "t_wake", "us/token/open request", 1e6),
    ("a", "a", "us/token", 1e6),
    ("beta_p", "beta_p", "us/pair", 1e6),
    ("beta_d", "beta_d", "us/context token", 1e6),
)


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fitted engine, each probe's residual (its median over the rounds),
    each round's probes and the profile each round alone fits."""

    engine: EngineSpec
    facts: EngineFacts
    residuals: tuple[Residual, ...]
    rounds: tuple[tuple[Probe, ...], ...] = ()
    round_fits: tuple[EngineProfile, ...] = ()

    def spread(self) -> dict[str, tuple[float, float, float]]:
        """Each fitted term's ``(least, median, most)`` over the rounds' own fits."""
        found = {}
        for _, term, _, _ in _SHOWN:
            values = sorted(getattr(p, term) for p in self.round_fits)
            if values:
                found[term] = (values[0], statistics.median(values), values[-1])
        return found

    def describe(self) -> str:
        """The fitted terms, their spread over the rounds and the residuals, for people."""
        p = self.engine.profile
        terms = ", ".join(
            f"{label} {getattr(p, term) * scale:.4g} {unit}" for label, term, unit, scale in _SHOWN
        )
        lines = [
            f"{p.name}: {terms}; KV {p.kv_tokens:,} tokens, "
            f"max_num_seqs {self.engine.max_num_seqs}, max_model_len {self.engine.model_len:,}, "
            f"max_num_batched_tokens {self.engine.max_num_batched_tokens:,}, "
            f"ubatch {self.engine.ubatch:,}, kind {self.engine.kind}",
        ]
        if len(self.round_fits) > 1:
            lines.append(f"each term fitted to each of {len(self.round_fits)} rounds alone:")
            for label, term, unit, scale in _SHOWN:
                low, mid, high = self.spread()[term]
                lines.append(
                    f"  {label:<8} {getattr(p, term) * scale:10.4g}   rounds {low * scale:.4g} - "
                    f"{mid * scale:.4g} - {high * scale:.4g} {unit}"
                )
        lines.append("probe                                  measured    fitted   error   rounds")
        for index, residual in enumerate(self.residuals):
            seen = sorted(r[index].seconds for r in self.rounds if index < len(r))
            spread = f"{seen[0] * 1e3:.1f}-{seen[-1] * 1e3:.1f} ms" if len(seen) > 1 else ""
            lines.append(
                f"{_label(residual.probe):<38} {residual.probe.seconds * 1e3:8.2f} ms"
                f" {residual.predicted * 1e3:8.2f} ms {residual.error:+7.1%}   {spread}"
            )
        worst = max(abs(r.error) for r in self.residuals)
        lines.append(f"largest error {worst:.1%} over {len(self.residuals)} probes")
        return "\n".join(lines)


def _label(probe: Probe) -> str:
    if isinstance(probe, Prefill):
        return f"prefill {probe.prompt:>6} tokens"
    if isinstance(probe, Start):
        return f"start   {probe.requests:>2} x {probe.prompt} tokens"
    if isinstance(probe, Mixed):
        return f"mixed   {probe.prompt:>6} tokens beside {probe.batch} decodes"
    label = f"decode  batch {probe.batch:>2}, ctx {probe.context:>6.0f}"
    if probe.ubatches > 1:
        label += f", {probe.ubatches} ubatches"
    if probe.waiting:
        label += f", {probe.waiting} queued"
    return label


#: One probe, measured once.
_Measure = Callable[[], Awaitable[Probe]]


def _plan(
    prober: Prober, lengths: Sequence[int], sizes: Sequence[int], slots: int, chunk: int
) -> list[_Measure]:
    """Every probe of one round, in order."""

    def bind(method: Callable[..., Awaitable[Probe]], *args: Any) -> _Measure:
        return lambda: method(*args)

    plan = [bind(prober.prefill, length, chunk) for length in lengths]
    plan += [bind(prober.decode, range(size)) for size in sizes]
    plan.append(bind(prober.decode, [0], lengths[-1]))
    plan += [bind(prober.start, slots)] * 3
    if prober.pins and slots >= 3:
        plan.append(bind(prober.decode, range(0, 2 * min(4, (slots + 1) // 2), 2)))
        plan.append(bind(prober.queued, slots, 16 * slots))
        beside = min(4, slots - 1)
        plan.append(bind(prober.mixed, beside, min(2048, lengths[-1]), chunk))
    return plan


async def calibrate(
    target: Target,
    *,
    prompts: Sequence[int] = PROMPTS,
    batches: Sequence[int] = BATCHES,
    repeats: int = 5,
    decode_tokens: int = 64,
    max_num_batched_tokens: int = 2048,
    ubatch_tokens: int | None = None,
    name: str | None = None,
) -> Calibration:
    """Probe ``target`` in ``repeats`` rounds and fit its profile (see the module doc)."""
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
    offset = await target.prompt_offset(facts) if facts.tokenizes else 0
    prober = Prober(target, facts, offset, decode_tokens)
    plan = _plan(prober, lengths, sizes, slots, max_num_batched_tokens)
    rounds: list[list[Probe]] = []
    for number in range(repeats):
        order = range(len(plan)) if number % 2 == 0 else range(len(plan) - 1, -1, -1)
        seen: dict[int, Probe] = {}
        for index in order:
            seen[index] = await plan[index]()
        rounds.append(_combined([seen[index] for index in range(len(plan))]))
    probes = [_median([r[i] for r in rounds]) for i in range(len(rounds[0]))]
    kv = facts.kv_tokens or slots * (facts.slot_context or 8192)
    llama = facts.kind == "llama.cpp"
    if llama and facts.slot_context:
        kv = max(kv, slots * facts.slot_context)  # every slot holds its context
    label = name or f"{facts.kind}:{facts.model.rsplit('/', 1)[-1]}"
    profile, residuals = fit_profile(label, probes, kv)
    fits = tuple(fit_profile(label, list(r), kv)[0] for r in rounds) if repeats > 1 else ()
    engine = EngineSpec(
        profile, max_num_seqs=slots,
        max_num_batched_tokens=max(max_num_batched_tokens, slots),
        max_model_len=facts.slot_context, block_size=1 if llama else 16,
        kind="llama.cpp" if llama else "vllm", ubatch_tokens=ubatch_tokens if llama else None,
    )  # fmt: skip
    return Calibration(engine, facts, residuals, tuple(tuple(r) for r in rounds), fits)


def _combined(measured: Sequence[Probe]) -> list[Probe]:
    """One round's probes with repeats of a probe side by side (the start
    probe's three) as one, at their median time."""
    combined: list[list[Probe]] = []
    for probe in measured:
        if combined and _alike(combined[-1][0], probe):
            combined[-1].append(probe)
        else:
            combined.append([probe])
    return [_median(group) for group in combined]


def _median(group: Sequence[Probe]) -> Probe:
    """One probe at the median time of ``group`` (the same probe measured
    several times; a mixed or decode probe at its median context too, which
    the queued and mixed probes measure as they go)."""
    seconds = statistics.median(p.seconds for p in group)
    first = group[0]
    if isinstance(first, Mixed | Decode):
        context = statistics.median(p.context for p in group if isinstance(p, Mixed | Decode))
        return dataclasses.replace(first, seconds=seconds, context=context)
    return dataclasses.replace(first, seconds=seconds)


def _alike(one: Probe, other: Probe) -> bool:
    """The same probe, whatever it measured (a mixed probe's context varies a little)."""
    if isinstance(one, Mixed) and isinstance(other, Mixed):
        return (one.prompt, one.batch, one.chunk) == (other.prompt, other.batch, other.chunk)
    return type(one) is type(other) and dataclasses.replace(
        one, seconds=0.0
    ) == dataclasses.replace(other, seconds=0.0)


def residual_data(residual: Residual) -> dict[str, Any]:
    """One residual as an engine file keeps it (seconds)."""
    probe = residual.probe
    kind = {Prefill: "prefill", Decode: "decode", Start: "start", Mixed: "mixed"}[type(probe)]
    return {"probe": kind, **dataclasses.asdict(probe), "predicted": residual.predicted}
