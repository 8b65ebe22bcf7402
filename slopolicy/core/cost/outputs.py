"""How long answers turn out: a per-lane forecast of output tokens per sequence.

``max_new_tokens`` is a ceiling, not a length. Reasoning and chat clients
commonly send 8k-32k while most answers stop far earlier; reserving the ceiling
for every running request leaves most of the engine's KV pool held by tokens
that never come, so a policy that reserves worst cases serves less than the
engine's own FCFS queue would. :class:`OutputForecast` learns, per lane, a high
quantile of what recent completed requests actually generated, and the KV
ledger reserves that (never more than the request's own ceiling): each running
request is forecast to end there, and a request starts iff the peak of the
running requests' KV over the future fits the pool
(:meth:`~slopolicy.core.kv.ledger.KVReservation.try_start`).

Why this holds on traffic it was not tuned on:

* It is measured, per lane, from the traffic itself: no length constant is
  assumed. Until a lane has ``min_samples`` completed answers it forecasts the
  ceiling (the worst case, as before).
* A forecast that is too low is corrected while the request runs: the policy
  grows a reservation as output passes it (``Policy.tokens``), and the ledger
  reconciles with the engine's own KV reading. What a miss costs is what every
  engine without a ledger pays anyway: the engine may preempt (vLLM recomputes).
* The window is recent answers (``window`` of them), so a change of traffic
  shifts the forecast within that many completions.

The answer is the value of rank ``floor(quantile x (n - 1))`` among the last
``n <= window`` recorded, per sequence. Memory: ``window`` ints per lane.
"""

from __future__ import annotations

from collections.abc import Iterable

from slopolicy.core.checks import check_count, is_number, shown
from slopolicy.core.cost.ranks import RecentRank
from slopolicy.errors import UsageError

__all__ = ("OutputForecast",)


class OutputForecast:
    """Per lane, a high quantile of recent output tokens per sequence.

    Args:
        lanes: the lanes it forecasts for.
        quantile: the rank answered, in ``(0, 1]`` (default 0.9: nine answers
            in ten end within their forecast; the peak check counts on the
            others ending at it until they pass it, then a block on, and so on).
        window: answers remembered per lane (the most recent ones).
        min_samples: answers a lane needs before it forecasts less than the
            ceiling.

    Misuse raises :class:`UsageError` and changes nothing.
    """

    __slots__ = ("_lanes", "min_samples", "quantile", "window")

    def __init__(
        self,
        lanes: Iterable[str],
        *,
        quantile: float = 0.9,
        window: int = 256,
        min_samples: int = 16,
    ) -> None:
        if not (is_number(quantile) and 0.0 < quantile <= 1.0):
            raise UsageError(f"quantile must be a number in (0, 1], got {shown(quantile)}")
        check_count("window", window, minimum=1)
        check_count("min_samples", min_samples, minimum=1)
        if min_samples > window:
            raise UsageError(f"min_samples ({min_samples}) must be <= window ({window})")
        self.quantile = float(quantile)
        self.window = window
        self.min_samples = min_samples
        self._lanes = {lane: RecentRank(self.quantile, window, min_samples) for lane in lanes}

    def per_sequence(self, lane: str, max_new_tokens: int) -> int:
        """Output tokens per sequence to reserve for a request of ``lane`` with
        ceiling ``max_new_tokens``: the forecast, at most the ceiling (the
        ceiling itself until the lane has ``min_samples`` answers)."""
        forecast = self.forecast(lane)
        if forecast is None or forecast >= max_new_tokens:
            return max_new_tokens
        return forecast

    def forecast(self, lane: str) -> int | None:
        """The lane's forecast in tokens per sequence, or ``None`` (too few answers yet)."""
        value = self._lane(lane).value
        # At least one token: a zero-length forecast would reserve nothing
        # for an answer the engine must still hold while it streams.
        return None if value is None else max(1, int(value))

    def record(self, lane: str, tokens_per_sequence: int) -> None:
        """A completed answer of ``lane`` generated ``tokens_per_sequence`` tokens
        per sequence."""
        self._lane(lane)
        check_count("tokens_per_sequence", tokens_per_sequence)
        self._record(lane, tokens_per_sequence)

    def _record(self, lane: str, tokens: int) -> None:
        """:meth:`record` for a caller that checked its arguments."""
        self._lanes[lane].add(tokens)

    def _lane(self, lane: str) -> RecentRank:
        state = self._lanes.get(lane)
        if state is None:
            raise UsageError(f"unknown lane {lane!r}")
        return state
