"""Per-call cost of tilejit CUDA launches on a real GPU, beside torch.add (a benchmark,
not a test): ``python tests/bench_cuda.py`` from the repository root, on a machine with a
CUDA GPU and a CUDA build of torch. Each row is the wall time per call, the launch
included, of a float32 vector add over 1024 elements, median of 7 runs of 20 000 calls.
"""

import statistics
import sys
import time
from pathlib import Path

import torch

import tilejit

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda import vec_add_program

dev = torch.device("cuda")
n = 1024
a, b, c = (torch.rand(n, device=dev) for _ in range(3))
CALLS, REPEATS = 20000, 7


def timeit(f):
    for _ in range(2000):
        f()
    torch.cuda.synchronize()
    runs = []
    for _ in range(REPEATS):
        t = time.perf_counter_ns()
        for _ in range(CALLS):
            f()
        torch.cuda.synchronize()
        runs.append((time.perf_counter_ns() - t) / CALLS)
    return statistics.median(runs)


rows = [("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c)),
        ("torch.add(a, b) (allocates)", lambda: torch.add(a, b))]
for backend in ("cython", "ctypes", "dlpack"):
    k = tilejit.compile(vec_add_program(), target="cuda", execution_backend=backend)
    ko = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda", execution_backend=backend)
    k(a, b, c)
    torch.testing.assert_close(c, a + b)
    rows.append((f"tilejit {backend} k(a, b, c)", lambda k=k: k(a, b, c)))
    rows.append((f"tilejit {backend} out_idx k(a, b)", lambda k=ko: k(a, b)))
    if backend == "cython":
        op = ko.torch_op
        rows.append(("tilejit torch_op(a, b)", lambda op=op: op(a, b)))
print(f"{torch.cuda.get_device_name()} torch {torch.__version__}, n={n}, "
      f"{CALLS} calls x {REPEATS}, median ns per call (wall, incl. launch)")
for name, f in rows:
    print(f"| {name} | {timeit(f):.0f} |")
