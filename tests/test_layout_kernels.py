"""Kernels and layout views: parameters from ``T.Buffer.like``, views
passed as arguments without being imported again, ``make_ptr`` for ``T.Pointer``
parameters (the reference's "bypass DLPack"), and implicit conversion through
``tilejit.jit(layout="dynamic")``. Every backend is held to the same results and messages.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from fake_dlpack import FakeTensor
from kernels import VEC_ADD

import tilejit
from tilejit import T
from tilejit.builder.signature import lower
from tilejit.runtime.views import from_dlpack

# --- Acceptance: a kernel from a marked view --------------------------------------------------

SCALE = """
void scale(float *A, int64_t A_shape0) {
  for (int64_t i = 0; i < A_shape0 * 8; ++i) A[i] *= 2.0f;
}
"""


@pytest.fixture(scope="module")
def scale(build):
    x = torch.rand(32, 8)
    view = from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=16)
    assert view.layout == "(?{div=16},8):(8,1)"
    param = T.Buffer.like(view, name="A")
    assert repr(param) == "Buffer((A_shape0, 8), float32, strides=(8, 1), name='A', align=4)"
    kernel = build("scale", [param], SCALE)
    assert kernel.c_prototype == "void scale(float *A, int64_t A_shape0)"
    return kernel


def test_marked_view_kernel_runs_on_any_multiple_of_16(scale):
    k = scale
    for rows in (16, 32, 48, 160, 0):
        x = torch.rand(rows, 8)
        want = x * 2
        k(x)
        assert torch.equal(x, want)
        n = np.ones((rows, 8), np.float32)
        k(n)
        assert (n == 2).all()
        v = from_dlpack(torch.ones(rows, 8))
        k(v)
        assert (v.source == 2).all()


@pytest.mark.parametrize("arg", [lambda: torch.rand(17, 8), lambda: np.zeros((17, 8), np.float32),
                                 lambda: from_dlpack(torch.rand(17, 8))])
def test_marked_view_kernel_rejects_17(scale, arg):
    with pytest.raises(ValueError) as info:
        scale(arg())
    assert str(info.value) == ("scale: argument 0 'A': shape[0] = 17 binds A_shape0, which must "
                               "be divisible by 16")


def test_marked_view_kernel_checks_the_static_modes(scale):
    k = scale
    with pytest.raises(ValueError, match=r"^scale: argument 0 'A': expected shape\[1\] == 8, "
                                         r"got 9$"):
        k(torch.rand(16, 9))
    with pytest.raises(ValueError, match=r"expected stride\[0\] == 8, got 16"):
        k(torch.rand(16, 16)[:, :8])


def test_static_view_kernel_and_align(build):
    x = torch.zeros(4, 6)
    param = T.Buffer.like(from_dlpack(x, assumed_align=16), name="M")
    k = build("fill", [param], "void fill(float *M) { for (int i = 0; i < 24; ++i) M[i] = i; }")
    assert k.c_prototype == "void fill(float *M)"
    k(x)
    assert x.flatten().tolist() == list(range(24))
    with pytest.raises(ValueError, match=r"expected shape\[0\] == 4, got 5"):
        k(torch.zeros(5, 6))
    base = torch.zeros(64)
    with pytest.raises(ValueError, match="aligned to 16 bytes"):
        k(base[1:25].view(4, 6))


# --- Views as arguments -----------------------------------------------------------------------



def test_views_as_arguments(vec_add):
    k = vec_add
    a, b = torch.rand(100), torch.rand(100)
    va, vb = from_dlpack(a), from_dlpack(b)
    c = k(va, vb)
    assert isinstance(c, torch.Tensor)  # outputs follow the view's source framework
    assert torch.equal(c, a + b)
    # Zero-copy: the view sees later writes to its source.
    a += 1
    assert torch.equal(k(va, vb), a + b)
    # Views and plain tensors mix; NumPy views give NumPy outputs.
    assert torch.equal(k(a, vb), a + b)
    an, bn = a.numpy().copy(), b.numpy().copy()
    cn = k(from_dlpack(an), from_dlpack(bn))
    assert isinstance(cn, np.ndarray)
    np.testing.assert_array_equal(cn, an + bn)


def test_views_are_validated_like_tensors(vec_add):
    k = vec_add
    a = from_dlpack(torch.rand(8))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected dtype float32, "
                                         r"got float64$"):
        k(a, from_dlpack(torch.rand(8, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected shape\[0\] == n "
                                         r"\(= 8, bound by argument 0 'A'\), got 9$"):
        k(a, from_dlpack(torch.rand(9)))
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected a cpu tensor, got "
                                         r"a tensor on device cuda:0$"):
        k(from_dlpack(FakeTensor((8,), device=(2, 0))), a)


def test_view_read_only_flag_is_carried(build):
    n = T.symbol("n")
    k = build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                          T.Buffer((n,), "float32", name="B", const=True),
                          T.Buffer((n,), "float32", name="C")], VEC_ADD)
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    out = np.zeros(4, np.float32)
    k(from_dlpack(ro), from_dlpack(ro), from_dlpack(out))  # const parameters take it
    assert out.tolist() == [2, 2, 2, 2]
    with pytest.raises(ValueError, match=r"^vec_add: argument 2 'C': the tensor is read-only"):
        k(from_dlpack(ro), from_dlpack(ro), from_dlpack(ro))


def test_views_are_not_imported_again(vec_add):
    k = vec_add
    data = torch.arange(4, dtype=torch.float32)
    f = FakeTensor((4,), data=data.data_ptr())
    view = from_dlpack(f)
    assert f.exports == 1
    for _ in range(50):
        out = k(view, view)
    np.testing.assert_array_equal(out, (data * 2).numpy())
    assert (f.exports, f.deletes) == (1, 0)
    del view
    gc.collect()
    assert f.deletes == 1


# --- make_ptr and T.Pointer: bypassing DLPack -------------------------------------------------

BUMP = """
void bump(float *p, int64_t count) {
  for (int64_t i = 0; i < count; ++i) p[i] += 1.0f;
}
"""


def test_pointer_arguments(build):
    k = build("bump", [T.Pointer("float32", name="p", align=16),
                       T.Scalar("int64", name="count")], BUMP)
    x = torch.zeros(8)
    k(tilejit.make_ptr("float32", x.data_ptr(), assumed_align=16), 3)
    assert x.tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    k(tilejit.make_ptr(torch.float32, x.data_ptr() + 16), 2)
    assert x.tolist() == [1, 1, 1, 0, 1, 1, 0, 0]
    # The kernel's own alignment requirement is checked by the core.
    with pytest.raises(ValueError, match=r"^bump: argument 0 'p': expected the data pointer "
                                         r"aligned to 16 bytes"):
        k(tilejit.make_ptr("float32", x.data_ptr() + 4), 1)
    # A view is a tensor, so a pointer parameter takes it too.
    k(from_dlpack(x[4:]), 1)
    assert x.tolist() == [1, 1, 1, 0, 2, 1, 0, 0]


def test_pointer_element_type_and_memory_are_checked(build):
    k = build("bump", [T.Pointer("float32", name="p", align=16),
                       T.Scalar("int64", name="count")], BUMP)
    x = torch.zeros(8)
    with pytest.raises(ValueError, match=r"^bump: argument 0 'p': expected a pointer to "
                                         r"float32, got a pointer to float16$"):
        k(tilejit.make_ptr("float16", x.data_ptr(), assumed_align=16), 1)
    with pytest.raises(ValueError, match=r"^bump: argument 0 'p': expected a pointer to cpu "
                                         r"memory, got one to cuda memory$"):
        k(tilejit.make_ptr("float32", x.data_ptr(), memspace="gmem", assumed_align=16), 1)
    assert x.tolist() == [0.0] * 8


def test_pointer_is_not_a_tensor(vec_add):
    x = torch.zeros(4)
    p = tilejit.make_ptr("float32", x.data_ptr())
    with pytest.raises(TypeError, match=r"^vec_add: argument 0 'A': expected a tensor \(an object "
                                        r"supporting DLPack\), got a pointer$"):
        vec_add(p, x)


GEMM = """
/* C(m, n, l) = sum_k A(m, k, l) * B(n, k, l) over pointers with the reference's ordered
 * layouts: A and B have m (n) fastest, then k, then l; C has n fastest, then m, then l. */
void gemm(const float *a, const float *b, float *c, int32_t m, int32_t n, int32_t k,
          int32_t l) {
  for (int32_t li = 0; li < l; ++li)
    for (int32_t mi = 0; mi < m; ++mi)
      for (int32_t ni = 0; ni < n; ++ni) {
        float acc = 0.0f;
        for (int32_t ki = 0; ki < k; ++ki)
          acc += a[mi + ki * m + li * m * k] * b[ni + ki * n + li * n * k];
        c[ni + mi * n + li * m * n] = acc;
      }
}
"""


def test_reference_bypass_dlpack_gemm(build):
    k = build("gemm", [T.Pointer("float32", name="a", align=16),
                       T.Pointer("float32", name="b", align=16),
                       T.Pointer("float32", name="c", align=16),
                       *[T.Scalar("int32", name=s) for s in "mnkl"]],
              GEMM.replace("const float *a", "float *a").replace("const float *b", "float *b"))
    m, n, kk, batch = 8, 4, 6, 3
    a = torch.randn(batch, kk, m).permute(2, 1, 0)  # (m, k, l), m fastest
    b = torch.randn(batch, kk, n).permute(2, 1, 0)  # (n, k, l), n fastest
    c = torch.empty(batch, m, n).permute(1, 2, 0)   # (m, n, l), n fastest
    ptrs = [tilejit.make_ptr("float32", t.data_ptr(), "generic", assumed_align=16)
            for t in (a, b, c)]
    k(*ptrs, m, n, kk, batch)
    torch.testing.assert_close(c, torch.einsum("mkl,nkl->mnl", a, b))


# --- Implicit conversion: jit(layout="dynamic") -----------------------------------------------


def _prototype(name, params, out_idx=None):
    return lower(tilejit.Program(name=name, params=params, source=""), out_idx, "cpu").c_prototype


def _twice_program(A, B, factor):
    """B = factor * A for 2-d tensors of any layout: the strides the kernel uses are the
    parameters' own, ints or symbols (symbols are the kernel's int64_t arguments)."""
    proto = _prototype("twice", [A, B])
    source = f"""
static void body(const float *A, float *B, int64_t m, int64_t n, int64_t sa0, int64_t sa1,
                 int64_t sb0, int64_t sb1) {{
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) B[i * sb0 + j * sb1] = {factor} * A[i * sa0 + j * sa1];
}}
{proto} {{
  body(A, B, {A.shape[0]}, {A.shape[1]}, {A.strides[0]}, {A.strides[1]}, {B.strides[0]},
       {B.strides[1]});
}}
"""
    return tilejit.Program(name="twice", params=[A, B], source=source)


def make_twice(**options):
    @tilejit.jit(layout="dynamic", **options)
    def twice(A, B, factor: int = 2):
        return _twice_program(A, B, factor)
    return twice


def test_implicit_conversion_one_kernel_per_leading_dim(backend):
    twice = make_twice(execution_backend=backend)

    def check(x, y, factor=2):
        if factor == 2:
            twice(x, y)
        else:
            twice(x, y, factor)
        torch.testing.assert_close(y, factor * x)

    x, y = torch.rand(30, 20), torch.empty(30, 20)
    with pytest.raises(TypeError, match=r"^twice\(\): missing a required argument: 'B'$"):
        twice(x)
    k = twice.compile_for(x, y)
    assert k.c_prototype == ("void twice(float *A, float *B, int64_t A_shape0, int64_t A_shape1, "
                             "int64_t A_stride0, int64_t B_shape0, int64_t B_shape1, "
                             "int64_t B_stride0)")
    assert k.execution_backend == backend
    assert [str(p) for p in k.params[0].strides] == ["A_stride0", "1"]
    check(x, y)
    # Other shapes and row strides with the same leading dimension: the same kernel.
    check(torch.rand(7, 3), torch.empty(7, 3))
    check(torch.rand(10, 40)[:, 5:25], torch.empty(10, 64)[:, ::3][:, :20].contiguous())
    check(torch.rand(1, 20), torch.empty(1, 20))
    check(torch.rand(4, 6), torch.empty(4, 6))
    assert twice.cache_info() == 1
    # A different leading dimension: one new compile, not an error.
    check(torch.rand(20, 30).t(), torch.empty(20, 30).t())
    assert twice.cache_info() == 2
    check(torch.rand(3, 9).t(), torch.empty(3, 9).t())
    check(torch.rand(5, 1), torch.empty(5, 1))  # strides (1, 1): mode 0 (size 5) leads
    assert twice.cache_info() == 2
    # Mixed: A row-major, B column-major is a layout pair of its own.
    check(torch.rand(6, 5), torch.empty(5, 6).t())
    assert twice.cache_info() == 3
    # Broadcast strides stay static 0.
    check(torch.rand(1, 20).expand(30, 20), torch.empty(30, 20))
    assert twice.cache_info() == 4
    # Constant arguments are part of the key; NumPy tensors work the same way.
    check(torch.rand(3, 4), torch.empty(3, 4), factor=3)
    assert twice.cache_info() == 5
    xn, yn = np.random.rand(3, 4).astype(np.float32), np.empty((3, 4), np.float32)
    twice(xn, yn)
    np.testing.assert_allclose(yn, 2 * xn)
    assert twice.cache_info() == 5


def test_reference_implicit_conversion():
    # The page's @cute.jit foo(src) prints "ptr<f32, generic> o (?,?,?):(?,?,1)" for
    # a = torch.randn(30, 20, 32): tilejit's function sees that layout as its T.Buffer.
    seen = []

    @tilejit.jit(layout="dynamic")
    def foo(src):
        seen.append(src)
        return tilejit.Program(name="foo", params=[src], source=_prototype("foo", [src]) + "{}")

    a = torch.randn(30, 20, 32, device="cpu")
    foo(a)
    (src,) = seen
    assert repr(src) == ("Buffer((src_shape0, src_shape1, src_shape2), float32, "
                         "strides=(src_stride0, src_stride1, 1), name='src', align=4)")
    assert from_dlpack(a).mark_layout_dynamic().layout == "(?,?,?):(?,?,1)"
    foo(torch.randn(3, 2, 5))
    assert len(seen) == 1  # compiled once


def test_implicit_conversion_keeps_explicit_marks():
    twice = make_twice()
    x, y = torch.rand(32, 4), torch.empty(32, 4)
    vx = from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=16)
    k = twice.compile_for(vx, y)
    assert [str(e) for e in k.params[0].shape] == ["A_shape0", "4"]
    assert k.params[0].shape[0].divisibility == 16
    twice(vx, y)
    torch.testing.assert_close(y, 2 * x)
    # A static view: a kernel for exactly that layout.
    vs = from_dlpack(x)
    assert all(isinstance(e, int) for e in twice.compile_for(vs, y).params[0].shape)
    assert twice.cache_info() == 2
    # The marked kernel serves any multiple of 16 rows.
    x2, y2 = torch.rand(48, 4), torch.empty(48, 4)
    twice(from_dlpack(x2).mark_compact_shape_dynamic(mode=0, divisibility=16), y2)
    torch.testing.assert_close(y2, 2 * x2)
    assert twice.cache_info() == 2


def test_implicit_conversion_outputs_and_keywords():
    @tilejit.jit(layout="dynamic", out_idx=-1)
    def negate(A):
        C = T.Buffer(A.shape, "float32", name="C")
        proto = _prototype("negate", [A, C], -1)
        source = f"""{proto} {{
  for (int64_t i = 0; i < {A.shape[0]}; ++i) C[i] = -A[i * {A.strides[0]}];
}}"""
        return tilejit.Program(name="negate", params=[A, C], source=source)

    x = torch.rand(10)
    c = negate(x)
    assert isinstance(c, torch.Tensor) and torch.equal(c, -x)
    assert torch.equal(negate(A=x[2:]), -x[2:])  # a keyword, another shape: the same kernel
    assert negate.cache_info() == 1
    assert torch.equal(negate(x[::2]), -x[::2])  # no unit stride: (?):(?)
    assert negate.cache_info() == 2
    cn = negate(np.arange(3, dtype=np.float32))
    assert isinstance(cn, np.ndarray) and cn.tolist() == [0, -1, -2]


def test_implicit_conversion_static_layout():
    @tilejit.jit(layout="static")
    def twice(A, B):
        return _twice_program(A, B, 2)

    x = torch.rand(3, 4)
    y = torch.empty(3, 4)
    assert twice.compile_for(x, y).c_prototype == "void twice(float *A, float *B)"
    twice(x, y)
    torch.testing.assert_close(y, 2 * x)
    twice(torch.rand(3, 5), torch.empty(3, 5))
    assert twice.cache_info() == 2


def test_implicit_conversion_errors():
    with pytest.raises(ValueError, match="layout must be None, 'dynamic' or 'static', got 'fast'"):
        tilejit.jit(layout="fast")(lambda A: None)
    with pytest.raises(TypeError, match=r"needs named parameters, not \*args"):
        tilejit.jit(layout="dynamic")(lambda *tensors: None)

    @tilejit.jit(layout="dynamic")
    def bad(A, n: int = 3):
        return tilejit.Program(name="bad", params=[A, T.Scalar("int64", name="n")],
                               source="void bad(float *A, int64_t n, int64_t A_shape0) {}")

    with pytest.raises(TypeError, match=r"^bad: kernel parameter 1 \(Scalar\(int64, name='n'\)\) "
                                        r"is not one of the tensor arguments' buffers"):
        bad(torch.rand(4))

    @tilejit.jit(layout="dynamic")
    def not_a_program(A):
        return A

    with pytest.raises(TypeError, match="must return a tilejit.Program, got Buffer"):
        not_a_program(torch.rand(4))
    with pytest.raises(TypeError, match="unhashable"):
        make_twice()(torch.rand(2, 2), torch.rand(2, 2), factor=[2])


def test_unnamed_like_buffers_are_named_after_their_parameter():
    # Without name=, the symbols take the parameter's name in each kernel: the prototype
    # (and so the disk-cache key) does not depend on what the process created before.
    views = [from_dlpack(torch.rand(32, 8)).mark_compact_shape_dynamic(mode=0)
             for _ in range(3)]
    a, b = T.Buffer.like(views[1]), T.Buffer.like(views[2])
    sig = lower(tilejit.Program("two", [a, b], ""), None, "cpu")
    assert sig.c_prototype == ("void two(float *arg0, float *arg1, int64_t arg0_shape0, "
                               "int64_t arg1_shape0)")
