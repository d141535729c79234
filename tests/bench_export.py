"""Export and load figures (a benchmark, not a test): ``python tests/bench_export.py``.

1. In a fresh process each time, the time to get a callable kernel: ``tilejit.load`` of an
   export, beside ``tilejit.compile`` of the same program found in the disk cache (warm).
2. Per-call cost of the loaded kernel beside the original (no-op CPU kernel, three torch
   tensors, ``cython`` backend): median ns of 11 runs of 100 000 calls.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

import torch

import tilejit
from tilejit import T

SOURCE = "void noop(const float *A, const float *B, float *C, int64_t n) { (void)A; }\n"


def program():
    n = T.symbol("n")
    return tilejit.Program("noop", [T.Buffer((n,), "float32", name="A", const=True),
                                    T.Buffer((n,), "float32", name="B", const=True),
                                    T.Buffer((n,), "float32", name="C")], SOURCE)


CHILD = r"""
import sys, time
start = time.perf_counter()
import tilejit
from tilejit import T
imported = time.perf_counter()
if sys.argv[1] == "load":
    k = tilejit.load(sys.argv[2])
else:
    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program("noop", [
        T.Buffer((n,), "float32", name="A", const=True),
        T.Buffer((n,), "float32", name="B", const=True),
        T.Buffer((n,), "float32", name="C")], sys.argv[3]))
done = time.perf_counter()
print((done - imported) * 1e3, (done - start) * 1e3)
"""


def fresh(mode: str, directory: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, directory, SOURCE],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    kernel = tilejit.compile(program())
    directory = kernel.export(Path(tempfile.mkdtemp()) / "noop")
    loaded = tilejit.load(directory)
    print("| in a fresh process (median of 7) | get the kernel, ms | import + get, ms |")
    print("|---|---:|---:|")
    for mode, label in (("compile", "tilejit.compile, warm disk cache"),
                        ("load", "tilejit.load of the export")):
        runs = [fresh(mode, str(directory)) for _ in range(7)]
        print(f"| {label} | {statistics.median(r[0] for r in runs):.2f} | "
              f"{statistics.median(r[1] for r in runs):.1f} |")
    a, b, c = torch.rand(16), torch.rand(16), torch.rand(16)
    print("\n| per call (median of 11 x 100 000) | ns |\n|---|---:|")
    for label, k in (("original", kernel), ("loaded", loaded)):
        runs = timeit.repeat(lambda k=k: k(a, b, c), number=100_000, repeat=11)
        print(f"| {label} | {statistics.median(runs) / 100_000 * 1e9:.0f} |")


if __name__ == "__main__":
    main()
