"""The sans-IO Policy: submit, dispatch, stream, finish, with time as ``now``.

Run it: ``python examples/policy_lifecycle.py``.
"""

from __future__ import annotations

from slopolicy import Admit, Policy, PolicyConfig, Request


def main() -> None:
    policy = Policy(PolicyConfig())  # the documented default policy
    t = 0.0
    request = Request(id="r1", tenant="acme", prompt_tokens=1200, max_new_tokens=256)
    decision = policy.submit(request, now=t)
    assert isinstance(decision, Admit)  # accepted: queued in its lane
    for started in policy.dispatch(now=t):  # requests that may start now
        print(started.id, started.lane, started.request.max_new_tokens)
    policy.first_token("r1", now=t + 0.2)
    policy.tokens("r1", 240, now=t + 2.6)  # a chunk may carry several tokens
    done = policy.finish("r1", now=t + 2.6, outcome="completed", output_tokens=240)
    print(f"TTFT {done.ttft:.2f} s, TPOT {done.tpot:.4f} s/token, cost {done.cost:g} units")


if __name__ == "__main__":
    main()
