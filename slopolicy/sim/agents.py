"""Agent workloads: each arrival of a stream is a task of several turns.

An agent calls the model, calls tools with what it said, and calls the
model again with everything so far: turn ``k``'s prompt is turn ``k - 1``'s
prompt plus its answer plus the tool output. Tool calls take heavy-tailed
time (a lognormal in milliseconds: most are quick, a few take tens of
seconds), and the simulator sends a turn only once the one before it
completed (:mod:`slopolicy.sim.simulator`), so a slow engine slows every
task down rather than piling turns up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from slopolicy.errors import UsageError
from slopolicy.sim.lengths import LengthDistribution
from slopolicy.sim.workload import SimRequest

__all__ = ("AgentTurns",)


@dataclass(frozen=True, slots=True)
class AgentTurns:
    """How a stream's tasks unfold.

    Attributes:
        turns: turns per task (>= 1).
        tool_wait_ms: milliseconds of tool calls before each later turn.
        tool_output_tokens: tokens the tools add to the context each time.
        deadline_s: the whole task's deadline, seconds after its first turn
            arrives (``None``: none).
    """

    turns: LengthDistribution
    tool_wait_ms: LengthDistribution
    tool_output_tokens: LengthDistribution
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.deadline_s is not None and not 0 < self.deadline_s < 1e9:
            raise UsageError(f"deadline_s must be within (0, 1e9) seconds, got {self.deadline_s!r}")

    def expand(
        self, first: SimRequest, output: LengthDistribution, rng: random.Random
    ) -> list[SimRequest]:
        """The turns of the task that starts with ``first`` (its id is the
        task id; turn ``k`` is ``{id}.{k}``), answers drawn from ``output``."""
        count = self.turns.sample(rng)
        deadline = None if self.deadline_s is None else first.arrival + self.deadline_s
        prompt, answer = first.prompt_tokens, first.output_tokens
        found: list[SimRequest] = []
        for turn in range(count):
            wait = 0.0
            if turn:
                prompt += min(answer, first.max_new_tokens) + self.tool_output_tokens.sample(rng)
                answer = output.sample(rng)
                wait = self.tool_wait_ms.sample(rng) / 1000
            found.append(
                SimRequest(
                    id=f"{first.id}.{turn}",
                    arrival=first.arrival,
                    tenant=first.tenant,
                    prompt_tokens=prompt,
                    output_tokens=answer,
                    max_new_tokens=first.max_new_tokens,
                    lane=first.lane,
                    stream=first.stream,
                    retries=first.retries,
                    tier=first.tier,
                    task=first.id,
                    turn=turn,
                    turns=count,
                    tool_wait=wait,
                    task_deadline=deadline,
                )
            )
        return found
