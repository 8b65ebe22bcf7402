"""Fallback-ladder configuration: triggers with hysteresis, and the rungs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from slopolicy.config._base import ConfigModel, Count, Seconds
from slopolicy.config.lanes import LaneName
from slopolicy.core.ladder.ladder import FallbackLadder
from slopolicy.core.ladder.pressure import default_triggers
from slopolicy.core.ladder.rungs import FAVOR_AFTER, default_rungs
from slopolicy.core.request import Request

__all__ = ("DEFAULT_RUNGS", "RUNGS", "LadderConfig", "RungName", "Threshold")

RungName = Literal[
    "favor_interactive",
    "drop_optional_features",
    "cap_max_new_tokens",
    "compress_prompt",
    "cheaper_model",
    "pause_background",
    "shed",
]
#: The seven rungs, mildest first (the core's ``BUILTIN_RUNGS``): one that only
#: reorders dispatch, then the seed's order.
RUNGS: tuple[RungName, ...] = get_args(RungName)
#: The rungs a default ladder climbs: all but ``cap_max_new_tokens``, which
#: truncates answers (a degraded answer is not an attained one); add it where
#: a short answer is worth more to your users than a late or refused one.
DEFAULT_RUNGS: tuple[RungName, ...] = tuple(r for r in RUNGS if r != "cap_max_new_tokens")


class Threshold(ConfigModel):
    """A trigger with hysteresis: pressure starts at ``enter`` and ends only
    below ``exit`` (``exit < enter``; larger values are worse)."""

    enter: Annotated[float, Field(ge=0)]
    exit: Annotated[float, Field(ge=0)]

    @model_validator(mode="after")
    def _exit_below_enter(self) -> Threshold:
        if self.exit >= self.enter:
            raise ValueError("exit must be below enter")
        return self


class LadderConfig(ConfigModel):
    """When to degrade, and how, before the engine falls over.

    Triggers (any one is pressure; ``None`` leaves one out). The defaults
    read saturation, not symptoms: the watched lane's queue wait (requests
    wait in the policy's queues only while the engine has no room for them)
    and KV use. ``ttft_p95_fraction`` is off by default: TTFT also rises from
    prefill interference at low load, where shedding would refuse work the
    engine has room for (invariant 10).
        ttft_p95_fraction: watched lane's p95 TTFT as a fraction of its target.
        queue_wait_fraction: its p95 queue wait as a fraction of that target.
        kv_usage: engine KV cache usage, 0-1.
        decode_tps_drop: fractional drop of decode tokens/s at similar load.
        tool_timeout_rate: fraction of tool/retriever calls timing out.
        tbt_p99_fraction: watched lane's p99 time between tokens as a fraction
            of its ``tbt_p99_s`` (off by default; reads 0 for a lane without
            that target). Gaps are measured between the host's token reports,
            so it suits hosts that report each chunk as it arrives (the
            simulator reports tokens in bulk: leave it off there).

    The ladder is evaluated every ``evaluate_every_s``; it climbs one rung per
    ``dwell_s`` while pressure holds and steps down one rung after
    ``cooldown_s`` with every trigger below its exit. Engine signals older than
    ``signal_max_age_s`` are stale: unknown, which holds the ladder.

    Attributes:
        watch_lane: lane whose SLO drives the triggers (default: the first lane).
        rungs: rungs in climbing order, at least one (to turn the ladder off,
            set ``enabled: false``).
        interactive_max_new_tokens: the cap ``cap_max_new_tokens`` applies.
        cheaper_model: model ``cheaper_model`` routes ``downgrade_lanes`` to.
        downgrade_lanes: lanes sent to the cheaper model (default: every lane
            below the watched lane).
        pause_lanes: lanes ``pause_background`` holds (default: the lanes
            below the watched one that have no TTFT target, work nobody waits
            on a first token for; a lane with one would only have its requests
            wait out their deadline and expire, where ``shed`` refuses the
            part of each tenant's beyond its share at once).
        shed_retry_after_s: Retry-After given by ``shed``.
        favor_after_fraction: ``favor_interactive`` puts a queued request of
            the watched lane first once it has waited this fraction of its
            TTFT target (0: every one at once). The default, the queue-wait
            trigger's default exit, leaves the requests with most of their
            budget left in the usual order (deadline-first within the lanes'
            shares): the rung takes starts from other lanes only for the
            requests at risk.
    """

    enabled: bool = True
    evaluate_every_s: Seconds = 1.0
    signal_max_age_s: Seconds = 10.0
    dwell_s: Seconds = 10.0
    cooldown_s: Seconds = 30.0
    ttft_p95_fraction: Threshold | None = None
    queue_wait_fraction: Threshold | None = Threshold(enter=0.5, exit=0.25)
    kv_usage: Threshold | None = Threshold(enter=0.92, exit=0.8)
    decode_tps_drop: Threshold | None = Threshold(enter=0.3, exit=0.15)
    tool_timeout_rate: Threshold | None = Threshold(enter=0.05, exit=0.02)
    tbt_p99_fraction: Threshold | None = None
    watch_lane: LaneName | None = None
    rungs: Annotated[list[RungName], Field(min_length=1)] = list(DEFAULT_RUNGS)
    interactive_max_new_tokens: Count = 256
    cheaper_model: Annotated[str, Field(min_length=1)] | None = None
    downgrade_lanes: list[LaneName] | None = None
    pause_lanes: list[LaneName] | None = None
    shed_retry_after_s: Seconds = 5.0
    favor_after_fraction: Annotated[float, Field(ge=0, le=1)] = FAVOR_AFTER

    def build(
        self,
        lanes: Sequence[str],
        compress: Callable[[Request], Request] | None = None,
        *,
        untimed: Collection[str] = (),
    ) -> FallbackLadder | None:
        """The ladder for ``lanes`` (most interactive first), or ``None`` when
        disabled; ``compress`` is the host's prompt-compression hook,
        ``untimed`` the lanes without a TTFT target."""
        if not self.enabled:
            return None
        watch = self.watch_lane or lanes[0]
        below = list(lanes[lanes.index(watch) + 1 :])
        held = [lane for lane in below if lane in untimed]
        rungs = default_rungs(
            interactive_lanes=[watch],
            max_new_tokens=self.interactive_max_new_tokens,
            compress=compress,
            cheaper_model=self.cheaper_model,
            downgrade_lanes=below if self.downgrade_lanes is None else self.downgrade_lanes,
            pause_lanes=held if self.pause_lanes is None else self.pause_lanes,
            shed_retry_after=self.shed_retry_after_s,
            favor_after=self.favor_after_fraction,
            order=self.rungs,
        )
        triggers = default_triggers(
            ttft_p95_fraction=_pair(self.ttft_p95_fraction),
            queue_wait_fraction=_pair(self.queue_wait_fraction),
            kv_usage=_pair(self.kv_usage),
            decode_tps_drop=_pair(self.decode_tps_drop),
            tool_timeout_rate=_pair(self.tool_timeout_rate),
            tbt_p99_fraction=_pair(self.tbt_p99_fraction),
        )
        return FallbackLadder(rungs, triggers, dwell=self.dwell_s, cooldown=self.cooldown_s)

    @model_validator(mode="after")
    def _rungs_unique(self) -> LadderConfig:
        if len(set(self.rungs)) != len(self.rungs):
            raise ValueError("rungs must not repeat")
        return self


def _pair(threshold: Threshold | None) -> tuple[float, float] | None:
    return None if threshold is None else (threshold.enter, threshold.exit)
