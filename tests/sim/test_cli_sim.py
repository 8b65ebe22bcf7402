from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slopolicy.cli import main


def test_the_demo_prints_the_tables_and_the_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo.json"
    assert main(["demo", "--quick", "--no-progress", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Load outside the bursts" in printed
    assert "Lane 'interactive'" in printed
    assert printed.count("✔") == 6
    assert json.loads(out.read_text())["scenario"]["name"] == "seed-short"


def test_simulate_replays_a_mapped_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    rows = "\n".join(f"{i * 100},{200 + i},{20},u{i % 3}" for i in range(50))
    trace.write_text("ms,in,out,user\n" + rows + "\n")
    out = tmp_path / "r.json"
    args = [
        "simulate",
        "--trace",
        str(trace),
        "--time-col",
        "ms",
        "--input-col",
        "in",
        "--output-col",
        "out",
        "--tenant-col",
        "user",
        "--time-unit",
        "ms",
        "--compare",
        "fcfs,vtc",
        "--no-progress",
        "--json",
        str(out),
        "--rate-scale",
        "2",
    ]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert set(data["policies"]) == {"slopolicy", "fcfs", "vtc"}
    assert data["scenario"]["duration_s"] == pytest.approx(2.45)
    assert set(data["policies"]["fcfs"]["tenants"]) == {"u0", "u1", "u2"}
    assert "Lane 'interactive'" in capsys.readouterr().out


def test_simulate_runs_the_azure_trace_with_its_builtin_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [
        "simulate",
        "--trace",
        "azure-2023",
        "--duration",
        "100",  # the code trace starts 77 s after the conversation trace
        "--compare",
        "fcfs",
        "--no-progress",
        "--engine",
        "llama3-8b/a100",
        "--long-prefill-token-threshold",
        "512",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Lane 'code'" in printed
    assert "llama3-8b/a100" in printed
    assert "long_prefill_token_threshold 512" in printed


def test_simulate_checks_claims_on_a_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "simulate",
        "azure-2023",
        "--duration",
        "20",
        "--compare",
        "fcfs",
        "--no-progress",
        "--claims",
        "overload",
    ]
    assert main(args) == 0
    assert "FCFS attainment" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate"], "give a scenario file"),
        (["simulate", "seed", "--compare", "fifo"], "--compare: unknown policy 'fifo'"),
        (["simulate", "seed", "--compare", "no.such:Thing"], "cannot import the policy"),
        (["simulate", "seed", "--sweep", "--claims", "seed"], "not a sweep"),
        (["simulate", "seed", "--sweep", "--sweep-target", "2"], "--sweep-target"),
        (["simulate", "seed", "--engine", "tpu"], "unknown engine profile"),
        (["simulate", "seed", "--rate-scale", "0"], "--rate-scale"),
        (["simulate", "seed", "--retries", "-1"], "--retries: must be >= 0"),
        (["simulate", "seed", "--claims", "overload", "--compare", ""], "need fcfs"),
        (["simulate", "--trace", "a.csv", "--trace", "azure-2023"], "cannot be mixed"),
        (["simulate", "--trace", "nope.csv"], "cannot read the trace"),
        (["simulate", "--trace", "x.csv", "--time-col", "t"], "together"),
        (["simulate", "missing.yaml"], "missing.yaml"),
        (["simulate", "sed"], "sed: no such scenario file or built-in scenario"),
        (["simulate", "seed", "--rate-scale", "inf"], "--rate-scale: must be a finite number"),
        (["simulate", "seed", "--rate-scale", "nan"], "--rate-scale: must be a finite number"),
        (["simulate", "seed", "--rate-scale", "1e-300"], "--rate-scale: request"),
        (["simulate", "seed", "--duration", "nan"], "--duration: must be > 0"),
        (["simulate", "seed", "--max-num-batched-tokens", "0"], "max_num_batched_tokens"),
        (["simulate", "seed", "--json", "."], ".: is a directory"),
        (["simulate", "seed", "--json", "no/such/dir/r.json"], "no such directory"),
        (["demo", "--quick", "--json", "."], ".: is a directory"),
    ],
)
def test_simulate_explains_bad_input(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--no-progress"]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ({"lane": ""}, "lane: must not be empty"),
        ({"arrivals": {"kind": "burst", "count": 10**11}}, "about 1e+11 requests; at most"),
        ({"tenants": {"count": 10**9}}, "count must be within [1, 1,000,000]"),
    ],
)
def test_a_scenario_its_models_accept_but_the_run_refuses_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stream: dict[str, object],
    message: str,
) -> None:
    data: dict[str, object] = {
        "name": "a",
        "arrivals": {"kind": "poisson", "rate": 1.0},
        "prompt_tokens": {"kind": "constant", "value": 10},
        "output_tokens": {"kind": "constant", "value": 10},
        "tenants": {"names": ["t"]},
    }
    data.update(stream)
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"duration_s": 10.0, "streams": [data]}))
    assert main(["simulate", str(path), "--compare", "", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: ")
    assert message in err
    assert err.count("\n") == 1


def test_plot_paths_that_cannot_be_written_are_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    blocker = tmp_path / "file"
    blocker.write_text("")
    for target, message in [
        (tmp_path / "p.bogus", "unknown image format 'bogus'"),
        (blocker / "p.png", "no such directory"),
        (tmp_path, "is a directory"),
    ]:
        assert main(["simulate", "seed", "--no-progress", "--plot", str(target)]) == 1
        captured = capsys.readouterr()
        assert message in captured.err
        assert not captured.out  # nothing ran


def test_a_bad_scenario_lists_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("duration_s: -1\nstreams: []\nengine: {max_num_seqs: 0}\n")
    assert main(["simulate", str(bad), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "duration_s: Input should be greater than 0" in err
    assert "engine.max_num_seqs" in err


def test_plots_without_matplotlib_name_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = [
        "simulate",
        "seed",
        "--duration",
        "5",
        "--compare",
        "",
        "--no-progress",
        "--plot",
        str(tmp_path / "p.png"),
    ]
    assert main(args) == 1
    assert "pip install 'slopolicy[plot]'" in capsys.readouterr().err


def test_the_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    args = [
        "simulate",
        "seed",
        "--duration",
        "20",
        "--compare",
        "fcfs",
        "--no-progress",
        "--plot",
        str(out),
    ]
    assert main(args) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


def test_every_panel_draws_a_policy_in_the_same_colour() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from slopolicy.sim import run_scenario, seed_scenario
    from slopolicy.sim.plot import _comparison_figure, _pyplot, colours

    comparison = run_scenario(seed_scenario(short=True), policies=("slopolicy", "fcfs", "vtc"))
    plt = _pyplot()
    figure = _comparison_figure(plt, comparison)
    palette = colours(comparison.results)
    assert len(set(palette.values())) == 3
    drawn = 0
    for axes in figure.axes:
        for artist in [*axes.lines, *axes.collections]:
            label = artist.get_label()
            if label in palette:
                colour = (
                    artist.get_color()
                    if hasattr(artist, "get_xdata")
                    else artist.get_facecolor()[0]
                )
                assert to_hex(colour) == palette[label], (axes.get_title(), label)
                drawn += 1
    plt.close(figure)
    assert drawn == 3 * len(figure.axes)  # each policy in every CDF and in the timeline
    assert colours(["mine", "fcfs"])["fcfs"] == palette["fcfs"]  # fixed per built-in name


def test_simulate_sweeps_and_writes_json_and_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out, plot = tmp_path / "sweep.json", tmp_path / "sweep.png"
    args = [
        "simulate",
        "seed",
        "--duration",
        "40",
        "--compare",
        "fcfs,tests.sim.custom:Halving",
        "--sweep",
        "--sweep-refine",
        "1",
        "--no-progress",
        "--json",
        str(out),
        "--plot",
        str(plot),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Goodput capacity" in printed
    assert "limit" in printed
    data = json.loads(out.read_text())
    assert data["schema"] == "slopolicy.sweep/1"
    assert set(data["policies"]) == {"slopolicy", "fcfs", "halving"}
    assert data["policies"]["halving"]["capacity"]["bound"] == "below"  # every answer degraded
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_simulate_compares_a_scheduler_named_by_import_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "seed", "--duration", "10", "--compare", "tests.sim.custom:HALVING"]
    assert main([*args, "--no-progress"]) == 0
    assert "halving" in capsys.readouterr().out


def test_an_output_that_fails_to_write_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    args = ["simulate", "seed", "--duration", "5", "--compare", "", "--no-progress"]
    assert main([*args, "--json", "/dev/full"]) == 1
    assert capsys.readouterr().err == "/dev/full: cannot write: No space left on device\n"


def test_a_lane_hint_the_policy_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,10,10\n")
    args = ["simulate", "--trace", str(trace), "--lane", "nope", "--no-progress"]
    assert main(args) == 1  # the priority baseline ranks by it
    assert capsys.readouterr().err.startswith("the workload hints lanes ['nope']")
