"""The engine's decoding requests, advanced in bulk.

In an iteration every decoding request gains one token, so between two
events their state is a function of one counter: after ``G`` decode steps a
member that joined at step ``g`` with context ``c`` and ``o`` output tokens
has context ``c + G - g`` and ``o + G - g`` outputs. Each member stores
``base = c - g`` (and ``out_base = o - g``), so advancing ``k`` steps is
``G += k``: O(1) for token counts, context sums and finishing order (a heap
keyed by the step at which each member reaches its output target), and
O(block_size) for the KV blocks the step allocates, counted from a histogram
of ``(base - 1) mod block_size``: a member whose context ``x`` satisfies
``(x - 1) mod b = q`` needs ``(q + k) // b`` new blocks over the next ``k``
tokens, so how many steps fit in the free blocks is O(block_size) too.
"""

from __future__ import annotations

import heapq

__all__ = ("DecodePool", "Seq")


class Seq:
    """One request inside the engine (mutable, internal).

    ``prefill_len`` is what must be computed before the next token: the
    prompt, or prompt plus outputs after a preemption by recompute.
    While decoding, ``base``/``out_base`` hold the context and outputs minus
    the pool's step counter (see the module docstring). ``group`` names whose
    token gaps it adds to (the lane); ``last_token`` is when its last token
    came out before a preemption (seconds). ``slow`` counts its gaps above its
    group's TBT target so far, and while decoding ``slow_base`` is the group's
    count of such iterations when it joined (see ``Engine``).
    """

    __slots__ = (
        "base",
        "blocks",
        "computed",
        "decoding",
        "group",
        "id",
        "last_token",
        "order",
        "out",
        "out_base",
        "prefill_len",
        "priority",
        "prompt",
        "slow",
        "slow_base",
        "target",
        "version",
    )

    def __init__(
        self,
        request_id: str,
        prompt: int,
        target: int,
        priority: int,
        order: int,
        group: str = "",
    ) -> None:
        self.id = request_id
        self.prompt = prompt
        self.target = target
        self.priority = priority
        self.order = order
        self.group = group
        self.last_token = 0.0
        self.out = 0
        self.computed = 0
        self.prefill_len = prompt
        self.blocks = 0
        self.decoding = False
        self.base = 0
        self.out_base = 0
        self.version = 0
        self.slow = 0
        self.slow_base = 0


class DecodePool:
    """Decoding requests with a shared step counter ``steps`` (see the module doc).

    ``context`` is the sum of members' contexts (tokens) and ``blocks`` the
    KV blocks they hold, ``ceil(context_j / block_size)`` each.
    """

    __slots__ = ("_heap", "_hist", "block_size", "blocks", "context", "count", "steps")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.steps = 0
        self.count = 0
        self.context = 0
        self.blocks = 0
        self._hist = [0] * block_size
        self._heap: list[tuple[int, int, int, Seq]] = []

    def add(self, seq: Seq) -> None:
        """Start decoding ``seq`` with its current ``prompt + out`` context."""
        context = seq.prompt + seq.out
        seq.decoding = True
        seq.base = context - self.steps
        seq.out_base = seq.out - self.steps
        self.count += 1
        self.context += context
        self.blocks += -(-context // self.block_size)
        self._hist[(seq.base - 1) % self.block_size] += 1
        self._push(seq)

    def remove(self, seq: Seq) -> None:
        """Stop tracking ``seq`` (finished or preempted); its ``out`` is brought up to date."""
        context = seq.base + self.steps
        seq.out = seq.out_base + self.steps
        seq.decoding = False
        seq.version += 1
        self.count -= 1
        self.context -= context
        self.blocks -= -(-context // self.block_size)
        self._hist[(seq.base - 1) % self.block_size] -= 1

    def outputs(self, seq: Seq) -> int:
        """Output tokens ``seq`` has now."""
        return seq.out_base + self.steps

    def context_of(self, seq: Seq) -> int:
        """Context tokens ``seq`` has now."""
        return seq.base + self.steps

    def new_blocks(self, k: int) -> int:
        """KV blocks the members need for their next ``k`` tokens.

        With ``k = m·b + r`` (``b`` the block size), every member fills ``m``
        whole blocks, and those whose last block has at most ``r`` free slots
        start one more: ``m·count + Σ_{q >= b - r} n_q``.
        """
        size = self.block_size
        whole, rest = divmod(k, size)
        return whole * self.count + sum(self._at(q) for q in range(size - rest, size))

    def max_steps(self, free_blocks: int) -> int | None:
        """The most steps whose new blocks fit in ``free_blocks`` (``None``: no limit)."""
        if not self.count:
            return None
        size = self.block_size
        whole, left = divmod(free_blocks, self.count)
        starting = 0
        for rest in range(1, size):  # new_blocks(whole·b + rest) = whole·count + starting
            starting += self._at(size - rest)
            if starting > left:
                return whole * size + rest - 1
        return whole * size + size - 1

    def _at(self, q: int) -> int:
        """Members whose context ``x`` has ``(x - 1) mod b == q`` now."""
        return self._hist[(q - self.steps) % self.block_size]

    def steps_to_finish(self) -> int | None:
        """Steps until the first member reaches its output target (``None``: no member)."""
        heap = self._heap
        while heap and heap[0][2] != heap[0][3].version:
            heapq.heappop(heap)
        return None if not heap else max(heap[0][0] - self.steps, 1)

    def step(self, k: int) -> list[Seq]:
        """Advance every member ``k`` tokens; the members that reach their target,
        removed from the pool, in finishing order."""
        self.blocks += self.new_blocks(k)
        self.steps += k
        self.context += self.count * k
        done: list[Seq] = []
        heap = self._heap
        while heap and heap[0][0] <= self.steps:
            _, _, version, seq = heapq.heappop(heap)
            if version == seq.version:
                self.remove(seq)
                done.append(seq)
        return done

    def _push(self, seq: Seq) -> None:
        finish = seq.target - seq.out_base  # the step at which outputs reach the target
        heapq.heappush(self._heap, (finish, seq.order, seq.version, seq))
        if len(self._heap) > 4 * self.count + 64:
            self._heap = [e for e in self._heap if e[2] == e[3].version]
            heapq.heapify(self._heap)
