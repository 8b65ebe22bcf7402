"""A custom routing rule: free-tier requests lose logprobs, with the reason on record.

Run it: ``python examples/custom_rule.py``.
"""

from __future__ import annotations

from pathlib import Path

from slopolicy import PolicyConfig, Request, Verdict
from slopolicy.core import RouteContext


def no_logprobs_on_free(context: RouteContext) -> Verdict | None:
    """Strip logprobs for the free tier: they cost decode time and bandwidth."""
    if context.tier.name == "free" and context.request.logprobs is not None:
        return Verdict.rewrite(context.request.replace(logprobs=None), "logprobs dropped")
    return None


def main() -> None:
    config = PolicyConfig.from_file(str(Path(__file__).with_name("policy.yaml")))
    router = config.build_router(rules=[no_logprobs_on_free])
    decision = router.route(Request(tenant="somebody", prompt_tokens=300, logprobs=5))
    print(decision.explain())


if __name__ == "__main__":
    main()
