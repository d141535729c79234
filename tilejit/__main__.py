"""``python -m tilejit {build,demo,bench,gpu-check,doctor,config,cache,version}``."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .builder.cache import main as cache_main
from .builder.export import config_flags
from .native._build import build_tools, disk_cache
from .tools import bench as _bench
from .tools import bench_autotune as _bench_autotune
from .tools import bench_cuda as _bench_cuda
from .tools import demo as _demo
from .tools import doctor as _doctor


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilejit")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_commands(sub)
    args = parser.parse_args(argv)
    return _run(args, sub.choices["config"])


def _add_commands(sub) -> None:
    build = sub.add_parser("build", help="build and cache the wrapper and the core for this "
                                         "interpreter ahead of time")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    demo = sub.add_parser("demo", help="compile and run the demo kernels on torch tensors")
    demo.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                      help="cpu (default), or cuda: the same kernels in CUDA C on the GPU")
    demo.add_argument("--tilelang", action="store_true",
                      help="run TileLang kernels through tilejit (target c; CUDA too when a "
                           "GPU is present); needs tilelang (pip install 'tilejit[tilelang]')")
    _add_bench(sub.add_parser("bench", help="time the host overhead per call against the peers "
                                            "(docs/cli.md) and print a markdown table"))
    doctor = sub.add_parser("doctor", help="what this installation has and uses: versions, "
                                           "compilers, builds, CUDA, fast paths")
    doctor.add_argument("--json", action="store_true", help="print it as JSON")
    config = sub.add_parser("config", help="compiler and linker flags for a C or C++ program "
                                           "that opens exported kernels (docs/export.md)")
    for flag, text in (("--cflags", "the compiler flags (the include directory)"),
                       ("--libs", "the core library's linker flags (-L, -l, rpath)"),
                       ("--includedir", "the include directory alone"),
                       ("--libdir", "the core library's directory alone")):
        config.add_argument(flag, action="store_true", help=text)
    _add_cache(sub.add_parser("cache", help="look at and manage the disk cache "
                                            "(docs/caching.md)"))
    gpu = sub.add_parser("gpu-check", help="on a GPU machine, one prepared run of at most 8 "
                                           "minutes: CUDA tests, bench, torch, JAX, CuPy; "
                                           "writes report.md and figures.json")
    gpu.add_argument("out", help="the folder for report.md and figures.json")
    gpu.add_argument("--dry-run", action="store_true",
                     help="no GPU: the test driver and the test CuPy where they serve")
    gpu.add_argument("--only", help="comma-separated steps to run (default: all)")
    sub.add_parser("version", help="print the version")


def _add_bench(bench) -> None:
    bench.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                       help="cpu (default), or cuda: CUDA launches on the GPU against a raw "
                            "cuLaunchKernel loop, host enqueue and launch plus sync")
    bench.add_argument("--calls", type=int,
                       help="calls per timed repeat (default 100000; 20000 with --target cuda)")
    bench.add_argument("--repeats", type=int,
                       help="timed repeats per row (default 11; 7 with --target cuda)")
    bench.add_argument("--out", help="also write the table to this file")
    bench.add_argument("--quick", action="store_true",
                       help="skip peers that take long to build (the pybind11 extension); "
                            "with --jax, fewer calls and repeats: under a minute")
    bench.add_argument("--torch-compile", action="store_true",
                       help="instead: a tilejit kernel inside torch.compile (inductor), next "
                            "to torch.add")
    bench.add_argument("--jax", action="store_true",
                       help="instead: a tilejit kernel called with JAX arrays (jitted and "
                            "eager), next to jax.numpy (default 20000 calls per repeat)")
    bench.add_argument("--autotune", action="store_true",
                       help="instead: @tilejit.autotune on a tiled CPU matmul: the tuned "
                            "config against the default, tuning from an empty cache on 1 "
                            "local worker and on a 2-worker Dask cluster, and a fresh "
                            "process's time to the tuned kernel (disk, remote cache)")
    bench.add_argument("--startup", action="store_true",
                       help="instead: a fresh process's import, cached compile and first "
                            "call, on NumPy, torch and JAX (whichever are installed)")


def _add_cache(cache) -> None:
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    ls = cache_sub.add_parser("ls", help="one line per entry: key, kind, name, target, "
                                         "architecture, size, created, last used")
    ls.add_argument("--json", action="store_true", help="a JSON list of objects")
    kinds = ("kernel", "tuning", "core", "wrapper", "bench", "probe")
    ls.add_argument("--kind", choices=kinds, help="only entries of this kind")
    cache_sub.add_parser("size", help="total bytes and entry count")
    verify = cache_sub.add_parser("verify", help="re-check every entry's files; exit 1 if "
                                                 "any is damaged")
    verify.add_argument("--fix", action="store_true", help="remove the damaged entries")
    prune = cache_sub.add_parser("prune", help="remove least recently used entries")
    prune.add_argument("--max-size", metavar="SIZE", help="keep at most SIZE (500M, 2G)")
    prune.add_argument("--older-than", metavar="DURATION",
                       help="remove entries not used for DURATION (30m, 12h, 7d)")
    clear = cache_sub.add_parser("clear", help="remove every entry (or every one of a kind)")
    clear.add_argument("--kind", choices=kinds, help="only entries of this kind (tuning: "
                                                     "autotuned choices)")
    cache_sub.add_parser("path", help="print the cache directory")
    remote = cache_sub.add_parser("remote", help="the remote cache (TILEJIT_REMOTE_CACHE): "
                                                 "address, reachability, entries, this "
                                                 "process's hits, misses and publishes")
    remote.add_argument("--json", action="store_true", help="print it as JSON")


def _run(args, config) -> int:
    """The command ``args`` names (``config``: its parser, for its usage error)."""
    if args.command == "build":
        print(f"wrapper: {build_tools.build_wrapper(force=args.force, verbose=True)}")
        print(f"core:    {build_tools.build_core_library(force=args.force)}")
        return 0
    if args.command == "bench" and args.startup:
        from .tools import bench_startup

        return bench_startup.main(args.out, runs=args.repeats or bench_startup.RUNS)
    if args.command == "bench" and args.autotune:
        return _bench_autotune.main(args)
    if args.command == "bench":
        return (_bench_cuda if args.target == "cuda" else _bench).main(args)
    if args.command == "gpu-check":
        from .tools import gpu_check

        return gpu_check.main([args.out, *(["--dry-run"] if args.dry_run else []),
                               *(["--only", args.only] if args.only else [])])
    if args.command == "doctor":
        return _doctor.main(as_json=args.json)
    if args.command == "cache":
        return cache_main(args)
    if args.command == "config":
        if not (args.cflags or args.libs or args.includedir or args.libdir):
            config.error("give --cflags, --libs, --includedir or --libdir")
        return _config(args)
    if args.command == "demo":
        if args.tilelang:
            return 0 if _demo.run_tilelang() else 1
        return 0 if _demo.run(target=args.target) else 1
    print(__version__)
    return 0


def _config(args) -> int:
    """``config``: the flags, or exit 1 where they would name a directory that does not
    outlive this command (a cache directory that cannot be used)."""
    try:
        flags = config_flags(args.cflags, args.libs, args.includedir, args.libdir)
    except Exception as exc:  # noqa: BLE001 - said in one line, exit 1
        print(f"python -m tilejit config: cannot find or build the core: {exc}", file=sys.stderr)
        return 1
    private = disk_cache.private_root()
    if private is not None and str(private[0]) in flags:
        print(f"python -m tilejit config: the core library cannot be kept in the cache "
              f"directory {disk_cache.configured_root()} ({private[1]}); the directory this "
              f"command would print ({private[0]}) is removed when it exits. Set "
              f"TILEJIT_CACHE_DIR to a writable directory.", file=sys.stderr)
        return 1
    print(flags)
    return 0


def run() -> int:
    """``main`` as a command: output piped into a reader that stops early (``| head``)
    ends it quietly, as it ends other Unix commands."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Nothing more can be written; stdout goes to /dev/null so that the interpreter's
        # own flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command a pipe ended


if __name__ == "__main__":
    sys.exit(run())
