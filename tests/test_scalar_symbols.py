"""Integer scalars in expressions and global workspaces, end to end on every backend.

An integer ``T.Scalar`` is usable wherever a symbol is (shapes, launch shapes, kernel
arguments, tensor-map fields); its value binds it at every call. A ``T.Workspace`` is
allocated at every call by the first tensor's framework, passed to the kernel and
released after the launch. CPU kernels run for real; CUDA ones against the fake driver.
"""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from conftest import assert_reads_back, load_fakes

import tilejit
from tilejit import T

fakes = load_fakes()
FakeCudaTensor = fakes.FakeCudaTensor

# fill(n, C) writes C[i] = i + base for the 2n elements of an output shaped by n.
FILL = r"""
#include <stdint.h>
void fill(int32_t n, int64_t base, float *C) {
    for (int64_t i = 0; i < 2 * (int64_t)n; ++i) C[i] = (float)(i + base);
}
"""

# acc(A, W, n): W (a zero-filled workspace of n floats) accumulates A, then A = W * 2.
ACC = r"""
void acc(float *A, float *W, long long n) {
    for (long long i = 0; i < n; ++i) W[i] += A[i];
    for (long long i = 0; i < n; ++i) A[i] = W[i] * 2;
}
"""


def fill_program():
    n = T.Scalar("int32", name="n")
    base = T.Scalar("int64", name="base")
    return tilejit.Program("fill", [n, base, T.Buffer((n * 2,), "float32", name="C")], FILL)


@pytest.fixture(scope="module")
def fill(backend):
    return tilejit.compile(fill_program(), out_idx=-1, execution_backend=backend)


def test_an_output_shaped_by_a_scalar(fill):
    # The scalar's symbol is not passed again: the kernel takes the scalar itself.
    assert fill.c_prototype == "void fill(int32_t n, int64_t base, float *C)"
    for n in (3, 0, 5, 3):  # each value shapes its own output
        out = fill(n, 10)
        assert out.shape == (2 * n,)
        np.testing.assert_array_equal(np.from_dlpack(out), np.arange(2 * n) + 10)
    with pytest.raises(ValueError, match=r"^fill: output 'C': shape\[0\] == n \* 2 evaluates "
                                         r"to -4, which is negative$"):
        fill(-2, 0)
    with pytest.raises(ValueError, match=r"^fill: argument 0 'n': value 4294967296 is out of "
                                         r"range for int32$"):
        fill(1 << 32, 0)
    with pytest.raises(TypeError, match=r"^fill: argument 0 'n': expected an int"):
        fill(2.0, 0)


def test_a_tensor_extent_must_agree_with_the_scalar_it_shares(backend):
    n = T.Scalar("int64", name="n")
    src = "void half(const float *A, long long n, float *B) " \
          "{ for (long long i = 0; i < n / 2; ++i) B[i] = A[2 * i]; }"
    prog = tilejit.Program("half", [T.Buffer((n,), "float32", name="A", const=True), n,
                                    T.Buffer((n // 2,), "float32", name="B")], src)
    k = tilejit.compile(prog, out_idx=-1, execution_backend=backend)
    a = torch.arange(8, dtype=torch.float32)
    torch.testing.assert_close(k(a, 8), a[::2])
    with pytest.raises(ValueError, match=r"^half: argument 1 'n': expected n == 8 \(bound by "
                                         r"argument 0 'A'\), got 6$"):
        k(a, 6)


def test_signatures_no_call_could_match_are_refused_when_written():
    # A negative constant dimension or stride, or a constant divisor of zero, would fail
    # every call: each is refused where it is written.
    n = T.symbol("n")
    with pytest.raises(ValueError, match=r"^T.Buffer: shape\[0\] is -1; a constant dimension "
                                         r"is >= 0$"):
        T.Buffer((-1,), "float32")
    with pytest.raises(ValueError, match=r"^buffer 'X': strides\[0\] is -2; a constant stride "
                                         r"is >= 0$"):
        T.Buffer((n, 2), "float32", strides=(-2, 1), name="X")
    for divide, op in ((lambda: n // 0, "//"), (lambda: n % 0, "%"),
                       (lambda: T.ceildiv(n, 0), "ceildiv"), (lambda: 4 // T.symbol("m") // 0,
                                                              "//")):
        with pytest.raises(ZeroDivisionError, match=f"^{re.escape(op)} by zero in a shape "
                                                    "expression$"):
            divide()


def test_scalars_in_expressions_are_checked_when_written():
    alpha = T.Scalar("float32", name="alpha")
    with pytest.raises(TypeError, match=r"scalar 'alpha' is float32; only integer scalars can "
                                        r"be used in shape, launch and tensor-map expressions"):
        T.ceildiv(alpha, 4)
    with pytest.raises(TypeError, match=r"only integer scalars"):
        T.Buffer((T.Scalar("bool", name="flag"),), "float32")
    # A scalar of another program.
    stray = T.Scalar("int32", name="m")
    prog = tilejit.Program("fill", [T.Scalar("int32", name="n"), T.Scalar("int64", name="base"),
                                    T.Buffer((stray * 2,), "float32", name="C")], FILL)
    with pytest.raises(ValueError, match=r"^fill: an expression uses scalar 'm', which is not a "
                                         r"parameter of this program$"):
        tilejit.compile(prog, out_idx=-1)
    # Named like a symbol of the same program: two things called n.
    n = T.Scalar("int32", name="n")
    prog = tilejit.Program("clash", [n, T.Buffer((T.symbol("n"),), "float32", name="A"),
                                     T.Buffer((n,), "float32", name="B")], "void clash() {}")
    with pytest.raises(ValueError, match=r"two different symbols are named 'n'"):
        tilejit.compile(prog, out_idx=-1)


def test_the_fake_binding_mirrors_the_scalar(fill):
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = fill.torch_op
    torch.testing.assert_close(op(4, 1), torch.arange(8, dtype=torch.float32) + 1)
    with FakeTensorMode():
        out = op(7, 0)
        assert out.shape == (14,) and out.dtype == torch.float32


def test_torch_compile_with_a_scalar_shaped_output(fill):
    @torch.compile(fullgraph=True, dynamic=True)
    def f(x, n):
        return fill(n, 0) + x.sum()

    for n in (3, 5):
        torch.testing.assert_close(f(torch.ones(2), n), torch.arange(2 * n,
                                                                     dtype=torch.float32) + 2)


# ---- Workspaces --------------------------------------------------------------------------------


def acc_program(zero=True):
    n = T.symbol("n")
    A = T.Buffer((n,), "float32", name="A")
    W = T.Workspace((n,), "float32", name="W", zero=zero)
    return tilejit.Program("acc", [A], ACC, kernel_args=[A, W, n], workspaces=[W])


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_a_zeroed_workspace_per_call(backend, framework):
    k = tilejit.compile(acc_program(), execution_backend=backend)
    assert k.c_prototype == "void acc(float *A, float *W, int64_t n)"
    for _ in range(3):  # a fresh, zeroed workspace each call: nothing accumulates across
        a = np.arange(5, dtype=np.float32) if framework == "numpy" else torch.arange(
            5, dtype=torch.float32)
        k(a)
        np.testing.assert_array_equal(np.asarray(a), np.arange(5) * 2)
    # The workspace is the kernel's own: callers pass the inputs only.
    with pytest.raises(TypeError, match=r"^acc: expected 1 argument \(A\), got 2$"):
        k(a, a)


def test_workspaces_are_released_after_the_call(backend):
    k = tilejit.compile(acc_program(), execution_backend=backend)
    a = torch.ones(1000)
    k(a)
    gc.collect()
    before = sum(type(o) is torch.Tensor for o in gc.get_objects())
    for _ in range(50):
        k(a)
    gc.collect()
    assert sum(type(o) is torch.Tensor for o in gc.get_objects()) <= before + 1


def test_workspace_declarations_are_checked():
    n = T.symbol("n")
    W = T.Workspace((n,), "float32", name="W")
    with pytest.raises(TypeError, match=r"^bad: parameter 0 is a T.Workspace, which callers "
                                        r"never pass; give it to workspaces=$"):
        tilejit.Program("bad", [W], ACC)
    with pytest.raises(TypeError, match=r"workspaces\[0\] must be a T.Workspace, got Buffer"):
        tilejit.Program("bad", [], ACC, workspaces=[T.Buffer((n,), "float32")])
    prog = tilejit.Program("acc", [T.Buffer((4,), "float32", name="A")], ACC,
                           kernel_args=["A", W, 4], workspaces=[W])
    with pytest.raises(ValueError, match=r"^acc: workspace 'W': shape\[0\] = n uses symbol 'n', "
                                         r"which no parameter's shape or strides carry$"):
        tilejit.compile(prog)


# ---- CUDA, against the fake driver -------------------------------------------------------------

PTX = (".version 8.0\n.target sm_80\n.address_size 64\n"
       ".visible .entry acc(\n  .param .u64 acc_param_0,\n  .param .u64 acc_param_1,\n"
       "  .param .u32 acc_param_2\n)\n{\n  ret;\n}\n")


def cuda_acc(zero=True):
    n = T.symbol("n", dtype="int32")
    rows = T.Scalar("int32", name="rows")
    A = T.Buffer((n,), "float32", name="A")
    W = T.Workspace((n * rows,), "float32", name="W", zero=zero)
    return tilejit.Program("acc", [A, rows], binary=PTX.encode(), grid=(T.ceildiv(n, 128), rows),
                           block=(128,), kernel_args=[A, W, n], workspaces=[W])


def test_cuda_workspaces_are_zeroed_on_the_launch_stream(fake, backend):
    k = tilejit.compile(cuda_acc(), target="cuda", execution_backend=backend)
    a = FakeCudaTensor((1000,))
    if backend == "dlpack":  # no exchange API: workspaces, like outputs, come from NumPy
        with pytest.raises(RuntimeError, match=r"^acc: workspace 'W': allocated on cpu:0, "
                                               r"expected cuda:0$"):
            k(a, 3)
        return
    before = FakeCudaTensor._next_address
    k(a, 3)  # on the producer's current stream
    (memset,) = fake.records("cuMemsetD8Async")
    assert memset == {"fn": "cuMemsetD8Async", "result": 0, "context": 0, "address": before,
                      "value": 0, "count": 3000 * 4, "stream": fakes.SENTINEL_STREAM}
    (launch,) = fake.launches()
    assert launch["grid"] == [8, 3, 1] and launch["stream"] == fakes.SENTINEL_STREAM
    assert launch["args"][1] == before.to_bytes(8, "little").hex()
    assert not fake.records("cuStreamSynchronize")  # released in the allocator's order
    # On another stream than the allocator's: the call waits before releasing it.
    k(a, 3, stream=0x42)
    assert [r["stream"] for r in fake.records("cuStreamSynchronize")] == [0x42]
    k(a, 3, stream=fakes.SENTINEL_STREAM)
    assert len(fake.records("cuStreamSynchronize")) == 1
    # Not zeroed unless asked.
    fake.reset()
    tilejit.compile(cuda_acc(zero=False), target="cuda", execution_backend=backend)(a, 2)
    assert not fake.records("cuMemsetD8Async") and len(fake.launches()) == 1


@pytest.mark.parametrize("backend", ["cython", "ctypes"])  # workspaces from the exchange API
def test_cuda_workspaces_inside_a_capture(fake, backend):
    # Inside torch.cuda.graph: the workspace comes from the framework's allocator (which
    # knows about the capture), is zeroed with an asynchronous memset on the captured
    # stream, and released without a synchronize, even with stream= another stream than
    # the allocator's (the wait would break the capture). Nothing the driver forbids.
    fake.set_current(0)  # compiled while a context is current: its module loads now
    k = tilejit.compile(cuda_acc(), target="cuda", execution_backend=backend)
    a = FakeCudaTensor((1000,))
    for stream in (fakes.SENTINEL_STREAM, 0x42):
        fake.reset()
        fake.begin_capture(stream)
        k(a, 3, stream=stream)
        assert fake.end_capture(stream) == 0
        assert fake.forbidden() == 0
        (memset,) = fake.records("cuMemsetD8Async")
        assert memset["stream"] == stream and memset["count"] == 3000 * 4
        assert [launch.get("captured") for launch in fake.launches()] == [1]
        assert not fake.records("cuStreamSynchronize")
        assert not fake.records("cuMemAlloc_v2") and not fake.records("cuModuleLoadData")


def test_im2col_maps_are_checked_when_compiled():
    X = T.Buffer((T.symbol("n"), 8, 8, 64), "float16", name="X")
    with pytest.raises(ValueError, match=r"rank 2, expected 3, 4 or 5"):
        T.TensorMap.im2col_map(T.Buffer((4, 4), "float16"), lower_corner=(), upper_corner=(),
                               channels_per_pixel=8, pixels_per_column=8)
    with pytest.raises(ValueError, match=r"2 lower_corner entries, expected 2|1 lower_corner "
                                         r"entries, expected 2"):
        T.TensorMap.im2col_map(X, lower_corner=(-1,), upper_corner=(-1, -1),
                               channels_per_pixel=64, pixels_per_column=64)
    for channels, swizzle, message in (
            (300, 0, r"channels_per_pixel = 300, expected 1 to 256"),
            (64, 2, (r"channels_per_pixel = 64 elements of 2 bytes span 128 bytes, more "
                     r"than the 64-byte swizzle \(swizzle=2\) allows"))):
        m = T.TensorMap.im2col_map(X, lower_corner=(-1, -1), upper_corner=(-1, -1),
                                   channels_per_pixel=channels, pixels_per_column=64,
                                   swizzle=swizzle)
        prog = tilejit.Program("conv", [X], binary=PTX.encode(), grid=(1,), block=(128,),
                               kernel_args=[m])
        with pytest.raises(ValueError, match=rf"^conv: kernel_args\[0\]: T.TensorMap 'X_desc': "
                                             rf"{message}$"):
            tilejit.compile(prog, target="cuda")
    assert "im2col lower_corner=(-1, -1)" in repr(m)


# ---- Export --------------------------------------------------------------------------------------


def test_scalars_and_workspaces_export_and_load(backend, tmp_path):
    for prog, out_idx in ((fill_program(), -1), (acc_program(), None)):
        k = tilejit.compile(prog, out_idx=out_idx, execution_backend=backend)
        k.export(tmp_path / prog.name)
        loaded = tilejit.load(tmp_path / prog.name, execution_backend=backend)
        assert loaded.c_prototype == k.c_prototype
        assert_reads_back(k, loaded)  # scalars binding symbols, workspaces
        assert [repr(w) for w in loaded.program.workspaces] == [
            repr(w) for w in k.program.workspaces]
    text = (tmp_path / "fill" / "signature.tj").read_text()
    assert "scalar 0 n 0:32:1 0\n" in text
    torch.testing.assert_close(torch.from_dlpack(tilejit.load(tmp_path / "fill")(3, 1)),
                               torch.arange(6, dtype=torch.float32) + 1)
    a = torch.arange(4, dtype=torch.float32)
    tilejit.load(tmp_path / "acc")(a)
    torch.testing.assert_close(a, torch.arange(4, dtype=torch.float32) * 2)
    header = (tmp_path / "acc" / "kernel.h").read_text()
    assert "#define ACC_NUM_WORKSPACES 1" in header and "1  W: float32" not in header
    assert " *   0  W: float32, shape (n,), zero-filled by the launch" in header


def test_an_im2col_map_exports_and_loads(fake, tmp_path):
    X = T.Buffer((T.symbol("n"), 8, 8, 32), "float16", name="X")
    m = T.TensorMap.im2col_map(X, lower_corner=(-1, -1), upper_corner=(-1, -1),
                               channels_per_pixel=32, pixels_per_column=64, swizzle=2)
    ptx = PTX.replace(".param .u64 acc_param_0", ".param .align 64 .b8 acc_param_0[128]") \
        .replace(".u32 acc_param_2", ".u64 acc_param_2")
    prog = tilejit.Program("acc", [X, T.Buffer((4,), "float32", name="Y")], binary=ptx.encode(),
                           grid=(1,), block=(128,), kernel_args=[m, "Y", 4])
    k = tilejit.compile(prog, target="cuda")
    k.export(tmp_path / "conv")
    assert "tensormap_im2col X_desc 0 6 4 " in (tmp_path / "conv" / "signature.tj").read_text()
    assert_reads_back(k, tilejit.load(tmp_path / "conv"))
    fake.set_capability(9, 0)
    x, y = FakeCudaTensor((2, 8, 8, 32), "float16"), FakeCudaTensor((4,))
    records = []
    for kernel in (k, tilejit.load(tmp_path / "conv")):
        kernel(x, y, stream=0x42)
        (encode,) = fake.records("cuTensorMapEncodeIm2col")[-1:]
        records.append(encode)
    assert records[0] == records[1]
    assert records[0]["lower_corner"] == [-1, -1] and records[0]["channels_per_pixel"] == 32
    assert records[0]["dims"] == [32, 8, 8, 2] and records[0]["strides"] == [64, 512, 4096]
