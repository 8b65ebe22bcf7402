"""Tune a policy on your own traffic: replay a recorded trace under a few
candidate policies in the simulator and keep the one that holds the chat SLO
with the most goodput.

``data/traffic.csv`` stands in for your own log: one row per request with a
millisecond timestamp, the customer, the endpoint it called and the prompt and
completion token counts (ten minutes of the Azure 2023 traces; see
``data/README.md``). Run it: ``python examples/tune_on_trace.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slopolicy import PolicyConfig
from slopolicy.sim import EngineSpec, TraceFormat, evaluate, make_scheduler, profile, read_trace

HERE = Path(__file__).parent
# Your columns, named once; lanes come from the endpoint the client called.
FORMAT = TraceFormat(
    time="ts_ms",
    input="prompt",
    output="completion",
    tenant="customer",
    lane="endpoint",
    time_unit="ms",
)
ENGINE = EngineSpec(profile("llama3-8b/h100"), max_num_seqs=128)
RATE_SCALE = 2.5  # replay 2.5x faster: the traffic you expect next quarter
CHAT_ATTAINMENT_GOAL = 0.95

# Each candidate: a lane's name (or a section of the file, such as ``ladder``)
# -> the fields it changes in the starting policy.
CANDIDATES: Mapping[str, Mapping[str, Mapping[str, Any]]] = {
    "as configured": {},
    "chat weight 4": {"chat": {"weight": 4}},
    "chat weight 16": {"chat": {"weight": 16}},
    "+ code gives up after 4 s": {"chat": {"weight": 16}, "code": {"max_queue_wait_s": 4}},
    "+ chat gives up after 1 s": {
        "chat": {"weight": 16, "max_queue_wait_s": 1},
        "code": {"max_queue_wait_s": 4},
    },
    "no fallback ladder": {"ladder": {"enabled": False}},
}


def variant(base: PolicyConfig, changes: Mapping[str, Mapping[str, Any]]) -> PolicyConfig:
    """``base`` with some lanes' (or sections') fields replaced, validated like a file."""
    data = base.model_dump(mode="json")
    for lane in data["lanes"]:
        lane.update(changes.get(lane["name"], {}))
    lanes = {lane["name"] for lane in data["lanes"]}
    for section, fields in changes.items():
        if section not in lanes:
            data[section].update(fields)
    return PolicyConfig.from_dict(data)


def main() -> None:
    base = PolicyConfig.from_file(str(HERE / "tune_policy.yaml"))
    workload = read_trace(HERE / "data" / "traffic.csv", FORMAT, rate_scale=RATE_SCALE)
    print(f"{len(workload.requests):,} requests over {workload.duration:.0f} s")
    print(f"{'candidate':<32}{'chat attain':>12}{'chat p99':>10}{'code attain':>12}{'goodput':>9}")
    chosen: tuple[float, str] | None = None
    runs = [("fcfs (no policy)", "fcfs", base), ("static lane priority", "priority", base)]
    runs += [(name, "slopolicy", variant(base, c)) for name, c in CANDIDATES.items()]
    for name, scheduler, config in runs:
        _, report = evaluate(make_scheduler(scheduler, config), workload, ENGINE, config)
        chat, code = report.lanes["chat"], report.lanes["code"]
        chat_attainment = chat.attainment or 0.0
        print(
            f"{name:<32}{chat_attainment:>12.1%}{chat.ttft_p99_s or 0.0:>9.2f}s"
            f"{code.attainment or 0.0:>12.1%}{report.goodput_rps:>9.2f}"
        )
        holds = scheduler == "slopolicy" and chat_attainment >= CHAT_ATTAINMENT_GOAL
        if holds and (chosen is None or report.goodput_rps > chosen[0]):
            chosen = (report.goodput_rps, name)
    if chosen is None:
        print(f"no candidate holds {CHAT_ATTAINMENT_GOAL:.0%} chat attainment: add capacity")
    else:
        print(f"keep: {chosen[1]} ({chosen[0]:.2f} requests/s attain their SLO)")


if __name__ == "__main__":
    main()
