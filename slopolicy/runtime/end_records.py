"""What the :class:`~slopolicy.runtime.gate.Gate` records as each request ends.

Telemetry, the quota strategy's settlement, the arrival log and the host's
``on_end`` callback each hear of every ended or refused request exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.decisions import Decision
from slopolicy.core.outcome import Finished
from slopolicy.core.request import Request
from slopolicy.errors import Rejected
from slopolicy.runtime.arrivals import ArrivalLog, ArrivalRecord
from slopolicy.runtime.quota import QuotaStrategy
from slopolicy.telemetry.recorder import Recorder

__all__ = ("EndRecords",)

logger = logging.getLogger("slopolicy.gate")


class EndRecords:
    """Records each request's end (see the module). ``epoch`` is the gate's
    clock reading when it opened: arrival records count seconds from it."""

    __slots__ = ("_estimator", "_log", "_on_end", "_quota", "_telemetry", "epoch")

    def __init__(
        self,
        *,
        estimator: CostEstimator,
        quota: QuotaStrategy,
        telemetry: Recorder | None,
        log: ArrivalLog | None,
        on_end: Callable[[ArrivalRecord], None] | None,
    ) -> None:
        self._estimator = estimator
        self._quota = quota
        self._telemetry = telemetry
        self._log = log
        self._on_end = on_end
        self.epoch = 0.0

    def ended(
        self, finished: Finished, request: Request, error: BaseException | None = None
    ) -> None:
        """``request`` ended as ``finished`` (``error``: the exception it ended on)."""
        if self._telemetry is not None:
            self._telemetry.ended(finished, error)
        self._quota.ended(finished)
        if self._log is None and self._on_end is None:
            return
        self._emit(ArrivalRecord.ended(finished, request, self.epoch))

    def refused(self, request: Request, decision: Decision, now: float) -> Rejected:
        """Record a refusal (telemetry, the arrival log) and return it to raise."""
        if self._telemetry is not None:
            self._telemetry.submitted(request, decision, now)
        if self._log is not None or self._on_end is not None:
            # The policy's count when it made one: a prompt is never counted twice.
            prompt = decision.prompt_tokens
            if prompt is None:
                prompt = request.prompt_tokens
            if prompt is None:  # refused before counting (an unknown tier or lane)
                prompt = self._estimator.prompt_tokens(request).tokens
            self._emit(ArrivalRecord.refused(request, decision.lane, prompt, now - self.epoch))
        return Rejected.of(decision)

    def _emit(self, record: ArrivalRecord) -> None:
        if self._log is not None:
            self._log.record(record)
        if self._on_end is not None:
            try:
                self._on_end(record)
            except Exception:
                # Raised mid-dispatch it would strand the waiters not yet woken.
                logger.warning("on_end raised for request %r", record.id, exc_info=True)
