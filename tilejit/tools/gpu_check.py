"""``python -m tilejit gpu-check OUTDIR [--dry-run]`` (``.ci/gpu``): what a GPU machine can
tell about tilejit, in one prepared run of at most 8 minutes.

Each step runs in a child process of its own (``python -m tilejit.tools.gpu_check --step
NAME OUTDIR``) with its own timeout, timed, whatever the others did:

- ``env``: the device, the driver, and the versions of Python, torch, JAX, CuPy, nvcc;
- ``compile``: the demo's ``vec_add`` compiled with nvcc and with NVRTC, and launched;
- ``bench``: ``bench --target cuda``'s rows (``tilejit.tools.bench_cuda``): the direct call,
  the ``out_idx`` call, the bound ``h()`` and the torch op against a raw
  ``cuLaunchKernel`` loop in C, a builtin that only launches and ``torch.add``, for the
  vector add and the 19-argument no-op;
- ``cupy``: CuPy arrays in and out, on CuPy's current stream and on a ``with
  cupy.cuda.Stream()``, checked against ``a + b``, and timed against ``cupy.add``;
- ``jax``: a jitted kernel call (the XLA handler on XLA's stream) against ``jnp`` add,
  and a ``jax.jit`` program with two kernel calls that XLA captures in a CUDA graph
  (command buffers, seen in XLA's optimised HLO), checked;
- ``cuda-tests``: the suite's tests marked ``cuda`` (the real driver, in child processes)
  but torch's;
- ``torch``: the suite's torch tests on CUDA: eager op, ``torch.compile``, autograd,
  ``mode="reduce-overhead"`` with a tilejit kernel inside, an AOTInductor package with
  ``torch_op.so`` loaded in a fresh process.

It writes ``report.md`` and ``figures.json`` into OUTDIR: the device and versions, each
step's status and seconds, the figures, and each target of the issue met or not.

``--dry-run`` runs the same steps where no GPU is needed: ``bench`` and ``cupy`` against
the test driver (``tests/fake_cuda``, quiet) and the test CuPy (``tests/fake_cupy``), the
pytest steps collecting their tests only; what needs a GPU says "skipped: no GPU". It needs
a checkout of the repository (its ``tests/``), as the GPU run does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..native._build import env

BUDGET_S = 480.0
# (name, timeout in seconds), in the order they run: the figures first.
STEPS = (("env", 60), ("compile", 90), ("bench", 150), ("cupy", 60), ("jax", 120),
         ("cuda-tests", 240), ("torch", 240))
MARK = "GPU-CHECK "  # the line of a step's stdout that carries its result
ROOT = Path(__file__).resolve().parent.parent.parent
N = 1 << 20  # elements of the checked vectors
XLA_FLAGS = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"


def _say(status: str, note: str = "", **figures) -> None:
    """A step's result: ``ok``, ``failed``, ``skipped: why`` or ``dry-run: what``."""
    print(MARK + json.dumps({"status": status, "note": note, "figures": figures}), flush=True)


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _vec_add(compiler: str = "nvcc", out_idx: bool = True):
    import tilejit
    from tilejit.tools.demo import cuda_programs

    program, index = cuda_programs()[0]
    return tilejit.compile(program, out_idx=index if out_idx else None, target="cuda",
                           compiler=compiler)


def _host_ns(fn, args: tuple, calls: int = 2000, repeats: int = 5, sync=None) -> float:
    """Median ns per call of ``fn(*args)``, ``calls`` at a time (``sync()`` after each
    batch, untimed)."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(*args)
        times.append((time.perf_counter_ns() - start) / calls)
        if sync is not None:
            sync()
    return statistics.median(times[1:])


# ---- steps (each in its own process) -----------------------------------------------------


def step_env(out: Path, dry: bool) -> None:
    import platform
    from importlib import metadata

    from .. import __version__

    versions = {"python": platform.python_version(), "tilejit": __version__}
    for name in ("torch", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin",
                 "cupy-cuda12x", "cupy-cuda13x", "cupy", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if not name.startswith(("jax-cuda", "cupy-")):
                versions[name] = "absent"
    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30,
                              check=False)
        versions["nvcc"] = nvcc.stdout.strip().splitlines()[-1]
    except (OSError, IndexError, subprocess.SubprocessError) as exc:
        versions["nvcc"] = f"absent ({type(exc).__name__})"
    device = "no GPU (dry run)" if dry else "no GPU"
    if not dry and _gpu():
        import torch

        major, minor = torch.cuda.get_device_capability()
        device = f"{torch.cuda.get_device_name()} sm_{major}{minor}"
        versions["CUDA (torch's)"] = torch.version.cuda
        versions["driver"] = _driver_version()
    _say("ok", device=device, versions=versions, machine=platform.platform())


def _driver_version() -> str:
    import ctypes

    try:
        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError as exc:
        return f"unknown ({exc})"


def step_compile(out: Path, dry: bool) -> None:
    kernels = {}
    for compiler in ("nvcc", "nvrtc"):
        start = time.perf_counter()
        kernels[compiler] = _vec_add(compiler)
        kernels[f"{compiler} s"] = round(time.perf_counter() - start, 2)
    if not _gpu():
        _say("dry-run: compiled with nvcc and NVRTC; launching needs a GPU" if dry
             else "skipped: no GPU", compile_s={c: kernels[f"{c} s"] for c in ("nvcc", "nvrtc")})
        return
    import torch

    a, b = torch.rand(N, device="cuda"), torch.rand(N, device="cuda")
    for compiler in ("nvcc", "nvrtc"):
        torch.testing.assert_close(kernels[compiler](a, b), a + b)
    _say("ok", compile_s={c: kernels[f"{c} s"] for c in ("nvcc", "nvrtc")})


def _bench_device(dry: bool, work: Path):
    from . import bench_cuda

    if not dry:
        return bench_cuda.gpu()
    sys.path.insert(0, str(ROOT / "tests"))
    from bench_cuda import fake_device  # tests/bench_cuda.py

    return fake_device(work, quiet=True)


def step_bench(out: Path, dry: bool) -> None:
    from . import bench_cuda

    if not dry and not _gpu():
        _say("skipped: no GPU")
        return
    work = out / "bench-work"
    work.mkdir(parents=True, exist_ok=True)
    device = _bench_device(dry, work)
    calls, repeats = (200, 1) if dry else (20_000, 5)
    cases = [bench_cuda._vec_add_case(device), bench_cuda._nop_case(device)]
    synced = bench_cuda._measure(cases, calls, repeats, bench_cuda.BATCH, device.after_batch)
    lines = []
    for case in cases:
        lines += bench_cuda._case_tables(case, synced, device.test_driver)
    lines += bench_cuda._summary(cases, device.test_driver)
    (out / "bench_cuda.md").write_text(f"device: {device.description}\n\n" + "\n".join(lines))
    rows = {case.title.split(",")[0]: {row.name: row.median for row in case.rows}
            for case in cases}
    missing = [f"{title}: {row.name}" for case in cases for row in case.rows
               for title in [case.title.split(",")[0]] if row.required and not row.times]
    status = "dry-run: the test driver, quiet" if dry else ("failed" if missing else "ok")
    _say(status, "; ".join(missing), host_enqueue_ns=rows, calls=calls, repeats=repeats,
         device=device.description)


def _fake_cuda(out: Path):
    """The test driver, opened by the core for this process (dry runs): its control."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import load_fakes

    fakes = load_fakes()
    path = fakes.build_fake_driver(out)
    os.environ["TILEJIT_LIBCUDA"] = str(path)
    driver = fakes.FakeDriver(path)
    driver.reset()
    driver.set_current(0)
    return driver


def _cupy_dry(out: Path) -> None:
    """CuPy's checks on the test driver and the test CuPy: types, devices, streams."""
    work = out / "cupy-work"
    work.mkdir(parents=True, exist_ok=True)
    driver = _fake_cuda(work)
    sys.path.insert(0, str(ROOT / "tests" / "fake_cupy"))
    import cupy

    k = _vec_add()
    a, b = cupy.empty(N), cupy.empty(N)
    c = k(a, b)
    assert isinstance(c, cupy.ndarray) and c.shape == (N,), type(c)
    with cupy.cuda.Stream() as s:
        k(a, b)
        assert driver.launches()[-1]["stream"] == s.ptr, driver.launches()[-1]
    driver.quiet(True)
    figures = {"tilejit call ns": _host_ns(k, (a, b), calls=200, repeats=1)}
    _say("dry-run: the test driver and the test CuPy (types, devices, streams; no values)",
         **figures)


def step_cupy(out: Path, dry: bool) -> None:
    if dry:
        _cupy_dry(out)
        return
    try:
        import cupy
    except ImportError as exc:
        _say(f"skipped: CuPy does not import ({exc})")
        return
    k, plain = _vec_add(), _vec_add(out_idx=False)
    a = cupy.random.rand(N, dtype=cupy.float32)
    b = cupy.random.rand(N, dtype=cupy.float32)
    c = k(a, b)
    assert isinstance(c, cupy.ndarray) and c.device == a.device, type(c)
    cupy.testing.assert_allclose(c, a + b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        d = cupy.empty_like(a)
        plain(a * 2, b, d)  # a * 2 is made on s: the kernel must run after it, on s
        s.synchronize()
    cupy.testing.assert_allclose(d, a * 2 + b)
    plain(a, b, d, stream=s)
    s.synchronize()
    cupy.testing.assert_allclose(d, a + b)
    sync = cupy.cuda.get_current_stream().synchronize
    small = (cupy.ones(1024, cupy.float32), cupy.ones(1024, cupy.float32))
    out_small = cupy.empty(1024, cupy.float32)
    figures = {"tilejit out_idx call ns": _host_ns(k, small, sync=sync),
               "tilejit call ns": _host_ns(plain, (*small, out_small), sync=sync),
               "bound h() ns": _host_ns(plain.bind(*small, out_small), (), sync=sync),
               "cupy.add(a, b) ns": _host_ns(cupy.add, small, sync=sync),
               "cupy.add(a, b, out=c) ns": _host_ns(
                   lambda x, y: cupy.add(x, y, out=out_small), small, sync=sync)}
    _say("ok", **figures)


def _xla_captured(dump: Path) -> bool:
    """Whether XLA's optimised HLO put a tilejit custom call inside a command buffer (a
    CUDA graph)."""
    for path in dump.glob("*after_optimizations*.txt"):
        text = path.read_text(errors="replace")
        if "command_buffer" in text and "tilejit" in text:
            return True
    return False


def step_jax(out: Path, dry: bool) -> None:
    if dry or not _gpu():
        _say("skipped: no GPU")
        return
    import jax
    import jax.numpy as jnp
    import numpy

    if jax.default_backend() != "gpu":
        _say(f"skipped: JAX runs on {jax.default_backend()}, not the GPU")
        return
    k = _vec_add()
    kernel = jax.jit(lambda x, y: k(x, y))
    plain = jax.jit(lambda x, y: x + y)
    graph = jax.jit(lambda x, y: jnp.sin(k(x, y)) * 2 + k(y, x))
    a = jnp.arange(N, dtype=jnp.float32)
    b = jnp.ones(N, jnp.float32)
    numpy.testing.assert_allclose(numpy.asarray(kernel(a, b)), numpy.asarray(plain(a, b)))
    expected = numpy.sin(numpy.asarray(a + b)) * 2 + numpy.asarray(b + a)
    numpy.testing.assert_allclose(numpy.asarray(graph(a, b)), expected, rtol=1e-5, atol=1e-5)
    small = (jnp.ones(1024, jnp.float32), jnp.ones(1024, jnp.float32))
    sync = jax.block_until_ready
    figures = {"jitted kernel call ns": _host_ns(kernel, small, sync=lambda: sync(small)),
               "jitted jnp add ns": _host_ns(plain, small, sync=lambda: sync(small)),
               "graph program ns": _host_ns(graph, small, sync=lambda: sync(small)),
               "captured in a CUDA graph": _xla_captured(out / "xla-dump")}
    _say("ok", **figures)


def _pytest(out: Path, dry: bool, selection: list[str], name: str) -> None:
    """The suite's tests marked ``cuda`` in ``selection``, against the real driver (each
    GPU test runs its own child process, without the test driver)."""
    if not (ROOT / "tests").is_dir():
        _say(f"skipped: no tests/ beside {ROOT / 'tilejit'} (run from a checkout)")
        return
    if not dry and not _gpu():
        _say("skipped: no GPU")
        return
    command = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
               f"--junitxml={out / (name + '.xml')}", *selection]
    if dry:
        command.append("--collect-only")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    if dry:
        _say("dry-run: collected only" if done.returncode == 0 else "failed", last)
    else:
        _say("ok" if done.returncode == 0 else "failed", last)


_TORCH = "torch_compile or torch_op or exports"  # test_cuda.py's GPU tests of torch's paths


def step_cuda_tests(out: Path, dry: bool) -> None:
    _pytest(out, dry, ["tests/test_cuda.py", "-k", f"not ({_TORCH})"], "cuda-tests")


def step_torch(out: Path, dry: bool) -> None:
    _pytest(out, dry, ["tests/test_cuda.py", "-k", _TORCH], "torch")


_STEPS = {"env": step_env, "compile": step_compile, "bench": step_bench, "cupy": step_cupy,
          "jax": step_jax, "cuda-tests": step_cuda_tests, "torch": step_torch}


# ---- the run -------------------------------------------------------------------------------


def _run_step(name: str, timeout: float, out: Path, dry: bool) -> dict:
    """Runs one step in a child process; its result, with its seconds."""
    command = [sys.executable, "-m", "tilejit.tools.gpu_check", "--step", name, str(out)]
    if dry:
        command.append("--dry-run")
    env = dict(os.environ)
    if name == "jax":
        env["XLA_FLAGS"] = (f"{env.get('XLA_FLAGS', '')} {XLA_FLAGS} "
                            f"--xla_dump_to={out / 'xla-dump'}").strip()
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(timeout, 1),
                              env=env, cwd=ROOT, check=False)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = f"{exc.stdout or ''}{exc.stderr or ''}"
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        code = None
    seconds = round(time.perf_counter() - start, 1)
    (out / f"step-{name}.log").write_text(output)
    said = [line[len(MARK):] for line in output.splitlines() if line.startswith(MARK)]
    if said:
        result = json.loads(said[-1])
    elif code is None:
        result = {"status": "failed", "note": f"timed out after {timeout:.0f} s", "figures": {}}
    else:
        tail = " | ".join(output.strip().splitlines()[-3:])
        result = {"status": "failed", "note": f"exit {code}: {tail}", "figures": {}}
    return {"step": name, "seconds": seconds, **result}


def run(out: Path, dry: bool, budget: float = BUDGET_S, only=None) -> list[dict]:
    """Runs the steps in order, each within what is left of ``budget`` seconds."""
    out.mkdir(parents=True, exist_ok=True)
    results, start = [], time.perf_counter()
    for name, timeout in STEPS:
        if only and name not in only:
            continue
        left = budget - (time.perf_counter() - start)
        if left < 5:
            results.append({"step": name, "seconds": 0.0, "figures": {},
                            "status": "failed", "note": "not run: the 8-minute budget was spent"})
            continue
        results.append(_run_step(name, min(timeout, left), out, dry))
        print(f"gpu-check: {name}: {results[-1]['status']} ({results[-1]['seconds']} s)",
              file=sys.stderr, flush=True)
    return results


def _bench_targets(bench: dict, dry: bool) -> list[tuple[str, str, str]]:
    from .bench_cuda import BOUND, DIRECT, GPU_MARGINS_NS, RAW_LOOP

    rows = bench.get("figures", {}).get("host_enqueue_ns", {})
    targets = []
    for what in (DIRECT, BOUND):
        margin = GPU_MARGINS_NS[what]
        for case in ("vec_add", "nop19"):
            name = f"{case}: tilejit cython {what} ≤ raw cuLaunchKernel + {margin / 1000:g} µs"
            value, raw = rows.get(case, {}).get(f"tilejit cython {what}"), rows.get(
                case, {}).get(RAW_LOOP)
            targets.append(_judged(name, value, None if raw is None else raw + margin, dry,
                                   lambda v, r=raw: f"raw + {(v - r) / 1000:.2f} µs"))
    vec = rows.get("vec_add", {})
    op, add = vec.get("tilejit cython out_idx kernel.torch_op"), vec.get(
        "torch.add(a, b), allocating")
    targets.append(_judged("vec_add: torch op ≤ 1.3× torch.add (allocating)", op,
                           None if add is None else 1.3 * add, dry,
                           lambda v, a=add: f"{v / a:.2f}× torch.add"))
    return targets


def _judged(name: str, value, limit, dry: bool, how) -> tuple[str, str, str]:
    if dry:
        shown = "" if value is None else f"{value:,.0f} ns"
        return name, shown, "not judged: dry run (the test driver)"
    if value is None or limit is None:
        return name, "", "not measured"
    return name, how(value), "met" if value <= limit else "not met"


def targets(results: list[dict], dry: bool) -> list[tuple[str, str, str]]:
    """The issue's targets: (target, value, met / not met / why not judged)."""
    by_step = {r["step"]: r for r in results}
    found = _bench_targets(by_step.get("bench", {}), dry)
    jax = by_step.get("jax", {}).get("figures", {})
    kernel, add = jax.get("jitted kernel call ns"), jax.get("jitted jnp add ns")
    found.append(_judged("jitted JAX kernel call ≤ 1.25× jitted jnp add", kernel,
                         None if add is None else 1.25 * add, dry,
                         lambda v, a=add: f"{v / a:.2f}× jnp add"))
    captured = jax.get("captured in a CUDA graph")
    found.append(("a jax.jit program with the kernel captured in a CUDA graph by XLA",
                  "" if captured is None else str(captured),
                  "not judged: dry run" if dry else ("not measured" if captured is None
                                                     else "met" if captured else "not met")))
    failed = [r["step"] for r in results if r["status"] == "failed"]
    skipped = [r["step"] for r in results if r["status"].startswith("skipped")]
    verdict = ("not met: " + ", ".join(failed) + " failed" if failed
               else "not judged: dry run" if dry
               else "not measured: " + ", ".join(skipped) + " skipped" if skipped else "met")
    found.append(("every result right (every step ok)", f"{len(results)} steps", verdict))
    return found


def report(results: list[dict], dry: bool) -> str:
    env = next((r for r in results if r["step"] == "env"), {}).get("figures", {})
    lines = ["# tilejit gpu-check" + (" (dry run: no GPU)" if dry else ""), "",
             f"device: {env.get('device', 'unknown')} · machine: {env.get('machine', '?')}", "",
             "versions: " + ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items()),
             "", "## Steps", "", "| step | status | seconds | note |", "|---|---|---:|---|"]
    for r in results:
        note = str(r.get("note", "")).replace("|", "/")[:300]
        lines.append(f"| {r['step']} | {r['status']} | {r['seconds']} | {note} |")
    lines += ["", "## Targets", "", "| target | value | verdict |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {verdict} |" for name, value, verdict in targets(results, dry)]
    lines += ["", "## Figures", ""]
    for r in results:
        if r["step"] != "env" and r.get("figures"):
            lines.append(f"- {r['step']}: `{json.dumps(r['figures'], sort_keys=True)}`")
    lines += ["", ("The bench's tables: `bench_cuda.md` beside this report; each step's "
                   "output: `step-<name>.log`.")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """``python -m tilejit gpu-check OUTDIR [--dry-run]``: 0 when no step failed."""
    parser = argparse.ArgumentParser(prog="python -m tilejit gpu-check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder for report.md and figures.json")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: the test driver and the test CuPy where they serve")
    parser.add_argument("--only", help="comma-separated steps to run (default: all)")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help=f"seconds for all the steps (default {BUDGET_S:g})")
    parser.add_argument("--step", help=argparse.SUPPRESS)  # a child: run this one step
    args = parser.parse_args(argv)
    dry = args.dry_run or env.flag("TILEJIT_GPU_CHECK_DRY_RUN")
    if args.step:
        args.out.mkdir(parents=True, exist_ok=True)
        _STEPS[args.step](args.out, dry)
        return 0
    only = set(args.only.split(",")) if args.only else None
    results = run(args.out, dry, args.budget, only)
    (args.out / "figures.json").write_text(json.dumps(
        {"dry_run": dry, "steps": results,
         "targets": [dict(zip(("target", "value", "verdict"), t)) for t in targets(results, dry)]},
        indent=1, sort_keys=True))
    text = report(results, dry)
    (args.out / "report.md").write_text(text)
    print(text, end="")
    return 1 if any(r["status"] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
