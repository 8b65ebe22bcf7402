from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.corpora import CORPORA, corpus, slice_tokens
from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.cost.sampling import _BOUNDARY, _BOUNDARY_ASCII, sample_tokens
from slopolicy.core.cost.tokens import TiktokenCounter
from tests.core.conftest import RecordingCounter

_alphabet = st.sampled_from(
    list("abcdefghijklmnopqrstuvwxyzABCDEFG0123456789")
    + list(" \t\n\r.,;:'\"()[]{}_-+=/\\!?#")
    + list("的是了我不人在他有这天气好，。、")
    + list("あいうえおカタナ")
    + list("한국어는좋아요")
    + ["  ", "\n\n"]
)


def _pieces(text: str, boundary: re.Pattern[str]) -> list[str]:
    cuts = [match.start() for match in boundary.finditer(text) if match.start() > 0]
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


def _join_is_exact(counter: TiktokenCounter, text: str) -> None:
    # The sampler's premise: cutting at every boundary changes no token, and
    # inner pieces between boundaries, glued together in any selection,
    # tokenize to the sum of their tokens.
    starts = _pieces(text, _BOUNDARY)
    assert sum(counter.count(piece) for piece in starts) == counter.count(text)
    ends = {match.start() for match in _BOUNDARY.finditer(text)}
    cuts = sorted({0, len(text)} | ends)
    inner = [text[a:b] for a, b in itertools.pairwise(cuts) if a in ends and b in ends]
    assert counter.count("".join(inner[::2])) == sum(counter.count(p) for p in inner[::2])


@settings(max_examples=300)
@given(st.lists(_alphabet, max_size=300).map("".join))
def test_boundaries_never_split_a_token(counter: TiktokenCounter, text: str) -> None:
    _join_is_exact(counter, text)


@pytest.mark.parametrize("name", CORPORA)
def test_boundaries_never_split_a_token_in_real_text(counter: TiktokenCounter, name: str) -> None:
    _join_is_exact(counter, corpus(name)[:60_000])


def _starts(boundary: re.Pattern[str], text: str) -> list[int]:
    return [match.start() for match in boundary.finditer(text)]


@settings(max_examples=500)
@given(
    st.lists(
        st.one_of(_alphabet, st.sampled_from(list("éßÉ²½_—“”\u00a0\u2028")), st.characters()),
        max_size=200,
    ).map("".join)
)
def test_ascii_boundary_regex_finds_the_same_boundaries(text: str) -> None:
    # The faster pattern for mostly-ASCII text is an optimisation only.
    assert _starts(_BOUNDARY_ASCII, text) == _starts(_BOUNDARY, text)


@pytest.mark.parametrize("name", CORPORA)
def test_ascii_boundary_regex_finds_the_same_boundaries_in_real_text(name: str) -> None:
    text = corpus(name)[:200_000]
    assert _starts(_BOUNDARY_ASCII, text) == _starts(_BOUNDARY, text)


@pytest.mark.parametrize("megabytes", [1, 10])
def test_work_is_bounded_whatever_the_prompt_size(counter: TiktokenCounter, megabytes: int) -> None:
    text = (corpus("prose") * (megabytes * 3))[: megabytes * 1_000_000]
    recording = RecordingCounter(counter)
    estimator = CostEstimator(counter=recording, sample_windows=96)
    recording.reset()
    estimate = estimator.count_texts([text])
    assert not estimate.exact
    # At most 4 rounds of 96 windows of ~32 characters plus a search span each.
    assert recording.chars <= 4 * 96 * (32 + 256)
    assert recording.calls <= 4 * (8 + 96)


@pytest.mark.parametrize("name", CORPORA)
@pytest.mark.parametrize("tokens", [5_000, 50_000])
def test_estimates_are_close_and_report_their_error(
    counter: TiktokenCounter, name: str, tokens: int
) -> None:
    estimator = CostEstimator(counter=counter, exact_max_chars=0)
    for start in (0.1, 0.35, 0.6):
        text = slice_tokens(name, tokens, counter.count, start=start)
        exact = counter.count(text)
        estimate = estimator.count_texts([text])
        error = abs(estimate.tokens - exact) / exact
        # Deterministic for a given text; the bounds leave room for the
        # sampling error the benchmark reports (p90 about 2-4%).
        assert error < 0.06, (name, start, error)
        assert error < 3 * estimate.rel_stderr + 0.005
        assert 0 < estimate.rel_stderr < 0.05
        assert estimate.method == "sampled:tiktoken:cl100k_base"


def test_texts_are_estimated_across_many_messages(counter: TiktokenCounter) -> None:
    text = corpus("prose")[:200_000]
    parts = [text[i : i + 997] for i in range(0, len(text), 997)]
    exact = sum(counter.count(part) for part in parts)
    estimate = CostEstimator(counter=counter, exact_max_chars=0).count_texts(parts)
    assert abs(estimate.tokens - exact) / exact < 0.08


def test_text_without_boundaries_is_still_estimated(counter: TiktokenCounter) -> None:
    digits = "".join(str(i % 10) for i in range(100_000))
    sampled = sample_tokens([digits], counter.count, windows=32)
    exact = counter.count(digits)
    assert abs(sampled.tokens - exact) / exact < 0.2


def test_short_texts_are_exact(estimator: CostEstimator, counter: TiktokenCounter) -> None:
    text = "A short chat turn. " * 20
    estimate = estimator.count_texts([text])
    assert estimate.exact
    assert estimate.tokens == counter.count(text)
    assert estimate.rel_stderr == 0
    assert re.fullmatch(r"exact:tiktoken:cl100k_base", estimate.method)
