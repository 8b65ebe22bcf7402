"""The ``slopolicy`` command: validate and explain policies, export the schema, try a
route, and compare policies in the simulator (``demo``, ``simulate``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slopolicy.config import PolicyConfig
from slopolicy.config.describe import describe
from slopolicy.core.request import Request
from slopolicy.errors import InvalidRequest, SimulationError, SlopolicyError, UsageError

if TYPE_CHECKING:
    from slopolicy.sim.commands import SimulateOptions

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
    _add_demo(commands)
    _add_simulate(commands)
    _add_replay(commands)
    _add_calibrate(commands)
    return parser


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo", help="the seed incident under ours and every baseline, side by side"
    )
    demo.add_argument("--quick", action="store_true", help="a half-length run")
    demo.add_argument("--json", metavar="OUT", help="write the report as JSON")
    demo.add_argument("--plot", metavar="OUT.png", help="write plots (needs slopolicy[plot])")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument("--engine", help="engine profile or engine file (slopolicy calibrate)")


def _add_simulate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser(
        "simulate",
        help="compare policies on a scenario or a trace",
        description="Run a scenario file, a built-in scenario (seed, azure-2023, "
        "long-prompts) or traces through ours and the baselines on a simulated engine.",
    )
    _add_workload(sim)
    sim.add_argument(
        "--compare",
        help="policies to run besides ours, comma-separated: built-in baselines (default: "
        "all of fcfs, priority, vtc, rpm, llm-d, llm-d-slo, dynamo, vllm-queue) or import "
        "paths package.module:Name of your own schedulers ('' for none)",
    )
    sim.add_argument(
        "--sweep",
        action="store_true",
        help="sweep the rate scale: each policy's goodput capacity, the limit, attainment by rate",
    )
    sim.add_argument(
        "--sweep-target", type=float, default=0.9, help="attainment the capacity keeps"
    )
    sim.add_argument("--sweep-refine", type=int, default=3, help="bisections near each knee")
    run = sim.add_argument_group("engine model")
    run.add_argument(
        "--engine", help="engine profile (e.g. llama3-8b/a100) or engine file (slopolicy calibrate)"
    )
    run.add_argument("--max-num-seqs", type=int)
    run.add_argument("--max-num-batched-tokens", type=int)
    run.add_argument("--long-prefill-token-threshold", type=int)
    run.add_argument("--rpm-limit", type=int, help="the rpm baseline's limit per tenant")


def _add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    replay = commands.add_parser(
        "replay",
        help="play a scenario or a trace live against an OpenAI-compatible engine",
        description="Play a scenario or traces (read as simulate reads them) in real time "
        "against --target, directly (fcfs) and through a Gate with the policy (slopolicy), "
        "reported in simulate's tables and JSON.",
    )
    replay.add_argument("--target", required=True, metavar="URL", help="the engine, e.g. "
                        "http://127.0.0.1:8080 (its OpenAI API under /v1)")  # fmt: skip
    _add_workload(replay)
    live = replay.add_argument_group("live")
    live.add_argument(
        "--lanes", default="fcfs,slopolicy", help="lanes to run: fcfs (direct), slopolicy (gated)"
    )
    live.add_argument("--max-concurrency", type=int, default=256, help="requests open at once")
    live.add_argument("--drain", type=float, default=600.0, help="seconds to finish after the end")
    live.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "-"))


def _add_calibrate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cal = commands.add_parser(
        "calibrate",
        help="probe an engine and fit the simulator's engine profile to it",
        description="Probe prefill at several prompt lengths and decode at several batch "
        "sizes on an idle engine, read its KV capacity, fit the simulator's profile and "
        "write an engine file that simulate and demo take with --engine.",
    )
    cal.add_argument("--target", required=True, metavar="URL", help="the engine's base URL")
    cal.add_argument("--out", "-o", default="engine.yaml", help="engine file (.yaml or .json)")
    cal.add_argument("--prompts", default="64,256,1024,2048,4096,8192", help="prefill lengths")
    cal.add_argument("--batches", default="1,2,4,8", help="decode batch sizes")
    cal.add_argument(
        "--repeats", type=int, default=5,
        help="rounds, each of every probe once (each term's spread over them is printed)",
    )  # fmt: skip
    cal.add_argument("--decode-tokens", type=int, default=64, help="tokens per decode probe")
    cal.add_argument(
        "--max-num-batched-tokens", type=int, default=2048,
        help="the tokens one engine step computes (llama.cpp -b, vLLM's own name)",
    )  # fmt: skip
    cal.add_argument(
        "--ubatch", type=int, default=None,
        help="llama.cpp's micro-batch, -ub (default: --max-num-batched-tokens)",
    )  # fmt: skip
    cal.add_argument("--name", help="the profile's name (default: engine:model)")
    cal.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "-"))


def _add_workload(sim: argparse.ArgumentParser) -> None:
    """The workload and report options simulate and replay share."""
    sim.add_argument("scenario", nargs="?", help="scenario file or built-in scenario name")
    sim.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="FILE",
        help="CSV/JSONL trace (repeatable), or azure-2023 for the bundled Azure traces",
    )
    sim.add_argument("--policy", metavar="POLICY.yaml", help="our policy file")
    sim.add_argument("--json", metavar="OUT", help="write the report as JSON")
    sim.add_argument("--plot", metavar="OUT.png", help="write plots (needs slopolicy[plot])")
    sim.add_argument("--claims", choices=["seed", "overload"], help="check a set of claims")
    sim.add_argument("--no-progress", action="store_true", help="no progress bar")
    traces = sim.add_argument_group("traces")
    traces.add_argument("--time-col", help="arrival time column")
    traces.add_argument("--input-col", help="prompt tokens column")
    traces.add_argument("--output-col", help="output tokens column")
    traces.add_argument("--tenant-col", help="tenant column")
    traces.add_argument("--lane-col", help="lane hint column")
    traces.add_argument("--time-unit", choices=["s", "ms", "datetime"], default="s")
    traces.add_argument("--tenant", help="tenant for traces without a tenant column")
    traces.add_argument("--lane", help="lane hint for traces without a lane column")
    traces.add_argument("--max-new-tokens", type=int, default=1024, help="output limit floor")
    traces.add_argument("--retries", type=int, default=0, help="client retries after 429/503")
    run = sim.add_argument_group("run")
    run.add_argument("--rate-scale", type=float, default=1.0, help="compress time by X")
    run.add_argument("--duration", type=float, help="replay only the first S seconds")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 0 ok, 1 invalid input
    (one line on stderr, never a traceback), 2 bad arguments, 130 interrupted,
    141 when whoever reads the output stopped early (``slopolicy ... | head``)."""
    args = _parser().parse_args(argv)
    try:
        status = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        _silence_stdout()
        return 141
    # ImportError: an optional extra is missing; the message names it.
    except (SlopolicyError, ImportError) as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


def _run(args: argparse.Namespace) -> int:
    if args.command == "validate":
        config = PolicyConfig.from_file(args.file)
        print(f"{args.file}: valid\n")
        print(describe(config))
    elif args.command == "schema":
        print(json.dumps(PolicyConfig.model_json_schema(), indent=2))
    elif args.command == "demo":
        from slopolicy.sim.commands import demo

        return demo(
            quick=args.quick,
            json_path=args.json,
            plot_path=args.plot,
            progress=not args.no_progress,
            engine=args.engine,
        )
    elif args.command == "simulate":
        from slopolicy.sim.commands import simulate

        return simulate(_simulate_options(args))
    elif args.command == "replay":
        return _replay(args)
    elif args.command == "calibrate":
        return _calibrate(args)
    else:
        return _route(args)
    return 0


def _silence_stdout() -> None:
    # Python's advice for SIGPIPE (the signal module's docs): point stdout at
    # devnull, so the interpreter's last flush does not fail a second time.
    with contextlib.suppress(OSError, ValueError):  # stdout is no file (captured, replaced)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _simulate_options(args: argparse.Namespace) -> SimulateOptions:
    """The workload options of ``simulate`` and ``replay``, checked."""
    from slopolicy.sim.baselines import BASELINES
    from slopolicy.sim.commands import SimulateOptions, TraceOptions

    for name in ("max_new_tokens", "retries", "rpm_limit", "max_num_seqs"):
        value = getattr(args, name, None)
        if value is not None and value < (0 if name == "retries" else 1):
            raise SimulationError(
                f"must be >= {0 if name == 'retries' else 1}", source=f"--{name.replace('_', '-')}"
            )
    if not (math.isfinite(args.rate_scale) and args.rate_scale > 0):
        raise SimulationError("must be a finite number > 0", source="--rate-scale")
    if args.duration is not None and not args.duration > 0:
        raise SimulationError("must be > 0 seconds", source="--duration")
    trace = TraceOptions(
        args.time_col,
        args.input_col,
        args.output_col,
        args.tenant_col,
        args.lane_col,
        args.time_unit,
        args.tenant,
        args.lane,
        args.max_new_tokens,
        args.retries,
    )
    return SimulateOptions(
        scenario=args.scenario,
        traces=tuple(args.trace),
        trace=trace,
        policy=args.policy,
        compare=BASELINES
        if getattr(args, "compare", None) is None
        else tuple(name.strip() for name in args.compare.split(",") if name.strip()),
        rate_scale=args.rate_scale,
        duration=args.duration,
        engine=getattr(args, "engine", None),
        max_num_seqs=getattr(args, "max_num_seqs", None),
        max_num_batched_tokens=getattr(args, "max_num_batched_tokens", None),
        long_prefill_token_threshold=getattr(args, "long_prefill_token_threshold", None),
        rpm_limit=getattr(args, "rpm_limit", None),
        claims=args.claims,
        json_path=args.json,
        plot_path=args.plot,
        progress=not args.no_progress,
        sweep=getattr(args, "sweep", False),
        sweep_target=getattr(args, "sweep_target", 0.9),
        sweep_refine=getattr(args, "sweep_refine", 3),
    )


def _replay(args: argparse.Namespace) -> int:
    from slopolicy.replay.commands import ReplayOptions, replay

    if args.max_concurrency < 1:
        raise UsageError("--max-concurrency must be >= 1")
    if not (math.isfinite(args.drain) and args.drain >= 0):
        raise UsageError("--drain must be a finite number of seconds >= 0")
    lanes = tuple(name.strip() for name in args.lanes.split(",") if name.strip())
    options = ReplayOptions(
        args.target, _simulate_options(args), lanes, args.max_concurrency, args.drain, args.api_key
    )
    return replay(options)


def _counts(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"{option}: give whole numbers separated by commas, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise UsageError(f"{option}: give numbers >= 1, got {text!r}")
    return values


def _calibrate(args: argparse.Namespace) -> int:
    from slopolicy.replay.commands import CalibrateOptions, calibrate_command

    for name in ("repeats", "max_num_batched_tokens", "ubatch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    if args.decode_tokens < 2:
        raise UsageError("--decode-tokens must be >= 2")
    options = CalibrateOptions(
        args.target,
        args.out,
        _counts(args.prompts, "--prompts"),
        _counts(args.batches, "--batches"),
        args.repeats,
        args.decode_tokens,
        args.max_num_batched_tokens,
        args.name,
        args.api_key,
        args.ubatch,
    )
    return calibrate_command(options)


def _route(args: argparse.Namespace) -> int:
    config = PolicyConfig.from_file(args.file) if args.file else PolicyConfig()
    prompt = None if args.prompt_file is None else _read_prompt(args.prompt_file)
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


def _read_prompt(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError as error:
        raise UsageError(f"--prompt-file {path}: not UTF-8 text ({error.reason})") from error
    except OSError as error:  # missing, a directory, unreadable
        raise UsageError(f"--prompt-file {path}: {error.strerror or error}") from error


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
