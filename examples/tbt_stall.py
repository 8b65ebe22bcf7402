"""Time between tokens (TBT): a stall that mean TPOT hides.

Run it: ``python examples/tbt_stall.py``. Two answers of 100 tokens stream at
20 ms a token; in one, a long prompt's prefill lands in the engine's batch
mid-stream and its next token comes 1.5 s late. Its TPOT, 35 ms, is well
within a 50 ms target, and so is the lane's p99 gap (one gap in 198); the
stall counter shows it, and with ``tbt_p99_s`` set the stalled answer misses
its SLO: its own p99 gap (of 99) is the 1.5 s one.
"""

from __future__ import annotations

from slopolicy import Policy, PolicyConfig, Request

CONFIG = PolicyConfig.from_dict(
    {"lanes": [{"name": "chat", "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05, "tbt_p99_s": 0.2}}]}
)


def stream(policy: Policy, name: str, start: float, stall_at: int | None) -> None:
    """Run ``name`` from ``start`` (seconds): first token after 0.3 s, then one
    token every 20 ms, the one at ``stall_at`` 1.5 s late."""
    policy.submit(Request(id=name, tenant="acme", prompt_tokens=200), now=start)
    (started,) = policy.dispatch(now=start)
    now = start + 0.3
    for token in range(100):
        if token:
            now += 0.02 + (1.5 if token == stall_at else 0.0)
        policy.tokens(started.id, 1, now=now)  # one chunk: here, one token
    finished = policy.finish(started.id, now=now)
    assert finished.tpot is not None
    print(f"{name}: TPOT {finished.tpot * 1000:.0f} ms, {finished.slow_gaps} gap(s) over 200 ms")


def main() -> None:
    policy = Policy(CONFIG)
    stream(policy, "smooth", 0.0, stall_at=None)
    stream(policy, "stalled", 5.0, stall_at=50)
    snapshot = policy.slo_trackers.lane("chat").snapshot(now=10.0)
    assert snapshot.tbt is not None
    print(f"attained {snapshot.attained} of {snapshot.completed}")
    print(f"TBT p99 {snapshot.tbt.p99 * 1000:.0f} ms, max {snapshot.tbt.max:.2f} s")
    print(f"stalls (gaps >= {CONFIG.lanes[0].slo.tbt_p99_s} s): {snapshot.tbt_stalls}")
    assert snapshot.attained == 1  # TPOT alone would have passed both
    assert snapshot.tbt_stalls == 1


if __name__ == "__main__":
    main()
