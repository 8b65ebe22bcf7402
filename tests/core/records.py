"""Builders for the finished-request records the SLO tests feed to trackers."""

from __future__ import annotations

from collections.abc import Mapping

from slopolicy.core.outcome import Finished, Hold, Outcome


def finished(
    now: float,
    *,
    ttft: float | None = 0.2,
    tpot: float | None = 0.02,
    e2e: float | None = None,
    queue: float | None = None,
    outcome: Outcome = Outcome.COMPLETED,
    lane: str = "interactive",
    tenant: str = "acme",
    prompt_tokens: int = 500,
    output_tokens: int = 100,
    cost: float = 700.0,
    stages: Mapping[str, float] | None = None,
    held_by: Hold | None = None,
) -> Finished:
    """A request that finished at ``now``; ``e2e`` defaults to TTFT plus its decode time."""
    if e2e is None:
        e2e = (ttft or 0.0) + (tpot or 0.0) * max(output_tokens - 1, 0)
    if stages is None:
        stages = {} if queue is None else {"queue": queue}
    return Finished(
        id=f"r{now}",
        tenant=tenant,
        lane=lane,
        outcome=outcome,
        arrival=now - e2e,
        finished_at=now,
        queue_wait=queue,
        ttft=ttft,
        tpot=tpot,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cost=cost,
        stages=stages,
        held_by=held_by,
    )
