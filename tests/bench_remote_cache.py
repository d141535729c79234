"""The remote cache's figures: time to the first call on a machine with an empty local
cache (remote hit against local compile), and a storm of machines starting together.

    python tests/bench_remote_cache.py [--machines 8] [--redis | --file]

Not a test: it prints figures for notes. Each "machine" is a child process with a local
cache of its own (holding the core and the wrapper, which are built per machine), started
together; the remote is a redis-server started here on 127.0.0.1 (Debian's package), or a
shared directory. Compiles are counted by a compiler that logs its command lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A C++ kernel heavy on templates (<regex> above all): it compiles in about as long as a
# TileLang GEMM does under nvcc (3 s), and is the suite's slowest kind of CPU kernel.
CHILD = r"""
import sys, time
start = time.perf_counter()
import numpy as np, tilejit
from tilejit import T
n = T.symbol("n")
name = sys.argv[1]
source = '''
#include <algorithm>
#include <complex>
#include <numeric>
#include <vector>
#include <functional>
#include <map>
#include <regex>
#include <string>
extern "C" void %s(const float *X, float *Y, int64_t n) {
  static const std::regex digits("[0-9]+(\\.[0-9]*)?");
  if (!std::regex_match(std::to_string(n), digits)) return;
  std::vector<std::complex<float>> v(X, X + n);
  std::map<int, float> m;
  for (int64_t i = 0; i < n; ++i) m[(int)i] = std::abs(v[i]);
  std::vector<float> s(n);
  std::transform(v.begin(), v.end(), s.begin(), [](auto c) { return std::norm(c); });
  std::stable_sort(s.begin(), s.end(), std::greater<float>());
  float total = std::accumulate(s.begin(), s.end(), 0.0f);
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * 2.0f + 0.0f * total + 0.0f * m[(int)i];
}
''' % name
prog = tilejit.Program(name=name, source=source, language="c++",
                       params=[T.Buffer((n,), "float32", name="X"),
                               T.Buffer((n,), "float32", name="Y")])
kernel = tilejit.compile(prog, out_idx=-1)
out = kernel(np.ones(4, np.float32))
assert out.tolist() == [2.0] * 4, out
print(time.perf_counter() - start)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env_for(root: Path, remote: str | None, log: Path, cxx: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEJIT_")}
    env.update(TILEJIT_CACHE_DIR=str(root), TILEJIT_CXX=str(cxx), TILEJIT_CC_LOG=str(log),
               PYTHONPATH=str(ROOT))
    if remote:
        env["TILEJIT_REMOTE_CACHE"] = remote
    return env


def machines(work: Path, count: int, seed: Path) -> list[Path]:
    roots = []
    for i in range(count):
        root = work / f"machine-{uuid.uuid4().hex[:8]}-{i}"
        for area in ("core", "wrapper"):
            shutil.copytree(seed / area, root / area, symlinks=True)
        roots.append(root)
    return roots


def run_together(roots: list[Path], name: str, remote: str | None, log: Path,
                 cxx: Path) -> tuple[float, list[float]]:
    start = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", CHILD, name],
                                 env=env_for(root, remote, log, cxx),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for root in roots]
    firsts = []
    for child in children:
        out, err = child.communicate(timeout=600)
        if child.returncode != 0:
            sys.exit(f"a machine failed:\n{err}")
        firsts.append(float(out.strip().splitlines()[-1]))
    return time.perf_counter() - start, firsts


def compiles(log: Path, name: str) -> int:
    return sum(1 for line in log.read_text().splitlines() if f"/{name}.cc " in f"{line} ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file", action="store_true", help="a shared directory, not Redis")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tilejit-bench-remote-"))
    server = None
    try:
        log = work / "cc.log"
        log.touch()
        cxx = work / "logging-c++"
        cxx.write_text('#!/bin/sh\necho "$*" >> "$TILEJIT_CC_LOG"\nexec c++ "$@"\n')
        cxx.chmod(0o755)
        if args.file:
            (work / "shared").mkdir()
            remote = f"file://{work / 'shared'}"
        else:
            port = free_port()
            server = subprocess.Popen(["redis-server", "--port", str(port), "--bind",
                                       "127.0.0.1", "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL)
            time.sleep(0.5)
            remote = f"redis://127.0.0.1:{port}/0"
        seed = work / "seed"
        subprocess.run([sys.executable, "-m", "tilejit", "build"], check=True,
                       env=env_for(seed, None, log, cxx), capture_output=True)
        print(f"remote: {remote}; {os.cpu_count()} cores")

        local, hit = [], []
        for _ in range(args.repeat):
            name = f"heavy_{uuid.uuid4().hex[:8]}"
            a, b = machines(work, 2, seed)
            local.append(run_together([a], name, remote, log, cxx)[1][0])
            hit.append(run_together([b], name, remote, log, cxx)[1][0])
        print(f"time to first call, empty local cache (process start to result, median of "
              f"{args.repeat}): local compile {statistics.median(local):.3f} s, remote hit "
              f"{statistics.median(hit):.3f} s")

        for label, url in (("no remote", None), ("remote", remote)):
            name = f"storm_{uuid.uuid4().hex[:8]}"
            wall, firsts = run_together(machines(work, args.machines, seed), name, url, log,
                                        cxx)
            print(f"storm of {args.machines} machines, {label}: compiles: {compiles(log, name)}, "
                  f"wall {wall:.2f} s, first call per machine median {statistics.median(firsts):.2f} s"
                  f" / max {max(firsts):.2f} s")
    finally:
        if server is not None:
            server.terminate()
        if os.environ.get("KEEP"):
            print(work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
