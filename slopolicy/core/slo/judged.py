"""What one finished request counts as in an SLO tracker: its checks and its burn verdicts.

The :class:`~slopolicy.core.slo.tracker.SLOTracker` checks a
:class:`~slopolicy.core.outcome.Finished` with :func:`check_finished`, works
out once what it counts as (a :class:`Judged`), and adds that to every
tracker it belongs in (a lane's and its tenants').
"""

from __future__ import annotations

from collections.abc import Sequence

from slopolicy.core.checks import MAX_AMOUNT, shown
from slopolicy.core.outcome import Finished, Outcome
from slopolicy.core.slo.budget import check_stages
from slopolicy.core.slo.targets import Objective
from slopolicy.errors import UsageError

__all__ = ("Judged", "burn_verdicts", "check_finished")


class Judged:
    """One checked finished request and what it counts as, worked out once for
    every tracker it is recorded in (see
    :meth:`~slopolicy.core.slo.tracker.SLOTracker._judge`)."""

    __slots__ = ("attained", "completed", "cost", "e2e", "finished", "index", "verdicts")

    def __init__(
        self,
        finished: Finished,
        index: int,
        completed: bool,
        attained: bool,
        cost: float,
        e2e: float,
        verdicts: list[bool | None] | None,
    ) -> None:
        self.finished = finished
        self.index = index  # the outcome's count in the window sums
        self.completed = completed
        self.attained = attained
        self.cost = cost
        self.e2e = e2e
        self.verdicts = verdicts


def burn_verdicts(
    objectives: Sequence[tuple[Objective, float, float | None]], finished: Finished
) -> list[bool | None]:
    """Per objective of ``objectives`` (``SLOTargets.objectives()``), whether
    ``finished`` is an error (``True``), a good event (``False``) or not an
    event of it at all (``None``)."""
    outcome = finished.outcome
    verdicts: list[bool | None] = []
    for objective, _, threshold in objectives:
        if objective is Objective.SUCCESS:
            verdicts.append(
                None if outcome is Outcome.CANCELLED else outcome is not Outcome.COMPLETED
            )
            continue
        assert threshold is not None  # only success has none
        if objective in (Objective.TTFT_P95, Objective.TTFT_P99):
            if finished.ttft is not None:
                verdicts.append(finished.ttft > threshold)
            else:  # never got a first token: an error only if it waited past the bound
                verdicts.append(True if finished.e2e > threshold else None)
            continue
        value = finished.tpot if objective is Objective.TPOT_P95 else finished.e2e
        completed = outcome is Outcome.COMPLETED and value is not None
        verdicts.append(value > threshold if completed and value is not None else None)
    return verdicts


def check_finished(finished: Finished) -> None:
    """Raise :class:`UsageError` if a timing of ``finished`` is negative or not
    finite (seconds), a token count is negative, its gap counts disagree, or a
    stage is unknown."""
    for name, value in (
        ("queue_wait", finished.queue_wait),
        ("ttft", finished.ttft),
        ("tpot", finished.tpot),
    ):
        if value is not None and not (value >= 0 and value <= MAX_AMOUNT):
            raise UsageError(f"{name} must be finite seconds >= 0, got {shown(value)}")
    e2e = finished.e2e
    if not (e2e >= 0 and e2e <= MAX_AMOUNT):
        raise UsageError(f"finished_at must not be before arrival (e2e {e2e!r})")
    if finished.prompt_tokens < 0 or finished.output_tokens < 0:
        raise UsageError("token counts must be >= 0")
    if not 0 <= finished.slow_gaps <= finished.gaps:
        raise UsageError(
            f"gaps must be >= 0 and slow_gaps in [0, gaps], got {finished.gaps!r}, "
            f"{finished.slow_gaps!r}"
        )
    check_stages(finished.stages)
