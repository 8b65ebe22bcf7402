"""What each running request holds in the KV ledger, and how it grows.

A request reserves its prompt plus the answer it is expected to write: its
tenant's forecast in its lane (:mod:`slopolicy.core.cost.outputs`), never
more than its own ``max_new_tokens``; without a forecast, its worst case. It starts
holding its prompt and is forecast to grow by a token a step (per sequence)
until it has written that answer and ends: it is admitted iff the peak over
the future of the running requests' KV and its own fits the pool, lane
floors respected (:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`).
Its tokens are reported as they arrive; an answer that runs past its
forecast is forecast to end within a block more (at most its ceiling), and
again as it passes that. Forecasting it to go on as long again (doubling)
held more of the pool for answers that mostly end soon: it cost a third of
the ServeGen trace's capacity and gained nothing on any other trace
(``python -m benchmarks.bench_capacity --quick``). Completed answers feed
the forecast.
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
        self,
        lane: str,
        prompt_tokens: int,
        max_new_tokens: int,
        sequences: int,
        *,
        tenant: str,
        worst: int,
    ) -> tuple[int, int]:
        """What a request of ``lane`` and ``tenant`` reserves when it starts:
        ``(blocks, output tokens per sequence they hold room for)`` (checked
        counts); ``worst`` is its :meth:`blocks_for` at ``max_new_tokens``,
        already known."""
        output = self.forecast(lane, max_new_tokens, tenant=tenant)
        if output == max_new_tokens:
            return worst, output
        return self.blocks_for(prompt_tokens, output, sequences), output

    def forecast(self, lane: str, max_new_tokens: int, *, tenant: str) -> int:
        """The output tokens per sequence a request of ``lane`` and ``tenant``
        is forecast to generate (at most ``max_new_tokens``; the ceiling
        without a forecast)."""
        if self.outputs is None:
            return max_new_tokens
        return self.outputs.per_sequence(lane, max_new_tokens, tenant=tenant)

    def start(self, entry: Entry, *, now: float) -> bool:
        """Reserve ``entry``'s prompt and forecast answer if the peak fits (see
        the module); ``False`` leaves the ledger as it was."""
        kv, request = self.kv, entry.request
        sequences, prompt = request.sequences, entry.prompt_tokens
        tokens = kv._tokens_needed(prompt, entry.kv_output, sequences)
        held = kv._tokens_needed(prompt, 0, sequences)
        return kv._start(entry.id, entry.lane, tokens, held, sequences, now)

    def fits(self, entry: Entry) -> bool:
        """Whether :meth:`start` of the queued ``entry`` would succeed now."""
        kv, request = self.kv, entry.request
        sequences, prompt = request.sequences, entry.prompt_tokens
        tokens = kv._tokens_needed(prompt, entry.kv_output, sequences)
        held = kv._tokens_needed(prompt, 0, sequences)
        return kv.fits(entry.lane, tokens, held=held, sequences=sequences)

    def progress(self, entry: Entry, *, now: float) -> None:
        """``entry``'s answer grew: what it holds now, and its forecast end
        moved on where the answer has passed it."""
        request, kv = entry.request, self.kv
        sequences, prompt = request.sequences, entry.prompt_tokens
        written = -(-entry.output_tokens // sequences)
        output = entry.kv_output
        if written > output and output < request.max_new_tokens:
            output = min(written + kv.block_size, request.max_new_tokens)
            entry.kv_output = output
            entry.kv_blocks = self.blocks_for(prompt, output, sequences)
        kv._progress(
            kv._reservations[entry.id],
            kv._tokens_needed(prompt, written, sequences),
            kv._tokens_needed(prompt, output, sequences),
            now,
        )

    def completed(self, entry: Entry) -> None:
        """``entry`` completed: its answer's length feeds the forecast."""
        if self.outputs is not None:
            sequences = entry.request.sequences
            tokens = -(-entry.output_tokens // sequences)
            self.outputs._record(entry.lane, tokens, tenant=entry.request.tenant)
