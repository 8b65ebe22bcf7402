"""A replay's lanes against one target, and their report as a simulator comparison.

:class:`LiveReplay` reads the target's facts, forces every request's output
to its recorded length (its ``max_new_tokens`` becomes the recorded output,
sent with ``ignore_eos``, so the engine generates exactly that), makes the
prompts and runs each lane, each from a fresh server's order of llama.cpp's
slots (:meth:`~slopolicy.replay.target.Target.fresh_slot_order`): ``fcfs``
straight to the engine, ``slopolicy``
through a :class:`~slopolicy.Gate` with the scenario's policy (and the
engine's scraper as its signals, where the target has one: only the signals
the scenario names, ``signals``, as the simulator feeds its policy; by default
not ``decode_tps``, whose drop trigger reads prefill interference as a sick
engine, so a live gate fed it sheds work the simulated one keeps).
:func:`live_comparison` reports them as
:func:`~slopolicy.sim.comparison.compare` reports a simulation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from slopolicy.core.health.signals import EngineSignals
from slopolicy.replay.player import LaneRun, Plan, Tell, play
from slopolicy.replay.prompts import PromptFit, build_prompts
from slopolicy.replay.senders import direct_sender, gated_sender
from slopolicy.replay.target import EngineFacts, Target
from slopolicy.runtime.gate import SignalSource
from slopolicy.sim.comparison import Comparison, check_workload, classify, lane_targets
from slopolicy.sim.engine_spec import EngineSpec, EngineStatistics
from slopolicy.sim.profiles import EngineProfile
from slopolicy.sim.reports import report
from slopolicy.sim.scenario import Scenario
from slopolicy.sim.simulator import SimulationResult
from slopolicy.sim.workload import Workload

__all__ = ("LiveReplay", "forced_lengths", "live_comparison", "only", "replay_lanes")


def forced_lengths(workload: Workload) -> Workload:
    """``workload`` with each request's ``max_new_tokens`` the output it
    would generate (``min(output_tokens, max_new_tokens)``): what a replay
    sends, and what a simulation it is compared with should run."""
    requests = tuple(
        dataclasses.replace(r, max_new_tokens=min(r.output_tokens, r.max_new_tokens))
        for r in workload
    )
    return dataclasses.replace(workload, requests=requests)


class LiveReplay:
    """One scenario against one target (open the target first).

    Args:
        target: the engine.
        scenario: the workload and policy (its engine model is not used).
        max_concurrency: requests open at once per lane.
        drain: seconds after the workload's end before open requests stop.
        seed: seeds the prompts' words.
    """

    def __init__(
        self,
        target: Target,
        scenario: Scenario,
        *,
        max_concurrency: int = 256,
        drain: float = 600.0,
        seed: int = 0,
    ) -> None:
        self.target = target
        self.scenario = dataclasses.replace(scenario, workload=forced_lengths(scenario.workload))
        self.max_concurrency = max_concurrency
        self.drain = drain
        self.seed = seed
        self.facts: EngineFacts | None = None
        self.offset = 0

    @property
    def known(self) -> EngineFacts:
        if self.facts is None:
            raise RuntimeError("prepare the replay first")
        return self.facts

    async def prepare(self) -> Plan:
        """Read the target, make the prompts; the plan every lane plays."""
        workload, config = self.scenario.workload, self.scenario.policy
        check_workload(workload, config)
        lanes = classify(workload, config)
        self.facts = facts = await self.target.facts()
        count = self.target.count if facts.tokenizes else None
        if count is not None:
            self.offset = await self.target.prompt_offset(facts)
        prompts = await build_prompts(workload, count, offset=self.offset, seed=self.seed)
        return Plan(
            workload,
            lanes,
            prompts,
            max_concurrency=self.max_concurrency,
            drain=self.drain,
            client=self.scenario.client,
        )

    async def run(self, name: str, plan: Plan, *, stop: anyio.Event, tell: Tell | None) -> LaneRun:
        """Play lane ``name``: ``fcfs``, or ``slopolicy`` (through the gate)."""
        facts = self.known
        extra = facts.extra_body()
        await self.target.fresh_slot_order(facts)
        async with self.target.openai_client(timeout=max(60.0, self.drain)) as client:
            if name == "fcfs":
                send = direct_sender(client, facts.model, extra)
                return await play(name, plan, send, stop=stop, tell=tell)
            from slopolicy import Gate, Policy
            from slopolicy.adapters.openai import GatedOpenAI

            policy = Policy(self.scenario.policy)
            async with _signals(facts, self.target.url) as scraper:
                signals = None if scraper is None else only(scraper, self.scenario.signals)
                async with Gate(policy, signals=signals) as gate:
                    send = gated_sender(GatedOpenAI(client, gate), facts.model, extra)
                    return await play(name, plan, send, stop=stop, tell=tell)

    def engine(self) -> EngineSpec:
        """The target as the report names it (its cost terms are not measured here)."""
        facts = self.known
        slots = facts.slots or self.max_concurrency
        kv = facts.kv_tokens or max(slots, facts.slot_context or 1) * (facts.slot_context or 1)
        name = f"{facts.kind} at {self.target.url}"
        profile = EngineProfile(name, t_w=0.0, a=0.0, beta_d=0.0, beta_p=0.0, kv_tokens=kv)
        length = min(facts.slot_context, kv) if facts.slot_context else None
        return EngineSpec(
            profile, max_num_seqs=slots, max_num_batched_tokens=max(8192, slots),
            max_model_len=length if length and length >= 2 else None,
        )  # fmt: skip

    def describe(self) -> str:
        """One line on the target and how prompts are counted."""
        facts = self.known
        counted = (
            f"prompts counted by its /tokenize (+{self.offset} a request)"
            if facts.tokenizes
            else "no /tokenize: prompts made one word a token"
        )
        shape = f"{facts.slots} slots of {facts.slot_context} tokens" if facts.slots else (
            f"KV {facts.kv_tokens} tokens" if facts.kv_tokens else "no KV facts"
        )  # fmt: skip
        return f"target {self.target.url}: {facts.kind}, model {facts.model}, {shape}; {counted}"

    def fit(self, runs: Mapping[str, LaneRun]) -> PromptFit:
        """How close the prompts landed, as the engine counted them (every lane)."""
        recorded = {r.id: r.prompt_tokens for r in self.scenario.workload}
        sent = {
            f"{name}/{key}": value
            for name, run in runs.items()
            for key, value in run.prompt_tokens.items()
        }
        wanted = {
            f"{name}/{key}": recorded[key]
            for name, run in runs.items()
            for key in run.prompt_tokens
        }
        return PromptFit.of(wanted, sent)

    def to_json(self, runs: Mapping[str, LaneRun]) -> dict[str, Any]:
        """The replay's own facts, beside the simulator's report schema."""
        facts, fit = self.known, self.fit(runs)
        return {
            "target": self.target.url,
            "engine": dataclasses.asdict(facts),
            "prompt_offset": self.offset,
            "prompt_fit": dataclasses.asdict(fit),
            "lanes": {
                name: {
                    "end_s": run.end,
                    "interrupted": run.interrupted,
                    "peak_open": run.peak_open,
                    "client": None if run.client is None else dataclasses.asdict(run.client),
                }
                for name, run in runs.items()
            },
        }


def only(source: SignalSource, names: Collection[str]) -> SignalSource:
    """``source`` with the engine signals not in ``names`` left unknown."""
    keep = frozenset(names)

    async def read() -> EngineSignals | None:
        found = await source()
        if found is None:
            return None
        return EngineSignals(
            observed_at=found.observed_at,
            kv_usage=found.kv_usage if "kv_usage" in keep else None,
            waiting=found.waiting if "waiting" in keep else None,
            running=found.running if "running" in keep else None,
            decode_tps=found.decode_tps if "decode_tps" in keep else None,
            tool_timeout_rate=found.tool_timeout_rate,
            preemption_rate=found.preemption_rate if "preemption_rate" in keep else None,
            kv_capacity_tokens=(found.kv_capacity_tokens if "kv_capacity_tokens" in keep else None),
        )

    return read


@asynccontextmanager
async def _signals(facts: EngineFacts, url: str) -> AsyncIterator[SignalSource | None]:
    """The target's engine scraper, where it has one (llama.cpp, vLLM)."""
    if facts.kind == "llama.cpp":
        from slopolicy.adapters.llamacpp import LlamaCppScraper

        async with LlamaCppScraper(url) as scraper:
            yield scraper
    elif facts.kind == "vllm":
        from slopolicy.adapters.metrics import MetricsScraper

        async with MetricsScraper(f"{url}/metrics", engine="vllm") as scraper:
            yield scraper
    else:
        yield None


async def replay_lanes(
    live: LiveReplay,
    plan: Plan,
    lanes: Sequence[str],
    *,
    stop: anyio.Event,
    progress: Callable[[str], Tell] | None = None,
) -> dict[str, LaneRun]:
    """Play each of ``lanes`` in turn, until ``stop`` is set."""
    runs: dict[str, LaneRun] = {}
    for name in lanes:
        if stop.is_set():
            break
        runs[name] = await live.run(
            name, plan, stop=stop, tell=progress(name) if progress else None
        )
    return runs


def live_comparison(live: LiveReplay, runs: Mapping[str, LaneRun]) -> Comparison:
    """The lanes' records reported as the simulator reports its runs."""
    workload, config = live.scenario.workload, live.scenario.policy
    targets = lane_targets(config)
    idle = EngineStatistics(0, 0.0, 0, 0, 0, 0, 0, 0.0)
    results = {
        name: SimulationResult(name, run.records, workload.duration, run.end, idle)
        for name, run in runs.items()
    }
    reports = {
        name: report(name, run.records, targets, duration=workload.duration, end=run.end)
        for name, run in runs.items()
    }
    return Comparison(workload, live.engine(), config, results, reports)
