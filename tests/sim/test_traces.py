from __future__ import annotations

import json
from pathlib import Path

import pytest

from slopolicy.errors import SimulationError
from slopolicy.sim import TraceFormat, azure_2023, read_trace, read_traces

AZURE = Path(__file__).parents[2] / "slopolicy" / "sim" / "data" / "azure_llm_2023"


def test_the_azure_traces_ship_with_their_license_and_attribution() -> None:
    assert "Attribution 4.0 International" in (AZURE / "LICENSE").read_text(encoding="utf-8-sig")
    assert "Splitwise" in (AZURE / "README.md").read_text(encoding="utf-8")


def test_the_merged_azure_trace_replays_both_classes() -> None:
    workload = azure_2023()
    assert len(workload) == 8_819 + 19_366
    assert workload.requests[0].arrival == 0.0
    assert workload.duration == pytest.approx(3_513.2, abs=1)
    by_stream = {r.stream: r for r in workload}
    code, chat = by_stream["code"], by_stream["conversation"]
    assert (code.tenant, code.lane) == ("code", "code")
    assert (chat.tenant, chat.lane) == ("conversation", "interactive")
    # The conversation trace starts 77.3 s before the code trace.
    first_code = min(r.arrival for r in workload if r.stream == "code")
    assert first_code == pytest.approx(77.299, abs=1e-3)
    assert azure_2023(rate_scale=2).duration == pytest.approx(workload.duration / 2)
    # Outputs above the floor keep their own limit.
    assert all(r.max_new_tokens == max(r.output_tokens, 1024) for r in workload)


def test_seven_digit_fractions_are_exact(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
        "2023-11-16 18:17:04.0319600,0,0\n"
    )
    first, second = read_trace(trace, stream="code").requests
    assert second.arrival - first.arrival == pytest.approx(0.052, abs=1e-9)
    assert (second.prompt_tokens, second.output_tokens) == (1, 1)  # empty still costs a token
    assert first.id == "code-0"


def test_columns_can_be_mapped(tmp_path: Path) -> None:
    trace = tmp_path / "mine.csv"
    trace.write_text("ts,in,out,who,where\n2500,100,20,acme,heavy\n1000,50,10,,\n")
    fmt = TraceFormat("ts", "in", "out", tenant="who", lane="where", time_unit="ms")
    workload = read_trace(trace, fmt, tenant="anon", lane="interactive", rate_scale=2)
    first, second = workload.requests
    assert (first.arrival, first.tenant, first.lane, first.prompt_tokens) == (
        0.0,
        "anon",
        "interactive",
        50,
    )
    assert (second.arrival, second.tenant, second.lane) == (0.75, "acme", "heavy")


def test_the_gates_arrival_log_is_recognised(tmp_path: Path) -> None:
    rows = [
        {
            "arrival": 100.5,
            "tenant": "t1",
            "lane": "interactive",
            "prompt_tokens": 10,
            "max_new_tokens": 64,
            "output_tokens": 30,
        },
        {
            "arrival": 101.0,
            "tenant": "t2",
            "lane": "heavy",
            "prompt_tokens": 5000,
            "max_new_tokens": 2048,
            "output_tokens": 900,
        },
    ]
    log = tmp_path / "arrivals.jsonl"
    log.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    first, second = read_trace(log).requests
    assert (first.arrival, first.tenant, first.lane, first.max_new_tokens) == (
        0.0,
        "t1",
        "interactive",
        64,
    )
    assert (second.arrival, second.output_tokens, second.max_new_tokens) == (0.5, 900, 2048)


def test_several_traces_share_one_timeline(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("arrival,prompt_tokens,output_tokens\n10,1,1\n")
    (tmp_path / "b.csv").write_text("arrival,prompt_tokens,output_tokens\n12,1,1\n")
    workload = read_traces([tmp_path / "a.csv", tmp_path / "b.csv"], retries=3)
    assert [(r.id, r.arrival, r.tenant, r.retries) for r in workload] == [
        ("a-0", 0.0, "a", 3),
        ("b-0", 2.0, "b", 3),
    ]


@pytest.mark.parametrize(
    ("name", "text", "where", "message"),
    [
        ("bad.csv", "arrival,prompt_tokens,output_tokens\n1,2,3\n2,x,3\n", ":3", "'prompt_tokens'"),
        ("neg.csv", "arrival,prompt_tokens,output_tokens\n1,-2,3\n", ":2", r"within \[0, "),
        ("time.csv", "arrival,prompt_tokens,output_tokens\nnoon,2,3\n", ":2", "'arrival'"),
        ("cols.csv", "when,size\n1,2\n", ":2", "--time-col"),
        ("empty.csv", "arrival,prompt_tokens,output_tokens\n", "", "no rows"),
        (
            "bad.jsonl",
            '{"arrival": 1, "prompt_tokens": 1, "output_tokens": 1}\n{oops\n',
            ":2",
            "invalid JSON",
        ),
        ("list.jsonl", "[1, 2]\n", ":1", "JSON object"),
        ("trace.txt", "x", "", "unknown trace type"),
    ],
)
def test_bad_traces_name_the_file_line_and_column(
    tmp_path: Path, name: str, text: str, where: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SimulationError, match=message) as caught:
        read_trace(path)
    assert str(caught.value).startswith(f"{path}{where}")


def test_a_mapped_column_must_exist(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(SimulationError, match=r"missing column.*tenant; the trace has a, b, c"):
        read_trace(path, TraceFormat("a", "b", "c", tenant="tenant"))


def test_a_bad_datetime_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n")
    with pytest.raises(SimulationError, match="ISO 8601"):
        read_trace(path)
