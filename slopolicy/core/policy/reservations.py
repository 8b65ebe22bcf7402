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

**The cold start.** Until a lane has answered enough for a forecast, each of
its requests reserves its ceiling: a bound, not a forecast. A reasoning
client sends ``max_new_tokens`` up to 32k (ServeGen's reach 32,768), so a
burst of its turns right after the policy starts reads as a full pool while
the engine holds almost nothing, and turns with a first-token deadline expire waiting on answers
that will mostly never be written (on a held-out ServeGen window, 29 of 30
chat turns in the first 2 s, where FCFS served all 30). So while a request's
forecast is its ceiling, :meth:`Reservations.cold_fill` lets the caller
start it within :data:`COLD_FILL` of the pool *as held now*
(:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`'s ``fill``),
as FCFS would start it; once the lane has a forecast the peak binds again.
Not past the cold start: there a held-back burst is a tenant's long answers
holding the pool while other tenants' turns wait, and starting it on the
room held now cost a ServeGen window 0.103x -> 0.081x (``benchmarks/README.md``).
"""

from __future__ import annotations

from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.kv.ledger import KVReservation
from slopolicy.core.lifecycle import Entry

__all__ = ("COLD_FILL", "Reservations")

#: The most of the pool, as held now, that a start whose answer is still
#: counted at its ceiling may bring it to (with that ceiling): the level
#: under which the ladder's default ``kv_usage`` trigger reads the engine
#: as out of KV pressure, so the running requests keep a fifth to grow into.
COLD_FILL = 0.8


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

    def cold_fill(self, entry: Entry) -> float | None:
        """:data:`COLD_FILL` while the queued ``entry``'s answer is counted at
        its ceiling for want of a forecast (its lane has too few answers and
        its tenant too; see the module), else ``None``; ``None`` too where the
        ceiling is what was asked (no forecast configured)."""
        outputs = self.outputs
        if outputs is None or entry.kv_output < entry.request.max_new_tokens:
            return None
        if outputs.forecast(entry.lane, tenant=entry.tenant) is not None:
            return None
        return COLD_FILL

    def start(self, entry: Entry, *, now: float, fill: float | None = None) -> bool:
        """Reserve ``entry``'s prompt and forecast answer if the peak fits (see
        the module), or with ``fill``, if they fit within that fraction of the
        pool as held now (:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`);
        ``False`` leaves the ledger as it was."""
        tokens, held, sequences = self._needs(entry)
        return self.kv._start(entry.id, entry.lane, tokens, held, sequences, now, fill)

    def fits(self, entry: Entry, *, fill: float | None = None) -> bool:
        """Whether :meth:`start` of the queued ``entry`` (with ``fill``) would succeed now."""
        tokens, held, sequences = self._needs(entry)
        return self.kv.fits(entry.lane, tokens, held=held, sequences=sequences, fill=fill)

    def _needs(self, entry: Entry) -> tuple[int, int, int]:
        """What a start of ``entry`` asks of the ledger: ``(tokens, held,
        sequences)``, its prompt and forecast answer, its prompt alone, and
        its sequences."""
        kv, sequences, prompt = self.kv, entry.request.sequences, entry.prompt_tokens
        tokens = kv._tokens_needed(prompt, entry.kv_output, sequences)
        return tokens, kv._tokens_needed(prompt, 0, sequences), sequences

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
