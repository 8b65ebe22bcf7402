"""An idle engine is not a slow one: the ladder comes back down while nothing runs.

Found against llama.cpp (``benchmarks/bench_live_seed.py``): the ladder had
climbed to ``pause_background`` during a burst; once chat stopped and the
paused batch lane was all that was left, the engine ran nothing, the decode
drop (per-request speed against the baseline) was unknown, unknown pins the
ladder, and the batch lane stayed paused for good.
"""

from __future__ import annotations

from slopolicy import EngineSignals, Outcome, Policy, PolicyConfig, Request
from slopolicy.core.cost.tokens import HeuristicCounter


def _policy() -> Policy:
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                # No deadline: the slow chats must run for the ladder to read
                # them (with one, once they come late the rest are given up).
                {
                    "name": "interactive",
                    "slo": {"ttft_p95_s": 0.5},
                    "max_prompt_tokens": 1000,
                    "slo_deadline": False,
                },
                {"name": "background", "max_prompt_tokens": 100_000},
            ],
            "ladder": {
                # The TTFT trigger (off by default) makes the slow chats climb.
                "ttft_p95_fraction": {"enter": 0.8, "exit": 0.6},
                "evaluate_every_s": 1.0,
                "dwell_s": 1.0,
                "cooldown_s": 5.0,
                "rungs": ["pause_background", "shed"],
            },
        }
    )
    return Policy(config, counter=HeuristicCounter())


def test_the_ladder_steps_down_while_the_engine_is_idle() -> None:
    policy = _policy()
    now = 0.0
    for step in range(6):  # the decode baseline warms up at 4 running
        policy.observe(EngineSignals(observed_at=now, running=4, decode_tps=400.0), now=now)
        request = Request(id=f"slow{step}", tenant="t", prompt_tokens=50, max_new_tokens=8)
        policy.submit(request, now=now)
        policy.dispatch(now=now)
        policy.first_token(request.id, now=now + 2.0)  # TTFT 2 s, four times the target
        policy.finish(request.id, now=now + 2.5, outcome=Outcome.COMPLETED, output_tokens=8)
        now += 2.5
        policy.evaluate(now=now)
    assert policy.health.paused("background")
    # Chat stops; the engine reports it is running nothing, every second.
    for _ in range(200):
        now += 1.0
        policy.observe(EngineSignals(observed_at=now, running=0, decode_tps=0.0), now=now)
        policy.evaluate(now=now)
    assert not policy.health.paused("background")
    assert policy.statistics().ladder_level == 0
