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

**The fill.** The peak is a bound on the running answers' spread: it
counts every one at its forecast at once, which answers drawn from a spread
never reach together. Where the peak holds back a head with a first-token
deadline, waiting loses the deadline, so :meth:`Reservations.fill` lets the
caller start it within :data:`FILL` of the pool *as held now*
(:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`'s ``fill``), as
FCFS would start it, in two cases; if the answers then outgrow the pool the
engine preempts, as under FCFS.

- **The cold start.** Until a lane has answered enough for a forecast, each
  of its requests reserves its ceiling: a bound, not a forecast. A
  reasoning client sends ``max_new_tokens`` up to 32k (ServeGen's reach
  32,768), so a burst of its turns right after the policy starts reads as a
  full pool while the engine holds almost nothing, and its turns expire
  waiting on answers that will mostly never be written (on a held-out
  ServeGen window, 29 of 30 chat turns in the first 2 s, where FCFS served
  all 30).
- **Within the tenant's own share of the pool.** Past the cold start, the
  fill is the caller's to grant where the head's tenant, with it, stays
  within its max-min share of the pool
  (:class:`~slopolicy.core.kv.shares.KVShares`, by averaged need: every
  tenant is, while those needs fit the pool, and a burst from a tenant that
  was quiet is until its average takes it in): the risk it takes is on room
  that tenant is due. A
  ServeGen client that sends bursts of up to 141 reasoning turns at one
  instant (70-token prompts, answers of about 3,800 tokens) saw most of
  each burst expire behind the peak where FCFS started them all: the
  default did harm (attainment 0.088 below FCFS's at a low rate). With the
  fill within the share it is 0.002 above. A tenant past its share gets
  no fill: there a held-back burst is its long answers about to hold the
  pool while the other tenants' turns wait: filling for every deadline head
  cut the attainment of the tenants within their share, at twice FCFS's
  capacity on another window, from 0.848 to 0.670 (``benchmarks/README.md``).

No fill where every answer is counted at its ceiling by choice (no forecast
configured): then the ceiling is the contract asked for.
"""

from __future__ import annotations

from slopolicy.core.cost.outputs import OutputForecast
from slopolicy.core.kv.ledger import KVReservation
from slopolicy.core.lifecycle import Entry

__all__ = ("FILL", "Reservations")

#: The most of the pool, as held now, that a start the forecast peak holds
#: back may bring it to (at its forecast; see the module): the level under
#: which the ladder's default ``kv_usage`` trigger reads the engine as out of
#: KV pressure, so the running requests keep a fifth to grow into.
FILL = 0.8


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

    def fill(self, entry: Entry, *, within_share: bool) -> float | None:
        """The fraction of the pool as held now that the queued ``entry`` may
        start within where the peak holds it back (see the module): :data:`FILL`
        while its answer is counted at its ceiling for want of a forecast (its
        lane has too few answers and its tenant too), or where the caller
        found its tenant ``within_share`` of the pool with it; ``None``
        otherwise, and where no forecast is configured."""
        outputs = self.outputs
        if outputs is None:
            return None
        if within_share:
            return FILL
        if entry.kv_output < entry.request.max_new_tokens:
            return None
        if outputs.forecast(entry.lane, tenant=entry.tenant) is not None:
            return None
        return FILL

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

    def fits_without(self, entry: Entry, *, without: Entry) -> bool:
        """Whether :meth:`start` of the queued ``entry`` would succeed by the
        peak once the running ``without`` is revoked (the engine drops it now)."""
        tokens, held, sequences = self._needs(entry)
        return self.kv._fits_without(
            entry.lane, tokens, held=held, sequences=sequences, without=without.id
        )

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
