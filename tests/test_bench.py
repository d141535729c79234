"""Smoke test of ``python -m tilejit bench``: it runs and reports every row.

Benchmarks are not tests: no number is asserted, only that the command exits 0 and that
the rows tilejit is responsible for were timed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilejit.tools import bench_cuda

# Tooling, whole benchmark runs: left out by `pytest -m "not slow"` (CONTRIBUTING.md).
pytestmark = pytest.mark.slow

pytest.importorskip("torch")

REPO_ROOT = Path(__file__).resolve().parent.parent

# Row name prefixes, and whether the row must carry a time (the others may say why not:
# a peer not installed, a backend not available yet, a build skipped by --quick).
EXPECTED_ROWS = {
    "tilejit cython": True,
    "tilejit dlpack": True,
    "tilejit ctypes": False,
    "apache-tvm-ffi": False,
    "TileLang-style ctypes: c_void_p": True,
    "torch cpp_extension.load_inline": False,
    "floor: C extension, exchange API only": True,
    "ctypes floor: *args, one PyDLL call with the tuple": True,
    "tilejit cython (out_idx)": True,
    "tilejit dlpack (out_idx)": True,
    "tilejit ctypes (out_idx)": False,
    "TileLang-style ctypes: torch.empty": True,
    "torch.empty((16,), dtype=torch.float32) alone": True,
    "reference: torch.empty alone + tilejit cython (A)": True,
    # C: 9 and 16 tensors
    "tilejit cython, 9 tensors": True,
    "tilejit ctypes, 9 tensors": False,
    "apache-tvm-ffi (TensorView x9)": False,
    "floor: C extension, exchange API only, 9 tensors": True,
    "ctypes floor: *args, one PyDLL call with the tuple, 9 tensors": True,
    "tilejit cython, 16 tensors": True,
    "tilejit ctypes, 16 tensors": False,
    "apache-tvm-ffi (TensorView x16)": False,
    "floor: C extension, exchange API only, 16 tensors": True,
    "ctypes floor: *args, one PyDLL call with the tuple, 16 tensors": True,
    # D: arguments converted up front
    "tilejit cython, from_dlpack views": True,
    "tilejit cython, tilejit.Array": True,
    "tilejit dlpack, from_dlpack views": True,
    "tilejit dlpack, tilejit.Array": True,
    "tilejit ctypes, from_dlpack views": False,
    "tilejit ctypes, tilejit.Array": False,
}


def _table_rows(report: str) -> dict[str, list[str]]:
    """Row name -> the other cells: median, min, one or more ratios, target, notes."""
    rows = {}
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 6 and cells[0] != "implementation":
            assert cells[0] not in rows, f"two rows named {cells[0]!r}"
            rows[cells[0]] = cells[1:]
    return rows


def test_bench_quick_runs_and_reports_every_row(tmp_path):
    out = tmp_path / "bench.md"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(
        [sys.executable, "-m", "tilejit", "bench", "--quick", "--calls", "2000",
         "--repeats", "1", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = out.read_text()
    assert report in done.stdout
    assert "machine:" in report and "torch" in report

    rows = _table_rows(report)
    for prefix, must_be_timed in EXPECTED_ROWS.items():
        matches = [name for name in rows if name.startswith(prefix)]
        assert matches, f"no row {prefix!r} in\n{report}"
        median = rows[min(matches, key=len)][0]
        if must_be_timed:
            assert median != "—", f"row {prefix!r} was not timed:\n{report}"
    pybind = next(cells for name, cells in rows.items() if name.startswith("torch cpp_ext"))
    assert "skipped (--quick)" in pybind[-1]
    # tilejit ctypes is printed as a ratio of the ctypes floor, with its target.
    assert "× ctypes floor |" in report
    assert "≤ 2× ctypes floor" in rows["tilejit ctypes"][-2]


def test_bench_torch_compile_runs_and_reports_every_row(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(
        [sys.executable, "-m", "tilejit", "bench", "--torch-compile", "--calls", "200",
         "--repeats", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _table_rows(done.stdout)
    assert len(rows) == 12 and all(cells[0] != "—" for cells in rows.values()), done.stdout
    assert "compiled graph: add(a, b)" in rows and "eager: torch.add(a, b)" in rows
    assert "eager, recorded by autograd: tilejit add(a, b) with its backward" in rows
    # The three rows with a target: the op against torch's op, the graph against the same
    # graph with torch.add, the recorded call against a hand-written autograd.Function.
    targets = [name for name, cells in rows.items() if cells[-2].startswith("≤")]
    assert targets == ["eager: add.torch_op(a, b), the op through torch's dispatcher",
                       "compiled graph: add(a, b)",
                       "eager, recorded by autograd: tilejit add(a, b) with its backward"]


# Every row of `tests/bench_cuda.py`, per kernel, and whether the test driver times it (the
# others say why not: they need torch CUDA tensors, or an allocator FakeCudaTensor lacks).
CUDA_ROWS = {
    bench_cuda.RAW_LOOP: True,
    bench_cuda.BUILTIN: True,
    bench_cuda.EXCHANGE: True,
    bench_cuda.RAW_LOOP_CONTEXT: True,
    **{f"tilejit {backend} {what}": True for backend in ("cython", "dlpack", "ctypes")
       for what in (bench_cuda.DIRECT, bench_cuda.BOUND)},
    "tilejit cython out_idx call": True,
    "tilejit ctypes out_idx call": True,
    "tilejit dlpack out_idx call": False,
    bench_cuda.VIEWS: True,
    "tilejit cython out_idx kernel.torch_op": False,
}


def test_bench_cuda_on_the_test_driver_reports_every_row(tmp_path):
    out = tmp_path / "bench_cuda.md"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests" / "bench_cuda.py"), "--fake-driver",
         "--calls", "40", "--repeats", "1", "--batch", "20", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = out.read_text()
    assert report in done.stdout
    sections = report.split("\n## ")[1:]
    titles = [section.splitlines()[0] for section in sections]
    # Per kernel, host enqueue then launch + sync; then the targets.
    assert [title.split(":")[0].split(",")[0] for title in titles] == [
        "vec_add", "vec_add", "nop19", "nop19", "Targets (test driver"]
    for section in sections[:4]:
        rows = _table_rows("\n".join(section.splitlines()[1:]))
        expected = {**CUDA_ROWS, **({"torch.add(a, b, out=c)": False,
                                     "torch.add(a, b), allocating": False}
                                    if section.startswith("vec_add") else {})}
        assert sorted(rows) == sorted(expected), report
        for name, timed in expected.items():
            assert (rows[name][0] != "—") == timed, f"{name}: {rows[name]}\n{report}"
        skipped = rows["tilejit cython out_idx kernel.torch_op"][-1]
        assert "needs torch CUDA tensors" in skipped
    targets = sections[4]
    assert "bound h(): " in targets and "× the builtin (≤ 1.5× builtin: " in targets
    assert "direct call: " in targets and "(≤ 3× builtin: " in targets


def _bench(tmp_path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "tilejit", "bench", *argv], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_bench_startup_reports_every_installed_framework(tmp_path):
    done = _bench(tmp_path, "--startup", "--repeats", "1", "--out", str(tmp_path / "s.md"))
    assert done.returncode in (0, 1), done.stderr  # 1: a target missed, said in the table
    rows = {cells[0]: cells[1:] for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines()
        if line.startswith("| ") and "framework" not in line)}
    from tilejit.tools import bench_startup

    for name in bench_startup.FRAMEWORKS:
        if name in bench_startup.installed():
            assert rows[name][-1] in ("met", "MISSED"), done.stdout
            assert rows[name][-2] == "0", f"{name}: torch.compile's modules loaded"
        else:
            assert rows[name][0] == "not installed"


def test_bench_jax_quick_says_how_long_it_will_take(tmp_path):
    pytest.importorskip("jax")
    done = _bench(tmp_path, "--jax", "--quick")
    assert done.returncode == 0, done.stderr
    assert "repeats of 500 calls: about" in done.stderr
    assert "| eager: tilejit add(a, b), 16 float32 |" in done.stdout
