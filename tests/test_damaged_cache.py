"""Damaged and unusable caches, end to end: a fresh process
whose cache holds a library that is truncated, empty or garbage (its meta.json rewritten
to match, so that size and hash cannot tell), or whose TILEJIT_CACHE_DIR is unusable,
still runs kernels on every backend: the library is rebuilt rather than loaded (a
truncated one used to kill the process with SIGBUS), the cache falls back to a private
root with one warning. The build-level rules are tested on fixture trees in test_build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Tooling, fresh processes rebuilding damaged caches: left out by
# `pytest -m "not slow"` (CONTRIBUTING.md).
pytestmark = pytest.mark.slow
pytest.importorskip("torch", reason="the child processes run kernels on torch tensors")

# Compiles a kernel and runs it on each backend named on the command line, in order.
SCRIPT = """\
import sys, warnings
warnings.simplefilter("always")
import torch, tilejit
from tilejit import T

n = T.symbol("n")
program = tilejit.Program(name="twice", source=(
    "void twice(const float *A, float *B, int64_t n) "
    "{ for (int64_t i = 0; i < n; ++i) B[i] = 2 * A[i]; }"),
    params=[T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n,), "float32", name="B")])
for backend in sys.argv[1:]:
    kernel = tilejit.compile(program, out_idx=-1, execution_backend=backend)
    print(backend, kernel(torch.arange(3.0)).tolist())
"""


def _run(cache: Path, child_env, *backends: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, *backends],
                          env=child_env(TILEJIT_CACHE_DIR=str(cache)), capture_output=True,
                          text=True, timeout=600, check=False)


def _ran(done: subprocess.CompletedProcess, *backends: str) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-4000:]}"
    assert done.stdout.splitlines() == [f"{b} [0.0, 2.0, 4.0]" for b in backends]


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory, child_env) -> Path:
    """A cache holding the core, the wrapper and the kernel, made by a child process."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    _ran(_run(cache, child_env, "cython", "ctypes"), "cython", "ctypes")
    return cache


def _copy(warm: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(warm, cache)
    return cache


def _library(cache: Path, kind: str) -> Path:
    pattern = {"core": "core/*/*.so", "wrapper": "wrapper/*/*/*.so",
               "kernel": "kernels/*/*/kernel.so"}[kind]
    (path,) = cache.glob(pattern)
    return path


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    data = {"truncated": data[: len(data) // 3], "empty": b"",
            "garbage": b"\x7fELF\x02\x01\x01" + b"\xff" * 4000}[how]
    path.write_bytes(data)
    meta = path.parent / "meta.json"
    record = json.loads(meta.read_text())
    record.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    meta.write_text(json.dumps(record))


def test_truncated_libraries_are_rebuilt_on_every_backend(warm_cache, tmp_path, child_env):
    cache = _copy(warm_cache, tmp_path)
    damaged = [_library(cache, kind) for kind in ("core", "wrapper", "kernel")]
    for path in damaged:
        _damage(path, "truncated")
    _ran(_run(cache, child_env, "cython", "dlpack", "ctypes"), "cython", "dlpack", "ctypes")
    for path in damaged:
        assert len(path.read_bytes()) == json.loads((path.parent / "meta.json").read_text())[
            "size"] > 10000


def test_the_ctypes_backend_rebuilds_a_broken_core(warm_cache, tmp_path, child_env):
    # The ctypes backend opens the core itself; it used to raise OSError forever. (Every
    # kind of damage, on fixture trees: test_build.)
    cache = _copy(warm_cache, tmp_path)
    _damage(_library(cache, "core"), "empty")
    _ran(_run(cache, child_env, "ctypes"), "ctypes")
    _damage(_library(cache, "wrapper"), "garbage")  # and the wrapper, for cython
    _ran(_run(cache, child_env, "cython", "ctypes"), "cython", "ctypes")


def test_an_unusable_cache_dir_still_runs_every_backend(tmp_path, child_env):
    cache = tmp_path / "cache"
    cache.write_text("not a directory")  # other ways to be unusable: test_build
    done = _run(cache, child_env, "cython", "dlpack", "ctypes")
    _ran(done, "cython", "dlpack", "ctypes")
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, done.stderr
    assert f"TILEJIT_CACHE_DIR={cache} is unusable" in warnings[0]
