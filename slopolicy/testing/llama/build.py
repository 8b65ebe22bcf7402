"""Find or build llama.cpp's ``llama-server`` from the PyPI sdist of ``llama-cpp-python``.

The sdist vendors llama.cpp (``vendor/llama.cpp``) with its server and
vocab-only GGUF files; nothing else is downloaded. A build is installed, per
version, in a user cache directory::

    ~/.cache/slopolicy/llama.cpp/0.3.36/     ($XDG_CACHE_HOME, or SLOPOLICY_LLAMA_CACHE)
        bin/llama-server  bin/lib*.so*        (the binary finds its libraries beside it)
        models/ggml-vocab-llama-bpe.gguf      (Llama 3's tokenizer, for the tiny model)
        models/tiny-*.gguf                    (written on first use, see ``model``)
        build.json                            (written last: the install is complete)

:func:`build_llama_server` is idempotent and takes a lock, so two processes
never build one version at once (the second waits, then finds the first's).
The binary is built with ``-march=native``: keep the cache on the machine that
built it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from slopolicy.errors import UsageError

__all__ = (
    "CMAKE_FLAGS",
    "DEFAULT_VERSION",
    "VOCAB",
    "BuildError",
    "Installation",
    "build_llama_server",
    "cache_root",
    "find_llama_server",
)

#: The ``llama-cpp-python`` release whose sdist vendors the llama.cpp used.
DEFAULT_VERSION = "0.3.36"
#: The vocab-only GGUF the tiny model takes its tokenizer from.
VOCAB = "ggml-vocab-llama-bpe.gguf"
#: How llama.cpp is configured: no network code, no tests or examples, and
#: libraries found beside the binary (``$ORIGIN``) wherever it is copied.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
)
_PACKAGE = "llama-cpp-python"
_MARKER = "build.json"


class BuildError(RuntimeError):
    """Building or installing ``llama-server`` failed; the message has the tool's output."""


def cache_root() -> Path:
    """Where builds are kept: ``$SLOPOLICY_LLAMA_CACHE``, else
    ``$XDG_CACHE_HOME/slopolicy/llama.cpp``, else ``~/.cache/slopolicy/llama.cpp``."""
    explicit = os.environ.get("SLOPOLICY_LLAMA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slopolicy" / "llama.cpp"


@dataclass(frozen=True, slots=True)
class Installation:
    """One installed build: ``root`` is ``cache_root() / version``."""

    root: Path
    version: str

    @property
    def executable(self) -> Path:
        """The ``llama-server`` binary."""
        return self.root / "bin" / "llama-server"

    @property
    def vocab(self) -> Path:
        """The vocab-only GGUF copied from the sdist (see :data:`VOCAB`)."""
        return self.root / "models" / VOCAB

    @property
    def complete(self) -> bool:
        """Whether the install finished (its ``build.json`` is written last)."""
        return (self.root / _MARKER).is_file() and self.executable.is_file()

    def info(self) -> dict[str, object]:
        """What ``build.json`` records: version, flags, build seconds."""
        data: dict[str, object] = json.loads((self.root / _MARKER).read_text())
        return data

    def environment(self) -> dict[str, str]:
        """The environment to run the binary in: its libraries first on the
        loader's path (as well as ``$ORIGIN``, for builds made without it)."""
        env = dict(os.environ)
        libraries = str(self.executable.parent)
        previous = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{libraries}:{previous}" if previous else libraries
        return env


def _installation(version: str) -> Installation:
    if not version or "/" in version or version.startswith("."):
        raise UsageError(f"not a version: {version!r}")
    return Installation(cache_root() / version, version)


def find_llama_server(version: str = DEFAULT_VERSION) -> Installation | None:
    """The complete install of ``version`` in the cache, or ``None``."""
    found = _installation(version)
    return found if found.complete else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl  # POSIX only, like the build itself

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(command: Sequence[str], log: Path, *, cwd: Path | None = None) -> None:
    with log.open("a") as out:
        out.write(f"+ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        step = " ".join(command[:2])
        raise BuildError(f"{step} failed ({done.returncode}); its log ends:\n{tail}")


def _sources(version: str, source: Path | None, work: Path, log: Path) -> Path:
    """The unpacked sdist: ``source`` (an sdist file or its unpacked folder),
    else downloaded with pip into ``work``."""
    if source is None:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        _run([*pip, "--dest", str(work), f"{_PACKAGE}=={version}"], log)
        archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
        if not archives:
            raise BuildError(f"pip downloaded no sdist of {_PACKAGE}=={version} into {work}")
        source = archives[0]
    if source.is_dir():
        return source
    with tarfile.open(source) as archive:
        data_filter = getattr(tarfile, "data_filter", None)  # Python >= 3.10.12 / 3.11.4
        if data_filter is not None:
            archive.extractall(work / "src", filter=data_filter)
        else:  # pragma: no cover - older patch releases
            archive.extractall(work / "src")
    unpacked = [path for path in (work / "src").iterdir() if path.is_dir()]
    if len(unpacked) != 1:
        raise BuildError(f"{source} did not unpack into one folder")
    return unpacked[0]


def _install(build: Path, vendor: Path, staging: Path) -> None:
    """Copy the binary, its shared libraries and the vocab into ``staging``."""
    built = build / "bin"
    (staging / "bin").mkdir(parents=True)
    (staging / "models").mkdir()
    shutil.copy2(built / "llama-server", staging / "bin")
    for library in built.glob("lib*.so*"):
        shutil.copy2(library, staging / "bin", follow_symlinks=False)
    shutil.copy2(vendor / "models" / VOCAB, staging / "models")


def _check(found: Installation) -> None:
    """Run the installed binary once: the loader finds its libraries."""
    done = subprocess.run(
        [str(found.executable), "--version"],
        env=found.environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise BuildError(f"the installed llama-server does not run:\n{done.stderr[-2000:]}")


def build_llama_server(
    version: str = DEFAULT_VERSION,
    *,
    jobs: int | None = None,
    source: Path | None = None,
    build_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Installation:
    """The install of ``version``, built first if the cache has none.

    Downloads the sdist with pip (or takes ``source``: an sdist file or its
    unpacked folder), builds ``llama-server`` with cmake (:data:`CMAKE_FLAGS`,
    ``jobs`` parallel compiles, default: the CPUs), installs it into the cache
    and removes the sources. ``build_dir`` keeps cmake's build folder for an
    incremental rebuild. Needs cmake, a C++ compiler and, without ``source``,
    the package index. Raises :class:`BuildError` when a step fails.
    """
    found = _installation(version)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs must be an int >= 1, got {jobs!r}")
    say = progress or (lambda message: None)
    with _locked(found.root.parent / f"{version}.lock"):
        if found.complete:
            return found
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise BuildError(f"building llama-server needs {tool} on PATH")
        found.root.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=found.root.parent))
        try:
            log = work / "build.log"
            started = time.monotonic()
            sdist = _sources(version, source, work, log)
            vendor = sdist / "vendor" / "llama.cpp"
            if not (vendor / "tools" / "server").is_dir():
                raise BuildError(f"{sdist} has no vendor/llama.cpp/tools/server")
            build = build_dir or work / "build"
            say(f"building llama-server from {_PACKAGE} {version} (log: {log})")
            _run(["cmake", "-S", str(vendor), "-B", str(build), *CMAKE_FLAGS], log)
            parallel = str(jobs or os.cpu_count() or 1)
            _run(["cmake", "--build", str(build), "--target", "llama-server", "-j", parallel], log)
            seconds = round(time.monotonic() - started, 1)
            staging = work / "install"
            _install(build, vendor, staging)
            _check(Installation(staging, version))
            info = {"version": version, "cmake_flags": list(CMAKE_FLAGS), "build_seconds": seconds}
            (staging / _MARKER).write_text(json.dumps(info, indent=2) + "\n")
            if found.root.exists():
                shutil.rmtree(found.root)  # an install interrupted before its marker
            staging.rename(found.root)
            say(f"built llama-server {version} in {seconds:.0f} s: {found.executable}")
            return found
        finally:
            shutil.rmtree(work, ignore_errors=True)
