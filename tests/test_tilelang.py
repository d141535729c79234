"""tilejit as a TileLang execution backend, with the real TileLang (a test extra).

On the CPU (target "c"), TileLang kernels run for real through both entry points and are
checked against torch. CUDA kernels are lowered by TileLang and compiled by real nvcc
(sm_80 GEMM with a dynamic M, sm_90a warp-specialised GEMM with TMA, a prim_func with two
T.Kernel blocks, a kernel with cluster dims) and launched against the fake driver, every
recorded value asserted for several M; on a GPU (marked ``cuda``) they run against torch.
"""

# No `from __future__ import annotations`: the TileLang kernels defined here must have
# their annotations evaluated (see tilejit/tools/tilelang_defs.py).

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Optional packages: without them every test here is reported skipped, saying why, and the
# rest of the suite still runs.
tilelang = pytest.importorskip(
    "tilelang", reason="TileLang is not installed (pip install 'tilejit[tilelang]')",
    exc_type=ImportError)  # installed but not importable (a missing library): skipped too
torch = pytest.importorskip("torch")
import tilelang.language as TL
from conftest import load_fakes

import tilejit
import tilejit.tilelang as tt
from tilejit.tools.demo import tilelang_kernels

fakes = load_fakes()
FakeCudaTensor = fakes.FakeCudaTensor
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True, scope="module")
def tilelang_cache(tmp_path_factory):
    """TileLang's own cache in a fresh directory, so that the runs here compile."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILELANG_CACHE_DIR", str(tmp_path_factory.mktemp("tilelang-cache")))
        yield


# ---- Kernels, written as TileLang users write them (the demo's, and two more) ------------------


def elementwise():
    return tilelang_kernels(TL)[0]


def row_sum():
    return tilelang_kernels(TL)[1]


def gemm():
    return tilelang_kernels(TL)[2]


def two_kernels():
    n = TL.dynamic("n")

    @TL.prim_func
    def two(A: TL.Tensor((n,), "float32"), B: TL.Tensor((n,), "float32")):
        with TL.Kernel(TL.ceildiv(n, 128), threads=128) as bx:
            for i in TL.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i] * 2.0
        with TL.Kernel(TL.ceildiv(n, 256), threads=256) as bx:
            for i in TL.Parallel(256):
                if bx * 256 + i < n:
                    B[bx * 256 + i] = B[bx * 256 + i] + 1.0
    return two


def clustered():
    n = TL.dynamic("n")

    @TL.prim_func
    def scale(A: TL.Tensor((n,), "float32"), B: TL.Tensor((n,), "float32")):
        with TL.Kernel(TL.ceildiv(n, 128), threads=128, cluster_dims=(2, 1, 1)) as bx:
            for i in TL.Parallel(128):
                if bx * 128 + i < n:
                    B[bx * 128 + i] = A[bx * 128 + i] * 3.0
    return scale


SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}


# ---- Registration -------------------------------------------------------------------------


def test_tilejit_is_a_registered_tilelang_backend():
    assert tt.check_registration() == []
    assert tt.registered()
    from tilelang.backend.module import list_backends

    for backend in list_backends().values():
        names = [spec.name for spec in backend.execution_backends]
        if {"cuda", "c"} & set(backend.target_kinds):
            assert "tilejit" in names, backend.name
    tt.register()  # idempotent
    assert tt.registered()


def test_a_tilelang_that_moved_its_integration_points_is_named(monkeypatch):
    from tilelang import cache
    from tilelang.jit.kernel import JITKernel

    monkeypatch.delattr(cache, "_dispatch_map")
    monkeypatch.delattr(JITKernel, "_create_adapter_from_database")
    assert tt.check_registration() == [
        "tilelang.jit.kernel.JITKernel._create_adapter_from_database",
        "tilelang.cache._dispatch_map"]
    with pytest.raises(ImportError, match=r"tilejit.tilelang: this TileLang \(0\.1\.15\) moved "
                                          r"what tilejit registers with: "
                                          r"tilelang.jit.kernel.JITKernel"):
        tt.register()


# ---- Target "c": for real, against torch -----------------------------------------------------


@pytest.fixture(scope="module")
def cpu_kernels():
    return {
        "axpy": tilelang.compile(elementwise(), out_idx=-1, target="c",
                                 execution_backend="tilejit"),
        "axpy_tj": tt.compile(elementwise(), out_idx=-1, target="c"),
        "rows": tilelang.compile(row_sum(), out_idx=[1], target="c",
                                 execution_backend="tilejit"),
        "rows_tj": tt.compile(row_sum(), out_idx=[1], target="c"),
    }


@pytest.mark.parametrize("m, n", [(1, 1), (7, 33), (64, 100)])
def test_elementwise_on_target_c_matches_torch(cpu_kernels, m, n):
    x, y = torch.randn(m, n), torch.randn(m, n)
    for key in ("axpy", "axpy_tj"):
        z = cpu_kernels[key](x, y)
        torch.testing.assert_close(z, 2 * x + y)
    assert isinstance(cpu_kernels["axpy_tj"], tilejit.JITKernel)
    assert cpu_kernels["axpy"].adapter.kernel.execution_backend == "cython"


@pytest.mark.parametrize("m", [1, 5, 300])
def test_reduction_on_target_c_matches_torch(cpu_kernels, m):
    a = torch.randn(m, 64)
    for key in ("rows", "rows_tj"):
        torch.testing.assert_close(cpu_kernels[key](a), a.sum(dim=1), rtol=1e-5, atol=1e-4)


def test_tilelang_kernels_are_checked(cpu_kernels):
    k = cpu_kernels["axpy_tj"]
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"axpy_kernel: argument 1 'Y': expected shape\[1\] "
                                         r"== n \(= 8, bound by argument 0 'X'\), got 9"):
        k(x, torch.randn(4, 9))
    with pytest.raises(ValueError, match=r"axpy_kernel: argument 1 'Y': expected dtype "
                                         r"float32, got float64"):
        k(x, torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"axpy_kernel: expected 2 arguments"):
        k(x)
    # The same through TileLang's JITKernel: tilejit's call, unchanged.
    with pytest.raises(ValueError, match=r"argument 1 'Y': expected shape\[1\]"):
        cpu_kernels["axpy"](x, torch.randn(4, 9))


def test_read_only_inputs_are_const(cpu_kernels):
    # TileLang proved X and Y read-only: read-only tensors are accepted for them.
    k = cpu_kernels["axpy_tj"]
    assert k.c_prototype.startswith("int32_t axpy_kernel(const float *X, const float *Y, float *Z")
    x = torch.randn(3, 4)
    ro = x.numpy()
    ro.flags.writeable = False
    torch.testing.assert_close(torch.from_numpy(k(ro, x)), 3 * x)


_CACHE_RUN = """
import sys, torch, tilelang
sys.path.insert(0, {here!r})
import tilejit.tilelang
from conftest import load_fakes
from test_tilelang import elementwise, two_kernels
fakes = load_fakes()
k = tilelang.compile(elementwise(), out_idx=-1, target="c", execution_backend="tilejit")
x = torch.randn(5, 6)
assert torch.allclose(k(x, x), 3 * x)
kc = tilelang.compile(two_kernels(), out_idx=-1, target={{"kind": "cuda", "arch": "sm_80"}},
                      execution_backend="tilejit")
kc(fakes.FakeCudaTensor((300,)))
export = sys.argv[1]
k.adapter.kernel.export(export + "-c", overwrite=True)
kc.adapter.kernel.export(export + "-cuda", overwrite=True)
print("from-cache" if k.adapter.from_cache else "compiled",
      "from-cache" if kc.adapter.from_cache else "compiled")
"""


@pytest.mark.slow  # two processes lowering
def test_disk_cache_reloads_without_lowering(tmp_path, fake_driver_path):
    # Two processes with one TileLang cache: the second loads the description and the
    # image tilejit stored (a CPU kernel, and a CUDA one launched on the fake driver).
    env = dict(os.environ, TILELANG_CACHE_DIR=str(tmp_path / "tl-cache"),
               TILEJIT_LIBCUDA=str(fake_driver_path))
    runs = [subprocess.run([sys.executable, "-c", _CACHE_RUN.format(here=str(HERE)),
                            str(tmp_path / f"export-{i}")],
                           check=False, capture_output=True, text=True, env=env,
                           cwd=HERE.parent, timeout=600) for i in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
        assert "WARNING" not in run.stderr, run.stderr
    assert [r.stdout.split()[-2:] for r in runs] == [["compiled", "compiled"],
                                                     ["from-cache", "from-cache"]]
    # A kernel from TileLang's cache exports like a fresh one (tile-ai/tilelang#3062).
    x = torch.randn(5, 6)
    for i in range(2):
        torch.testing.assert_close(tilejit.load(tmp_path / f"export-{i}-c")(x, x), 3 * x)
        assert (tmp_path / f"export-{i}-cuda" / "signature.tj").read_text().endswith(
            "load kernel.cubin two_kernel\n")


# ---- CUDA: real lowering and nvcc, the fake driver ----------------------------------------------


@pytest.fixture(scope="module")
def cuda_kernels(driver):
    # Compiled with no current context, so that no module is loaded ahead (compiling warms
    # a kernel up on the thread's current context): each test sees its kernel's one load.
    driver.reset()
    driver.set_current(-1)
    return {
        "gemm80": tt.compile(gemm(), out_idx=-1, target=SM80),
        "gemm90": tilelang.compile(gemm(), out_idx=-1, target=SM90,
                                   execution_backend="tilejit"),
        "two": tt.compile(two_kernels(), out_idx=-1, target=SM90),
        "cluster": tt.compile(clustered(), out_idx=-1, target=SM90),
    }


def _ptr(address: int) -> str:
    return address.to_bytes(8, "little").hex()


def _i32(value: int) -> str:
    return value.to_bytes(4, "little").hex()


def _map_bytes(address, dims, strides, box) -> str:
    words = [0] * 16
    words[0] = address
    for i, d in enumerate(dims):
        words[1 + i] = d
        words[11 + i] = box[i]
    for i, s in enumerate(strides):
        words[6 + i] = s
    return b"".join(w.to_bytes(8, "little") for w in words).hex()


def test_sm80_gemm_with_dynamic_m_launches_exactly(fake, cuda_kernels):
    k = cuda_kernels["gemm80"]
    assert k.c_prototype == ('extern "C" __global__ void gemm_kernel(const tj_float16 *A, '
                             "const tj_float16 *B, tj_float16 *C, int32_t m)")
    for m in (1, 64, 1000):
        a, b = FakeCudaTensor((m, 256), "float16"), FakeCudaTensor((256, 256), "float16")
        c = k(a, b, stream=0x42)
        assert c.shape == (m, 256) and c.dtype == "float16"
        (function,) = fake.records("cuModuleGetFunction")  # loaded once
        assert function["name"] == "gemm_kernel" and function["param_sizes"] == [8, 8, 8, 4]
        assert fake.launches()[-1] == {
            "fn": "cuLaunchKernel", "result": 0, "context": 0, "function": "gemm_kernel",
            "module": function["module"], "grid": [4, -(-m // 64), 1], "block": [128, 1, 1],
            "shared_mem": 16384, "stream": 0x42,
            "args": [_ptr(a.address), _ptr(b.address), _ptr(c.address), _i32(m)]}
    assert len(fake.launches()) == 3


def test_sm90a_tma_gemm_encodes_its_tensor_maps_per_call(fake, cuda_kernels):
    k = cuda_kernels["gemm90"]  # TileLang's JITKernel, tilejit inside
    fake.set_capability(9, 0)
    common = {"fn": "cuTensorMapEncodeTiled", "result": 0, "context": 0, "data_type": 6,
              "rank": 2, "strides": [512], "element_strides": [1, 1], "interleave": 0,
              "l2_promotion": 2, "oob_fill": 0}
    for call, m in enumerate((64, 1000, 65)):
        a, b = FakeCudaTensor((m, 256), "float16"), FakeCudaTensor((256, 256), "float16")
        c = k(a, b, stream=0x42)
        enc_a, enc_b = fake.records("cuTensorMapEncodeTiled")[2 * call:]
        assert enc_a == {**common, "address": a.address, "dims": [256, m], "box": [32, 64],
                         "swizzle": 2}
        assert enc_b == {**common, "address": b.address, "dims": [256, 256],
                         "box": [64, 32], "swizzle": 3}
        (function,) = fake.records("cuModuleGetFunction")
        assert function["param_sizes"] == [128, 128, 8, 4]
        # Warp-specialised: 256 threads where the user wrote 128.
        assert fake.launches()[-1] == {
            "fn": "cuLaunchKernel", "result": 0, "context": 0, "function": "gemm_kernel",
            "module": function["module"], "grid": [4, -(-m // 64), 1], "block": [256, 1, 1],
            "shared_mem": 16384, "stream": 0x42,
            "args": [_map_bytes(a.address, [256, m], [512], [32, 64]),
                     _map_bytes(b.address, [256, 256], [512], [64, 32]), _ptr(c.address),
                     _i32(m)]}


def test_two_kernel_blocks_launch_in_order_on_one_stream(fake, cuda_kernels):
    k = cuda_kernels["two"]
    for n in (1, 300, 1024):
        a = FakeCudaTensor((n,))
        b = k(a, stream=0x42)
        first, second = fake.launches()[-2:]
        assert first == {
            "fn": "cuLaunchKernel", "result": 0, "context": 0, "function": "two_kernel",
            "module": first["module"], "grid": [-(-n // 128), 1, 1], "block": [128, 1, 1],
            "shared_mem": 0, "stream": 0x42,
            "args": [_ptr(a.address), _ptr(b.address), _i32(n)]}
        assert second == {
            "fn": "cuLaunchKernel", "result": 0, "context": 0, "function": "two_kernel_1",
            "module": first["module"], "grid": [-(-n // 256), 1, 1], "block": [256, 1, 1],
            "shared_mem": 0, "stream": 0x42, "args": [_ptr(b.address), _i32(n)]}
    assert len(fake.launches()) == 6


def test_cluster_dims_launch_through_cuLaunchKernelEx(fake, cuda_kernels):
    k = cuda_kernels["cluster"]
    fake.set_capability(9, 0)
    for n in (256, 1000):
        a = FakeCudaTensor((n,))
        b = k(a, stream=0x42)
        assert fake.launches()[-1] == {
            "fn": "cuLaunchKernelEx", "result": 0, "context": 0, "function": "scale_kernel",
            "module": fake.launches()[-1]["module"], "grid": [-(-n // 128), 1, 1],
            "block": [128, 1, 1], "shared_mem": 0, "stream": 0x42,
            "args": [_ptr(a.address), _ptr(b.address), _i32(n)],
            # TileLang's runtime: a cluster launch with programmatic stream serialization.
            "attrs": [{"id": 4, "cluster": [2, 1, 1]},
                      {"id": 6, "programmatic_stream_serialization": 1}]}
    # A grid the cluster does not divide: the driver's refusal, with the launch spelled out.
    with pytest.raises(RuntimeError, match=r"scale: cuLaunchKernelEx\(grid \(1, 1, 1\), "
                                           r"block \(128, 1, 1\), shared memory 0 bytes, "
                                           r"cluster \(2, 1, 1\), programmatic dependent "
                                           r"launch"):
        k(FakeCudaTensor((100,)))


# ---- On a GPU (marked `cuda`) ------------------------------------------------------------------


def _gpu_available() -> bool:
    return torch.cuda.is_available()


@pytest.mark.cuda
@pytest.mark.skipif(not _gpu_available(), reason="no CUDA GPU (torch.cuda.is_available())")
def test_gpu_tilelang_kernels_match_torch(child_env):
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    body = textwrap.dedent(f"""
        import sys, torch, tilelang
        sys.path.insert(0, {str(HERE)!r})
        import tilejit.tilelang as tt
        from test_tilelang import gemm, two_kernels, clustered
        target = {{"kind": "cuda", "arch": {arch!r}}}
        dev = torch.device("cuda")
        k = tilelang.compile(gemm(), out_idx=-1, target=target, execution_backend="tilejit")
        for m in (64, 1000):
            a = torch.randn(m, 256, device=dev, dtype=torch.float16)
            b = torch.randn(256, 256, device=dev, dtype=torch.float16)
            torch.testing.assert_close(k(a, b), a @ b, rtol=1e-2, atol=1e-1)
        k = tt.compile(two_kernels(), out_idx=-1, target=target)
        x = torch.randn(1000, device=dev)
        torch.testing.assert_close(k(x), 2 * x + 1)
        if {major} >= 9:
            k = tt.compile(clustered(), out_idx=-1, target=target)
            x = torch.randn(1024, device=dev)
            torch.testing.assert_close(k(x), 3 * x)
        torch.cuda.synchronize()
        print("ok")
    """)
    env = child_env()
    env.pop("TILEJIT_LIBCUDA", None)
    done = subprocess.run([sys.executable, "-c", body], check=False, capture_output=True,
                          text=True, env=env, timeout=900, cwd=HERE.parent)
    print(done.stdout, done.stderr)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok")


# ---- Export: a TileLang kernel leaves the process, and loads without TileLang -----------------


def test_a_tilelang_kernel_exports_and_loads_without_tilelang(cpu_kernels, tmp_path,
                                                              child_python):
    out = cpu_kernels["axpy"].adapter.kernel.export(tmp_path / "axpy")
    stdout = child_python("-c", textwrap.dedent(f"""
        import sys, torch, tilejit
        k = tilejit.load({str(out)!r})
        x, y = torch.arange(12.0).reshape(3, 4), torch.ones(3, 4)
        print(k(x, y).tolist())
        try:
            k(x, torch.ones(3, 5))
        except ValueError as exc:
            print(exc)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("tilelang", "tvm")))
    """))
    x, y = torch.arange(12.0).reshape(3, 4), torch.ones(3, 4)
    assert stdout.splitlines() == [
        str((2 * x + y).tolist()),
        ("axpy_kernel: argument 1 'Y': expected shape[1] == n (= 4, bound by argument 0 "
         "'X'), got 5"),
        "[]"]


def test_a_tilelang_tma_gemm_export_launches_as_the_original(fake, cuda_kernels, tmp_path):
    original = cuda_kernels["gemm90"].adapter.kernel
    fake.set_capability(9, 0)
    loaded = tilejit.load(original.export(tmp_path / "gemm"))
    a, b = FakeCudaTensor((100, 256), "float16"), FakeCudaTensor((256, 256), "float16")
    seen = []
    for kernel in (original, loaded):
        before = len(fake.records("cuTensorMapEncodeTiled"))
        c = kernel(a, b, stream=0x42)
        launch = dict(fake.launches()[-1])
        launch.pop("module")
        launch["args"] = [arg.replace(_ptr(c.address), "C") for arg in launch["args"]]
        seen.append((launch, fake.records("cuTensorMapEncodeTiled")[before:]))
    assert seen[0] == seen[1] and len(seen[1][1]) == 2
