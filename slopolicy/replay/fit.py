"""Fit the simulator's iteration cost model to measured probes (pure, no I/O).

Two kinds of probe, each predicted with :class:`~slopolicy.sim.profiles.EngineProfile`'s
own formula (``T_iter = T_cpu + sqrt(T_w² + (a·N)²) + β_p·Σ c·(k + c/2) + β_d·Σ ctx + T_s·S
+ T_start·R``):

- :class:`Prefill`: one request of ``prompt`` tokens alone on the engine;
  its TTFT is the iterations that compute its prompt in chunks of
  ``chunk`` tokens (``max_num_batched_tokens``), as the simulator runs it;
- :class:`Decode`: ``batch`` requests decoding together at ``context``
  tokens each (on average over the probe); its TPOT is one iteration;
- :class:`Start`: ``requests`` tiny requests sent at once, from the first
  sent to the last first token: one iteration that starts them all (what
  sets ``T_start`` apart: a decode samples without starting).

The fit minimises the squared *relative* error (the probes span three orders
of magnitude): a log-spaced grid over ``(T_w, a)``, refined around the best
point, and for each point the non-negative least-squares
``(T_cpu, T_s, T_start, β_p, β_d)``, which enter linearly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.profiles import EngineProfile

__all__ = ("Decode", "Prefill", "Probe", "Residual", "Start", "fit_profile", "predict")


@dataclass(frozen=True, slots=True)
class Prefill:
    """A lone prompt of ``prompt`` tokens computed ``chunk`` at a time; ``seconds``: its TTFT."""

    prompt: int
    chunk: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Decode:
    """``batch`` requests decoding at ``context`` tokens each; ``seconds``: their TPOT."""

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


Probe = Prefill | Decode | Start


@dataclass(frozen=True, slots=True)
class Residual:
    """One probe, what it measured and what the fitted profile predicts (s)."""

    probe: Probe
    predicted: float

    @property
    def error(self) -> float:
        """``(predicted - measured) / measured``."""
        return (self.predicted - self.probe.seconds) / self.probe.seconds


def _chunks(probe: Prefill) -> list[tuple[int, int]]:
    """``(chunk, cached before it)`` of each prefill iteration."""
    return [
        (min(probe.chunk, probe.prompt - done), done)
        for done in range(0, probe.prompt, max(1, probe.chunk))
    ]


def _terms(probe: Probe, t_w: float, a: float) -> tuple[float, ...]:
    """``(fixed, n_cpu, sampled, started, pairs, context)``: the probe's time is
    ``fixed + T_cpu·n_cpu + T_s·sampled + T_start·started + β_p·pairs + β_d·context``
    at ``(T_w, a)``."""
    if isinstance(probe, Decode):
        knee = math.hypot(t_w, a * probe.batch)
        return knee, 1.0, float(probe.batch), 0.0, 0.0, probe.batch * probe.context
    if isinstance(probe, Start):
        n = float(probe.requests)
        knee = math.hypot(t_w, a * n * probe.prompt)
        return knee, 1.0, n, n, n * probe.prompt * probe.prompt / 2, 0.0
    chunks = _chunks(probe)
    knee = sum(math.hypot(t_w, a * c) for c, _ in chunks)
    pairs = sum(c * (k + c / 2) for c, k in chunks)
    return knee, float(len(chunks)), 1.0, 1.0, pairs, 0.0


def predict(profile: EngineProfile, probe: Probe) -> float:
    """The probe's time under ``profile``, in seconds."""
    if isinstance(probe, Decode):
        context = round(probe.batch * probe.context)
        return profile.iteration_time(probe.batch, 0.0, context, probe.batch)
    if isinstance(probe, Start):
        n, p = probe.requests, probe.prompt
        return profile.iteration_time(n * p, n * p * p / 2, 0, n, n)
    chunks = _chunks(probe)
    last = len(chunks) - 1
    return sum(
        profile.iteration_time(c, c * (k + c / 2), 0, int(i == last), int(i == 0))
        for i, (c, k) in enumerate(chunks)
    )


#: The terms that enter linearly: T_cpu, T_s, T_start, β_p, β_d.
_LINEAR = 5


def _solve(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float] | None:
    """Least squares ``rows·x ≈ targets`` by the normal equations; ``None`` if singular."""
    n = len(rows[0])
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    vector = [sum(r[i] * t for r, t in zip(rows, targets, strict=True)) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda row: abs(matrix[row][col]))
        if abs(matrix[pivot][col]) < 1e-300:
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


def _linear(probes: Sequence[Probe], t_w: float, a: float) -> tuple[float, list[float]]:
    """The best non-negative ``(T_cpu, T_s, T_start, β_p, β_d)`` at ``(T_w, a)`` and
    its sum of squared relative errors (every subset of free terms is tried)."""
    terms = [_terms(p, t_w, a) for p in probes]
    best: tuple[float, list[float]] = (math.inf, [0.0] * _LINEAR)
    for size in range(_LINEAR + 1):
        for free in itertools.combinations(range(_LINEAR), size):
            coefficients = [0.0] * _LINEAR
            if free:
                rows = [
                    [t[1 + i] / p.seconds for i in free] for t, p in zip(terms, probes, strict=True)
                ]
                rest = [1 - t[0] / p.seconds for t, p in zip(terms, probes, strict=True)]
                solved = _solve(rows, rest)
                if solved is None or min(solved) < 0:
                    continue
                for index, value in zip(free, solved, strict=True):
                    coefficients[index] = value
            error = sum(
                (
                    (t[0] + sum(c * x for c, x in zip(coefficients, t[1:], strict=True)))
                    / p.seconds
                    - 1
                )
                ** 2
                for t, p in zip(terms, probes, strict=True)
            )
            if error < best[0]:
                best = (error, coefficients)
    return best


def _grid(low: float, high: float, points: int) -> list[float]:
    ratio = (high / low) ** (1 / (points - 1))
    return [low * ratio**i for i in range(points)]


def fit_profile(
    name: str, probes: Sequence[Probe], kv_tokens: int, *, refinements: int = 3
) -> tuple[EngineProfile, tuple[Residual, ...]]:
    """The profile that fits ``probes`` best (see the module doc) and each
    probe's residual; :class:`UsageError` without a probe of each kind."""
    if not any(isinstance(p, Prefill) for p in probes) or not any(
        isinstance(p, Decode) for p in probes
    ):
        raise UsageError("calibration needs prefill and decode probes")
    if any(not (math.isfinite(p.seconds) and p.seconds > 0) for p in probes):
        raise UsageError("every probe must have measured a time > 0 seconds")
    fastest = min(p.seconds for p in probes)
    longest = max((p.prompt for p in probes if isinstance(p, Prefill)), default=1)
    spans = [(fastest * 1e-3, fastest * 1.5), (1e-9, 2 * max(p.seconds for p in probes) / longest)]
    best = (math.inf, 0.0, 0.0, [0.0] * _LINEAR)
    for _ in range(refinements + 1):
        for t_w in [0.0, *_grid(*spans[0], 24)]:
            for a in [0.0, *_grid(*spans[1], 24)]:
                error, linear = _linear(probes, t_w, a)
                if error < best[0]:
                    best = (error, t_w, a, linear)
        _, t_w, a, _ = best
        spans = [
            (max(t_w, spans[0][0]) / 3, max(t_w, spans[0][0]) * 3),
            (max(a, spans[1][0]) / 3, max(a, spans[1][0]) * 3),
        ]
    _, t_w, a, (t_cpu, t_sample, t_start, beta_p, beta_d) = best
    if t_w + t_cpu <= 0:
        t_cpu = 1e-6  # an iteration always takes some time
    fitted = EngineProfile(name, t_w, a, beta_d, beta_p, kv_tokens, t_cpu, t_sample, t_start)
    return fitted, tuple(Residual(p, predict(fitted, p)) for p in probes)
