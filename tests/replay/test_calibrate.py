"""``slopolicy calibrate``: the fit recovers a known profile, the engine file
round-trips into ``simulate --engine``, and the command runs against a local engine."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from slopolicy.cli import main
from slopolicy.errors import SimulationError, UsageError
from slopolicy.replay.fit import (
    Decode,
    Mixed,
    Prefill,
    Probe,
    Start,
    fit_profile,
    nnls,
    predict,
)
from slopolicy.sim.engine_file import load_engine, write_engine
from slopolicy.sim.engine_spec import EngineSpec
from slopolicy.sim.profiles import EngineProfile, profile
from tests.adapters.servers import Recorder, Script, ServerThread
from tests.replay.engine import ReplayApp

pytest.importorskip("openai")

PROBES = (
    [Prefill(n, 512, 1.0) for n in (64, 512, 2048, 8192)]
    + [Decode(b, c, 1.0) for b in (1, 4, 16) for c in (64.0, 4000.0)]
    + [Start(8, 8, 1.0)]
)
#: What llama.cpp's calibration adds: decodes in scattered slots and behind a
#: queue, and a prompt computed beside decodes.
LLAMA_PROBES: tuple[Probe, ...] = (
    *PROBES,
    Decode(4, 64.0, 1.0, ubatches=4),
    Decode(8, 64.0, 1.0, waiting=32),
    Mixed(2048, 512, 4, 96.0, 1.0),
)


@pytest.mark.parametrize(
    "true",
    [
        profile("llama3-8b/a100"),
        EngineProfile("cpu", 0.0004, 60e-6, 3e-6, 0.02e-6, 80_000, 0.0025, t_sample=0.002),
        EngineProfile("llama", 0.0, 12e-6, 2.4e-6, 0.03e-6, 80_000, 0.0013, 0.0011, 0.0055),
        EngineProfile(
            "llama-split",
            0.0,
            22e-6,
            0.1e-6,
            0.02e-6,
            80_000,
            0.0035,
            0.0010,
            0.0036,
            t_ubatch=0.0024,
            t_wake=5e-6,
        ),
    ],
)
def test_the_fit_recovers_a_profile_from_its_own_predictions(true: EngineProfile) -> None:
    plain = [dataclasses.replace(p, seconds=predict(true, p)) for p in PROBES]
    fitted, residuals = fit_profile("fit", plain, 1000, refinements=2)
    assert fitted.t_ubatch == 0.0  # no probe moves it
    probes = [dataclasses.replace(p, seconds=predict(true, p)) for p in LLAMA_PROBES]
    fitted, residuals = fit_profile("fit", probes, 1000, refinements=2)
    assert max(abs(r.error) for r in residuals) < 0.03
    # The terms that the probes separate come back (T_cpu and T_w trade off).
    assert fitted.a == pytest.approx(true.a, rel=0.1)
    assert fitted.beta_p == pytest.approx(true.beta_p, rel=0.1)
    assert fitted.beta_d == pytest.approx(true.beta_d, rel=0.1)
    assert fitted.t_sample == pytest.approx(true.t_sample, abs=2e-4)
    assert fitted.t_start == pytest.approx(true.t_start, abs=3e-4)
    assert fitted.t_ubatch == pytest.approx(true.t_ubatch, abs=2e-4)
    assert fitted.t_wake == pytest.approx(true.t_wake, abs=5e-7)


def test_a_mixed_step_costs_the_prompt_chunk_and_the_decodes_beside_it() -> None:
    p = EngineProfile("p", 0.0, 20e-6, 0.1e-6, 0.02e-6, 80_000, 0.003, 0.001, 0.004, 0.002, 5e-6)
    # 600 tokens beside 4 decodes, 256 a step: 252 + 252 + 96, two micro-batches
    # each; the decodes share the first with the prompt's next token, so they
    # attend over the larger of their 50 tokens and the prompt's k + 1, and
    # that token, alone of its prompt there, is computed as a row over k + 1
    # cells; the rest of the chunk is tiled.
    steps = [(252, 0), (252, 252), (96, 504)]
    expected = sum(
        p.iteration_time(
            4 + c,
            (c - 1) * (k + 1 + (c - 1) / 2),
            4 * max(50, k + 1) + k + 1,
            4 + (i == 2),
            int(i == 0),
            ubatches=2,
            open_requests=5,
        )
        for i, (c, k) in enumerate(steps)
    )
    assert predict(p, Mixed(600, 256, 4, 50.0, 1.0)) == pytest.approx(expected)


def test_nnls_keeps_terms_non_negative_and_exact_when_it_can() -> None:
    rows = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0]]
    exact = [0.5, 0.25, 0.0]
    targets = [sum(r * x for r, x in zip(row, exact, strict=True)) for row in rows]
    assert nnls(rows, targets) == pytest.approx(exact, abs=1e-9)
    # Unconstrained, the best x has a negative term; NNLS pins it at 0.
    found = nnls([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]], [3.0, 2.0, 1.0])
    assert min(found) >= 0.0
    assert found[1] == 0.0
    assert nnls([[0.0, 1.0], [0.0, 2.0]], [1.0, 2.0]) == pytest.approx([0.0, 1.0])


def test_the_fit_needs_both_kinds_of_probe() -> None:
    with pytest.raises(UsageError, match="prefill and decode"):
        fit_profile("x", [Prefill(64, 512, 0.01)], 1000)
    with pytest.raises(UsageError, match="> 0"):
        fit_profile("x", [Prefill(64, 512, 0.0), Decode(1, 64, 0.01)], 1000)


def test_an_engine_file_round_trips(tmp_path: Path) -> None:
    spec = EngineSpec(profile("llama3-8b/h100"), max_num_seqs=8, max_model_len=4096)
    llama = EngineSpec(
        dataclasses.replace(profile("llama3-8b/h100"), t_start=0.005, kv_tokens=8 * 4096),
        max_num_seqs=8, max_model_len=4096, block_size=1, kind="llama.cpp",
    )  # fmt: skip
    for name in ("engine.yaml", "engine.json"):
        for engine in (spec, llama):
            write_engine(str(tmp_path / name), engine, [{"probe": "decode", "seconds": 0.1}])
            assert load_engine(str(tmp_path / name)) == engine
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"profile": {"name": "x", "t_w": -1, "a": 0, "beta_d": 0,
                                           "beta_p": 0, "kv_tokens": 10}}))  # fmt: skip
    with pytest.raises(SimulationError, match="t_w"):
        load_engine(str(bad))
    bad.write_text(json.dumps({"profile": {"name": "x"}, "engine": {"max_num_seq": 8}}))
    with pytest.raises(SimulationError, match="max_num_seq"):
        load_engine(str(bad))
    data = {"name": "x", "t_w": 0.01, "a": 0, "beta_d": 0, "beta_p": 0, "kv_tokens": 10}
    bad.write_text(json.dumps({"profile": data, "engine": {"kind": "tgi"}}))
    with pytest.raises(SimulationError, match="kind"):
        load_engine(str(bad))


@pytest.fixture
def engine_url() -> Iterator[str]:
    recorder = Recorder()
    recorder.script("default", Script(tokens=10_000, ttft=0.005, tpot=0.002))
    server = ServerThread(ReplayApp(recorder)).start()
    yield server.url
    server.stop()


def test_calibrate_writes_a_file_simulate_takes(
    engine_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "engine.yaml"
    args = ["calibrate", "--target", engine_url, "--out", str(out), "--prompts", "16,64",
            "--batches", "1,2", "--repeats", "1", "--decode-tokens", "4"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "prefill     64 tokens" in printed
    assert "largest error" in printed
    spec = load_engine(str(out))
    assert spec.max_num_batched_tokens == 2048
    assert spec.profile.name.startswith("vllm:")
    assert spec.kind == "vllm"  # not llama.cpp: the vLLM scheduler
    assert "start    2 x 8 tokens" in printed  # two "slots": the largest batch probed
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,32,4\n0.1,64,8\n")
    simulate = ["simulate", "--trace", str(trace), "--engine", str(out), "--compare", "",
                "--no-progress", "--json", str(tmp_path / "sim.json")]  # fmt: skip
    assert main(simulate) == 0
    data = json.loads((tmp_path / "sim.json").read_text())
    assert data["scenario"]["engine"]["profile"] == spec.profile.name
    assert main(["calibrate", "--target", engine_url, "--prompts", "0"]) == 1
    assert "--prompts" in capsys.readouterr().err


def test_rounds_merge_repeats_and_take_medians() -> None:
    from slopolicy.replay.calibrate import _combined, _median

    one_round: list[Probe] = [Start(8, 8, 0.04), Start(8, 8, 0.06), Start(8, 8, 0.05)]
    one_round.append(Decode(8, 90.0, 0.02))
    assert _combined(one_round) == [Start(8, 8, 0.05), Decode(8, 90.0, 0.02)]
    # Across rounds: the median time, and the median of what the probe measured as it went.
    queued = [Decode(8, c, t, waiting=128) for c, t in ((90.0, 0.03), (100.0, 0.01), (95.0, 0.02))]
    assert _median(queued) == Decode(8, 95.0, 0.02, waiting=128)
    mixed = [Mixed(2048, 256, 4, c, t) for c, t in ((60.0, 0.3), (70.0, 0.2), (65.0, 0.25))]
    assert _median(mixed) == Mixed(2048, 256, 4, 65.0, 0.25)
