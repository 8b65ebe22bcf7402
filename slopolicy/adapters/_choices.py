"""What a chat-style stream (OpenAI's or TGI's Messages API) says about itself:
the choices seen, those finished (with their finish reasons), and the engine's
own output-token count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slopolicy.adapters.common import EngineError, EngineFault

__all__ = ("ChoiceState", "Chunk")


class _Usage(Protocol):
    @property
    def completion_tokens(self) -> int: ...


class _Choice(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def finish_reason(self) -> str | None: ...


class Chunk(Protocol):
    """A chat-style chunk: its choices and, on the last, the usage."""

    @property
    def usage(self) -> _Usage | None: ...

    @property
    def choices(self) -> Sequence[_Choice]: ...


class ChoiceState:
    """Choices seen and finished, and usage, over one stream of chunks.

    ``show_usage``: the caller asked for the usage chunk (it has no choices),
    so it is passed on; otherwise it is only read.
    """

    __slots__ = ("engine", "finished", "seen", "show_usage", "usage")

    def __init__(self, show_usage: bool, engine: str = "the engine") -> None:
        self.show_usage = show_usage
        self.engine = engine
        self.seen: set[int] = set()
        self.finished: dict[int, str] = {}  # choice index -> finish reason
        self.usage: int | None = None

    def watch(self, chunk: Chunk) -> bool:
        """Note what ``chunk`` says; whether to pass it to the caller."""
        if chunk.usage is not None:
            self.usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            self.seen.add(choice.index)
            if choice.finish_reason is not None:
                self.finished[choice.index] = choice.finish_reason
        return bool(chunk.choices) or self.show_usage

    def settle(self) -> int | None:
        """The engine's output-token count (``None``: unknown); raises
        :class:`EngineError` when the stream ended before every choice finished
        ([DONE] or the end of the body came first: a proxy or the engine cut it)."""
        if not self.seen or self.seen - self.finished.keys():
            message = f"{self.engine}'s stream ended before it finished"
            raise EngineError(EngineFault.DISCONNECTED, message)
        return self.usage
