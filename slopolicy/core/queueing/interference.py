"""What a long prompt's prefill costs the more urgent lanes, priced at submit.

An engine that runs a prompt's prefill in whole iterations (vLLM with its
default ``long_prefill_token_threshold`` of 0: a running prefill takes each
iteration's token budget before anything waiting starts) makes every request
that arrives meanwhile wait for it, whatever its priority. A 100k-token
prompt holds the engine for seconds, so every chat turn that lands in that
time misses a sub-second TTFT target. The policy cannot split the prompt,
but it can decline to start it while it would cost more than it is worth.

The price is learned, not configured. Each lane's
:class:`~slopolicy.core.queueing.ttft_model.FirstTokenModel` measures two
things: ``D(P)``, the lane's own TTFT for a prompt of ``P`` tokens with
nothing ahead (how long the engine takes to compute it), and ``blocking``,
the share of the later lanes' prefill still to run that a start of this lane
waits for: near 1 on an engine that runs prefills whole, near 0 on one that
interleaves long prompts with other work (a chunk cap, llama.cpp's slots),
so nothing here ever acts there. A request of an earlier lane ``i`` landing
in the first ``blocking_i · D(P) - slack_i`` seconds of the prompt's
prefill misses its target, ``slack_i`` being what that target leaves over
the engine's unhindered TTFT (the fitted floor). Where later-lane prompts
are in prefill already, lane ``i`` stands in their shadow ``S_i`` (seconds
left, see :meth:`~slopolicy.core.queueing.ttft.FirstTokenCheck.shadow`) and
the prompt lengthens it. With lane ``i``'s requests arriving at ``rate_i``
per second (measured, a half-minute exponential window) and ``b_i =
min(1, blocking_i)``, the prompt's expected **harm** is

    harm(P) = Σ_i rate_i · (max(0, b_i · (S_i + D(P)) - slack_i) - max(0, b_i · S_i - slack_i))

requests missed over every more urgent lane with a TTFT target. A lane's
``max_interference`` (requests; default 1) bounds it: a request whose harm
is larger is deferred (503, ``prefill_interference``), one request for more
than one. At low load the rates are small and nothing is deferred; the
threshold falls as the urgent lanes get busier, and rises again as they
quieten.

Sans-IO: times are the caller's ``now`` (monotonic seconds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slopolicy.core.queueing.ttft import FirstTokenCheck
from slopolicy.errors import UsageError

__all__ = ("ArrivalRate", "PrefillInterference")

#: Seconds over which a lane's arrival rate is measured (exponential window).
RATE_WINDOW_S = 30.0


class ArrivalRate:
    """Arrivals per second over an exponential window of ``window`` seconds."""

    __slots__ = ("_at", "_value", "window")

    def __init__(self, window: float = RATE_WINDOW_S) -> None:
        if not (isinstance(window, int | float) and 0 < window < math.inf):
            raise UsageError(f"window must be a finite number > 0, got {window!r}")
        self.window = float(window)
        self._value = 0.0
        self._at = -math.inf

    def arrived(self, now: float) -> None:
        """One arrival at ``now`` (seconds; earlier times count as ``now``)."""
        self._value = self.rate(now) + 1.0 / self.window
        self._at = max(self._at, now)

    def rate(self, now: float) -> float:
        """Arrivals per second at ``now``."""
        if self._value == 0.0 or now <= self._at:
            return self._value
        return self._value * math.exp((self._at - now) / self.window)


class PrefillInterference:
    """The harm of a prompt's prefill to the lanes before its own (see the module).

    Args:
        lanes: lane names, most interactive first.
        bounds: each TTFT-bound lane's target, seconds.
        first_tokens: the policy's engine TTFT models.
        limits: each lane's ``max_interference`` (requests); lanes without
            an entry are never deferred.
    """

    __slots__ = ("_before", "_bounds", "_first_tokens", "_limits", "rates")

    def __init__(
        self,
        lanes: Sequence[str],
        bounds: Mapping[str, float],
        first_tokens: FirstTokenCheck,
        limits: Mapping[str, float],
    ) -> None:
        self._bounds = dict(bounds)
        self._first_tokens = first_tokens
        self._limits = dict(limits)
        #: Each lane's arrival rate (requests queued per second).
        self.rates = {name: ArrivalRate() for name in lanes}
        self._before = {
            name: tuple(other for other in lanes[:i] if other in bounds)
            for i, name in enumerate(lanes)
        }

    def arrived(self, lane: str, now: float) -> None:
        """A request was queued in ``lane`` at ``now``."""
        self.rates[lane].arrived(now)

    def harm(self, lane: str, prompt_tokens: int, now: float) -> float:
        """Requests of the lanes before ``lane`` expected to miss their TTFT
        target if a ``prompt_tokens`` prompt of ``lane`` started ``now``."""
        models = self._first_tokens.models
        own = models[lane]
        if own.rate is None:
            return 0.0
        duration = own.prefill(prompt_tokens)
        assert duration is not None  # fitted
        first_tokens, total = self._first_tokens, 0.0
        for other in self._before[lane]:
            model = models[other]
            if model.floor is None or model.blocking <= 0.0:
                continue
            slack = self._bounds[other] - model.floor
            share = min(1.0, model.blocking)
            # The prefill lengthens the shadow this lane already stands in
            # (later lanes' prompts in prefill run first): the requests that
            # land in the added time and wait past their slack are its harm.
            before = share * (first_tokens.shadow(other, now) or 0.0)
            held = max(0.0, before + share * duration - slack) - max(0.0, before - slack)
            total += self.rates[other].rate(now) * held
        return total

    def refuses(self, lane: str, prompt_tokens: int, now: float) -> float | None:
        """The harm, when it is over ``lane``'s limit (the request should be
        deferred); ``None`` when it may queue."""
        limit = self._limits.get(lane)
        if limit is None or not self._before[lane]:
            return None
        harm = self.harm(lane, prompt_tokens, now)
        return harm if harm > limit else None
