"""Which of llama-server's slots each gated request runs in: lane order as slot order.

llama-server builds every iteration's batch (``-b`` tokens) from its slots in
index order: first each decoding stream's next token, then pending prompt
tokens, slot 0's first, until the budget is full. A prompt in a low slot is
computed before any prompt in a higher one, whoever arrived first; a chat in
slot 5 waits while a 10k-token paste in slot 2 takes every iteration's
budget. The server picks the least recently used free slot, so which prompt
goes first is chance. Pinned with the request's ``id_slot``, the slot index
becomes a priority the server honours: :class:`SlotPinning` gives the
requests of the urgent lanes (by default the default policy's
``interactive``) the lowest free slot and every other request the highest,
so a chat's prompt is always the first in the next batch (what vLLM's
``priority`` scheduling does).

It keeps which ticket holds which slot; a released ticket's slots are free
again at the next pin. A request with ``n`` choices takes ``n`` slots, as the
server does (the first pinned, the others the lowest free, the server's
choice). When the tickets hold every slot (traffic the gate does not count),
the request goes unpinned and the server chooses. Give the gate a running
cap of at most the server's slots (``engine.max_running`` = ``-np``).
"""

from __future__ import annotations

from collections.abc import Collection

from slopolicy.core.checks import count_problem
from slopolicy.errors import UsageError
from slopolicy.runtime.ticket import Ticket

__all__ = ("SlotPinning",)

#: Far above any server's ``-np``; a list of this many entries is cheap.
_MAX_SLOTS = 65_536


class SlotPinning:
    """Slot indexes for the requests sent to one llama-server.

    Args:
        slots: the server's ``-np``, >= 1.
        urgent: lanes whose requests take the lowest free slot; every other
            lane's take the highest.
    """

    __slots__ = ("_held", "urgent")

    def __init__(self, slots: int, *, urgent: Collection[str] = ("interactive",)) -> None:
        problem = count_problem(slots, 1)
        if problem is not None or slots > _MAX_SLOTS:
            raise UsageError(f"slots must be an int in [1, {_MAX_SLOTS}], got {slots!r}")
        if isinstance(urgent, str) or not all(isinstance(lane, str) for lane in urgent):
            raise UsageError(f"urgent must be a collection of lane names, got {urgent!r}")
        self.urgent = frozenset(urgent)
        self._held: list[Ticket | None] = [None] * slots

    @property
    def slots(self) -> int:
        """The server's slots."""
        return len(self._held)

    def pin(self, ticket: Ticket) -> int | None:
        """The slot to send ``ticket``'s request to (its ``id_slot``), held
        until the ticket is released; ``None`` when too few slots are free
        (send it unpinned)."""
        held = self._held
        free = []
        for index, holder in enumerate(held):
            if holder is not None and holder.released:
                held[index] = holder = None
            if holder is None:
                free.append(index)
        wanted = ticket.request.sequences
        if len(free) < wanted:
            return None
        first = free[0] if ticket.lane in self.urgent else free[-1]
        others = [index for index in free if index != first][: wanted - 1]
        for index in (first, *others):
            held[index] = ticket
        return first

    def held(self) -> tuple[str | None, ...]:
        """Each slot's request id while its ticket is live, else ``None``."""
        return tuple(
            None if holder is None or holder.released else holder.id for holder in self._held
        )
