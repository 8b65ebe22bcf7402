"""Compare a scheduler of your own with ours and the baselines in the simulator.

``Shortest`` holds requests in the gateway and starts the shortest prompts
first while the engine has a free seat and KV for them: ``engine.claim``
counts each release of the same dispatch, so it never releases more than the
engine can start. Run: ``python examples/own_scheduler.py``; from the command
line the same comparison is
``slopolicy simulate seed --compare fcfs,vtc,examples.own_scheduler:Shortest``.
"""

from __future__ import annotations

from slopolicy.sim import (
    FCFS,
    EngineView,
    Release,
    Released,
    SimAdmission,
    SimRequest,
    run_scenario,
    seed_scenario,
)


class Shortest(FCFS):
    """Shortest prompt first, held until the engine can start it."""

    name = "shortest"

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[SimRequest] = []

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        self.queue.append(request)
        return SimAdmission(True)

    def dispatch(self, now: float, engine: EngineView) -> Released:
        self.queue.sort(key=lambda r: r.prompt_tokens)
        started = []
        while self.queue and engine.claim(self.queue[0].prompt_tokens):
            request = self.queue.pop(0)
            started.append(Release(request.id, request.max_new_tokens))
        return Released(tuple(started))


def main() -> None:
    # Names, import paths or objects; compare() takes the same with a workload.
    policies = ("slopolicy", "fcfs", "vtc", Shortest())
    comparison = run_scenario(seed_scenario(short=True), policies=policies)
    for name, report in comparison.reports.items():
        chat = report.lanes["interactive"].attainment or 0.0
        print(f"{name:<10} goodput {report.goodput_rps:5.2f}/s  chat attainment {chat:.1%}")


if __name__ == "__main__":
    main()
