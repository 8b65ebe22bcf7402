"""KV-cache admission: a ledger of the engine's PagedAttention block pool.

At dispatch a request may start only if the blocks it reserves fit, and each
lane with a ``kv_reserve`` keeps a floor of blocks no other lane can take: a
burst of batch work cannot push an interactive request into the engine's
waiting queue.

What a request reserves is its caller's choice (tokens in, blocks held from
dispatch until release). :meth:`KVReservation.tokens_needed` gives the worst
case, ``prompt + max_new_tokens x sequences``, which can never force a
preemption; the Policy reserves the prompt plus a forecast of the answer
(:mod:`slopolicy.core.cost.outputs`) and grows it with :meth:`KVReservation.resize`
as the answer passes it, because ceilings are often ten times the answers and
a ledger of ceilings holds the pool idle. Either way a reservation is O(1) per
dispatch, needs nothing but the request, and releases exactly what it took.
The peak check of SIMULATOR.md (:func:`~slopolicy.core.kv.peak.peak_fits`)
admits more still (requests finish at different times) but needs every
running request's current length and remaining budget at each dispatch, and
sorts them: O(n log n), fed by per-token progress the core does not otherwise
need. It is offered as a separate function for the simulator and for callers
that track progress.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType

from slopolicy.core.checks import check_count, check_now, is_number, shown
from slopolicy.errors import UsageError

__all__ = ("KVReservation", "KVStatistics")

# Float products that should be integers (0.3 x 10 = 3.0000000000000004) must not
# cost a block; the relative slack is far below one block for any real pool.
_USAGE_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class KVStatistics:
    """A snapshot of a :class:`KVReservation`. Counts are in blocks.

    Attributes:
        num_blocks: blocks in the pool.
        block_size: tokens per block.
        used_blocks: blocks held by live reservations (the ledger).
        used_by_lane: ``used_blocks`` split by lane; lanes with a floor always
            appear, other lanes only while they hold blocks.
        reserved_by_lane: each lane's floor, ``floor(fraction x num_blocks)``.
        shared_blocks: the pool outside every floor.
        shared_used_blocks: blocks lanes hold beyond their own floor.
        engine_used_blocks: used blocks per the last engine observation still
            in force, or ``None`` (none yet, or older than ``max_observation_age``).
        last_observed_at: time of the last observation (monotonic seconds).
        unseen_blocks: blocks reserved since that observation.
        reservations: live reservations.
    """

    num_blocks: int
    block_size: int
    used_blocks: int
    used_by_lane: Mapping[str, int] = field(hash=False)
    reserved_by_lane: Mapping[str, int] = field(hash=False)
    shared_blocks: int
    shared_used_blocks: int
    engine_used_blocks: int | None
    last_observed_at: float | None
    unseen_blocks: int
    reservations: int


class _Reservation:
    """One live reservation; ``unseen`` of its ``blocks`` were added in ``epoch``."""

    __slots__ = ("blocks", "epoch", "lane", "unseen")

    def __init__(self, lane: str, blocks: int, epoch: int) -> None:
        self.lane = lane
        self.blocks = blocks
        self.epoch = epoch
        self.unseen = blocks


class KVReservation:
    """The engine's KV block pool as a ledger, with per-lane reserved floors.

    ``reserves`` maps a lane to the fraction (0-1) of ``num_blocks`` only it may
    use; its floor is ``floor(fraction x num_blocks)`` blocks and the fractions
    must sum below 1. The rest is the shared pool. A lane using ``u`` blocks
    against a floor ``r`` draws ``min(u, r)`` from its floor and ``max(0, u - r)``
    from the shared pool, and the overflows of all lanes never exceed the shared
    pool, so no lane ever holds blocks from another lane's floor. Lanes not in
    ``reserves`` are valid: they have no floor and use only the shared pool.

    Engine reconciliation: ``free_blocks(lane)`` is the smaller of the ledger's
    free blocks for the lane (its unused floor plus the unused shared pool) and
    the engine's view: blocks free per the last :meth:`observe`, minus the
    blocks reserved since then and still held (the engine has not seen them),
    minus the unused part of *other* lanes' floors; never below 0. The engine may use more than
    the ledger (traffic not routed through us, fragmentation, answers longer
    than their reservation), which the engine view catches; it usually uses
    less (it allocates as tokens arrive, the ledger holds whole reservations),
    which the ledger bounds, so a stale
    low reading cannot let a lane exceed the ledger. An observation older than
    ``max_observation_age`` seconds (``None``: never) is ignored, so a scraper
    that stops cannot hold admission shut with one high reading.

    ``now`` is monotonic seconds; a ``now`` earlier than one already seen counts
    as that latest time. Misuse raises :class:`UsageError` and changes nothing.
    """

    __slots__ = (
        "_engine_used",
        "_epoch",
        "_floor_used",
        "_floors",
        "_now",
        "_observed_at",
        "_overflow",
        "_reservations",
        "_unseen",
        "_used",
        "block_size",
        "max_observation_age",
        "num_blocks",
        "shared_blocks",
    )

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        reserves: Mapping[str, float] | None = None,
        *,
        max_observation_age: float | None = None,
    ) -> None:
        check_count("num_blocks", num_blocks, minimum=1)
        check_count("block_size", block_size, minimum=1)
        if max_observation_age is not None and not (
            is_number(max_observation_age) and max_observation_age > 0
        ):
            raise UsageError(f"max_observation_age must be > 0, got {shown(max_observation_age)}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_observation_age = max_observation_age
        self._floors = _floors(reserves or {}, num_blocks)
        self.shared_blocks = num_blocks - sum(self._floors.values())
        self._used: dict[str, int] = dict.fromkeys(self._floors, 0)
        self._floor_used = 0  # sum of min(u, r) over lanes
        self._overflow = 0  # sum of max(0, u - r) over lanes
        self._reservations: dict[str, _Reservation] = {}
        self._now = -math.inf
        self._engine_used: int | None = None
        self._observed_at: float | None = None
        self._epoch = 0  # observations so far; tells which blocks the engine saw
        self._unseen = 0

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens: ``ceil(tokens / block_size)``."""
        check_count("tokens", tokens)
        return self._blocks_for(tokens)

    def _blocks_for(self, tokens: int) -> int:
        """:meth:`blocks_for` of a checked count."""
        return -(-tokens // self.block_size)

    def tokens_needed(self, prompt_tokens: int, max_new_tokens: int, sequences: int = 1) -> int:
        """Worst-case tokens a request may hold: ``prompt + max_new_tokens x sequences``,
        plus the block rounding of each extra sequence.

        With ``sequences > 1`` (``n``/``best_of``) the sequences share the full
        prompt blocks but each gets its own copy of the partial last one, and each
        rounds its tail up to whole blocks, so every extra sequence adds
        ``ceil((prompt % block_size + max_new_tokens) / block_size)`` whole blocks
        of tokens; :meth:`blocks_for` of the result is then the exact worst case.
        This assumes the engine shares prompt blocks (vLLM forks, or prefix
        caching); pass a conservative prompt count when it was sampled.
        """
        check_count("prompt_tokens", prompt_tokens)
        check_count("max_new_tokens", max_new_tokens)
        check_count("sequences", sequences, minimum=1)
        return self._tokens_needed(prompt_tokens, max_new_tokens, sequences)

    def _tokens_needed(self, prompt_tokens: int, max_new_tokens: int, sequences: int) -> int:
        """:meth:`tokens_needed` for a caller that checked the counts."""
        if sequences == 1:
            return prompt_tokens + max_new_tokens
        size = self.block_size
        tail_blocks = -(-(prompt_tokens % size + max_new_tokens) // size)
        return prompt_tokens + max_new_tokens + (sequences - 1) * tail_blocks * size

    def capacity_blocks(self, lane: str) -> int:
        """The most blocks ``lane`` could ever hold: its floor plus the shared pool."""
        return self._floors.get(lane, 0) + self.shared_blocks

    def free_blocks(self, lane: str) -> int:
        """Blocks ``lane`` could take as of the latest ``now`` given (see the class
        docstring for the rule)."""
        _check_name("lane", lane)
        return self._free(lane)

    def _free(self, lane: str) -> int:
        own_unused = self._unused_floor(lane)
        ledger = own_unused + self.shared_blocks - self._overflow
        if self._engine_used is None:  # never observed: the ledger alone
            return ledger
        engine_used = self._engine_in_force()
        if engine_used is None:
            return ledger
        floors_unused = self.num_blocks - self.shared_blocks - self._floor_used
        others_unused = floors_unused - own_unused
        engine = self.num_blocks - engine_used - self._unseen - others_unused
        return max(0, min(ledger, engine))

    def try_reserve(self, request_id: str, lane: str, tokens: int, *, now: float) -> bool:
        """Reserve ``blocks_for(tokens)`` blocks for ``request_id`` in ``lane``, all or
        nothing. ``False`` (it does not fit) leaves the ledger as it was (only the
        clock moves on to ``now``); an id that already holds a reservation raises."""
        _check_name("request_id", request_id)
        _check_name("lane", lane)
        blocks = self.blocks_for(tokens)
        check_now(now)
        return self._reserve(request_id, lane, blocks, now)

    def _reserve(self, request_id: str, lane: str, blocks: int, now: float) -> bool:
        """:meth:`try_reserve` of ``blocks`` blocks for a caller that checked its arguments."""
        if request_id in self._reservations:
            raise UsageError(f"request {request_id!r} already holds a KV reservation")
        if now > self._now:  # _tick, inlined on the dispatch path
            self._now = now
        if blocks > self._free(lane):
            return False
        self._reservations[request_id] = _Reservation(lane, blocks, self._epoch)
        self._unseen += blocks
        self._add(lane, blocks)
        return True

    def resize(self, request_id: str, tokens: int, *, now: float) -> bool:
        """Change a live reservation to ``blocks_for(tokens)`` blocks: a shrink always
        succeeds, a growth only if the extra blocks fit (``False`` leaves it as it
        was). An id that holds no reservation raises."""
        _check_name("request_id", request_id)
        blocks = self.blocks_for(tokens)
        check_now(now)
        if request_id not in self._reservations:
            raise UsageError(f"request {request_id!r} holds no KV reservation")
        return self._resize(request_id, blocks, now)

    def _resize(self, request_id: str, blocks: int, now: float) -> bool:
        """:meth:`resize` to ``blocks`` blocks of a live reservation, for a caller
        that checked its arguments."""
        entry = self._reservations[request_id]
        self._tick(now)
        delta = blocks - entry.blocks
        if delta > 0:
            if delta > self._free(entry.lane):
                return False
            if entry.epoch != self._epoch:
                entry.epoch, entry.unseen = self._epoch, 0
            entry.unseen += delta
            self._unseen += delta
        elif delta < 0:
            self._forget_unseen(entry, -delta)
        entry.blocks = blocks
        self._add(entry.lane, delta)
        return True

    def release(self, request_id: str, *, now: float) -> int:
        """Free ``request_id``'s blocks and return how many; an id that holds no
        reservation (never reserved, or already released) frees 0."""
        _check_name("request_id", request_id)
        check_now(now)
        return self._release(request_id, now)

    def _release(self, request_id: str, now: float) -> int:
        """:meth:`release` for a trusted caller: checked arguments."""
        if now > self._now:  # _tick, inlined on the finish path
            self._now = now
        entry = self._reservations.pop(request_id, None)
        if entry is None:
            return 0
        self._forget_unseen(entry, entry.blocks)
        self._add(entry.lane, -entry.blocks)
        return entry.blocks

    def observe(self, kv_usage: float, *, now: float) -> None:
        """Record the engine's used fraction of the pool, 0-1 (vLLM's
        ``vllm:kv_cache_usage_perc``); used blocks round up."""
        if not (is_number(kv_usage) and 0.0 <= kv_usage <= 1.0):
            raise UsageError(f"kv_usage must be a number in [0, 1], got {shown(kv_usage)}")
        check_now(now)
        self._observe(kv_usage, now)

    def _observe(self, kv_usage: float, now: float) -> None:
        """:meth:`observe` of a checked ``kv_usage`` and ``now``."""
        self._tick(now)
        used = math.ceil(kv_usage * self.num_blocks * (1.0 - _USAGE_SLACK))
        self._engine_used = min(self.num_blocks, max(0, used))
        self._observed_at = self._now
        self._epoch += 1
        self._unseen = 0

    def statistics(self) -> KVStatistics:
        """A frozen snapshot of the ledger and the engine view."""
        return KVStatistics(
            num_blocks=self.num_blocks,
            block_size=self.block_size,
            used_blocks=self._floor_used + self._overflow,
            used_by_lane=MappingProxyType(dict(self._used)),
            reserved_by_lane=MappingProxyType(dict(self._floors)),
            shared_blocks=self.shared_blocks,
            shared_used_blocks=self._overflow,
            engine_used_blocks=self._engine_in_force(),
            last_observed_at=self._observed_at,
            unseen_blocks=self._unseen,
            reservations=len(self._reservations),
        )

    def _unused_floor(self, lane: str) -> int:
        return max(0, self._floors.get(lane, 0) - self._used.get(lane, 0))

    def _engine_in_force(self) -> int | None:
        age = self.max_observation_age
        if (
            self._observed_at is not None
            and age is not None
            and self._now - self._observed_at > age
        ):
            return None
        return self._engine_used

    def _tick(self, now: float) -> None:
        self._now = max(self._now, now)

    def _forget_unseen(self, entry: _Reservation, blocks: int) -> None:
        # The newest blocks go first: those are the ones the engine has not seen.
        if entry.epoch == self._epoch:
            gone = min(entry.unseen, blocks)
            entry.unseen -= gone
            self._unseen -= gone

    def _add(self, lane: str, delta: int) -> None:
        floor = self._floors.get(lane)
        if floor is None:  # a lane without a floor: every block it holds is shared
            after = self._used.get(lane, 0) + delta
            self._overflow += delta
            if after:
                self._used[lane] = after
            else:  # such lanes leave no entry behind, however many names pass
                self._used.pop(lane, None)
            return
        before = self._used.get(lane, 0)
        after = before + delta
        self._floor_used += min(after, floor) - min(before, floor)
        self._overflow += max(0, after - floor) - max(0, before - floor)
        self._used[lane] = after


def _floors(reserves: Mapping[str, float], num_blocks: int) -> dict[str, int]:
    # Decimal of the float's repr keeps the fraction the user wrote: 0.29 of 100
    # blocks is 29 (not 28.999...), and 0.7 + 0.2 + 0.1 sums to exactly 1.
    exact: dict[str, Decimal] = {}
    for lane, fraction in reserves.items():
        _check_name("lane", lane)
        if not (is_number(fraction) and 0.0 <= fraction < 1.0):
            raise UsageError(f"reserve of lane {lane!r} must be in [0, 1), got {shown(fraction)}")
        exact[lane] = Decimal(repr(float(fraction)))
    if sum(exact.values(), Decimal(0)) >= 1:
        raise UsageError(f"KV reserves must sum below 1, got {dict(reserves)!r}")
    return {lane: math.floor(value * num_blocks) for lane, value in exact.items()}


def _check_name(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{name} must be a non-empty string, got {shown(value)}")
