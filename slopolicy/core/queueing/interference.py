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
so nothing here acts there once it is learned. A request of an earlier
lane ``i`` landing in the first ``blocking_i · D(P) - slack_i`` seconds of
the prompt's prefill misses its target, ``slack_i`` being what that target
leaves over the engine's unhindered TTFT (the fitted floor). Where
later-lane prompts are in prefill already, lane ``i`` stands in their
shadow ``S_i`` (seconds left, see
:meth:`~slopolicy.core.queueing.ttft.FirstTokenCheck.shadow`) and the
prompt lengthens it. With lane ``i``'s requests arriving at ``rate_i``
per second (measured, a half-minute exponential window from the lane's
first arrival, :class:`ArrivalRate`) and ``b_i =
min(1, blocking_i)``, the prompt's expected **harm** is

    harm(P) = Σ_i rate_i · (max(0, b_i · (S_i + D(P)) - slack_i) - max(0, b_i · S_i - slack_i))

requests missed over every more urgent lane with a TTFT target. A lane's
``max_interference`` (requests; default 1) bounds it: a request whose harm
is larger is deferred (503, ``prefill_interference``), one request for more
than one. The caller may scale the bound by what the request is worth
(:meth:`PrefillInterference.refuses`' ``worth``): the policy passes the part
of a tenant's demand within its max-min share
(:meth:`~slopolicy.core.queueing.demand.TenantDemand.portion`), 1 until the
engine saturates, so past it a tenant asking for three times its share may
cost the others a third as much. At low load the rates are small and
nothing is deferred; the threshold falls as the urgent lanes get busier,
and rises again as they quieten.

Before a lane has measured its own terms, stand-ins price the prompt from
the first starts of a cold start on. ``D(P)`` is
:meth:`FirstTokenCheck.prefill <slopolicy.core.queueing.ttft.FirstTokenCheck.prefill>`'s:
the lane's fit, or before it the seconds per token of the lane's first
starts, or the engine model's (every lane's starts pooled). A more urgent
lane takes the engine model's floor (0 before it has one: the whole target
is slack) and a blocking of :data:`PRIOR_BLOCKING` (1), until its own model
has seen starts in shadows of different lengths. The first long prompt is
the test: while the urgent lane has never started beside a later lane's
prefill, a prompt with none running starts unpriced, and the urgent
requests started beside it are what measure the engine (a prior that
deferred every long prompt would never be put to the test). From then on
the prior prices every prompt, so the test is not repeated at the cost of
each long prompt that comes before the fit. On an engine that interleaves,
the urgent lane soon measures a blocking near 0 and the price stops acting.

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
#: How much of a later lane's prefill a lane is taken to wait for until its
#: model has measured it (fitted, with starts in shadows of different
#: lengths): all of it, as on an engine that runs prefills whole (vLLM's
#: default). The measured share replaces it, near 0 on an engine that
#: interleaves.
PRIOR_BLOCKING = 1.0


class ArrivalRate:
    """Arrivals per second over an exponential window of ``window`` seconds.

    The first arrival starts the clock: the rate is that of the arrivals
    after it over the time since, weighted like the window. A window that
    began empty would otherwise read a steady stream at ``1 - e^(-t /
    window)`` of its rate ``t`` seconds in (a quarter of it ten seconds into
    a half-minute window), just when a cold start needs the price most."""

    __slots__ = ("_at", "_since", "_value", "window")

    def __init__(self, window: float = RATE_WINDOW_S) -> None:
        if not (isinstance(window, int | float) and 0 < window < math.inf):
            raise UsageError(f"window must be a finite number > 0, got {window!r}")
        self.window = float(window)
        self._value = 0.0
        self._at = -math.inf
        self._since = math.inf

    def arrived(self, now: float) -> None:
        """One arrival at ``now`` (seconds; earlier times count as ``now``)."""
        self._value = self._decayed(now) + 1.0 / self.window
        self._at = max(self._at, now)
        self._since = min(self._since, now)

    def _decayed(self, now: float) -> float:
        """The window's sum at ``now`` (every arrival counts ``e^(-age / window) / window``)."""
        if self._value == 0.0 or now <= self._at:
            return self._value
        return self._value * math.exp((self._at - now) / self.window)

    def rate(self, now: float) -> float:
        """Arrivals per second at ``now`` (0 until the first arrival has a
        later one, or at its instant)."""
        window = self.window
        spanned = -math.expm1((self._since - now) / window)  # of the window since the first
        if not spanned > 0.0:  # (at its instant, or before it)
            return 0.0
        first = (1.0 - spanned) / window  # what the first arrival still counts
        value = self._decayed(now)
        rate = max(0.0, value - first) / spanned
        return rate if rate < math.inf else value  # (arrivals a denormal apart)


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
        first_tokens = self._first_tokens
        duration = first_tokens.prefill(lane, prompt_tokens)
        if duration is None:
            return 0.0
        models, engine, total = first_tokens.models, first_tokens.engine, 0.0
        for other in self._before[lane]:
            model = models[other]
            floor, blocking, measured = model.floor, model.blocking, model.measured
            if measured and blocking <= 0.0:
                continue  # measured: this lane does not wait for later prefills
            shadow = first_tokens.shadow(other, now) or 0.0
            if not measured:
                # Not measured yet: the prior. Until the lane has started
                # beside a later lane's prefill, a prompt with none running
                # starts unpriced: its prefill is what teaches the lane how
                # much it waits (a prior that deferred every prompt would
                # never be tested). After that first test, every prompt.
                if shadow <= 0.0 and not model.beside:
                    continue
                if floor is None:  # the engine's, 0 before any fit (the whole target is slack)
                    floor = engine.floor or 0.0
                blocking = PRIOR_BLOCKING
            assert floor is not None  # measured: the fit's floor
            slack = self._bounds[other] - floor
            share = min(1.0, blocking)
            # The prefill lengthens the shadow this lane already stands in
            # (later lanes' prompts in prefill run first): the requests that
            # land in the added time and wait past their slack are its harm.
            before = share * shadow
            held = max(0.0, before + share * duration - slack) - max(0.0, before - slack)
            total += self.rates[other].rate(now) * held
        return total

    def refuses(
        self, lane: str, prompt_tokens: int, now: float, *, worth: float = 1.0
    ) -> float | None:
        """The harm, when it is over ``lane``'s limit times ``worth`` (what
        the request is worth, 0 to 1 requests: the request should be
        deferred); ``None`` when it may queue."""
        if not (isinstance(worth, int | float) and 0.0 <= worth <= 1.0):
            raise UsageError(f"worth must be a number from 0 to 1, got {worth!r}")
        limit = self._limits.get(lane)
        if limit is None or not self._before[lane]:
            return None
        harm = self.harm(lane, prompt_tokens, now)
        return harm if harm > limit * worth else None
