"""``python -m tilejit gpu-check`` (``.ci/gpu``, docs/gpu-check.md): its dry run on the test
driver, so that the GPU run cannot rot between the rare runs on a GPU, and its verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tilejit.tools import gpu_check

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole dry run, once: (exit code, report.md, figures.json, the output folder)."""
    from conftest import subprocess_env

    out = tmp_path_factory.mktemp("gpu-check")
    done = subprocess.run([sys.executable, "-m", "tilejit", "gpu-check", str(out), "--dry-run"],
                          env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert (out / "report.md").is_file(), done.stdout + done.stderr
    return (done.returncode, (out / "report.md").read_text(),
            json.loads((out / "figures.json").read_text()), out, done.stderr)


def test_the_dry_run_runs_every_step_and_fails_none(dry_run):
    code, report, figures, _, stderr = dry_run
    steps = {s["step"]: s for s in figures["steps"]}
    assert list(steps) == [name for name, _ in gpu_check.STEPS]
    assert code == 0, report + stderr
    assert steps["env"]["status"] == "ok" and "versions" in steps["env"]["figures"]
    assert steps["compile"]["status"].startswith("dry-run: compiled with nvcc and NVRTC")
    assert steps["jax"]["status"] == "skipped: no GPU"
    for name in ("cuda-tests", "torch"):  # the GPU tests are found, and collect
        assert steps[name]["status"] == "dry-run: collected only"
        assert " tests collected" in steps[name]["note"] and "/0 " not in steps[name]["note"]
    assert steps["cupy"]["status"].startswith("dry-run: the test driver and the test CuPy")
    assert figures["dry_run"] is True and "(dry run: no GPU)" in report


def test_the_dry_run_times_the_bench_rows_on_the_test_driver(dry_run):
    _, report, figures, out, _ = dry_run
    bench = next(s for s in figures["steps"] if s["step"] == "bench")
    assert bench["status"] == "dry-run: the test driver, quiet"
    for case in ("vec_add", "nop19"):
        rows = bench["figures"]["host_enqueue_ns"][case]
        for name in ("raw cuLaunchKernel loop in C, arguments packed once",
                     "tilejit cython direct call", "tilejit cython bound h()",
                     "tilejit ctypes bound h()", "tilejit cython out_idx call"):
            assert rows[name] > 0, (case, name)
    assert (out / "bench_cuda.md").read_text().count(": host enqueue, no synchronisation") == 2
    verdicts = {t["target"]: t["verdict"] for t in figures["targets"]}
    assert len(verdicts) == 8 and all(v.startswith("not judged") for v in verdicts.values())
    assert "| vec_add: tilejit cython bound h() ≤ raw cuLaunchKernel + 0.2 µs |" in report


def _result(step, status="ok", **figures):
    return {"step": step, "status": status, "seconds": 1.0, "note": "", "figures": figures}


def test_targets_are_judged_from_the_figures():
    rows = {"raw cuLaunchKernel loop in C, arguments packed once": 2000.0,
            "tilejit cython direct call": 2400.0, "tilejit cython bound h()": 2300.0,
            "tilejit cython out_idx kernel.torch_op": 5000.0,
            "torch.add(a, b), allocating": 4000.0}
    nop = {**rows, "tilejit cython direct call": 2600.0}
    results = [_result("env"), _result("bench", host_enqueue_ns={"vec_add": rows, "nop19": nop}),
               _result("jax", **{"jitted kernel call ns": 13.0, "jitted jnp add ns": 10.0,
                                 "captured in a CUDA graph": True})]
    got = {name: (value, verdict) for name, value, verdict in gpu_check.targets(results, False)}
    direct = "≤ raw cuLaunchKernel + 0.5 µs"
    assert got[f"vec_add: tilejit cython direct call {direct}"] == ("raw + 0.40 µs", "met")
    assert got[f"nop19: tilejit cython direct call {direct}"] == ("raw + 0.60 µs", "not met")
    assert got["vec_add: tilejit cython bound h() ≤ raw cuLaunchKernel + 0.2 µs"] == (
        "raw + 0.30 µs", "not met")
    assert got["vec_add: torch op ≤ 1.3× torch.add (allocating)"] == ("1.25× torch.add", "met")
    assert got["jitted JAX kernel call ≤ 1.25× jitted jnp add"] == ("1.30× jnp add", "not met")
    assert got["a jax.jit program with the kernel captured in a CUDA graph by XLA"][1] == "met"
    assert got["every result right (every step ok)"][1] == "met"
    results.append(_result("cupy", "failed"))
    got = {name: verdict for name, _, verdict in gpu_check.targets(results, False)}
    assert got["every result right (every step ok)"] == "not met: cupy failed"


def test_a_step_that_hangs_or_dies_does_not_stop_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "STEPS", (("no-such-step", 60), ("jax", 60)))
    # The first step dies at once; the budget leaves nothing to the second: reported. (The
    # step is held to at least 0.3 s, so that a fast death still spends the budget's
    # 0.2 s beyond the 5 s a step needs.)
    run_step = gpu_check._run_step

    def held(*args):
        start = time.perf_counter()
        result = run_step(*args)
        time.sleep(max(0.0, 0.3 - (time.perf_counter() - start)))
        return result

    monkeypatch.setattr(gpu_check, "_run_step", held)
    died, late = gpu_check.run(tmp_path, dry=True, budget=5.2)
    monkeypatch.setattr(gpu_check, "_run_step", run_step)
    assert died["step"] == "no-such-step" and died["status"] == "failed"
    assert died["note"].startswith("exit 1: ") and "no-such-step" in died["note"]
    assert late == {"step": "jax", "seconds": 0.0, "figures": {}, "status": "failed",
                    "note": "not run: the 8-minute budget was spent"}
    hung = gpu_check._run_step("cuda-tests", 1, tmp_path, True)  # collecting takes seconds
    assert hung["status"] == "failed" and hung["note"] == "timed out after 1 s"
    assert 1 <= hung["seconds"] < 10 and (tmp_path / "step-cuda-tests.log").is_file()
