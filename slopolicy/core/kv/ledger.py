"""KV-cache admission: a ledger of the engine's PagedAttention block pool.

At dispatch a request may start only if its KV fits, and each lane with a
``kv_reserve`` keeps a floor of blocks no other lane can take: a burst of
batch work cannot push an interactive request into the engine's waiting
queue.

A reservation is tokens held from dispatch until release. Made with
:meth:`KVReservation.try_reserve` it is held whole all that time (its worst
case, :meth:`KVReservation.tokens_needed`, can never force a preemption).
Made with :meth:`KVReservation.try_start` it is a running request's forecast:
the context it holds now, growing by one token per step and sequence (the
caller reports it with :meth:`KVReservation.progress`) up to the tokens it
reserved, where its answer is forecast to end and its blocks to come back.
Requests end at different times, so admission asks whether the *peak* over
the future of everything live fits the pool, lane by lane
(:func:`~slopolicy.core.kv.peak.worst_over_time`, SIMULATOR.md's peak check),
not whether the sum of every request's own peak does; a ledger of whole
reservations only is the special case where the two agree. A started
request is asked to fit only until its own forecast end: a later peak (answers
that ran past their forecasts can put one over the pool) is one it has left.
The check is O(1) while the sum of peaks fits (the common case below
saturation) and O(n log n) over the n running requests otherwise.

The forecast peak protects running requests from a preemption that may come;
a start it holds back waits for answers that may never be written. Where
that is the wrong trade (the policy's cold start, when every answer still
counts at its ceiling; :mod:`slopolicy.core.policy.reservations`),
``try_start``'s ``fill`` asks instead what is held *now*: the blocks every live reservation
holds, the engine's excess, and this request at its whole forecast stay
within ``fill`` of the pool, and within the shared pool beside every lane's
floor. The room is free now, so no floor is ever taken; if the answers then
grow as forecast past the pool, the engine preempts (vLLM takes the request
that started last, or the least urgent under ``--scheduling-policy
priority``). O(1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from slopolicy.core.checks import check_count, check_now, is_number, shown
from slopolicy.core.kv.future import FutureUse, Reservation, check_name, floors_of
from slopolicy.core.kv.peak import Running, started
from slopolicy.core.kv.snapshot import KVStatistics
from slopolicy.errors import UsageError

__all__ = ("KVReservation", "KVStatistics")

#: The most blocks an engine's pool is counted as (:meth:`KVReservation.observe_capacity`):
#: the config's bound on ``kv.num_blocks``, far above any engine's pool, under
#: which the pool's tokens and each floor stay exact as floats.
MAX_BLOCKS = 2**31 - 1

# Float products that should be integers (0.3 x 10 = 3.0000000000000004) must not
# cost a block; the relative slack is far below one block for any real pool.
_USAGE_SLACK = 1e-9


class KVReservation:
    """The engine's KV block pool as a ledger, with per-lane reserved floors.

    ``reserves`` maps a lane to the fraction (0-1) of ``num_blocks`` only it may
    use; its floor is ``floor(fraction x num_blocks)`` blocks and the fractions
    must sum below 1. The rest is the shared pool. A lane using ``u`` blocks
    against a floor ``r`` draws ``min(u, r)`` from its floor and ``max(0, u - r)``
    from the shared pool, and a reservation is admitted only if the overflows
    of all lanes never exceed the shared pool, now or (for started requests,
    as forecast) at any step until they end, so no lane ever holds blocks from
    another lane's floor. A lane with a floor is protected: for another lane's
    admission its started requests count at their peak for good (its next
    arrivals take their place; see :mod:`slopolicy.core.kv.future`). Lanes not
    in ``reserves`` are valid: they have no floor and use only the shared pool.

    Engine reconciliation: the engine may hold more than the ledger (traffic
    not routed through us, fragmentation, answers longer than forecast), and
    the excess counts against every admission: blocks used per the last
    :meth:`observe`, plus the blocks held since then (the engine has not seen
    them), minus what the ledger holds now, when positive. It usually holds
    less (it allocates as tokens arrive, a whole reservation holds the most it
    may need), which the ledger bounds, so a stale low reading cannot let a
    lane exceed the ledger. An observation older than ``max_observation_age``
    seconds (``None``: never) is ignored, so a scraper that stops cannot hold
    admission shut with one high reading. A request the engine aborts now (a
    revocation: :meth:`release` with ``dropped``) leaves the reading at once
    with the blocks of it that the reading counted, so the room it frees is
    free to the next start, not only after the next reading.

    The engine's own pool (:meth:`observe_capacity`: vLLM's
    ``vllm:cache_config_info``) replaces ``num_blocks`` with
    ``follow_engine``, and otherwise bounds it: ``num_blocks``
    (:attr:`configured_blocks`) is then a cap, room left on purpose, and a
    smaller engine pool is counted instead. Floors are the same fractions of
    the pool counted. A pool configured for another engine cannot then admit
    growth the engine has no room for: left at ``llama3-8b``'s on one GPU
    (427k tokens) in front of ``llama2-7b`` (a quarter of that), the ledger
    forecast peaks four times too low and the engine preempted.

    ``now`` is monotonic seconds; a ``now`` earlier than one already seen counts
    as that latest time. Misuse raises :class:`UsageError` and changes nothing.
    """

    __slots__ = (
        "_engine_used",
        "_epoch",
        "_floor_used",
        "_floors",
        "_future",
        "_now",
        "_observed_at",
        "_overflow",
        "_reservations",
        "_reserves",
        "_unseen",
        "_used",
        "block_size",
        "configured_blocks",
        "follow_engine",
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
        follow_engine: bool = False,
    ) -> None:
        check_count("num_blocks", num_blocks, minimum=1)
        check_count("block_size", block_size, minimum=1)
        if max_observation_age is not None and not (
            is_number(max_observation_age) and max_observation_age > 0
        ):
            raise UsageError(f"max_observation_age must be > 0, got {shown(max_observation_age)}")
        self.configured_blocks = self.num_blocks = num_blocks
        self.follow_engine = bool(follow_engine)
        self.block_size = block_size
        self.max_observation_age = max_observation_age
        self._reserves = dict(reserves or {})
        self._floors = floors_of(self._reserves, num_blocks)
        self.shared_blocks = num_blocks - sum(self._floors.values())
        self._used: dict[str, int] = dict.fromkeys(self._floors, 0)
        self._floor_used = 0  # sum of min(u, r) over lanes
        self._overflow = 0  # sum of max(0, u - r) over lanes
        self._reservations: dict[str, Reservation] = {}
        self._future = FutureUse(self._floors, block_size)
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
        """The most blocks a whole reservation of ``lane`` could take as of the
        latest ``now`` given: its unused floor plus the shared pool, less what
        the lanes take from it at their forecast peak and the engine's excess
        (see the class docstring); never below 0."""
        check_name("lane", lane)
        worst = self._future.worst(self._future.group(lane))
        room = (self.shared_blocks - self._engine_excess()) * self.block_size - worst
        return max(0, room // self.block_size)

    def fits(
        self,
        lane: str,
        tokens: int,
        *,
        held: int | None = None,
        sequences: int = 1,
        fill: float | None = None,
    ) -> bool:
        """Whether :meth:`try_start` (or, with ``held`` unset, :meth:`try_reserve`)
        of ``tokens`` in ``lane``, with ``fill`` if given, would succeed now;
        changes nothing."""
        check_name("lane", lane)
        check_count("tokens", tokens)
        check_count("sequences", sequences, minimum=1)
        if held is None:
            if fill is not None:
                raise UsageError("fill applies to a start (give held)")
            blocks = self._blocks_for(tokens)
            return not blocks or self._admits(lane, blocks * self.block_size, None, None)
        check_count("held", held)
        if held > tokens:
            raise UsageError(f"held ({held}) must be <= tokens ({tokens})")
        if fill is not None:
            _check_fill(fill)
            return self._fits_now(lane, self._blocks_for(tokens), fill)
        steps = -(-(tokens - held) // sequences)
        running = started(steps, self._future.group(lane), held, sequences, self.block_size)
        return self._admits(lane, 0, running, None)

    def fits_without(
        self, lane: str, tokens: int, *, held: int, without: str, sequences: int = 1
    ) -> bool:
        """Whether :meth:`try_start` of ``tokens`` (``held`` of them now) in
        ``lane`` would succeed by the forecast peak after :meth:`release` of
        ``without`` with ``dropped`` (a request the engine aborts now, so its
        blocks leave the engine's reading too); changes nothing. ``without``
        must hold a reservation."""
        check_name("lane", lane)
        check_count("tokens", tokens)
        check_count("sequences", sequences, minimum=1)
        check_count("held", held)
        if held > tokens:
            raise UsageError(f"held ({held}) must be <= tokens ({tokens})")
        check_name("without", without)
        if without not in self._reservations:
            raise UsageError(f"request {without!r} holds no KV reservation")
        return self._fits_without(lane, tokens, held=held, sequences=sequences, without=without)

    def _fits_without(
        self, lane: str, tokens: int, *, held: int, sequences: int, without: str
    ) -> bool:
        """:meth:`fits_without` for a trusted caller: checked counts, ``without``
        live. A drop leaves the engine's excess as it is (the reading loses
        the blocks of it that it counted, the ledger all of them, and the
        blocks it held since that reading), so the budget is today's."""
        steps = -(-(tokens - held) // sequences)
        running = started(steps, self._future.group(lane), held, sequences, self.block_size)
        return self._admits(lane, 0, running, self._reservations[without])

    def try_reserve(self, request_id: str, lane: str, tokens: int, *, now: float) -> bool:
        """Reserve ``blocks_for(tokens)`` blocks for ``request_id`` in ``lane``, held
        whole until released, all or nothing. ``False`` (it does not fit) leaves
        the ledger as it was (only the clock moves on to ``now``); an id that
        already holds a reservation raises."""
        check_name("request_id", request_id)
        check_name("lane", lane)
        blocks = self.blocks_for(tokens)
        check_now(now)
        return self._reserve(request_id, lane, blocks, now)

    def _reserve(self, request_id: str, lane: str, blocks: int, now: float) -> bool:
        """:meth:`try_reserve` of ``blocks`` blocks for a caller that checked its arguments."""
        if request_id in self._reservations:
            raise UsageError(f"request {request_id!r} already holds a KV reservation")
        if now > self._now:  # _tick, inlined on the dispatch path
            self._now = now
        size = blocks * self.block_size
        if blocks and not self._admits(lane, size, None, None):
            return False
        entry = Reservation(request_id, lane, self._future.group(lane), blocks, self._epoch)
        self._reservations[request_id] = entry
        self._unseen += blocks
        self._add(lane, blocks)
        self._future.add(entry)
        return True

    def try_start(
        self,
        request_id: str,
        lane: str,
        tokens: int,
        *,
        held: int,
        sequences: int = 1,
        now: float,
        fill: float | None = None,
    ) -> bool:
        """Reserve ``tokens`` for a request of ``lane`` that starts holding ``held``
        of them (its prompt) and grows by ``sequences`` tokens a step (one per
        sequence) until it holds them all, when it is forecast to end; admitted
        iff the forecast peak of everything live fits until then (see the
        module), or, with ``fill`` (a fraction of the pool, in (0, 1]), iff the
        pool as held now with ``tokens`` more fits within it and the floors,
        all or nothing. Report its growth with :meth:`progress`. ``False``
        leaves the ledger as it was; an id that already holds a reservation
        raises."""
        check_name("request_id", request_id)
        check_name("lane", lane)
        check_count("tokens", tokens)
        check_count("held", held)
        check_count("sequences", sequences, minimum=1)
        if held > tokens:
            raise UsageError(f"held ({held}) must be <= tokens ({tokens})")
        check_now(now)
        if fill is not None:
            _check_fill(fill)
        return self._start(request_id, lane, tokens, held, sequences, now, fill)

    def _start(
        self,
        request_id: str,
        lane: str,
        tokens: int,
        held: int,
        sequences: int,
        now: float,
        fill: float | None = None,
    ) -> bool:
        """:meth:`try_start` for a caller that checked its arguments."""
        if request_id in self._reservations:
            raise UsageError(f"request {request_id!r} already holds a KV reservation")
        if now > self._now:
            self._now = now
        group, size = self._future.group(lane), self.block_size
        steps = -(-(tokens - held) // sequences)
        if fill is not None:
            if not self._fits_now(lane, self._blocks_for(tokens), fill):
                return False
        elif not self._admits(lane, 0, started(steps, group, held, sequences, size), None):
            return False
        blocks = self._blocks_for(held)
        entry = Reservation(request_id, lane, group, blocks, self._epoch)
        entry.held, entry.rate, entry.steps = held, sequences, steps
        self._reservations[request_id] = entry
        self._unseen += blocks
        self._add(lane, blocks)
        self._future.add(entry)
        return True

    def progress(self, request_id: str, held: int, tokens: int, *, now: float) -> None:
        """A started request now holds ``held`` tokens and is forecast to grow
        until it holds ``tokens`` (its reservation, changed or not; ``held`` at
        most: it ends now). Always recorded: it is what the request does, not
        an admission. An id that holds no started reservation raises."""
        check_name("request_id", request_id)
        check_count("held", held)
        check_count("tokens", tokens)
        check_now(now)
        entry = self._reservations.get(request_id)
        if entry is None or not entry.rate:
            raise UsageError(f"request {request_id!r} holds no started KV reservation")
        self._progress(entry, held, tokens, now)

    def _progress(self, entry: Reservation, held: int, tokens: int, now: float) -> None:
        """:meth:`progress` of a started ``entry`` for a caller that checked its arguments."""
        if now > self._now:
            self._now = now
        self._future.remove(entry)
        entry.held = held
        entry.steps = -(-max(0, tokens - held) // entry.rate)
        self._future.add(entry)
        self._hold(entry, self._blocks_for(held))

    def resize(self, request_id: str, tokens: int, *, now: float) -> bool:
        """Change a live reservation to ``tokens`` (a whole one to ``blocks_for(tokens)``
        blocks, a started one's forecast end to when it holds ``tokens``): a shrink
        always succeeds, a growth only if the forecast peak still fits (``False``
        leaves it as it was). An id that holds no reservation raises."""
        check_name("request_id", request_id)
        blocks = self.blocks_for(tokens)
        check_now(now)
        entry = self._reservations.get(request_id)
        if entry is None:
            raise UsageError(f"request {request_id!r} holds no KV reservation")
        if entry.rate:
            return self._regrow(entry, tokens, now)
        return self._resize(request_id, blocks, now)

    def _resize(self, request_id: str, blocks: int, now: float) -> bool:
        """:meth:`resize` to ``blocks`` blocks of a live whole reservation, for a
        caller that checked its arguments."""
        entry = self._reservations[request_id]
        self._tick(now)
        if blocks > entry.blocks and not self._admits(
            entry.lane, blocks * self.block_size, None, entry
        ):
            return False
        self._future.remove(entry)
        self._hold(entry, blocks)
        self._future.add(entry)
        return True

    def _regrow(self, entry: Reservation, tokens: int, now: float) -> bool:
        """:meth:`resize` of a started ``entry`` to end at ``tokens``, for a caller
        that checked its arguments."""
        self._tick(now)
        steps = -(-max(0, tokens - entry.held) // entry.rate)
        if steps > entry.steps:
            running = started(steps, entry.group, entry.held, entry.rate, self.block_size)
            if not self._admits(entry.lane, 0, running, entry):
                return False
        self._future.remove(entry)
        entry.steps = steps
        self._future.add(entry)
        return True

    def release(self, request_id: str, *, now: float, dropped: bool = False) -> int:
        """Free ``request_id``'s blocks and return how many it held; an id that holds
        no reservation (never reserved, or already released) frees 0. ``dropped``:
        the engine aborts the request now (a revocation), so the blocks of it
        that the engine's last reading counted leave that reading at once
        rather than at the next :meth:`observe`."""
        check_name("request_id", request_id)
        check_now(now)
        if not isinstance(dropped, bool):
            raise UsageError(f"dropped must be a bool, got {shown(dropped)}")
        return self._release(request_id, now, dropped=dropped)

    def _release(self, request_id: str, now: float, *, dropped: bool = False) -> int:
        """:meth:`release` for a trusted caller: checked arguments."""
        if now > self._now:  # _tick, inlined on the finish path
            self._now = now
        entry = self._reservations.pop(request_id, None)
        if entry is None:
            return 0
        if dropped and self._engine_used is not None:
            self._engine_used = max(0, self._engine_used - self._seen(entry))
        self._future.remove(entry)
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

    def observe_capacity(self, capacity_tokens: int) -> None:
        """Record the engine's whole KV pool, ``capacity_tokens`` >= 1, as it
        reports it (vLLM: ``num_gpu_blocks x block_size`` of
        ``vllm:cache_config_info``): from now on the ledger counts
        ``capacity_tokens // block_size`` blocks (from 1 to
        :data:`MAX_BLOCKS`; at most :attr:`configured_blocks` unless it
        ``follow_engine``), each lane's floor the same fraction of them (see
        the class). What is live stays live; if it holds more than a smaller
        pool, nothing starts until enough of it ends."""
        check_count("capacity_tokens", capacity_tokens, minimum=1)
        blocks = max(1, min(MAX_BLOCKS, capacity_tokens // self.block_size))
        if not self.follow_engine:
            blocks = min(self.configured_blocks, blocks)
        if blocks != self.num_blocks:
            self._repool(blocks)

    def _repool(self, blocks: int) -> None:
        """Count a pool of ``blocks``: floors, the shared pool, each lane's
        draw on its floor and on the shared pool, and the forecast view,
        again from the live reservations; the engine's reading in force kept
        as the same fraction."""
        before, self.num_blocks = self.num_blocks, blocks
        floors = self._floors = floors_of(self._reserves, blocks)
        self.shared_blocks = blocks - sum(floors.values())
        used = self._used  # every floored lane keeps its entry; the others hold > 0
        self._floor_used = sum(min(use, floors.get(lane, 0)) for lane, use in used.items())
        self._overflow = sum(max(0, use - floors.get(lane, 0)) for lane, use in used.items())
        future = self._future = FutureUse(floors, self.block_size)
        for entry in self._reservations.values():
            entry.group = future.group(entry.lane)
            future.add(entry)
        if self._engine_used is not None:
            self._engine_used = min(blocks, -(-self._engine_used * blocks // before))

    def statistics(self) -> KVStatistics:
        """A frozen snapshot of the ledger and the engine view."""
        size = self.block_size
        return KVStatistics(
            num_blocks=self.num_blocks,
            block_size=size,
            used_blocks=self._floor_used + self._overflow,
            used_by_lane=MappingProxyType(dict(self._used)),
            reserved_by_lane=MappingProxyType(dict(self._floors)),
            shared_blocks=self.shared_blocks,
            shared_used_blocks=self._overflow,
            engine_used_blocks=self._engine_in_force(),
            last_observed_at=self._observed_at,
            unseen_blocks=self._unseen,
            reservations=len(self._reservations),
            peak_blocks=-(-self._future.peak() // size),
        )

    def _admits(
        self, lane: str, whole: int, running: Running | None, without: Reservation | None
    ) -> bool:
        """Whether ``lane`` may add ``whole`` tokens held for good and a started
        request ``running``, with ``without`` (a reservation being resized) left
        out: the forecast peak, less the engine's excess, fits (see the class)."""
        budget = (self.shared_blocks - self._engine_excess()) * self.block_size
        return self._future.admits(lane, whole, running, without, budget)

    def _fits_now(self, lane: str, blocks: int, fill: float) -> bool:
        """Whether ``blocks`` more for ``lane`` fit the pool as held now: the
        shared pool beside every floor, and ``fill`` of the whole pool (see
        the module), the engine's excess counted in both."""
        excess = self._engine_excess()
        floor = self._floors.get(lane)
        if floor is None:
            grows = blocks
        else:
            used = self._used[lane]
            grows = max(0, used + blocks - floor) - max(0, used - floor)
        if self._overflow + grows + excess > self.shared_blocks:
            return False
        held_now = self._floor_used + self._overflow + excess + blocks
        return held_now <= fill * self.num_blocks * (1.0 + _USAGE_SLACK)

    def _hold(self, entry: Reservation, blocks: int) -> None:
        """``entry`` holds ``blocks`` blocks now: the ledger and the engine view follow."""
        delta = blocks - entry.blocks
        if delta > 0:
            if entry.epoch != self._epoch:
                entry.epoch, entry.unseen = self._epoch, 0
            entry.unseen += delta
            self._unseen += delta
        elif delta < 0:
            self._forget_unseen(entry, -delta)
        entry.blocks = blocks
        self._add(entry.lane, delta)

    def _engine_excess(self) -> int:
        """Blocks the engine holds beyond the ledger, per its reading in force
        (>= 0): that reading plus the blocks held since, less the ledger's."""
        engine_used = self._engine_in_force()
        if engine_used is None:
            return 0
        return max(0, engine_used + self._unseen - self._floor_used - self._overflow)

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

    def _seen(self, entry: Reservation) -> int:
        """The blocks of ``entry`` that the engine's last reading counted:
        those it held before that reading."""
        return entry.blocks - (entry.unseen if entry.epoch == self._epoch else 0)

    def _forget_unseen(self, entry: Reservation, blocks: int) -> None:
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


def _check_fill(fill: float) -> None:
    """Check a ``fill``: a fraction of the pool in (0, 1]."""
    if not (is_number(fill) and 0.0 < fill <= 1.0):
        raise UsageError(f"fill must be a fraction of the pool in (0, 1], got {shown(fill)}")
