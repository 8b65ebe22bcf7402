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
lucky moment could still save.

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
Before the model has a rate, nothing is held back; a host that never
reports first tokens never gives it one.

This object is sans-IO and takes no time: callers pass observed seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from slopolicy.core.queueing.ttft_model import FirstTokenModel
from slopolicy.errors import UsageError

__all__ = ("Around", "FirstTokenCheck", "FirstTokenModel")

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
    prefill budget (see the module doc).
    """

    __slots__ = (
        "_ahead_of",
        "_behind_of",
        "_bounds",
        "_live",
        "_prefilling",
        "_squares",
        "horizon",
        "models",
    )

    def __init__(
        self, lanes: Sequence[str], bounds: Mapping[str, float], *, horizon: float | None = None
    ) -> None:
        if horizon is not None and not (
            isinstance(horizon, int | float) and 0 < horizon < float("inf")
        ):
            raise UsageError(f"horizon must be a finite number > 0 or None, got {horizon!r}")
        self._bounds = dict(bounds)
        self.horizon = None if horizon is None else float(horizon)
        #: Each lane's engine TTFT as it has been (every lane's first tokens
        #: teach the prefill budget; only the TTFT-bound ones are given up on).
        self.models = {name: FirstTokenModel() for name in lanes}
        self._prefilling = dict.fromkeys(lanes, 0)
        self._squares = dict.fromkeys(lanes, 0.0)
        # Started and not through prefill: id -> (lane, prompt, started at,
        # the model's inputs then, None when they were unknown).
        self._live: dict[str, tuple[str, int, float, Around | None]] = {}
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
        models, finish = self.models, -math.inf
        for other, prompt, started, _ in self._live.values():  # in start order
            if other in behind:
                seconds = models[other].prefill(prompt)
                if seconds is None:
                    return None
                finish = max(finish, started) + seconds  # one at a time
        return max(0.0, finish - now)

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

    def _engine(self) -> FirstTokenModel | None:
        """The model the prefill budget reads: the first lane's that is
        fitted (every lane's measures the same engine)."""
        for model in self.models.values():
            if model.rate is not None:
                return model
        return None

    def budget(self) -> float | None:
        """Prompt tokens (in prompts of chat size, where the quadratic term is
        small) the engine may have ahead of a start: the horizon at the learned
        prefill rate; ``None`` while nothing is held back."""
        horizon, model = self.horizon, self._engine()
        if horizon is None or model is None:
            return None
        assert model.rate is not None  # fitted
        return model.rate * horizon

    def admits(self, lane: str, prompt_tokens: int) -> bool:
        """Whether a request of ``lane`` may start now under the prefill
        budget: nothing ahead of it, or the engine is expected to compute what
        is ahead plus its own prompt within the horizon (the fitted rate and
        quadratic term, not the floor)."""
        horizon, model = self.horizon, self._engine()
        if horizon is None or model is None:
            return True
        ahead, squares = self._load(lane, prompt_tokens)
        if ahead == prompt_tokens:  # nothing ahead of it
            return True
        seconds = model.compute(ahead, squares=squares)
        assert seconds is not None  # fitted
        return seconds <= horizon

    def lost(self, lane: str, prompt_tokens: int, *, arrival: float, now: float) -> bool:
        """Whether a request of ``lane`` that arrived at ``arrival`` would have
        its first token past ``arrival`` + the lane's target if started at
        ``now``, even by the model's optimistic reading (see the module doc)."""
        bound = self._bounds.get(lane)
        if bound is None:
            return False
        around = self._around(lane, prompt_tokens, now)
        if around is None:
            return False
        ahead, squares, shadow = around
        expected = self.models[lane].optimistic(ahead, squares=squares, shadow=shadow)
        return expected is not None and now + expected > arrival + bound

    def started(self, request_id: str, lane: str, prompt_tokens: int, *, now: float) -> None:
        """Request ``request_id`` of ``lane`` was handed to the engine at ``now``."""
        around = self._around(lane, prompt_tokens, now)
        self._live[request_id] = (lane, prompt_tokens, now, around)
        self._prefilling[lane] += prompt_tokens
        self._squares[lane] += float(prompt_tokens) ** 2

    def first_token(self, request_id: str, *, now: float) -> None:
        """A started request's first token came at ``now``."""
        lane, _, started, around = self._leave(request_id)
        if around is not None:  # else what it waited for is unknown: it teaches nothing
            ahead, squares, shadow = around
            self.models[lane].observe(ahead, now - started, squares=squares, shadow=shadow)

    def left(self, request_id: str) -> None:
        """A started request ended before its first token."""
        self._leave(request_id)

    def _leave(self, request_id: str) -> tuple[str, int, float, Around | None]:
        record = self._live.pop(request_id)
        lane, prompt = record[0], record[1]
        self._prefilling[lane] -= prompt
        squares = self._squares
        if self._prefilling[lane] == 0:
            squares[lane] = 0.0  # exact again: no rounding left over
        else:
            squares[lane] -= float(prompt) ** 2
        return record
