"""How long the engine takes to a first token, learned from what it did.

An engine computes the prompts it was handed roughly in the order it got them
(vLLM's queue is FCFS, and chunked prefill shares iterations but not the
order; llama.cpp fills each step slot by slot, which pinning by lane turns
into the same). So a request started now has its first token after the engine
gets through the prompt tokens handed over before it and not yet through
prefill, plus its own: the *tokens ahead*. A
:class:`~slopolicy.core.queueing.ttft_model.FirstTokenModel` per lane fits
the engine's TTFT from them (a floor, a rate, attention's quadratic term,
and how much later lanes' prompts in prefill hold a start up), so that
neither low load (where an iteration's overhead and the decode batch beside
it dominate) nor a backlog (where the rate dominates) is mistaken for the
other. It needs no engine profile.

The Policy asks it one question at dispatch: is this queued request expected
to miss its lane's TTFT target even if it started now? Then it can only miss,
and starting it would take engine time from requests that can still attain
(on bursty traffic the whole burst's prefill slows every decode beside it):
it leaves the queue as expired. It gives up only on what even an optimistic
reading says is lost: the prediction less one standard deviation of the
fit's residuals. Where the tokens ahead explain TTFT well (a backlog of
prompts) that is close to the prediction; where something the policy does
not count drives TTFT (another lane's long prompts on a FCFS engine, a
decode-bound batch) the residuals are wide and it gives up on nothing a
lucky moment could still save. A request that would start in a later lane's
prefill (below) is granted the deviation only in proportion to the share of
that prefill a start does not wait (``1 - blocking``). Where starts wait
nearly all of a shadow, what they wait is skewed: most wait nearly all of
it, a few much less (the prefill ended sooner than estimated), so the fitted
``blocking``, a mean, sits below what a typical start waits, and the
prediction is already the optimistic side for most. On vLLM's default
engine (shadows over 0.2 s: 13 of 29 starts waited 0.9-1 of theirs, the fit
read 0.87), the starts kept by one deviation less but not by the prediction
came late 9 times in 11, each against the lane's p95. Where long prompts
interleave, blocking is near 0 and the reading is the optimistic one, as
for any start.

**The late budget.** That optimism is spent from the lane's target: a p95
target lets 5% of first tokens come past it, a p99 1%
(:mod:`~slopolicy.core.queueing.lateness`). A start the optimistic reading
keeps and the expected one gives up on comes late up to half the time.
While the lane's first tokens (each past its arrival + target or not,
weighted over the last half minute) come late within its budget, such
starts are worth the risk: each that makes it is a request attained that
giving up would have lost. Once the late ones pass what the budget allows
by a whole first token, it is spent: the check reads the expected TTFT (in
a shadow too, no share of the deviation granted), and before the lane's
fit, where a start outside a shadow was never given up on, the engine
model's TTFT with nothing beside stands in. So the lane's p95 holds where
the optimism alone let it slip: at twice FCFS's capacity on two held-out
long-conversation traces the chat lane's TTFT p95 was 0.531 s and 0.507 s
against 0.5 s, from turns kept at the edge (a cold start's turns that had
waited for KV room, turns in a long prefill's shadow); with the budget,
0.467 s and 0.496 s.

With no later lane's prompt in prefill beside it, the prompts ahead of a
request that are in prefill already count for what is left of them: the
reading less the seconds since the first of them started, never less than
the request's own prompt alone (the engine computed them in that time;
beside a later lane's prefill it may have computed that instead). Read in
full, a request behind a 120k-token prompt that has run for seconds is
given up on when it would still make its target.

Before a lane's fit has measured how much of a later lane's prefill its
starts wait for (``blocking``, which needs shadows of many lengths), a
request that would start in such a *shadow* is read by a stand-in: the
engine model's TTFT with nothing beside (below) plus the share of their
shadows the lane's starts in one have waited for so far
(:attr:`~slopolicy.core.queueing.ttft_model.FirstTokenModel.waited_share`).
On an engine that runs prefills whole that share is near 1 from the first
such start, so a chat turn landing in a long prefill in the first minutes
leaves as it would once the fit is there, instead of waiting the prefill
out and counting late against its lane's p95; where long prompts
interleave it reads lower from the first starts that did not wait. Before
the lane's first start in a shadow nothing is given up on (that start is
the test the interference price waits for too).

Which tokens are ahead is the caller's to say. The Policy counts the prompts
of the request's own lane and of the lanes listed before it: what an engine
that honours lane priorities computes first (vLLM's priority scheduling, the
simulator's), and fewer than a FCFS engine has ahead, so on either engine the
reading errs towards keeping a request.

The same count gives the policy its **prefill budget**: with a ``horizon``
(seconds), a request starts only while the prompt tokens ahead of it plus
its own fit in what the engine computes in that time at the learned rate,
or when nothing is ahead of it. An engine fills each iteration with the
prompts it has been handed (vLLM's chunked-prefill budget takes up to
``max_num_batched_tokens`` of them at once), so a budget of a fraction of
the tightest TPOT target keeps every iteration, and so every decoding
request's token gap, under that target, at almost no cost in prefill
throughput (past the engine's knee an iteration's time grows with its
tokens); and what is not yet handed over waits in the policy's queues,
in the policy's order, where a request that can no longer make its
target leaves before it takes engine time. With nothing ahead anything
starts, so the engine is never left idle while work waits (invariant 4),
and a prompt larger than the budget still starts alone (no starvation).

The budget reads the **engine model**: one more
:class:`~slopolicy.core.queueing.ttft_model.FirstTokenModel`, fed by every
lane's starts that no later lane's prompt stood beside (so it has no
shadow to learn), since every lane measures the same engine's speed. It
fits as soon as the lanes together have started enough, which on mixed
traffic is long before the rarest lane has; until a lane's own model is
fitted, that lane's prefill time (for the shadows it casts and the
interference it is priced at) is the seconds per token of its own starts
so far, a ratio it has from its first token on (its own prompt sizes,
where the engine model would extrapolate from others'), or the engine
model's before the lane has a first token. Until the engine
model has a rate, the budget is zero: a request starts only when nothing
is ahead of it, one prompt at a time in each lane's view, so the first
seconds neither flood the engine's own queue nor teach the models from
starts whose TTFT is mostly someone else's prompt. This holds from the
first start: a host that streams reports that start's first token well
within the tightest TTFT target (the first start is the first in the
lanes' order: the shortest chat prompt where a lane orders shortest
first), so the budget holds while one is due and after. A host that has
reported none by the first start plus half that target is taken not to
report them (no streaming): it never teaches a rate, and nothing is held
back for it. Half: the requests held behind the first start keep the
other half of their target to start in (the whole target is their
deadline, so on a host that does not stream they would expire the moment
the hold lifted). Held only from the first report on, a cold start's first
instants went to the engine's FCFS queue whole: on a held-out ServeGen
window (from 32,400 s, at 0.145 times its rate), 56 requests came in the
first 1.5 s, short chat turns with four 3-8k-token chat prompts and a
14.5k-token heavy one among the first; started as they came, 46 missed,
most expired behind those prompts. Held, the short turns start first and
4 miss (the four long chat prompts).

This object is sans-IO and takes no time: callers pass observed seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slopolicy.core.queueing.lateness import LateShare, late_budget
from slopolicy.core.queueing.ttft_model import FirstTokenModel
from slopolicy.errors import UsageError

__all__ = ("Around", "FirstTokenCheck", "FirstTokenModel")

#: The quantile a TTFT target is taken at where no late budget is given (a p95).
_DEFAULT_QUANTILE = 0.95

#: What a start's TTFT is read from: prompt tokens ahead (its own included),
#: their squared lengths summed (tokens²), and its shadow (seconds).
Around = tuple[int, float, float]


class FirstTokenCheck:
    """The Policy's question at dispatch, for every lane with a TTFT bound:
    is this request expected to miss its target even if it started now?

    Keeps the started requests not yet through prefill (each one's lane,
    prompt and start) and a
    :class:`~slopolicy.core.queueing.ttft_model.FirstTokenModel` per lane,
    fed as requests reach their first token. A request's tokens ahead are
    the prompts of its own lane and of the lanes listed before it (see the
    module doc); its shadow is the prefill the later lanes' prompts have
    left. ``bounds`` maps a lane to its TTFT target in seconds; lanes without
    one are never given up on, but their prompts still count as ahead of
    later lanes. ``horizon`` (seconds, ``None``: no budget) sizes the
    prefill budget (see the module doc). ``budgets`` maps a TTFT-bound lane
    to its late budget, the share of its first tokens its target lets come
    past it (0 to 1; :func:`~slopolicy.core.queueing.lateness.late_budget`
    of a p95, 0.05, for a lane not in it): the optimism the check may spend
    (see the module doc).
    """

    __slots__ = (
        "_ahead_of",
        "_behind_of",
        "_bounds",
        "_budgets",
        "_live",
        "_prefilling",
        "_report_due",
        "_reported",
        "_squares",
        "engine",
        "horizon",
        "late",
        "models",
    )

    def __init__(
        self,
        lanes: Sequence[str],
        bounds: Mapping[str, float],
        *,
        horizon: float | None = None,
        budgets: Mapping[str, float] | None = None,
    ) -> None:
        if horizon is not None and not (
            isinstance(horizon, int | float) and 0 < horizon < float("inf")
        ):
            raise UsageError(f"horizon must be a finite number > 0 or None, got {horizon!r}")
        given = {} if budgets is None else dict(budgets)
        for lane, budget in given.items():
            if lane not in bounds:
                raise UsageError(f"a late budget is for a lane with a TTFT bound, not {lane!r}")
            if not (isinstance(budget, int | float) and 0.0 < budget < 1.0):
                raise UsageError(
                    f"the late budget of lane {lane!r} must be a number in (0, 1), got {budget!r}"
                )
        self._bounds = dict(bounds)
        self._budgets = {
            lane: float(given.get(lane, late_budget(_DEFAULT_QUANTILE))) for lane in self._bounds
        }
        #: Each TTFT-bound lane's share of first tokens past its target, lately.
        self.late = {lane: LateShare() for lane in self._bounds}
        self.horizon = None if horizon is None else float(horizon)
        #: Each lane's engine TTFT as it has been (only the TTFT-bound lanes
        #: are given up on).
        self.models = {name: FirstTokenModel() for name in lanes}
        #: The engine's speed on prompts, from every lane's starts with no
        #: later lane's prompt in prefill beside them: what the prefill
        #: budget reads, and a lane's prefill time until its own model is
        #: fitted (see the module doc).
        self.engine = FirstTokenModel()
        self._reported = False  # whether the host has reported a first token
        # The first start plus half the tightest target: a host that streams has
        # reported a first token by then (None before a start, or without targets).
        self._report_due: float | None = None
        self._prefilling = dict.fromkeys(lanes, 0)
        self._squares = dict.fromkeys(lanes, 0.0)
        # Started and not through prefill: id -> (lane, prompt, started at,
        # the model's inputs then (None when they were unknown), whether no
        # later lane's prompt was in prefill then).
        self._live: dict[str, tuple[str, int, float, Around | None, bool]] = {}
        self._ahead_of = {name: tuple(lanes[: i + 1]) for i, name in enumerate(lanes)}
        self._behind_of = {name: frozenset(lanes[i + 1 :]) for i, name in enumerate(lanes)}

    def ahead(self, lane: str) -> int:
        """Prompt tokens ahead of a request of ``lane`` started now, its own not included."""
        prefilling = self._prefilling
        return sum(prefilling[name] for name in self._ahead_of[lane])

    def shadow(self, lane: str, now: float) -> float | None:
        """Seconds of prefill the prompts of the lanes after ``lane`` have
        left at ``now``: not ahead of a request of ``lane``, but an engine may
        finish them first (see
        :class:`~slopolicy.core.queueing.ttft_model.FirstTokenModel`). They
        are taken to run one after another in the order they started, each
        for its own lane's :meth:`~FirstTokenModel.prefill` time; ``None``
        while one of them is of a lane whose model is not fitted yet (what a
        start then waits for is unknown)."""
        behind = self._behind_of[lane]
        if not behind:
            return 0.0
        finish = -math.inf
        for other, prompt, started, *_ in self._live.values():  # in start order
            if other in behind:
                seconds = self.prefill(other, prompt)
                if seconds is None:
                    return None
                finish = max(finish, started) + seconds  # one at a time
        return max(0.0, finish - now)

    def prefill(self, lane: str, prompt_tokens: int) -> float | None:
        """Seconds to a first token for one ``prompt_tokens`` prompt of
        ``lane`` with nothing ahead: the lane's model; until it is fitted,
        the lane's provisional ratio (its own prompt sizes, without
        extrapolating); until the lane has a first token, the engine
        model, fitted or provisional (``None`` before any first token)."""
        model, engine = self.models[lane], self.engine
        seconds = model.prefill(prompt_tokens)
        if seconds is None:
            seconds = model.provisional(prompt_tokens)
        if seconds is None:
            seconds = engine.prefill(prompt_tokens)
        if seconds is None:
            seconds = engine.provisional(prompt_tokens)
        return seconds

    def compute(self, prompt_tokens: int) -> float | None:
        """Seconds the engine computes one ``prompt_tokens`` prompt in: the
        engine model's rate and quadratic term, without the floor (``None``
        before it has a rate)."""
        return self.engine.compute(prompt_tokens, squares=float(prompt_tokens) ** 2)

    def _around(self, lane: str, prompt_tokens: int, now: float) -> Around | None:
        """The model's inputs for a request of ``lane`` started at ``now``:
        tokens ahead (its own included), their squares, and its shadow
        (``None`` while the shadow is unknown)."""
        shadow = self.shadow(lane, now)
        if shadow is None:
            return None
        return (*self._load(lane, prompt_tokens), shadow)

    def _load(self, lane: str, prompt_tokens: int) -> tuple[int, float]:
        """Prompt tokens ahead of a ``prompt_tokens`` request of ``lane``
        started now, its own included, and their squared lengths summed."""
        squares = sum(self._squares[name] for name in self._ahead_of[lane])
        return self.ahead(lane) + prompt_tokens, squares + float(prompt_tokens) ** 2

    def budget(self, *, now: float) -> float | None:
        """Prompt tokens (in prompts of chat size, where the quadratic term is
        small) the engine may have ahead of a start at ``now``: the horizon
        at the engine model's rate, 0 until it has one; ``None`` while
        nothing is held back (no horizon, or a host taken not to report
        first tokens: see :meth:`unreported`)."""
        horizon, rate = self.horizon, self.engine.rate
        if horizon is None or self.unreported(now=now):
            return None
        return 0.0 if rate is None else rate * horizon

    def unreported(self, *, now: float) -> bool:
        """Whether the host is taken, at ``now``, not to report first tokens:
        it has reported none, and either nothing has started yet or half the
        tightest target has passed since the first start (a host that
        streams would have reported one by then; see the module doc)."""
        due = self._report_due
        return not self._reported and (due is None or now >= due)

    def report_due(self) -> float | None:
        """When a host that has reported no first token yet is taken not to
        report them, so the budget stops holding starts back (seconds; see
        :meth:`unreported`); ``None`` once it has, before a start, and
        with no horizon or no TTFT target."""
        return None if self._reported or self.horizon is None else self._report_due

    def admits(self, lane: str, prompt_tokens: int, *, now: float) -> bool:
        """Whether a request of ``lane`` may start at ``now`` under the
        prefill budget: nothing ahead of it, or the engine model expects the
        engine to compute what is ahead plus its own prompt within the
        horizon (the fitted rate and quadratic term, not the floor); before
        that model has a rate, only with nothing ahead (see the module doc)."""
        if self.horizon is None or self.unreported(now=now):
            return True
        ahead, squares = self._load(lane, prompt_tokens)
        if ahead == prompt_tokens:  # nothing ahead of it
            return True
        seconds = self.engine.compute(ahead, squares=squares)
        return seconds is not None and seconds <= self.horizon

    def lost(self, lane: str, prompt_tokens: int, *, arrival: float, now: float) -> bool:
        """Whether a request of ``lane`` that arrived at ``arrival`` would have
        its first token past ``arrival`` + the lane's target if started at
        ``now``, even by the model's optimistic reading; in a later lane's
        shadow, one less the deviation only for the share of the shadow a
        start does not wait; by the expected reading once the lane's first
        tokens have come late past its late budget (see the module doc)."""
        bound = self._bounds.get(lane)
        if bound is None:
            return False
        around = self._around(lane, prompt_tokens, now)
        if around is None:
            return False
        ahead, squares, shadow = around
        model = self.models[lane]
        spent = self.late[lane]._spent(self._budgets[lane])
        expected = self._reading(model, ahead, squares, shadow, spent=spent)
        if expected is None:
            return False
        if shadow <= 0.0:
            # The prompts ahead that are in prefill already have been
            # computed since the first of them started (with no later lane's
            # prefill beside, nothing else held the engine): what is left of
            # them is that much less, never less than this prompt alone.
            done = self._done(lane, now)
            if done > 0.0:
                alone = self.prefill(lane, prompt_tokens)
                expected = max(expected - done, 0.0 if alone is None else alone)
        return now + expected > arrival + bound

    def _reading(
        self, model: FirstTokenModel, ahead: int, squares: float, shadow: float, *, spent: bool
    ) -> float | None:
        """:meth:`lost`'s reading of a start's TTFT from ``ahead`` tokens in
        full (``squares`` summed) and ``shadow``; ``spent``: the lane's late
        budget is, so the reading is the expected one, and before the lane's
        fit the engine model's (see the module doc)."""
        if shadow > 0.0 and model.measured:
            # In a later lane's shadow the deviation is granted only for the
            # share of it a start does not wait: where starts wait nearly all
            # of a shadow, what they wait is skewed (see the module doc).
            expected = model.expected(ahead, squares=squares, shadow=shadow)
            if expected is not None and not spent:
                expected -= model.spread * (1.0 - min(1.0, model.blocking))
            return expected
        if shadow > 0.0:
            # Before the fit measures how much of a shadow the lane waits
            # for, the share its starts in one waited so far stands in, on
            # the engine's TTFT with nothing beside: what that share was
            # measured against.
            share, unhindered = model.waited_share, self._unhindered(ahead, squares)
            if share is not None and unhindered is not None:
                return unhindered + share * shadow
        expected = model.expected(ahead, squares=squares, shadow=shadow)
        if expected is None:
            # Before the lane's fit, with its budget spent: the engine's
            # TTFT with nothing beside stands in (none is given up before).
            return self._unhindered(ahead, squares) if spent else None
        return expected if spent else expected - model.spread

    def _done(self, lane: str, now: float) -> float:
        """Seconds since the first of the prompts ahead of a request of
        ``lane`` that are in prefill started (0 with none)."""
        ahead_of = self._ahead_of[lane]
        for other, _, started, *_ in self._live.values():  # in start order
            if other in ahead_of:
                return max(0.0, now - started)
        return 0.0

    def started(self, request_id: str, lane: str, prompt_tokens: int, *, now: float) -> None:
        """Request ``request_id`` of ``lane`` was handed to the engine at ``now``."""
        around = self._around(lane, prompt_tokens, now)
        if self._report_due is None and self._bounds and not self._reported:
            self._report_due = now + min(self._bounds.values()) / 2
        prefilling = self._prefilling
        alone = not any(prefilling[name] for name in self._behind_of[lane])
        self._live[request_id] = (lane, prompt_tokens, now, around, alone)
        prefilling[lane] += prompt_tokens
        self._squares[lane] += float(prompt_tokens) ** 2

    def first_token(self, request_id: str, *, now: float, arrival: float | None = None) -> None:
        """A started request's first token came at ``now``; with its
        ``arrival``, it counts toward its lane's late share (past
        ``arrival`` + the lane's target, or not)."""
        lane, _, started, around, alone = self._leave(request_id)
        self._reported = True
        bound = self._bounds.get(lane)
        if bound is not None and arrival is not None:
            self.late[lane].observe(now > arrival + bound, now=now)
        if around is not None:  # else what it waited for is unknown: it teaches nothing
            ahead, squares, shadow = around
            seconds = now - started
            unhindered = None if alone else self._unhindered(ahead, squares)
            self.models[lane].observe(
                ahead, seconds, squares=squares, shadow=shadow, unhindered=unhindered
            )
            if alone:  # no later lane's prompt beside it: the engine's speed alone
                self.engine.observe(ahead, seconds, squares=squares)

    def left(self, request_id: str) -> None:
        """A started request ended before its first token."""
        self._leave(request_id)

    def _unhindered(self, ahead: int, squares: float) -> float | None:
        """The engine model's TTFT for ``ahead`` tokens (squares summed to
        ``squares``) with no later lane's prefill beside: fitted, or
        provisional (``None`` before its first observation)."""
        engine = self.engine
        seconds = engine.expected(ahead, squares=squares)
        return engine.provisional(ahead) if seconds is None else seconds

    def _leave(self, request_id: str) -> tuple[str, int, float, Around | None, bool]:
        record = self._live.pop(request_id)
        lane, prompt = record[0], record[1]
        self._prefilling[lane] -= prompt
        squares = self._squares
        if self._prefilling[lane] == 0:
            squares[lane] = 0.0  # exact again: no rounding left over
        else:
            squares[lane] -= float(prompt) ** 2
        return record
