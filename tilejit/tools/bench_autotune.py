"""``python -m tilejit bench --autotune``: what ``@tilejit.autotune`` gains and costs.

One run measures, on a tiled float32 matmul in C whose tile size and unrolling are the
tuned arguments (``tuned_matmul``):

1. the gain: the tuned config's latency against the factory's default config's, both
   from the same tuning (the median of ``REP`` timed runs each);
2. the cost of tuning from an empty cache: compiling the configs on one local compile
   worker, then on a 2-worker Dask ``LocalCluster`` of processes (``executor=client``) whose
   workers compile into an empty cache of their own; the cluster's start-up is its own
   row and is not counted in the tuning;
3. the cost of a tuned kernel in a fresh process: the time from ``import tilejit`` to the
   kernel, with (a) the disk cache that tuned it, (b) an empty disk cache and only a
   ``file://`` remote cache that a tuning filled, and (c) the baseline: one cached kernel
   through plain ``tilejit.compile``; the median of ``CHILD_RUNS`` processes each.

Every cache is a fresh directory under one temporary directory, seeded with copies of the
current cache's core and wrapper (so that they are not rebuilt), and removed at the end;
the user's cache is only read. Each tuning's kernel source carries a comment of its own,
so that no tuning finds another's kernels.

Benchmarks are not tests: nothing here fails on a number; missed targets are reported.

>>> python -m tilejit bench --autotune --out autotune.md
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tilejit

from .. import T, __version__
from ..builder import cache as _cache
from ..native._build import build_tools
from ..native._build import env as _env

SIZE = (384, 384, 384)
"""``(M, N, K)`` of the benchmarked matmul: a few milliseconds per run."""

DEFAULT_CONFIG = {"tile": 16, "unroll": 1}
"""The factory's defaults: what an untuned call compiles."""

CONFIGS = [*({"tile": tile, "unroll": 1} for tile in (8, 16, 32, 64, 128)),
           *({"tile": tile, "unroll": 4} for tile in (32, 64, 128))]
"""The configs tuned over; the default is one of them, so its latency is measured with
the others."""

COMPILE_FLAGS = ["-O3"]
WARMUP, REP = 2, 10
"""Untimed, then timed runs per config."""

CHILD_RUNS = 3
"""Fresh processes per row of section 3 (the median is reported)."""

RATIO_TARGET = 2.0
"""A tuned kernel in a fresh process should cost at most this many times one compile."""

_MATMUL = r"""
#define M {m}
#define N {n}
#define K {k}
#define TILE {tile}
#define MIN(a, b) ((a) < (b) ? (a) : (b))
/* {tag} */

void matmul(const float *A, const float *B, float *C) {{
  for (int i = 0; i < M * N; ++i) C[i] = 0.0f;
  for (int i0 = 0; i0 < M; i0 += TILE)
    for (int k0 = 0; k0 < K; k0 += TILE)
      for (int j0 = 0; j0 < N; j0 += TILE) {{
        const int i1 = MIN(i0 + TILE, M), k1 = MIN(k0 + TILE, K), j1 = MIN(j0 + TILE, N);
        for (int i = i0; i < i1; ++i) {{
#pragma GCC unroll {unroll}
          for (int k = k0; k < k1; ++k) {{
            const float a = A[i * K + k];
            for (int j = j0; j < j1; ++j) C[i * N + j] += a * B[k * N + j];
          }}
        }}
      }}
}}
"""


def matmul_program(M: int, N: int, K: int, tile: int, unroll: int,
                   tag: str = "") -> tilejit.Program:
    """The program of ``C = A @ B`` (float32, ``A`` M×K, ``B`` K×N) tiled over i, k and j
    in ``tile``-sized blocks, its k loop unrolled ``unroll`` times; ``tag`` is a comment
    in the source (another tag: another kernel to every cache)."""
    source = _MATMUL.format(m=M, n=N, k=K, tile=tile, unroll=unroll, tag=tag or "matmul")
    return tilejit.Program(
        name="matmul", source=source,
        params=[T.Buffer((M, K), "float32", name="A", const=True),
                T.Buffer((K, N), "float32", name="B", const=True),
                T.Buffer((M, N), "float32", name="C")])


def reference_matmul(a, b):
    """What every config must compute (autotune's ``ref_prog``)."""
    return a @ b


def tuned_matmul(tag: str = "", executor=None, workers: int | None = None):
    """The autotuned matmul factory: ``tuned_matmul(tag)(M, N, K)`` is the fastest of
    ``CONFIGS`` for that size; ``executor`` and ``workers`` are autotune's (where the
    configs compile). The same ``tag`` in another process finds the same cached choice."""

    @tilejit.autotune(configs=CONFIGS, warmup=WARMUP, rep=REP, ref_prog=reference_matmul,
                      executor=executor, workers=workers)
    @tilejit.jit(out_idx=-1, compile_flags=COMPILE_FLAGS)
    def matmul(M, N, K, tile=DEFAULT_CONFIG["tile"], unroll=DEFAULT_CONFIG["unroll"]):
        """The matmul program of one config (``tile``, ``unroll``)."""
        return matmul_program(M, N, K, tile, unroll, tag)

    return matmul


def compile_matmul(config: dict, tag: str = ""):
    """One config's kernel through plain ``tilejit.compile`` (section 3's baseline)."""
    return tilejit.compile(matmul_program(*SIZE, **config, tag=tag), out_idx=-1,
                           compile_flags=COMPILE_FLAGS)


# ---- Caches and environments ------------------------------------------------------------


@contextlib.contextmanager
def _environment(**values: str):
    """Sets environment variables for the block, then restores them."""
    saved = {name: value for name, value in os.environ.items() if name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name in values:
            if name in saved:
                os.environ[name] = saved[name]
            else:
                os.environ.pop(name, None)


def _seeded_cache(parent: Path, name: str) -> Path:
    """A fresh cache directory ``parent/name`` holding only copies of the current cache
    root's ``core`` and ``wrapper`` folders."""
    source, root = _cache.cache_dir(), parent / name
    root.mkdir()
    for area in ("core", "wrapper"):
        if (source / area).is_dir():
            shutil.copytree(source / area, root / area, symlinks=True)
    return root


def _cache_env(cache: Path, remote: str = "") -> dict[str, str]:
    """The variables of a process caching in ``cache`` with the remote cache ``remote``
    ("" for none, whatever this process's environment says)."""
    return {"TILEJIT_CACHE_DIR": str(cache), "TILEJIT_REMOTE_CACHE": remote}


# ---- Tuning -----------------------------------------------------------------------------


def _timed_tuning(cache: Path, tag: str, remote: str = "", **autotune_options):
    """Tunes ``tuned_matmul(tag)`` at ``SIZE`` caching in ``cache``; returns the record
    and the seconds it took."""
    matmul = tuned_matmul(tag, **autotune_options)
    with _environment(**_cache_env(cache, remote)):
        start = time.perf_counter()
        record = matmul.tuning(*SIZE)
        elapsed = time.perf_counter() - start
    if record.from_cache:
        raise RuntimeError(f"the tuning {tag!r} found a cached choice in an empty cache")
    return record, elapsed


def _prepare_worker(cache: str) -> None:
    """Run on every Dask worker: compile into ``cache``, without a remote cache. Sending
    this function imports this module, so tilejit too, before anything is timed."""
    os.environ.update(_cache_env(Path(cache)))


def _dask_tuning(workdir: Path, tag: str):
    """Tunes on a 2-worker Dask ``LocalCluster``; returns the cluster's start-up seconds
    (workers started, their caches set, tilejit imported on them), the record and the
    tuning's seconds. None when dask.distributed is not installed."""
    try:
        import distributed
    except ImportError:
        return None
    import logging

    start = time.perf_counter()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        client.run(_prepare_worker, str(_seeded_cache(workdir, "dask-workers")))
        startup = time.perf_counter() - start
        record, elapsed = _timed_tuning(_seeded_cache(workdir, "dask-main"), tag,
                                        executor=client)
    return startup, record, elapsed


# ---- Fresh processes --------------------------------------------------------------------

_CHILD = """
import json, sys, time
start = time.perf_counter()
import tilejit
from tilejit.tools import bench_autotune as bench
mode, tag, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if mode == "tuned":
    record = bench.tuned_matmul(tag).tuning(*bench.SIZE)
    kernel, from_cache = record.kernel, record.from_cache
else:
    kernel, from_cache = bench.compile_matmul(config, tag), None
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "from_cache": from_cache}))
"""


def _child(mode: str, tag: str, env: dict[str, str], config: dict | None = None) -> dict:
    """Runs ``_CHILD`` in a fresh interpreter with ``env`` added to this environment;
    returns what it printed: the seconds from ``import tilejit`` to the kernel, and
    whether the choice came from a cache."""
    package_parent = str(Path(tilejit.__file__).resolve().parents[1])
    paths = [package_parent, *filter(None, [_env.text("PYTHONPATH")])]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, tag, json.dumps(config or {})],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), **env},
        capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} child process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fresh_processes(workdir: Path, warm: Path, local_tag: str, remote_url: str,
                     remote_tag: str, chosen: dict) -> dict[str, list[dict]]:
    """``CHILD_RUNS`` fresh processes of each kind, interleaved: ``warm`` the tuned kernel
    from the disk cache that tuned it, ``remote`` from only the remote cache (each in an
    empty local cache), ``compile`` the chosen config's cached kernel via tilejit.compile."""
    runs: dict[str, list[dict]] = {"warm": [], "remote": [], "compile": []}
    for n in range(CHILD_RUNS):
        runs["warm"].append(_child("tuned", local_tag, _cache_env(warm)))
        empty = _seeded_cache(workdir, f"remote-reader-{n}")
        runs["remote"].append(_child("tuned", remote_tag, _cache_env(empty, remote_url)))
        runs["compile"].append(_child("compile", local_tag, _cache_env(warm), chosen))
    return runs


# ---- The report -------------------------------------------------------------------------


def _describe(config: dict) -> str:
    """``tile=64, unroll=4``: a config as the table shows it."""
    return ", ".join(f"{name}={value}" for name, value in config.items())


def _ms(seconds: float) -> str:
    """Seconds shown in milliseconds."""
    return f"{seconds * 1e3:.2f} ms"


def _s(seconds: float) -> str:
    """Seconds shown as seconds."""
    return f"{seconds:.2f} s"


def _latency_of(record, config: dict) -> float:
    """The latency ``record``'s tuning measured for ``config``."""
    trial = next(trial for trial in record.trials if trial.config == config)
    if trial.latency is None:
        raise RuntimeError(f"the config {_describe(config)} failed: {trial.error}")
    return trial.latency


def _running_estimate(record) -> float:
    """The seconds a tuning spent running the configs, estimated: each config's median
    latency times its runs (one check against ``ref_prog``, the warm-up and timed runs)."""
    return sum(trial.latency for trial in record.trials
               if trial.latency is not None) * (1 + WARMUP + REP)


def _median_seconds(runs: list[dict]) -> float:
    """The median of the fresh processes' times to their kernel."""
    return statistics.median(run["seconds"] for run in runs)


def _cache_note(runs: list[dict]) -> str:
    """Empty when every run took its choice from a cache, else what went wrong."""
    missed = sum(not run["from_cache"] for run in runs)
    return "" if not missed else f" ({missed} of {len(runs)} runs tuned again!)"


def _ratio_cell(value: float, base: float) -> str:
    """``value / base`` and whether it meets ``RATIO_TARGET``."""
    ratio = value / base
    verdict = "met" if ratio <= RATIO_TARGET else "missed"
    return f"{ratio:.2f}× (target ≤ {RATIO_TARGET:g}×: {verdict})"


def _header() -> list[str]:
    """The report's title, the machine and the method, above the table."""
    from .bench import _cpu_model, _version

    m, n, k = SIZE
    machine = (f"machine: {platform.platform()}, {_cpu_model()} ({os.cpu_count()} logical "
               f"CPUs) · python {platform.python_version()} · dask.distributed "
               f"{_version('distributed')} · tilejit {__version__}")
    configs = "; ".join(_describe(c) for c in CONFIGS)
    method = (f"kernel: float32 matmul {m}×{k} @ {k}×{n} in C, tiled over i, k, j "
              f"({' '.join(COMPILE_FLAGS)}); {len(CONFIGS)} configs ({configs}); {WARMUP} "
              f"warm-up and {REP} timed runs per config, the median; fresh processes: the "
              f"median of {CHILD_RUNS}")
    return ["# tilejit bench --autotune: tuning a tiled matmul", "", machine, "", method, ""]


def _progress(text: str) -> None:
    """Says on stderr what the bench does now (the table goes to stdout)."""
    print(f"{text}…", file=sys.stderr, flush=True)


def _gain_rows(local) -> list[tuple[str, str]]:
    """Section 1: the tuned config against the factory's default, from one tuning."""
    default = _latency_of(local, DEFAULT_CONFIG)
    return [("tuned config", _describe(local.config)),
            ("tuned config's latency", _ms(local.latency)),
            (f"default config's latency ({_describe(DEFAULT_CONFIG)})", _ms(default)),
            ("speed-up, tuned vs default", f"{default / local.latency:.2f}×")]


def _tuning_rows(local, local_s: float, dask) -> list[tuple[str, str]]:
    """Section 2: tuning from an empty cache on 1 local compile worker and on Dask."""
    runs = 1 + WARMUP + REP
    rows = [(f"tuning from an empty cache, 1 local compile worker ({len(CONFIGS)} configs)",
             _s(local_s)),
            (f"… of which running the configs (estimated: Σ latency × {runs} runs)",
             _s(_running_estimate(local)))]
    if dask is None:
        return [*rows, ("tuning on a 2-worker Dask LocalCluster",
                        "— (dask.distributed is not installed: pip install 'tilejit[dask]')")]
    startup, dask_record, dask_s = dask
    return [*rows,
            ("Dask LocalCluster start-up, tilejit imported on its 2 workers (not below)",
             _s(startup)),
            ("tuning from an empty cache, 2 Dask workers (executor=client)",
             f"{_s(dask_s)} (chose {_describe(dask_record.config)})"),
            ("speed-up, 2 Dask workers vs 1 local worker", f"{local_s / dask_s:.2f}×")]


def _fresh_process_rows(runs: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """Section 3: a fresh process's time to the tuned kernel against one compile's."""
    warm, remote, baseline = (_median_seconds(runs[kind])
                              for kind in ("warm", "remote", "compile"))
    return [("fresh process → tuned kernel, warm disk cache (a)",
             _ms(warm) + _cache_note(runs["warm"])),
            ("fresh process → tuned kernel, empty disk cache + file:// remote cache (b)",
             _ms(remote) + _cache_note(runs["remote"])),
            ("fresh process → one cached kernel, plain tilejit.compile (c, baseline)",
             _ms(baseline)),
            ("(a) / (c)", _ratio_cell(warm, baseline)),
            ("(b) / (c)", _ratio_cell(remote, baseline))]


def run() -> str:
    """Runs the benchmark; returns the markdown report (the header and one table)."""
    build_tools.build_wrapper()  # and the core: built now if missing, for _seeded_cache
    stamp = f"{os.getpid()}-{time.time_ns()}"
    with tempfile.TemporaryDirectory(prefix="tilejit-bench-autotune-") as tmp:
        workdir = Path(tmp)
        _progress("tuning with 1 local compile worker")
        local_tag, local_cache = f"local {stamp}", _seeded_cache(workdir, "local")
        local, local_s = _timed_tuning(local_cache, local_tag, workers=1)
        _progress("tuning on a 2-worker Dask LocalCluster")
        dask = _dask_tuning(workdir, f"dask {stamp}")
        _progress("tuning with a file:// remote cache")
        remote_dir = workdir / "remote"
        remote_dir.mkdir()
        remote_url, remote_tag = f"file://{remote_dir}", f"remote {stamp}"
        _timed_tuning(_seeded_cache(workdir, "remote-writer"), remote_tag, remote_url)
        _progress(f"timing {3 * CHILD_RUNS} fresh processes")
        runs = _fresh_processes(workdir, local_cache, local_tag, remote_url, remote_tag,
                                local.config)
    rows = [*_gain_rows(local), *_tuning_rows(local, local_s, dask),
            *_fresh_process_rows(runs)]
    lines = [*_header(), "| what | figure |", "|---|---|"]
    lines += [f"| {what} | {figure} |" for what, figure in rows]
    return "\n".join(lines) + "\n"


def main(args) -> int:
    """Entry point of ``python -m tilejit bench --autotune``; ``args.out``, when set, is a
    file that also receives the report."""
    start = time.perf_counter()
    report = run()
    print(report, end="")
    out = getattr(args, "out", None)
    if out:
        Path(out).write_text(report)
    print(f"\n(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0
