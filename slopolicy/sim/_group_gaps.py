"""The engine's token-gap bookkeeping per group (lane).

Every iteration's length is one gap for each decoding request of a group,
added to the group's :class:`~slopolicy.sim.gaps.Gaps`. A request's gaps above
its group's TBT target are counted without visiting it each iteration: the
group counts its iterations above target, and a decoding request's share is
that count's growth since it joined (``seq.slow_base``), plus ``seq.slow``
(resume gaps, and shares from earlier decoding spells before a preemption).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim._decode import Seq
from slopolicy.sim.gaps import Gaps, TBTSummary, slow_in_run

__all__ = ("GroupGaps",)

_NONE = SLOTargets()


class GroupGaps:
    """Each group's gaps and slow-gap counts; ``targets`` gives a group's TBT
    target and stall threshold (a group without: none, 0.2 s)."""

    __slots__ = ("_decoding", "_done", "_gaps", "_slow", "_slow_gap", "_targets")

    def __init__(self, targets: Mapping[str, SLOTargets] | None) -> None:
        self._targets = dict(targets or {})
        self._gaps: dict[str, Gaps] = {}
        self._slow_gap: dict[str, float] = {}  # a group's TBT target (inf: none)
        self._slow: dict[str, int] = {}  # iterations above it so far, per group
        self._done: dict[str, int] = {}  # finished requests' slow gaps, until asked
        self._decoding: dict[str, int] = {}  # decoding requests per group

    def register(self, group: str) -> None:
        """Know ``group`` (a request of it was queued)."""
        if group not in self._gaps:
            targets = self._targets.get(group, _NONE)
            self._gaps[group] = Gaps(targets.stall_threshold)
            self._slow_gap[group] = targets.slow_gap
            self._slow[group] = 0
        self._decoding.setdefault(group, 0)

    def iteration(self, seconds: float) -> None:
        """One iteration of ``seconds``: a gap for every decoding request."""
        for group, count in self._decoding.items():
            if count:
                self._gaps[group].add(seconds, count)
                if seconds > self._slow_gap[group]:
                    self._slow[group] += 1

    def run(self, first: float, step: float, k: int) -> None:
        """``k`` pure-decode iterations, the first ``first`` seconds long and
        each next one ``step`` seconds longer (see :meth:`Gaps.add_run`)."""
        for group, count in self._decoding.items():
            if count:
                self._gaps[group].add_run(first, step, k, count)
                self._slow[group] += slow_in_run(first, step, k, self._slow_gap[group])

    def resumed(self, seq: Seq, gap: float) -> None:
        """``seq``'s first token after a preemption came ``gap`` seconds after its last."""
        self._gaps[seq.group].add(gap)
        if gap > self._slow_gap[seq.group]:
            seq.slow += 1

    def joined(self, seq: Seq) -> None:
        """``seq`` started decoding."""
        self._decoding[seq.group] += 1
        seq.slow_base = self._slow[seq.group]

    def preempted(self, seq: Seq) -> None:
        """``seq`` stopped decoding, to wait again."""
        self._decoding[seq.group] -= 1
        seq.slow += self._slow[seq.group] - seq.slow_base

    def finished(self, seq: Seq, *, decoding: bool) -> None:
        """``seq`` finished (``decoding``: in the pool, else on its first
        token after a prefill); its count waits for :meth:`take`."""
        slow = seq.slow
        if decoding:
            self._decoding[seq.group] -= 1
            slow += self._slow[seq.group] - seq.slow_base
        if slow:
            self._done[seq.id] = slow

    def fold(self, families: Iterable[tuple[str, Iterable[str]]]) -> None:
        """Sum each parent's finished sequences' counts under the parent's id."""
        for parent, ids in families:
            slow = sum(self._done.pop(child, 0) for child in ids)
            if slow:
                self._done[parent] = slow

    def take(self, request_id: str) -> int:
        """A finished request's slow gaps, once (0 for none or unknown)."""
        return self._done.pop(request_id, 0)

    def summary(self) -> dict[str, TBTSummary]:
        """Each group's token gaps so far."""
        return {group: gaps.summary() for group, gaps in self._gaps.items()}
