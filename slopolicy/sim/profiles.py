"""Calibrated iteration cost models for one continuous-batching engine.

One engine iteration computes ``N`` tokens: a prefill chunk of ``c_i`` tokens
for each prefilling request ``i`` (``k_i`` of its tokens already cached) and
one token for each decoding request ``j`` (context ``ctx_j``). It takes::

    T_iter = T_cpu + sqrt(T_w² + (a·N)²) + β_p·Σ c_i·(k_i + c_i/2) + β_d·Σ ctx_j + T_s·S + T_start·R
             + T_ub·(U - 1) + T_wake·S·W

seconds, ``S`` the sequences it samples a token for (each decoding request and
each prompt it finishes), ``R`` the requests it starts, ``U`` the micro-batches
the engine computes the step's batch in and ``W`` the requests open on the
engine (running or queued in it). The square root is
a smooth knee between the weight-read floor ``T_w`` (memory-bound decode)
and compute-bound ``a·N``; ``β_p`` prices the attention of prefill (query,
key) pairs and ``β_d`` the KV reads of decode.
The profiles are fitted from Vidur's published per-operator profiles (median
error 2-5%; see ``SIMULATOR.md``). ``T_cpu`` is the scheduler and sampling
overhead, a free parameter of 0-3 ms: 3 ms reproduces the sanity checks
(Llama-3-8B on an A100 decodes one stream at about 13 ms per token and
prefills a 2k-token prompt in about 150 ms). ``T_s``, the cost of one
sequence's logits and sampling, is 0 in the published profiles (it is folded
into ``a`` there); ``slopolicy calibrate`` fits it, and on llama.cpp on CPUs,
whose sampler runs on the CPU over the whole vocabulary, it is what a decode
batch costs per request. ``T_start``, the fixed cost of starting one request
(on llama.cpp its HTTP handling, tokenizing and slot start, which share the
engine's CPUs), is 0 in the published profiles; ``slopolicy calibrate`` fits
it from many tiny requests. The last two terms are llama.cpp's
(:mod:`slopolicy.sim.llama_engine`), 0 in the published profiles: ``T_ub``
is each extra graph computation when a step's batch is split into ``U``
micro-batches (llama-server splits a batch of several slots into runs of
consecutive slots), and ``T_wake`` is the cost, per token streamed, of each
request open on the server (each token's result wakes the HTTP thread of
every open request, queued ones included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from slopolicy.errors import UsageError

__all__ = ("PROFILES", "EngineProfile", "profile")

_TERMS = ("t_w", "a", "beta_d", "beta_p", "t_cpu", "t_sample", "t_start", "t_ubatch", "t_wake")


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """The cost model of one model on one GPU; all times in seconds.

    Attributes:
        name: ``model/gpu``, e.g. ``llama3-8b/a100``.
        t_w: weight-read floor of an iteration.
        a: compute time per token in the iteration.
        beta_d: time per context token of each decoding request.
        beta_p: time per (query, key) pair of prefill attention.
        kv_tokens: tokens the KV cache holds (80 GB, 90% memory use).
        t_cpu: fixed scheduling and sampling overhead per iteration.
        t_sample: logits and sampling per sequence sampled in the iteration.
        t_start: fixed cost of each request the iteration starts.
        t_ubatch: each micro-batch beyond the first the iteration computes.
        t_wake: per token streamed, per request open on the engine.
    """

    name: str
    t_w: float
    a: float
    beta_d: float
    beta_p: float
    kv_tokens: int
    t_cpu: float = 0.003
    t_sample: float = 0.0
    t_start: float = 0.0
    t_ubatch: float = 0.0
    t_wake: float = 0.0

    def __post_init__(self) -> None:
        for name in _TERMS:
            value = getattr(self, name)
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise UsageError(f"profile {self.name!r}: {name} must be finite and >= 0")
        if self.t_w + self.t_cpu <= 0:
            raise UsageError(f"profile {self.name!r}: an iteration must take some time")
        if isinstance(self.kv_tokens, bool) or self.kv_tokens < 1:
            raise UsageError(f"profile {self.name!r}: kv_tokens must be >= 1")

    def iteration_time(
        self,
        tokens: int,
        prefill_pairs: float,
        decode_context: int,
        sampled: int = 0,
        started: int = 0,
        *,
        ubatches: int = 1,
        open_requests: int = 0,
    ) -> float:
        """Seconds for one iteration computing ``tokens`` tokens, with
        ``prefill_pairs = Σ c_i·(k_i + c_i/2)``, ``decode_context = Σ ctx_j``,
        ``sampled`` sequences sampled, ``started`` requests started, the
        batch computed in ``ubatches`` micro-batches and ``open_requests``
        requests open on the engine."""
        knee = math.sqrt(self.t_w * self.t_w + (self.a * tokens) ** 2)
        linear = self.beta_p * prefill_pairs + self.beta_d * decode_context
        sampling = sampled * (self.t_sample + self.t_wake * open_requests)
        split = self.t_ubatch * (ubatches - 1)
        return self.t_cpu + knee + linear + sampling + self.t_start * started + split

    def decode_time(
        self,
        iterations: int,
        requests: int,
        context: int,
        *,
        ubatches: int = 1,
        open_requests: int = 0,
    ) -> float:
        """Seconds for ``iterations`` pure-decode iterations of ``requests``
        requests holding ``context`` tokens at the start; each iteration adds
        one token per request, so iteration ``i`` reads ``context + requests·i``
        (``ubatches`` and ``open_requests`` as :meth:`iteration_time`'s, the
        same in each iteration)."""
        k, n = iterations, requests
        fixed = self._decode_fixed(n, ubatches, open_requests)
        return k * fixed + self.beta_d * (k * context + n * k * (k - 1) / 2)

    def decode_iterations(
        self,
        seconds: float,
        requests: int,
        context: int,
        *,
        ubatches: int = 1,
        open_requests: int = 0,
    ) -> int:
        """The fewest pure-decode iterations (>= 1) that last at least
        ``seconds`` (see :meth:`decode_time`); a huge number for infinity."""
        if seconds <= 0:
            return 1
        if math.isinf(seconds):
            return 1 << 62
        # decode_time(k) = quad·k² + linear·k: solve, then settle float rounding.
        extra = {"ubatches": ubatches, "open_requests": open_requests}
        quad = self.beta_d * requests / 2
        fixed = self._decode_fixed(requests, ubatches, open_requests)
        linear = fixed + self.beta_d * context - quad
        if quad > 0:
            root = (-linear + math.sqrt(linear * linear + 4 * quad * seconds)) / (2 * quad)
        else:
            root = seconds / linear
        k = max(math.ceil(root), 1)
        while k > 1 and self.decode_time(k - 1, requests, context, **extra) >= seconds:
            k -= 1
        while self.decode_time(k, requests, context, **extra) < seconds:
            k += 1
        return k

    def _decode_fixed(self, requests: int, ubatches: int = 1, open_requests: int = 0) -> float:
        knee = math.sqrt(self.t_w * self.t_w + (self.a * requests) ** 2)
        sampling = requests * (self.t_sample + self.t_wake * open_requests)
        return self.t_cpu + knee + sampling + self.t_ubatch * (ubatches - 1)

    def with_cpu(self, t_cpu: float) -> EngineProfile:
        """This profile with another ``t_cpu`` (seconds)."""
        return replace(self, t_cpu=t_cpu)


_US = 1e-6
_MS = 1e-3

#: The named profiles of ``SIMULATOR.md``, keyed by ``model/gpu``.
PROFILES: dict[str, EngineProfile] = {
    p.name: p
    for p in (
        EngineProfile("llama2-7b/a100", 9.1 * _MS, 65 * _US, 0.40 * _US, 0.0034 * _US, 112_000),
        EngineProfile("llama2-7b/h100", 5.5 * _MS, 21 * _US, 0.24 * _US, 0.0011 * _US, 112_000),
        EngineProfile("llama3-8b/a100", 9.8 * _MS, 68 * _US, 0.10 * _US, 0.0034 * _US, 427_008),
        EngineProfile("llama3-8b/h100", 5.5 * _MS, 22 * _US, 0.06 * _US, 0.0011 * _US, 427_008),
    )
}


def profile(name: str) -> EngineProfile:
    """The profile called ``name`` (case-insensitive); :class:`UsageError` names the known ones."""
    found = PROFILES.get(name.lower())
    if found is None:
        raise UsageError(f"unknown engine profile {name!r}; profiles are {', '.join(PROFILES)}")
    return found
