"""The request as the policy sees it: an immutable value, validated on creation."""

from __future__ import annotations

import dataclasses
import itertools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slopolicy.core.checks import count_problem, shown, time_problem
from slopolicy.core.tasks.ref import TaskRef
from slopolicy.errors import InvalidRequest

__all__ = ("REASONING_EFFORTS", "Message", "Request")

#: Reasoning-effort levels accepted on a request (OpenAI's names).
REASONING_EFFORTS = frozenset({"minimal", "low", "medium", "high"})

_MAX_ID_CHARS = 256
# A random per-process prefix and a counter: unique ids at ~0.2 us, where
# uuid4() costs ten times more on the admission path.
_ID_PREFIX = secrets.token_hex(4)
_ID_COUNTER = itertools.count(1)


def _new_id() -> str:
    return f"req-{_ID_PREFIX}-{next(_ID_COUNTER)}"


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message. ``content`` is plain text; ``name`` is optional."""

    role: str
    content: str
    name: str | None = None

    def __post_init__(self) -> None:
        _check_text("role", self.role, allow_empty=False)
        _check_text("content", self.content, allow_empty=True)
        if self.name is not None:
            _check_text("name", self.name, allow_empty=False)

    @classmethod
    def from_openai(cls, message: Mapping[str, Any], *, where: str = "message") -> Message:
        """Build from an OpenAI-style dict; content may be text or a list of text parts.

        Non-text parts (images, audio) cannot be counted from text, so they raise
        :class:`InvalidRequest`; pass ``prompt_tokens`` for multimodal input.
        """
        if not isinstance(message, Mapping):
            raise InvalidRequest(where, f"expected a mapping, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidRequest(f"{where}.role", "expected a string")
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise InvalidRequest(f"{where}.name", "expected a string")
        return cls(role=role, content=_content_text(message.get("content"), where), name=name)


def _content_text(content: object, where: str) -> str:
    if content is None:  # an assistant message that only carries tool calls
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for index, part in enumerate(content):
            here = f"{where}.content[{index}]"
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise InvalidRequest(
                    here, "only text parts can be counted; pass prompt_tokens for other content"
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidRequest(f"{here}.text", "expected a string")
            texts.append(text)
        return "".join(texts)
    raise InvalidRequest(f"{where}.content", f"expected text, got {type(content).__name__}")


@dataclass(frozen=True, slots=True)
class Request:
    """A generation request, before the policy has touched it.

    Give the prompt as ``prompt`` text, as chat ``messages``, or as a known
    ``prompt_tokens`` count (which wins when several are given: the caller has
    already tokenized). Host code builds requests from authenticated data, so
    ``tier`` and ``lane`` are trusted hints, still checked against the tenant's
    tier by the router.

    Every numeric field is bounded, so a request that builds can always be
    scored and routed: the counts (``prompt_tokens``, ``max_new_tokens``,
    ``n``, ``best_of``, ``logprobs``) are ints (not ``bool``) of at most 2**53
    (:data:`~slopolicy.core.checks.MAX_COUNT`), ``tool_risk`` is within
    [0, 1], and ``deadline`` is a time within ±1e11 monotonic seconds
    (:data:`~slopolicy.core.checks.MAX_NOW`, the bound on every ``now``).
    Anything else raises :class:`~slopolicy.InvalidRequest`, and nothing else
    leaves construction.

    Attributes:
        tenant: who pays for the request; quota and fairness key.
        id: unique id; generated when omitted.
        prompt: prompt text.
        messages: chat messages (``Message`` or OpenAI-style dicts).
        prompt_tokens: known prompt length in tokens.
        max_new_tokens: output limit per sequence, in tokens.
        n: number of sequences returned.
        best_of: sequences generated to pick ``n`` from (>= n).
        logprobs: number of top log-probabilities per token, if requested.
        reasoning_effort: ``minimal``/``low``/``medium``/``high``, if requested.
        tool_risk: 0-1, how likely and how costly tool or retrieval calls are.
        lane: preferred lane name.
        tier: tenant tier to use instead of the tenant table's.
        model: model name the host will call.
        deadline: time by which the request must start, in monotonic seconds
            on the same clock as the ``now`` given to the policy.
        task: the agent task this request is one turn of
            (:class:`~slopolicy.TaskRef`), or ``None``.
    """

    tenant: str = "anonymous"
    id: str = field(default_factory=_new_id)
    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    prompt_tokens: int | None = None
    max_new_tokens: int = 256
    n: int = 1
    best_of: int | None = None
    logprobs: int | None = None
    reasoning_effort: str | None = None
    tool_risk: float = 0.0
    lane: str | None = None
    tier: str | None = None
    model: str | None = None
    deadline: float | None = None
    task: TaskRef | None = None

    def __post_init__(self) -> None:
        _check_text("tenant", self.tenant, allow_empty=False, max_chars=_MAX_ID_CHARS)
        _check_text("id", self.id, allow_empty=False, max_chars=_MAX_ID_CHARS)
        if self.prompt is not None:
            _check_text("prompt", self.prompt, allow_empty=True)
        if self.messages is not None:
            object.__setattr__(self, "messages", _normalize_messages(self.messages))
        if self.prompt_tokens is not None:
            _check_int("prompt_tokens", self.prompt_tokens, minimum=0)
        if self.prompt is None and self.messages is None and self.prompt_tokens is None:
            raise InvalidRequest("prompt", "give prompt, messages or prompt_tokens")
        _check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        _check_int("n", self.n, minimum=1)
        if self.best_of is not None:
            _check_int("best_of", self.best_of, minimum=self.n)
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, minimum=0)
        effort = self.reasoning_effort
        if effort is not None and (not isinstance(effort, str) or effort not in REASONING_EFFORTS):
            raise InvalidRequest("reasoning_effort", f"expected one of {sorted(REASONING_EFFORTS)}")
        _check_fraction("tool_risk", self.tool_risk)
        for name in ("lane", "tier", "model"):
            value = getattr(self, name)
            if value is not None:
                _check_text(name, value, allow_empty=False, max_chars=_MAX_ID_CHARS)
        if self.deadline is not None:
            problem = time_problem(self.deadline)
            if problem is not None:
                raise InvalidRequest("deadline", f"must be {problem}")
        if self.task is not None and not isinstance(self.task, TaskRef):
            raise InvalidRequest("task", f"expected a TaskRef, got {type(self.task).__name__}")

    @property
    def sequences(self) -> int:
        """Sequences the engine generates: ``max(n, best_of)``."""
        return self.n if self.best_of is None else self.best_of

    @property
    def output_budget(self) -> int:
        """Most tokens the engine may generate for this request: per sequence x sequences."""
        return self.max_new_tokens * self.sequences

    def replace(self, **changes: Any) -> Request:
        """A copy with ``changes`` applied and validated again."""
        return dataclasses.replace(self, **changes)

    def with_max_new_tokens(self, max_new_tokens: int) -> Request:
        """A copy with a smaller ``max_new_tokens`` (validated: ``1 <= it <= now``).

        Lanes and rungs cap outputs on every request; this skips re-checking
        fields that cannot have changed.
        """
        _check_int("max_new_tokens", max_new_tokens, minimum=1)
        if max_new_tokens > self.max_new_tokens:
            raise InvalidRequest("max_new_tokens", "a cap cannot raise the limit")
        copy = object.__new__(Request)
        for name in _FIELDS:
            _SET(copy, name, getattr(self, name))
        _SET(copy, "max_new_tokens", max_new_tokens)
        return copy


_FIELDS = tuple(field.name for field in dataclasses.fields(Request))
_SET = object.__setattr__


def _normalize_messages(messages: object) -> tuple[Message, ...]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidRequest("messages", "expected a sequence of messages")
    result: list[Message] = []
    for index, message in enumerate(messages):
        if isinstance(message, Message):
            result.append(message)
        else:
            result.append(Message.from_openai(message, where=f"messages[{index}]"))
    return tuple(result)


def _check_text(
    name: str, value: object, *, allow_empty: bool, max_chars: int | None = None
) -> None:
    if not isinstance(value, str):
        raise InvalidRequest(name, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise InvalidRequest(name, "must not be empty")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidRequest(name, f"longer than {max_chars} characters")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    problem = count_problem(value, minimum)
    if problem is not None:
        raise InvalidRequest(name, f"must be {problem}")


def _check_fraction(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(name, f"expected a number, got {type(value).__name__}")
    if not 0.0 <= value <= 1.0:  # also refuses NaN; an int of any size compares exactly
        raise InvalidRequest(name, f"must be within [0, 1], got {shown(value)}")
