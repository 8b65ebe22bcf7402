"""The arrival log: one JSON line per request, written off the event loop."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
from pathlib import Path

import anyio
import pytest

from slopolicy import Expired, Gate, Outcome, Policy, Rejected, Request, UsageError
from slopolicy.core.cost.tokens import HeuristicCounter
from slopolicy.runtime import ArrivalLog, ArrivalRecord
from slopolicy.testing.fake_engine import EngineError, FakeEngine
from tests.core.conftest import RecordingCounter, estimate_calls
from tests.runtime.conftest import config, policy

pytestmark = pytest.mark.anyio

KEYS = [
    "arrival",
    "id",
    "tenant",
    "lane",
    "prompt_tokens",
    "max_new_tokens",
    "output_tokens",
    "outcome",
]


async def _written(log: ArrivalLog, count: int, *, dropped: int = 0) -> None:
    # The write runs in a worker thread, which virtual time does not wait for:
    # poll in small virtual steps (each a real loop turn) until it is done.
    with anyio.fail_after(3600):
        while log.written < count or log.dropped < dropped:  # noqa: ASYNC110 - a thread's progress
            await anyio.sleep(0.01)


async def _stream(
    gate: Gate, engine: FakeEngine, request: Request, fail_at: int | None = None
) -> None:
    async with gate.admit(request) as ticket:
        async for _ in ticket.track(engine.stream(ticket.request, fail_at=fail_at)):
            pass


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_ending_is_one_line_in_the_documented_schema(tmp_path: Path) -> None:
    path = tmp_path / "arrivals.jsonl"
    engine = FakeEngine(ttft=0.1, per_token=0.01)
    async with Gate(policy(engine={"max_running": 1}), arrival_log=str(path)) as gate:
        await anyio.sleep(2.0)  # arrivals count from the gate's opening
        async with (
            gate.admit(Request(id="ok", tenant="a", prompt_tokens=30, max_new_tokens=500)) as t,
            anyio.create_task_group() as group,
        ):

            async def late() -> None:
                with pytest.raises(Expired):
                    await gate.admit(
                        Request(
                            id="late",
                            tenant="b",
                            prompt_tokens=5,
                            deadline=anyio.current_time() + 0.05,
                        )
                    )

            group.start_soon(late)
            async for _ in t.track(engine.stream(t.request, output_tokens=12)):
                pass
        with pytest.raises(Rejected):
            await gate.admit(Request(id="huge", tenant="a", prompt_tokens=9_000))
        with pytest.raises(EngineError):
            await _stream(gate, engine, Request(id="bad", tenant="c", prompt_tokens=7), fail_at=2)
        with anyio.move_on_after(0.01):
            await _stream(gate, engine, Request(id="gone", tenant="c", prompt_tokens=7))
    lines = _lines(path)
    assert all(list(line) == KEYS for line in lines)
    by_id = {str(line["id"]): line for line in lines}
    assert [line["id"] for line in lines] == ["late", "ok", "huge", "bad", "gone"]  # end order
    assert by_id["ok"] == {
        "arrival": 2.0,
        "id": "ok",
        "tenant": "a",
        "lane": "interactive",
        "prompt_tokens": 30,
        "max_new_tokens": 500,  # as asked; the lane capped it at 64
        "output_tokens": 12,
        "outcome": "completed",
    }
    assert (by_id["late"]["outcome"], by_id["late"]["output_tokens"]) == ("expired", 0)
    assert (by_id["huge"]["outcome"], by_id["huge"]["lane"]) == ("rejected", "heavy")
    assert (by_id["bad"]["outcome"], by_id["bad"]["output_tokens"]) == ("failed", 2)
    assert by_id["gone"]["outcome"] == "cancelled"


async def test_records_are_flushed_every_flush_every_seconds(tmp_path: Path) -> None:
    path = tmp_path / "arrivals.jsonl"
    log = ArrivalLog(path, flush_every=1.0, max_buffered=100)
    async with Gate(policy(), arrival_log=log) as gate:
        start = anyio.current_time()
        for k in range(2):
            with await gate.admit(Request(id=f"r{k}", tenant="a", prompt_tokens=1)):
                pass
        await anyio.sleep(0.5)
        assert log.written == 0  # buffered, not yet due
        await _written(log, 2)
        assert anyio.current_time() - start >= 1.0
        assert [line["id"] for line in _lines(path)] == ["r0", "r1"]
    assert len(_lines(path)) == 2


async def test_a_full_buffer_is_flushed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "arrivals.jsonl"
    log = ArrivalLog(path, flush_every=1e6, max_buffered=3)
    async with Gate(policy(), arrival_log=log) as gate:
        start = anyio.current_time()
        for k in range(4):
            with await gate.admit(Request(id=f"r{k}", tenant="a", prompt_tokens=1)):
                pass
        await _written(log, 3)
        assert anyio.current_time() - start < 1e6
    assert len(_lines(path)) == 4


async def test_a_stream_target_is_written_and_left_open() -> None:
    target = io.StringIO()
    async with Gate(policy(), arrival_log=target) as gate:
        with await gate.admit(Request(id="r", tenant="a", prompt_tokens=1)) as ticket:
            ticket.tokens(2)
    assert not target.closed
    (line,) = [json.loads(text) for text in target.getvalue().splitlines()]
    assert line["id"] == "r"
    assert line["output_tokens"] == 2


def test_the_record_serializes_compactly_and_rounds_time() -> None:
    record = ArrivalRecord(1 / 3, "r", "t", None, 5, 6, 7, "rejected")
    assert record.to_json() == (
        '{"arrival":0.333333,"id":"r","tenant":"t","lane":null,"prompt_tokens":5,'
        '"max_new_tokens":6,"output_tokens":7,"outcome":"rejected"}'
    )


async def test_a_log_that_cannot_be_opened_fails_at_entry(tmp_path: Path) -> None:
    before = len(anyio.get_running_tasks())
    for target in (tmp_path / "missing" / "a.jsonl", tmp_path):
        gate = Gate(policy(), arrival_log=str(target))
        with pytest.raises(UsageError, match="cannot open the arrival log"):
            await gate.__aenter__()
        assert len(anyio.get_running_tasks()) == before


class _Full(io.StringIO):
    """A stream on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


async def test_a_failing_write_is_logged_and_counted_and_the_gate_lives_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = ArrivalLog(_Full(), flush_every=0.5)
    p = policy()
    with caplog.at_level(logging.WARNING, logger="slopolicy.gate"):
        async with Gate(p, arrival_log=log) as gate:
            for k in range(3):
                with await gate.admit(Request(id=f"r{k}", tenant="a", prompt_tokens=1)):
                    pass
            await _written(log, 0, dropped=3)
            assert gate.statistics().open
            with await gate.admit(Request(id="later", tenant="a", prompt_tokens=1)):
                pass
    assert (log.written, log.dropped) == (0, 4)
    assert "the arrival log lost 3 record(s)" in caplog.text
    assert "the arrival log lost 1 record(s)" in caplog.text  # flushed at close
    assert p.statistics().outcomes[Outcome.COMPLETED] == 4


def test_bad_log_settings_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        ArrivalLog(tmp_path / "x", flush_every=0)
    with pytest.raises(UsageError):
        ArrivalLog(tmp_path / "x", max_buffered=0)


async def test_the_simulator_replays_an_arrival_log(tmp_path: Path) -> None:
    from slopolicy.sim import read_trace
    from slopolicy.sim.traces import GATE_LOG

    path = tmp_path / "arrivals.jsonl"
    engine = FakeEngine(ttft=0.05, per_token=0.01)
    async with Gate(policy(), arrival_log=str(path)) as gate:
        for index in range(3):
            await anyio.sleep(0.5)
            request = Request(id=f"r{index}", tenant="t", prompt_tokens=40, max_new_tokens=20)
            await _stream(gate, engine, request)
    workload = read_trace(str(path), GATE_LOG)
    assert [r.prompt_tokens for r in workload.requests] == [40, 40, 40]
    assert [r.output_tokens for r in workload.requests] == [20, 20, 20]
    arrivals = [r.arrival for r in workload.requests]
    assert arrivals == sorted(arrivals)
    # each came 0.5 s after the previous one ended (about 0.25 s of streaming)
    assert [b - a for a, b in itertools.pairwise(arrivals)] == pytest.approx([0.74, 0.74], abs=0.02)


def test_hostile_tenant_names_survive_the_log_and_its_replay(tmp_path: Path) -> None:
    from slopolicy.sim import read_trace

    names = ["a\nb", 'q"uote', "\u2028line", "\udcffsurrogate", "😀" * 256, "x,y"]
    path = tmp_path / "arrivals.jsonl"
    path.write_text(
        "".join(
            ArrivalRecord(float(k), f"r{k}", name, None, 5, 6, 7, "completed").to_json() + "\n"
            for k, name in enumerate(names)
        ),
        encoding="utf-8",
    )
    assert [r.tenant for r in read_trace(path).requests] == names


_LONG_PROMPT = "lorem ipsum dolor sit amet " * 1_000  # heuristic: about 6,750 tokens


@pytest.mark.parametrize(
    ("hold", "refused", "outcome"),
    [
        # Refused by the router after counting: over the heavy lane's budget.
        (None, Request(id="r", tenant="a", lane="heavy", prompt=_LONG_PROMPT), "prompt_too_long"),
        # Refused by the policy's quota (one in flight for tier "tiny"), a chat.
        (
            Request(id="first", tenant="small", prompt_tokens=10),
            Request(id="r", tenant="small", messages=({"role": "user", "content": "hi"},)),  # type: ignore[arg-type]
            "concurrency_limited",
        ),
        # Refused before counting: the gate counts it, once.
        (None, Request(id="r", tenant="a", lane="nowhere", prompt="hello there"), "unknown_lane"),
    ],
)
async def test_a_refused_request_is_tokenized_once(
    hold: Request | None, refused: Request, outcome: str
) -> None:
    recording = RecordingCounter(HeuristicCounter())
    target = Policy(config(), counter=recording)
    records: list[ArrivalRecord] = []
    async with Gate(target, on_end=records.append) as gate:
        with contextlib.ExitStack() as held:
            if hold is not None:
                held.enter_context(gate.admit_nowait(hold))
            recording.reset()
            with pytest.raises(Rejected) as caught:
                await gate.admit(refused)
            assert caught.value.code == outcome
            # The router's count, carried by the decision: none again for the log.
            assert recording.calls == estimate_calls(refused, HeuristicCounter())
    (record,) = [record for record in records if record.id == "r"]
    assert record.prompt_tokens == target.estimator.prompt_tokens(refused).tokens
