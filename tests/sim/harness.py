"""Drive an engine (the real one or the reference) over fixed arrivals."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from slopolicy.core.slo.targets import SLOTargets
from slopolicy.sim.engine import Engine
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.gaps import TBTSummary
from slopolicy.sim.interface import Released
from slopolicy.sim.llama_engine import make_engine
from slopolicy.sim.profiles import profile
from slopolicy.sim.view import EngineView
from slopolicy.sim.workload import SimRequest
from tests.sim.reference import Reference, Req
from tests.sim.slot_reference import SlotReference


@dataclass(frozen=True)
class Arrival:
    at: float
    id: str
    prompt: int
    output: int
    priority: int = 0


@dataclass
class Outcome:
    first: float | None = None
    finished: float | None = None
    output: int = 0
    preemptions: int = 0
    gaps: list[float] = field(default_factory=list)  # the reference's, exact
    tbt: TBTSummary | None = None  # the engine's, each request its own group
    slow: int = 0  # the engine's gaps above the request's TBT target


def run_engine(
    spec: EngineSpec,
    arrivals: list[Arrival],
    *,
    priority: bool = False,
    bulk: bool = True,
    targets: Mapping[str, SLOTargets] | None = None,
) -> dict[str, Outcome]:
    """The real engine (of ``spec.kind``); ``bulk=False`` forbids runs of decode iterations;
    ``targets`` by request id (each request is its own group)."""
    engine = make_engine(spec, scheduling="priority" if priority else "fcfs", targets=targets)
    found = {a.id: Outcome() for a in arrivals}
    index, end, now = 0, None, 0.0
    max_used = 0
    while True:
        arrival = arrivals[index].at if index < len(arrivals) else math.inf
        finish = math.inf if end is None else end
        if arrival == finish == math.inf:
            break
        if finish <= arrival:
            now = finish
            result = engine.complete()
            end = None
            for request_id in result.first_tokens:
                found[request_id].first = now
            for request_id, output in result.finished:
                found[request_id].finished, found[request_id].output = now, output
                found[request_id].slow = engine.slow_gaps(request_id)
            for request_id in result.preempted:
                found[request_id].preemptions += 1
        else:
            now = arrival
            while index < len(arrivals) and arrivals[index].at == arrival:
                a = arrivals[index]
                assert engine.add(a.id, a.prompt, a.output, a.priority, group=a.id)
                index += 1
        max_used = max(max_used, engine.used_blocks)
        assert engine.used_blocks <= spec.blocks
        if end is None:
            following = arrivals[index].at if index < len(arrivals) else math.inf
            end = engine.start(now, now if not bulk else following)
    assert engine.idle
    for request_id, summary in engine.tbt().items():
        found[request_id].tbt = summary
    return found


def run_reference(
    spec: EngineSpec, arrivals: list[Arrival], *, priority: bool = False
) -> dict[str, Outcome]:
    ref: Reference | SlotReference = (
        SlotReference(spec, priority) if spec.kind == "llama.cpp" else Reference(spec, priority)
    )
    reqs = {
        a.id: Req(a.id, a.prompt, a.output, a.priority, order)
        for order, a in enumerate(arrivals, 1)
    }
    index, now = 0, 0.0
    while True:
        if not ref.running and not ref.waiting:
            if index == len(arrivals):
                break
            now = max(now, arrivals[index].at)
            while index < len(arrivals) and arrivals[index].at <= now:
                ref.add(reqs[arrivals[index].id])
                index += 1
        end = ref.step(now)
        assert end is not None
        while index < len(arrivals) and arrivals[index].at < end:
            ref.add(reqs[arrivals[index].id])
            index += 1
        now = end
    return {
        rid: Outcome(
            r.first,
            r.finished,
            r.out,
            r.preemptions,
            [b - a for a, b in itertools.pairwise(r.times)],
        )
        for rid, r in reqs.items()
    }


def engine_view(seats: int = 256, blocks: int | None = None) -> tuple[Engine, EngineView]:
    """An empty Llama-3-8B/H100 engine with ``seats`` and ``blocks``, and its view."""
    engine = Engine(EngineSpec(profile("llama3-8b/h100"), max_num_seqs=seats, num_blocks=blocks))
    return engine, EngineView(engine)


def sim_request(
    rid: str,
    tenant: str = "t",
    *,
    prompt: int = 100,
    lane: str | None = None,
    arrival: float = 0.0,
) -> SimRequest:
    """A request generating 10 tokens of the 20 it may."""
    return SimRequest(rid, arrival, tenant, prompt, 10, 20, lane)


def started_ids(released: Released) -> list[str]:
    """The ids ``released`` starts, in order."""
    return [r.id for r in released.started]
