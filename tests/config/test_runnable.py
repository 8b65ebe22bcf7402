"""Every configuration PolicyConfig accepts runs (DESIGN.md invariant 8): it
builds a Policy, a Gate and a description, serves requests in every lane with
time moving on, and drives the simulator; ``slopolicy validate`` answers any
file with a verdict, never a traceback."""

from __future__ import annotations

import io
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slopolicy import ConfigError, Gate, Policy, PolicyConfig, Request
from slopolicy.cli import main
from slopolicy.config.describe import describe
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.sim import EngineSpec, SimRequest, Workload, simulate
from slopolicy.sim.ours import PolicyScheduler
from slopolicy.sim.profiles import PROFILES
from slopolicy.testing.strategies import policy_documents

_ENGINE = EngineSpec(PROFILES["llama3-8b/a100"], max_num_seqs=4, num_blocks=512)


def _serve(config: PolicyConfig) -> None:
    """Requests of up to three tenants in every lane, through to the end, as the
    clock moves past the waits and ladder periods a config sets."""
    policy = Policy(config, counter=HeuristicCounter())
    tenants = [*config.tenants, "stranger"][:3]
    count = 0
    for now in (0.0, 0.5, 3.0, 100.0, 1e4, 1e6):
        for lane in [None, *(lane.name for lane in config.lanes)]:
            for tenant in tenants:
                count += 1
                request = Request(
                    id=f"r{count}", tenant=tenant, prompt_tokens=20, max_new_tokens=8, lane=lane
                )
                policy.submit(request, now=now)
        for started in policy.dispatch(now=now):
            policy.first_token(started.id, now=now)
            policy.tokens(started.id, 3, now=now)
            policy.finish(started.id, now=now, outcome="completed", output_tokens=4)
        policy.evaluate(now=now)
        policy.statistics(now=now)
        policy.diagnose(now=now)
    for request_id in list(policy._entries):
        policy.cancel(request_id, now=1e6)
    stats = policy.statistics()
    assert stats.running == stats.quotas.in_flight == stats.kv.used_blocks == 0


def _simulate(config: PolicyConfig) -> None:
    requests = tuple(
        SimRequest(
            id=f"s{index}",
            arrival=index * 0.5,
            tenant="stranger",
            prompt_tokens=50,
            output_tokens=5,
            max_new_tokens=5,
        )
        for index in range(3)
    )
    simulate(Workload(requests, 2.0), PolicyScheduler(config), _ENGINE, drain=30.0)


def _runs(config: PolicyConfig) -> None:
    assert describe(config)
    Gate(config.to_spec(counter=HeuristicCounter()), telemetry=False)
    _serve(config)
    _simulate(config)


@settings(max_examples=300, deadline=None)
@given(policy_documents())
@example({"ladder": {"rungs": []}})
@example({"kv": {"num_blocks": 10**400}})
@example({"cost": {"alpha": 1e308}})
@example({"lanes": [{"name": "chat", "weight": 5e-324}]})  # a fair-queue counter overflows
@example({"lanes": [{"name": "chat", "slo": {"ttft_p95_s": 5e-324}}]})  # ladder pressure inf
@example({"ladder": {"evaluate_every_s": 5e-324}})  # the simulator never moves on
@example({"engine": {"share_window_s": 5e-324}})  # the share refresh tick underflows
def test_every_accepted_config_runs(document: dict[str, Any]) -> None:
    try:
        config = PolicyConfig.from_dict(document)
    except ConfigError as error:
        assert error.errors  # noqa: PT017 - the property is about accepted configs
        return
    _runs(config)


_HOSTILE_YAML = (
    "a: &a [*a]",  # a list that holds itself
    "lanes: &a [*a]",
    "tenants: &a {x: *a}",
    "? [1]\n: 2",  # an unhashable key
    "!!binary aGVsbG8=",
    "x: !!python/object:os.system ls",
    "version: !!timestamp 2001-12-14",
    "lanes: [{name: chat, weight: 1e400}]",
    "kv: {num_blocks: 1" + "0" * 5000 + "}",  # past Python's int digit limit
    "[" * 5000,
    "{a: " * 2000,
    "\x00\x01",
    "lanes: [{name: chat}]\nlanes: []",
    "max_tenants: 0x1F\nkv: {num_blocks: 1_000}",
    "- just\n- a list",
    "",
)


def _validate(content: str | bytes) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "policy.yaml"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["validate", str(path)])
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        policy_documents().map(lambda document: yaml.safe_dump(document, sort_keys=False)),
        st.sampled_from(_HOSTILE_YAML),
        st.text(max_size=200),
        st.binary(max_size=200),
    )
)
@example("kv: {num_blocks: 1" + "0" * 400 + "}")  # the issue's: a traceback from describe
def test_validate_answers_any_file_with_a_verdict(content: str | bytes) -> None:
    """``slopolicy validate`` (called as the console script calls it) says
    valid and explains, or lists what is wrong; it never raises."""
    code, out, err = _validate(content)
    assert "Traceback" not in out + err
    if code == 0:
        assert ": valid" in out
        assert "Lanes, most interactive first:" in out
    else:
        assert code == 1
        assert err.strip()
