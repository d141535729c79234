"""Build the wrapper and the core library ahead of time and print their paths.

Usage: `python -m tilejit._build_tools [--force] [--verbose]` (or `python -m build_tools`
from a checkout's root).
"""

from __future__ import annotations

import argparse
import sys

from .core_build import build_core_library
from .wrapper_build import build_wrapper


def main(argv: list[str] | None = None) -> int:
    """Build both artifacts; return the process exit status.

    Example:
        >>> main(["--verbose"])
        wrapper: /home/me/.cache/tilejit/wrapper/.../_tilejit.cpython-311-x86_64-linux-gnu.so
        core: /home/me/.cache/tilejit/core/.../libtilejit_core-0b61d2e7a9f4c318.so
        0
    """
    parser = argparse.ArgumentParser(
        prog="python -m tilejit._build_tools",
        description="Build tilejit's Cython wrapper and C core library for this interpreter.",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("--verbose", "-v", action="store_true", help="print compiler commands")
    args = parser.parse_args(argv)
    try:
        print(f"wrapper: {build_wrapper(force=args.force, verbose=args.verbose)}", flush=True)
        print(f"core: {build_core_library(force=args.force, verbose=args.verbose)}", flush=True)
    except RuntimeError as exc:
        # The message already holds the failing command and the compiler's output; a
        # traceback into the build machinery would only bury it.
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
