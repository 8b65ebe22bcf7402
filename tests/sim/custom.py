"""Schedulers of "your own", for the tests that compare them by object and by import path."""

from __future__ import annotations

from slopolicy.sim import FCFS, Release, SimAdmission, SimRequest


class Halving(FCFS):
    """FCFS that halves every answer and sends every other request to a cheaper model."""

    name = "halving"

    def __init__(self) -> None:
        super().__init__()
        self._seen = 0

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        self._seen += 1
        model = None if self._seen % 2 else "small"
        self._pending.append(Release(request.id, max(1, request.max_new_tokens // 2), 0, model))
        return SimAdmission(True)


#: An instance, to name by import path.
HALVING = Halving()


def make_halving() -> Halving:
    """A factory, to name by import path."""
    return Halving()


NOT_A_SCHEDULER = 42
