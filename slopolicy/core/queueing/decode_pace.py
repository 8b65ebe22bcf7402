"""Whether the requests decoding keep their TPOT target's pace: starts wait when not.

A continuous-batching engine computes every running request's next token in
one iteration, and a start adds its prompt to those iterations: a chunk of
prefill makes the iteration longer for every request decoding beside it,
and each request in the batch adds its own share of the decode work. On a
fast engine at its default limits the iterations stay short and none of
this shows; on a slower one (an A100 computes a prompt token in about three
times an H100's time), at a large batch or with prompts landing one after
another, the iterations grow past the TPOT target and every request
decoding misses it together, each after taking all the engine time it
would have taken had it met it. A start that pushes the batch past the
target trades every running request for the one it lets in.

The pace is read from the tokens hosts report. A request of a lane with a
TPOT target ``T`` (its ``tpot_p95``: the mean gap between tokens, as the
attainment reads it) has ``slack = T · (tokens - 1) - elapsed`` at a report,
``elapsed`` the time since its first token: what it may still lose and end
within its target. It is projected to the end of its answer as forecast
(``left`` more tokens: its tenant's recent answers in its lane, as the KV
ledger reserves) at the pace it decodes alone, ``slack + (T - pace) · left``:
``pace`` is its time since its previous report (or its first token) less
the prefill of the prompts started meanwhile, over the tokens it wrote. So
a request that one long prefill set back makes it up by its end if it
decodes fast between prompts, and one whose batch decodes slower than
``T`` loses more with every token. One behind by more than ``T · left``
(even instant tokens from now would not bring it back) is past saving and
counts no more. Every prompt started since the report takes from the slack what
the engine takes to compute it (the engine model's rate and quadratic term,
:meth:`~slopolicy.core.queueing.ttft.FirstTokenCheck.compute`), and so
would the start in question: :meth:`DecodePace.fits` is whether, with it,
at most ``1 - q`` of each lane's measured requests end behind (``q`` the
target's quantile: 5% for a p95, the share the target lets past it). A
start that does not fit waits (``Hold.PACE``): the running requests decode
without new prompts beside them, the fastest the engine goes at that batch,
until their slack allows it or they end. So a very long prompt waits for
the chat turns decoding to have the slack its prefill takes from them, a
small one starts unless they are already behind, and if even pure decode
is too slow at the batch there is, ends shrink the batch until it is not.
One request behind in twenty is the share a p95 allows (a preempted request
recomputing, a client reading slowly) and holds nothing.

The check acts only while a lane's completed answers have come past its
target more than its quantile allows lately (:attr:`DecodePace.late`, read
as the TTFT late budget is: by a whole answer, weighted over the last half
minute; :class:`~slopolicy.core.queueing.lateness.LateShare`). The
projection is a forecast: on an engine whose answers keep their target
anyway (the H100 the defaults were set on) a turn that a long prefill set
back reads as falling behind, and holding starts for it, with nothing
late, cost up to a tenth of the goodput capacity
(``benchmarks/README.md``). Until the answers themselves say the pace is
lost, nothing waits for it, and the reports are not kept (a report costs a
lookup then); from the budget's breach on, each request is measured again
from its next report.

A request counts once it has reported a token after its first (*measured*);
hosts that report tokens only at the end never hold anything. The pace is
read at the reports, so on a host that reports every second (the
simulator's default) it is up to a second stale. Sans-IO: times are the
caller's ``now`` (seconds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from slopolicy.core.checks import check_count, check_now, check_time
from slopolicy.core.queueing.lateness import LateShare, late_budget
from slopolicy.errors import UsageError

__all__ = ("DecodePace",)


class DecodePace:
    """How far ahead of their TPOT target's pace the decoding requests are.

    Args:
        bounds: each TPOT-bound lane's target, seconds per token (> 0).
        quantile: the quantile every target is at (0.95: ``tpot_p95``).
    """

    __slots__ = (
        "_added",
        "_bounds",
        "_budget",
        "_firsts",
        "_open",
        "_slack",
        "late",
    )

    def __init__(self, bounds: Mapping[str, float], *, quantile: float = 0.95) -> None:
        for lane, bound in bounds.items():
            if not (isinstance(bound, int | float) and 0.0 < bound < math.inf):
                raise UsageError(f"lane {lane!r}: TPOT bound must be > 0 and finite, got {bound!r}")
        self._bounds = dict(bounds)
        self._budget = late_budget(quantile)
        self._added = 0.0  # prefill seconds started so far, summed
        #: Each measured request's lane, its projected slack at its latest
        #: report (seconds), ``_added`` then, and that report's time and tokens.
        self._slack: dict[str, tuple[str, float, float, float, int]] = {}
        self._firsts: dict[str, float] = {}  # ``_added`` at first tokens not yet measured
        #: Each lane's share of completed answers past its target, lately.
        self.late = {lane: LateShare() for lane in self._bounds}
        self._open = False  # whether some lane's late answers have spent its budget

    def reported(
        self,
        request_id: str,
        *,
        lane: str,
        first_token_at: float,
        tokens: int,
        expected: int,
        now: float,
    ) -> None:
        """``request_id`` of ``lane`` has ``tokens`` output tokens at ``now``,
        its first at ``first_token_at``, of an answer forecast at ``expected``
        tokens: measured from its second token on."""
        check_count("tokens", tokens)
        check_count("expected", expected)
        check_time("first_token_at", first_token_at)
        check_now(now)
        self._reported(request_id, lane, first_token_at, tokens, expected, now)

    def _reported(
        self,
        request_id: str,
        lane: str,
        first_token_at: float,
        tokens: int,
        expected: int,
        now: float,
    ) -> None:
        """:meth:`reported` for a caller that checked its arguments."""
        if not self._open:
            return  # nothing is held: the reports from when it is are read then
        bound = self._bounds.get(lane)
        if bound is None or tokens < 2:
            return
        kept = self._slack.get(request_id)
        if kept is not None and tokens <= kept[4]:
            return  # no token since its last report: nothing new to read
        gaps = tokens - 1
        slack = bound * gaps - (now - first_token_at)
        left = max(0, expected - tokens)
        if slack < 0.0 and -slack >= bound * left:
            self.ended(request_id)  # past saving: instant tokens from now would not bring it back
            return
        if kept is None:
            since, then, done = first_token_at, self._firsts.pop(request_id, self._added), 1
        else:
            _, _, then, since, done = kept
        # The decode pace since the previous report (or the first token): its
        # time less the prefill started meanwhile, over its tokens.
        decoded = tokens - done
        prefill = self._added - then
        pace = max(0.0, now - since - prefill) / decoded
        slack += (bound - pace) * left  # what it gains by the forecast end, decoding alone
        self._slack[request_id] = (lane, slack, self._added, now, tokens)

    @property
    def active(self) -> bool:
        """Whether some lane's answers have come late beyond its budget lately:
        only then may :meth:`fits` say no."""
        return self._open

    def first_token(self, request_id: str, *, lane: str) -> None:
        """``request_id`` of ``lane`` has its first token: the prompts started
        from now on are beside its decoding."""
        if lane in self._bounds:
            self._firsts[request_id] = self._added

    def started(self, seconds: float) -> None:
        """A prompt the engine computes in ``seconds`` (>= 0) started: every
        request decoding waits that much longer for its tokens."""
        _check_seconds(seconds, finite=True)
        self._started(seconds)

    def _started(self, seconds: float) -> None:
        """:meth:`started` for a caller that checked ``seconds``."""
        self._added += seconds

    def ended(self, request_id: str) -> None:
        """``request_id`` ended (or was never measured: nothing changes)."""
        self._firsts.pop(request_id, None)
        self._slack.pop(request_id, None)

    def completed(self, lane: str, *, first_token_at: float, tokens: int, now: float) -> None:
        """An answer of ``lane`` ended at ``now`` with ``tokens`` tokens, its
        first at ``first_token_at``: past its target or not (from two tokens)."""
        check_count("tokens", tokens)
        check_time("first_token_at", first_token_at)
        check_now(now)
        self._completed(lane, first_token_at, tokens, now)

    def _completed(self, lane: str, first_token_at: float, tokens: int, now: float) -> None:
        """:meth:`completed` for a caller that checked its arguments."""
        bound = self._bounds.get(lane)
        if bound is None or tokens < 2:
            return
        self.late[lane].observe(now - first_token_at > bound * (tokens - 1), now=now)
        budget = self._budget
        self._open = any(late._spent(budget) for late in self.late.values())
        if not self._open:
            self._slack.clear()  # read again from the reports once answers come late

    def fits(self, seconds: float) -> bool:
        """Whether a start adding ``seconds`` of prefill leaves every lane at
        most the share of its measured requests behind pace its target lets
        past it; always while no lane's late answers have spent that share
        lately."""
        _check_seconds(seconds, finite=False)
        if not self._open:
            return True
        added = self._added + seconds
        measured = dict.fromkeys(self._bounds, 0)
        late = dict.fromkeys(self._bounds, 0)
        for lane, slack, then, _, _ in self._slack.values():
            measured[lane] += 1
            if slack < added - then:  # less what started since, this start included
                late[lane] += 1
        budget = self._budget
        return all(late[lane] <= budget * measured[lane] for lane in late)


def _check_seconds(seconds: float, *, finite: bool) -> None:
    """Refuse a prefill time that is not a number >= 0 (finite, if asked)."""
    if not (isinstance(seconds, int | float) and 0.0 <= seconds <= math.inf) or (
        finite and seconds == math.inf
    ):
        raise UsageError(f"prefill seconds must be a number >= 0, got {seconds!r}")
