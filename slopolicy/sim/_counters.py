"""The engine's work counters, for :class:`~slopolicy.sim.engine_spec.EngineStatistics`."""

from __future__ import annotations

from slopolicy.sim.engine_spec import EngineStatistics

__all__ = ("Counters",)


class Counters:
    """Iterations, busy seconds, prefill and decode tokens and preemptions
    since the engine was made."""

    __slots__ = ("busy", "decode_tokens", "iterations", "preemptions", "prefill_tokens")

    def __init__(self) -> None:
        self.iterations = 0
        self.busy = 0.0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.preemptions = 0

    def ran(self, iterations: int, seconds: float, prefill: int, decode: int) -> None:
        """``iterations`` ran for ``seconds`` in all, computing ``prefill``
        prompt and ``decode`` decode tokens."""
        self.iterations += iterations
        self.busy += seconds
        self.prefill_tokens += prefill
        self.decode_tokens += decode

    def statistics(self, running: int, waiting: int, kv_usage: float) -> EngineStatistics:
        """The counters, with the engine's ``running``, ``waiting`` and ``kv_usage`` now."""
        return EngineStatistics(
            self.iterations,
            self.busy,
            self.prefill_tokens,
            self.decode_tokens,
            self.preemptions,
            running,
            waiting,
            kv_usage,
        )
