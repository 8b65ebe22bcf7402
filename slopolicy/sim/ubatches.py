"""How llama.cpp splits one step's batch into micro-batches (pure).

``llama-server -np N`` (without ``--kv-unified``) keeps one KV stream per
slot, and ``llama_decode`` then splits a batch with
``llama_batch_allocr::split_equal(n_ubatch, sequential=true)``: each
micro-batch holds *consecutive* sequence ids (slots), the same number of
tokens from each, at most ``n_ubatch`` tokens (``-ub``). Each micro-batch is
one graph computation, with its own fixed cost, so four decoding slots cost
more in slots 0, 2, 4 and 6 (four micro-batches) than in slots 0-3 (one).

The server puts each step's tokens in the batch in this order: every
decoding slot's token in slot order, then each prompt's chunk in slot
order. :func:`ubatch_count` follows the split on that order one micro-batch
at a time (a sequence's tokens are contiguous in the batch, so it never
looks at single tokens):

1. the first sequence with tokens left opens the micro-batch; scanning on
   in batch order, a sequence joins when its id is one more than the last
   joined (after more than ``n_ubatch`` sequences it stops);
2. each takes ``min(fewest left among them, max(1, n_ubatch // members))``
   tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ("ubatch_count",)


def ubatch_count(decoding: Sequence[int], prompts: Sequence[tuple[int, int]], ubatch: int) -> int:
    """Micro-batches of one step: ``decoding`` the slots adding one token each
    (ascending), ``prompts`` ``(slot, tokens)`` of each prompt chunk
    (ascending by slot), ``ubatch`` llama.cpp's ``-ub``; 0 for an empty step."""
    order = list(decoding) + [slot for slot, _ in prompts]
    left = [1] * len(decoding) + [tokens for _, tokens in prompts]
    count = 0
    while True:
        members: list[int] = []
        last = -2
        for index, slot in enumerate(order):
            if left[index] and (not members or slot == last + 1):
                members.append(index)
                last = slot
                if len(members) > ubatch:
                    break
        if not members:
            return count
        take = min(min(left[i] for i in members), max(1, ubatch // len(members)))
        for index in members:
            left[index] -= take
        count += 1
