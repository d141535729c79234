"""The CUDA target (docs/kernel-abi.md#cuda-kernels): compile with nvcc or NVRTC,
launch through the driver API on the producer's stream.

Without a GPU, everything up to the driver is real: nvcc and NVRTC compile the kernels,
and launches go through the fake driver (tests/fake_cuda) that records exactly what the
core handed cuLaunchKernel: module image, function, grid from the symbols, block, shared
memory, stream and each argument's bytes, sized by the compiled kernel's own parameter
table. FakeCudaTensor stands in for CUDA tensors: a fake device address behind the DLPack
exchange API, whose current work stream is a sentinel.

The driver is process-wide (loaded once, at the first CUDA call), so this module runs with
TILEJIT_LIBCUDA at the fake, and what must see no driver, or the real one, runs in a child
process: the "no driver" tests here, and the GPU tests (marked `cuda`, skipped when torch
sees no GPU).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_TILEJIT, load_fakes, no_nvrtc

import tilejit
from tilejit import T
from tilejit.builder import cuda_compiler as cc
from tilejit.builder.cuda_compiler import DEFAULT_ARCH
from tilejit.tools.demo import CUDA_MATMUL, CUDA_VEC_ADD

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent


fakes = load_fakes()
FakeCudaTensor = fakes.FakeCudaTensor
SENTINEL = fakes.SENTINEL_STREAM
# NVRTC is optional (a pip wheel, or the toolkit's library): what needs it skips without it.
# nvcc is part of the test setup (the CUDA toolkit): without it the tests fail, saying so.
NO_NVRTC = no_nvrtc()
needs_nvrtc = pytest.mark.skipif(bool(NO_NVRTC), reason=NO_NVRTC or "NVRTC loads")
COMPILERS = ["nvcc", pytest.param("nvrtc", marks=needs_nvrtc)]
# The developer's own driver override, for the GPU tests' child processes (this module
# points TILEJIT_LIBCUDA at the fake).
_OWN_LIBCUDA = os.environ.get("TILEJIT_LIBCUDA")
BACKENDS = ["cython", "dlpack", "ctypes"]


def ptr(value: int) -> str:
    """An argument's bytes as the fake driver records them: little-endian hex."""
    return value.to_bytes(8, "little").hex()


def i64(value: int) -> str:
    return (value % (1 << 64)).to_bytes(8, "little").hex()


# ---- Kernels ----------------------------------------------------------------------------------

# The demo's kernels: the tests check what `python -m tilejit demo --target cuda` runs.
VEC_ADD, MATMUL = CUDA_VEC_ADD, CUDA_MATMUL

# Reverses X in one block through dynamic shared memory of n floats: over 48 KiB for
# n > 12288, which needs the opt-in (cuFuncSetAttribute) before the launch.
REVERSE = r"""
extern "C" __global__ void reverse(const float *X, float *Y, int64_t n) {
  extern __shared__ float staged[];
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) staged[i] = X[i];
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) Y[i] = staged[n - 1 - i];
}
"""

# Every scalar kind, a raw pointer and an optional buffer.
AXPBY = r"""
__global__ void axpby(const float *X, float *Y, float a, double b, int32_t k, bool flag,
                      int8_t small, float *P, const float *bias, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && flag) Y[i] = a * X[i] + (float)b * k + small + (bias ? bias[i] : 0.0f);
  if (i == 0 && P) P[0] = 1.0f;
}
"""


def vec_add_program():
    n = T.symbol("n")
    return tilejit.Program(
        "vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                    T.Buffer((n,), "float32", name="B", const=True),
                    T.Buffer((n,), "float32", name="C")],
        VEC_ADD, grid=(T.ceildiv(n, 256),), block=(256,))


def matmul_program():
    m = T.symbol("M")
    return tilejit.Program(
        "matmul", [T.Buffer((m, 128), "float32", name="A", const=True),
                   T.Buffer((128, 64), "float32", name="B", const=True),
                   T.Buffer((m, 64), "float32", name="C")],
        MATMUL, grid=(4, T.ceildiv(m, 16)), block=(16, 16))


def reverse_program():
    n = T.symbol("n")
    return tilejit.Program(
        "reverse", [T.Buffer((n,), "float32", name="X", const=True),
                    T.Buffer((n,), "float32", name="Y")],
        REVERSE, grid=(1,), block=(256,), shared_mem=n * 4)


def axpby_program():
    n = T.symbol("n")
    return tilejit.Program(
        "axpby", [T.Buffer((n,), "float32", name="X", const=True),
                  T.Buffer((n,), "float32", name="Y"), T.Scalar("float32", name="a"),
                  T.Scalar("float64", name="b"), T.Scalar("int32", name="k"),
                  T.Scalar("bool", name="flag"), T.Scalar("int8", name="small"),
                  T.Pointer("float32", name="P"),
                  T.Buffer((n,), "float32", name="bias", const=True, optional=True)],
        AXPBY, grid=(T.ceildiv(n, 128),), block=(128,))


@pytest.fixture(scope="session")
def kernels():
    """``kernels(program_factory, compiler, out_idx=None, arch="sm_80")``, compiled once per
    session (and cached on disk in the session's TILEJIT_CACHE_DIR)."""
    built = {}

    def get(factory, compiler="nvrtc", out_idx=None, arch="sm_80"):
        if compiler == "nvrtc" and NO_NVRTC:
            pytest.skip(NO_NVRTC)
        key = (factory, compiler, str(out_idx), str(arch))
        if key not in built:
            built[key] = tilejit.compile(factory(), out_idx=out_idx, target="cuda", arch=arch,
                                         compiler=compiler)
        return built[key]

    return get


# ---- Compilation: real nvcc and NVRTC ----------------------------------------------------------


def _cubin_defines(image: bytes, name: str) -> bool:
    return image[:4] == b"\x7fELF" and b".text." + name.encode() + b"\x00" in image


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("factory", [vec_add_program, matmul_program, reverse_program,
                                     axpby_program], ids=lambda f: f.__name__[:-8])
def test_compiles_to_a_cubin_defining_the_kernel(kernels, factory, compiler):
    k = kernels(factory, compiler)
    name = factory().name
    assert k.target == "cuda"
    assert k.library_path.endswith(".cubin")
    assert _cubin_defines(Path(k.library_path).read_bytes(), name)
    assert k.c_prototype.startswith(f'extern "C" __global__ void {name}(')
    # The compiled file is the prelude, then the user's source under its own name, its
    # definition given C linkage where the source left it out.
    source = k.get_host_source()
    user = factory().source
    assert f"#line 1 \"{name}.cu\"\n" in source
    if 'extern "C"' in user:
        assert source.endswith(user + "\n")
    else:
        assert source.count('extern "C"') == 1


def test_c_prototypes(kernels):
    assert kernels(vec_add_program).c_prototype == (
        'extern "C" __global__ void vec_add(const float *A, const float *B, float *C, '
        "int64_t n)")
    # AXPBY defines axpby without extern "C": the declaration before it gives it C linkage.
    assert kernels(axpby_program).c_prototype == (
        'extern "C" __global__ void axpby(const float *X, float *Y, float a, double b, '
        "int32_t k, bool flag, int8_t small, float *P, const float *bias, int64_t n)")


def test_fatbin_for_several_architectures(kernels):
    k = kernels(vec_add_program, "nvcc", arch=("sm_80", "sm_90"))
    image = Path(k.library_path).read_bytes()
    assert k.library_path.endswith(".fatbin")
    assert struct.unpack_from("<I", image)[0] == 0xBA55ED50  # fatbin magic
    assert image.count(b"\x7fELF") == 2  # one cubin per architecture, uncompressed
    assert image.count(b".text.vec_add\x00") >= 2


@pytest.mark.parametrize("compiler", COMPILERS)
def test_ptx_for_a_virtual_architecture(kernels, compiler):
    k = kernels(vec_add_program, compiler, arch="compute_80")
    assert k.library_path.endswith(".ptx")
    ptx = Path(k.library_path).read_text()
    assert ".entry vec_add(" in ptx and ".target sm_80" in ptx


@needs_nvrtc
def test_nvrtc_compiles_one_architecture_at_a_time():
    with pytest.raises(tilejit.CompileError, match="NVRTC compiles for one architecture, got "
                       "sm_80, sm_90: use compiler='nvcc' for a fatbin"):
        tilejit.compile(vec_add_program(), target="cuda", arch="80,90", compiler="nvrtc")


@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_error_carries_the_log_and_the_users_line(compiler):
    source = VEC_ADD.replace("if (i < n)", "int oops = ;\n  if (i < n)")
    program = tilejit.Program("vec_add", vec_add_program().params, source,
                              grid=(1,), block=(1,))
    with pytest.raises(tilejit.CompileError) as info:
        tilejit.compile(program, target="cuda", arch="sm_80", compiler=compiler)
    err = info.value
    assert err.kernel_name == "vec_add"
    assert "error" in err.log and "vec_add.cu(4)" in err.log
    assert err.lineno == 4 and err.line_text.strip() == "int oops = ;"
    assert "line 4: int oops = ;" in str(err)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_a_definition_with_other_parameter_types_is_reported(compiler):
    # Without extern "C" (tilejit gives it C linkage) and with int n for an int64 symbol:
    # refused before nvcc runs, naming the parameter, the declared and the found type.
    source = VEC_ADD.replace('extern "C" ', "").replace("int64_t n", "int n")
    program = tilejit.Program("vec_add", vec_add_program().params, source,
                              grid=(1,), block=(1,))
    with pytest.raises(tilejit.CompileError, match=r"vec_add: parameter 3 'n' is declared "
                       r"int64_t n, the definition has 'int n': 32-bit integer, not int64"):
        tilejit.compile(program, target="cuda", arch="sm_80", compiler=compiler)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_half_precision_types(compiler):
    n = T.symbol("n")
    program = tilejit.Program(
        "to_half", [T.Buffer((n,), "bfloat16", name="X", const=True),
                    T.Buffer((n,), "float16", name="Y"),
                    T.Buffer((n,), "float8_e4m3fn", name="Z")],
        r"""
        extern "C" __global__ void to_half(const tj_bfloat16 *X, tj_float16 *Y,
                                           tj_float8_e4m3fn *Z, int64_t n) {
          int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) {
            Y[i] = __float2half(__bfloat162float(X[i]));
            Z[i] = __nv_fp8_e4m3(__bfloat162float(X[i]));
          }
        }
        """, grid=(T.ceildiv(n, 256),), block=(256,))
    k = tilejit.compile(program, out_idx=[1, 2], target="cuda", arch="sm_90", compiler=compiler)
    assert "#include <cuda_bf16.h>" in k.get_host_source()
    assert "typedef __nv_bfloat16 tj_bfloat16;" in k.get_host_source()
    assert _cubin_defines(Path(k.library_path).read_bytes(), "to_half")


@needs_nvrtc
def test_demo_kernels_compile(tmp_path):
    from tilejit.tools.demo import cuda_programs

    for program, out in cuda_programs():
        k = tilejit.compile(program, out_idx=out, target="cuda", arch="sm_80", compiler="nvrtc")
        assert _cubin_defines(Path(k.library_path).read_bytes(), program.name)


def test_compiles_are_cached_per_arch_and_compiler(kernels):
    a = kernels(vec_add_program, "nvrtc")
    again = tilejit.compile(vec_add_program(), target="cuda", arch="sm_80", compiler="nvrtc")
    assert again.library_path == a.library_path
    others = {kernels(vec_add_program, "nvcc").library_path,
              kernels(vec_add_program, "nvrtc", arch="sm_90").library_path, a.library_path}
    assert len(others) == 3


def test_architecture_spellings_and_sources(monkeypatch):
    assert cc.resolve_arch("9.0") == ("sm_90",)
    assert cc.resolve_arch("sm90a") == ("sm_90a",)
    assert cc.resolve_arch(["80", "compute_90", "sm_80"]) == ("sm_80", "compute_90")
    assert cc.resolve_arch("80, 10.0") == ("sm_80", "sm_100")
    with pytest.raises(ValueError, match="unknown CUDA architecture '9'"):
        cc.resolve_arch("9")
    monkeypatch.setenv("TILEJIT_CUDA_ARCH", "8.9")
    assert cc.resolve_arch() == ("sm_89",)
    assert cc.resolve_arch("sm_75") == ("sm_75",)  # the argument first
    monkeypatch.setenv("TILEJIT_CUDA_COMPILER", "nvrtc")
    assert cc.resolve_compiler() == "nvrtc"
    assert cc.resolve_compiler("nvcc") == "nvcc"
    with pytest.raises(ValueError, match="unknown CUDA compiler 'clang'"):
        cc.resolve_compiler("clang")


def _uncached_vec_add():
    """vec_add_program with a source no cache holds (a fresh comment)."""
    program = vec_add_program()
    return tilejit.Program(program.name, program.params,
                           f"// {os.urandom(8).hex()}\n{program.source}", grid=program.grid,
                           block=program.block)


def test_missing_compilers_are_compile_errors(monkeypatch):
    monkeypatch.setenv("TILEJIT_NVCC", "/nonexistent/tilejit-test/nvcc")
    with pytest.raises(tilejit.CompileError, match="TILEJIT_NVCC='/nonexistent/tilejit-test/"
                       "nvcc' is not an executable file"):
        tilejit.compile(_uncached_vec_add(), target="cuda", arch="sm_80", compiler="nvcc")
    monkeypatch.setenv("TILEJIT_LIBNVRTC", "/nonexistent/tilejit-test/libnvrtc.so")
    monkeypatch.setattr(cc._Nvrtc, "_instance", None)  # as in a process that never loaded it
    with pytest.raises(tilejit.CompileError, match=r"NVRTC is not available \(tried "
                       r"/nonexistent/tilejit-test/libnvrtc.so: .*pip install "
                       r"nvidia-cuda-nvrtc"):
        tilejit.compile(_uncached_vec_add(), target="cuda", arch="sm_80", compiler="nvrtc")


def test_without_its_compiler_a_cached_kernel_still_loads(monkeypatch, tilejit_cache_dir):
    # A deployed machine with the cache but not the compiler that filled it.
    first = tilejit.compile(vec_add_program(), target="cuda", arch="sm_80", compiler="nvcc")
    monkeypatch.setenv("TILEJIT_NVCC", "/nonexistent/tilejit-test/nvcc")
    again = tilejit.compile(vec_add_program(), target="cuda", arch="sm_80", compiler="nvcc")
    assert again.library_path == first.library_path
    n = T.symbol("n")
    cpu = tilejit.Program("twice", [T.Buffer((n,), "float32", name="X")],
                          "void twice(float *X, int64_t n) { for (int64_t i = 0; i < n; ++i) "
                          "X[i] *= 2; }")
    built = tilejit.compile(cpu)
    monkeypatch.setenv("TILEJIT_CC", "/nonexistent/tilejit-test/cc")
    x = np.ones(3, np.float32)
    tilejit.compile(cpu)(x)
    assert x.tolist() == [2.0] * 3 and tilejit.compile(cpu).library_path == built.library_path
    with pytest.raises(tilejit.CompileError, match=r"twice2: no C compiler found: "
                                                   r"TILEJIT_CC=.*; and no kernel compiled from "
                                                   r"this source is in the cache"):
        tilejit.compile(tilejit.Program("twice2", cpu.params, cpu.source.replace("twice",
                                                                                 "twice2")))


@needs_nvrtc
def test_jit_compiles_cuda_programs_lazily(kernels):
    @tilejit.jit(out_idx=-1, target="cuda", arch="sm_80", compiler="nvrtc")
    def add(block: int = 256):
        params = vec_add_program().params
        n = params[0].shape[0]
        return tilejit.Program("vec_add", params, VEC_ADD, grid=(T.ceildiv(n, block),),
                               block=(block,))

    k = add()
    assert k.target == "cuda" and add(block=256) is k and add.cache_info() == 1
    assert k.library_path == kernels(vec_add_program, out_idx=-1).library_path


def test_program_checks_for_cuda():
    n = T.symbol("n")
    params = [T.Buffer((n,), "float32", name="A")]
    with pytest.raises(ValueError, match=r"^p: a CUDA program needs grid= with 1 to 3 entries"):
        tilejit.compile(tilejit.Program("p", params, "", block=(1,)), target="cuda")
    with pytest.raises(ValueError, match=r"^p: block\[0\] = 0, expected >= 1$"):
        tilejit.compile(tilejit.Program("p", params, "", grid=(1,), block=(0,)), target="cuda")
    with pytest.raises(ValueError, match=r"^p: grid\[0\] = m \+ 1 uses symbol 'm', which no "):
        tilejit.compile(tilejit.Program("p", params, "", grid=(T.symbol("m") + 1,), block=(1,)),
                        target="cuda")
    with pytest.raises(ValueError, match=r"^p: grid\[0\] = n uses a symbol 'n' other than the "
                       r"parameters' 'n'"):
        tilejit.compile(tilejit.Program("p", params, "", grid=(T.symbol("n"),), block=(1,)),
                        target="cuda")
    with pytest.raises(TypeError, match=r"^p: shared_mem must be an int or a symbolic"):
        tilejit.compile(tilejit.Program("p", params, "", grid=(1,), block=(1,),
                                        shared_mem=1.5), target="cuda")
    with pytest.raises(ValueError, match="arch= and compiler= are for target='cuda'"):
        tilejit.compile(tilejit.Program("p", params, "void p(float *A, int64_t n) {}"),
                        target="cpu", arch="sm_80")


# ---- Launches through the fake driver ---------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_launch_reaches_the_driver_exactly(fake, kernels, backend):
    k = kernels(vec_add_program, "nvcc").with_backend(backend)
    a = FakeCudaTensor((1000,), byte_offset=64)
    b = FakeCudaTensor((1000,))
    c = FakeCudaTensor((1000,), byte_offset=4)
    assert k(a, b, c, stream=0x1234) is None
    (load,) = fake.records("cuModuleLoadData")
    assert load["kind"] == "cubin" and load["context"] == 0
    assert bytes.fromhex(load["image"]) == Path(k.library_path).read_bytes()
    (function,) = fake.records("cuModuleGetFunction")
    assert function["name"] == "vec_add" and function["param_sizes"] == [8, 8, 8, 8]
    (launch,) = fake.launches()
    assert launch == {
        "fn": "cuLaunchKernel", "result": 0, "context": 0, "function": "vec_add",
        "module": load["module"], "grid": [4, 1, 1], "block": [256, 1, 1], "shared_mem": 0,
        "stream": 0x1234,
        "args": [ptr(a.address + 64), ptr(b.address), ptr(c.address + 4), i64(1000)]}
    # The second call finds the module loaded; the grid follows n.
    k(*(FakeCudaTensor((257,)) for _ in range(3)), stream=0x1234)
    assert len(fake.records("cuModuleLoadData")) == 1
    assert fake.launches()[-1]["grid"] == [2, 1, 1]


def _calls(fake) -> list[str]:
    return [record["fn"] for record in fake.records()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_steady_state_launch_is_one_query_and_the_launch(fake, kernels, backend):
    # With or without a current context on the thread, no push and pop per call: a thread
    # with none gets the device's primary context made current once, and left so.
    import threading

    k = kernels(vec_add_program, "nvcc").with_backend(backend)
    a, b, c = (FakeCudaTensor((1000,)) for _ in range(3))

    def run(current):
        fake.set_current(current)
        fake.reset()
        k(a, b, c, stream=5)
        first = _calls(fake)
        fake.reset()
        k(a, b, c, stream=5)
        k(a, b, c, stream=5)
        return first, _calls(fake)

    for current in (-1, 0):
        seen = []
        thread = threading.Thread(target=lambda: seen.append(run(current)))  # noqa: B023
        thread.start()
        thread.join()
        (first, steady), = seen
        assert steady == ["cuCtxGetCurrent", "cuLaunchKernel"] * 2
        assert "cuCtxPushCurrent_v2" not in first
        assert ("cuCtxSetCurrent" in first) == (current == -1)
        fake.reset()
    # A thread current on another device keeps it: that launch pushes device 0's context.
    fake.set_current(1)
    k(a, b, c, stream=5)
    assert _calls(fake) == ["cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxPushCurrent_v2",
                            "cuLaunchKernel", "cuCtxPopCurrent_v2"]


@pytest.mark.parametrize("backend", ["cython", "ctypes"])  # outputs from the exchange API
def test_a_bound_launch_is_the_direct_calls_launch(fake, kernels, backend):
    k = kernels(vec_add_program, "nvcc", out_idx=-1).with_backend(backend)
    a, b = FakeCudaTensor((1000,), byte_offset=64), FakeCudaTensor((1000,))
    h = k.bind(a, b)
    c = h.outputs
    assert isinstance(c, FakeCudaTensor) and c.shape == (1000,)
    assert fake.launches() == []  # bound and packed: nothing launched yet
    assert h(stream=0x1234) is c
    fake.reset()
    assert h(stream=0x1234) is c
    assert _calls(fake) == ["cuCtxGetCurrent", "cuLaunchKernel"]
    (bound,) = fake.launches()
    fake.reset()
    direct_output = k(a, b, stream=0x1234)
    (direct,) = fake.launches()
    assert {**direct, "args": direct["args"][:2] + direct["args"][3:]} == \
        {**bound, "args": bound["args"][:2] + bound["args"][3:]}
    assert bound["args"][2] == ptr(c.address) and direct["args"][2] == ptr(direct_output.address)
    assert bound["grid"] == [4, 1, 1] and bound["stream"] == 0x1234


@pytest.mark.parametrize("backend", ["cython", "ctypes"])
def test_a_bound_launch_reads_the_current_stream_at_every_launch(fake, kernels, backend):
    k = kernels(vec_add_program, "nvcc").with_backend(backend)
    h = k.bind(*(FakeCudaTensor((10,)) for _ in range(3)))
    before = FakeCudaTensor.api_calls["current_work_stream"]
    h()
    h()
    assert [launch["stream"] for launch in fake.launches()] == [SENTINEL, SENTINEL]
    assert FakeCudaTensor.api_calls["current_work_stream"] == before + 2
    h(stream=7)
    assert fake.launches()[-1]["stream"] == 7
    assert FakeCudaTensor.api_calls["current_work_stream"] == before + 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_launch_updates_on_the_device(fake, kernels, backend):
    k = kernels(vec_add_program, "nvcc").with_backend(backend)
    a, b, c = (FakeCudaTensor((100,)) for _ in range(3))
    h = k.bind(a, b, c)
    b2 = FakeCudaTensor((100,))
    h.update(B=b2)(stream=1)
    assert fake.launches()[-1]["args"][:3] == [ptr(a.address), ptr(b2.address), ptr(c.address)]
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected device cuda:0 "
                       r"\(that of argument 0 'A'\), got cuda:1$"):
        h.update(B=FakeCudaTensor((100,), device_id=1))
    with pytest.raises(ValueError, match=r"^vec_add: argument 2 'C': expected the data pointer "
                       r"aligned to 4 bytes, got address 0x[0-9a-f]+ \(misaligned by 2\)$"):
        h.update(C=FakeCudaTensor((100,), byte_offset=2))
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected a cuda tensor, "
                       r"got a tensor on device cpu:0$"):
        h.update(A=np.ones(100, np.float32))
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected shape\[0\] == n "
                       r"\(= 100, bound by the inputs\), got 99$"):
        h.update(A=FakeCudaTensor((99,)))
    h(stream=1)
    assert fake.launches()[-1]["args"][1] == ptr(b2.address)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bound_launch_kept_across_a_capture(fake, kernels, backend):
    # What torch.cuda.graph does: the capture stream becomes the current stream, and work
    # enqueued on it is recorded. A handle made before launches there, and nothing the
    # driver forbids during a capture happens.
    k = kernels(vec_add_program, "nvcc").with_backend(backend)
    h = k.bind(*(FakeCudaTensor((1000,)) for _ in range(3)))
    h(stream=SENTINEL)
    stream = SENTINEL if backend != "dlpack" else 0
    fake.begin_capture(stream)
    h()
    h(stream=stream)
    assert fake.end_capture(stream) == 0
    assert fake.forbidden() == 0
    assert [launch.get("captured") for launch in fake.launches()] == [None, 1, 1]


def test_the_first_call_in_a_capture_loads_no_module(fake, kernels, tmp_path):
    # Compiled or loaded while a context is current, a kernel's module is loaded then: its
    # first call may be captured. Without it, the call is refused, saying so, and nothing
    # forbidden reaches the driver.
    fake.set_current(0)
    k = tilejit.compile(vec_add_program(), target="cuda", compiler="nvcc", arch="sm_80")
    assert len(fake.records("cuModuleLoadData")) == 1
    k.export(tmp_path / "vec_add")
    loaded = tilejit.load(tmp_path / "vec_add")
    assert len(fake.records("cuModuleLoadData")) == 2
    tensors = [FakeCudaTensor((10,)) for _ in range(3)]
    for kernel in (k, loaded):
        fake.begin_capture(SENTINEL)
        kernel(*tensors)
        assert fake.end_capture(SENTINEL) == 0
    assert len(fake.records("cuModuleLoadData")) == 2 and fake.forbidden() == 0
    # A thread with no context at compile time: nothing loaded ahead.
    fake.set_current(-1)
    cold = tilejit.compile(vec_add_program(), target="cuda", compiler="nvcc", arch="sm_80")
    fake.reset()
    fake.begin_capture(SENTINEL)
    with pytest.raises(RuntimeError, match=r"^vec_add: the kernel's module is not loaded on "
                       r"cuda:0, and stream 0x5eed5 is being captured into a CUDA graph, where "
                       r"no module may be loaded: call kernel.warmup\(\)"):
        cold(*tensors)
    assert fake.end_capture(SENTINEL) == 0 and fake.forbidden() == 0
    assert cold.warmup(0) is cold
    fake.begin_capture(SENTINEL)
    cold(*tensors)
    assert fake.end_capture(SENTINEL) == 0 and fake.forbidden() == 0
    assert fake.launches()[-1]["captured"] == 1


def test_matmul_grid_from_the_dynamic_dimension(fake, kernels):
    k = kernels(matmul_program, "nvcc", out_idx=-1)
    for m in (1, 16, 17, 1000):
        a, b = FakeCudaTensor((m, 128)), FakeCudaTensor((128, 64))
        c = k(a, b)
        launch = fake.launches()[-1]
        assert launch["grid"] == [4, -(-m // 16), 1] and launch["block"] == [16, 16, 1]
        assert launch["args"] == [ptr(a.address), ptr(b.address), ptr(c.address), i64(m)]
        assert isinstance(c, FakeCudaTensor) and c.shape == (m, 64) and c.device_id == 0


@pytest.mark.parametrize("backend", ["cython", "ctypes"])
def test_stream_is_the_producers_current_work_stream(fake, kernels, backend):
    k = kernels(vec_add_program).with_backend(backend)
    a, b, c = (FakeCudaTensor((10,)) for _ in range(3))
    before = FakeCudaTensor.api_calls["current_work_stream"]
    k(a, b, c)
    assert fake.launches()[-1]["stream"] == SENTINEL
    assert FakeCudaTensor.api_calls["current_work_stream"] == before + 1
    # An explicit stream wins, as an int or through __cuda_stream__.
    k(a, b, c, stream=7)
    assert fake.launches()[-1]["stream"] == 7

    class Stream:
        def __cuda_stream__(self):
            return (0, 0xABC)

    k(a, b, c, stream=Stream())
    assert fake.launches()[-1]["stream"] == 0xABC
    assert FakeCudaTensor.api_calls["current_work_stream"] == before + 1


@pytest.mark.parametrize("backend", ["cython", "ctypes"])
def test_the_torch_op_launches_on_the_current_stream(fake, kernels, backend):
    # What torch.compile and CUDA graphs run: the op's implementation passes no stream, so
    # the launch is on the producer's current work stream (for torch: its current stream).
    pytest.importorskip("torch", reason="the kernel's torch op needs torch")
    from tilejit.frameworks.torch import op as torch_op

    k = kernels(vec_add_program).with_backend(backend)
    assert torch_op.schema(k.artifact) == ("(Tensor A, Tensor B, Tensor(a0!) C) -> ()", ("C",))
    implementation = torch_op.implementation(k)
    assert implementation(*(FakeCudaTensor((10,)) for _ in range(3))) is None
    assert fake.launches()[-1]["stream"] == SENTINEL


def test_dlpack_backend_uses_the_frameworks_stream(fake, kernels):
    # The standard protocol carries no stream; a producer that is not torch has none: 0.
    k = kernels(vec_add_program).with_backend("dlpack")
    k(*(FakeCudaTensor((10,)) for _ in range(3)))
    assert fake.launches()[-1]["stream"] == 0


def test_outputs_from_the_producers_allocator(fake, kernels):
    k = kernels(vec_add_program, out_idx=-1)
    a, b = FakeCudaTensor((300,), device_id=1), FakeCudaTensor((300,), device_id=1)
    c = k(a, b)
    assert isinstance(c, FakeCudaTensor)
    assert (c.shape, c.dtype, c.device_id) == ((300,), "float32", 1)
    launch = fake.launches()[-1]
    assert launch["context"] == 1  # device 1's primary context
    assert launch["args"] == [ptr(a.address), ptr(b.address), ptr(c.address), i64(300)]
    # Without the exchange API the output comes from NumPy, on the host: refused.
    with pytest.raises(RuntimeError, match=r"^vec_add: output 'C': allocated on cpu:0, "
                       r"expected cuda:1$"):
        k.with_backend("dlpack")(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_pointers_and_symbols_are_packed_in_their_c_types(fake, kernels, backend):
    k = kernels(axpby_program, "nvcc").with_backend(backend)
    x, y, bias = (FakeCudaTensor((1000,)) for _ in range(3))
    k(x, y, 2.5, 3, -7, True, np.int8(-2), 0x1000, None, stream=1)
    (sizes,) = [r["param_sizes"] for r in fake.records("cuModuleGetFunction")]
    assert sizes == [8, 8, 4, 8, 4, 1, 1, 8, 8, 8]
    launch = fake.launches()[-1]
    assert launch["grid"] == [8, 1, 1] and launch["block"] == [128, 1, 1]
    assert launch["args"] == [
        ptr(x.address), ptr(y.address), struct.pack("<f", 2.5).hex(),
        struct.pack("<d", 3.0).hex(), struct.pack("<i", -7).hex(), "01", "fe", ptr(0x1000),
        ptr(0), i64(1000)]
    k(x, y, 0.5, 1.25, 1 << 20, False, 3, None, bias, stream=1)
    assert fake.launches()[-1]["args"] == [
        ptr(x.address), ptr(y.address), struct.pack("<f", 0.5).hex(),
        struct.pack("<d", 1.25).hex(), struct.pack("<i", 1 << 20).hex(), "00", "03", ptr(0),
        ptr(bias.address), i64(1000)]


def test_dynamic_shared_memory_beyond_48k_is_opted_in(fake, kernels):
    k = kernels(reverse_program, "nvcc", out_idx=-1)
    k(FakeCudaTensor((1000,)))
    assert fake.launches()[-1]["shared_mem"] == 4000
    assert fake.records("cuFuncSetAttribute") == []
    k(FakeCudaTensor((20000,)))
    (attribute,) = fake.records("cuFuncSetAttribute")
    assert (attribute["function"], attribute["value"]) == ("reverse", 80000)
    assert fake.launches()[-1]["shared_mem"] == 80000
    k(FakeCudaTensor((20000,)))
    assert len(fake.records("cuFuncSetAttribute")) == 1
    with pytest.raises(RuntimeError, match=r"the device allows at most 232448 bytes of shared "
                       "memory per block"):
        k(FakeCudaTensor((100000,)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_launch_is_a_runtime_error_with_the_drivers_message(fake, kernels, backend):
    k = kernels(vec_add_program).with_backend(backend)
    args = [FakeCudaTensor((1000,)) for _ in range(3)]
    fake.fail("cuLaunchKernel", 701)  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    with pytest.raises(RuntimeError) as info:
        k(*args, stream=0x99)
    assert str(info.value) == (
        "vec_add: cuLaunchKernel(grid (4, 1, 1), block (256, 1, 1), shared memory 0 bytes, "
        "stream 0x99) failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (too many resources "
        "requested for launch)")
    k(*args, stream=0x99)  # the next launch goes through
    # A fresh kernel made with no current context loads its module at its first call.
    fake.set_current(-1)
    fresh = k.with_backend(backend)
    fake.fail("cuModuleLoadData", 200)  # CUDA_ERROR_INVALID_IMAGE
    with pytest.raises(RuntimeError, match=r"^vec_add: cuModuleLoadData failed: "
                       r"CUDA_ERROR_INVALID_IMAGE \(device kernel image is invalid\)$"):
        fresh(*args)


def test_devices_are_checked_before_any_launch(fake, kernels):
    k = kernels(vec_add_program)
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected a cuda tensor, "
                       r"got a tensor on device cpu:0$"):
        k(np.zeros(4, np.float32), FakeCudaTensor((4,)), FakeCudaTensor((4,)))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected device cuda:0 "
                       r"\(that of argument 0 'A'\), got cuda:1$"):
        k(FakeCudaTensor((4,)), FakeCudaTensor((4,), device_id=1), FakeCudaTensor((4,)))
    assert fake.launches() == []


def test_empty_tensors_launch_nothing(fake, kernels):
    k = kernels(vec_add_program)
    k(*(FakeCudaTensor((0,)) for _ in range(3)))
    assert fake.launches() == []


@needs_nvrtc
def test_arch_from_the_device_when_a_driver_is_present(fake, kernels, monkeypatch):
    monkeypatch.delenv("TILEJIT_CUDA_ARCH", raising=False)
    fake.set_capability(8, 6)
    assert cc.resolve_arch() == ("sm_86",)
    attributes = [r["attribute"] for r in fake.records("cuDeviceGetAttribute")]
    assert attributes == [75, 76]  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
    k = tilejit.compile(vec_add_program(), target="cuda", compiler="nvrtc")
    assert k.library_path not in (kernels(vec_add_program).library_path,
                                  kernels(vec_add_program, arch="sm_90").library_path)
    fake.set_capability(9, 0)
    again = tilejit.compile(vec_add_program(), target="cuda", compiler="nvrtc")
    assert again.library_path == kernels(vec_add_program, arch="sm_90").library_path


# ---- No driver, and the CLI, in child processes ---------------------------------------------

_NO_DRIVER = r"""
import sys, importlib.util
import numpy as np
import tilejit
from tilejit import T
from tilejit.builder import cuda_compiler

spec = importlib.util.spec_from_file_location("fakes", sys.argv[1])
fakes = importlib.util.module_from_spec(spec); spec.loader.exec_module(fakes)

n = T.symbol("n")
cpu = tilejit.compile(tilejit.Program("add1", [T.Buffer((n,), "float32", name="A"),
    T.Buffer((n,), "float32", name="B")],
    "void add1(float *A, float *B, int64_t n) { for (int64_t i = 0; i < n; ++i) B[i] = A[i] + 1; }"),
    out_idx=-1)
print("cpu", cpu(np.arange(3, dtype=np.float32)).tolist())
maps = open("/proc/self/maps").read()
print("driver loaded after cpu:", sys.argv[2] in maps)
print("arch", cuda_compiler.resolve_arch())
prog = tilejit.Program("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
    T.Buffer((n,), "float32", name="B", const=True), T.Buffer((n,), "float32", name="C")],
    sys.argv[3], grid=(T.ceildiv(n, 256),), block=(256,))
for backend in ("cython", "ctypes"):
    k = tilejit.compile(prog, target="cuda", compiler="nvrtc", execution_backend=backend)
    try:
        k(*(fakes.FakeCudaTensor((8,)) for _ in range(3)))
    except RuntimeError as exc:
        print(backend, "RuntimeError:", exc)
print("cpu again", cpu(np.zeros(2, dtype=np.float32)).tolist())
"""


@needs_nvrtc
def test_no_driver_is_a_runtime_error_at_call_time_only(child_env):
    missing = "/nonexistent/tilejit-test/libcuda.so.1"
    env = child_env(TILEJIT_LIBCUDA=missing)
    done = subprocess.run([sys.executable, "-c", _NO_DRIVER, str(HERE / "fake_cuda" / "fakes.py"),
                           missing, VEC_ADD], check=False, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "cpu [1.0, 2.0, 3.0]"
    assert lines[1] == "driver loaded after cpu: False"
    assert lines[2] == f"arch ('{DEFAULT_ARCH}',)"
    for backend, line in zip(("cython", "ctypes"), lines[3:5]):
        assert line.startswith(f"{backend} RuntimeError: vec_add: no CUDA driver: cannot load "
                               f"{missing} ("), line
        assert "set TILEJIT_LIBCUDA" in line
    assert lines[5] == "cpu again [1.0, 1.0]"


@needs_nvrtc
def test_importing_and_cpu_kernels_never_open_the_driver(child_env, fake_driver_path):
    env = child_env(TILEJIT_LIBCUDA=str(fake_driver_path))
    done = subprocess.run([sys.executable, "-c", _NO_DRIVER, str(HERE / "fake_cuda" / "fakes.py"),
                           str(fake_driver_path), VEC_ADD], check=False, capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "driver loaded after cpu: False"
    assert lines[2] == "arch ('sm_80',)"  # from the fake device, capability 8.0
    assert len(lines) == 4 and lines[3] == "cpu again [1.0, 1.0]"  # both launches went through


def test_demo_says_plainly_there_is_no_gpu(child_env):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_gpu_demo runs the demo")
    done = subprocess.run([sys.executable, "-m", "tilejit", "demo", "--target", "cuda"],
                          check=False, capture_output=True, text=True, env=child_env(),
                          timeout=300)
    assert done.returncode == 1
    assert done.stdout.strip() == ("tilejit demo --target cuda: no CUDA GPU is available here "
                                   "(torch.cuda.is_available() is False); nothing was run.")


# ---- On a GPU (marked `cuda`; each in a child process, with the real driver) ---------------


def _no_gpu() -> str | None:
    """Why the GPU tests cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (the GPU tests run kernels on torch CUDA tensors)"
    return None if torch.cuda.is_available() else "no CUDA GPU (torch.cuda.is_available())"


_NO_GPU = _no_gpu()
gpu = pytest.mark.skipif(_NO_GPU is not None, reason=_NO_GPU or "")

_GPU_PRELUDE = f"""
import sys, torch, tilejit
from tilejit import T
sys.path.insert(0, {str(HERE)!r})
from test_cuda import vec_add_program, matmul_program, reverse_program
torch.manual_seed(0)
dev = torch.device("cuda")
"""


def _gpu_env(child_env) -> dict:
    env = child_env()
    env.pop("TILEJIT_LIBCUDA", None)
    if _OWN_LIBCUDA:
        env["TILEJIT_LIBCUDA"] = _OWN_LIBCUDA
    return env


def _run_gpu(body: str, child_env, *argv: str, **overrides: str) -> str:
    env = {**_gpu_env(child_env), **overrides}
    done = subprocess.run([sys.executable, "-c", _GPU_PRELUDE + textwrap.dedent(body), *argv],
                          check=False, capture_output=True, text=True, env=env, timeout=600,
                          cwd=REPO_ROOT)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.cuda
@gpu
def test_gpu_vec_add_and_matmul_match_torch(child_env):
    out = _run_gpu("""
        for compiler in ("nvcc", "nvrtc"):
            for backend in ("cython", "dlpack", "ctypes"):
                add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda",
                                      compiler=compiler, execution_backend=backend)
                mm = tilejit.compile(matmul_program(), out_idx=-1, target="cuda",
                                     compiler=compiler, execution_backend=backend)
                for n in (1, 1000, 1 << 20):
                    a, b = torch.rand(n, device=dev), torch.rand(n, device=dev)
                    torch.testing.assert_close(add(a, b), a + b)
                for m in (1, 17, 1000):
                    a, b = torch.randn(m, 128, device=dev), torch.randn(128, 64, device=dev)
                    torch.testing.assert_close(mm(a, b), a @ b, rtol=1e-4, atol=1e-4)
                print(compiler, backend, "ok")
        """, child_env)
    assert out.count(" ok") == 6


@pytest.mark.cuda
@gpu
def test_gpu_side_stream_and_large_shared_memory(child_env):
    _run_gpu("""
        add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
        rev = tilejit.compile(reverse_program(), out_idx=-1, target="cuda")
        side = torch.cuda.Stream()
        a = torch.rand(1 << 22, device=dev)
        b = torch.rand(1 << 22, device=dev)
        # A kernel's first launch loads it, which under CUDA's lazy module loading waits
        # for the work queued on the device (torch's own `a * 2` blocked 0.1 s so on an
        # H200): launch each once before the stream is made busy.
        add(a * 2, b)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # keeps the side stream busy (about 0.1 s)
            a2 = a * 2                      # queued on the side stream
            c = add(a2, b)                  # must run after a2, on the side stream
            d = add(a2, b, stream=side)     # the same, explicitly
        assert not side.query()
        side.synchronize()
        torch.testing.assert_close(c, a * 2 + b)
        torch.testing.assert_close(d, a * 2 + b)
        x = torch.rand(20000, device=dev)  # 80000 bytes of dynamic shared memory
        torch.testing.assert_close(rev(x), x.flip(0))
        print("ok")
        """, child_env)


@pytest.mark.cuda
@gpu
def test_gpu_cuda_graph_capture_and_replay(child_env):
    _run_gpu("""
        add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
        a = torch.rand(4096, device=dev)
        b = torch.rand(4096, device=dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            add(a, b)  # warm-up: the module is loaded outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c = add(a, b)
        a.copy_(torch.rand(4096, device=dev))
        b.fill_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(c, a + 1.0)
        print("ok")
        """, child_env)


@pytest.mark.cuda
@gpu
def test_gpu_torch_compile_and_cuda_graphs(child_env):
    _run_gpu("""
        add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
        a = torch.rand(4096, device=dev)
        b = torch.rand(4096, device=dev)
        # reduce-overhead: the compiled graph, the kernel's op included, replays as a CUDA graph.
        f = torch.compile(lambda x, y: add(x, y) * 2, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):
            out = f(a, b)
        torch.testing.assert_close(out, (a + b) * 2)
        # The op captured in a CUDA graph by hand, on a side stream made current.
        op = add.torch_op
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            op(a, b)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c = op(a, b)
        b.fill_(1.0)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(c, a + 1.0)
        print("ok")
        """, child_env)


@pytest.mark.cuda
@gpu
def test_gpu_demo(child_env):
    env = _gpu_env(child_env)
    done = subprocess.run([sys.executable, "-m", "tilejit", "demo", "--target", "cuda"],
                          check=False, capture_output=True, text=True, env=env, timeout=600)
    print(done.stdout, done.stderr)
    assert done.returncode == 0 and "all kernels match torch" in done.stdout


@pytest.mark.cuda
@gpu
@pytest.mark.parametrize("registration", ["c", "python"])
def test_gpu_torch_op_streams_autograd_and_compile(child_env, registration):
    overrides = {"TILEJIT_TORCH_OPS": "python"} if registration == "python" else {}
    out = _run_gpu("""
        from tilejit.frameworks.torch import native_op
        print("registration:", native_op.describe())
        add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
        op = add.torch_op
        a, b = torch.rand(1 << 22, device=dev), torch.rand(1 << 22, device=dev)
        c = op(a, b)
        assert c.device == a.device, c.device
        torch.testing.assert_close(c, a + b)
        # The op launches on torch's current stream, as the direct call does.
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)
            a2 = a * 2
            c2 = op(a2, b)
        assert not side.query()
        side.synchronize()
        torch.testing.assert_close(c2, a * 2 + b)
        try:
            op(a.cpu(), b)
        except (ValueError, RuntimeError) as exc:
            print("refused:", type(exc).__name__, exc)
            assert "vec_add" in str(exc), exc
        else:
            raise AssertionError("a CPU tensor reached a CUDA kernel")
        # Autograd, eager, through the direct call and the op.
        add.register_autograd(lambda ctx, g: (g, g))
        w = torch.arange(1000.0, device=dev)
        x = torch.rand(1000, device=dev, requires_grad=True)
        y = torch.rand(1000, device=dev, requires_grad=True)
        (add(x, y) * w).sum().backward()
        torch.testing.assert_close(x.grad, w)
        torch.testing.assert_close(y.grad, w)
        x.grad = None
        (op(x, y) * w).sum().backward()
        torch.testing.assert_close(x.grad, w)
        # Compiled, dynamic sizes, training.
        f = torch.compile(lambda p, q: torch.relu(add(p, q)) * 2, fullgraph=True, dynamic=True)
        for n in (100, 1000, 5000):
            p = torch.randn(n, device=dev, requires_grad=True)
            q = torch.randn(n, device=dev)
            r = f(p, q)
            torch.testing.assert_close(r, torch.relu(p + q) * 2)
            r.sum().backward()
            torch.testing.assert_close(p.grad, ((p + q) > 0).float() * 2)
        print("ok")
        """, child_env, **overrides)
    assert out.rstrip().endswith("ok")
    expected = "in C" if registration == "c" else "in Python"
    assert f"registration: {expected}" in out, out


@pytest.mark.cuda
@gpu
def test_gpu_bound_handles_and_first_calls_inside_a_capture(child_env, tmp_path):
    _run_gpu(f"""
        add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
        a, b = torch.rand(4096, device=dev), torch.rand(4096, device=dev)
        h = add.bind(a, b)
        c = h()
        torch.cuda.synchronize()
        assert c is h.outputs
        torch.testing.assert_close(c, a + b)
        a2 = torch.rand(4096, device=dev)
        assert h.update(A=a2) is h
        h()
        torch.cuda.synchronize()
        torch.testing.assert_close(h.outputs, a2 + b)
        try:
            h.update(A=torch.rand(10, device=dev))
        except ValueError as exc:
            assert "vec_add: argument 0 'A'" in str(exc), exc
        else:
            raise AssertionError("update took a tensor of another shape")
        try:
            h.update(A=torch.rand(4096))
        except ValueError as exc:
            print("update refused a CPU tensor:", exc)
        else:
            raise AssertionError("update took a CPU tensor")
        # Each launch reads torch's current stream; stream= names one.
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)
            h()
        assert not side.query()
        side.synchronize()
        h(stream=side)
        side.synchronize()
        torch.testing.assert_close(h.outputs, a2 + b)
        # Inside one capture: the handle, the first call of a freshly compiled kernel
        # (dynamic shared memory over 48 KiB, so an attribute set before its launch), and
        # the first call of a kernel loaded from an export, allocating their outputs.
        rev = tilejit.compile(reverse_program(), out_idx=-1, target="cuda")
        loaded = tilejit.load(add.export({str(tmp_path / "vec_add")!r}))
        x = torch.rand(20000, device=dev)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            h()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            h()
            r = rev(x)
            s = loaded(a, b)
        a.copy_(torch.rand(4096, device=dev))
        a2.fill_(3.0)
        x.copy_(torch.rand(20000, device=dev))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(h.outputs, a2 + b)
        torch.testing.assert_close(r, x.flip(0))
        torch.testing.assert_close(s, a + b)
        print("ok")
        """, child_env)


GPU_EXPORT_BUILD = """
import sys
from pathlib import Path
out = Path(sys.argv[1])
add = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda")
add.export(out / "vec_add")
print("op", add.torch_op._schema.name.split("::")[1])


class Model(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(add(x, y)) * 2


class Plain(torch.nn.Module):  # the control: the same model with torch's add
    def forward(self, x, y):
        return torch.relu(x + y) * 2


x, y = torch.randn(1000, device=dev), torch.randn(1000, device=dev)
for model, name in ((Model(), "model.pt2"), (Plain(), "plain.pt2")):
    program = torch.export.export(model, (x, y))
    calls_tilejit = any(str(node.target).startswith("tilejit.") for node in program.graph.nodes)
    assert calls_tilejit == (name == "model.pt2"), name
    torch._inductor.aoti_compile_and_package(program, package_path=str(out / name))
torch.save((x.cpu(), y.cpu(), Model()(x, y).cpu()), out / "io.pt")
print("built")
"""

# Torch alone (the test adds no compiler on PATH and an empty cache).
TORCH_ALONE = NO_TILEJIT + """
from pathlib import Path
out = Path(sys.argv[1])
dev = torch.device("cuda")
"""

GPU_OP_ALONE = TORCH_ALONE + """
torch.ops.load_library(str(out / "vec_add" / "torch_op.so"))
op = getattr(torch.ops.tilejit, sys.argv[2]).default
a, b = torch.rand(1 << 20, device=dev), torch.rand(1 << 20, device=dev)
torch.testing.assert_close(op(a, b), a + b)
side = torch.cuda.Stream()
torch.cuda.synchronize()
with torch.cuda.stream(side):
    torch.cuda._sleep(200_000_000)
    c = op(a * 2, b)
assert not side.query()
side.synchronize()
torch.testing.assert_close(c, a * 2 + b)
try:
    op(a, b[:10])
except ValueError as exc:
    print("refused:", exc)
print("ok", sorted(m for m in sys.modules if m.startswith("tilejit")))
"""

GPU_PACKAGE_ALONE = TORCH_ALONE + """
if sys.argv[2] == "model.pt2":
    torch.ops.load_library(str(out / "vec_add" / "torch_op.so"))
runner = torch._inductor.aoti_load_package(str(out / sys.argv[2]))
x, y, expected = torch.load(out / "io.pt")
torch.testing.assert_close(runner(x.to(dev), y.to(dev)).cpu(), expected)
print("ok", sorted(m for m in sys.modules if m.startswith("tilejit")))
"""


@pytest.mark.cuda
@gpu
def test_gpu_exports_run_in_torch_alone_and_in_an_aotinductor_package(child_env, tmp_path):
    built = _run_gpu(GPU_EXPORT_BUILD, child_env, str(tmp_path))
    assert built.rstrip().endswith("built")
    (name,) = [line.split()[1] for line in built.splitlines() if line.startswith("op ")]
    env = {**_gpu_env(child_env), "PATH": "/nonexistent", "PYTHONPATH": "",
           "TILEJIT_CACHE_DIR": str(tmp_path / "empty")}

    def alone(code: str, argument: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code, str(tmp_path),
                               argument], capture_output=True, text=True, env=env,
                              timeout=600, check=False)
        print(done.stdout, done.stderr)
        return done

    done = alone(GPU_OP_ALONE, name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        ("refused: vec_add: argument 1 'B': expected shape[0] == n (= 1048576, bound by "
         "argument 0 'A'), got 10"), "ok []"]
    # The package of the same model with torch's add, no tilejit in it: where torch's own
    # CUDA packages fail to load (an H200 machine's torch 2.11 crashed in the package's
    # model constructor, before any op ran), tilejit's cannot be judged.
    control = alone(GPU_PACKAGE_ALONE, "plain.pt2")
    if control.returncode != 0:
        pytest.skip("torch's own AOTInductor CUDA package (no tilejit op in it) does not run "
                    f"here (exit {control.returncode}): {control.stderr[-1500:]}")
    done = alone(GPU_PACKAGE_ALONE, "model.pt2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "ok []\n"


# ---- Kernels as written: spellings, widths, order, prebuilt images ---------------------------

SCALE_AS_WRITTEN = r"""
__global__ void scale(int n, float *__restrict__ y, const float *__restrict__ x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
"""


def _scale_as_written(**fields):
    n = T.symbol("n", dtype="int32")
    x = T.Buffer((n,), "float32", name="x", const=True)
    y = T.Buffer((n,), "float32", name="y")
    return tilejit.Program("scale", [x, y], fields.pop("source", SCALE_AS_WRITTEN),
                           grid=(T.ceildiv(n, 128),), block=(128,), kernel_args=[n, y, x],
                           **fields)


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kernel_as_written_launches_in_its_order_and_widths(fake, compiler, backend):
    # No extern "C" (tilejit inserts it), int n for an int32 symbol, its own order.
    k = tilejit.compile(_scale_as_written(), target="cuda", arch="sm_80",
                        compiler=compiler, execution_backend=backend)
    assert k.c_prototype == 'extern "C" __global__ void scale(int32_t n, float *y, const float *x)'
    x, y = FakeCudaTensor((300,)), FakeCudaTensor((300,))
    k(x, y)
    (function,) = fake.records("cuModuleGetFunction")
    assert function["name"] == "scale" and function["param_sizes"] == [4, 8, 8]
    launch = fake.launches()[-1]
    assert launch["grid"] == [3, 1, 1]
    assert launch["args"] == [(300).to_bytes(4, "little").hex(), ptr(y.address), ptr(x.address)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prebuilt_cubin_launches_with_its_parameters_checked(fake, tmp_path, backend):
    nvcc = cc.find_nvcc()
    if nvcc is None:
        pytest.fail("nvcc not found: the CUDA toolkit is part of this project's test setup")
    source = tmp_path / "scale.cu"
    source.write_text('extern "C"' + SCALE_AS_WRITTEN)
    cubin = tmp_path / "scale.cubin"
    subprocess.run([nvcc, "-cubin", "-arch=sm_80", str(source), "-o", str(cubin)], check=True)
    k = tilejit.compile(_scale_as_written(source=None, binary=cubin), target="cuda",
                        execution_backend=backend)
    x, y = FakeCudaTensor((1000,)), FakeCudaTensor((1000,))
    k(x, y)
    launch = fake.launches()[-1]
    assert launch["args"] == [(1000).to_bytes(4, "little").hex(), ptr(y.address),
                              ptr(x.address)]
    # Declared with n as int64: the loaded function's 4-byte parameter says otherwise.
    n = T.symbol("n")
    wrong = tilejit.Program("scale", [T.Buffer((n,), "float32", name="x", const=True),
                                      T.Buffer((n,), "float32", name="y")],
                            binary=cubin.read_bytes(), grid=(1,), block=(1,),
                            kernel_args=[n, "y", "x"])
    k = tilejit.compile(wrong, target="cuda", execution_backend=backend)
    with pytest.raises(ValueError, match=r"scale: parameter 0 \('n'\) of the loaded function "
                                         r"'scale' is 4 bytes, the signature declares 8 bytes"):
        k(FakeCudaTensor((10,)), FakeCudaTensor((10,)))
    with pytest.raises(ValueError, match="scale: binary= for target='cuda' must be a cubin"):
        tilejit.compile(_scale_as_written(source=None, binary=b"garbage"), target="cuda")


# ---- Several kernel functions, tensor maps, launch attributes ---------------------------------

TMA_PROGRAM = r"""
#include <cuda.h>

__global__ void load_tiles(const __grid_constant__ CUtensorMap A_desc, float *C, int m) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && m < 0) C[0] = (float)(size_t)&A_desc;
}

__global__ void finish(float *C, int m, int tiles) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) C[i] += (float)tiles;
}
"""


def _tma_program():
    m = T.symbol("m", dtype="int32")
    a = T.Buffer((m, 64), "float32", name="A", const=True)
    c = T.Buffer((m, 64), "float32", name="C")
    desc = T.TensorMap(a, box=(32, 16), swizzle=3, l2_promotion=2)
    return tilejit.Program("tma", [a, c], TMA_PROGRAM, launches=[
        tilejit.Launch("load_tiles", grid=(T.ceildiv(m, 16), 2), block=(128,),
                       shared_mem=32 * 16 * 4, kernel_args=[desc, c, m], cluster=(1, 2, 1),
                       pdl=True),
        tilejit.Launch("finish", grid=(T.ceildiv(m, 256),), block=(256,),
                       kernel_args=[c, m, T.ceildiv(m, 16)], cooperative=True),
    ])


@pytest.mark.parametrize("backend", BACKENDS)
def test_launches_in_order_with_tensor_maps_and_attributes(fake, backend):
    k = tilejit.compile(_tma_program(), target="cuda", arch="sm_90a", compiler="nvcc",
                        execution_backend=backend)
    assert k.c_prototype == (
        'extern "C" __global__ void load_tiles(__grid_constant__ const CUtensorMap A_desc, '
        "float *C, int32_t m)\n"
        'extern "C" __global__ void finish(float *C, int32_t m, int32_t arg2)')
    fake.set_capability(9, 0)
    for m in (16, 100, 1000):
        a, c = FakeCudaTensor((m, 64)), FakeCudaTensor((m, 64))
        before = len(fake.launches())
        k(a, c, stream=0x77)
        encode = fake.records("cuTensorMapEncodeTiled")[-1]
        assert encode == {
            "fn": "cuTensorMapEncodeTiled", "result": 0, "context": 0, "data_type": 7,
            "rank": 2, "address": a.address, "dims": [64, m], "strides": [256],
            "box": [32, 16], "element_strides": [1, 1], "interleave": 0, "swizzle": 3,
            "l2_promotion": 2, "oob_fill": 0}
        first, second = fake.launches()[before:]
        # The map reaches the kernel as the 128 bytes the driver encoded (the fake writes
        # the address, the dims, the strides and the box into them).
        words = [a.address, 64, m, 0, 0, 0, 256, 0, 0, 0, 0, 32, 16, 0, 0, 0]
        assert first == {
            "fn": "cuLaunchKernelEx", "result": 0, "context": 0, "function": "load_tiles",
            "module": first["module"], "grid": [-(-m // 16), 2, 1], "block": [128, 1, 1],
            "shared_mem": 2048, "stream": 0x77,
            "args": [b"".join(w.to_bytes(8, "little") for w in words).hex(),
                     ptr(c.address), m.to_bytes(4, "little").hex()],
            "attrs": [{"id": 4, "cluster": [1, 2, 1]},
                      {"id": 6, "programmatic_stream_serialization": 1}]}
        assert second == {
            "fn": "cuLaunchKernelEx", "result": 0, "context": 0, "function": "finish",
            "module": first["module"], "grid": [-(-m // 256), 1, 1], "block": [256, 1, 1],
            "shared_mem": 0, "stream": 0x77,
            "args": [ptr(c.address), m.to_bytes(4, "little").hex(),
                     (-(-m // 16)).to_bytes(4, "little").hex()],
            "attrs": [{"id": 2, "cooperative": 1}]}
    assert len(fake.records("cuModuleLoadData")) == 1
    assert [f["name"] for f in fake.records("cuModuleGetFunction")] == ["load_tiles", "finish"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_map_encode_errors_name_the_map(fake, backend):
    k = tilejit.compile(_tma_program(), target="cuda", arch="sm_90a", compiler="nvcc",
                        execution_backend=backend)
    fake.set_capability(9, 0)
    # A misaligned address: the driver refuses to encode, nothing launches.
    a = FakeCudaTensor((100, 64), byte_offset=4)
    with pytest.raises(RuntimeError, match=r"tma: tensor map 'A_desc' \(of 'A'\): "
                                           r"cuTensorMapEncodeTiled\(data type 7, rank 2, "
                                           r".*dims \(64, 100\), strides \(256,\), box \(32, 16\)"
                                           r".*CUDA_ERROR_INVALID_VALUE"):
        k(a, FakeCudaTensor((100, 64)))
    assert fake.launches() == []


def test_launch_and_tensor_map_declarations_are_checked():
    m = T.symbol("m")
    a = T.Buffer((m, 64), "float32", name="A")
    with pytest.raises(ValueError, match="cooperative launch cannot have cluster"):
        tilejit.Launch("k", grid=(1,), block=(1,), cluster=(2,), cooperative=True)
    with pytest.raises(ValueError, match="with launches=, give grid"):
        tilejit.Program("p", [a], "", grid=(1,), launches=[tilejit.Launch("k", (1,), (1,))])
    with pytest.raises(ValueError, match="T.TensorMap: 3 dims entries, expected 2"):
        T.TensorMap(a, box=(8, 8), dims=(1, 2, 3))
    bad = tilejit.Program("p", [a], "", launches=[tilejit.Launch(
        "k", (1,), (1,), kernel_args=[T.TensorMap("B", box=(8, 8))])])
    with pytest.raises(ValueError, match=r"p: k: kernel_args\[0\]: T.TensorMap of 'B', which "
                                         "names no parameter"):
        tilejit.compile(bad, target="cuda", arch="sm_90a", compiler="nvcc")
    # The driver's rules for the box's inner dimension, checked when it is a constant
    # (an H200's driver refused a 128-byte inner box with a 64-byte swizzle).
    wide_box = (r"p: k: kernel_args\[0\]: T.TensorMap 'A_desc': box\[0\] = 32 elements of 4 "
                r"bytes span 128 bytes, more than the 64-byte swizzle \(swizzle=2\) allows")
    odd_box = (r"p: k: kernel_args\[0\]: T.TensorMap 'A_desc': box\[0\] = 6 elements of 4 "
               r"bytes span 24 bytes; the driver needs a multiple of 16 bytes")
    for box, swizzle, message in (((32, 16), 2, wide_box), ((6, 8), 0, odd_box)):
        wide = tilejit.Program("p", [a], "", launches=[tilejit.Launch(
            "k", (1,), (1,), kernel_args=[T.TensorMap(a, box=box, swizzle=swizzle)])])
        with pytest.raises(ValueError, match=message):
            tilejit.compile(wide, target="cuda", arch="sm_90a", compiler="nvcc")
    cpu = tilejit.Program("p", [a], "void p(float *A, int64_t m) {}",
                          kernel_args=[T.TensorMap(a, box=(8, 8)), m])
    with pytest.raises(ValueError, match="only CUDA kernels take"):
        tilejit.compile(cpu)
    # The definition must take the map by value.
    wrong = tilejit.Program("p", [a], "__global__ void k(const CUtensorMap *A_desc) {}",
                            launches=[tilejit.Launch("k", (1,), (1,),
                                                     kernel_args=[T.TensorMap(a, box=(8, 8))])])
    with pytest.raises(tilejit.CompileError, match="expected a tensor map passed by value"):
        tilejit.compile(wrong, target="cuda", arch="sm_90a", compiler="nvcc")
