"""The snapshot a :class:`~slopolicy.core.kv.ledger.KVReservation` returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ("KVStatistics",)


@dataclass(frozen=True, slots=True)
class KVStatistics:
    """A snapshot of a :class:`KVReservation`. Counts are in blocks.

    Attributes:
        num_blocks: blocks in the pool the ledger counts: the configured
            one, or the engine's where it reported a smaller one
            (:meth:`KVReservation.observe_capacity`).
        block_size: tokens per block.
        used_blocks: blocks held by live reservations now (the ledger): a whole
            reservation holds all its blocks, a started one the blocks of its
            context so far.
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
        peak_blocks: the most blocks the live reservations will hold at once
            from now on, as forecast (``used_blocks`` when none is started).
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
    peak_blocks: int
