"""What each running request holds in the KV ledger, and how it grows.

A request reserves its prompt plus the answer it is expected to write: the
per-lane forecast of :mod:`slopolicy.core.cost.outputs`, never more than its
own ``max_new_tokens``; without a forecast, its worst case. An answer that
runs past its reservation grows it as its tokens arrive, to twice what it
reserved or, where that does not fit, to what it holds plus a block; where
neither fits the reservation stays, and the engine's own KV reading (see
:class:`~slopolicy.core.kv.ledger.KVReservation`) still bounds new starts. Completed
answers feed the forecast.
"""

from __future__ import annotations

from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.kv.ledger import KVReservation
from slopolicy.core.lifecycle import Entry

__all__ = ("Reservations",)


class Reservations:
    """Sizes and grows the KV reservations of a Policy's requests.

    ``outputs`` is the forecast (``None``: worst cases reserved). Counts are
    tokens, reservations blocks of ``kv.block_size`` tokens.
    """

    __slots__ = ("kv", "outputs")

    def __init__(self, kv: KVReservation, outputs: OutputForecast | None) -> None:
        self.kv = kv
        self.outputs = outputs

    def blocks_for(self, prompt_tokens: int, output_tokens: int, sequences: int) -> int:
        """Blocks that hold a request's prompt and ``output_tokens`` per sequence
        (checked counts); with its ``max_new_tokens``, its worst case."""
        kv = self.kv
        return kv._blocks_for(kv._tokens_needed(prompt_tokens, output_tokens, sequences))

    def plan(
        self, lane: str, prompt_tokens: int, max_new_tokens: int, sequences: int, *, worst: int
    ) -> tuple[int, int]:
        """What a request of ``lane`` reserves when it starts: ``(blocks,
        output tokens per sequence they hold room for)`` (checked counts);
        ``worst`` is its :meth:`blocks_for` at ``max_new_tokens``, already known."""
        if self.outputs is None:
            return worst, max_new_tokens
        output = self.outputs.per_sequence(lane, max_new_tokens)
        if output == max_new_tokens:
            return worst, output
        return self.blocks_for(prompt_tokens, output, sequences), output

    def grow(self, entry: Entry, *, now: float) -> None:
        """Grow ``entry``'s reservation where its answer has passed it."""
        request = entry.request
        sequences = request.sequences
        if entry.output_tokens <= entry.kv_output * sequences:
            return
        ceiling = request.max_new_tokens
        if entry.kv_output >= ceiling:
            return
        held = -(-entry.output_tokens // sequences) + self.kv.block_size
        for output in (max(2 * entry.kv_output, held), held):
            output = min(output, ceiling)
            blocks = self.blocks_for(entry.prompt_tokens, output, sequences)
            if self.kv._resize(entry.id, blocks, now):
                entry.kv_output, entry.kv_blocks = output, blocks
                return

    def completed(self, entry: Entry) -> None:
        """``entry`` completed: its answer's length feeds the forecast."""
        if self.outputs is not None:
            sequences = entry.request.sequences
            self.outputs._record(entry.lane, -(-entry.output_tokens // sequences))
