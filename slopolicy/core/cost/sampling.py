"""Bounded-time token estimates for long texts, by stratified sampling.

Exact BPE counting is linear in the text (about 0.5 us per token), so a 10 MB
prompt would stall the caller for seconds. Beyond a threshold we count a
bounded number of windows exactly, one in each of as many equal strata of the
text, and scale up.

Two details keep the estimate unbiased:

* Windows are cut only at *pre-token boundaries* (``" word"``, ``"(bar"``,
  ``"，"`` between CJK letters, a newline after a word), where BPE never
  merges across, and every window ends in a letter or digit, so the windows
  concatenated tokenize to exactly the sum of their tokens in the full text:
  one tokenizer call per group of windows, and no cut-word inflation.
* Both ends of a window snap forward from its nominal start and end, so
  every stretch of text between two boundaries is included with the same
  probability, whatever its length. A text's start is a boundary too (texts
  are tokenized apart), and each text is preceded by a lead-in one window
  long where a window starts at the text's start: without it a text's first
  stretch would be included only by a window starting exactly there, and a
  list of many short texts (chat messages, roles, names) would be all but
  left out beside a long one.

Each window starts at a pseudo-random point of its stratum (from a fixed
seed: estimates are reproducible), not at the same offset in every stratum:
evenly spaced windows line up with any structure that repeats at a multiple
of their spacing (a template, a list of messages sent again), miss the rest
of it, and report a small error all the same.

Finding a boundary is a regex search forward from a point (with a faster,
equivalent pattern for mostly-ASCII text); together with the tokenizer on the
sampled characters, that search is nearly all of an estimate's time.

The ratio estimator ``tokens ~= len(text) * sampled_tokens / sampled_chars``
is reported with its relative standard error, computed from interpenetrating
groups of windows counted separately; more rounds of windows are added, up to
a bound, while that error is above the target.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ("SampledCount", "sample_tokens")

# Pre-token boundaries under cl100k/o200k-style regexes (and SentencePiece's
# "▁word" splitting), each right after a letter or digit, so that a window
# [boundary, boundary) always ends in one and windows glued together cannot
# merge across the seam:
#   - a space or tab before a letter ("one word");
#   - punctuation before a letter ("foo(bar", "句，我");
#   - a newline ("value\n").
#
# Written to start with the boundary character itself, a non-word one, so that
# the regex engine skips runs of letters in its fast prefix scan instead of
# trying the lookbehind at every position (about 1.5x faster on prose and CJK).
_BOUNDARY = re.compile(
    r"(?s)[^\w](?<=[^\W_].)"  # a non-word character right after a letter or digit
    r"(?:(?<=[\r\n])|(?=[^\W\d_]))"  # that is a newline, or precedes a letter
)
# The same boundaries, found faster in mostly-ASCII text (about 1.4x on code,
# where indentation puts many spaces in the scan): the prefix scan tests an
# ASCII bitmap, not the Unicode word category, and a second bitmap rejects most
# candidates before the exact lookbehinds. Slower on CJK, where every
# character is a candidate, so wide scripts keep ``_BOUNDARY``.
_BOUNDARY_ASCII = re.compile(
    r"(?s)[\x00-/:-@\[-^`{-\x7f\x80-\U0010ffff]"  # any non-word char, and more
    r"(?<=[0-9A-Za-z\x80-\U0010ffff].)"  # quickly: after no ASCII non-letter
    r"(?<=[^\W_][^\w])"  # exactly: a non-word character after a letter or digit
    r"(?:(?<=[\r\n])|(?=[^\W\d_]))"  # that is a newline, or precedes a letter
)
# How far past a window's nominal edge to look for a boundary, in characters.
_SEARCH_CHARS = 256
# The jitter's seed: a fixed one keeps every estimate reproducible.
_SEED = 0x5EED


@dataclass(frozen=True, slots=True)
class SampledCount:
    """An estimated token count and its relative standard error (0.01 = 1%)."""

    tokens: float
    rel_stderr: float
    sampled_chars: int


def sample_tokens(
    texts: Sequence[str],
    count: Callable[[str], int],
    *,
    windows: int = 96,
    window_chars: int | None = None,
    target_rel_error: float = 0.02,
    max_rounds: int = 4,
    groups: int = 8,
) -> SampledCount:
    """Estimate the total tokens in ``texts`` (counted separately and summed).

    Each round samples ``windows`` windows of about ``window_chars``
    characters (by default 32, or 16 for scripts such as CJK that carry about
    a token per character), one per stratum, and counts them in ``groups``
    tokenizer calls. Rounds stop once the relative standard error is at most
    ``target_rel_error``, or after ``max_rounds``:
    the work is bounded by ``max_rounds * windows`` windows whatever the
    texts' length or number (at most one tokenizer call per window, plus
    ``groups`` per round), and homogeneous text stops after the first round.
    """
    texts = list(filter(None, texts))  # empty texts hold no tokens, only lead-ins
    if not texts:
        return SampledCount(0.0, 0.0, 0)
    wide = _wide_script(texts)
    if window_chars is None:
        window_chars = 16 if wide else 32
    starts = _cumulative_starts(texts, window_chars)
    total_chars = starts[-1] - window_chars * len(texts)
    stride = starts[-1] / windows
    search = (_BOUNDARY if wide else _BOUNDARY_ASCII).search
    group_tokens: list[int] = []
    group_chars: list[int] = []
    jitter = random.Random(_SEED).random
    for _ in range(max_rounds):
        tokens, chars = _sample_round(
            texts, starts, count, search, windows, stride, jitter, window_chars, groups
        )
        group_tokens.extend(tokens)
        group_chars.extend(chars)
        result = _ratio_estimate(group_tokens, group_chars, total_chars)
        if result.rel_stderr <= target_rel_error:
            break
    return result


def _wide_script(texts: Sequence[str]) -> bool:
    """Whether the text is mostly multi-byte characters, from three probes."""
    probes = (texts[0][:256], texts[len(texts) // 2][:256], texts[-1][-256:])
    chars = sum(len(probe) for probe in probes)
    encoded = sum(len(probe.encode("utf-8", "surrogatepass")) for probe in probes)
    return encoded > 1.5 * chars


def _sample_round(
    texts: Sequence[str],
    starts: list[int],
    count: Callable[[str], int],
    search: Callable[[str, int, int], re.Match[str] | None],
    windows: int,
    stride: float,
    jitter: Callable[[], float],
    window_chars: int,
    groups: int,
) -> tuple[list[int], list[int]]:
    group_parts: list[list[str]] = [[] for _ in range(groups)]
    # Windows counted on their own (see below): tokens and characters.
    alone_tokens = [0] * groups
    alone_chars = [0] * groups
    reach = _SEARCH_CHARS
    text = texts[0]
    n = len(text)
    local = 0
    several = len(texts) > 1
    for k in range(windows):
        # Positions run over each text preceded by its lead-in of
        # ``window_chars``: ``local`` is negative in the lead-in.
        position = int((k + jitter()) * stride)
        if several:
            index = bisect.bisect_right(starts, position) - 1
            text = texts[index]
            n = len(text)
            local = position - starts[index] - window_chars
        else:
            local = position - window_chars
        # Hot path, inlined (this loop is most of the estimate's Python time):
        # both ends snap to the first boundary at or after ``local`` and
        # ``local + window_chars``, or to the text's end when it is within
        # reach; ``None`` when no boundary is near. Snapping both ends from
        # fixed points, with one boundary set, includes every stretch between
        # two boundaries with the same probability ``window_chars / stride``,
        # whatever its length.
        end = local + window_chars
        a: int | None = 0
        if local > 0:
            match = search(text, local, local + reach)
            a = match.start() if match else (n if local + reach >= n else None)
        if a is not None and a >= end:
            continue  # the end snaps to the same boundary: an empty window
        b: int | None = n
        if a is not None and end < n:
            match = search(text, end, end + reach)
            b = match.start() if match else (n if end + reach >= n else None)
        g = k % groups
        if a is None or b is None:
            # No boundary nearby (a digit run, a blob): count the raw slice on
            # its own, accepting a token of cut error rather than skipping text.
            piece = text[max(local, 0) : end]
            alone_tokens[g] += count(piece)
            alone_chars[g] += len(piece)
        elif a == 0 or b == n:
            # A text's edges are not pre-token boundaries inside a join (its
            # first letter would glue to the previous window's last one), but
            # a whole prefix or suffix counts exactly on its own.
            if b > a:
                alone_tokens[g] += count(text[a:b])
                alone_chars[g] += b - a
        else:
            group_parts[g].append(text[a:b])
    group_tokens, group_chars = alone_tokens, alone_chars
    for g, parts in enumerate(group_parts):
        if parts:
            joined = "".join(parts)
            group_tokens[g] += count(joined)
            group_chars[g] += len(joined)
    return group_tokens, group_chars


def _cumulative_starts(texts: Sequence[str], lead_in: int) -> list[int]:
    """Where each text's lead-in starts, and the end: at C speed, since a chat
    may hold a million messages."""
    spans = map(operator.add, map(len, texts), itertools.repeat(lead_in))
    return list(itertools.accumulate(spans, initial=0))


def _ratio_estimate(tokens: list[int], chars: list[int], total_chars: int) -> SampledCount:
    pairs = [(t, c) for t, c in zip(tokens, chars, strict=True) if c > 0]
    sampled_tokens = sum(t for t, _ in pairs)
    sampled_chars = sum(c for _, c in pairs)
    if not sampled_chars:
        # Every window fell on nothing: no ratio to scale by. A token per
        # character is more than nearly any text holds.
        return SampledCount(float(total_chars), 1.0, 0)
    ratio = sampled_tokens / sampled_chars
    estimate = ratio * total_chars
    if len(pairs) < 2 or sampled_tokens == 0:
        return SampledCount(estimate, 0.0 if sampled_tokens == 0 else 1.0, sampled_chars)
    # Standard error of a ratio estimator from the group residuals t - r*c.
    n = len(pairs)
    mean_chars = sampled_chars / n
    squares = sum((t - ratio * c) ** 2 for t, c in pairs)
    stderr = math.sqrt(squares / (n - 1) / n) / mean_chars
    return SampledCount(estimate, stderr / ratio, sampled_chars)
