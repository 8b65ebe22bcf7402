"""What a chat-style stream (OpenAI's or TGI's Messages API) says about itself:
the choices seen, those finished (with their finish reasons), the output
tokens in each chunk, and the engine's own output-token count."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from slopolicy.adapters.common import EngineError, EngineFault

__all__ = ("ChoiceState", "Chunk")


class _Choice(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def finish_reason(self) -> str | None: ...


class Chunk(Protocol):
    """A chat-style chunk: its choices and, on the last, the usage."""

    @property
    def usage(self) -> object: ...

    @property
    def choices(self) -> Sequence[_Choice]: ...


class ChoiceState:
    """Choices seen and finished, tokens, and usage, over one stream of chunks.

    ``show_usage``: the caller asked for the usage chunk (it has no choices),
    so it is passed on; otherwise it is only read. ``count(chunk)``: the
    output tokens in a chunk, counted in :meth:`watch` (inside the relay, so a
    chunk it cannot read fails the stream instead of escaping it) and handed
    to the ticket by :meth:`tokens_of`.
    """

    __slots__ = ("count", "engine", "finished", "last", "seen", "show_usage", "usage")

    def __init__(
        self, show_usage: bool, count: Callable[[Any], int], engine: str = "the engine"
    ) -> None:
        self.show_usage = show_usage
        self.count = count
        self.engine = engine
        self.seen: set[int] = set()
        self.finished: dict[int, str] = {}  # choice index -> finish reason
        self.usage: object = None  # as the engine sent it: checked when settled
        self.last = 0

    def watch(self, chunk: Chunk) -> bool:
        """Note what ``chunk`` says; whether to pass it to the caller."""
        usage = chunk.usage
        if usage is not None:
            self.usage = getattr(usage, "completion_tokens", None)
        for choice in chunk.choices:
            self.seen.add(choice.index)
            if choice.finish_reason is not None:
                self.finished[choice.index] = choice.finish_reason
        self.last = self.count(chunk)
        return bool(chunk.choices) or self.show_usage

    def tokens_of(self, chunk: object) -> int:
        """The output tokens :meth:`watch` counted in ``chunk``, just before it passed on."""
        return self.last

    def settle(self) -> object:
        """The engine's output-token count as it sent it (``None``: none); raises
        :class:`EngineError` when the stream ended before every choice finished
        ([DONE] or the end of the body came first: a proxy or the engine cut it)."""
        if not self.seen or self.seen - self.finished.keys():
            message = f"{self.engine}'s stream ended before it finished"
            raise EngineError(EngineFault.DISCONNECTED, message)
        return self.usage
