"""``python -m tilejit bench --startup``: what a fresh process pays before its first kernel
call returns, with the kernel already in the disk cache.

For each installed framework (NumPy, torch, JAX), ``RUNS`` fresh interpreters each time,
in order:

1. importing the framework and making one array of 1000 float32 (not tilejit's cost,
   reported for scale);
2. ``import tilejit``;
3. ``tilejit.compile`` of a small C kernel, found in the disk cache;
4. the kernel's first call on that array, and then its second (what a warm call costs).

The rows give the median of each step; "beyond the framework" is steps 2 to 4, which
should stay within ``TARGET_MS``. A first process compiles the kernel into the cache and is
not timed. The torch row also counts the modules of ``torch._dynamo`` and
``torch._inductor`` loaded by then (none should be: nothing was compiled with
``torch.compile``).

Benchmarks are not tests: nothing here fails on a number; missed targets are reported.

>>> python -m tilejit bench --startup
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from .. import __version__

RUNS = 5
"""Fresh processes per framework (the median is reported)."""

TARGET_MS = 100.0
"""The most a fresh process should pay beyond importing its framework."""

FRAMEWORKS = ("numpy", "torch", "jax")

_CHILD = r"""
import json, sys, time
framework = sys.argv[1]
t0 = time.perf_counter()
if framework == "numpy":
    import numpy
    x = numpy.linspace(-1, 1, 1000, dtype=numpy.float32)
elif framework == "torch":
    import torch
    x = torch.linspace(-1, 1, 1000)
else:
    import jax.numpy as jnp
    x = jnp.linspace(-1, 1, 1000, dtype=jnp.float32)
t1 = time.perf_counter()
import tilejit
from tilejit import T
t2 = time.perf_counter()
n = T.symbol("n")
program = tilejit.Program(
    name="startup_relu",
    params=[T.Buffer((n,), "float32", name="X", const=True),
            T.Buffer((n,), "float32", name="Y")],
    source="void startup_relu(const float *X, float *Y, int64_t n) {"
           " for (int64_t i = 0; i < n; ++i) Y[i] = X[i] > 0 ? X[i] : 0; }")
kernel = tilejit.compile(program, out_idx=-1)
t3 = time.perf_counter()
y = kernel(x)
t4 = time.perf_counter()
kernel(x)
t5 = time.perf_counter()
assert float(y[999]) == 1.0 and float(y[0]) == 0.0, "wrong result"
traced = [m for m in sys.modules if m.startswith(("torch._dynamo", "torch._inductor"))]
print(json.dumps({"framework": (t1 - t0) * 1e3, "import": (t2 - t1) * 1e3,
                  "compile": (t3 - t2) * 1e3, "first": (t4 - t3) * 1e3,
                  "second": (t5 - t4) * 1e6, "traced_modules": len(traced)}))
"""


def installed() -> list[str]:
    """The frameworks of ``FRAMEWORKS`` this interpreter can import."""
    return [name for name in FRAMEWORKS if importlib.util.find_spec(name) is not None]


def _child(framework: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, framework], capture_output=True,
                          text=True, timeout=600, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {framework} process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(framework: str, runs: int = RUNS, progress=None) -> dict:
    """The median of each step over ``runs`` fresh processes, after one untimed process
    that puts the kernel in the cache."""
    _child(framework)
    samples = []
    for i in range(runs):
        if progress is not None:
            progress(f"{framework}: process {i + 1} of {runs}")
        samples.append(_child(framework))
    row = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
    row["beyond"] = statistics.median(s["import"] + s["compile"] + s["first"] for s in samples)
    return row


def run(runs: int = RUNS, progress=None) -> tuple[str, bool]:
    """The markdown report, and whether every framework met the target."""
    title = (f"# Start-up: a cached kernel's first call in a fresh process (tilejit "
             f"{__version__}, Python {platform.python_version()}, {platform.machine()})")
    scope = (f"Median of {runs} fresh processes per framework. Target: at most "
             f"{TARGET_MS:.0f} ms beyond importing the framework.")
    header = ("| framework | import framework ms | import tilejit ms | cached compile ms "
              "| first call ms | beyond framework ms | second call us | torch.compile modules "
              "| target |")
    lines = [title, "", scope, "", header,
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    ok = True
    for framework in FRAMEWORKS:
        if framework not in installed():
            lines.append(f"| {framework} | not installed | | | | | | | |")
            continue
        row = measure(framework, runs, progress)
        met = row["beyond"] <= TARGET_MS
        ok = ok and met
        lines.append(f"| {framework} | {row['framework']:.0f} | {row['import']:.1f} "
                     f"| {row['compile']:.1f} | {row['first']:.1f} | {row['beyond']:.1f} "
                     f"| {row['second']:.1f} | {row['traced_modules']:.0f} "
                     f"| {'met' if met else 'MISSED'} |")
    return "\n".join(lines) + "\n", ok


def main(out: str | None = None, runs: int = RUNS) -> int:
    start = time.perf_counter()
    tty = sys.stderr.isatty()

    def progress(line: str) -> None:
        if tty:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)

    report, ok = run(runs, progress)
    if tty:
        print("\r\033[K", end="", file=sys.stderr)
    print(report, end="")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(report)
    print(f"\n(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0 if ok else 1
