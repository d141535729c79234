"""Compile times: cold, warm disk cache in a new process, in-process jit hit.

    python tests/bench_compile.py

Not a test: it prints figures for notes. Uses a private TILEJIT_CACHE_DIR; the wrapper is
built first so that "cold" is a kernel compile only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit

CHILD = r"""
import time
import tilejit
from tilejit import T
n = T.symbol("n")
prog = tilejit.Program("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                                   T.Buffer((n,), "float32", name="B", const=True),
                                   T.Buffer((n,), "float32", name="C")],
                       "void vec_add(const float *A, const float *B, float *C, int64_t n) "
                       "{ for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i]; }")
start = time.perf_counter()
tilejit.compile(prog, out_idx=-1)
print((time.perf_counter() - start) * 1e3)
"""


def _child_ms(env) -> float:
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    cache = tempfile.mkdtemp(prefix="tilejit-bench-compile-")
    env = {**os.environ, "TILEJIT_CACHE_DIR": cache}
    subprocess.run([sys.executable, "-m", "tilejit", "build"], env=env, check=True,
                   capture_output=True)
    cold = []
    for _ in range(5):
        shutil.rmtree(os.path.join(cache, "kernels"), ignore_errors=True)
        cold.append(_child_ms(env))
    warm = [_child_ms(env) for _ in range(5)]
    os.environ["TILEJIT_CACHE_DIR"] = cache
    import tilejit
    from tilejit import T

    @tilejit.jit(out_idx=-1)
    def vec_add(block: int = 256):
        n = T.symbol("n")
        return tilejit.Program("vec_add", [T.Buffer((n,), "float32", name="A"),
                                           T.Buffer((n,), "float32", name="B"),
                                           T.Buffer((n,), "float32", name="C")],
                               "void vec_add(float *A, float *B, float *C, int64_t n) "
                               "{ for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i]; }")

    vec_add()
    hit = min(timeit.repeat(vec_add, number=100_000, repeat=5)) / 100_000 * 1e6
    print(f"cold compile (new process, empty kernel cache): median {statistics.median(cold):.1f} ms")
    print(f"warm disk cache (new process):                  median {statistics.median(warm):.1f} ms")
    print(f"in-process jit hit:                              {hit:.2f} us")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
