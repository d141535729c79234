"""Compiling on other processes: ``executor=`` of ``compile_many`` and ``@tilejit.autotune``
on a ProcessPoolExecutor, a real Dask LocalCluster of worker processes and a local Ray
instance. Each worker compiles into a cache of its own and sends the artifact back; this
process installs it (nothing compiled here) unless the worker's build is not this
machine's: another CPU, faked by a compiler that resolves ``-march=native`` otherwise."""

from __future__ import annotations

import concurrent.futures
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
from autotune_kernels import CONFIGS, check, make, program
from conftest import compiler_runs as _compiles

import tilejit
from tilejit.runtime import executors


def _name() -> str:
    return f"spin_{uuid.uuid4().hex[:10]}"


def _set_env(values: dict) -> None:
    os.environ.update(values)


@pytest.fixture
def fake_cpu_cc(tmp_path_factory):
    """A compiler that logs its command lines to $TILEJIT_CC_LOG and, with $FAKE_MARCH set,
    says ``-march=native`` means that CPU (a machine of another CPU); else it is cc."""
    script = tmp_path_factory.mktemp("cc") / "fake-cpu-cc"
    script.write_text(
        '#!/bin/sh\n'
        'if [ -n "$TILEJIT_CC_LOG" ]; then echo "$*" >> "$TILEJIT_CC_LOG"; fi\n'
        'case "$*" in *--help=target*) if [ -n "$FAKE_MARCH" ]; then\n'
        '  printf "The following options are target specific:\\n  -march=  %s\\n'
        '  -mtune=  %s\\n" "$FAKE_MARCH" "$FAKE_MARCH"; exit 0; fi;; esac\n'
        'exec cc "$@"\n')
    script.chmod(0o755)
    return script


@pytest.fixture
def worker_env(tmp_path, monkeypatch, fake_cpu_cc):
    """This process and its workers compile with the same logging compiler; workers cache
    in a directory of their own (``worker_env["TILEJIT_CACHE_DIR"]``)."""
    log = tmp_path / "cc.log"
    log.touch()
    monkeypatch.setenv("TILEJIT_CC", str(fake_cpu_cc))
    monkeypatch.setenv("TILEJIT_CC_LOG", str(log))
    executors.reset()
    return {"TILEJIT_CACHE_DIR": str(tmp_path / "worker-cache"), "TILEJIT_CC": str(fake_cpu_cc),
            "TILEJIT_CC_LOG": str(log)}


def _programs(name: str, count: int = 3):
    return [program(64, reps, f"{name}_{reps}") for reps in range(1, count + 1)]


def _run_all(kernels) -> None:
    for kernel in kernels:
        check(kernel, 64)


def test_a_process_pool_compiles_and_this_process_installs(worker_env):
    name = _name()
    with concurrent.futures.ProcessPoolExecutor(2, initializer=_set_env,
                                                initargs=(worker_env,)) as pool:
        kernels = tilejit.compile_many(_programs(name), out_idx=-1, executor=pool)
    _run_all(kernels)
    assert executors.stats() == {"sent": 3, "installed": 3, "compiled_here": 0,
                                 "worker_failures": 0}
    log = Path(worker_env["TILEJIT_CC_LOG"])
    assert sum(_compiles(log, f"{name}_{r}") for r in (1, 2, 3)) == 3  # on the workers only
    listed = {e["name"] for e in tilejit.builder.cache.entries() if e["kind"] == "kernel"}
    assert {f"{name}_{r}" for r in (1, 2, 3)} <= listed  # installed in this cache


def test_a_worker_of_another_cpu_is_refused_and_compiled_here(worker_env):
    name = _name()
    other = {**worker_env, "FAKE_MARCH": "cannonlake"}
    with concurrent.futures.ProcessPoolExecutor(1, initializer=_set_env,
                                                initargs=(other,)) as pool:
        kernels = tilejit.compile_many(_programs(name, 2), out_idx=-1, executor=pool,
                                       compile_flags=["-O2", "-march=native"])
    _run_all(kernels)
    assert executors.stats()["installed"] == 0 and executors.stats()["compiled_here"] == 2
    log = Path(worker_env["TILEJIT_CC_LOG"])
    assert _compiles(log, f"{name}_1") == 2  # once there, once here
    # Same CPU: shared.
    executors.reset()
    with concurrent.futures.ProcessPoolExecutor(1, initializer=_set_env,
                                                initargs=(worker_env,)) as pool:
        tilejit.compile_many(_programs(name + "x", 2), out_idx=-1, executor=pool,
                             compile_flags=["-O2", "-march=native"])
    assert executors.stats()["installed"] == 2 and executors.stats()["compiled_here"] == 0


def test_a_genuine_compile_error_is_reported_and_the_rest_installed(worker_env):
    name = _name()
    programs = _programs(name, 2)
    programs.append(program(64, 1, f"{name}_bad", "int broken(;\n"))
    with concurrent.futures.ProcessPoolExecutor(2, initializer=_set_env,
                                                initargs=(worker_env,)) as pool, \
            pytest.raises(tilejit.CompileErrors) as info:
        tilejit.compile_many(programs, out_idx=-1, executor=pool)
    assert info.value.failed == [(2, f"{name}_bad")]
    assert "broken" in str(info.value)
    _run_all(info.value.kernels[:2])
    assert executors.stats()["worker_failures"] == 0


def test_a_worker_without_a_compiler_costs_a_compile_here(worker_env):
    broken = {**worker_env, "TILEJIT_CC": "/nonexistent/cc"}
    with concurrent.futures.ProcessPoolExecutor(1, initializer=_set_env,
                                                initargs=(broken,)) as pool:
        kernels = tilejit.compile_many(_programs(_name(), 1), out_idx=-1, executor=pool)
    _run_all(kernels)
    assert executors.stats()["worker_failures"] == 1
    assert executors.stats()["compiled_here"] == 1


def test_autotune_compiles_its_configs_on_the_executor(worker_env):
    with concurrent.futures.ProcessPoolExecutor(2, initializer=_set_env,
                                                initargs=(worker_env,)) as pool:
        spin = make(name=_name(), executor=pool)
        record = spin.tuning(8192)
    assert record.config == CONFIGS[1]
    assert executors.stats()["installed"] == len(CONFIGS)


def test_a_jit_warmup_compiles_on_the_executor(worker_env):
    name = _name()

    @tilejit.jit(out_idx=-1)
    def spin(n, reps=1):
        return program(n, reps, f"{name}_{reps}")

    with concurrent.futures.ProcessPoolExecutor(2, initializer=_set_env,
                                                initargs=(worker_env,)) as pool:
        kernels = spin.warmup([(64, 1), (64, 2)], executor=pool)
    _run_all(kernels)
    assert spin(64, 2) is kernels[1] and executors.stats()["installed"] == 2


def test_a_dask_cluster_compiles(worker_env):
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the "
                                                            "test extra (tilejit[dask])")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.run(_set_env, worker_env)
        name = _name()
        _run_all(tilejit.compile_many(_programs(name), out_idx=-1, executor=client))
        assert executors.stats()["installed"] == 3
        spin = make(name=_name(), executor=client.get_executor())
        assert spin.tuning(8192).config == CONFIGS[1]
        assert executors.stats()["installed"] == 3 + len(CONFIGS)
    assert executors.stats()["compiled_here"] == 0


def test_ray_compiles(worker_env):
    ray = pytest.importorskip("ray", reason="ray is in the test extra (tilejit[ray])")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": worker_env})
    try:
        name = _name()
        _run_all(tilejit.compile_many(_programs(name), out_idx=-1, executor="ray"))
        spin = make(name=_name(), executor="ray")
        assert spin.tuning(8192).config == CONFIGS[1]
    finally:
        ray.shutdown()
    assert executors.stats()["installed"] == 3 + len(CONFIGS)
    assert executors.stats()["compiled_here"] == 0


CUDA_SCALE = r"""
extern "C" __global__ void NAME(const float *X, float *Y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) Y[i] = 2 * X[i];
}
"""


def test_cuda_images_compile_on_workers_too(worker_env):
    from conftest import no_nvrtc

    why = no_nvrtc()
    if why:
        pytest.skip(f"NVRTC cannot be loaded: {why}")
    n = tilejit.T.symbol("n")
    name = _name()
    programs = [tilejit.Program(
        name=f"{name}_{i}", source=CUDA_SCALE.replace("NAME", f"{name}_{i}"),
        params=[tilejit.T.Buffer((n,), "float32", name="X", const=True),
                tilejit.T.Buffer((n,), "float32", name="Y")],
        grid=((n + 127) // 128,), block=(128,)) for i in range(2)]
    with concurrent.futures.ProcessPoolExecutor(1, initializer=_set_env,
                                                initargs=(worker_env,)) as pool:
        kernels = tilejit.compile_many(programs, target="cuda", arch="sm_90",
                                       compiler="nvrtc", out_idx=-1, executor=pool)
    assert [Path(k.library_path).name for k in kernels] == ["kernel.cubin"] * 2
    assert executors.stats()["installed"] == 2 and executors.stats()["compiled_here"] == 0


def test_bad_executors_are_refused_before_compiling():
    with pytest.raises(TypeError, match=r"^compile_many: executor must be a "
                       r"concurrent.futures.Executor .* got int 3"):
        tilejit.compile_many(_programs(_name(), 1), executor=3)
    with pytest.raises(ValueError, match="got the string 'dask'"):
        tilejit.compile_many(_programs(_name(), 1), executor="dask")
    assert np is not None
