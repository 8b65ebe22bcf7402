from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from slopolicy import PolicyConfig
from slopolicy.errors import UsageError
from slopolicy.sim import (
    FCFS,
    Client,
    EngineSpec,
    EngineView,
    PolicyScheduler,
    Released,
    SimAdmission,
    SimOutcome,
    SimRequest,
    Workload,
    profile,
    simulate,
)
from slopolicy.testing import assert_no_leaks
from slopolicy.testing.strategies import engine_specs, workloads
from tests.sim.harness import engine_view, sim_request

H100 = EngineSpec(profile("llama3-8b/h100"))


class Refusing(FCFS):
    """Refuses every request's first ``times`` attempts as retryable."""

    name = "refusing"

    def __init__(self, times: int, retry_after: float | None = None) -> None:
        super().__init__()
        self.times = times
        self.retry_after = retry_after
        self.seen: dict[str, list[float]] = {}

    def submit(self, request: SimRequest, *, now: float) -> SimAdmission:
        attempts = self.seen.setdefault(request.id, [])
        attempts.append(now)
        if len(attempts) <= self.times:
            return SimAdmission(False, None, "busy", True, self.retry_after)
        return super().submit(request, now=now)


def _one(retries: int = 0, output: int = 5, max_new: int = 100) -> Workload:
    return Workload.of([SimRequest("r", 1.0, "t", 100, output, max_new, retries=retries)])


def test_refused_requests_come_back_as_the_client_retries() -> None:
    scheduler = Refusing(times=2)
    client = Client(backoff=0.5, jitter=0.0)
    result = simulate(_one(retries=3), scheduler, H100, client=client)
    (record,) = result.records
    assert scheduler.seen["r"] == [1.0, 1.5, 2.5]  # 0.5 s, then 1 s
    assert record.attempts == 3
    assert record.outcome is SimOutcome.COMPLETED
    assert record.ttft is not None
    assert record.ttft > 1.5  # counted from the first arrival


def test_retry_after_is_honoured_and_retries_run_out() -> None:
    scheduler = Refusing(times=5, retry_after=7.0)
    result = simulate(_one(retries=2), scheduler, H100)
    (record,) = result.records
    assert scheduler.seen["r"] == [1.0, 8.0, 15.0]
    assert (record.outcome, record.attempts, record.finished_at) == (SimOutcome.REJECTED, 3, 15.0)


def test_the_client_backs_off_with_jitter_from_its_seed() -> None:
    client = Client(backoff=1.0, max_backoff=4.0, jitter=0.25, seed=1)
    assert client.delay(0, None, 0.0) == 1.0
    assert client.delay(5, None, 0.0) == 4.0
    assert client.delay(1, None, 1.0) == pytest.approx(1.5)
    assert client.delay(1, 30.0, 0.5) == 30.0
    assert client.delay(1, 90.0, 0.0) == 2.0  # past max_retry_after: back off instead
    assert client.delay(5000, None, 0.0) == 4.0  # 2.0**5000 is past any float
    with pytest.raises(UsageError):
        Client(jitter=1.0)


def test_outputs_stop_at_max_new_tokens_and_every_time_is_ordered() -> None:
    result = simulate(_one(output=500, max_new=40), FCFS(), H100)
    (record,) = result.records
    assert record.output_tokens == 40
    assert record.max_new_tokens == 40
    assert record.dispatched_at == 1.0
    assert record.first_token_at is not None
    assert record.finished_at is not None
    assert 1.0 < record.first_token_at < record.finished_at
    assert record.tpot == pytest.approx((record.finished_at - record.first_token_at) / 39)


def test_requests_too_long_for_the_engine_are_refused() -> None:
    small = EngineSpec(profile("llama2-7b/a100"), num_blocks=10)
    result = simulate(Workload.of([SimRequest("r", 0.0, "t", 500, 10, 10)]), FCFS(), small)
    assert (result.records[0].outcome, result.records[0].reason) == (
        SimOutcome.REJECTED,
        "too_long",
    )


def test_what_has_not_ended_when_the_drain_runs_out_is_unfinished() -> None:
    workload = Workload.of([SimRequest("r", 0.0, "t", 100, 5000, 5000)])
    result = simulate(workload, FCFS(), H100, drain=1.0)
    assert result.records[0].outcome is SimOutcome.UNFINISHED
    assert result.end <= 1.0


def test_queued_requests_expire_at_their_deadline() -> None:
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "max_queue_wait_s": 2.0}],
            "engine": {"max_running": 1},
            "ladder": {"enabled": False},
        }
    )
    workload = Workload.of(
        [SimRequest("long", 0.0, "t", 100, 2000, 2000), SimRequest("next", 0.1, "t", 100, 5, 5)]
    )
    scheduler = PolicyScheduler(config)
    result = simulate(workload, scheduler, H100)
    records = {r.request.id: r for r in result.records}
    assert records["next"].outcome is SimOutcome.EXPIRED
    assert records["next"].finished_at == pytest.approx(2.1)
    assert records["long"].outcome is SimOutcome.COMPLETED
    assert_no_leaks(scheduler.policy)


def test_a_request_pushed_out_of_a_full_queue_is_refused_and_may_retry() -> None:
    """The simulator hears of a request displaced from a full queue (DESIGN.md
    9) when the arrival that displaced it is admitted: refused ``queue_full``,
    retried as its client may, then refused for good."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "queue_capacity": 2, "max_queue_wait_s": 100.0}],
            "tiers": {"default": {}},  # no concurrency cap: the flood's way in
            "engine": {"max_running": 1},
            "ladder": {"enabled": False},
        }
    )
    workload = Workload.of(
        [
            SimRequest("f0", 0.0, "flood", 100, 2000, 2000),
            SimRequest("f1", 0.001, "flood", 100, 5, 5),
            SimRequest("f2", 0.002, "flood", 100, 5, 5, retries=1),
            SimRequest("b", 0.01, "other", 100, 5, 5),
        ]
    )
    scheduler = PolicyScheduler(config)
    result = simulate(workload, scheduler, H100)
    records = {r.request.id: r for r in result.records}
    pushed = records["f2"]
    assert (pushed.outcome, pushed.reason, pushed.attempts) == (
        SimOutcome.REJECTED,
        "queue_full",
        2,
    )
    assert pushed.dispatched_at is None
    assert all(records[name].outcome is SimOutcome.COMPLETED for name in ("f0", "f1", "b"))
    assert_no_leaks(scheduler.policy)


def test_a_dispatch_rate_paces_the_simulated_starts() -> None:
    """The simulator wakes at Policy.next_start(): starts spaced by each
    request's cost at the rate, with nothing else arriving to trigger them."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [{"name": "chat", "max_queue_wait_s": 60.0}],
            "cost": {"alpha": 1.0, "beta": 0.0},
            "engine": {"max_running": 8, "dispatch_rate": 1000.0, "dispatch_burst": 0.0},
            "ladder": {"enabled": False},
        }
    )
    workload = Workload.of([SimRequest(f"r{k}", 0.0, "t", 500, 5, 5) for k in range(4)])
    scheduler = PolicyScheduler(config)
    result = simulate(workload, scheduler, H100)
    starts = sorted(r.dispatched_at for r in result.records if r.dispatched_at is not None)
    assert starts == pytest.approx([0.0, 0.5, 1.0, 1.5])  # 500 cost units at 1,000/s each
    assert all(r.outcome is SimOutcome.COMPLETED for r in result.records)
    assert_no_leaks(scheduler.policy)


def test_a_wakeup_that_does_not_move_is_misuse() -> None:
    class Stuck(FCFS):
        name = "stuck"

        def wakeup(self) -> float | None:
            return 0.0

    with pytest.raises(UsageError, match="wakeup"):
        simulate(_one(), Stuck(), H100)


def test_the_same_inputs_give_the_same_records() -> None:
    config = PolicyConfig()
    workload = Workload.of(
        [SimRequest(f"r{i}", i * 0.01, f"t{i % 3}", 500 + i, 50, 100) for i in range(200)]
    )
    first = simulate(workload, PolicyScheduler(config), H100)
    second = simulate(workload, PolicyScheduler(config), H100)
    assert first.records == second.records


_DIGEST = """
import hashlib, json
from slopolicy.sim import OURS, run_scenario, seed_scenario, to_json
comparison = run_scenario(seed_scenario(short=True), policies=[OURS, "vtc"])
text = json.dumps(to_json(comparison), sort_keys=True)
print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_runs_repeat_exactly_across_processes_and_hash_seeds() -> None:
    digests = {
        subprocess.run(
            [sys.executable, "-c", _DIGEST],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(digests) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(lanes=["interactive", "heavy", "background"]), engine_specs())
def test_every_request_ends_once_and_nothing_leaks(workload: Workload, engine: EngineSpec) -> None:
    for scheduler in (PolicyScheduler(PolicyConfig()), FCFS()):
        result = simulate(workload, scheduler, engine)
        assert [r.request for r in result.records] == list(workload.requests)
        for record in result.records:
            assert record.outcome is not SimOutcome.UNFINISHED
            assert record.attempts <= record.request.retries + 1
            if record.outcome is SimOutcome.COMPLETED:
                assert record.dispatched_at is not None
                assert record.first_token_at is not None
                assert record.finished_at is not None
                assert record.request.arrival <= record.dispatched_at <= record.first_token_at
                assert record.first_token_at <= record.finished_at
                assert record.max_new_tokens is not None
                assert record.output_tokens == min(
                    record.request.output_tokens, record.max_new_tokens
                )
        if isinstance(scheduler, PolicyScheduler):
            assert_no_leaks(scheduler.policy)


def test_every_dispatch_and_observe_get_the_same_settled_view() -> None:
    seen: list[tuple[EngineView, int]] = []

    class Watching(FCFS):
        name = "watching"

        def dispatch(self, now: float, engine: EngineView) -> Released:
            seen.append((engine, engine.waiting))
            return super().dispatch(now, engine)

    workload = Workload.of([SimRequest(f"r{i}", i * 0.01, "t", 100, 50, 50) for i in range(5)])
    simulate(workload, Watching(), H100)
    assert len({id(view) for view, _ in seen}) == 1
    # Each dispatch starts from the engine's own queue: nothing left over from the last one.
    assert all(waiting <= 1 for _, waiting in seen)


def _floods(engine_priority: bool) -> list[tuple[str, int]]:
    """The engine priorities ours gives a flood's starts: ``big`` queues 30
    batch requests and ``small`` one on three seats and a pool they over-ask;
    the first three start while the engine has kept up, the next once ``big``
    is far over its share."""
    config = PolicyConfig.from_dict(
        {
            "lanes": [
                {"name": "chat", "slo": {"ttft_p95_s": 0.5}, "max_prompt_tokens": 1000},
                {"name": "batch", "max_prompt_tokens": 100_000, "max_queue_wait_s": 600},
            ],
            # These starts report no first token: no prefill budget holding them.
            "engine": {"max_running": 3, "share_window_s": 10.0, "prefill_horizon_s": 0},
            "kv": {"num_blocks": 2000},  # six of the flood's requests: over-asked
        }
    )
    ours = PolicyScheduler(config, engine_priority=engine_priority)
    view = engine_view()[1]
    for index in range(30):
        assert ours.submit(sim_request(f"big{index}", "big", prompt=5000), now=0.0).accepted
    assert ours.submit(sim_request("small0", "small", prompt=5000), now=0.0).accepted
    first = ours.dispatch(0.0, view).started
    ours.finish(first[0].id, now=1.0, output_tokens=10)
    then = ours.dispatch(1.0, view).started
    return [(r.id, r.priority) for r in (*first, *then)]


def test_ours_has_the_engine_preempt_an_over_share_tenant_s_starts_first() -> None:
    """A start over its tenant's share gets its lane's rank plus the number of
    lanes (two here) as its engine priority: after every start within its
    share, so the engine's preemption (the largest priority first) takes it
    first."""
    assert _floods(engine_priority=True) == [("big0", 1), ("small0", 1), ("big1", 1), ("big2", 3)]
    assert _floods(engine_priority=False) == [("big0", 0), ("small0", 0), ("big1", 0), ("big2", 0)]
