"""How long the engine takes to a first token, learned from what it did.

An engine computes the prompts it was handed roughly in the order it got them
(vLLM's queue is FCFS, and chunked prefill shares iterations but not the
order; llama.cpp fills each step slot by slot, which pinning by lane turns
into the same). So a request started now has its first token after the engine
gets through the prompt tokens handed over before it and not yet through
prefill, plus its own: the *tokens ahead*. :class:`FirstTokenModel` fits

    engine TTFT = floor + tokens ahead / rate

by exponentially weighted least squares over the started requests' observed
dispatch-to-first-token times: two terms, so that neither low load (where an
iteration's overhead and the decode batch beside it dominate, and a rate
measured alone would look slow) nor a backlog (where the rate dominates) is
mistaken for the other. It needs no engine profile: both terms follow the
engine as decode load, prompt mix and hardware change.

The Policy asks it one question at dispatch: is this queued request expected
to miss its lane's TTFT target even if it started now? Then it can only miss,
and starting it would take engine time from requests that can still attain
(on bursty traffic the whole burst's prefill slows every decode beside it):
it leaves the queue as expired. The model answers only while the tokens ahead
explain most of what the lane's TTFT has been (the fit's R² at least
``min_r2``): where something the policy does not count drives TTFT (another
lane's long prompts on a FCFS engine, a decode-bound batch), it says nothing
and no request is given up on for it.

Which tokens are ahead is the caller's to say. The Policy counts the prompts
of the request's own lane and of the lanes listed before it: what an engine
that honours lane priorities computes first (vLLM's priority scheduling, the
simulator's), and fewer than a FCFS engine has ahead, so on either engine the
reading errs towards keeping a request.

This object is sans-IO and takes no time: callers pass observed seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ("FirstTokenCheck", "FirstTokenModel")


class FirstTokenModel:
    """Engine TTFT as ``floor + tokens_ahead / rate``, fitted online.

    Args:
        half_life: observations after which an old one weighs half.
        min_samples: observations before the model answers.
        min_r2: the share of TTFT's variance the tokens ahead must explain
            for the model to answer, in ``[0, 1]``.
    """

    __slots__ = (
        "_decay",
        "_n",
        "_sw",
        "_swx",
        "_swxx",
        "_swxy",
        "_swy",
        "_swyy",
        "floor",
        "min_r2",
        "min_samples",
        "r2",
        "rate",
    )

    def __init__(
        self, *, half_life: float = 256.0, min_samples: int = 32, min_r2: float = 0.5
    ) -> None:
        if not (isinstance(half_life, int | float) and 1 <= half_life < float("inf")):
            raise ValueError(f"half_life must be a finite number >= 1, got {half_life!r}")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an int >= 2, got {min_samples!r}")
        if not (isinstance(min_r2, int | float) and 0 <= min_r2 <= 1):
            raise ValueError(f"min_r2 must be a number in [0, 1], got {min_r2!r}")
        self._decay = 0.5 ** (1.0 / half_life)
        self.min_samples = min_samples
        self.min_r2 = float(min_r2)
        #: The fitted floor (seconds) and rate (prompt tokens per second), and
        #: the fit's R²; ``None``/0 until ``min_samples`` observations of
        #: different sizes give a positive rate.
        self.floor: float | None = None
        self.rate: float | None = None
        self.r2 = 0.0
        self._n = 0
        self._sw = self._swx = self._swy = self._swxx = self._swxy = self._swyy = 0.0

    def observe(self, ahead: int, seconds: float) -> None:
        """A request started with ``ahead`` prompt tokens ahead of its first
        token (its own included) had it ``seconds`` after it was handed over."""
        if seconds < 0:
            return
        d = self._decay
        x = float(ahead)
        self._sw = d * self._sw + 1.0
        self._swx = d * self._swx + x
        self._swy = d * self._swy + seconds
        self._swxx = d * self._swxx + x * x
        self._swxy = d * self._swxy + x * seconds
        self._swyy = d * self._swyy + seconds * seconds
        self._n += 1
        if self._n >= self.min_samples:
            self._fit()

    def expected(self, ahead: int) -> float | None:
        """The engine TTFT expected of a request started now with ``ahead``
        tokens ahead (its own included), in seconds; ``None`` while the model
        is not fitted or explains too little (R² below ``min_r2``)."""
        rate, floor = self.rate, self.floor
        if rate is None or floor is None or self.r2 < self.min_r2:
            return None
        return floor + ahead / rate

    def _fit(self) -> None:
        sw = self._sw
        mean_x, mean_y = self._swx / sw, self._swy / sw
        var_x = self._swxx / sw - mean_x * mean_x
        var_y = self._swyy / sw - mean_y * mean_y
        cov = self._swxy / sw - mean_x * mean_y
        # The sizes must differ for a slope to mean anything (a relative
        # spread of 1% at least); otherwise the last fit stays.
        if var_x <= (0.01 * mean_x) ** 2 or var_y <= 0 or cov <= 0:
            return
        slope = cov / var_x
        self.rate = 1.0 / slope
        self.floor = max(0.0, mean_y - slope * mean_x)
        self.r2 = min(1.0, cov * cov / (var_x * var_y))


class FirstTokenCheck:
    """The Policy's question at dispatch, for every lane with a TTFT bound:
    is this request expected to miss its target even if it started now?

    Keeps each lane's prompt tokens started and not yet through prefill, and
    a :class:`FirstTokenModel` per TTFT-bound lane, fed as requests reach
    their first token. A request's tokens ahead are the prompts of its own
    lane and of the lanes listed before it (see the module doc). ``bounds``
    maps a lane to its TTFT target in seconds; lanes without one are never
    given up on, but their prompts still count as ahead of later lanes.
    """

    __slots__ = ("_ahead_of", "_bounds", "_prefilling", "models")

    def __init__(self, lanes: Sequence[str], bounds: Mapping[str, float]) -> None:
        self._bounds = dict(bounds)
        #: Each TTFT-bound lane's engine TTFT as it has been.
        self.models = {name: FirstTokenModel() for name in bounds}
        self._prefilling = dict.fromkeys(lanes, 0)
        self._ahead_of = {name: tuple(lanes[: i + 1]) for i, name in enumerate(lanes)}

    def ahead(self, lane: str) -> int:
        """Prompt tokens ahead of a request of ``lane`` started now, its own not included."""
        prefilling = self._prefilling
        return sum(prefilling[name] for name in self._ahead_of[lane])

    def lost(self, lane: str, prompt_tokens: int, *, arrival: float, now: float) -> bool:
        """Whether a request of ``lane`` that arrived at ``arrival`` is expected
        to have its first token past ``arrival`` + the lane's target if started at ``now``."""
        bound = self._bounds.get(lane)
        if bound is None:
            return False
        expected = self.models[lane].expected(self.ahead(lane) + prompt_tokens)
        return expected is not None and now + expected > arrival + bound

    def started(self, lane: str, prompt_tokens: int) -> int:
        """A request was handed to the engine; the tokens ahead of its first
        token, its own included (pass them back to :meth:`first_token`)."""
        self._prefilling[lane] += prompt_tokens
        return self.ahead(lane)

    def first_token(self, lane: str, prompt_tokens: int, *, ahead: int, seconds: float) -> None:
        """A started request's first token came ``seconds`` after it was handed over."""
        self._prefilling[lane] -= prompt_tokens
        model = self.models.get(lane)
        if model is not None:
            model.observe(ahead, seconds)

    def left(self, lane: str, prompt_tokens: int) -> None:
        """A started request ended before its first token."""
        self._prefilling[lane] -= prompt_tokens
