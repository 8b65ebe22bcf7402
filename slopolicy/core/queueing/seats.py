"""The engine's running seats: one per sequence, capped per lane, reserved per lane.

An engine runs a request with ``n`` choices (or ``best_of``) as that many
sequences, each in a seat of its own: vLLM's ``--max-num-seqs`` and
llama.cpp's slots (``-np``) count sequences, not requests. :class:`Seats`
counts them so: a request takes ``sequences`` seats, never more than its lane
could ever hold (its lane's cap, the engine's seats less what other lanes
keep), so every request can start once the engine has drained and none
waits forever.

A lane's ``seat_reserve`` keeps seats only it may take: another lane starts
only while the free seats after its start still cover every other lane's
unused reserve. On an engine with few seats (llama.cpp's slots) a burst of
batch work then cannot take the seats a chat arriving next needs. A lane's
``max_running`` bounds the seats its requests hold at once.

Sans-IO and synchronous; misuse raises :class:`UsageError` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from slopolicy.core.checks import count_problem
from slopolicy.errors import UsageError

__all__ = ("Seats",)


class Seats:
    """Running seats of one engine, by lane.

    Args:
        limit: seats the engine runs at once (sequences), >= 1.
        caps: lane -> most seats its requests hold at once (``None``: no cap).
            Every lane the policy uses is named here.
        reserves: lane -> seats only that lane may take; the reserves sum
            below ``limit``, so every lane can take at least one seat.
    """

    __slots__ = ("_caps", "_held", "_reserves", "_room", "by_lane", "limit", "used")

    def __init__(
        self,
        limit: int,
        caps: Mapping[str, int | None],
        reserves: Mapping[str, int] | None = None,
    ) -> None:
        problem = count_problem(limit, 1)
        if problem is not None:
            raise UsageError(f"seats must be {problem}")
        reserves = dict(reserves or {})
        for lane, cap in caps.items():
            if cap is not None and count_problem(cap, 1) is not None:
                raise UsageError(f"lane {lane!r} seat cap must be an int >= 1, got {cap!r}")
        for lane, reserve in reserves.items():
            if lane not in caps:
                raise UsageError(f"seat reserve for unknown lane {lane!r}")
            if count_problem(reserve) is not None:
                raise UsageError(f"lane {lane!r} seat reserve must be an int >= 0, got {reserve!r}")
        reserved = sum(reserves.values())
        if reserved >= limit:
            raise UsageError(f"seat reserves add up to {reserved}; they must stay below {limit}")
        self.limit = limit
        self._caps = dict(caps)
        self._reserves = {lane: reserve for lane, reserve in reserves.items() if reserve}
        # The most seats one request of each lane can ever take.
        self._room = {
            lane: min(limit, limit - reserved + self._reserves.get(lane, 0), cap or limit)
            for lane, cap in caps.items()
        }
        #: Seats held, all lanes.
        self.used = 0
        #: Seats held per lane.
        self.by_lane = dict.fromkeys(caps, 0)
        self._held: dict[str, tuple[str, int]] = {}  # request id -> (lane, seats)

    @property
    def full(self) -> bool:
        """Whether every seat is held."""
        return self.used >= self.limit

    def needed(self, lane: str, sequences: int) -> int:
        """Seats a request of ``lane`` running ``sequences`` sequences takes:
        ``sequences``, at most what the lane could ever hold."""
        return min(sequences, self._room[lane])

    def fits(self, lane: str, seats: int) -> bool:
        """Whether ``lane`` may take ``seats`` more now (its cap, the free
        seats and the other lanes' unused reserves)."""
        cap = self._caps[lane]
        used = self.by_lane[lane]
        if cap is not None and used + seats > cap:
            return False
        kept = 0
        for other, reserve in self._reserves.items():
            if other != lane:
                kept += max(0, reserve - self.by_lane[other])
        return self.used + seats + kept <= self.limit

    def take(self, request_id: str, lane: str, seats: int) -> None:
        """``request_id`` holds ``seats`` seats of ``lane`` (a caller checked
        :meth:`fits` and that the id holds none)."""
        self._held[request_id] = (lane, seats)
        self.used += seats
        self.by_lane[lane] += seats

    def give(self, request_id: str) -> None:
        """``request_id``'s seats are free again (a caller checked it holds some)."""
        lane, seats = self._held.pop(request_id)
        self.used -= seats
        self.by_lane[lane] -= seats
