"""What a scheduler sees of the engine: its seats, its KV cache, its queue.

A real gateway reads as much from the engine's metrics (``num_requests_running``,
``num_requests_waiting``, KV cache usage, preemptions) and knows the engine's
``max_num_seqs`` and KV capacity from its configuration.
"""

from __future__ import annotations

from slopolicy.sim.engine import Engine
from slopolicy.sim.engine_spec import check_int

__all__ = ("EngineView",)


class EngineView:
    """The engine as a scheduler sees it, live, plus what it released in the
    dispatch under way.

    The simulator makes one view per run and passes it to every ``dispatch``
    and ``observe``; each read asks the engine at that moment, so a scheduler
    may keep the view. Requests released in a ``dispatch`` reach the engine's
    queue only when it returns, so a scheduler that releases several in one
    call tells the view of each (:meth:`release`, or :meth:`claim`, which
    checks first): :attr:`waiting`, :attr:`free_seats`, :meth:`spare_blocks`
    and :meth:`admissible` count them from then on. KV usage does not (the
    engine allocates a request's KV only when it starts).
    """

    __slots__ = ("_blocks", "_engine", "_released", "_tokens")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._released = 0
        self._blocks = 0
        self._tokens = 0

    @property
    def max_num_seqs(self) -> int:
        """Seats: requests the engine runs at once."""
        return self._engine.spec.max_num_seqs

    @property
    def num_blocks(self) -> int:
        """KV capacity in blocks."""
        return self._engine.spec.blocks

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self._engine.spec.block_size

    @property
    def running(self) -> int:
        """Requests running (prefilling or decoding)."""
        return self._engine.running

    @property
    def waiting(self) -> int:
        """Requests in the engine's queue, and those released in this dispatch."""
        return self._engine.waiting + self._released

    @property
    def waiting_tokens(self) -> int:
        """Prompt tokens of those :attr:`waiting` (vLLM counts them against
        ``max_num_queued_tokens``)."""
        return self._engine.waiting_tokens + self._tokens

    @property
    def free_seats(self) -> int:
        """Seats neither running nor promised to a waiting request."""
        return max(0, self.max_num_seqs - self.running - self.waiting)

    @property
    def free_blocks(self) -> int:
        """KV blocks free now."""
        return self._engine.free_blocks

    def spare_blocks(self) -> int:
        """KV blocks left after the decoding requests' next token and the
        prompts of every waiting request (released in this dispatch included)."""
        return self._engine.spare_blocks() - self._blocks

    def kv_usage(self) -> float:
        """Fraction of KV blocks in use, 0-1."""
        return self._engine.kv_usage()

    def decode_tokens(self) -> int:
        """Decode tokens computed since the start."""
        return self._engine.decode_tokens()

    def preemptions(self) -> int:
        """Requests the engine preempted since the start (vLLM's
        ``vllm:num_preemptions_total``)."""
        return self._engine.preemptions()

    def admissible(self, prompt_tokens: int) -> bool:
        """Whether a request with this prompt would start at the next iteration
        after everything already waiting: a free seat and KV for its prompt."""
        check_int("prompt_tokens", prompt_tokens, 1)
        return (
            self.free_seats > 0 and self._engine.prompt_blocks(prompt_tokens) <= self.spare_blocks()
        )

    def release(self, prompt_tokens: int) -> None:
        """Count a request with this prompt, released in this dispatch, as waiting."""
        check_int("prompt_tokens", prompt_tokens, 1)
        self._released += 1
        self._blocks += self._engine.prompt_blocks(prompt_tokens)
        self._tokens += prompt_tokens

    def claim(self, prompt_tokens: int) -> bool:
        """:meth:`release` the request if it is :meth:`admissible`; whether it was."""
        if not self.admissible(prompt_tokens):
            return False
        self.release(prompt_tokens)
        return True

    def settle(self) -> None:
        """Forget this dispatch's releases: the simulator calls it once they
        are in the engine's queue."""
        self._released = self._blocks = self._tokens = 0
