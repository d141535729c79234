"""``python -m tilejit {build,demo,version}``."""

from __future__ import annotations

import argparse
import sys


def _build_tools():
    try:
        from . import _build_tools
    except ImportError:  # a source checkout on sys.path, not installed
        import build_tools as _build_tools
    return _build_tools


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilejit")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and cache the wrapper and the core for this "
                                         "interpreter ahead of time")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("demo", help="compile and run the demo kernels on torch tensors")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)

    if args.command == "build":
        tools = _build_tools()
        print(f"wrapper: {tools.build_wrapper(force=args.force, verbose=True)}")
        print(f"core:    {tools.build_core_library(force=args.force)}")
        return 0
    if args.command == "demo":
        from .demo import run

        return 0 if run() else 1
    from . import __version__

    print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
