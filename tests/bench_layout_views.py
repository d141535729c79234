"""Per-call host time of one kernel given pre-converted views vs the same kernel given torch
tensors, and of implicit conversion. Not a test: run it.

    python tests/bench_layout_views.py [calls] [repeats]

Prints the median over ``repeats`` timeit runs of ``calls`` calls each, in ns per call.
"""

from __future__ import annotations

import statistics
import sys
import timeit

import torch

import tilejit
from tilejit import T

NOOP = "void noop(const float *A, const float *B, float *C, int64_t n) { (void)A; (void)B; " \
       "(void)C; (void)n; }"


def median_ns(fn, calls, repeats):
    fn()
    runs = timeit.repeat(fn, number=calls, repeat=repeats)
    return statistics.median(runs) / calls * 1e9


def main(calls=100_000, repeats=7):
    n = T.symbol("n")
    prog = tilejit.Program(name="noop", source=NOOP, params=[
        T.Buffer((n,), "float32", name="A", const=True),
        T.Buffer((n,), "float32", name="B", const=True),
        T.Buffer((n,), "float32", name="C")])
    a, b, c = torch.rand(1024), torch.rand(1024), torch.empty(1024)
    va, vb, vc = (tilejit.from_dlpack(t) for t in (a, b, c))

    @tilejit.jit(layout="dynamic")
    def noop(A, B, C):
        source = NOOP.replace("const float *A, const float *B", "float *A, float *B")
        source = source.replace("int64_t n", "int64_t A_shape0, int64_t B_shape0, "
                                "int64_t C_shape0").replace("(void)n;", "")
        return tilejit.Program(name="noop", source=source, params=[A, B, C])

    rows = []
    for backend in ("cython", "ctypes"):
        k = tilejit.compile(prog, execution_backend=backend)
        rows.append((backend, "torch tensors",
                     median_ns(lambda k=k: k(a, b, c), calls, repeats)))
        rows.append((backend, "pre-converted views",
                     median_ns(lambda k=k: k(va, vb, vc), calls, repeats)))
    rows.append(("cython", "from_dlpack(torch tensor) alone",
                 median_ns(lambda: tilejit.from_dlpack(a), calls, repeats)))
    rows.append(("cython", 'jit(layout="dynamic") call, torch tensors',
                 median_ns(lambda: noop(a, b, c), calls, repeats)))
    print(f"torch {torch.__version__}, {calls} calls x {repeats} runs, median ns/call")
    for backend, what, ns in rows:
        print(f"  {backend:7s} {what:45s} {ns:8.0f}")


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:3]))
