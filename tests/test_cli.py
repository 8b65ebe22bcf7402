from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slopolicy.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_validate_explains_a_valid_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLES / "policy.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out.splitlines()[0]
    assert "prompts over 8,192 tokens move to 'heavy'" in out
    assert "enterprise: 100,000 cost units/s, burst 1,000,000" in out
    assert "KV pool: 26,688 blocks x 16 tokens = 427,008 tokens (fewer where" in out
    assert (
        "Engine: at most 256 requests running at once, 75 ms of prompt work handed ahead "
        "(at the measured rate); under saturation, tenants over their max-min share (over "
        "30 s) go after the rest inside a lane's slack; starts not paced."
    ) in out


def test_validate_lists_each_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "lanes:\n  - name: interactive\n    weight: -1\n    colour: red\ndefault_tier: gold\n"
    )
    assert main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "lanes.0.weight: Input should be greater than or equal to 0.000001" in err
    assert "lanes.0.colour: Extra inputs are not permitted" in err


def test_schema_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "PolicyConfig"


def test_route_explains_a_decision(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["route", str(EXAMPLES / "policy.yaml"), "--tenant", "acme", "--prompt-tokens", "50000"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "=> admitted to lane 'heavy', demoted from 'interactive'" in out
    assert out.rstrip().endswith("HTTP 200")


def test_route_reads_a_prompt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("hello world")
    assert main(["route", "--prompt-file", str(prompt), "--lane", "nope"]) == 0
    out = capsys.readouterr().out
    assert "unknown lane 'nope'" in out
    assert "HTTP 400" in out


def test_route_refuses_a_bad_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "--prompt-tokens", "-5"]) == 1
    assert "prompt_tokens: must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.txt", None, "No such file or directory"),
        ("latin1.txt", b"caf\xe9", "not UTF-8 text"),
        ("folder", b"", "Is a directory"),
    ],
)
def test_route_explains_a_prompt_file_it_cannot_read(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes | None,
    message: str,
) -> None:
    path = tmp_path / name
    if name == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    assert main(["route", "--prompt-file", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"--prompt-file {path}: ")
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", [["validate", str(EXAMPLES / "policy.yaml")], ["schema"]])
def test_output_to_a_closed_pipe_ends_quietly(command: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # `slopolicy ... | head` once head has gone
    try:
        result = subprocess.run(
            [sys.executable, "-m", "slopolicy.cli", *command],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write)
    assert result.stderr == ""
    assert result.returncode == 141


def test_the_installed_command_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "slopolicy.cli", "validate", str(EXAMPLES / "policy.toml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Fallback ladder" in result.stdout
