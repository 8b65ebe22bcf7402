"""The Gate around an engine stream: admit, track, release exactly once.

Run it: ``python examples/quickstart_gate.py``. The engine is slopolicy's
in-process fake; put your own async stream of chunks in its place.
"""

from __future__ import annotations

import anyio

from slopolicy import Gate, PolicyConfig, Rejected, Request
from slopolicy.testing.fake_engine import FakeEngine


async def main() -> None:
    engine = FakeEngine(ttft=0.05, per_token=0.01)  # stands in for your engine
    async with Gate(PolicyConfig()) as gate:
        request = Request(tenant="acme", prompt="Summarise this...", max_new_tokens=64)
        try:
            async with gate.admit(request) as ticket:  # waits its fair turn
                async for _chunk in ticket.track(engine.stream(ticket.request)):
                    pass  # send the chunk to the client here
        except Rejected as error:  # quota, overload, full queue...
            print("refused:", error.code, error.http_status, error.retry_after)
            return
        done = ticket.finished
        assert done is not None
        print(f"{done.outcome.value}: TTFT {done.ttft:.3f} s, {done.output_tokens} tokens")


if __name__ == "__main__":
    anyio.run(main)
