"""The peak check of SIMULATOR.md: whether running requests' KV ever outgrows the pool.

Unlike the ledger of :class:`~slopolicy.core.kv.ledger.KVReservation` (O(1) per
dispatch, from the request alone), it needs every running request's current
length and remaining budget, and sorts them: O(n log n), for the simulator and
for callers that track per-token progress.
"""

from __future__ import annotations

from collections.abc import Iterable

from slopolicy.core.checks import check_count

__all__ = ("peak_fits",)


def peak_fits(
    requests: Iterable[tuple[int, int]], capacity_tokens: int, *, block_size: int = 1
) -> bool:
    """Whether running requests plus candidates never need more than the pool.

    ``requests`` are ``(current_len, remaining)`` pairs in tokens: the context
    each holds now and the most it may still generate (include the candidates).
    Each request grows one token per step and frees its KV when it finishes, so
    the peak comes when one finishes: sorted by ``remaining`` descending, the
    check of SIMULATOR.md is ``max_k(sum_{i<=k} current_len_i + k x remaining_k)``.
    Each request is padded by ``block_size - 1`` tokens for its partial last
    block, so with ``capacity_tokens = num_blocks x block_size`` a ``True`` means
    the blocks fit too. Fits iff the peak is at most ``capacity_tokens`` (the
    paper's strict ``<`` only differs at equality). O(n log n).
    """
    check_count("capacity_tokens", capacity_tokens)
    check_count("block_size", block_size, minimum=1)
    pairs = list(requests)
    for current, remaining in pairs:
        check_count("current_len", current)
        check_count("remaining", remaining)
    pairs.sort(key=lambda pair: pair[1], reverse=True)
    held = 0
    for k, (current, remaining) in enumerate(pairs, 1):
        held += current + block_size - 1
        if held + k * remaining > capacity_tokens:
            return False
    return True
