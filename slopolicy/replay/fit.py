"""Fit the simulator's iteration cost model to measured probes (pure, no I/O).

Each probe is predicted with :class:`~slopolicy.sim.profiles.EngineProfile`'s
own formula, one engine step at a time (``T_iter = T_cpu + sqrt(T_w² + (a·N)²)
+ β_p·Σ c·(k + c/2) + β_d·Σ ctx + T_s·S + T_start·R + T_ub·(U - 1) + T_wake·S·W``):

- :class:`Prefill`: one request of ``prompt`` tokens alone on the engine;
  its TTFT is the steps that compute its prompt in chunks of ``chunk``
  tokens (``max_num_batched_tokens``), as the simulator runs it;
- :class:`Decode`: ``batch`` requests decoding together at ``context``
  tokens each (on average over the probe), in ``ubatches`` micro-batches
  (llama.cpp: slots not side by side), with ``waiting`` more requests queued
  on the engine behind them; its TPOT is one step;
- :class:`Mixed`: a prompt computed while ``batch`` requests decode beside
  it (in the slots just before its own: two micro-batches a step on
  llama.cpp, cut as :func:`slopolicy.sim.ubatches.split` cuts them); its
  TTFT is the steps that compute it, each with the decodes;
- :class:`Start`: ``requests`` tiny requests sent at once, from the first
  sent to the last first token: one step that starts them all (what sets
  ``T_start`` apart: a decode samples without starting).

The fit minimises the squared *relative* error (the probes span three orders
of magnitude): a log-spaced grid over ``(T_w, a)``, refined around the best
point, and for each point the non-negative least squares (Lawson-Hanson) of
the terms that enter linearly, ``(T_cpu, T_s, T_start, β_p, β_d, T_ub,
T_wake)``. A term no probe moves stays 0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.profiles import EngineProfile
from slopolicy.sim.ubatches import split

__all__ = (
    "LINEAR_TERMS",
    "Decode",
    "Mixed",
    "Prefill",
    "Probe",
    "Residual",
    "Start",
    "fit_profile",
    "predict",
)


@dataclass(frozen=True, slots=True)
class Prefill:
    """A lone prompt of ``prompt`` tokens computed ``chunk`` at a time; ``seconds``: its TTFT."""

    prompt: int
    chunk: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Decode:
    """``batch`` requests decoding at ``context`` tokens each, in ``ubatches``
    micro-batches, ``waiting`` more queued behind them; ``seconds``: their TPOT."""

    batch: int
    context: float
    seconds: float
    ubatches: int = 1
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class Mixed:
    """A prompt of ``prompt`` tokens computed ``chunk`` tokens a step, less one
    for each of ``batch`` requests decoding beside it at ``context`` tokens;
    ``seconds``: its TTFT."""

    prompt: int
    chunk: int
    batch: int
    context: float
    seconds: float


@dataclass(frozen=True, slots=True)
class Start:
    """``requests`` prompts of ``prompt`` tokens sent at once, one output token
    each; ``seconds``: from the first sent to the last first token."""

    requests: int
    prompt: int
    seconds: float


Probe = Prefill | Decode | Mixed | Start


@dataclass(frozen=True, slots=True)
class Residual:
    """One probe, what it measured and what the fitted profile predicts (s)."""

    probe: Probe
    predicted: float

    @property
    def error(self) -> float:
        """``(predicted - measured) / measured``."""
        return (self.predicted - self.probe.seconds) / self.probe.seconds


@dataclass(frozen=True, slots=True)
class _Step:
    """One engine step of a probe: ``EngineProfile.iteration_time``'s arguments."""

    tokens: int
    pairs: float
    context: float
    sampled: int
    started: int
    ubatches: int
    open_requests: int


def _prompt_steps(prompt: int, chunk: int, batch: int = 0, context: float = 0.0) -> list[_Step]:
    """The steps computing one prompt, ``chunk`` tokens each less the ``batch``
    decodes beside it. With decodes (llama.cpp's slots, the decodes in the
    slots just before the prompt's, ``-ub`` as ``chunk``) each step is cut as
    :func:`slopolicy.sim.ubatches.split` cuts it: a micro-batch with a token
    of each, charged the prompt's context, then the prompt's rest; alone, a
    chunk is one run of pairs."""
    room = max(1, chunk - batch)
    decoding = [(slot, round(context)) for slot in range(batch)]
    steps = []
    for done in range(0, prompt, room):
        c = min(room, prompt - done)
        last = done + c == prompt
        if batch:
            cut = split(decoding, [(batch, c, done)], chunk)
            pairs, cells, ubatches = cut.pairs, cut.context, cut.count
        else:
            pairs, cells, ubatches = c * (done + c / 2), 0, 1
        steps.append(
            _Step(batch + c, pairs, cells, batch + int(last), int(done == 0), ubatches, batch + 1)
        )
    return steps


@functools.lru_cache(maxsize=256)
def _steps(probe: Probe) -> list[_Step]:
    """The engine steps the probe's time is made of."""
    if isinstance(probe, Decode):
        b = probe.batch
        return [_Step(b, 0.0, b * probe.context, b, 0, probe.ubatches, b + probe.waiting)]
    if isinstance(probe, Start):
        n, p = probe.requests, probe.prompt
        return [_Step(n * p, n * p * p / 2, 0.0, n, n, 1, n)]
    if isinstance(probe, Mixed):
        return _prompt_steps(probe.prompt, probe.chunk, probe.batch, probe.context)
    return _prompt_steps(probe.prompt, probe.chunk)


#: The profile's terms that enter a probe's time linearly, in the fit's order.
LINEAR_TERMS = ("t_cpu", "t_sample", "t_start", "beta_p", "beta_d", "t_ubatch", "t_wake")


def _columns(probe: Probe) -> list[float]:
    """How much the probe's time grows per unit of each of :data:`LINEAR_TERMS`
    (the time is linear in them: the profile's own formula, read term by term)."""
    base = _unit()
    at_base = predict(base, probe)
    return [
        at_base if term == "t_cpu" else predict(_unit(term), probe) - at_base
        for term in LINEAR_TERMS
    ]


def _unit(term: str | None = None, t_w: float = 0.0, a: float = 0.0) -> EngineProfile:
    """A profile with ``T_cpu`` 1 s, ``term`` 1 (the other linear terms 0)."""
    values = dict.fromkeys(LINEAR_TERMS, 0.0) | {"t_cpu": 1.0}
    if term is not None:
        values[term] = 1.0
    return EngineProfile("unit", t_w=t_w, a=a, kv_tokens=1, **values)


def _fixed(probe: Probe, knee: EngineProfile) -> float:
    """The probe's time under ``knee`` (:func:`_unit` at some ``(T_w, a)``)
    with every linear term 0."""
    return predict(knee, probe) - len(_steps(probe))


def predict(profile: EngineProfile, probe: Probe) -> float:
    """The probe's time under ``profile``, in seconds."""
    return sum(
        profile.iteration_time(
            step.tokens,
            step.pairs,
            round(step.context),
            step.sampled,
            step.started,
            ubatches=step.ubatches,
            open_requests=step.open_requests,
        )
        for step in _steps(probe)
    )


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """``matrix·x = vector`` by Gauss-Jordan with pivoting; ``None`` if singular."""
    n = len(vector)
    matrix = [row[:] for row in matrix]
    vector = vector[:]
    for col in range(n):
        pivot = max(range(col, n), key=lambda row: abs(matrix[row][col]))
        if abs(matrix[pivot][col]) < 1e-12:
            return None
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        vector[col], vector[pivot] = vector[pivot], vector[col]
        for row in range(n):
            if row != col:
                factor = matrix[row][col] / matrix[col][col]
                matrix[row] = [
                    x - factor * y for x, y in zip(matrix[row], matrix[col], strict=True)
                ]
                vector[row] -= factor * vector[col]
    return [vector[i] / matrix[i][i] for i in range(n)]


@dataclass(frozen=True, slots=True)
class _Normal:
    """Least squares ``A·x ≈ b`` by its normal equations: ``gram = AᵀA`` and
    ``atb = Aᵀb`` with ``A``'s columns scaled to unit length by ``scale``."""

    gram: list[list[float]]
    scale: list[float]
    last: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, rows: Sequence[Sequence[float]]) -> _Normal:
        n = len(rows[0])
        scale = [math.sqrt(sum(row[j] ** 2 for row in rows)) or 1.0 for j in range(n)]
        gram = [
            [sum(row[i] * row[j] for row in rows) / (scale[i] * scale[j]) for j in range(n)]
            for i in range(n)
        ]
        return cls(gram, scale)

    def atb(self, rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
        return [
            sum(row[j] * t for row, t in zip(rows, targets, strict=True)) / self.scale[j]
            for j in range(len(self.scale))
        ]

    def subset(self, atb: list[float], free: list[int]) -> list[float]:
        """The least squares over the columns ``free`` (the others 0); zeros if singular."""
        solved = _solve([[self.gram[i][j] for j in free] for i in free], [atb[i] for i in free])
        full = [0.0] * len(atb)
        for index, value in zip(free, solved or [0.0] * len(free), strict=True):
            full[index] = value
        return full

    def nnls(self, atb: list[float]) -> list[float]:
        """Lawson and Hanson's active set, on the scaled columns; unscaled ``x >= 0``.
        It starts from the last call's active set where that is feasible (the
        fit calls it at neighbouring grid points)."""
        n = len(atb)
        x = [0.0] * n
        active = list(self.last)
        if active:
            warm = self.subset(atb, active)
            if all(warm[j] > 0 for j in active):
                x = warm
            else:
                active = []
        for _ in range(3 * n):
            gradient = [atb[j] - sum(self.gram[j][k] * x[k] for k in range(n)) for j in range(n)]
            waiting = [j for j in range(n) if j not in active and gradient[j] > 1e-10]
            if not waiting:
                break
            active.append(max(waiting, key=lambda j: gradient[j]))
            while active:
                trial = self.subset(atb, sorted(active))
                if all(trial[j] > 0 for j in active):
                    x = trial
                    break
                # Step towards the trial until a term reaches 0, and drop it.
                steps = [
                    x[j] / (x[j] - trial[j]) for j in active if trial[j] <= 0 < x[j] - trial[j]
                ]
                alpha = min(steps, default=0.0)
                x = [v + alpha * (t - v) for v, t in zip(x, trial, strict=True)]
                active = [j for j in active if x[j] > 1e-12]
        self.last[:] = sorted(active)
        return [max(0.0, v) / self.scale[j] for j, v in enumerate(x)]


def nnls(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """Non-negative least squares ``rows·x ≈ targets``, ``x >= 0`` (Lawson and
    Hanson's active set); a column of zeros stays 0."""
    normal = _Normal.of(rows)
    return normal.nnls(normal.atb(rows, targets))


def _linear(
    probes: Sequence[Probe], rows: Sequence[Sequence[float]], normal: _Normal, t_w: float, a: float
) -> tuple[float, list[float]]:
    """The best non-negative linear terms (:data:`LINEAR_TERMS`) at ``(T_w, a)``
    and their sum of squared relative errors (``rows``: each probe's
    :func:`_columns` over its time; ``normal``: their normal equations)."""
    knee = _unit(t_w=t_w, a=a)
    rest = [1 - _fixed(p, knee) / p.seconds for p in probes]
    coefficients = normal.nnls(normal.atb(rows, rest))
    error = sum(
        (sum(c * x for c, x in zip(row, coefficients, strict=True)) - r) ** 2
        for row, r in zip(rows, rest, strict=True)
    )
    return error, coefficients


def _grid(low: float, high: float, points: int) -> list[float]:
    ratio = (high / low) ** (1 / (points - 1))
    return [low * ratio**i for i in range(points)]


def fit_profile(
    name: str, probes: Sequence[Probe], kv_tokens: int, *, refinements: int = 3
) -> tuple[EngineProfile, tuple[Residual, ...]]:
    """The profile that fits ``probes`` best (see the module doc) and each
    probe's residual; :class:`UsageError` without a prefill and a decode probe."""
    if not any(isinstance(p, Prefill) for p in probes) or not any(
        isinstance(p, Decode) for p in probes
    ):
        raise UsageError("calibration needs prefill and decode probes")
    if any(not (math.isfinite(p.seconds) and p.seconds > 0) for p in probes):
        raise UsageError("every probe must have measured a time > 0 seconds")
    fastest = min(p.seconds for p in probes)
    longest = max((p.prompt for p in probes if isinstance(p, Prefill)), default=1)
    spans = [(fastest * 1e-3, fastest * 1.5), (1e-9, 2 * max(p.seconds for p in probes) / longest)]
    best = (math.inf, 0.0, 0.0, [0.0] * len(LINEAR_TERMS))
    rows = [[c / p.seconds for c in _columns(p)] for p in probes]
    normal = _Normal.of(rows)
    for _ in range(refinements + 1):
        for t_w in [0.0, *_grid(*spans[0], 24)]:
            for a in [0.0, *_grid(*spans[1], 24)]:
                error, linear = _linear(probes, rows, normal, t_w, a)
                if error < best[0]:
                    best = (error, t_w, a, linear)
        _, t_w, a, _ = best
        spans = [
            (max(t_w, spans[0][0]) / 3, max(t_w, spans[0][0]) * 3),
            (max(a, spans[1][0]) / 3, max(a, spans[1][0]) * 3),
        ]
    _, t_w, a, linear = best
    terms = dict(zip(LINEAR_TERMS, linear, strict=True))
    if t_w + terms["t_cpu"] <= 0:
        terms["t_cpu"] = 1e-6  # an iteration always takes some time
    fitted = EngineProfile(name, t_w=t_w, a=a, kv_tokens=kv_tokens, **terms)
    return fitted, tuple(Residual(p, predict(fitted, p)) for p in probes)
