"""Cost weights, tokenizer settings and the engine's KV block pool."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel, CostUnits, Count
from slopolicy.core.cost.estimator import CostEstimator, CostWeights
from slopolicy.core.cost.tokens import TokenCounter, load_counter
from slopolicy.core.queueing.counters import MIN_WINDOW_S
from slopolicy.core.queueing.pacing import DispatchPace

__all__ = ("CostConfig", "EngineConfig", "KVPoolConfig", "TokenizerConfig")

# Cost weights up to a billion units per token keep every request's cost,
# and the fair-queue counters summing them, far from float overflow.
_CostWeight = Annotated[float, Field(ge=0, le=1e9)]
_Overhead = Annotated[int, Field(ge=0, le=64)]


class CostConfig(ConfigModel):
    """``CostScore = alpha*prompt_tokens + beta*output_tokens + gamma*tool_risk``,
    in cost units (with the defaults, one prompt token of prefill is one unit)."""

    alpha: _CostWeight = 1.0
    beta: _CostWeight = 2.0
    gamma: _CostWeight = 1000.0

    def to_weights(self) -> CostWeights:
        """The plain core value."""
        return CostWeights(self.alpha, self.beta, self.gamma)


class TokenizerConfig(ConfigModel):
    """How prompts are counted.

    Attributes:
        encoding: tiktoken encoding; ``cl100k_base`` works offline.
        exact_max_chars: texts up to this many characters are counted exactly;
            longer ones are estimated by sampling in bounded time.
        sample_windows: windows per sampling round (more: slower, tighter).
        target_rel_error: sampling adds rounds until its relative standard
            error is at most this...
        max_rounds: ...or this many rounds have run, bounding the time.
        message_overhead: tokens each chat message adds (plus its role).
        name_overhead: tokens a message's ``name`` adds (plus the name).
        reply_overhead: tokens that prime the reply, once per chat prompt.
    """

    encoding: Annotated[str, Field(min_length=1)] = "cl100k_base"
    exact_max_chars: Annotated[int, Field(ge=0)] = 16_384
    sample_windows: Annotated[int, Field(ge=8, le=4096)] = 96
    target_rel_error: Annotated[float, Field(ge=0, le=1)] = 0.02
    max_rounds: Annotated[int, Field(ge=1, le=64)] = 4
    message_overhead: _Overhead = 3
    name_overhead: _Overhead = 1
    reply_overhead: _Overhead = 3

    def build_estimator(
        self, weights: CostWeights, counter: TokenCounter | None = None
    ) -> CostEstimator:
        """A :class:`CostEstimator`; loads ``encoding`` unless ``counter`` is given."""
        return CostEstimator(
            weights,
            counter=counter if counter is not None else load_counter(self.encoding),
            exact_max_chars=self.exact_max_chars,
            sample_windows=self.sample_windows,
            target_rel_error=self.target_rel_error,
            max_rounds=self.max_rounds,
            message_overhead=self.message_overhead,
            name_overhead=self.name_overhead,
            reply_overhead=self.reply_overhead,
        )


#: The pool a config that follows the engine counts until the engine reports
#: its own: llama3-8b on one A100-80GB at 90% memory use (16-token blocks).
DEFAULT_BLOCKS = 26_688


class KVPoolConfig(ConfigModel):
    """The engine's KV block pool, as the engine reports it.

    ``num_blocks`` ``None`` (the default) follows the engine: the pool it
    reports (``EngineSignals.kv_capacity_tokens``, which the metrics
    scraper reads from vLLM's ``vllm:cache_config_info{num_gpu_blocks,
    block_size}`` or SGLang's ``sglang:max_total_num_tokens``), and
    :data:`DEFAULT_BLOCKS` until it does (llama3-8b on one A100-80GB at 90%
    memory use: about 427k tokens in 16-token blocks). A number is a cap:
    the ledger counts at most that many blocks, fewer where the engine
    reports a smaller pool (room left on purpose stays left). Each lane's
    ``kv_reserve`` is a fraction of the pool counted
    (:meth:`~slopolicy.core.kv.ledger.KVReservation.observe_capacity`).

    ``output_quantile`` is what a running request reserves for its answer:
    its prompt plus the mean (``"mean"``, the default) or this quantile (in
    (0, 1]) of the output tokens (per sequence) that its tenant's recent
    completed requests in its lane generated (its lane's, until the tenant
    has answered 8 there), at most its ``max_new_tokens`` (see
    :mod:`slopolicy.core.cost.outputs`); a reservation grows as the answer
    passes it. The mean, because the check adds every running request's
    forecast, and the sum of many answers is near the sum of their means,
    far below the sum of their p90s. A request starts iff the
    *peak* over the future of the running requests' KV and its own fits the
    pool, each holding its context now, growing a token a step and freeing
    at its forecast end (requests finish at different times, so the peak of
    the sum is far below the sum of the peaks), with every lane's
    ``kv_reserve`` floor kept at every step; see
    :mod:`slopolicy.core.kv.ledger`. Nothing is tuned to a trace: the
    forecast is measured per tenant and lane, the ends come from each
    request's progress. ``None`` forecasts every answer at its ceiling: the
    engine can then never be made to preempt, at the price of starts that
    wait for answers that never come.
    """

    # At most 2**31 - 1 blocks: far above any engine's pool, and the pool's
    # tokens (and each lane's reserved share of them) stay exact as floats.
    num_blocks: Annotated[int, Field(gt=0, le=2**31 - 1)] | None = None
    block_size: Annotated[int, Field(gt=0, le=1024)] = 16
    output_quantile: Annotated[float, Field(gt=0, le=1)] | Literal["mean"] | None = "mean"

    @property
    def blocks(self) -> int:
        """Blocks the ledger counts until the engine reports its pool:
        ``num_blocks``, or :data:`DEFAULT_BLOCKS` where it follows the engine."""
        return DEFAULT_BLOCKS if self.num_blocks is None else self.num_blocks

    @property
    def capacity_tokens(self) -> int:
        """Tokens the pool holds until the engine reports its own."""
        return self.blocks * self.block_size


class EngineConfig(ConfigModel):
    """How much the policy lets the engine run at once.

    ``max_running`` is the number of sequences dispatched to the engine and
    not yet finished: a request takes one per choice (``n``, ``best_of``), as
    the engine runs it. Keep it at or below the engine's own limit (vLLM
    ``--max-num-seqs``, TGI ``--max-concurrent-requests``, llama.cpp ``-np``):
    requests beyond it would wait in the engine's FCFS queue, where no policy
    can order them.

    ``dispatch_rate`` (cost units per second, unset: no pacing) paces starts:
    queued requests wait, in fair order, until the rate allows the next one
    (see :mod:`slopolicy.core.queueing.pacing`), for engines or upstream APIs whose
    limit is throughput (tokens per minute) rather than concurrency.
    ``dispatch_burst`` is how far ahead of the rate starts may run, in cost
    units (default: a tenth of a second at the rate).

    ``prefill_horizon_s`` bounds the prompt work handed to the engine ahead
    of a start: a request starts while the prompt tokens started and not yet
    through prefill (its own lane's and the more interactive lanes') plus its
    own fit in what the engine computes in that many seconds at the prefill
    rate the policy learns from first tokens, or when nothing is ahead of it
    (so the engine never idles while work waits). What is not handed over
    waits in the policy's queues, in the policy's order (fair across tenants,
    deadlines honoured), where a request that can no longer make its TTFT
    target leaves before it takes engine time. ``"auto"`` (the default):
    three quarters of the tightest ``tpot_p95_s`` among the lanes, so an
    engine iteration's prompt chunk stays under every decoding request's
    token-gap target; without TPOT targets, a quarter of the tightest TTFT
    target; with neither, off. ``0`` or ``null``: off (the engine's own FCFS
    queue orders everything released). See :mod:`slopolicy.core.queueing.ttft`.

    ``share_window_s`` is the window over which each tenant's demand is
    compared with its max-min share of what the engine serves (decayed sums
    of the cost queued and the cost started; see
    :mod:`slopolicy.core.queueing.demand`). Only while the tenants together
    ask for more than is served, a tenant asking for more than its share is
    ordered, inside each lane's fair slack, after the tenants within theirs:
    the over-share absorb the shortfall, and the counters still bound what
    they lose. The ladder's ``shed`` rung refuses by the same estimate: of a
    tenant over its share, the part of its requests beyond it; a tenant
    within its share still queues. Before ``shed`` is active, the ladder's
    first levels refuse the same excess only while the engine is saturated:
    it held a startable request back for at least half of the same window
    (:mod:`slopolicy.core.queueing.saturation`). Long enough that a small
    tenant's demand is more than its latest turn (over 10 s, on a long
    conversation trace at twice FCFS's capacity, 30% of the requests of the
    tenants within their long-run share read as over it), short enough to
    follow a change of load; ``null``: off (the slack orders by key alone,
    and ``shed`` refuses the whole lane).

    ``reclaim`` (with ``share_window_s``): starts are work-conserving, so a
    tenant over its share may take KV room nobody else asks for; when a
    queued request of a tenant within its share then does not fit, and the
    pool's ends at their recent pace would free its room only after its
    lane's TTFT target, dispatch ends one running request of a tenant over
    its share whose release lets it in (the latest started, the least work
    lost, or else the largest), and starts it
    (:attr:`Dispatch.revoked <slopolicy.Dispatch.revoked>`; the gate answers
    it with :class:`~slopolicy.Revoked`, 503). Never more than one request
    lost for each let in: a request only several revocations would let in
    waits for an end. ``false``: an over-share tenant keeps what it started,
    and the within-share request waits for an end.

    ``max_running`` defaults to vLLM's default ``--max-num-seqs`` (256): set
    it to your engine's own limit.
    """

    max_running: Count = 256
    prefill_horizon_s: Annotated[float, Field(ge=0, le=3600)] | Literal["auto"] | None = "auto"
    share_window_s: Annotated[float, Field(ge=MIN_WINDOW_S, le=86_400)] | None = 30.0
    reclaim: bool = True
    dispatch_rate: CostUnits | None = None
    dispatch_burst: Annotated[float, Field(ge=0, le=1e15)] | None = None

    @model_validator(mode="after")
    def _burst_with_rate(self) -> EngineConfig:
        if self.dispatch_burst is not None and self.dispatch_rate is None:
            raise ValueError("dispatch_burst needs dispatch_rate")
        return self

    def build_pace(self) -> DispatchPace | None:
        """A new :class:`~slopolicy.core.queueing.pacing.DispatchPace` (``None``: no rate)."""
        if self.dispatch_rate is None:
            return None
        burst = self.dispatch_burst
        return DispatchPace(
            self.dispatch_rate, 0.1 * self.dispatch_rate if burst is None else burst
        )
