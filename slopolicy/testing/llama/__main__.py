"""``python -m slopolicy.testing.llama build|path|model``: the cached llama-server.

- ``build``: build and install it unless the cache has it (idempotent; prints
  the binary's path, and the build time when it built);
- ``path``: print the binary's path, or exit 1 when it is not built;
- ``model``: write the tiny model (needs ``gguf``) and print its path.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from slopolicy.testing.llama.build import (
    DEFAULT_VERSION,
    BuildError,
    build_llama_server,
    find_llama_server,
)
from slopolicy.testing.llama.model import tiny_model


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m slopolicy.testing.llama", description=__doc__)
    parser.add_argument("command", choices=("build", "path", "model"))
    parser.add_argument("--version", default=DEFAULT_VERSION, help="llama-cpp-python release")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: CPUs)")
    parser.add_argument("--source", type=Path, default=None, help="an sdist file or its folder")
    parser.add_argument("--build-dir", type=Path, default=None, help="keep cmake's build folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit status."""
    args = _parser().parse_args(argv)
    found = find_llama_server(args.version)
    if args.command == "build":
        try:
            found = build_llama_server(
                args.version,
                jobs=args.jobs,
                source=args.source,
                build_dir=args.build_dir,
                progress=lambda message: print(message, file=sys.stderr),
            )
        except BuildError as error:
            print(error, file=sys.stderr)
            return 1
    if found is None:
        print(f"llama-server {args.version} is not built: run with `build`", file=sys.stderr)
        return 1
    print(tiny_model(found.vocab) if args.command == "model" else found.executable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
