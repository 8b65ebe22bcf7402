"""Prompts made to a recorded token count, and how close they land.

A prompt is common English words (each one token in Llama 3's tokenizer and
in cl100k) drawn from a generator seeded per request, so every lane of a
replay sends the same text. With a counter (the engine's ``/tokenize``) each
prompt is counted and its length corrected once by the words-per-token ratio
measured on a sample; the engine's own count of what was sent (``usage``)
is what :class:`PromptFit` reports.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from slopolicy.sim.workload import SimRequest

__all__ = ("WORDS", "PromptFit", "build_prompts", "words")

_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her an are were it be this "
    "which or had not but have one all new more time has its first after year two can also "
    "when people other into used some she out city than state many most made over world back "
    "part during school"
)
#: The words prompts are made of.
WORDS = tuple(_VOCABULARY.split())

#: Counts the engine's tokens in a text, or ``None`` when it cannot.
Counter = Callable[[str], Awaitable[int | None]]


def words(rng: random.Random, count: int) -> str:
    """``count`` words drawn from :data:`WORDS`, space-separated."""
    return " ".join(rng.choice(WORDS) for _ in range(count))


async def build_prompts(
    requests: Iterable[SimRequest], count: Counter | None, *, offset: int = 0, seed: int = 0
) -> dict[str, str]:
    """A prompt for each request of ``prompt_tokens`` tokens as the engine
    counts a request (``offset``: the tokens it adds to what ``count``
    counts, a BOS), keyed by request id; without ``count``, one word a token."""
    ratio = 1.0
    if count is not None:
        sample = words(random.Random(seed), 1000)
        counted = await count(sample)
        ratio = counted / 1000 if counted else 1.0
    prompts: dict[str, str] = {}
    for index, request in enumerate(requests):
        rng = random.Random(f"{seed}:{index}")
        wanted = max(1, request.prompt_tokens - offset)
        text = words(rng, max(1, round(wanted / ratio)))
        if count is not None and (counted := await count(text)) is not None and counted != wanted:
            more = round((wanted - counted) / ratio)
            size = max(1, len(text.split()) + more)
            text = words(random.Random(f"{seed}:{index}"), size)
        prompts[request.id] = text
    return prompts


@dataclass(frozen=True, slots=True)
class PromptFit:
    """How close the prompts sent landed to their recorded lengths, as the
    engine counted them (its ``usage.prompt_tokens``).

    Attributes:
        counted: requests the engine reported a prompt count for.
        exact: of those, the ones of exactly the recorded length.
        mean_error: mean of ``|sent - recorded| / recorded``, 0-1.
        max_error_tokens: the largest ``|sent - recorded|``, in tokens.
    """

    counted: int
    exact: int
    mean_error: float
    max_error_tokens: int

    @classmethod
    def of(cls, recorded: Mapping[str, int], sent: Mapping[str, int]) -> PromptFit:
        """The fit of ``sent`` (request id -> the engine's count) to ``recorded``."""
        pairs = [(recorded[key], value) for key, value in sent.items() if key in recorded]
        errors = [abs(value - want) for want, value in pairs]
        mean = sum(e / want for e, (want, _) in zip(errors, pairs, strict=True))
        return cls(
            len(pairs),
            errors.count(0),
            mean / len(pairs) if pairs else 0.0,
            max(errors, default=0),
        )

    def describe(self) -> str:
        """One line for people."""
        if not self.counted:
            return "prompt lengths: the engine reported no prompt counts"
        return (
            f"prompt lengths as the engine counted them: {self.exact}/{self.counted} exact, "
            f"mean error {self.mean_error:.2%}, largest {self.max_error_tokens} tokens"
        )
