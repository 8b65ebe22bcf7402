from __future__ import annotations

import pytest

from slopolicy.core.estimator import CostEstimator
from slopolicy.core.tokens import TiktokenCounter


@pytest.fixture(scope="session")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


@pytest.fixture(scope="session")
def estimator(counter: TiktokenCounter) -> CostEstimator:
    return CostEstimator(counter=counter)
