"""Cost estimation before the stream starts.

``CostScore = alpha * prompt_tokens + beta * output_tokens + gamma * tool_risk``

in *cost units*. With the defaults (alpha 1, beta 2) one cost unit is one
prompt token of prefill and an output token costs two, the weighting the
Virtual Token Counter paper (Sheng et al., OSDI 2024) uses for fair queuing,
so the same unit serves quotas and fairness. ``output_tokens`` is the most the
engine may generate: ``max_new_tokens`` times the sequences (``n``/``best_of``).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from slopolicy.core.checks import MAX_AMOUNT, is_number, shown
from slopolicy.core.cost.sampling import sample_tokens
from slopolicy.core.cost.tokens import TokenCounter, load_counter
from slopolicy.core.fast_init import fast_init
from slopolicy.core.request import Message, Request
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
@dataclass(frozen=True, slots=True, kw_only=True)
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

    Every text the estimate reads (a prompt; each message's content, name and
    role) goes into one budget: when they total at most ``exact_max_chars``
    characters in at most ``exact_max_texts`` texts they are counted exactly;
    otherwise they are estimated together from rounds of ``sample_windows``
    windows spread over them (see :mod:`slopolicy.core.cost.sampling`), adding rounds
    while the relative standard error exceeds ``target_rel_error``, up to
    ``max_rounds``. The tokenizer's work is thus bounded whatever the request:
    a 10 MB prompt, role or name costs about as much as a 50 kB one, and a
    million messages the same few hundred tokenizer calls (plus passes over
    the messages at C speed, about 100 ns a message). Chat messages add
    ``message_overhead`` tokens each (plus the role, and ``name_overhead``
    plus the name when named) and ``reply_overhead`` once, as OpenAI's chat
    format does; the counts of short roles are kept (the common ones from the
    start), so ``"user"`` costs no tokenizer call.
    """

    __slots__ = (
        "_role_tokens",
        "counter",
        "exact_max_chars",
        "exact_max_texts",
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
        exact_max_texts: int = 1_024,
        sample_windows: int = 96,
        target_rel_error: float = 0.02,
        max_rounds: int = 4,
        message_overhead: int = 3,
        name_overhead: int = 1,
        reply_overhead: int = 3,
    ) -> None:
        if exact_max_chars < 0 or exact_max_texts < 1 or sample_windows < 8 or max_rounds < 1:
            raise UsageError(
                "exact_max_chars must be >= 0, exact_max_texts >= 1, sample_windows >= 8 "
                "and max_rounds >= 1"
            )
        self.weights = weights if weights is not None else CostWeights()
        self.counter = counter if counter is not None else load_counter()
        self.exact_max_chars = exact_max_chars
        self.exact_max_texts = exact_max_texts
        self.sample_windows = sample_windows
        self.target_rel_error = target_rel_error
        self.max_rounds = max_rounds
        self.message_overhead = message_overhead
        self.name_overhead = name_overhead
        self.reply_overhead = reply_overhead
        self._role_tokens = {role: self.counter.count(role) for role in _COMMON_ROLES}

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
            return TokenEstimate(
                tokens=request.prompt_tokens, exact=True, rel_stderr=0.0, method="given"
            )
        if request.messages is not None:
            return self.count_messages(request.messages)
        assert request.prompt is not None  # Request guarantees one of the three
        return self.count_texts([request.prompt])

    def count_messages(self, messages: Sequence[Message]) -> TokenEstimate:
        """Tokens of a chat prompt, with the per-message formatting overhead.

        Contents, names and the roles not kept are counted (or sampled)
        together, within the one budget."""
        # Comprehensions, not attrgetter maps: CPython's attribute cache makes
        # them about twice as fast, and a chat may hold a million messages.
        texts = [message.content for message in messages]
        names = [message.name for message in messages if message.name is not None]
        texts += names
        overhead = (
            self.reply_overhead
            + self.message_overhead * len(messages)
            + self.name_overhead * len(names)
        )
        roles = [message.role for message in messages]
        if max(map(len, roles), default=0) > _ROLE_MAX_CHARS:
            # Long roles are counted with the texts, never hashed (a 10 MB
            # role would take milliseconds) nor kept.
            texts += [role for role in roles if len(role) > _ROLE_MAX_CHARS]
            roles = [role for role in roles if len(role) <= _ROLE_MAX_CHARS]
        for role, times in _tally(roles).items():
            tokens = self._role_count(role)
            if tokens is None:
                texts += itertools.repeat(role, times)
            else:
                overhead += tokens * times
        counted = self.count_texts(texts)
        tokens = counted.tokens + overhead
        # The overhead is exact: only the counted part carries the error.
        rel_stderr = counted.rel_stderr * counted.tokens / tokens if tokens else 0.0
        return TokenEstimate(
            tokens=tokens, exact=counted.exact, rel_stderr=rel_stderr, method=counted.method
        )

    def count_texts(self, texts: Sequence[str]) -> TokenEstimate:
        """Total tokens of ``texts``, each tokenized on its own: exactly within
        ``exact_max_chars`` and ``exact_max_texts``, else sampled."""
        if len(texts) <= self.exact_max_texts and sum(map(len, texts)) <= self.exact_max_chars:
            tokens = sum(map(self.counter.count, filter(None, texts)))
            return TokenEstimate(
                tokens=tokens, exact=True, rel_stderr=0.0, method=f"exact:{self.counter.name}"
            )
        sampled = sample_tokens(
            texts,
            self.counter.count,
            windows=self.sample_windows,
            target_rel_error=self.target_rel_error,
            max_rounds=self.max_rounds,
        )
        return TokenEstimate(
            tokens=round(sampled.tokens),
            exact=False,
            rel_stderr=sampled.rel_stderr,
            method=f"sampled:{self.counter.name}",
        )

    def _role_count(self, role: str) -> int | None:
        """The tokens of a short role, kept; ``None`` once the cache is full
        and the role is not in it: count it with the rest.

        Roles repeat ("user", "assistant"), but arbitrary role strings must
        not grow the cache: it keeps at most 64 roles of at most
        ``_ROLE_MAX_CHARS`` characters, so filling it costs a bounded few
        tokenizer calls over the estimator's life."""
        cached = self._role_tokens.get(role)
        if cached is None and len(self._role_tokens) < _ROLE_CACHE_SIZE:
            cached = self._role_tokens[role] = self.counter.count(role)
        return cached


def _tally(roles: list[str]) -> dict[str, int]:
    """How many times each role occurs: a C-speed count per role when there
    are few (the usual case, several times faster than a ``Counter``)."""
    kinds = set(roles)
    if len(kinds) > 8:
        return Counter(roles)
    return {role: roles.count(role) for role in kinds}


# Roles every chat format uses, kept from the start so that a flood of odd
# roles filling the cache never makes them cost a tokenizer call.
_COMMON_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# The longest role whose count is kept, in characters, and how many are kept.
_ROLE_MAX_CHARS = 32
_ROLE_CACHE_SIZE = 64
