"""A policy explained in plain sentences, for ``slopolicy validate``."""

from __future__ import annotations

from slopolicy.config.lanes import LaneConfig, LaneSLO, LaneTaskSLO
from slopolicy.config.policy import PolicyConfig
from slopolicy.config.tenants import TierConfig
from slopolicy.config.tools import ToolConfig
from slopolicy.core.tools.limits import ANY_TOOL

__all__ = ("describe",)


def describe(config: PolicyConfig) -> str:
    """What ``config`` does, section by section."""
    sections = [
        _lanes(config),
        _tiers(config),
        _cost(config),
        _kv(config),
        _engine(config),
        _ladder(config),
        _tools(config),
    ]
    return "\n\n".join(sections)


def _number(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else f"{value:,g}"


def _seconds(value: float) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _slo(slo: LaneSLO) -> str:
    parts = []
    if slo.ttft_p95_s is not None:
        parts.append(f"TTFT p95 {_seconds(slo.ttft_p95_s)}")
    if slo.ttft_p99_s is not None:
        parts.append(f"TTFT p99 {_seconds(slo.ttft_p99_s)}")
    if slo.tpot_p95_s is not None:
        parts.append(f"TPOT p95 {_seconds(slo.tpot_p95_s)}")
    if slo.e2e_p95_s is not None:
        parts.append(f"end-to-end p95 {_seconds(slo.e2e_p95_s)}")
    if slo.tbt_p99_s is not None:
        parts.append(f"TBT p99 {_seconds(slo.tbt_p99_s)}")
    parts.append(f"success {slo.success_rate:.2%}")
    return ", ".join(parts)


def _budget(lane: LaneConfig, lower: str | None) -> str:
    if lane.max_prompt_tokens is None:
        return "no prompt budget"
    over = f"prompts over {lane.max_prompt_tokens:,} tokens"
    if lane.over_budget == "demote":
        return f"{over} move to {lower!r}" if lower else f"{over} are rejected (no lower lane)"
    if lane.over_budget == "defer":
        return f"{over} are deferred (503, Retry-After {_seconds(lane.defer_retry_after_s)})"
    return f"{over} are rejected (413)"


def _lanes(config: PolicyConfig) -> str:
    lanes = config.lanes
    total_weight = sum(lane.weight for lane in lanes)
    capacity = config.kv.capacity_tokens
    width = max(len(lane.name) for lane in lanes) + 2
    lines = ["Lanes, most interactive first:"]
    for index, lane in enumerate(lanes):
        lower = lanes[index + 1].name if index + 1 < len(lanes) else None
        pad = " " * (width + 2)
        lines.append(f"  {lane.name:<{width}}{_slo(lane.slo)}")
        cap = "no cap" if lane.max_new_tokens is None else f"<= {lane.max_new_tokens:,}"
        lines.append(f"{pad}max_new_tokens {cap}; {_budget(lane, lower)}")
        if lane.max_cost is not None and lower is not None:
            lines.append(
                f"{pad}requests costing over {_number(lane.max_cost)} units move to {lower!r}"
            )
        share = lane.weight / total_weight
        reserve = (
            f"; KV reserve {lane.kv_reserve:.0%} ({int(lane.kv_reserve * capacity):,} tokens)"
            if lane.kv_reserve
            else ""
        )
        if lane.seat_reserve:
            reserve += f"; {lane.seat_reserve:,} engine seats reserved"
        lines.append(
            f"{pad}queue {lane.queue_capacity:,}, max wait {_seconds(lane.max_queue_wait_s)}, "
            f"weight {lane.weight:g} ({share:.0%} of dispatch under contention){reserve}"
        )
        if lane.queue_order == "shortest":
            slack = lane._slack(config.cost.alpha)
            within = (
                "the tenants level with the least served"
                if not slack
                else f"the tenants within {_number(slack)} cost units per unit weight "
                "of the least served"
            )
            lines.append(f"{pad}waiting requests go shortest prompt first, across {within}")
        else:
            lines.append(f"{pad}waiting requests go in arrival order")
        if lane.task is not None:
            lines.append(f"{pad}agent tasks: {_task(lane.task)}")
    return "\n".join(lines)


def _task(task: LaneTaskSLO) -> str:
    within = (
        ""
        if task.deadline_s is None
        else f", the last within {_seconds(task.deadline_s)} of the first"
    )
    parts = [
        f"every turn must succeed{within}",
        f"abandoned after {_seconds(task.idle_timeout_s)} without a turn",
    ]
    if task.max_tasks is not None:
        parts.append(f"at most {task.max_tasks:,} under way (new ones deferred)")
    if task.hold_new_tasks:
        parts.append("new tasks held while turns of running ones wait")
    return "; ".join(parts)


def _tier_line(name: str, tier: TierConfig, config: PolicyConfig) -> str:
    parts = []
    if tier.rate is not None and tier.burst is not None:
        parts.append(f"{_number(tier.rate)} cost units/s, burst {_number(tier.burst)}")
    else:
        parts.append("no rate limit")
    if tier.max_concurrency is not None:
        parts.append(f"{tier.max_concurrency} in flight")
    if tier.max_prompt_tokens is not None:
        parts.append(f"prompts <= {tier.max_prompt_tokens:,} tokens")
    parts.append(f"fair-share weight {tier.weight:g}")
    lanes = "all lanes" if tier.allowed_lanes is None else "lanes " + ", ".join(tier.allowed_lanes)
    parts.append(f"{lanes}, starting in {tier.default_lane or config.lanes[0].name!r}")
    for lane, quota in tier.lanes.items():
        cap = f", {quota.max_concurrency} in flight" if quota.max_concurrency else ""
        parts.append(f"{lane}: {quota.share:.0%} of the quota{cap}")
    default = " (default)" if name == config.default_tier else ""
    return f"  {name}{default}: " + "; ".join(parts)


def _tiers(config: PolicyConfig) -> str:
    lines = ["Tenant tiers:"]
    lines.extend(_tier_line(name, tier, config) for name, tier in config.tiers.items())
    mapped = len(config.tenants)
    lines.append(
        f"  {mapped} tenant{'s' if mapped != 1 else ''} mapped to tiers; "
        f"every other tenant gets {config.default_tier!r}"
    )
    return "\n".join(lines)


def _cost(config: PolicyConfig) -> str:
    cost, tokenizer = config.cost, config.tokenizer
    example = cost.alpha * 1000 + cost.beta * 256
    return (
        f"Cost: {cost.alpha:g} unit per prompt token, {cost.beta:g} per output token, "
        f"{_number(cost.gamma)} at tool_risk 1 (a 1,000-token prompt with max_new_tokens 256 "
        f"costs {_number(example)} units).\n"
        f"Tokenizer: {tokenizer.encoding}; exact up to {tokenizer.exact_max_chars:,} characters, "
        f"sampled beyond, in rounds of {tokenizer.sample_windows} windows until within "
        f"{tokenizer.target_rel_error:.1%} (one standard error) or {tokenizer.max_rounds} rounds."
    )


def _kv(config: PolicyConfig) -> str:
    kv = config.kv
    pool = f"{kv.blocks:,} blocks x {kv.block_size} tokens = {kv.capacity_tokens:,} tokens"
    if kv.num_blocks is None:
        return f"KV pool: the engine's, as it reports it ({pool} until it does)."
    return f"KV pool: {pool} (fewer where the engine reports a smaller pool)."


def _engine(config: PolicyConfig) -> str:
    engine = config.engine
    running = f"Engine: at most {engine.max_running:,} requests running at once"
    horizon = config.prefill_horizon()
    if horizon is not None:
        running += f", {_seconds(horizon)} of prompt work handed ahead (at the measured rate)"
    if engine.share_window_s is not None:
        running += (
            f"; under saturation, tenants over their max-min share (over "
            f"{_seconds(engine.share_window_s)}) go after the rest inside a lane's slack"
        )
    pace = engine.build_pace()
    if pace is None:
        return f"{running}; starts not paced."
    return (
        f"{running}; starts paced to {_number(pace.rate)} cost units/s, "
        f"up to {_number(pace.burst)} ahead."
    )


def _ladder(config: PolicyConfig) -> str:
    ladder = config.ladder
    if not ladder.enabled:
        return "Fallback ladder: off."
    watch = ladder.watch_lane or config.lanes[0].name
    triggers = [
        (ladder.ttft_p95_fraction, f"{watch!r} p95 TTFT >= {{:.0%}} of target"),
        (ladder.queue_wait_fraction, f"{watch!r} queue wait >= {{:.0%}} of its TTFT target"),
        (ladder.kv_usage, "KV usage >= {:.0%}"),
        (ladder.decode_tps_drop, "decode tokens/s down {:.0%}"),
        (ladder.tool_timeout_rate, "tool timeouts >= {:.0%}"),
        (ladder.tbt_p99_fraction, f"{watch!r} p99 TBT >= {{:.0%}} of target"),
    ]
    on = [text.format(threshold.enter) for threshold, text in triggers if threshold is not None]
    lines = [
        f"Fallback ladder: climbs one rung per {_seconds(ladder.dwell_s)} of pressure, "
        f"steps down one after {_seconds(ladder.cooldown_s)} calm.",
        "  pressure when " + (", or ".join(on) if on else "never (no trigger set)"),
    ]
    for index, rung in enumerate(ladder.rungs, 1):
        lines.append(f"  {index}. {rung}")
    return "\n".join(lines)


_SIGNALS = {
    "off": "the ladder reads no tool rate",
    "timeouts": "the tool timeout rate feeds the ladder",
    "failures": "the tool failure rate (timeouts and errors) feeds the ladder",
}


def _tool_line(tool: ToolConfig) -> str:
    parts = []
    if tool.max_concurrency is not None:
        parts.append(f"{tool.max_concurrency:,} at once")
    if tool.tenant_max_concurrency is not None:
        parts.append(f"{tool.tenant_max_concurrency:,} at once per tenant")
    if tool.rate is not None and tool.burst is not None:
        parts.append(f"{_number(tool.rate)} calls/s (burst {_number(tool.burst)})")
    if tool.tenant_rate is not None and tool.tenant_burst is not None:
        parts.append(
            f"{_number(tool.tenant_rate)} calls/s per tenant (burst {_number(tool.tenant_burst)})"
        )
    if tool.timeout_s is not None:
        parts.append(f"timeout {_seconds(tool.timeout_s)}")
    if tool.max_wait_s is not None:
        parts.append(f"waits at most {_seconds(tool.max_wait_s)}")
    if not parts:
        return "no limits"
    return ", ".join(parts) + f"; {tool.max_waiting:,} may wait"


def _tools(config: PolicyConfig) -> str:
    tools = config.tools
    lines = ["Tool calls (gate.tool):"]
    for name, tool in tools.limits.items():
        label = name if name != ANY_TOOL else "every tool" if len(tools.limits) == 1 else "others"
        lines.append(f"  {label}: {_tool_line(tool)}")
    if ANY_TOOL not in tools.limits:
        lines.append("  tools not listed are refused (unknown_tool, 400)")
    if tools.tenant_max_concurrency is not None:
        lines.append(f"  a tenant's calls at once, all tools: {tools.tenant_max_concurrency:,}")
    signal = _SIGNALS[tools.ladder_signal]
    lines.append(
        f"  rates over {_seconds(tools.window_s)} (divided by at least {tools.min_calls:,} calls); "
        f"{signal}; tool_risk 1 at {_seconds(tools.risk_horizon_s)} run per call "
        "(for a tool without timeout_s)"
    )
    return "\n".join(lines)
