"""The running-request path of a :class:`~slopolicy.core.policy.Policy`.

A started request's first token, its TTFT stage marks and its output tokens
as they arrive, then its end: ``finish`` releases its KV blocks and seats
and settles its quota once (``end`` too, for the dispatcher's revocations);
``cancel`` ends it queued or running.
"""

from __future__ import annotations

from slopolicy.core.checks import check_count
from slopolicy.core.lifecycle import Entry, Phase
from slopolicy.core.outcome import Finished, Outcome, Revocation, ending
from slopolicy.core.policy.parts import Parts
from slopolicy.errors import UsageError

__all__ = ("Serving",)


class Serving:
    """Tokens and ends of a policy's started requests (see the module)."""

    __slots__ = (
        "_book",
        "_decode_pace",
        "_first_tokens",
        "_health",
        "_kv",
        "_pace",
        "_queues",
        "_reservations",
        "_router",
        "_seats",
        "_turnover",
    )

    def __init__(self, parts: Parts) -> None:
        self._book = parts.book
        self._router = parts.router
        self._health = parts.health
        self._kv = parts.kv
        self._reservations = parts.reservations
        self._queues = parts.queues
        self._seats = parts.seats
        self._first_tokens = parts.first_tokens
        self._decode_pace = parts.decode_pace
        self._pace = parts.pace
        self._turnover = parts.turnover

    def first_token(self, request_id: str, *, now: float) -> None:
        """The first output token of a started request arrived."""
        entry = self._book.running_entry(request_id)
        now = self._book.advance(now=now)
        if entry.first_token_at is None:
            self._first(entry, now)
            entry.last_token_at = now

    def _first(self, entry: Entry, now: float) -> None:
        entry.first_token_at = now
        if self._decode_pace is not None:
            self._decode_pace.first_token(entry.id, lane=entry.lane)
        self._first_tokens.first_token(entry.id, now=now, arrival=entry.arrival)

    def mark(self, request_id: str, stage: str, *, now: float) -> None:
        """A TTFT stage (``"schedule"`` or ``"prefill"``) of a started request ended."""
        if stage not in ("schedule", "prefill"):
            raise UsageError(f"stage must be 'schedule' or 'prefill', not {stage!r}")
        entry = self._book.running_entry(request_id)
        now = self._book.advance(now=now)
        if entry.marks is None:
            entry.marks = {}
        entry.marks.setdefault(stage, now)

    def tokens(self, request_id: str, count: int, *, now: float) -> float | None:
        """``count`` more output tokens arrived; the gap since the previous chunk."""
        book = self._book
        entry = book.running_entry(request_id)
        check_count("token count", count)
        now = book.advance(now=now)
        gap = None
        if entry.first_token_at is None:
            self._first(entry, now)
        elif count and entry.output_tokens and entry.last_token_at is not None:
            gap = now - entry.last_token_at
            self._health.gap(entry, gap, now=now)
        entry.last_token_at = now
        entry.output_tokens += count
        self._charge_output(entry)
        self._reservations.progress(entry, now=now)  # first: it may move the forecast end
        decode_pace, first = self._decode_pace, entry.first_token_at
        if decode_pace is not None and first is not None:
            decode_pace._reported(
                entry.id, entry.lane, first, entry.output_tokens, entry.kv_output, now
            )
        return gap

    def finish(
        self, request_id: str, *, now: float, outcome: Outcome | str, output_tokens: int | None
    ) -> Finished:
        """End a started request, release what it holds, and return its record."""
        end = ending(outcome)
        book = self._book
        entry = book.running_entry(request_id)
        if output_tokens is not None:
            check_count("output_tokens", output_tokens)
        now = book.advance(now=now)
        if output_tokens is not None:
            entry.output_tokens = output_tokens
        return self.end(entry, end, now)

    def end(self, entry: Entry, outcome: Outcome, now: float) -> Finished:
        """End the running ``entry`` as ``outcome`` at a checked ``now``, on
        the output tokens it counts: release what it holds and return its record."""
        book = self._book
        request = entry.request
        cost = self._router.estimator.score(
            entry.prompt_tokens, entry.output_tokens, request.tool_risk
        )
        # The engine aborts a request reclaim revoked, which held its blocks
        # (it was running); a stalled one may hold none (the engine took it
        # back), so the engine's next reading says what it freed.
        self._kv._release(entry.id, now, dropped=entry.revoked_for is Revocation.RECLAIM)
        if self._turnover is not None:
            self._turnover._add(entry.kv_blocks, now)
        if outcome is Outcome.COMPLETED:
            self._reservations.completed(entry)
        if entry.first_token_at is None:
            self._first_tokens.left(entry.id)
        decode_pace = self._decode_pace
        if decode_pace is not None:
            decode_pace.ended(entry.id)
            if outcome is Outcome.COMPLETED and entry.first_token_at is not None:
                decode_pace._completed(entry.lane, entry.first_token_at, entry.output_tokens, now)
        book.settle(entry, cost, now=now)
        if self._pace is not None:
            self._pace.settle(entry.cost, cost)
        self._charge_output(entry)
        book.running -= 1
        self._seats.give(entry.id)
        del book.entries[entry.id]
        book.outcomes[outcome] += 1
        book.turn_ended(entry, outcome, now=now)
        finished = entry.finished(outcome, now=now, cost=cost)
        self._health.record(finished, now=now)
        return finished

    def _charge_output(self, entry: Entry) -> None:
        uncharged = entry.output_tokens - entry.charged_output
        if uncharged > 0:
            cost = self._router.estimator.weights.beta * uncharged
            self._queues._charge(entry.lane, entry.tenant, cost, entry.weight)
            entry.charged_output = entry.output_tokens

    def cancel(self, request_id: str, *, now: float) -> Finished:
        """Cancel a queued or running request (the client went away)."""
        book = self._book
        entry = book.entries.get(request_id)
        if entry is None:
            raise UsageError(f"request {request_id!r} is not live")
        if entry.phase is Phase.RUNNING:
            return self.finish(request_id, now=now, outcome=Outcome.CANCELLED, output_tokens=None)
        now = book.advance(now=now)
        self._queues.remove(entry.lane, entry)
        return book.end_queued(entry, Outcome.CANCELLED, now=now)
