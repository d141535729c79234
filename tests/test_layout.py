"""Layout views (docs/layout-views.md): every example of the CuTe DSL
framework-integration page (NVIDIA's CUTLASS documentation) with its exact output or error
text, then the same calls on the layouts PyTorch 2.13 really produces, then the view's
attributes, ownership and errors.

The page's examples assume the old PyTorch habit of exporting size-1 dims with stride 1;
those layouts are built here explicitly with NumPy ``as_strided``, so the tests do not
depend on what any torch version exports.
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from fake_dlpack import FakeTensor

import tilejit
from tilejit import T
from tilejit.runtime.views import from_dlpack


def strided(shape, strides, dtype=np.float32):
    """A NumPy array with exactly these shape and (element) strides."""
    itemsize = np.dtype(dtype).itemsize
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    base = np.zeros(span, dtype)
    return np.lib.stride_tricks.as_strided(base, shape=shape,
                                           strides=[s * itemsize for s in strides])


def text_of(view):
    """``str(view)`` must be the reference's format; returns its layout part."""
    prefix = f"Tensor<0x{view.data_ptr:016x}@{view.memspace} o "
    s = str(view)
    assert s.startswith(prefix) and s.endswith(">"), s
    assert repr(view) == s
    return s[len(prefix):-1]


def raises(call, message, exc=ValueError):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value) == message


# The reference page's tensors, as old PyTorch exported them.
def ref_a():  # torch.empty(16, 4, 8, 2).permute(2, 1, 0, 3)
    return strided((8, 4, 16, 2), (2, 16, 64, 1))


def ref_b():  # torch.empty(32, 1, 1, 1, 4).permute(3, 4, 1, 0, 2), size-1 strides 1
    return strided((1, 4, 1, 32, 1), (1, 1, 1, 4, 1))


def ref_c():  # torch.empty(3, 4)[::2, ::2]
    return strided((2, 2), (8, 2))


def ref_d():  # torch.empty(3, 1, 1, 5).expand(3, 4, 2, 5)
    return strided((3, 4, 2, 5), (5, 0, 0, 1))


OLD_B_DIM_ORDER = (3, 2, 4, 0, 1)  # the page: "b.dim_order() is (3,2,4,0,1)"


def test_reference_tensors_are_built_as_the_page_says():
    assert from_dlpack(ref_a()).layout == "(8, 4, 16, 2):(2, 16, 64, 1)"
    assert from_dlpack(ref_b()).layout == "(1, 4, 1, 32, 1):(1, 1, 1, 4, 1)"
    assert from_dlpack(ref_c()).layout == "(2, 2):(8, 2)"
    assert from_dlpack(ref_d()).layout == "(3, 4, 2, 5):(5, 0, 0, 1)"


# --- Explicit conversion using from_dlpack ----------------------------------------------------


def test_reference_from_dlpack_attributes():
    x = torch.randn(30, 20, device="cpu")
    y = from_dlpack(x)
    assert y.shape == (30, 20)
    assert y.stride == (20, 1)
    assert y.memspace == "generic"
    assert y.element_type == "Float32"
    assert str(y) == f"Tensor<0x{x.data_ptr():016x}@generic o (30, 20):(20, 1)>"
    assert y.data_ptr == x.data_ptr()
    assert tilejit.from_dlpack is from_dlpack


def test_reference_cached_conversion():
    # "if key not in cached_tensors: cached_tensors[key] = from_dlpack(x)"
    x = torch.randn(30, 20)
    cached = {}
    for _ in range(3):
        if "x" not in cached:
            cached["x"] = from_dlpack(x)
    assert text_of(cached["x"]) == "(30, 20):(20, 1)"


# --- mark_layout_dynamic ----------------------------------------------------------------------


def test_reference_mark_layout_dynamic_prose():
    p = strided((2, 2, 3, 4), (2, 1, 4, 12))
    assert text_of(from_dlpack(p).mark_layout_dynamic(leading_dim=1)) == "(?,?,?,?):(?,1,?,?)"
    raises(lambda: from_dlpack(p).mark_layout_dynamic(leading_dim=0),
           "Expected strides[leading_dim] == 1, but got 2")
    assert text_of(from_dlpack(p).mark_layout_dynamic()) == "(?,?,?,?):(?,1,?,?)"
    raises(lambda: from_dlpack(strided((1, 5, 1), (1, 1, 1))).mark_layout_dynamic(),
           "Can't deduce the leading dimension from layout, please specify the leading_dim "
           "explicitly.")
    assert text_of(from_dlpack(strided((2, 2), (8, 2))).mark_layout_dynamic()) == "(?,?):(?,?)"


def test_reference_mark_layout_dynamic_code_example():
    a, b, c, d = ref_a(), ref_b(), ref_c(), ref_d()
    t0 = from_dlpack(a).mark_layout_dynamic()
    assert text_of(t0) == "(?,?,?,?):(?,?,?,1)"
    t1 = from_dlpack(b).mark_layout_dynamic(leading_dim=0)
    assert text_of(t1) == "(?,?,?,?,?):(1,?,?,?,?)"
    t2 = from_dlpack(b).mark_layout_dynamic(leading_dim=2)
    assert text_of(t2) == "(?,?,?,?,?):(?,?,1,?,?)"
    t3 = from_dlpack(c).mark_layout_dynamic()
    assert text_of(t3) == "(?,?):(?,?)"
    t4 = from_dlpack(d).mark_layout_dynamic()
    assert text_of(t4) == "(?,?,?,?):(?,0,0,1)"
    raises(lambda: from_dlpack(b).mark_layout_dynamic(),
           "Can't deduce the leading dimension from layout, please specify the leading_dim "
           "explicitly.")
    raises(lambda: from_dlpack(a).mark_layout_dynamic(leading_dim=1),
           "Expected strides[leading_dim] == 1, but got 16")
    raises(lambda: from_dlpack(b).mark_layout_dynamic(leading_dim=3),
           "Expected strides[leading_dim] == 1, but got 4")


def test_mark_layout_dynamic_returns_the_view_and_failures_change_nothing():
    v = from_dlpack(ref_a())
    assert v.mark_layout_dynamic() is v
    before = v.layout
    raises(lambda: v.mark_layout_dynamic(leading_dim=0), "Expected strides[leading_dim] == 1, "
                                                          "but got ?")
    assert v.layout == before
    raises(lambda: v.mark_layout_dynamic(leading_dim=4),
           "Expected leading_dim value to be in range [0, 4), but got 4")
    raises(lambda: v.mark_layout_dynamic(leading_dim=-1),
           "Expected leading_dim value to be in range [0, 4), but got -1")
    raises(lambda: v.mark_layout_dynamic(leading_dim=1.0), "leading_dim must be an int, got float",
           TypeError)
    raises(lambda: v.mark_layout_dynamic(leading_dim=True), "leading_dim must be an int, got bool",
           TypeError)
    raises(lambda: v.mark_layout_dynamic(leading_dim=2**70),
           f"leading_dim {2**70} is out of range")
    assert v.mark_layout_dynamic(leading_dim=np.int64(3)).layout == before
    # The tensor's own shape and strides are untouched by marking.
    assert v.shape == (8, 4, 16, 2) and v.stride == (2, 16, 64, 1)


# --- mark_compact_shape_dynamic ---------------------------------------------------------------


def test_reference_stride_order_prose():
    v = from_dlpack(strided((4, 2), (1, 4))).mark_compact_shape_dynamic(mode=0)
    assert v.stride_order == (1, 0)
    v = from_dlpack(strided((5, 3, 2, 4), (3, 1, 15, 30))).mark_compact_shape_dynamic(mode=0)
    assert v.stride_order == (3, 2, 0, 1)
    v = from_dlpack(strided((2, 2, 3, 4), (2, 1, 4, 12))).mark_compact_shape_dynamic(mode=0)
    assert v.stride_order == (3, 2, 0, 1)
    raises(lambda: from_dlpack(strided((1, 5, 1), (1, 1, 1))).mark_compact_shape_dynamic(mode=1),
           "The layout could not be deduced, please specify the stride_order explicitly")
    # A given order is validated: against the deduced one here.
    v = from_dlpack(strided((4, 2), (1, 4)))
    assert v.stride_order is None
    assert v.mark_compact_shape_dynamic(mode=1, stride_order=(1, 0)).layout == "(4,?):(1,4)"
    raises(lambda: from_dlpack(strided((4, 2), (1, 4))).mark_compact_shape_dynamic(
        mode=1, stride_order=[0, 1]),
        "The stride_order is not consistent with the deduced stride_order")


def test_reference_mark_compact_shape_dynamic_code_example():
    a, b = ref_a(), ref_b()
    t0 = from_dlpack(a).mark_compact_shape_dynamic(mode=0, divisibility=2)
    assert text_of(t0) == "(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)"
    assert t0.stride_order == (2, 1, 0, 3)  # "auto deduce the stride order to be [2,1,0,3]"
    t1 = from_dlpack(a).mark_compact_shape_dynamic(mode=1, divisibility=2)
    assert text_of(t1) == "(8,?{div=2},16,2):(2,16,?{div=32},1)"
    t2 = from_dlpack(a).mark_compact_shape_dynamic(
        mode=1, divisibility=2
    ).mark_compact_shape_dynamic(
        mode=3, divisibility=2
    )
    assert text_of(t2) == "(8,?{div=2},16,?{div=2}):(?{div=2},?{div=16},?{div=32},1)"
    t3 = from_dlpack(b).mark_compact_shape_dynamic(
        mode=2, divisibility=1, stride_order=(3, 0, 2, 4, 1)
    )
    assert text_of(t3) == "(1,4,?,32,1):(0,1,4,?{div=4},0)"
    t4 = from_dlpack(b).mark_compact_shape_dynamic(
        mode=2, divisibility=1, stride_order=(2, 3, 4, 0, 1)
    )
    assert text_of(t4) == "(1,4,?,32,1):(0,1,128,4,0)"
    raises(lambda: t2.mark_compact_shape_dynamic(
        mode=3, divisibility=5, stride_order=(0, 1, 2, 3)),
        "The stride_order is not consistent with the last stride_order")
    raises(lambda: from_dlpack(a).mark_compact_shape_dynamic(
        mode=3, divisibility=5, stride_order=(0, 1, 2, 3)),
        "The stride_order is not consistent with the deduced stride_order")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=0, divisibility=4),
           "The layout could not be deduced, please specify the stride_order explicitly")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(
        mode=30, divisibility=5, stride_order=(3, 0, 2, 4, 1)),
        "Expected mode value to be in range [0, 5), but got 30")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(
        mode=3, divisibility=5, stride_order=(2, 1, 2, 3, 4)),
        "Expected stride_order to contain all the dimensions of the tensor, but it doesn't "
        "contain 0.")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(
        mode=3, divisibility=5, stride_order=(0, 1, 2, 3, 4, 5)),
        "Expected stride_order to have 5 elements, but got 6.")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(
        mode=0, divisibility=4, stride_order=OLD_B_DIM_ORDER),
        "The shape(1) of mode(0) is not divisible by the divisibility(4)")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(
        mode=0, divisibility=1, stride_order=(2, 1, 3, 0, 4)),
        "The stride_order is not consistent with the layout")
    # t2 is unchanged by the failed t5.
    assert t2.layout == "(8,?{div=2},16,?{div=2}):(?{div=2},?{div=16},?{div=32},1)"


def test_mark_compact_shape_dynamic_arguments():
    v = from_dlpack(ref_a())
    assert v.mark_compact_shape_dynamic(0) is v
    raises(lambda: v.mark_compact_shape_dynamic(mode=0, divisibility=0),
           "Expected divisibility to be a positive integer, but got 0")
    raises(lambda: v.mark_compact_shape_dynamic(mode="0"), "mode must be an int, got str",
           TypeError)
    raises(lambda: v.mark_compact_shape_dynamic(mode=0, stride_order=(2, 1, "0", 3)),
           "stride_order entries must be ints, got str", TypeError)
    raises(lambda: v.mark_compact_shape_dynamic(mode=0, stride_order=tuple(range(40))),
           "Expected stride_order to have 4 elements, but got 40.")
    raises(lambda: v.mark_compact_shape_dynamic(mode=0, stride_order=(2, 1, 0, 2**80)),
           "Expected stride_order to contain all the dimensions of the tensor, but it doesn't "
           "contain 3.")
    # Lists, NumPy ints and torch's dim_order() tuples all work as orders.
    order = [np.int32(2), 1, 0, 3]
    assert v.mark_compact_shape_dynamic(mode=2, stride_order=order, divisibility=8).layout == \
        "(?,4,?{div=8},2):(2,?{div=2},?{div=8},1)"
    raises(lambda: from_dlpack(ref_c()).mark_compact_shape_dynamic(mode=0),
           "The layout (2, 2):(8, 2) is not compact; mark_compact_shape_dynamic needs a compact "
           "layout (mark_layout_dynamic takes any)")


def test_marks_combine():
    v = from_dlpack(ref_a()).mark_compact_shape_dynamic(mode=0, divisibility=2)
    assert v.mark_layout_dynamic().layout == "(?{div=2},?,?,?):(?,?,?,1)"
    assert v.stride_order is None  # mark_layout_dynamic forgets the compact order
    assert v.mark_compact_shape_dynamic(mode=1, divisibility=4).layout == \
        "(?{div=2},?{div=4},?,?):(?,?{div=2},?{div=8},1)"


# --- The same calls on the layouts PyTorch 2.13 produces --------------------------------------


def torch_tensors():
    return {
        "a": torch.empty(16, 4, 8, 2).permute(2, 1, 0, 3),
        "b": torch.empty(32, 1, 1, 1, 4).permute(3, 4, 1, 0, 2),
        "c": torch.empty(3, 4)[::2, ::2],
        "d": torch.empty(3, 1, 1, 5).expand(3, 4, 2, 5),
    }


def test_torch_layouts_today():
    t = torch_tensors()
    assert from_dlpack(t["a"]).layout == "(8, 4, 16, 2):(2, 16, 64, 1)"
    # Current PyTorch exports the real strides of size-1 dims: b is no longer ambiguous.
    assert from_dlpack(t["b"]).layout == "(1, 4, 1, 32, 1):(4, 1, 4, 4, 4)"
    assert t["b"].dim_order() == (3, 0, 2, 4, 1)
    assert from_dlpack(t["c"]).layout == "(2, 2):(8, 2)"
    assert from_dlpack(t["d"]).layout == "(3, 4, 2, 5):(5, 0, 0, 1)"


def test_torch_mark_layout_dynamic():
    t = torch_tensors()
    a, b, c, d = t["a"], t["b"], t["c"], t["d"]
    assert text_of(from_dlpack(a).mark_layout_dynamic()) == "(?,?,?,?):(?,?,?,1)"
    raises(lambda: from_dlpack(b).mark_layout_dynamic(leading_dim=0),
           "Expected strides[leading_dim] == 1, but got 4")
    raises(lambda: from_dlpack(b).mark_layout_dynamic(leading_dim=2),
           "Expected strides[leading_dim] == 1, but got 4")
    assert text_of(from_dlpack(c).mark_layout_dynamic()) == "(?,?):(?,?)"
    assert text_of(from_dlpack(d).mark_layout_dynamic()) == "(?,?,?,?):(?,0,0,1)"
    # t5 succeeds: only mode 1 has stride 1.
    assert text_of(from_dlpack(b).mark_layout_dynamic()) == "(?,?,?,?,?):(?,1,?,?,?)"
    raises(lambda: from_dlpack(a).mark_layout_dynamic(leading_dim=1),
           "Expected strides[leading_dim] == 1, but got 16")
    raises(lambda: from_dlpack(b).mark_layout_dynamic(leading_dim=3),
           "Expected strides[leading_dim] == 1, but got 4")
    # Current PyTorch's own ambiguity: a (5, 1) tensor has strides (1, 1).
    raises(lambda: from_dlpack(torch.empty(5, 1)).mark_layout_dynamic(),
           "Can't deduce the leading dimension from layout, please specify the leading_dim "
           "explicitly.")


def test_torch_mark_compact_shape_dynamic():
    t = torch_tensors()
    a, b = t["a"], t["b"]
    t0 = from_dlpack(a).mark_compact_shape_dynamic(mode=0, divisibility=2)
    assert text_of(t0) == "(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)"
    assert t0.stride_order == a.dim_order()
    t1 = from_dlpack(a).mark_compact_shape_dynamic(mode=1, divisibility=2)
    assert text_of(t1) == "(8,?{div=2},16,2):(2,16,?{div=32},1)"
    t2 = from_dlpack(a).mark_compact_shape_dynamic(mode=1, divisibility=2) \
        .mark_compact_shape_dynamic(mode=3, divisibility=2)
    assert text_of(t2) == "(8,?{div=2},16,?{div=2}):(?{div=2},?{div=16},?{div=32},1)"
    t3 = from_dlpack(b).mark_compact_shape_dynamic(mode=2, divisibility=1,
                                                   stride_order=(3, 0, 2, 4, 1))
    assert text_of(t3) == "(1,4,?,32,1):(0,1,4,?{div=4},0)"
    t4 = from_dlpack(b).mark_compact_shape_dynamic(mode=2, divisibility=1,
                                                   stride_order=(2, 3, 4, 0, 1))
    assert text_of(t4) == "(1,4,?,32,1):(0,1,128,4,0)"
    # Deduced now, as torch's dim_order, which t3 used.
    t3b = from_dlpack(b).mark_compact_shape_dynamic(mode=2)
    assert t3b.stride_order == b.dim_order() and t3b.layout == t3.layout
    raises(lambda: t2.mark_compact_shape_dynamic(mode=3, divisibility=5,
                                                 stride_order=(0, 1, 2, 3)),
           "The stride_order is not consistent with the last stride_order")
    raises(lambda: from_dlpack(a).mark_compact_shape_dynamic(mode=3, divisibility=5,
                                                             stride_order=(0, 1, 2, 3)),
           "The stride_order is not consistent with the deduced stride_order")
    # t7: the order is deduced now, so the divisibility is what fails.
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=0, divisibility=4),
           "The shape(1) of mode(0) is not divisible by the divisibility(4)")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=30, divisibility=5,
                                                             stride_order=(3, 0, 2, 4, 1)),
           "Expected mode value to be in range [0, 5), but got 30")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=3, divisibility=5,
                                                             stride_order=(2, 1, 2, 3, 4)),
           "Expected stride_order to contain all the dimensions of the tensor, but it doesn't "
           "contain 0.")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=3, divisibility=5,
                                                             stride_order=(0, 1, 2, 3, 4, 5)),
           "Expected stride_order to have 5 elements, but got 6.")
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=0, divisibility=4,
                                                             stride_order=b.dim_order()),
           "The shape(1) of mode(0) is not divisible by the divisibility(4)")
    # t12: with a deducible layout the order is checked against the deduced one.
    raises(lambda: from_dlpack(b).mark_compact_shape_dynamic(mode=0, divisibility=1,
                                                             stride_order=(2, 1, 3, 0, 4)),
           "The stride_order is not consistent with the deduced stride_order")


# --- The view itself --------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "name", "tilejit_name"), [
    (torch.float32, "Float32", "float32"), (torch.float16, "Float16", "float16"),
    (torch.bfloat16, "BFloat16", "bfloat16"), (torch.float64, "Float64", "float64"),
    (torch.int8, "Int8", "int8"), (torch.int16, "Int16", "int16"),
    (torch.int32, "Int32", "int32"), (torch.int64, "Int64", "int64"),
    (torch.uint8, "Uint8", "uint8"), (torch.uint16, "Uint16", "uint16"),
    (torch.uint32, "Uint32", "uint32"), (torch.uint64, "Uint64", "uint64"),
    (torch.bool, "Boolean", "bool"), (torch.float8_e4m3fn, "Float8E4M3FN", "float8_e4m3fn"),
    (torch.float8_e5m2, "Float8E5M2", "float8_e5m2"), (torch.complex64, "Complex64", "complex64"),
    (torch.complex128, "Complex128", "complex128"),
])
def test_element_types(dtype, name, tilejit_name):
    v = from_dlpack(torch.zeros(4, dtype=dtype))
    assert v.element_type == name
    assert v.dtype == tilejit_name
    assert v.assumed_align == torch.zeros(0, dtype=dtype).element_size()


def test_numpy_views():
    x = np.zeros((3, 4), np.float64)[:, ::2]
    v = from_dlpack(x)
    assert (v.shape, v.stride, v.element_type, v.memspace) == ((3, 2), (4, 2), "Float64",
                                                               "generic")
    assert v.data_ptr == x.ctypes.data
    assert v.source is x
    assert not v.read_only
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    assert from_dlpack(ro).read_only
    assert from_dlpack(np.array(3, np.float32)).layout == "():()"
    assert from_dlpack(np.zeros(0, np.int16)).shape == (0,)


def test_assumed_align():
    x = torch.zeros(64)
    assert from_dlpack(x, assumed_align=64).assumed_align == 64
    y = x[1:]  # 4 bytes past a (at least) 64-byte aligned base
    assert from_dlpack(y).assumed_align == 4
    raises(lambda: from_dlpack(y, assumed_align=8),
           f"The tensor's base address 0x{y.data_ptr():016x} is not divisible by "
           "assumed_align (8 bytes)")
    raises(lambda: from_dlpack(x, assumed_align=12),
           "assumed_align must be a positive power of two, got 12")
    raises(lambda: from_dlpack(x, assumed_align=0),
           "assumed_align must be a positive power of two, got 0")
    raises(lambda: from_dlpack(x, assumed_align=True), "assumed_align must be an int, got bool",
           TypeError)
    # A byte offset counts: the address is data + byte_offset.
    z = np.zeros(5, np.int8)[1:]
    assert from_dlpack(z).data_ptr == z.ctypes.data
    raises(lambda: from_dlpack(z, assumed_align=2),
           f"The tensor's base address 0x{z.ctypes.data:016x} is not divisible by "
           "assumed_align (2 bytes)")


def test_not_a_tensor():
    raises(lambda: from_dlpack(3), "from_dlpack: expected a tensor supporting DLPack "
                                   "(__dlpack__), got int", TypeError)
    raises(lambda: from_dlpack([1.0]), "from_dlpack: expected a tensor supporting DLPack "
                                       "(__dlpack__), got list", TypeError)
    raises(lambda: type(from_dlpack(torch.zeros(1)))(),
           "TensorView cannot be created directly; use tilejit.from_dlpack(x)", TypeError)


def test_view_keeps_its_source_alive():
    x = torch.zeros(10)
    alive = weakref.ref(x)
    refs = sys.getrefcount(x)
    v = from_dlpack(x)
    assert v.source is x
    del x
    gc.collect()
    assert alive() is not None
    assert v.shape == (10,)
    del v
    gc.collect()
    assert alive() is None
    # Many views leave the source's reference count as it was.
    y = torch.zeros(3)
    refs = sys.getrefcount(y)
    for _ in range(10000):
        from_dlpack(y)
    assert sys.getrefcount(y) == refs


# --- A producer of our own: ownership and device memory ---------------------------------------


def test_deleter_runs_exactly_once():
    f = FakeTensor((2, 3))
    v = from_dlpack(f)
    assert f.deletes == 0
    assert v.layout == "(2, 3):(3, 1)"  # NULL strides: compact row-major
    v.mark_layout_dynamic()
    del v
    gc.collect()
    assert f.deletes == 1
    # A view that fails after the import still releases the tensor, once.
    with pytest.raises(ValueError, match="not divisible by assumed_align"):
        from_dlpack(FakeTensor((2,), data=0x10004), assumed_align=8)
    g = FakeTensor((2,), data=0x10004)
    with pytest.raises(ValueError):
        from_dlpack(g, assumed_align=8)
    gc.collect()
    assert g.deletes == 1
    h = FakeTensor((4,))
    for _ in range(1000):
        from_dlpack(h)
    assert h.deletes == 1000


def test_device_memory_is_gmem():
    f = FakeTensor((4, 8), (8, 1), device=(2, 0), data=0x7F0000000000)
    v = from_dlpack(f)
    assert v.memspace == "gmem"
    assert v.device == (2, 0)
    assert str(v) == "Tensor<0x00007f0000000000@gmem o (4, 8):(8, 1)>"
    assert FakeTensor((1,), device=(3, 0)).__dlpack_device__() == (3, 0)
    assert from_dlpack(FakeTensor((1,), device=(3, 0))).memspace == "generic"  # pinned host


def test_read_only_flag_is_carried():
    assert from_dlpack(FakeTensor((2,), flags=1)).read_only
    assert not from_dlpack(FakeTensor((2,))).read_only


def test_too_many_dimensions():
    raises(lambda: from_dlpack(FakeTensor((1,) * 17)),
           "from_dlpack: a 17-d tensor has too many dimensions (at most 16)")


# --- T.Buffer.like ----------------------------------------------------------------------------


def test_buffer_like_static_and_marked():
    x = torch.zeros(30, 20)
    assert repr(T.Buffer.like(from_dlpack(x), name="A")) == \
        "Buffer((30, 20), float32, strides=(20, 1), name='A', align=4)"
    v = from_dlpack(ref_a()).mark_compact_shape_dynamic(mode=0, divisibility=2)
    b = T.Buffer.like(v, name="A")
    assert repr(b) == ("Buffer((A_shape0, 4, 16, 2), float32, strides=(2, A_stride1, "
                       "A_stride2, 1), name='A', align=4)")
    assert [s.divisibility for s in (b.shape[0], b.strides[1], b.strides[2])] == [2, 4, 16]
    d = T.Buffer.like(from_dlpack(ref_d()).mark_layout_dynamic(), name="D", const=True)
    assert repr(d) == ("Buffer((D_shape0, D_shape1, D_shape2, D_shape3), float32, "
                       "strides=(D_stride0, 0, 0, 1), name='D', align=4, const=True)")


def test_buffer_like_names_and_errors():
    v = from_dlpack(torch.zeros(8, 4)).mark_layout_dynamic()
    b1, b2 = T.Buffer.like(v), T.Buffer.like(v)
    assert b1.name is None and b1.shape[0].name.startswith("view")
    assert b1.shape[0].name != b2.shape[0].name  # distinct symbols for distinct buffers
    assert T.Buffer.like(from_dlpack(torch.zeros(8), assumed_align=32)).align == 32
    copy = T.Buffer.like(b1, name="C", const=True)
    assert copy.shape == b1.shape and copy.name == "C" and copy.const
    raises(lambda: T.Buffer.like(torch.zeros(2)), "T.Buffer.like expects a view made by "
                                                  "tilejit.from_dlpack (or a T.Buffer), got "
                                                  "Tensor", TypeError)
    raises(lambda: T.Buffer.like(v, name="1x"), "T.Buffer.like: name must be a C identifier, "
                                                "got '1x'")


# --- make_ptr ---------------------------------------------------------------------------------


def test_make_ptr():
    x = torch.zeros(64, dtype=torch.float16)
    p = tilejit.make_ptr("float16", x.data_ptr(), memspace="generic", assumed_align=32)
    assert isinstance(p, tilejit.Pointer)
    assert (p.dtype, p.address, p.memspace, p.assumed_align) == ("float16", x.data_ptr(),
                                                                 "generic", 32)
    assert p.element_type == "Float16"
    assert int(p) == x.data_ptr()
    assert repr(p) == f"Pointer<0x{x.data_ptr():016x}@generic, Float16, align=32>"
    assert tilejit.make_ptr(torch.bfloat16, 0x1002).assumed_align == 2
    assert tilejit.make_ptr(np.float64, 0x1008, "gmem").memspace == "gmem"
    raises(lambda: tilejit.make_ptr("float16", x.data_ptr() + 2, assumed_align=32),
           f"make_ptr: address 0x{x.data_ptr() + 2:016x} is not divisible by assumed_align "
           "(32 bytes)")
    raises(lambda: tilejit.make_ptr("float32", 0x1002),
           "make_ptr: address 0x0000000000001002 is not divisible by assumed_align (4 bytes)")
    raises(lambda: tilejit.make_ptr("float32", 0x1000, assumed_align=3),
           "make_ptr: assumed_align must be a positive power of two, got 3")
    raises(lambda: tilejit.make_ptr("float32", 0x1000, memspace="smem"),
           "make_ptr: memspace must be one of generic, gmem, got 'smem'")
    raises(lambda: tilejit.make_ptr("float32", -4),
           "make_ptr: address must be in [0, 2**64), got -4")
    raises(lambda: tilejit.make_ptr("float32", 4.0), "make_ptr: address must be an int, got float",
           TypeError)
    with pytest.raises(ValueError, match="unknown dtype"):
        tilejit.make_ptr("float13", 0x1000)


def test_from_dlpack_without_the_wrapper(monkeypatch):
    from tilejit.runtime import cython_backend
    from tilejit.runtime import views as layout

    def broken():
        raise RuntimeError("no Cython here")

    monkeypatch.setattr(cython_backend, "wrapper_module", broken)
    monkeypatch.setattr(layout, "_from_dlpack", None)
    with pytest.raises(RuntimeError, match=r"^tilejit.from_dlpack needs the compiled Cython "
                                           r"wrapper, which is unavailable \(no Cython here\)"):
        tilejit.from_dlpack(torch.zeros(2))
    assert tilejit.make_ptr("float32", 0x1000).address == 0x1000  # needs no wrapper
