"""llama.cpp's ``llama-server`` scheduler, as an engine model (``kind: llama.cpp``).

It differs from vLLM's (:mod:`slopolicy.sim.engine`) in how requests meet
the batch:

- **fixed slots**: ``max_num_seqs`` slots (``-np``), each holding one
  request's context of up to ``max_model_len`` tokens, reserved: nothing is
  ever preempted;
- **slot choice**: at each iteration's start every waiting request (first
  come, first served) takes a free slot while one is free, the least
  recently released (a slot never used counts as oldest, the slots one
  iteration frees are freed in index order; among equals the highest
  index, as the server's ``<=`` scan picks);
- **prompt budget by slot index**: each decoding slot adds its next token,
  then the prompts being computed fill what is left of the ``-b`` budget
  (``max_num_batched_tokens``) in slot-index order, whichever arrived
  first: a prompt in slot 5 waits while slot 2's long one takes the budget.

Decodes batch across slots as vLLM's do, and iteration times are the same
profile's (each request started pays ``T_start``), with two of llama-server's
own costs:

- **micro-batches**: a step's batch is computed in runs of consecutive
  slots (:mod:`slopolicy.sim.ubatches`; ``ubatch_tokens`` is ``-ub``), each
  one beyond the first costs ``T_ub``;
- **wake-ups**: each token streamed costs ``T_wake`` for every request open
  on the server, running or queued in it (its result queue wakes the HTTP
  thread of each one);
- **a prompt's context beside decodes**: a decode that shares a
  micro-batch with a prompt's tokens (the prompt in the next slot) is
  charged ``beta_d`` per cell of the largest context there, so chat turns
  beside a long prompt being computed slow with it
  (:mod:`slopolicy.sim.ubatches`);
- **prompt rows computed one at a time**: a prompt with fewer than 64
  tokens in a micro-batch (a short one, or a long one cut to the size of a
  short one in the slot before it) is charged ``beta_d`` per cell each of
  those tokens attends over, not ``beta_p`` per pair (ggml-cpu's flash
  attention tiles only runs of 64 rows; :mod:`slopolicy.sim.ubatches`).
"""

from __future__ import annotations

from collections.abc import Mapping

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim._decode import Seq
from slopolicy.sim.engine import Engine, _Shape
from slopolicy.sim.engine_spec import EngineSpec, Scheduling
from slopolicy.sim.ubatches import split

__all__ = ("LlamaEngine", "make_engine")


class LlamaEngine(Engine):
    """The engine model with llama-server's slots; see the module docstring."""

    def __init__(
        self,
        spec: EngineSpec,
        *,
        scheduling: Scheduling = "fcfs",
        targets: Mapping[str, SLOTargets] | None = None,
    ) -> None:
        super().__init__(spec, scheduling=scheduling, targets=targets)
        self._slot_of: dict[str, int] = {}
        self._holder: list[Seq | None] = [None] * spec.max_num_seqs
        # When each slot was last released: the iteration, then the slot
        # index (the server frees a step's slots in index order); -1: never.
        self._used = [-1] * spec.max_num_seqs

    def slot(self, request_id: str) -> int | None:
        """The slot ``request_id`` runs in, or ``None`` when it runs in none."""
        return self._slot_of.get(request_id)

    def _free_slot(self) -> int | None:
        best = None
        for index, holder in enumerate(self._holder):
            if holder is None and (best is None or self._used[index] <= self._used[best]):
                best = index
        return best

    def _plan(self, now: float) -> tuple[list[tuple[Seq, int]], tuple[str, ...], int]:
        admitted = 0
        while self._waiting.head() is not None:
            index = self._free_slot()
            if index is None:
                break
            seq = self._waiting.pop()
            self._holder[index] = seq
            self._slot_of[seq.id] = index
            self._running.append(seq)
            self._prefilling.append(seq)
            admitted += 1
        budget = self.spec.max_num_batched_tokens - self._pool.count
        chunks: list[tuple[Seq, int]] = []
        for seq in sorted(self._prefilling, key=lambda s: self._slot_of[s.id]):
            chunk = min(seq.prefill_len - seq.computed, budget)
            if chunk:
                chunks.append((seq, chunk))
                budget -= chunk
        return chunks, (), admitted

    def _left(self, seq: Seq) -> None:
        index = self._slot_of.pop(seq.id)
        self._holder[index] = None
        self._used[index] = self._counts.iterations * len(self._holder) + index

    def _shape(self, chunks: list[tuple[Seq, int]]) -> _Shape:
        slot, pool = self._slot_of, self._pool
        decoding = sorted(
            (slot[seq.id], pool.context_of(seq)) for seq in self._running if seq.decoding
        )
        prompts = sorted((slot[seq.id], chunk, seq.computed) for seq, chunk in chunks)
        step = split(decoding, prompts, self.spec.ubatch)
        open_requests = len(self._running) + len(self._waiting)
        return _Shape(max(1, step.count), open_requests, step.context, step.pairs)

    def _head_can_start(self) -> bool:
        return self._waiting.head() is not None and len(self._running) < self.spec.max_num_seqs


def make_engine(
    spec: EngineSpec,
    *,
    scheduling: Scheduling = "fcfs",
    targets: Mapping[str, SLOTargets] | None = None,
) -> Engine:
    """The engine model ``spec.kind`` names (see :class:`~slopolicy.sim.engine.Engine`)."""
    kind = LlamaEngine if spec.kind == "llama.cpp" else Engine
    return kind(spec, scheduling=scheduling, targets=targets)
