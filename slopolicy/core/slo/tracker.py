"""SLO tracking for one lane (or one tenant in a lane) over sliding windows.

What counts where (``F`` = a :class:`~slopolicy.core.outcome.Finished`):

* **Success rate** = completed / (completed + failed + expired). *Cancelled*
  requests are the client's choice and count in neither part (they are
  reported on their own, so a spike stays visible). *Rejected* requests are the
  policy's choice, made to protect the SLO, and by default count in neither
  part either: they are reported as :attr:`SLOSnapshot.rejected_fraction`; pass
  ``rejected_are_errors=True`` to count them as failures (e.g. when 503s
  should spend the availability budget).
* **Attainment** = attained / the same denominator; a request attains iff it
  completed and met every target (:meth:`SLOTargets.attains`).
* **Latency distributions**: TTFT and queue wait of *every* request that has
  them (what callers saw, cancelled or failed ones included); TPOT and
  end-to-end of *completed* requests only (a cut-off stream has neither);
  prompt tokens of every request.
* **TBT** (time between tokens; lane trackers only): every gap between two
  chunks of a stream the policy saw (:mod:`slopolicy.core.slo.gaps`), counted
  as it happens, and **stalls**, the gaps of at least the lane's
  :attr:`~SLOTargets.stall_threshold`. With a ``tbt_p99`` target a request
  attains only if its own p99 gap is within it (:func:`~slopolicy.core.slo.targets.tbt_met`).
  TBT is not a burn-rate objective.
* **Latency objectives** (burn rates): TTFT objectives count every request with
  a TTFT, plus, as errors, requests that ended without a first token after
  waiting longer than the threshold (they certainly missed it); TPOT and
  end-to-end objectives count completed requests.
* **Cost per successful request** = ``cost_model(F)`` summed over every
  finished request (failed and cancelled ones cost too) / completed; the
  default model is ``F.cost``, the cost units charged.
* **Rates** (throughput = completed/s, goodput = attained/s) divide by the
  seconds the window covers: from the later of the window's start and the
  tracker's start, at least one slice.

Windows follow :mod:`slopolicy.core.slo.windows`: the short window (default 60 s
in 12 slices) covers between 55 and 60 s. Quantiles are within ``alpha``
relative error (:mod:`slopolicy.core.slo.quantiles`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from slopolicy.core.checks import MAX_AMOUNT, check_now, shown
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.slo.budget import (
    STAGE_FIELDS,
    STAGE_METRICS,
    Breakdown,
    add_stages,
    stage_breakdown,
)
from slopolicy.core.slo.burn import DEFAULT_BURN_RULES, Alert, BurnRate, BurnRule, BurnWindows
from slopolicy.core.slo.gaps import GapWindow
from slopolicy.core.slo.judged import Judged, burn_verdicts, check_finished
from slopolicy.core.slo.sketches import FOLD_AT, SlidingSketches
from slopolicy.core.slo.snapshot import SLOSnapshot
from slopolicy.core.slo.targets import SLOTargets, Summary
from slopolicy.errors import UsageError

__all__ = ("CostModel", "SLOTracker", "charged_cost")

#: Prices one finished request (e.g. in dollars); must return a finite number >= 0.
CostModel = Callable[[Finished], float]

_FIELDS = tuple(Outcome)
_INDEX = {outcome: index for index, outcome in enumerate(_FIELDS)}
_ATTAINED, _SPEND, _OUTPUT = len(_FIELDS), len(_FIELDS) + 1, len(_FIELDS) + 2
_COUNTS = len(_FIELDS) + 3  # the stage sums follow the counts
# One ring holds every short-window metric, so a record looks up one slice.
_TTFT, _TPOT, _QUEUE, _E2E, _PROMPT = range(5)
_METRICS = {
    "ttft": _TTFT,
    "tpot": _TPOT,
    "queue_wait": _QUEUE,
    "e2e": _E2E,
    "prompt_tokens": _PROMPT,
}
_STAGES = 5  # first stage sketch


def charged_cost(finished: Finished) -> float:
    """The default cost model: the cost units charged to the tenant."""
    return finished.cost


class SLOTracker:
    """Attainment, goodput, success, cost, latency quantiles and burn rates for
    one lane or one (lane, tenant); see the module doc for every definition.

    ``record`` is O(1) amortized. Every method that reads time takes ``now``
    (monotonic seconds); an earlier ``now`` than one seen counts as the latest.
    ``burn_rules=()`` turns burn tracking off and ``breakdown=False`` the
    per-stage budget and ``tbt=False`` the token-gap window (all cost memory;
    tenant trackers go without). ``start`` is when tracking began (default: the first ``now`` seen).
    """

    __slots__ = (
        "_breakdown",
        "_burn",
        "_cost_model",
        "_gaps",
        "_latest",
        "_objectives",
        "_start",
        "_window",
        "lane",
        "rejected_are_errors",
        "targets",
        "tenant",
    )

    def __init__(
        self,
        lane: str,
        targets: SLOTargets | None = None,
        *,
        tenant: str | None = None,
        cost_model: CostModel | None = None,
        window_s: float = 60.0,
        slices: int = 12,
        alpha: float = 0.01,
        burn_rules: Sequence[BurnRule] = DEFAULT_BURN_RULES,
        burn_buckets: int = 60,
        breakdown: bool = True,
        tbt: bool = True,
        rejected_are_errors: bool = False,
        start: float | None = None,
    ) -> None:
        self.lane = lane
        self.tenant = tenant
        self.targets = targets if targets is not None else SLOTargets()
        self.rejected_are_errors = rejected_are_errors
        self._cost_model = cost_model if cost_model is not None else charged_cost
        self._breakdown = breakdown
        self._window = SlidingSketches(
            _STAGES + (STAGE_METRICS if breakdown else 0),
            _COUNTS + (STAGE_FIELDS if breakdown else 0),
            window_s=window_s,
            slices=slices,
            alpha=alpha,
        )
        self._gaps = (
            GapWindow(self.targets.stall_threshold, window_s=window_s, slices=slices, alpha=alpha)
            if tbt
            else None
        )
        self._objectives = self.targets.objectives()
        goals = [(objective, goal) for objective, goal, _ in self._objectives]
        self._burn = BurnWindows(goals, burn_rules, buckets=burn_buckets) if burn_rules else None
        self._start = start
        self._latest = -math.inf

    def _recycle(self, tenant: str) -> None:
        """Start over as a fresh tracker for ``tenant`` (same lane, targets and
        settings; burn windows off): an evicted tenant's tracker is reused
        rather than a new one built, which at many tenants is most of the cost."""
        assert self._burn is None
        assert not self._breakdown
        assert self._gaps is None
        self.tenant = tenant
        self._window.clear()
        self._start = None
        self._latest = -math.inf

    def record(self, finished: Finished, *, now: float) -> None:
        """Count one finished request at ``now``; a ``REJECTED`` one as :meth:`record_rejected`.

        Raises :class:`UsageError`, changing nothing, if a timing is negative or
        not finite, a stage is unknown, or the cost model returns a bad number.
        """
        if finished.outcome is Outcome.REJECTED:
            check_finished(finished)
            self.record_rejected(now=now)
            return
        self._add(self._judge(finished), self._see(now))

    def _judge(self, finished: Finished) -> Judged:
        """Check ``finished`` (not ``REJECTED``) and work out what it counts as,
        changing nothing. The result may be added to any tracker with the same
        targets and cost model (a lane's and its tenants'): see :meth:`_add`."""
        check_finished(finished)
        return self._judge_checked(finished)

    def _judge_checked(self, finished: Finished) -> Judged:
        """:meth:`_judge` of a record whose timings are known to be good (the
        policy's own, made from checked monotonic times)."""
        cost = self._cost_model(finished)
        if not (cost >= 0 and cost <= MAX_AMOUNT):
            raise UsageError(f"the cost model must return a finite number >= 0, got {shown(cost)}")
        completed = finished.outcome is Outcome.COMPLETED
        e2e = finished.e2e
        attained = completed and self.targets.attains(
            finished.ttft, finished.tpot, e2e, finished.gaps, finished.slow_gaps
        )
        verdicts = None if self._burn is None else burn_verdicts(self._objectives, finished)
        return Judged(finished, _INDEX[finished.outcome], completed, attained, cost, e2e, verdicts)

    def _add(self, judged: Judged, now: float) -> None:
        """Count a request judged by this tracker, or by one with the same targets
        and cost model and burn windows wherever this one has them, at a finite
        ``now`` (the caller checked it)."""
        now = self._advance(now)
        finished = judged.finished
        piece = self._window.current(now=now)
        sums, pending = piece.sums, piece.pending
        sums[judged.index] += 1.0
        sums[_SPEND] += judged.cost
        sums[_OUTPUT] += finished.output_tokens
        if judged.attained:
            sums[_ATTAINED] += 1.0
        # Checked values wait in the slice and reach its sketches in batches.
        ttft = finished.ttft
        if ttft is not None:
            pending[_TTFT].append(ttft)
        if finished.queue_wait is not None:
            pending[_QUEUE].append(finished.queue_wait)
        if judged.completed:
            if finished.tpot is not None:
                pending[_TPOT].append(finished.tpot)
            pending[_E2E].append(judged.e2e)
        prompts = pending[_PROMPT]
        prompts.append(finished.prompt_tokens)
        if len(prompts) >= FOLD_AT:  # every record adds a prompt: the longest list
            piece.fold()
        if self._breakdown:
            add_stages(piece, _STAGES, _COUNTS, ttft, finished.stages, self.targets.ttft_target)
        if self._burn is not None:
            assert judged.verdicts is not None  # judged by a tracker with burn windows
            self._burn._record(now, judged.verdicts)  # one verdict per goal, by _judge

    def record_gap(self, gap: float, *, now: float) -> bool:
        """Count one gap of ``gap`` seconds between two chunks of a stream at
        ``now``; whether it is above the ``tbt_p99`` target (a slow gap, to
        count in the request's ``Finished.slow_gaps``). Raises
        :class:`UsageError`, changing nothing, on a bad gap or ``now``, or when
        the tracker keeps no TBT (``tbt=False``)."""
        if self._gaps is None:
            raise UsageError(f"the tracker of {self.lane!r} keeps no TBT (tbt=False)")
        if not (gap >= 0 and gap <= MAX_AMOUNT):
            raise UsageError(f"a token gap must be finite seconds >= 0, got {shown(gap)}")
        self._gaps._add(gap, self._see(now))
        return gap > self.targets.slow_gap

    @property
    def gap_window(self) -> GapWindow | None:
        """The token-gap window (``None`` with ``tbt=False``), for the policy to
        count its own checked gaps in directly (one call per chunk)."""
        return self._gaps

    def record_rejected(self, *, now: float) -> None:
        """Count one request the policy refused (it never produced a ``Finished``)."""
        check_now(now)
        self._record_rejected(now)

    def _record_rejected(self, now: float) -> None:
        """:meth:`record_rejected` at a checked ``now``."""
        now = self._advance(now)
        self._window.current(now=now).sums[_INDEX[Outcome.REJECTED]] += 1.0
        if self._burn is not None and self.rejected_are_errors:
            verdicts: list[bool | None] = [None] * len(self._objectives)
            verdicts[0] = True  # success comes first
            self._burn._record(now, verdicts)

    def snapshot(self, *, now: float) -> SLOSnapshot:
        """A frozen view of the window (and burn windows) at ``now``."""
        now = self._see(now)
        sums = self._window.totals(now=now)
        window = self._window
        gaps = self._gaps
        return SLOSnapshot(
            at=now,
            lane=self.lane,
            tenant=self.tenant,
            targets=self.targets,
            window_s=window.window_s,
            span_s=self.span(now=now),
            completed=int(sums[_INDEX[Outcome.COMPLETED]]),
            failed=int(sums[_INDEX[Outcome.FAILED]]),
            expired=int(sums[_INDEX[Outcome.EXPIRED]]),
            cancelled=int(sums[_INDEX[Outcome.CANCELLED]]),
            rejected=int(sums[_INDEX[Outcome.REJECTED]]),
            revoked=int(sums[_INDEX[Outcome.REVOKED]]),
            attained=int(sums[_ATTAINED]),
            spend=sums[_SPEND],
            output_tokens=int(sums[_OUTPUT]),
            ttft=Summary.of(window.sketch(_TTFT, now=now)),
            tpot=Summary.of(window.sketch(_TPOT, now=now)),
            queue_wait=Summary.of(window.sketch(_QUEUE, now=now)),
            e2e=Summary.of(window.sketch(_E2E, now=now)),
            prompt_tokens=Summary.of(window.sketch(_PROMPT, now=now)),
            breakdown=self.breakdown(now=now),
            burn_rates=self.burn_rates(now=now),
            alerts=self.alerts(now=now),
            rejected_are_errors=self.rejected_are_errors,
            tbt=None if gaps is None else gaps.summary(now=now),
            tbt_stalls=0 if gaps is None else gaps.stalls(now=now),
        )

    def quantile(self, metric: str, q: float, *, now: float) -> float | None:
        """One quantile of one metric over the window, without a full snapshot:
        ``metric`` is ``ttft``, ``tpot``, ``queue_wait``, ``e2e``, ``tbt``
        (seconds; ``tbt`` on trackers that keep it) or ``prompt_tokens``;
        ``None`` when the window holds no values."""
        if metric == "tbt" and self._gaps is not None:
            return self._gaps.quantile(q, now=self._see(now))
        index = _METRICS.get(metric)
        if index is None:
            names = sorted([*_METRICS, "tbt"] if self._gaps is not None else _METRICS)
            raise UsageError(f"metric must be one of {names}, not {metric!r}")
        return self._window.sketch(index, now=self._see(now)).quantile(q)

    def span(self, *, now: float) -> float:
        """Seconds the short window covers at ``now`` (the rates' divisor, >= one slice)."""
        now = self._see(now)
        assert self._start is not None  # set by _see
        begin = max(self._window.start(now=now), self._start)
        return max(now - begin, self._window.width)

    def breakdown(self, *, now: float) -> Breakdown | None:
        """The TTFT budget split at ``now``, or ``None`` when not kept."""
        if not self._breakdown:
            return None
        now = self._see(now)
        return stage_breakdown(self._window, _STAGES, _COUNTS, self.targets.ttft_target, now=now)

    def burn_rates(self, *, now: float) -> tuple[BurnRate, ...]:
        """Burn rate of each objective over each window at ``now`` (empty when off)."""
        return () if self._burn is None else self._burn._rates(self._see(now))

    def alerts(self, *, now: float) -> tuple[Alert, ...]:
        """The multi-window burn-rate alerts at ``now`` (see :mod:`slopolicy.core.slo.burn`)."""
        return () if self._burn is None else self._burn._alerts(self._see(now))

    def _see(self, now: float) -> float:
        """Check ``now`` and :meth:`_advance` to it."""
        check_now(now)
        return self._advance(now)

    def _advance(self, now: float) -> float:
        """The latest of ``now`` (checked) and every ``now`` before it; the
        first one starts the window's span."""
        if now > self._latest:
            self._latest = now
        if self._start is None:
            self._start = self._latest
        return self._latest
