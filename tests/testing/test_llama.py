"""The llama-server fixture's parts that need no llama.cpp build: the cache, the
process lifecycle (on a stand-in executable that serves ``/health``), the
orphan guard, skip-or-fail, and the tiny model's writer (on a small vocab)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slopolicy.errors import UsageError
from slopolicy.testing.llama import (
    BuildError,
    Installation,
    LlamaServer,
    TinyLlama,
    build_llama_server,
    find_llama_server,
)
from slopolicy.testing.llama.__main__ import main
from slopolicy.testing.llama.build import cache_root

STAND_IN = f"""#!{sys.executable}
import http.server, sys
if "--version" in sys.argv:
    sys.exit(0)
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{{"status": "ok"}}')
    def log_message(self, *args):
        pass
print("listening", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SLOPOLICY_LLAMA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def install(cache: Path, script: str = STAND_IN) -> Installation:
    """A complete install whose ``llama-server`` is ``script``."""
    found = Installation(cache / "9.9", "9.9")
    found.executable.parent.mkdir(parents=True)
    found.executable.write_text(script)
    found.executable.chmod(0o755)
    (found.root / "build.json").write_text('{"version": "9.9"}')
    return found


def test_the_cache_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLOPOLICY_LLAMA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert cache_root() == Path("/somewhere/slopolicy/llama.cpp")
    monkeypatch.setenv("SLOPOLICY_LLAMA_CACHE", "/else")
    assert cache_root() == Path("/else")


def test_a_build_is_found_only_when_complete_and_not_rebuilt(cache: Path) -> None:
    assert find_llama_server("9.9") is None
    found = install(cache)
    assert find_llama_server("9.9") == found
    assert found.info() == {"version": "9.9"}
    # Complete: returned at once (no pip, no cmake, no source needed).
    assert build_llama_server("9.9", source=cache / "nothing-here") == found
    (found.root / "build.json").unlink()  # an install cut short
    assert find_llama_server("9.9") is None
    with pytest.raises(UsageError):
        find_llama_server("../escape")
    with pytest.raises(UsageError):
        build_llama_server("9.9", jobs=0)


def test_a_build_from_a_folder_without_the_server_fails_clearly(
    cache: Path, tmp_path: Path
) -> None:
    (tmp_path / "sdist").mkdir()
    with pytest.raises(BuildError, match=r"vendor/llama\.cpp/tools/server"):
        build_llama_server("9.8", source=tmp_path / "sdist")
    assert find_llama_server("9.8") is None
    assert [path.name for path in cache.iterdir()] == ["9.8.lock"]  # its work folder is gone


def test_the_command_line(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["path", "--version", "9.9"]) == 1
    assert "not built" in capsys.readouterr().err
    found = install(cache)
    assert main(["path", "--version", "9.9"]) == 0
    assert capsys.readouterr().out.strip() == str(found.executable)


def test_the_process_starts_restarts_on_its_port_and_stops(cache: Path, tmp_path: Path) -> None:
    found = install(cache)
    with LlamaServer(found, tmp_path / "m.gguf", slots=2, context=512) as server:
        assert server.running
        assert server.slot_context == 256
        assert server.command()[server.command().index("-np") + 1] == "2"
        port = server.port
        server.kill()
        assert not server.running
        server.start()
        assert server.port == port
        assert "listening" in server.log()
        process = server._process
    assert process is not None
    assert process.poll() is not None
    for bad in ({"slots": 0}, {"slots": "4"}, {"threads": True}, {"slots": 8, "context": 4}):
        with pytest.raises(UsageError):
            LlamaServer(found, tmp_path / "m.gguf", **bad)


def test_a_server_that_exits_fails_its_start_with_its_log(cache: Path, tmp_path: Path) -> None:
    found = install(cache, f"#!{sys.executable}\nprint('no model here')\nraise SystemExit(3)\n")
    server = LlamaServer(found, tmp_path / "m.gguf")
    with pytest.raises(RuntimeError, match=r"exited with 3(?s:.*)no model here"):
        server.start()
    server.close()


def test_a_killed_host_leaves_no_server_behind(cache: Path, tmp_path: Path) -> None:
    found = install(cache)
    host = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from slopolicy.testing.llama import Installation, LlamaServer
        found = Installation(Path({str(found.root)!r}), "9.9")
        server = LlamaServer(found, Path("m.gguf")).start()
        print(server._process.pid, flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", host], stdout=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)  # no finalizer runs: only the kernel's guard
        proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the server outlived its host"
        time.sleep(0.01)  # polling the kernel's cleanup, not waiting out a timer


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it only waits for init to reap it.
    state = Path(f"/proc/{pid}/stat")
    return state.exists() and state.read_text().split(") ")[-1][:1] != "Z"


def test_bad_model_shapes() -> None:
    with pytest.raises(UsageError):
        TinyLlama(width=130, heads=4)  # 32.5-wide heads
    with pytest.raises(UsageError):
        TinyLlama(layers=0)
    assert TinyLlama().file_name == "tiny-llama-2x128-h4-f256-c65536-s0.gguf"


def test_the_tiny_model_copies_the_tokenizer_and_is_deterministic(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from slopolicy.testing.llama.model import write_tiny_model

    vocab = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(vocab), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "ab", "<eos>"])
    writer.add_token_types([1, 1, 1, 3])
    writer.add_token_merges(["a b"])
    writer.add_eos_token_id(3)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    shape = TinyLlama(layers=1, width=8, heads=2, ffn=16, context=64, seed=5)
    first = write_tiny_model(tmp_path / "one.gguf", vocab, shape)
    second = write_tiny_model(tmp_path / "two.gguf", vocab, shape)
    assert first.read_bytes() == second.read_bytes()
    reader = gguf.GGUFReader(str(first))
    fields = reader.fields
    tokens = fields["tokenizer.ggml.tokens"]
    assert [bytes(tokens.parts[index]).decode() for index in tokens.data] == [
        "a",
        "b",
        "ab",
        "<eos>",
    ]
    assert int(fields["tokenizer.ggml.eos_token_id"].parts[-1][0]) == 3
    assert int(fields["llama.context_length"].parts[-1][0]) == 64
    shapes = {tensor.name: tuple(int(n) for n in tensor.shape) for tensor in reader.tensors}
    assert shapes["token_embd.weight"] == (8, 4)  # ggml order: (width, vocab)
    assert shapes["blk.0.ffn_down.weight"] == (16, 8)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "one.gguf",
        "two.gguf",
        "vocab.gguf",
    ]
