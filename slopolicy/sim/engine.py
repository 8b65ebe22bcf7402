"""A deterministic model of a continuous-batching engine, one iteration at a time.

It follows vLLM v1's scheduler: each iteration has a token budget
(``max_num_batched_tokens``); running requests are served first (one token for
a decoding request, a chunk of its prompt for a prefilling one, capped by
``long_prefill_token_threshold`` when set), then
waiting requests are admitted while fewer than ``max_num_seqs`` run, budget is
left and the KV blocks for their first chunk are free (the head is never
skipped: a head that does not fit blocks the queue). KV is allocated in
``block_size``-token blocks as tokens are computed; when the running requests
need more than is free, the engine preempts by recompute (the victim loses its
KV and waits again at the front, to prefill its prompt and outputs anew): the
latest admitted request under FCFS, the lowest priority (then latest arrival)
under priority scheduling. No request is admitted in an iteration that
preempted. The iteration that computes a prompt's last chunk samples its first
token. Times come from :class:`~slopolicy.sim.profiles.EngineProfile`.
:meth:`Engine.abort` stops a request as vLLM's ``abort`` does: its seat and
KV are free for the next iteration, and nothing more of it is reported.
Every request's token gaps are added to its group's
:class:`~slopolicy.sim.gaps.Gaps` (see :mod:`slopolicy.sim.gaps`), and
those above its group's ``tbt_p99`` target are counted per request (each
group counts the iterations above its target; a request's share is the
count's growth while it decoded, plus its resume gaps; see
:mod:`slopolicy.sim._group_gaps`), for :meth:`Engine.slow_gaps`.

**Speed.** While no request is prefilling and the waiting queue's head cannot
start, every iteration is pure decode and the batch only changes when a
request finishes, so :meth:`Engine.start` jumps over ``k`` such iterations at
once (:class:`~slopolicy.sim._decode.DecodePool`): ``k`` is the least of the
iterations until the next request finishes, until the KV blocks run out, and
until the caller's ``horizon`` (the next arrival or timer), and their total time
is closed-form: ``k·(T_cpu + knee(n)) + β_d·(k·C + n·k(k-1)/2)`` for ``n``
decoding requests holding ``C`` context tokens.

Time is virtual: :meth:`Engine.start` plans the next iteration (or run of
decode iterations) at ``now`` and returns when it ends; :meth:`Engine.complete`
returns what it produced, to be delivered at that time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.errors import UsageError
from slopolicy.sim._counters import Counters
from slopolicy.sim._decode import DecodePool, Seq
from slopolicy.sim._group_gaps import GroupGaps
from slopolicy.sim._waiting import WaitingQueue, prompt_blocks
from slopolicy.sim.engine_spec import (
    EngineSpec,
    EngineStatistics,
    Scheduling,
    StepResult,
    check_int,
)
from slopolicy.sim.fanout import Fanout
from slopolicy.sim.gaps import TBTSummary

__all__ = ("Engine", "EngineSpec", "EngineStatistics", "Scheduling", "StepResult")


class _Shape(NamedTuple):
    """What one step costs beyond its tokens (:meth:`Engine._shape`): its
    micro-batches, the requests open on the engine, the KV cells read at
    the decode rate (tokens) and the prompt pairs ``Σ c·(k + c/2)``."""

    ubatches: int
    open_requests: int
    context: int
    pairs: float


def _without(result: StepResult, aborted: set[str]) -> StepResult:
    """``result`` with nothing of the ``aborted`` engine ids."""
    return StepResult(
        result.end,
        result.iterations,
        tuple(i for i in result.first_tokens if i not in aborted),
        tuple(pair for pair in result.finished if pair[0] not in aborted),
        tuple(i for i in result.preempted if i not in aborted),
        result.admitted,
    )


class Engine:
    """The engine model; see the module docstring.

    ``scheduling`` orders the waiting queue: ``fcfs`` by arrival, ``priority``
    by ``(priority, arrival)`` (lower first, as vLLM). ``targets`` gives a
    group's TBT target and stall threshold (a group without: none, 0.2 s).
    """

    def __init__(
        self,
        spec: EngineSpec,
        *,
        scheduling: Scheduling = "fcfs",
        targets: Mapping[str, SLOTargets] | None = None,
    ) -> None:
        if scheduling not in ("fcfs", "priority"):
            raise UsageError(f"scheduling must be 'fcfs' or 'priority', not {scheduling!r}")
        self.spec = spec
        self.scheduling: Scheduling = scheduling
        self._profile = spec.profile
        self._num_blocks = spec.blocks
        self._size = spec.block_size
        self._pool = DecodePool(spec.block_size)
        self._running: list[Seq] = []
        self._prefilling: list[Seq] = []
        self._prefill_blocks = 0
        self._waiting = WaitingQueue(spec.block_size, priority=scheduling == "priority")
        self._groups = GroupGaps(targets)
        self._live: dict[str, Seq] = {}
        self._fanout = Fanout()
        self._orders = 0
        self._pending: StepResult | None = None
        self._counts = Counters()
        self._aborted: set[str] = set()  # request ids aborted while an iteration was in flight

    # -- requests -------------------------------------------------------------

    def add(
        self,
        request_id: str,
        prompt_tokens: int,
        output_tokens: int,
        priority: int = 0,
        *,
        group: str = "",
        sequences: int = 1,
    ) -> bool:
        """Queue a request that will generate ``output_tokens`` tokens (>= 1)
        in each of its ``sequences`` sequences (``n`` choices: each its own
        seat, KV and prompt, see :mod:`slopolicy.sim.fanout`); its token gaps
        count in ``group`` (see :meth:`tbt`).

        Returns ``False``, queueing nothing, when prompt plus output exceed
        ``max_model_len`` (the engine would answer 400). A live id raises.
        """
        check_int("prompt_tokens", prompt_tokens, 1)
        check_int("output_tokens", output_tokens, 1)
        check_int("sequences", sequences, 1)
        ids = self._fanout.children(request_id, sequences)
        if request_id in self._fanout or any(child in self._live for child in ids):
            raise UsageError(f"request {request_id!r} is already in the engine")
        if prompt_tokens + output_tokens > self.spec.model_len:
            return False
        if sequences > 1:
            self._fanout.add(request_id, ids)
        self._groups.register(group)
        for child in ids:
            self._orders += 1
            seq = Seq(child, prompt_tokens, output_tokens, priority, self._orders, group)
            self._live[child] = seq
            self._waiting.add(seq)
        return True

    def abort(self, request_id: str) -> bool:
        """Stop ``request_id`` (each of its sequences), running or waiting:
        its seats and KV blocks are free for the next iteration, and no
        result names it again (not even the iteration in flight's). Whether
        it was still running or waiting."""
        every = self._fanout.ids(request_id)
        if self._pending is not None:  # what it finished already is dropped too
            self._aborted.update(every)
        ids = [child for child in every if child in self._live]
        self._fanout.drop(request_id)
        for child in ids:
            self._remove(self._live.pop(child))
        return bool(ids)

    def _remove(self, seq: Seq) -> None:
        """Take an aborted ``seq`` out of the running or waiting requests."""
        if seq not in self._running:
            self._waiting.remove(seq)
            return
        self._running.remove(seq)
        self._left(seq)
        if seq.decoding:
            self._pool.remove(seq)
            self._groups.preempted(seq)  # it stops decoding; its gaps are not asked for
        else:
            self._prefilling.remove(seq)
            self._prefill_blocks -= seq.blocks

    def output_tokens(self, request_id: str) -> int:
        """Tokens ``request_id`` has generated so far, every sequence's (0 if
        unknown or not started)."""
        total = self._fanout.finished_output(request_id)
        for child in self._fanout.ids(request_id):
            seq = self._live.get(child)
            if seq is not None:
                total += self._pool.outputs(seq) if seq.decoding else seq.out
        return total

    def spare_blocks(self) -> int:
        """KV blocks free after the decoding requests' next token and every
        waiting request's prompt (and first token)."""
        return self.free_blocks - self._pool.new_blocks(1) - self._waiting.blocks

    def prompt_blocks(self, prompt_tokens: int) -> int:
        """KV blocks a prompt of this length and its first token take."""
        return prompt_blocks(prompt_tokens, self._size)

    def slow_gaps(self, request_id: str) -> int:
        """The gaps above its group's TBT target of a request that finished,
        asked once (then forgotten; 0 for none or unknown)."""
        return self._groups.take(request_id)

    def tbt(self) -> dict[str, TBTSummary]:
        """Each group's token gaps so far (see :mod:`slopolicy.sim.gaps`)."""
        return self._groups.summary()

    # -- views ------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Requests running (prefilling or decoding)."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests waiting in the engine's own queue."""
        return len(self._waiting)

    @property
    def waiting_tokens(self) -> int:
        """Tokens the waiting requests must prefill (prompts, and outputs of preempted ones)."""
        return self._waiting.tokens

    @property
    def used_blocks(self) -> int:
        """KV blocks allocated now."""
        return self._pool.blocks + self._prefill_blocks

    @property
    def free_blocks(self) -> int:
        """KV blocks free now."""
        return self._num_blocks - self.used_blocks

    @property
    def busy(self) -> bool:
        """Whether an iteration is in flight (started and not completed)."""
        return self._pending is not None

    @property
    def idle(self) -> bool:
        """Whether nothing runs or waits."""
        return not self._running and not self.waiting

    def kv_usage(self) -> float:
        """Fraction of KV blocks in use, 0-1."""
        return self.used_blocks / self._num_blocks

    def decode_tokens(self) -> int:
        """Decode tokens computed since the start."""
        return self._counts.decode_tokens

    def preemptions(self) -> int:
        """Requests preempted since the start."""
        return self._counts.preemptions

    def statistics(self) -> EngineStatistics:
        """A snapshot of the counters."""
        return self._counts.statistics(len(self._running), self.waiting, self.kv_usage())

    # -- time -------------------------------------------------------------------

    def start(self, now: float, horizon: float = math.inf) -> float | None:
        """Plan the next iteration at ``now`` (seconds); its end time, or ``None``
        when there is nothing to run. A run of pure-decode iterations stops at
        the first iteration boundary at or after ``horizon``."""
        if self._pending is not None:
            raise UsageError("an iteration is already in flight; complete() it first")
        if not self._running and not self.waiting:
            return None
        result = None
        if not self._prefilling and self._pool.count and not self._head_can_start():
            result = self._decode_run(now, horizon)
        if result is None:
            result = self._iteration(now)
            if result is None:
                return None
        self._pending = result
        return result.end

    def complete(self) -> StepResult:
        """The in-flight iteration's results (deliver them at ``result.end``)."""
        result = self._pending
        if result is None:
            raise UsageError("no iteration in flight")
        self._pending = None
        if self._aborted:
            result = _without(result, self._aborted)
            self._aborted.clear()
        result, families = self._fanout.fold(result)
        self._groups.fold(families)
        return result

    # -- one iteration ------------------------------------------------------------

    def _iteration(self, now: float) -> StepResult | None:
        chunks, preempted, admitted = self._plan(now)
        pool = self._pool
        prompt = sum(c for _, c in chunks)
        if not pool.count and not prompt:
            return None
        done = sum(s.computed + c >= s.prefill_len for s, c in chunks)  # sampled: first tokens
        shape = self._shape(chunks)
        seconds = self._profile.iteration_time(
            pool.count + prompt, shape.pairs, shape.context, pool.count + done, admitted,
            ubatches=shape.ubatches, open_requests=shape.open_requests,
        )  # fmt: skip
        self._counts.ran(1, seconds, prompt, pool.count)
        self._groups.iteration(seconds)
        first, finished = self._apply(chunks, now + seconds)
        return StepResult(now + seconds, 1, first, finished, preempted, admitted)

    def _plan(self, now: float) -> tuple[list[tuple[Seq, int]], tuple[str, ...], int]:
        """The iteration's prompt chunks, the ids it preempts and how many
        waiting requests it starts (vLLM's rules; see the module doc)."""
        budget = self.spec.max_num_batched_tokens
        cap = self.spec.long_prefill_token_threshold or budget
        # Running requests first, in order. A request starts only with budget
        # left over after everyone before it, and no request before the last
        # one served ever asks for more than it got the iteration before, so
        # every decoding request gets its token; only the last prefill served
        # can be cut short, which handing out what decoding leaves, prefills
        # in running order, reproduces.
        budget -= self._pool.count
        chunks: list[tuple[Seq, int]] = []
        for seq in self._prefilling:
            chunk = min(seq.prefill_len - seq.computed, cap, budget)
            if chunk:
                chunks.append((seq, chunk))
                budget -= chunk
        need, preempted = self._make_room(chunks, now)
        admitted = 0 if preempted else self._admit(budget, cap, chunks, need)
        return chunks, preempted, admitted

    def _chunk_blocks(self, seq: Seq, chunk: int) -> int:
        # The chunk that completes the prompt also holds the sampled token.
        tokens = seq.computed + chunk + (1 if seq.computed + chunk == seq.prefill_len else 0)
        return -(-tokens // self._size) - seq.blocks

    def _make_room(self, chunks: list[tuple[Seq, int]], now: float) -> tuple[int, tuple[str, ...]]:
        """Preempt until the running requests' new blocks fit; the blocks they
        need and the ids preempted (at ``now``, when the iteration starts)."""
        preempted: list[str] = []
        while True:
            need = self._pool.new_blocks(1) + sum(self._chunk_blocks(s, c) for s, c in chunks)
            if need <= self.free_blocks or not self._running:
                return need, tuple(preempted)
            victim = self._victim()
            self._preempt(victim, now)
            chunks[:] = [(s, c) for s, c in chunks if s is not victim]
            preempted.append(victim.id)

    def _victim(self) -> Seq:
        if self.scheduling == "priority":
            return max(self._running, key=lambda s: (s.priority, s.order))
        return self._running[-1]

    def _preempt(self, seq: Seq, now: float) -> None:
        self._running.remove(seq)
        if seq.decoding:
            # Its last token came out when the previous iteration ended, now.
            seq.last_token = now
            self._pool.remove(seq)
            self._groups.preempted(seq)
        else:
            self._prefilling.remove(seq)
            self._prefill_blocks -= seq.blocks
        seq.blocks = seq.computed = 0
        seq.prefill_len = seq.prompt + seq.out
        self._counts.preemptions += 1
        self._waiting.put_back(seq)

    def _admit(self, budget: int, cap: int, chunks: list[tuple[Seq, int]], need: int) -> int:
        """Start waiting requests while they fit; how many started."""
        free = self.free_blocks - need
        started = 0
        while budget > 0 and len(self._running) < self.spec.max_num_seqs:
            seq = self._waiting.head()
            if seq is None:
                break
            chunk = min(seq.prefill_len, cap, budget)
            blocks = self._chunk_blocks(seq, chunk)
            if blocks > free:
                break
            self._waiting.pop()
            self._running.append(seq)
            self._prefilling.append(seq)
            chunks.append((seq, chunk))
            budget -= chunk
            free -= blocks
            started += 1
        return started

    def _apply(
        self, chunks: list[tuple[Seq, int]], end: float
    ) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
        pool = self._pool
        ready: list[Seq] = []
        for seq, chunk in chunks:
            blocks = self._chunk_blocks(seq, chunk)
            seq.blocks += blocks
            self._prefill_blocks += blocks
            seq.computed += chunk
            if seq.computed == seq.prefill_len:
                ready.append(seq)
        done = pool.step(1) if pool.count else []
        first: list[str] = []
        finished: list[tuple[str, int]] = []
        for seq in ready:
            self._prefilling.remove(seq)
            self._prefill_blocks -= seq.blocks
            if seq.out:  # resumed after a preemption: one long gap
                self._groups.resumed(seq, end - seq.last_token)
            seq.out += 1
            if seq.out == 1:
                first.append(seq.id)
            if seq.out >= seq.target:
                self._running.remove(seq)
                self._left(seq)
                del self._live[seq.id]
                finished.append((seq.id, seq.out))
                self._groups.finished(seq, decoding=False)  # resumed on its last token
            else:
                pool.add(seq)  # takes over its blocks: prompt + out tokens
                self._groups.joined(seq)
        finished.extend(self._retire(done))
        return tuple(first), tuple(finished)

    def _retire(self, done: list[Seq]) -> list[tuple[str, int]]:
        for seq in done:
            self._running.remove(seq)
            self._left(seq)
            del self._live[seq.id]
            self._groups.finished(seq, decoding=True)
        return [(seq.id, seq.out) for seq in done]

    def _left(self, seq: Seq) -> None:
        """``seq`` finished, or was aborted, and left the running requests (a
        hook for subclasses)."""

    def _shape(self, chunks: list[tuple[Seq, int]]) -> _Shape:
        """The step's micro-batches, the requests open on the engine, the KV
        cells its attention reads at the decode rate (tokens) and its prompt
        pairs ``Σ c·(k + c/2)``, for the profile's ``T_ub``, ``T_wake``,
        ``beta_d`` and ``beta_p`` (a hook: vLLM's model has one batch, no
        per-request wake-ups, each decode attends over its own context and
        every prompt chunk is paid by the pair)."""
        pairs = sum(c * (s.computed + c / 2) for s, c in chunks)
        return _Shape(1, 0, self._pool.context, pairs)

    # -- runs of pure decode ------------------------------------------------------

    def _head_can_start(self) -> bool:
        seq = self._waiting.head()
        if seq is None or len(self._running) >= self.spec.max_num_seqs:
            return False
        budget = self.spec.max_num_batched_tokens - self._pool.count
        chunk = min(seq.prefill_len, self.spec.long_prefill_token_threshold or budget, budget)
        if chunk <= 0:
            return False
        free = self.free_blocks - self._pool.new_blocks(1)
        return self._chunk_blocks(seq, chunk) <= free

    def _decode_run(self, now: float, horizon: float) -> StepResult | None:
        """``k`` pure-decode iterations at once, or ``None`` when even one
        needs a preemption (the single-iteration path handles it)."""
        pool, profile = self._pool, self._profile
        fits = pool.max_steps(self.free_blocks)
        finish = pool.steps_to_finish()
        # The pool is not empty, so both are known.
        assert fits is not None
        assert finish is not None
        if fits == 0:
            return None
        n = pool.count
        # The same in every iteration of the run, but the context, which grows
        # by one token a decode (no prompt is computed in a run).
        cost = self._shape([])
        context = cost.context
        shape = {"ubatches": cost.ubatches, "open_requests": cost.open_requests}
        k = min(fits, finish, profile.decode_iterations(horizon - now, n, context, **shape))
        seconds = profile.decode_time(k, n, context, **shape)
        self._counts.ran(k, seconds, 0, n * k)
        first, step = profile.decode_time(1, n, context, **shape), profile.beta_d * n
        self._groups.run(first, step, k)
        finished = self._retire(pool.step(k))
        return StepResult(now + seconds, k, (), tuple(finished), ())
