"""Reclaim: a tenant that filled an idle KV pool gives room back to a tenant
within its share, when that tenant's request would otherwise miss its
first-token target.

Run it: ``python examples/reclaim.py``.
"""

from __future__ import annotations

from slopolicy import Policy, PolicyConfig, Request

CONFIG = PolicyConfig.from_dict(
    {
        "lanes": [
            {
                "name": "chat",
                "max_new_tokens": 56,
                "max_prompt_tokens": 1000,
                "slo": {"ttft_p95_s": 5.0},
            }
        ],
        "kv": {"num_blocks": 100, "block_size": 16},  # 1,600 tokens of KV
        "engine": {"max_running": 50, "share_window_s": 30.0, "reclaim": True},
    }
)


def main() -> None:
    policy = Policy(CONFIG)
    # "batch" fills the idle pool, a start a second: four requests of 20
    # blocks (264-token prompts and 56-token answers), then four of 5, each
    # 40 tokens into its answer.
    for k, prompt in enumerate([264] * 4 + [24] * 4):
        name, now = f"batch-{k}", float(k)
        policy.submit(Request(id=name, tenant="batch", prompt_tokens=prompt), now=now)
        policy.dispatch(now=now)
        policy.first_token(name, now=now)
        policy.tokens(name, 40, now=now)
    # "chat" asks for 20 blocks. Together they ask for more than the engine
    # serves: batch is over its share, chat within it. No answer has ended
    # yet, so none is forecast to free chat's room before its 5 s target:
    # the next dispatch revokes the latest of batch's starts that makes room
    # alone (one request lost for one let in).
    policy.submit(Request(id="chat-0", tenant="chat", prompt_tokens=264), now=9.0)
    result = policy.dispatch(now=11.0)
    for finished in result.revoked:  # the host aborts each on the engine, answers 503
        print(f"revoked {finished.id} ({finished.tenant}) after {finished.e2e:.0f} s")
    for started in result.started:
        print(f"started {started.id} ({started.tenant}), {started.kv_blocks} KV blocks")


if __name__ == "__main__":
    main()
