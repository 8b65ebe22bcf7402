"""What a policy still holds after every request has ended: nothing, if all is well."""

from __future__ import annotations

from slopolicy.core.policy import Policy

__all__ = ("assert_no_leaks", "leaks")


def leaks(policy: Policy) -> list[str]:
    """Everything ``policy`` still holds: queued or running requests, KV
    blocks, quota leases. Empty when every slot, block and lease is back."""
    stats = policy.statistics()
    found = []
    queued = {lane: n for lane, n in stats.queued.items() if n}
    if queued:
        found.append(f"requests still queued: {queued}")
    if stats.running:
        found.append(f"{stats.running} requests still running")
    if stats.kv.used_blocks or stats.kv.reservations:
        found.append(
            f"{stats.kv.used_blocks} KV blocks held by {stats.kv.reservations} reservations"
        )
    if stats.quotas.in_flight:
        found.append(f"{stats.quotas.in_flight} quota leases still in flight")
    return found


def assert_no_leaks(policy: Policy) -> None:
    """Raise ``AssertionError`` listing :func:`leaks`, if there are any."""
    found = leaks(policy)
    assert not found, "the policy leaked: " + "; ".join(found)
