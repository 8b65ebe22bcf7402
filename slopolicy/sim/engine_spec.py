"""The engine model's knobs and the values it reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slopolicy.errors import UsageError
from slopolicy.sim.profiles import EngineProfile

__all__ = (
    "ENGINE_KINDS",
    "EngineKind",
    "EngineSpec",
    "EngineStatistics",
    "Scheduling",
    "StepResult",
)

#: How the engine orders its waiting queue (vLLM ``--scheduling-policy``).
Scheduling = Literal["fcfs", "priority"]

#: Whose scheduler the engine model follows (see :mod:`slopolicy.sim.engine`
#: and :mod:`slopolicy.sim.llama_engine`).
EngineKind = Literal["vllm", "llama.cpp"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("vllm", "llama.cpp")


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """The engine's knobs (vLLM names) and cost profile.

    A ``llama.cpp`` engine has ``max_num_seqs`` slots (``-np``) of
    ``max_model_len`` tokens each (its ``-c`` over ``-np``; default: the KV
    cache over the slots) and computes prompts ``max_num_batched_tokens``
    (``-b``) at a time; its cache must hold every slot's context.

    Attributes:
        profile: the iteration cost model.
        max_num_seqs: requests running at once.
        max_num_batched_tokens: tokens computed per iteration (chunked-prefill budget).
        long_prefill_token_threshold: most prompt tokens one request computes
            per iteration (0: no cap, vLLM's default).
        block_size: tokens per KV block.
        num_blocks: KV blocks (default: the profile's KV capacity).
        max_model_len: longest prompt + output accepted (default: the KV
            capacity, a slot's share of it for ``llama.cpp``).
        kind: whose scheduler the model follows, ``vllm`` or ``llama.cpp``.
        ubatch_tokens: ``llama.cpp``'s micro-batch, ``-ub`` (default:
            ``max_num_batched_tokens``; see :mod:`slopolicy.sim.ubatches`).
    """

    profile: EngineProfile
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    long_prefill_token_threshold: int = 0
    block_size: int = 16
    num_blocks: int | None = None
    max_model_len: int | None = None
    kind: EngineKind = "vllm"
    ubatch_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise UsageError(f"kind must be one of {', '.join(ENGINE_KINDS)}, not {self.kind!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            check_int(name, getattr(self, name), 1)
        check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        if self.num_blocks is not None:
            check_int("num_blocks", self.num_blocks, 1)
        if self.max_model_len is not None:
            check_int("max_model_len", self.max_model_len, 2)
        if self.ubatch_tokens is not None:
            check_int("ubatch_tokens", self.ubatch_tokens, 1)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise UsageError("max_num_batched_tokens must be >= max_num_seqs (as vLLM requires)")
        if self.max_model_len is not None and self.max_model_len > self.blocks * self.block_size:
            raise UsageError("max_model_len must fit in the KV cache")
        if self.kind == "llama.cpp":
            if self.long_prefill_token_threshold:
                raise UsageError("llama.cpp has no long_prefill_token_threshold")
            if self.max_num_seqs * -(-self.model_len // self.block_size) > self.blocks:
                raise UsageError("a llama.cpp engine's KV cache must hold every slot's context")

    @property
    def blocks(self) -> int:
        """KV blocks in the cache."""
        if self.num_blocks is not None:
            return self.num_blocks
        return max(1, self.profile.kv_tokens // self.block_size)

    @property
    def ubatch(self) -> int:
        """Tokens in one micro-batch (``ubatch_tokens``, else the step's budget)."""
        return self.ubatch_tokens or self.max_num_batched_tokens

    @property
    def model_len(self) -> int:
        """Longest prompt + output the engine accepts, in tokens."""
        if self.max_model_len:
            return self.max_model_len
        if self.kind == "llama.cpp":
            return self.blocks // self.max_num_seqs * self.block_size
        return self.blocks * self.block_size


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one iteration (or run of decode iterations) produced, at ``end`` seconds.

    ``finished`` pairs each finished request with its output tokens;
    ``preempted`` lists requests preempted by recompute at its start;
    ``admitted`` counts the requests it started from the waiting queue.
    """

    end: float
    iterations: int
    first_tokens: tuple[str, ...]
    finished: tuple[tuple[str, int], ...]
    preempted: tuple[str, ...]
    admitted: int = 0


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """Counters since the engine was made: time in seconds, work in tokens."""

    iterations: int
    busy_s: float
    prefill_tokens: int
    decode_tokens: int
    preemptions: int
    running: int
    waiting: int
    kv_usage: float


def check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an int >= {minimum}, got {value!r}")
