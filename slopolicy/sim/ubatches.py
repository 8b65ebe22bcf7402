"""How llama.cpp splits one step's batch into micro-batches (pure).

``llama-server -np N`` (without ``--kv-unified``) keeps one KV stream per
slot, and ``llama_decode`` then splits a batch with
``llama_batch_allocr::split_equal(n_ubatch, sequential=true)``: each
micro-batch holds *consecutive* sequence ids (slots), the same number of
tokens from each, at most ``n_ubatch`` tokens (``-ub``). Each micro-batch is
one graph computation, with its own fixed cost, so four decoding slots cost
more in slots 0, 2, 4 and 6 (four micro-batches) than in slots 0-3 (one).

A micro-batch's attention spans the same number of KV cells in each of its
streams: ``llama_kv_cache::get_n_kv`` takes the *largest* of its members'
used cells. Measured on llama-server (CPU), that costs a decode nothing
beside other decodes (four in slots 0-3, one of them at 8,000 tokens of
context: 17.2 ms a step, against 20.3 with the long one in slot 6, one
micro-batch more), but it does beside a prompt: four decodes in slots 0-3
and an 8,192-token prompt computed in slot 4, whose next token joins their
micro-batch, took 1.75-1.87 s to its first token against 1.52-1.57 s from
slot 7, and decoded at 53-55 ms a token against 45-46. So in a micro-batch
that holds a prompt's tokens, :attr:`Split.context` counts each decode at
the micro-batch's largest context; elsewhere at its own. (The cache's
padding of ``n_kv`` to 256 cells is left to the fitted terms.)

A prompt's own attention takes one of two paths in ggml-cpu's flash
attention (``ggml_compute_forward_flash_attn_ext_f16``): a sequence with at
least :data:`TILE_ROWS` tokens in the micro-batch (``GGML_FA_TILE_Q``) is
computed in 64 x 64 tiles, the profile's ``beta_p`` per pair; with fewer,
one row at a time over its cells, as a decode is, an order of magnitude
dearer a cell. A long prompt's chunk alone is tiled, but ``split_equal`` gives it as
many tokens as the fewest of the slots beside it: a 63-token chat in the
slot before a 10,000-token prompt cut the prompt's next 63 tokens into
rows, and the step that held them took 245-263 ms against 60-70 for the
steps around it; a 64-token chat cost nothing (llama-server, pinned slots,
three repeats each). So :attr:`Split.context` also counts, at ``beta_d``,
each cell a prompt row computed one at a time attends over, and
:attr:`Split.pairs` holds only the tiled prompt pairs.

The server puts each step's tokens in the batch in this order: every
decoding slot's token in slot order, then each prompt's chunk in slot
order. :func:`split` follows the split on that order one micro-batch at a
time (a sequence's tokens are contiguous in the batch, so it never looks at
single tokens):

1. the first sequence with tokens left opens the micro-batch; scanning on
   in batch order, a sequence joins when its id is one more than the last
   joined (after more than ``n_ubatch`` sequences it stops);
2. each takes ``min(fewest left among them, max(1, n_ubatch // members))``
   tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ("TILE_ROWS", "Split", "split")

#: The fewest tokens of one sequence in a micro-batch that ggml-cpu's flash
#: attention computes in tiles (``GGML_FA_TILE_Q``); fewer go row by row.
TILE_ROWS = 64


@dataclass(frozen=True, slots=True)
class Split:
    """One step's micro-batches: ``count`` of them (0 for an empty step);
    ``context``, the KV cells charged at ``beta_d`` (tokens: each decode's,
    beside a prompt the micro-batch's largest, and each cell a prompt row
    computed alone attends over; see the module doc); ``pairs``, the
    prompt's tiled attention, ``Σ c·(k + c/2)`` over its tiled runs, charged
    at ``beta_p``."""

    count: int
    context: int
    pairs: float


def split(
    decoding: Sequence[tuple[int, int]], prompts: Sequence[tuple[int, int, int]], ubatch: int
) -> Split:
    """The micro-batches of one step: ``decoding`` the ``(slot, context)`` of
    each slot adding one token (ascending by slot), ``prompts`` the ``(slot,
    tokens, computed)`` of each prompt chunk (ascending by slot; ``computed``
    of its prompt already in the cache), ``ubatch`` llama.cpp's ``-ub``."""
    order = [slot for slot, _ in decoding] + [slot for slot, _, _ in prompts]
    left = [1] * len(decoding) + [tokens for _, tokens, _ in prompts]
    # What each sequence holds in its KV stream once its tokens so far are in.
    held = [context for _, context in decoding] + [computed for _, _, computed in prompts]
    decodes = len(decoding)
    count = context = 0
    pairs = 0.0
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
            return Split(count, context, pairs)
        take = min(min(left[i] for i in members), max(1, ubatch // len(members)))
        for index in members:
            left[index] -= take
            if index >= decodes:
                if take >= TILE_ROWS:
                    pairs += take * (held[index] + take / 2)
                else:  # row i of the run attends over the cells before it and itself
                    context += take * held[index] + take * (take + 1) // 2
                held[index] += take
        beside = [i for i in members if i < decodes]
        if len(beside) < len(members):  # a prompt's tokens too: the widest span
            context += max(held[i] for i in members) * len(beside)
        else:
            context += sum(held[i] for i in beside)
        count += 1
