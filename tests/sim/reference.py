"""A naive engine: the same vLLM-v1 rules as slopolicy.sim.engine, one request
and one iteration at a time, with no shortcuts. Tests compare the real engine
(bulk decode, closed-form runs) against it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from slopolicy.sim.engine_spec import EngineSpec


@dataclass
class Req:
    id: str
    prompt: int
    target: int
    priority: int
    order: int
    out: int = 0
    computed: int = 0
    prefill_len: int = 0
    blocks: int = 0
    decoding: bool = False
    first: float | None = None
    finished: float | None = None
    preemptions: int = 0
    times: list[float] = field(default_factory=list)  # when each token came out

    @property
    def context(self) -> int:
        return self.prompt + self.out


@dataclass
class Reference:
    spec: EngineSpec
    priority: bool = False
    running: list[Req] = field(default_factory=list)
    waiting: list[Req] = field(default_factory=list)
    done: dict[str, Req] = field(default_factory=dict)

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.spec.block_size)

    @property
    def used(self) -> int:
        return sum(r.blocks for r in self.running)

    def add(self, req: Req) -> None:
        req.prefill_len = req.prompt
        self.waiting.append(req)
        self._sort()

    def _sort(self) -> None:
        if self.priority:
            self.waiting.sort(key=lambda r: (r.priority, r.order))

    def _chunk_blocks(self, req: Req, chunk: int) -> int:
        tokens = req.computed + chunk + (1 if req.computed + chunk == req.prefill_len else 0)
        return self.blocks(tokens) - req.blocks

    def step(self, now: float) -> float | None:
        """One iteration starting at ``now``; its end, or None when idle."""
        if not self.running and not self.waiting:
            return None
        spec = self.spec
        budget = spec.max_num_batched_tokens
        cap = spec.long_prefill_token_threshold or budget
        chunks: dict[str, int] = {}
        decoders: list[Req] = []
        for req in self.running:
            if req.decoding:
                if budget:
                    decoders.append(req)
                    budget -= 1
            elif budget:
                chunk = min(req.prefill_len - req.computed, cap, budget)
                chunks[req.id] = chunk
                budget -= chunk
        preempted = False
        while True:
            need = sum(self.blocks(r.context + 1) - r.blocks for r in decoders)
            need += sum(self._chunk_blocks(r, chunks[r.id]) for r in self.running if r.id in chunks)
            if need <= spec.blocks - self.used or not self.running:
                break
            victim = (
                max(self.running, key=lambda r: (r.priority, r.order))
                if self.priority
                else self.running[-1]
            )
            self.running.remove(victim)
            if victim in decoders:
                decoders.remove(victim)
            chunks.pop(victim.id, None)
            victim.blocks = victim.computed = 0
            victim.decoding = False
            victim.prefill_len = victim.prompt + victim.out
            victim.preemptions += 1
            self.waiting.insert(0, victim)
            self._sort()
            preempted = True
        if not preempted:
            free = spec.blocks - self.used - need
            while budget > 0 and len(self.running) < spec.max_num_seqs and self.waiting:
                req = self.waiting[0]
                chunk = min(req.prefill_len, cap, budget)
                blocks = self._chunk_blocks(req, chunk)
                if blocks > free:
                    break
                self.waiting.pop(0)
                self.running.append(req)
                chunks[req.id] = chunk
                budget -= chunk
                free -= blocks
        prompt = sum(chunks.values())
        pairs = sum(
            chunks[r.id] * (r.computed + chunks[r.id] / 2) for r in self.running if r.id in chunks
        )
        context = sum(r.context for r in decoders)
        if not prompt and not decoders:
            return None
        p = spec.profile
        seconds = (
            p.t_cpu
            + math.sqrt(p.t_w**2 + (p.a * (prompt + len(decoders))) ** 2)
            + p.beta_p * pairs
            + p.beta_d * context
        )
        end = now + seconds
        for req in decoders:
            req.out += 1
            req.times.append(end)
            req.blocks = self.blocks(req.context)
        for req in list(self.running):
            if req.id not in chunks:
                continue
            given = chunks[req.id]
            req.blocks += self._chunk_blocks(req, given)
            req.computed += given
            if req.computed == req.prefill_len:
                req.out += 1
                req.times.append(end)
                req.decoding = True
                if req.out == 1:
                    req.first = end
        for req in list(self.running):
            if req.decoding and req.out >= req.target:
                self.running.remove(req)
                req.finished = end
                self.done[req.id] = req
        return end
