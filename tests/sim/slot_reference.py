"""A naive llama-server: the rules of slopolicy.sim.llama_engine written out
one request and one iteration at a time (no decode runs, no shared counters).
Tests compare the real engine against it."""

from __future__ import annotations

from dataclasses import dataclass, field

from slopolicy.sim.engine_spec import EngineSpec
from tests.sim.reference import Req


@dataclass
class SlotReference:
    spec: EngineSpec
    priority: bool = False
    slots: list[Req | None] = field(default_factory=list)
    released: list[int] = field(default_factory=list)  # the release count each slot was freed at
    waiting: list[Req] = field(default_factory=list)
    done: dict[str, Req] = field(default_factory=dict)
    releases: int = 0

    def __post_init__(self) -> None:
        self.slots = [None] * self.spec.max_num_seqs
        self.released = [-1] * self.spec.max_num_seqs

    @property
    def running(self) -> list[Req]:
        return [r for r in self.slots if r is not None]

    def add(self, req: Req) -> None:
        req.prefill_len = req.prompt
        self.waiting.append(req)
        if self.priority:
            self.waiting.sort(key=lambda r: (r.priority, r.order))

    def step(self, now: float) -> float | None:
        """One iteration starting at ``now``; its end, or None when idle."""
        started = 0
        while self.waiting:
            free = [i for i, r in enumerate(self.slots) if r is None]
            if not free:
                break
            oldest = min(self.released[i] for i in free)
            self.slots[max(i for i in free if self.released[i] == oldest)] = self.waiting.pop(0)
            started += 1
        budget = self.spec.max_num_batched_tokens
        decoders = [r for r in self.running if r.decoding]
        budget -= len(decoders)
        chunks: dict[str, int] = {}
        for req in self.slots:  # slot-index order
            if req is not None and not req.decoding and budget > 0:
                chunks[req.id] = min(req.prompt - req.computed, budget)
                budget -= chunks[req.id]
        if not decoders and not chunks:
            return None
        prompt = sum(chunks.values())
        by_id = {r.id: r for r in self.running}
        finishing = sum(by_id[i].computed + c == by_id[i].prompt for i, c in chunks.items())
        slot_of = {id(r): i for i, r in enumerate(self.slots) if r is not None}
        tokens = [slot_of[id(r)] for r in decoders]  # the batch, one sequence id a token
        for request_id, chunk in chunks.items():
            tokens += [slot_of[id(by_id[request_id])]] * chunk
        held = {slot_of[id(r)]: r.context for r in decoders}
        held |= {slot_of[id(by_id[i])]: by_id[i].computed for i in chunks}
        ubatches, context, pairs = split_equal(tokens, self.spec.ubatch, held, len(decoders))
        seconds = self.spec.profile.iteration_time(
            len(decoders) + prompt,
            pairs,
            context,
            len(decoders) + finishing,
            started,
            ubatches=ubatches,
            open_requests=len(self.running) + len(self.waiting),
        )
        end = now + seconds
        for req in decoders:
            req.out += 1
            req.times.append(end)
        for request_id, chunk in chunks.items():
            req = by_id[request_id]
            req.computed += chunk
            if req.computed == req.prompt:
                req.out += 1
                req.times.append(end)
                req.decoding = True
                req.first = end
        for index, req in enumerate(self.slots):
            if req is not None and req.decoding and req.out >= req.target:
                req.finished = end
                self.done[req.id] = req
                self.slots[index] = None
                self.releases += 1
                self.released[index] = self.releases
        return end


def split_equal(
    tokens: list[int], n_ubatch: int, held: dict[int, int] | None = None, decodes: int = 0
) -> tuple[int, int, float]:
    """llama.cpp's ``llama_batch_allocr::split_equal(n_ubatch, sequential=true)``
    token by token, as its C++ does it: the micro-batches it cuts a batch of
    these sequence ids into; the KV cells charged at the decode rate: the
    first ``decodes`` tokens' (one each, the decoding sequences'), each its
    own stream or, in a micro-batch with a prompt's tokens, the largest
    stream (``held``: what each sequence's stream holds before the step),
    and each cell a prompt token attends over when fewer than 64 of its
    sequence's tokens share the micro-batch (ggml-cpu's flash attention,
    row by row); and the pairs ``c·(k + c/2)`` of the prompt runs of 64
    tokens or more (tiled)."""
    cells = dict(held or {})
    decoding = set(tokens[:decodes])
    used = [False] * len(tokens)
    count = context = 0
    pairs = 0.0
    while not all(used):
        members: list[int] = []
        for i, seq in enumerate(tokens):
            if used[i] or seq in members:
                continue
            if not members or seq == members[-1] + 1:
                members.append(seq)
                if len(members) > n_ubatch:
                    break
        taken = 0
        while all(any(not used[i] and s == seq for i, s in enumerate(tokens)) for seq in members):
            for seq in members:
                used[next(i for i, s in enumerate(tokens) if not used[i] and s == seq)] = True
            taken += 1
            if (taken + 1) * len(members) > n_ubatch:
                break
        for seq in members:
            if seq not in decoding:
                before = cells.get(seq, 0)
                for row in range(1, taken + 1):
                    cells[seq] = before + row
                    if taken < 64:
                        context += before + row
                if taken >= 64:
                    pairs += taken * (before + taken / 2)
        beside = [seq for seq in members if seq in decoding]
        if len(beside) < len(members):
            context += max(cells.get(seq, 0) for seq in members) * len(beside)
        else:
            context += sum(cells.get(seq, 0) for seq in beside)
        count += 1
    return count, context, pairs
