"""The peak check of SIMULATOR.md: whether running requests' KV ever outgrows the pool.

Requests finish at different times, so the KV a set of running requests needs
is not the sum of their peaks but the peak of their sum: each holds its
context now, grows by one token per step (per sequence) until its answer is
forecast to end, and frees everything then. Held KV only grows between two
ends, so the peak over the future comes at an end: sorted by steps left,
descending, it is ``max_k(sum_{i<=k} held_i + steps_k x sum_{i<=k} rate_i)``,
O(n log n) for n requests.

:func:`worst_over_time` is that peak with lane floors (a lane's reserved
share of the pool that no other lane may take, as in
:class:`~slopolicy.core.kv.ledger.KVReservation`, which admits by it);
:func:`peak_fits` is SIMULATOR.md's form of the check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from slopolicy.core.checks import check_count

__all__ = ("Running", "over_floors", "peak_fits", "peak_of", "started", "worst_over_time")

#: One running request for :func:`worst_over_time`: ``(steps, group, held, rate,
#: over)``: it holds at most ``held + rate x t`` tokens at step ``t`` until it
#: frees them all ``steps`` steps from now, and ``over`` less than that at its
#: end; ``group`` is its lane where that lane has a floor, else ``None`` (the
#: shared pool only). See :func:`started`.
Running = tuple[int, str | None, int, int, int]


def started(steps: int, group: str | None, held: int, rate: int, block_size: int) -> Running:
    """A request holding ``held`` tokens that grows by ``rate`` a step (one per
    sequence) for ``steps`` steps, in blocks of ``block_size``: each sequence's
    partial last block is padded (``block_size - 1`` tokens), except at its
    end, where a single sequence holds exactly its last block's worth (so a
    request that fills the pool to the block fits alone)."""
    padded = held + rate * (block_size - 1)
    if rate != 1:
        return (steps, group, padded, rate, 0)
    end = held + steps
    return (steps, group, padded, rate, padded + steps - -(-end // block_size) * block_size)


def peak_of(one: Running) -> int:
    """The most tokens ``one`` holds: at its end."""
    steps, _, held, rate, over = one
    return held + rate * steps - over


def worst_over_time(
    running: Sequence[Running],
    constant: Mapping[str | None, int],
    floors: Mapping[str, int],
    group: str | None,
    *,
    until: int | None = None,
) -> int:
    """The most the lanes take from the shared pool at any step from now on
    (``until``: at any step up to that one).

    ``running`` are sorted by ``steps``, descending; ``constant`` is what each
    group holds for good (reservations with no forecast end) and ``floors``
    each floored lane's floor (all in tokens, floors > 0). At step ``t`` a
    group ``X`` holds ``u_X(t)``, and what the lanes take from the shared
    pool, as the ledger counts it for a request of ``group``, is: all that
    the lanes without a floor hold, plus every *other* floored lane's use
    beyond its floor, plus ``group``'s own use less its floor (its unused
    floor is its own room, so this term may be negative). A request of
    ``group`` fits while that never exceeds the shared pool; a lane other
    than ``group`` that is already over its floor is not ``group``'s concern
    beyond what it takes from the shared pool. Held KV only grows between
    two ends, so the most up to step ``until`` comes at an end no later
    than it: give ``until`` as a request's own end (one of ``running``) and
    the peaks after it, which it has left, are not counted. O(n x lanes).
    """
    held: dict[str | None, int] = dict(constant)
    rates: dict[str | None, int] = {}
    if group is not None:
        held.setdefault(group, 0)
    worst = over_floors(held, rates, 0, floors, group)
    count = len(running)
    ending: dict[str | None, int] = {}  # what those ending at this step hold less
    for index, (steps, owner, tokens, rate, over) in enumerate(running):
        held[owner] = held.get(owner, 0) + tokens
        rates[owner] = rates.get(owner, 0) + rate
        if over:
            ending[owner] = ending.get(owner, 0) + over
        if index + 1 < count and running[index + 1][0] == steps:
            continue  # ends at the same step: the peak counts them together
        if until is not None and steps > until:
            ending.clear()
            continue  # a peak after the step asked about
        if ending:
            for one, less in ending.items():
                held[one] -= less
            worst = max(worst, over_floors(held, rates, steps, floors, group))
            for one, less in ending.items():
                held[one] += less
            ending.clear()
        else:
            worst = max(worst, over_floors(held, rates, steps, floors, group))
    return worst


def over_floors(
    held: Mapping[str | None, int],
    rates: Mapping[str | None, int],
    step: int,
    floors: Mapping[str, int],
    group: str | None,
) -> int:
    """What the groups take from the shared pool at ``step`` (see :func:`worst_over_time`)."""
    total = 0
    for owner, tokens in held.items():
        use = tokens + step * rates.get(owner, 0)
        if owner is None:
            total += use
        elif owner == group or use > floors[owner]:
            total += use - floors[owner]
    return total


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
    running = sorted(
        (started(remaining, None, current, 1, block_size) for current, remaining in pairs),
        key=lambda one: one[0],
        reverse=True,
    )
    return worst_over_time(running, {}, {}, None) <= capacity_tokens
