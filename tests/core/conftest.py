from __future__ import annotations

import pytest

from slopolicy.core.cost.estimator import CostEstimator
from slopolicy.core.cost.tokens import TiktokenCounter, TokenCounter
from slopolicy.core.request import Request


@pytest.fixture(scope="session")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


@pytest.fixture(scope="session")
def estimator(counter: TiktokenCounter) -> CostEstimator:
    return CostEstimator(counter=counter)


class RecordingCounter:
    """A counter that records its calls and the characters it was asked to tokenize."""

    name = "recording"

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.chars = 0
        self.calls = 0

    def count(self, text: str) -> int:
        self.chars += len(text)
        self.calls += 1
        return self.inner.count(text)

    def reset(self) -> None:
        """Forget the calls so far (an estimator's construction counts a few roles)."""
        self.chars = self.calls = 0


def estimate_calls(request: Request, inner: TokenCounter) -> int:
    """The tokenizer calls one estimate of ``request`` makes on a fresh estimator."""
    recording = RecordingCounter(inner)
    estimator = CostEstimator(counter=recording)
    recording.reset()
    estimator.prompt_tokens(request)
    return recording.calls
