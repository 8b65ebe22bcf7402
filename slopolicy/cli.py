"""The ``slopolicy`` command: validate and explain policies, export the schema, try a route."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from slopolicy.config import PolicyConfig
from slopolicy.config.describe import describe
from slopolicy.core.request import Request
from slopolicy.errors import ConfigError, InvalidRequest

__all__ = ("main",)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slopolicy", description="Serving policy for LLM engines: validate, explain, try."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="check a policy file and explain what it does")
    validate.add_argument("file", help="policy file (.yaml, .yml, .toml or .json)")

    commands.add_parser("schema", help="print the policy JSON Schema")

    route = commands.add_parser("route", help="show how a policy routes one request")
    route.add_argument("file", nargs="?", help="policy file (default: the built-in policy)")
    route.add_argument("--tenant", default="anonymous")
    size = route.add_mutually_exclusive_group(required=True)
    size.add_argument("--prompt-tokens", type=int, help="prompt length in tokens")
    size.add_argument("--prompt-file", help="a file holding the prompt text")
    route.add_argument("--max-new-tokens", type=int, default=256)
    route.add_argument("--lane", help="lane hint")
    route.add_argument("--tier", help="tier to use instead of the tenant's")
    route.add_argument("--tool-risk", type=float, default=0.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 invalid input)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            config = PolicyConfig.from_file(args.file)
            print(f"{args.file}: valid\n")
            print(describe(config))
        elif args.command == "schema":
            print(json.dumps(PolicyConfig.model_json_schema(), indent=2))
        else:
            return _route(args)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


def _route(args: argparse.Namespace) -> int:
    config = PolicyConfig.from_file(args.file) if args.file else PolicyConfig()
    prompt = None
    if args.prompt_file is not None:
        with open(args.prompt_file, encoding="utf-8") as handle:
            prompt = handle.read()
    try:
        request = Request(
            tenant=args.tenant,
            prompt=prompt,
            prompt_tokens=args.prompt_tokens,
            max_new_tokens=args.max_new_tokens,
            lane=args.lane,
            tier=args.tier,
            tool_risk=args.tool_risk,
        )
    except InvalidRequest as error:
        print(f"invalid request: {error}", file=sys.stderr)
        return 1
    decision = config.build_router().route(request)
    print(decision.explain())
    print(f"HTTP {decision.http_status}", end="")
    print(f", Retry-After {decision.retry_after:g} s" if decision.retry_after else "")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
