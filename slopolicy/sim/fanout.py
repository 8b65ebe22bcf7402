"""A request of ``n`` sequences (``n`` choices, ``best_of``) as ``n`` engine sequences.

vLLM fans such a request out into ``n`` child requests and llama-server
into ``n`` tasks in ``n`` slots: each holds its own seat and KV and computes
the prompt itself. The engine model does the same: :class:`Fanout` names
the children (``id``, then ``id`` + U+001F + ``1``, ``2``...: a
:class:`~slopolicy.sim.workload.SimRequest` id may not hold U+001F, and the
engine refuses an id that clashes with a live one), and folds the
children's results back into the request's: its first token is its first
child's, it finishes when its last child does, with every child's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slopolicy.sim.engine_spec import StepResult

__all__ = ("Fanout",)

_SEP = "\x1f"  # the ASCII unit separator


@dataclass(slots=True)
class _Family:
    ids: list[str]  # its children's engine ids
    left: int  # children not finished
    output: int = 0  # the finished children's tokens
    first: bool = False  # whether its first token came out


@dataclass(slots=True)
class Fanout:
    """The requests of more than one sequence in one engine (see the module doc)."""

    _parent: dict[str, str] = field(default_factory=dict)  # child id -> request id
    _families: dict[str, _Family] = field(default_factory=dict)

    def __contains__(self, request_id: object) -> bool:
        """Whether ``request_id`` is a request of more than one sequence not finished."""
        return request_id in self._families

    @staticmethod
    def children(request_id: str, sequences: int) -> list[str]:
        """The engine ids of ``request_id``'s ``sequences`` sequences."""
        return [request_id] + [f"{request_id}{_SEP}{k}" for k in range(1, sequences)]

    def add(self, request_id: str, ids: list[str]) -> None:
        """Record ``request_id``'s children ``ids`` (more than one)."""
        for child in ids:
            self._parent[child] = request_id
        self._families[request_id] = _Family(ids, len(ids))

    def ids(self, request_id: str) -> list[str]:
        """The engine ids of ``request_id``'s sequences (itself, for one)."""
        family = self._families.get(request_id)
        return [request_id] if family is None else family.ids

    def drop(self, request_id: str) -> None:
        """Forget ``request_id``'s children (aborted); nothing for one sequence."""
        family = self._families.pop(request_id, None)
        if family is not None:
            for child in family.ids:
                self._parent.pop(child, None)

    def fold(self, result: StepResult) -> tuple[StepResult, list[tuple[str, list[str]]]]:
        """``result`` in terms of requests: first tokens, finishes and
        preemptions of children become their request's (once each); and
        each request it finished of more than one sequence, with its children."""
        if not self._parent:
            return result, []
        first: list[str] = []
        for child in result.first_tokens:
            parent = self._parent.get(child)
            if parent is None:
                first.append(child)
            elif not self._families[parent].first:
                self._families[parent].first = True
                first.append(parent)
        finished: list[tuple[str, int]] = []
        families: list[tuple[str, list[str]]] = []
        for child, output in result.finished:
            parent = self._parent.pop(child, None)
            if parent is None:
                finished.append((child, output))
                continue
            family = self._families[parent]
            family.left -= 1
            family.output += output
            if not family.left:
                del self._families[parent]
                finished.append((parent, family.output))
                families.append((parent, family.ids))
        preempted = dict.fromkeys(self._parent.get(c, c) for c in result.preempted)
        folded = StepResult(
            result.end,
            result.iterations,
            tuple(first),
            tuple(finished),
            tuple(preempted),
            result.admitted,
        )
        return folded, families

    def finished_output(self, request_id: str) -> int:
        """Tokens ``request_id``'s finished sequences generated (0: none, or one sequence)."""
        family = self._families.get(request_id)
        return 0 if family is None else family.output
