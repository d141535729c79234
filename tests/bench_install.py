"""Cold compiles and first calls (a benchmark, not a test): ``python tests/bench_install.py``.

1. ``tilejit.compile_many`` of 8 distinct CPU kernels with 2 workers, beside compiling them
   one by one, each into an empty kernel cache (the core and the wrapper already built).
2. The first kernel call in a fresh environment, in a new process with an empty cache:
   from this checkout (the core and the wrapper are built at run time), and from a wheel
   of it installed into a fresh virtual environment (they come built).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import tilejit
from tilejit import T

ROOT = Path(__file__).resolve().parent.parent

FIRST_CALL = textwrap.dedent("""
    import numpy as np, tilejit
    from tilejit import T
    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program("first", [T.Buffer((n,), "float32", name="X")],
                                        "void first(float *X, int64_t n) { X[0] = 1; }"))
    k(np.zeros(1, np.float32))
""")


def programs(tag: str) -> list:
    n = T.symbol("n")
    return [tilejit.Program(f"k{i}", [T.Buffer((n,), "float32", name="X")],
                            f"// {tag}\nvoid k{i}(float *X, int64_t n) {{\n"
                            f"  for (int64_t j = 0; j < n; ++j) X[j] = X[j] * {i} + j;\n}}\n")
            for i in range(8)]


def compiles() -> None:
    seed = Path(tempfile.mkdtemp())
    for label, run in (("one by one", lambda ps: [tilejit.compile(p) for p in ps]),
                       ("compile_many, 2 workers",
                        lambda ps: tilejit.compile_many(ps, workers=2, progress=False))):
        times = []
        for attempt in range(3):
            os.environ["TILEJIT_CACHE_DIR"] = str(seed / f"{label}-{attempt}")
            tilejit.compile(programs("warm")[0])  # the core and wrapper, not timed
            start = time.perf_counter()
            run(programs(f"{label}-{attempt}"))
            times.append(time.perf_counter() - start)
        print(f"| {label} | {min(times) * 1e3:.0f} ms |")
    shutil.rmtree(seed)


def first_calls() -> None:
    work = Path(tempfile.mkdtemp())
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(work)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(work / "venv")],
                   check=True)
    venv = work / "venv" / "bin" / "python"
    subprocess.run([str(venv), "-m", "pip", "install", "-q", "--no-deps",
                    *map(str, work.glob("*.whl"))], check=True)
    env = {k: v for k, v in os.environ.items() if k != "TILEJIT_CACHE_DIR"}
    for label, python, extra in (("from the checkout (builds core + wrapper)", sys.executable,
                                  {"PYTHONPATH": str(ROOT)}),
                                 ("installed wheel (prebuilt)", str(venv), {})):
        cache = work / f"cache-{len(label)}"
        start = time.perf_counter()
        subprocess.run([python, "-c", FIRST_CALL], check=True, cwd="/",
                       env={**env, **extra, "TILEJIT_CACHE_DIR": str(cache)},
                       stderr=subprocess.DEVNULL)
        print(f"| first call, {label} | {time.perf_counter() - start:.2f} s |")
    shutil.rmtree(work)


if __name__ == "__main__":
    print("| cold, 8 CPU kernels | time (best of 3) |\n|---|---:|")
    compiles()
    print("\n| fresh environment, new process, empty cache | wall |\n|---|---:|")
    first_calls()
