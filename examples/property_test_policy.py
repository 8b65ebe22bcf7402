"""Property-test your own policy: hypothesis draws workloads, the simulator
runs them through the very ``Policy`` you deploy, and the test states what
must hold — chat keeps its SLO for the requests it lets in, at the load it is
sized for, and nothing is left holding a slot, a KV block or a quota lease.

Put the test in your own suite (pytest collects it as it is); run this file
to run it once: ``python examples/property_test_policy.py`` (needs
``slopolicy[testing]``).
"""

from __future__ import annotations

from bisect import bisect_right

from hypothesis import HealthCheck, given, settings

from slopolicy import Policy, PolicyConfig
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.core.routing import RouteContext, Verdict
from slopolicy.sim import EngineSpec, PolicyScheduler, Workload, evaluate, profile
from slopolicy.testing import assert_no_leaks
from slopolicy.testing.strategies import workloads

CONFIG = PolicyConfig.from_dict(  # or PolicyConfig.from_file("my_policy.yaml")
    {
        "lanes": [
            {
                "name": "interactive",
                "slo": {"ttft_p95_s": 1.0},
                "max_prompt_tokens": 4096,
                "kv_reserve": 0.2,
                "weight": 8,
            },
            {"name": "batch", "slo": {"e2e_p95_s": 600}},
        ],
        "engine": {"max_running": 256},
    }
)
ENGINE = EngineSpec(profile("llama3-8b/h100"))


def no_huge_outputs(context: RouteContext) -> Verdict | None:
    """A custom rule: long answers go to the batch lane."""
    if context.request.max_new_tokens > 400 and context.lower_lane is not None:
        return Verdict.demote("long answers are batch work")
    return None


def sized_for(workload: Workload, target: float = 1.0) -> bool:
    """Whether no ``target`` seconds of arrivals bring more prompt tokens than
    the engine prefills in a quarter of that time (full iterations of
    ``max_num_batched_tokens``, timed by its cost model): the load chat is
    sized for. A tighter burst can only be late under any order, since the
    engine computes prompts in arrival order."""
    chunk = ENGINE.max_num_batched_tokens
    per_second = chunk / ENGINE.profile.iteration_time(chunk, chunk * chunk / 2, 0)
    times = [request.arrival for request in workload]
    prompts = [0]
    for request in workload:
        prompts.append(prompts[-1] + request.prompt_tokens)
    most = max(prompts[bisect_right(times, at + target)] - prompts[k] for k, at in enumerate(times))
    return most <= 0.25 * per_second * target


@settings(
    max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(workloads(lanes=["interactive"], max_rate=3.0, max_prompt_tokens=2048, bursts=False))
def test_my_policy_keeps_chat_fast_and_leaks_nothing(workload: Workload) -> None:
    policy = Policy(CONFIG, counter=HeuristicCounter(), rules=[no_huge_outputs])
    scheduler = PolicyScheduler(policy, name="mine")
    _, report = evaluate(scheduler, workload, ENGINE, CONFIG)
    chat = report.lanes.get("interactive")
    # Requests refused by the tenant's quota never ran: judge what was let in.
    admitted = 0 if chat is None else chat.offered - chat.rejected
    if chat is not None and admitted >= 20 and sized_for(workload):
        assert chat.attained >= 0.9 * admitted, f"{chat.attained} of {admitted} attained"
    assert report.unfinished == 0
    assert_no_leaks(policy)


if __name__ == "__main__":
    test_my_policy_keeps_chat_fast_and_leaks_nothing()
    print("the policy held its properties on every drawn workload")
