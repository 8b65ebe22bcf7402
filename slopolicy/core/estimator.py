"""Cost estimation before the stream starts.

``CostScore = alpha * prompt_tokens + beta * output_tokens + gamma * tool_risk``

in *cost units*. With the defaults (alpha 1, beta 2) one cost unit is one
prompt token of prefill and an output token costs two, the weighting the
Virtual Token Counter paper (Sheng et al., OSDI 2024) uses for fair queuing,
so the same unit serves quotas and fairness. ``output_tokens`` is the most the
engine may generate: ``max_new_tokens`` times the sequences (``n``/``best_of``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.core.checks import MAX_AMOUNT, is_number, shown
from slopolicy.core.records import fast_init
from slopolicy.core.request import Message, Request
from slopolicy.core.sampling import sample_tokens
from slopolicy.core.tokens import TokenCounter, load_counter
from slopolicy.errors import UsageError

__all__ = ("CostEstimate", "CostEstimator", "CostWeights", "TokenEstimate")


@dataclass(frozen=True, slots=True)
class CostWeights:
    """Cost units per prompt token (``alpha``), per output token (``beta``) and
    at ``tool_risk`` 1 (``gamma``)."""

    alpha: float = 1.0
    beta: float = 2.0
    gamma: float = 1000.0

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            value = getattr(self, name)
            if not (is_number(value) and 0 <= value <= MAX_AMOUNT):
                raise UsageError(f"{name} must be a finite number >= 0, got {shown(value)}")


@fast_init
@dataclass(frozen=True, slots=True)
class TokenEstimate:
    """A prompt length in tokens.

    ``exact`` when counted in full (or given by the caller); otherwise
    sampled, with ``rel_stderr`` its relative standard error (0.01 = 1%).
    ``method`` names how: ``given``, ``exact:<counter>``, ``sampled:<counter>``.
    """

    tokens: int
    exact: bool
    rel_stderr: float
    method: str

    @property
    def upper(self) -> int:
        """A conservative count: two standard errors above the estimate."""
        return math.ceil(self.tokens * (1.0 + 2.0 * self.rel_stderr))


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """Prompt tokens, the output budget in tokens, and the cost score in cost units."""

    prompt: TokenEstimate
    output_tokens: int
    cost: float


class CostEstimator:
    """Counts prompt tokens and scores requests in cost units, in bounded time.

    Texts up to ``exact_max_chars`` characters are counted exactly; longer ones
    are estimated from rounds of ``sample_windows`` evenly spaced windows (see
    :mod:`slopolicy.core.sampling`), adding rounds while the relative standard
    error exceeds ``target_rel_error``, up to ``max_rounds``: a 10 MB prompt
    costs about as much as a 50 kB one. Chat messages add ``message_overhead`` tokens each (plus the
    role, and ``name_overhead`` plus the name when named) and
    ``reply_overhead`` once, as OpenAI's chat format does.
    """

    __slots__ = (
        "_role_tokens",
        "counter",
        "exact_max_chars",
        "max_rounds",
        "message_overhead",
        "name_overhead",
        "reply_overhead",
        "sample_windows",
        "target_rel_error",
        "weights",
    )

    def __init__(
        self,
        weights: CostWeights | None = None,
        *,
        counter: TokenCounter | None = None,
        exact_max_chars: int = 16_384,
        sample_windows: int = 96,
        target_rel_error: float = 0.02,
        max_rounds: int = 4,
        message_overhead: int = 3,
        name_overhead: int = 1,
        reply_overhead: int = 3,
    ) -> None:
        if exact_max_chars < 0 or sample_windows < 8 or max_rounds < 1:
            raise UsageError(
                "exact_max_chars must be >= 0, sample_windows >= 8 and max_rounds >= 1"
            )
        self.weights = weights if weights is not None else CostWeights()
        self.counter = counter if counter is not None else load_counter()
        self.exact_max_chars = exact_max_chars
        self.sample_windows = sample_windows
        self.target_rel_error = target_rel_error
        self.max_rounds = max_rounds
        self.message_overhead = message_overhead
        self.name_overhead = name_overhead
        self.reply_overhead = reply_overhead
        self._role_tokens: dict[str, int] = {}

    def score(self, prompt_tokens: int, output_tokens: int, tool_risk: float = 0.0) -> float:
        """The cost score, in cost units."""
        w = self.weights
        return w.alpha * prompt_tokens + w.beta * output_tokens + w.gamma * tool_risk

    def estimate(self, request: Request) -> CostEstimate:
        """Prompt tokens, output budget and cost score of ``request``."""
        prompt = self.prompt_tokens(request)
        output = request.output_budget
        return CostEstimate(prompt, output, self.score(prompt.tokens, output, request.tool_risk))

    def prompt_tokens(self, request: Request) -> TokenEstimate:
        """The prompt length: given, counted, or sampled."""
        if request.prompt_tokens is not None:
            return TokenEstimate(request.prompt_tokens, True, 0.0, "given")
        if request.messages is not None:
            return self.count_messages(request.messages)
        assert request.prompt is not None  # Request guarantees one of the three
        return self.count_texts([request.prompt])

    def count_messages(self, messages: Sequence[Message]) -> TokenEstimate:
        """Tokens of a chat prompt, with the per-message formatting overhead."""
        overhead = self.reply_overhead
        for message in messages:
            overhead += self.message_overhead + self._role_count(message.role)
            if message.name is not None:
                overhead += self.name_overhead + self.counter.count(message.name)
        content = self.count_texts([message.content for message in messages])
        return TokenEstimate(
            content.tokens + overhead, content.exact, content.rel_stderr, content.method
        )

    def count_texts(self, texts: Sequence[str]) -> TokenEstimate:
        """Total tokens of ``texts``, each tokenized on its own."""
        total_chars = sum(len(text) for text in texts)
        if total_chars <= self.exact_max_chars:
            tokens = sum(self.counter.count(text) for text in texts if text)
            return TokenEstimate(tokens, True, 0.0, f"exact:{self.counter.name}")
        sampled = sample_tokens(
            texts,
            self.counter.count,
            windows=self.sample_windows,
            target_rel_error=self.target_rel_error,
            max_rounds=self.max_rounds,
        )
        return TokenEstimate(
            round(sampled.tokens), False, sampled.rel_stderr, f"sampled:{self.counter.name}"
        )

    def _role_count(self, role: str) -> int:
        # Roles repeat ("user", "assistant"); cache their counts, but only for
        # a bounded set so arbitrary role strings cannot grow the cache.
        cached = self._role_tokens.get(role)
        if cached is None:
            cached = self.counter.count(role)
            if len(self._role_tokens) < 64:
                self._role_tokens[role] = cached
        return cached
