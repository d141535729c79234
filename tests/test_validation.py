"""Argument validation (docs/validation.md): every row of its tables with its exact
exception type, messages naming the kernel, the argument and what was expected, the edge
rules, and DLPack producers on other devices built by hand with ctypes."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from fake_dlpack import FakeTensor
from kernels import VEC_ADD

import tilejit
from tilejit import T


@pytest.fixture(scope="module")
def vec_add_inplace(build):
    """vec_add with C passed by the caller (no outputs), C not const."""
    n = T.symbol("n")
    return build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                             T.Buffer((n,), "float32", name="B", const=True),
                             T.Buffer((n,), "float32", name="C")], VEC_ADD)


ROW_SUM = """
void row_sum(const float *A, float *O, int64_t n, int64_t m) {
  for (int64_t i = 0; i < n; ++i) {
    O[i] = 0;
    for (int64_t j = 0; j < m; ++j) O[i] += A[i * m + j];
  }
}
"""


@pytest.fixture(scope="module")
def row_sum(build):
    """Compact (n, m) input."""
    n, m = T.symbol("n"), T.symbol("m")
    return build("row_sum", [T.Buffer((n, m), "float32", name="A", const=True),
                             T.Buffer((n,), "float32", name="O")], ROW_SUM, out_idx=-1)


STRIDED_SUM = """
void strided_sum(const float *A, float *O, int64_t n, int64_t m, int64_t s0) {
  for (int64_t i = 0; i < n; ++i) {
    O[i] = 0;
    for (int64_t j = 0; j < m; ++j) O[i] += A[i * s0 + j];
  }
}
"""


@pytest.fixture(scope="module")
def strided_sum(build):
    """(n, m) input with a symbolic row stride and unit column stride."""
    n, m, s0 = T.symbol("n"), T.symbol("m"), T.symbol("s0")
    return build("strided_sum", [T.Buffer((n, m), "float32", strides=(s0, 1), name="A",
                                          const=True),
                                 T.Buffer((n,), "float32", name="O")], STRIDED_SUM, out_idx=-1)


FULLY_STRIDED = """
void gather2d(const float *A, float *O, int64_t n, int64_t m, int64_t s0, int64_t s1) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) O[i * m + j] = A[i * s0 + j * s1];
}
"""


@pytest.fixture(scope="module")
def gather2d(build):
    """Copies any (n, m) strided input into a compact output."""
    n, m, s0, s1 = (T.symbol(x) for x in ("n", "m", "s0", "s1"))
    return build("gather2d", [T.Buffer((n, m), "float32", strides=(s0, s1), name="A",
                                       const=True),
                              T.Buffer((n, m), "float32", name="O")], FULLY_STRIDED, out_idx=-1)


FIRST = """
void first(const float *A, float *O, int64_t n) { O[0] = n > 0 ? A[0] : -1.0f; O[1] = n; }
"""


@pytest.fixture(scope="module")
def first(build):
    n = T.symbol("n")
    return build("first", [T.Buffer((n,), "float32", name="A", const=True),
                           T.Buffer((2,), "float32", name="O")], FIRST, out_idx=-1)


@pytest.fixture(scope="module")
def first_aligned(build):
    n = T.symbol("n")
    return build("first", [T.Buffer((n,), "float32", name="A", const=True, align=16),
                           T.Buffer((2,), "float32", name="O")], FIRST, out_idx=-1)


# --- TypeError rows ---------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "message"), [
    (0, "vec_add: expected 2 arguments (A, B), got 0"),
    (1, "vec_add: expected 2 arguments (A, B), got 1"),
    (3, "vec_add: expected 2 arguments (A, B), got 3"),
])
def test_wrong_number_of_arguments(vec_add, count, message):
    with pytest.raises(TypeError) as info:
        vec_add(*[torch.rand(4)] * count)
    assert str(info.value) == message


@pytest.mark.parametrize(("value", "found"), [
    (3, "int"), (2.5, "float"), (True, "bool"), ("x", "str"), ([1.0, 2.0], "list"),
    ((1.0,), "tuple"), (object(), "object"),
])
def test_non_tensor_where_a_tensor_is_expected(vec_add, value, found):
    with pytest.raises(TypeError) as info:
        vec_add(torch.rand(2), value)
    assert str(info.value) == (f"vec_add: argument 1 'B': expected a tensor (an object "
                               f"supporting DLPack), got {found}")


def test_none_for_a_non_optional_tensor(vec_add):
    with pytest.raises(TypeError) as info:
        vec_add(None, torch.rand(2))
    assert str(info.value) == ("vec_add: argument 0 'A': expected a tensor (an object supporting "
                               "DLPack), got None (the parameter is not optional)")


# --- ValueError rows --------------------------------------------------------------------------


@pytest.mark.parametrize(("bad", "found"), [
    (torch.rand(4, dtype=torch.float64), "float64"),
    (torch.zeros(4, dtype=torch.int32), "int32"),
    (torch.zeros(4, dtype=torch.bfloat16), "bfloat16"),
    (np.zeros(4, np.float16), "float16"),
    (np.zeros(4, np.uint8), "uint8"),
    (np.zeros(4, np.bool_), "bool"),
])
def test_dtype_mismatch(vec_add, bad, found):
    with pytest.raises(ValueError) as info:
        vec_add(torch.rand(4), bad)
    assert str(info.value) == f"vec_add: argument 1 'B': expected dtype float32, got {found}"


def test_ndim_mismatch(vec_add):
    with pytest.raises(ValueError) as info:
        vec_add(torch.rand(4), torch.rand(2, 2))
    assert str(info.value) == ("vec_add: argument 1 'B': expected a 1-d tensor, got 2-d with "
                               "shape (2, 2)")
    # A 0-d tensor's shape is (), whatever the producer hands over for it (NumPy: no array).
    for zero_d in (np.zeros((), np.float32), torch.tensor(1.0), tilejit.empty((), "float32")):
        with pytest.raises(ValueError) as info:
            vec_add(zero_d, torch.rand(1))
        assert str(info.value) == ("vec_add: argument 0 'A': expected a 1-d tensor, got 0-d "
                                   "with shape ()")


def test_static_dim_mismatch(build):
    n = T.symbol("n")
    k = build("fixed", [T.Buffer((n, 4), "float32", name="A")],
              "void fixed(float *A, int64_t n) { (void)A; (void)n; }")
    k(torch.zeros(3, 4))
    with pytest.raises(ValueError) as info:
        k(torch.zeros(3, 5))
    assert str(info.value) == "fixed: argument 0 'A': expected shape[1] == 4, got 5"


def test_symbol_conflict_names_both_arguments(vec_add):
    with pytest.raises(ValueError) as info:
        vec_add(torch.rand(1024), torch.rand(1000))
    assert str(info.value) == ("vec_add: argument 1 'B': expected shape[0] == n (= 1024, bound by "
                               "argument 0 'A'), got 1000")
    with pytest.raises(ValueError) as info:
        vec_add(np.zeros(7, np.float32), np.zeros(8, np.float32))
    assert str(info.value) == ("vec_add: argument 1 'B': expected shape[0] == n (= 7, bound by "
                               "argument 0 'A'), got 8")


@pytest.fixture(scope="module")
def plus_one(build):
    n = T.symbol("n")
    return build("plus_one", [T.Buffer((n,), "float32", name="A", const=True),
                              T.Buffer((n + 1,), "float32", name="B", const=True),
                              T.Buffer((n * 2,), "float32", name="C", const=True),
                              T.Buffer((1,), "float32", name="O")],
                 "void plus_one(const float *A, const float *B, const float *C, float *O, "
                 "int64_t n) { O[0] = B[n]; (void)A; (void)C; }", out_idx=-1)


def test_expression_in_an_input_shape_checked_after_binding(plus_one):
    b = torch.arange(5.0)
    assert plus_one(torch.zeros(4), b, torch.zeros(8)).tolist() == [4.0]
    with pytest.raises(ValueError) as info:
        plus_one(torch.zeros(4), torch.zeros(4), torch.zeros(8))
    assert str(info.value) == "plus_one: argument 1 'B': expected shape[0] == n + 1 (= 5), got 4"
    with pytest.raises(ValueError) as info:
        plus_one(torch.zeros(4), torch.zeros(5), torch.zeros(9))
    assert str(info.value) == "plus_one: argument 2 'C': expected shape[0] == n * 2 (= 8), got 9"


def test_expression_before_the_buffer_that_binds_its_symbol(build):
    n = T.symbol("n")
    k = build("late_bind", [T.Buffer((n + 1,), "float32", name="B", const=True),
                            T.Buffer((n,), "float32", name="A", const=True)],
              "void late_bind(const float *B, const float *A, int64_t n) "
              "{ (void)B; (void)A; (void)n; }")
    assert k.c_prototype == "void late_bind(const float *B, const float *A, int64_t n)"
    k(torch.zeros(6), torch.zeros(5))
    with pytest.raises(ValueError) as info:
        k(torch.zeros(5), torch.zeros(5))
    assert str(info.value) == "late_bind: argument 0 'B': expected shape[0] == n + 1 (= 6), got 5"


def test_symbol_bound_by_the_first_tensor_carrying_it(build):
    n = T.symbol("n")
    k = build("first_binds", [T.Buffer((n,), "float32", name="X", optional=True),
                              T.Buffer((n,), "float32", name="A")],
              "void first_binds(float *X, float *A, int64_t n) { (void)X; (void)A; (void)n; }")
    with pytest.raises(ValueError) as info:
        k(torch.zeros(3), torch.zeros(4))
    assert str(info.value) == ("first_binds: argument 1 'A': expected shape[0] == n (= 3, bound "
                               "by argument 0 'X'), got 4")
    k(None, torch.zeros(4))  # an absent optional binds nothing


@pytest.fixture(scope="module")
def divisible(build):
    n = T.symbol("n", divisibility=16)
    return build("div16", [T.Buffer((n,), "float32", name="A", const=True),
                           T.Buffer((1,), "float32", name="O")],
                 "void div16(const float *A, float *O, int64_t n) { O[0] = n; (void)A; }",
                 out_idx=-1)


def test_divisibility(divisible):
    assert divisible(torch.zeros(32)).tolist() == [32.0]
    assert divisible(torch.zeros(0)).tolist() == [0.0]
    with pytest.raises(ValueError) as info:
        divisible(torch.zeros(17))
    assert str(info.value) == ("div16: argument 0 'A': shape[0] = 17 binds n, which must be "
                               "divisible by 16")


def _nonc(name):
    base = torch.arange(24.0).reshape(4, 6)
    nbase = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "torch_t": base.t(),
        "torch_step": base[:, ::2],
        "torch_cols": base[:, 1:4],
        "numpy_step": nbase[:, ::2],
        "numpy_cols": nbase[:, 2:],
        "numpy_t": nbase.T,
        "numpy_rows_step": nbase[::2],
    }[name]


@pytest.mark.parametrize("name", ["torch_t", "torch_step", "torch_cols", "numpy_step",
                                  "numpy_cols", "numpy_t", "numpy_rows_step"])
def test_non_compact_rejected_when_compact_declared(row_sum, name):
    x = _nonc(name)
    with pytest.raises(ValueError, match=r"^row_sum: argument 0 'A': expected a compact "
                                         r"row-major tensor \(strides \(\d+, 1\)\), got strides "
                                         r"\(-?\d+, -?\d+\); declare strides to accept strided "
                                         r"tensors$"):
        row_sum(x)


def test_non_compact_message_is_exact(row_sum):
    with pytest.raises(ValueError) as info:
        row_sum(torch.zeros(4, 6)[:, ::2])
    assert str(info.value) == ("row_sum: argument 0 'A': expected a compact row-major tensor "
                               "(strides (3, 1)), got strides (6, 2); declare strides to accept "
                               "strided tensors")


def test_stride_mismatch_with_declared_strides(strided_sum, build):
    with pytest.raises(ValueError) as info:
        strided_sum(torch.zeros(4, 6)[:, ::2])
    assert str(info.value) == "strided_sum: argument 0 'A': expected stride[1] == 1, got 2"
    k = build("static_stride", [T.Buffer((T.symbol("n"), 4), "float32", strides=(8, 1),
                                         name="A")],
              "void static_stride(float *A, int64_t n) { (void)A; (void)n; }")
    k(torch.zeros(3, 8)[:, :4])
    with pytest.raises(ValueError) as info:
        k(torch.zeros(3, 4))
    assert str(info.value) == "static_stride: argument 0 'A': expected stride[0] == 8, got 4"


def test_stride_symbol_shared_by_two_buffers(build):
    n, s = T.symbol("n"), T.symbol("s")
    k = build("two_strided", [T.Buffer((n, 2), "float32", strides=(s, 1), name="A"),
                              T.Buffer((n, 2), "float32", strides=(s, 1), name="B")],
              "void two_strided(float *A, float *B, int64_t n, int64_t s) "
              "{ (void)A; (void)B; (void)n; (void)s; }")
    k(torch.zeros(3, 5)[:, :2], torch.zeros(3, 5)[:, 1:3])
    with pytest.raises(ValueError) as info:
        k(torch.zeros(3, 5)[:, :2], torch.zeros(3, 6)[:, :2])
    assert str(info.value) == ("two_strided: argument 1 'B': expected stride[0] == s (= 5, bound "
                               "by argument 0 'A'), got 6")


def test_misaligned_pointer(first_aligned):
    base = torch.arange(64.0)
    assert base.data_ptr() % 16 == 0  # torch aligns its CPU allocations to 64 bytes
    assert first_aligned(base).tolist() == [0.0, 64.0]
    assert first_aligned(base[4:]).tolist() == [4.0, 60.0]
    with pytest.raises(ValueError) as info:
        first_aligned(base[1:])
    address = base.data_ptr() + 4
    assert str(info.value) == (f"first: argument 0 'A': expected the data pointer aligned to 16 "
                               f"bytes, got address {address:#x} (misaligned by 4)")


def test_default_alignment_is_the_element_size(build):
    n = T.symbol("n")
    k = build("f32", [T.Buffer((n,), "float32", name="A")],
              "void f32(float *A, int64_t n) { (void)A; (void)n; }")
    raw = np.zeros(64, np.uint8)
    offset = next(i for i in range(1, 4) if (raw.ctypes.data + i) % 4)
    with pytest.raises(ValueError, match=r"^f32: argument 0 'A': expected the data pointer "
                                         r"aligned to 4 bytes"):
        k(raw[offset:offset + 32].view(np.float32))


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_byte_offset_is_applied(first, framework):
    if framework == "torch":
        x = torch.arange(10.0)
        views = [(x[3:], 3.0), (x[9:], 9.0), (x.reshape(2, 5)[1], 5.0)]
    else:
        x = np.arange(10, dtype=np.float32)
        views = [(x[7:], 7.0), (x[1:], 1.0), (x.reshape(2, 5)[1], 5.0)]
    for view, want in views:
        assert first(view).tolist() == [want, float(len(view))]


def test_byte_offset_of_a_two_d_slice(row_sum):
    x = torch.arange(24.0).reshape(4, 6)
    torch.testing.assert_close(row_sum(x[2:]), x[2:].sum(1))
    xn = x.numpy()
    np.testing.assert_allclose(row_sum(xn[1:3]), xn[1:3].sum(1))


def test_read_only_tensor(build, first):
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    # const=True accepts it.
    assert first(ro).tolist() == [0.0, 4.0]
    k = build("write", [T.Buffer((T.symbol("n"),), "float32", name="A")],
              "void write(float *A, int64_t n) { for (int64_t i = 0; i < n; ++i) A[i] = 9; }")
    with pytest.raises(ValueError) as info:
        k(ro)
    assert str(info.value) == ("write: argument 0 'A': the tensor is read-only (DLPack READ_ONLY "
                               "flag), but the parameter is not declared const=True")
    assert ro.tolist() == [0, 1, 2, 3]
    rw = np.arange(4, dtype=np.float32)
    k(rw)
    assert rw.tolist() == [9, 9, 9, 9]


def test_no_launch_on_bad_data(vec_add_inplace):
    a, b = torch.ones(4), torch.ones(4)
    c = torch.zeros(4)
    with pytest.raises(ValueError):
        vec_add_inplace(a, b, torch.zeros(5))
    with pytest.raises(TypeError):
        vec_add_inplace(a, "b", c)
    with pytest.raises(ValueError):
        vec_add_inplace(a, b, c[::2])
    assert c.tolist() == [0, 0, 0, 0]
    vec_add_inplace(a, b, c)
    assert c.tolist() == [2, 2, 2, 2]


# --- edge rules -------------------------------------------------------------------------------


def test_size_one_dims_with_odd_strides_are_compact(row_sum):
    t = torch.empty_strided((3, 1), (1, 7))
    t.copy_(torch.tensor([[1.0], [2.0], [3.0]]))
    assert row_sum(t).tolist() == [1.0, 2.0, 3.0]
    n = np.lib.stride_tricks.as_strided(np.arange(3, dtype=np.float32), (1, 3), (1234 * 4, 4))
    assert row_sum(n).tolist() == [3.0]
    n = np.lib.stride_tricks.as_strided(np.arange(3, dtype=np.float32), (1, 1), (-8, 12))
    assert row_sum(n).tolist() == [0.0]


def test_zero_size_tensors_skip_pointer_and_stride_checks(row_sum, first_aligned):
    out = row_sum(torch.zeros(0, 5))
    assert tuple(out.shape) == (0,)
    out = row_sum(torch.zeros(4, 0))
    assert out.tolist() == [0.0] * 4
    # Strided and misaligned, but empty: nothing to check.
    out = row_sum(np.zeros((0, 8), np.float32)[:, ::2])
    assert type(out) is np.ndarray and out.shape == (0,)
    base = torch.arange(8.0)
    assert first_aligned(base[1:1]).tolist() == [-1.0, 0.0]


def test_negative_strides_are_rejected(row_sum, strided_sum, gather2d):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match="compact row-major"):
        row_sum(x[::-1])
    with pytest.raises(ValueError) as info:
        strided_sum(x[::-1])
    assert str(info.value) == ("strided_sum: argument 0 'A': stride[0] = -4 is negative, and "
                               "negative strides are not declared (symbol s0)")
    with pytest.raises(ValueError, match=r"^gather2d: argument 0 'A': stride\[1\] = -1 is "
                                         r"negative"):
        gather2d(x[:, ::-1])


def test_strided_inputs_with_symbolic_strides(strided_sum, gather2d):
    z = torch.arange(30.0).reshape(3, 10)
    torch.testing.assert_close(strided_sum(z[:, 2:5]), z[:, 2:5].sum(1))
    torch.testing.assert_close(strided_sum(z), z.sum(1))
    zn = z.numpy()
    np.testing.assert_allclose(strided_sum(zn[::2, 3:]), zn[::2, 3:].sum(1))
    for view in (z.t(), z[::2, ::3], z[1:, 1::4]):
        got = gather2d(view)
        assert got.is_contiguous()
        assert torch.equal(got, view.contiguous())
    np.testing.assert_array_equal(gather2d(zn.T[::3]), np.ascontiguousarray(zn.T[::3]))


# --- devices and DLPack producers -------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


class DLManagedTensor(ctypes.Structure):
    pass


VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
    ("deleter", VERSIONED_DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", LEGACY_DELETER)]

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
# No capsule destructor: a ctypes callback must not run while the consumer's exception is
# pending, and a capsule the consumer never took shows up as a deleter count of 0 anyway.
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

DEVICES = {"cpu": 1, "cuda": 2, "cuda_host": 3, "rocm": 10, "oneapi": 14}


class FakeProducer:
    """A 1-d float32 DLPack producer over ctypes memory, on any device it claims.

    Each `__dlpack__` call builds a new managed tensor; `deleted` counts deleter calls.
    """

    def __init__(self, values, device="cpu", device_id=0, versioned=True, major=1,
                 read_only=False):
        self.values = list(values)
        self.buffer = (ctypes.c_float * max(len(self.values), 1))(*self.values)
        self.shape = (ctypes.c_int64 * 1)(len(self.values))
        self.device = (DEVICES[device], device_id)
        self.versioned, self.major, self.read_only = versioned, major, read_only
        self.exported = 0
        self.deleted = 0
        self._alive = []  # managed structs and their deleter callbacks
        if versioned:
            self._deleter = VERSIONED_DELETER(self._on_delete)
        else:
            self._deleter = LEGACY_DELETER(self._on_delete)

    def _on_delete(self, managed):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        managed = DLManagedTensorVersioned() if self.versioned else DLManagedTensor()
        if self.versioned:
            managed.version = DLPackVersion(self.major, 3)
            managed.flags = 1 if self.read_only else 0  # DLPACK_FLAG_BITMASK_READ_ONLY
        managed.deleter = self._deleter
        tensor = managed.dl_tensor
        tensor.data = ctypes.cast(self.buffer, ctypes.c_void_p)
        tensor.device = DLDevice(*self.device)
        tensor.ndim = 1
        tensor.dtype = DLDataType(2, 32, 1)  # kDLFloat, 32 bits, 1 lane
        tensor.shape = self.shape
        tensor.strides = None  # old-producer style: NULL means compact row-major
        tensor.byte_offset = 0
        self._alive.append(managed)
        self.exported += 1
        name = b"dltensor_versioned" if self.versioned else b"dltensor"
        return _PyCapsule_New(ctypes.addressof(managed), name, None)


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_fake_cpu_producer_is_imported_and_deleted_once(first, versioned):
    p = FakeProducer([5.0, 6.0, 7.0], versioned=versioned)
    assert first(p).tolist() == [5.0, 3.0]
    gc.collect()
    assert (p.exported, p.deleted) == (1, 1)


@pytest.mark.parametrize(("device", "device_id"), [("oneapi", 0), ("rocm", 1), ("cuda", 0)])
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_tensor_on_another_device_is_rejected(first, device, device_id, versioned):
    p = FakeProducer([1.0, 2.0], device=device, device_id=device_id, versioned=versioned)
    with pytest.raises(ValueError) as info:
        first(p)
    assert str(info.value) == (f"first: argument 0 'A': expected a cpu tensor, got a tensor on "
                               f"device {device}:{device_id}")
    gc.collect()
    assert (p.exported, p.deleted) == (1, 1)


def test_tensors_on_different_devices_are_rejected(vec_add):
    # cuda_host memory is host-accessible, so a CPU kernel takes it, but not mixed with cpu.
    p = FakeProducer([1.0, 2.0], device="cuda_host")
    with pytest.raises(ValueError) as info:
        vec_add(torch.zeros(2), p)
    assert str(info.value) == ("vec_add: argument 1 'B': expected device cpu:0 (that of "
                               "argument 0 'A'), got cuda_host:0")
    gc.collect()
    assert p.deleted == 1


def test_host_accessible_first_input_gets_a_host_output(first):
    p = FakeProducer([1.0, 2.0], device="cuda_host")
    assert np.from_dlpack(first(p)).tolist() == [1.0, 2.0]


def test_unsupported_dlpack_major_version(first):
    p = FakeProducer([1.0], major=2)
    with pytest.raises(ValueError) as info:
        first(p)
    message = str(info.value)
    assert message.startswith("first: argument 0 'A': ")
    assert "DLPack version 2.3 is not supported (expected 1.x)" in message
    gc.collect()
    assert (p.exported, p.deleted) == (1, 1)


def test_read_only_flag_of_a_versioned_producer(first, build):
    p = FakeProducer([3.0, 4.0], read_only=True)
    assert first(p).tolist() == [3.0, 2.0]
    k = build("write", [T.Buffer((T.symbol("n"),), "float32", name="A")],
              "void write(float *A, int64_t n) { for (int64_t i = 0; i < n; ++i) A[i] = 9; }")
    with pytest.raises(ValueError, match=r"^write: argument 0 'A': the tensor is read-only"):
        k(p)
    assert list(p.buffer) == [3.0, 4.0]
    gc.collect()
    assert (p.exported, p.deleted) == (2, 2)


def test_every_imported_tensor_is_released_when_a_later_argument_fails(vec_add):
    a = FakeProducer([1.0, 2.0])
    b = FakeProducer([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="got 3$"):
        vec_add(a, b)
    with pytest.raises(TypeError):
        vec_add(a, "b")
    assert vec_add(a, a).tolist() == [2.0, 4.0]
    gc.collect()
    assert (a.exported, a.deleted) == (4, 4)
    assert (b.exported, b.deleted) == (1, 1)


# --- every backend, same errors ---------------------------------------------------------------


def _cases():
    read_only = np.zeros(2, np.float32)
    read_only.flags.writeable = False
    return [
        (torch.rand(4), torch.rand(3)),
        (torch.rand(4), "x"),
        (torch.rand(4),),
        (None, torch.rand(4)),
        (torch.rand(4), torch.rand(8)[::2]),
        (np.zeros(4), np.zeros(4)),
        (FakeProducer([1.0], device="oneapi"), torch.rand(1)),
        (FakeProducer([1.0], major=2), torch.rand(1)),
        (torch.rand(2), FakeProducer([1.0, 2.0], device="cuda_host")),
        (FakeProducer([1.0, 2.0], versioned=False), np.ones(2, np.float32)),
        (read_only, read_only),
    ]


def _outcome(kernel, args):
    try:
        result = kernel(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        outcome = (type(exc).__name__, str(exc))
    else:
        outcome = ("ok", np.asarray(result).tolist())
    gc.collect()
    deleted = [(a.exported, a.deleted) for a in args if isinstance(a, FakeProducer)]
    return outcome, deleted


def test_every_backend_gives_the_same_results_and_errors(vec_add):
    outcomes = {}
    for backend in ("cython", "dlpack", "ctypes"):
        kernel = vec_add.with_backend(backend)
        assert kernel.execution_backend == backend
        outcomes[backend] = [_outcome(kernel, args) for args in _cases()]
    assert outcomes["dlpack"] == outcomes["cython"]
    assert outcomes["ctypes"] == outcomes["cython"]
    for (_, deleted) in outcomes["cython"]:
        assert all(exported == deleted_count for exported, deleted_count in deleted)


@pytest.mark.parametrize(("make", "found"), [
    (lambda: torch.rand(4).to_sparse(), "got layout torch.sparse_coo"),
    (lambda: torch.rand(2, 2).to_sparse_csr(), "got layout torch.sparse_csr"),
    (lambda: torch.rand(4).to_mkldnn(), "got layout torch._mkldnn"),
    (lambda: torch.nested.nested_tensor([torch.rand(2), torch.rand(3)]), "got a nested tensor"),
], ids=["sparse_coo", "sparse_csr", "mkldnn", "nested"])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_tensor_without_strided_storage_is_refused_alike(vec_add, make, found):
    # torch words these refusals one way through its exchange API and another through
    # __dlpack__; every backend says the same.
    for backend in ("cython", "dlpack", "ctypes"):
        with pytest.raises(ValueError) as info:
            vec_add.with_backend(backend)(make(), torch.rand(4))
        assert str(info.value) == (
            "vec_add: argument 0 'A': cannot import the tensor through DLPack: expected a "
            f"strided tensor, {found}, which DLPack cannot describe; "
            + ("pass its components, or pad it with .to_padded_tensor(0)" if "nested" in found
               else "convert it with .to_dense()")), backend


def test_torch_tensors_the_producer_cannot_export(vec_add, backend):
    # Requiring grad is no obstacle where autograd records nothing: the kernel works on
    # the storage, as through the exchange API (the capsule protocol exports the detached
    # alias). Where it would record, a kernel without a backward says so (test_torch_op).
    a = torch.ones(4, requires_grad=True)
    with torch.no_grad():
        assert vec_add(a, torch.ones(4)).tolist() == [2.0] * 4
    with pytest.raises(RuntimeError, match="^vec_add: argument 0 'A' requires grad, but no "
                                           "backward is registered"):
        vec_add(a, torch.ones(4))
    # No strided storage to hand over: the same ValueError on every backend, with the
    # producer's reason on one line (torch's C++ backtrace dropped).
    for bad in (torch.ones(4).to_sparse(), torch.ones(4, device="meta")):
        with pytest.raises(ValueError) as info:
            vec_add(torch.ones(4), bad)
        message = str(info.value)
        assert message.startswith("vec_add: argument 1 'B': cannot import the tensor through "
                                  "DLPack: ")
        assert "\n" not in message


# --- tensors no memory can hold, and stride symbols of size-1 dimensions ----------------------


COUNTED = """
void counted(const float *A, int64_t *N, int64_t n, int64_t m, int64_t s) {
  (void)A; (void)n; (void)m; (void)s;
  N[0] += 1;
}
"""


@pytest.fixture(scope="module")
def counted(build):
    """A kernel over an (n, m) tensor with strides (s, 1), s divisible by 4, that counts its
    launches in its second argument: a refused call must leave the count alone."""
    n, m, s = T.symbol("n"), T.symbol("m"), T.symbol("s", divisibility=4)
    kernel = build("counted", [T.Buffer((n, m), "float32", strides=(s, 1), name="A",
                                        const=True),
                               T.Pointer("int64", name="N")], COUNTED)
    launches = np.zeros(1, np.int64)

    def call(tensor):
        before = int(launches[0])
        try:
            kernel(tensor, launches)
        finally:
            gc.collect()
        return int(launches[0]) - before

    call.launches = launches
    return call


@pytest.mark.parametrize(("fake", "message"), [
    ({"shape": (-2, 3)}, "expected shape[0] >= 0, got -2"),
    ({"shape": (3, -1), "strides": (4, 1)}, "expected shape[1] >= 0, got -1"),
    ({"shape": (1 << 32, 1 << 32), "strides": (0, 0)},
     "expected at most 2**63 - 1 elements, got shape (4294967296, 4294967296)"),
    ({"shape": (3, 2), "strides": (1 << 62, 1)},
     ("expected elements within the address space, got shape (3, 2) with strides "
     "(4611686018427387904, 1) from address 0x10000")),
    ({"shape": (3, 2), "strides": (4, 1), "byte_offset": (1 << 64) - 8},
     ("expected data + byte_offset within the address space, got 0x10000 + "
     "18446744073709551608")),
    ({"shape": (3, 2), "strides": (4, 1), "data": 0},
     "expected a data pointer, got NULL for a tensor of shape (3, 2)"),
], ids=["negative", "negative-bound", "count", "extent", "offset", "null-data"])
def test_tensors_no_memory_can_hold_are_refused(counted, fake, message):
    bad = FakeTensor(**fake)
    with pytest.raises(ValueError) as info:
        counted(bad)
    assert str(info.value) == f"counted: argument 0 'A': {message}"
    assert bad.exports == bad.deletes == 1
    assert counted(FakeTensor((3, 2), strides=(4, 1), data=0x10000)) == 1


def test_empty_tensors_may_have_no_data(counted):
    assert counted(FakeTensor((0, 2), strides=(4, 1), data=0)) == 1


def test_compact_strides_must_fit(build):
    n = T.symbol("n")
    k = build("cube", [T.Buffer((n, n, n), "float32", name="A", const=True)],
              "void cube(const float *A, int64_t n) { (void)A; (void)n; }")
    with pytest.raises(ValueError) as info:
        k(FakeTensor((0, 1 << 40, 1 << 40)))
    assert str(info.value) == ("cube: argument 0 'A': expected shape[1] == n (= 0, bound by "
                               "argument 0 'A'), got 1099511627776")
    m, p = T.symbol("m"), T.symbol("p")
    k = build("box", [T.Buffer((n, m, p), "float32", strides=(T.symbol("s"), m * p, 1),
                               name="A", const=True)],
              "void box(const float *A, int64_t n, int64_t m, int64_t p, int64_t s) {}")
    with pytest.raises(ValueError) as info:
        k(FakeTensor((0, 1 << 40, 1 << 40)))
    assert str(info.value) == ("box: argument 0 'A': expected compact strides that fit in 64 "
                               "bits, got shape (0, 1099511627776, 1099511627776)")


def test_a_size_one_stride_binds_loosely(counted):
    # A single row's stride is never stepped over, so any value passes, even one the
    # declaration would refuse (not divisible by 4, negative)...
    assert counted(torch.empty_strided((1, 2), (3, 1))) == 1
    assert counted(torch.empty_strided((1, 2), (-4, 1))) == 1


@pytest.fixture(scope="module")
def row_and_rows(build):
    """A (1, m) row then an (n, m) block, both with row stride s (divisible by 4)."""
    n, m, s = T.symbol("n"), T.symbol("m"), T.symbol("s", divisibility=4)
    return build("rows", [T.Buffer((1, m), "float32", strides=(s, 1), name="R", const=True),
                          T.Buffer((n, m), "float32", strides=(s, 1), name="B", const=True),
                          T.Buffer((1,), "int64", name="S")],
                 "void rows(const float *R, const float *B, int64_t *S, int64_t m, int64_t s, "
                 "int64_t n) { (void)R; (void)B; (void)m; (void)n; S[0] = s; }", out_idx=-1)


def test_a_loosely_bound_stride_symbol_is_checked_where_it_reappears(row_and_rows):
    base = np.zeros(64, np.float32)
    row = np.lib.stride_tricks.as_strided(base, (1, 2), (3 * 4, 4))
    for stride, error in [
        (3, "stride[0] = 3 binds s, which must be divisible by 4"),
        (-4, "stride[0] = -4 is negative, and negative strides are not declared (symbol s)"),
    ]:
        block = np.lib.stride_tricks.as_strided(base[32:], (3, 2), (stride * 4, 4))
        row = np.lib.stride_tricks.as_strided(base, (1, 2), (stride * 4, 4))
        with pytest.raises(ValueError) as info:
            row_and_rows(row, block)
        assert str(info.value) == f"rows: argument 1 'B': {error}"
    # The row's stride says nothing: the block's binds s.
    row = np.lib.stride_tricks.as_strided(base, (1, 2), (3 * 4, 4))
    block = np.lib.stride_tricks.as_strided(base, (3, 2), (8 * 4, 4))
    assert np.asarray(row_and_rows(row, block)).tolist() == [8]
    assert np.asarray(row_and_rows(torch.empty_strided((1, 2), (5, 1)),
                                   torch.empty(3, 12)[:, :2])).tolist() == [12]


# --- what producers and frameworks report, labelled ------------------------------------------


class RaisingProducer:
    """A DLPack producer whose ``__dlpack__`` raises ``error``."""

    def __init__(self, error):
        self.error = error

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        raise self.error

    def __dlpack_device__(self):
        return (1, 0)


def test_a_producer_error_is_labelled_and_chained(vec_add):
    with pytest.raises(ValueError) as info:
        vec_add(torch.ones(2), RaisingProducer(KeyError("stream")))
    assert str(info.value) == ("vec_add: argument 1 'B': cannot import the tensor through "
                               "DLPack: 'stream'")
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(TypeError) as info:  # a TypeError stays one
        vec_add(RaisingProducer(TypeError("no such tensor\nmore detail")), torch.ones(2))
    assert str(info.value) == ("vec_add: argument 0 'A': cannot import the tensor through "
                               "DLPack: no such tensor")
    assert isinstance(info.value.__cause__, TypeError)


def test_from_dlpack_labels_a_producer_error():
    import tilejit

    with pytest.raises(ValueError) as info:
        tilejit.from_dlpack(RaisingProducer(KeyError("stream")))
    assert str(info.value) == "from_dlpack: cannot import the tensor through DLPack: 'stream'"
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(ValueError) as info:  # torch's own refusal, through the exchange API
        tilejit.from_dlpack(torch.ones(2).to_sparse())
    assert str(info.value).startswith("from_dlpack: cannot import the tensor through DLPack: ")
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def cube(build):
    """An (n, n, n) output of an (n,) input."""
    n = T.symbol("n")
    return build("cube", [T.Buffer((n,), "float32", name="A", const=True),
                          T.Buffer((n, n, n), "float32", name="O")],
                 "void cube(const float *A, float *O, int64_t n) { (void)A; (void)O; }",
                 out_idx=-1)


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_an_output_no_allocator_can_make_is_refused_alike(cube, framework):
    # 2**21 cubed float32 elements: 2**65 bytes, refused before any framework is asked.
    n = 1 << 21
    x = torch.empty(n) if framework == "torch" else np.empty(n, np.float32)
    with pytest.raises(ValueError) as info:
        cube(x)
    assert str(info.value) == ("cube: output 'O': expected at most 2**63 - 1 bytes, got shape "
                               "(2097152, 2097152, 2097152) of float32")


@pytest.mark.parametrize(("framework", "error"), [("torch", RuntimeError),
                                                  ("numpy", MemoryError)])
def test_a_failed_allocation_is_labelled(build, framework, error):
    # 2**48 float32 (a petabyte): within 64 bits, beyond any machine; the framework's
    # own error (first line), labelled with the output.
    n = T.symbol("n")
    k = build("peta", [T.Buffer((n,), "float32", name="A", const=True),
                       T.Buffer((n * (1 << 40),), "float32", name="O")],
              "void peta(const float *A, float *O, int64_t n) { (void)A; (void)O; }",
              out_idx=-1)
    x = torch.empty(256) if framework == "torch" else np.empty(256, np.float32)
    with pytest.raises(error) as info:
        k(x)
    message = str(info.value)
    assert message.startswith("peta: output 'O': cannot allocate the output: ")
    assert "\n" not in message


@pytest.fixture(scope="module")
def scaled(build):
    return build("scaled", [T.Buffer((1,), "float32", name="O"), T.Scalar("float32", name="s")],
                 "void scaled(float *O, float s) { O[0] = s; }", out_idx=0)


@pytest.mark.parametrize("value", [1 + 2j, np.complex128(1 + 2j), np.complex64(3)],
                         ids=["complex", "numpy.complex128", "numpy.complex64"])
def test_a_complex_is_no_float_scalar(scaled, value):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: the value is never cast
        with pytest.raises(TypeError) as info:
            scaled(value)
    name = "complex" if type(value) is complex else f"numpy.{type(value).__name__}"
    assert str(info.value) == (f"scaled: argument 0 's': expected a float or int scalar "
                               f"(float32), got {name}")
    assert np.from_dlpack(scaled(np.float32(2.5))).tolist() == [2.5]
    assert np.from_dlpack(scaled(np.int16(3))).tolist() == [3.0]


# --- lazy views: torch's conjugate and negative views ----------------------------------------


COPY_C64 = """
void copy_c64(const tj_complex64 *A, tj_complex64 *B, int64_t n) {
  for (int64_t i = 0; i < n; ++i) B[i] = A[i];
}
"""
COPY_F32 = """
void copy_f32(const float *A, float *B, int64_t n, int64_t s) {
  for (int64_t i = 0; i < n; ++i) B[i] = A[i * s];
}
"""


@pytest.fixture(scope="module")
def copy_c64(build):
    n = T.symbol("n")
    return build("copy_c64", [T.Buffer((n,), "complex64", name="A", const=True),
                              T.Buffer((n,), "complex64", name="B")], COPY_C64, out_idx=-1)


@pytest.fixture(scope="module")
def copy_f32(build):
    n, s = T.symbol("n"), T.symbol("s")
    return build("copy_f32", [T.Buffer((n,), "float32", strides=(s,), name="A", const=True),
                              T.Buffer((n,), "float32", name="B")], COPY_F32, out_idx=-1)


_LAZY = "expected a tensor that holds its values in memory, got a"


def test_a_conjugate_view_is_refused(copy_c64):
    x = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    with pytest.raises(ValueError) as info:
        copy_c64(x.conj())
    assert str(info.value) == (f"copy_c64: argument 0 'A': {_LAZY} conjugate view (its "
                               f"conjugate bit is set); materialise it with .resolve_conj()")
    # Materialised, the values are the conjugates; the plain tensor is unaffected.
    assert copy_c64(x.conj().resolve_conj()).tolist() == [1 - 2j, 3 + 4j]
    assert copy_c64(x).tolist() == [1 + 2j, 3 - 4j]
    assert copy_c64(x.conj().conj()).tolist() == [1 + 2j, 3 - 4j]  # no bit left


@pytest.mark.parametrize("make", ["imag of a conjugate", "_neg_view"])
def test_a_negative_view_is_refused(copy_f32, make):
    x = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    view = x.conj().imag if make == "imag of a conjugate" else torch._neg_view(x.real)
    with pytest.raises(ValueError) as info:
        copy_f32(view)
    assert str(info.value) == (f"copy_f32: argument 0 'A': {_LAZY} negative view (its "
                               f"negative bit is set); materialise it with .resolve_neg()")
    want = [-2.0, 4.0] if make == "imag of a conjugate" else [-1.0, -3.0]
    assert copy_f32(view.resolve_neg()).tolist() == want


def test_a_conjugate_and_negative_view_is_refused(copy_c64, build):
    x = torch.tensor([1 + 2j], dtype=torch.complex64)
    with pytest.raises(ValueError) as info:
        copy_c64(torch._neg_view(x.conj()))
    assert str(info.value) == (f"copy_c64: argument 0 'A': {_LAZY} conjugate and negative view "
                               f"(its conjugate and negative bits are set); materialise it with "
                               f".resolve_conj().resolve_neg()")
    # A pointer parameter takes a tensor's memory too: the same refusal.
    k = build("at", [T.Pointer("complex64", name="P")],
              "void at(tj_complex64 *P) { (void)P; }")
    with pytest.raises(ValueError, match=r"^at: argument 0 'P': .* got a conjugate view"):
        k(x.conj())
    k(x)


def test_from_dlpack_refuses_a_lazy_view():
    import tilejit

    x = torch.tensor([1 + 2j], dtype=torch.complex64)
    with pytest.raises(ValueError) as info:
        tilejit.from_dlpack(x.conj())
    assert str(info.value) == (f"from_dlpack: {_LAZY} conjugate view (its conjugate bit is "
                               f"set); materialise it with .resolve_conj()")
    with pytest.raises(ValueError, match="negative view"):
        tilejit.from_dlpack(torch._neg_view(torch.ones(2)))
    assert tilejit.from_dlpack(x.conj().resolve_conj()).shape == (1,)


def test_the_bits_are_found_whatever_the_heap_holds():
    # Two heap pointers in a TensorImpl can differ by one bit, by chance of where the
    # tensors were allocated (a CUDA build of torch 2.13 showed it in about one search of
    # 75): the search must never take such a word for the key set's.
    from tilejit.frameworks.torch import views as torch_views

    first = torch_views._find()
    assert first is not None
    junk = []
    for size in range(1, 150):
        junk.extend(torch.zeros(size % 50 + 1) for _ in range(size % 7))
        if size % 3 == 0:
            del junk[: len(junk) // 2]
        assert torch_views._find() == first


def test_the_bits_are_read_in_place_on_this_torch():
    # The fast way: where torch keeps the bits was found (and checked) for this torch, so
    # no call into torch is made per tensor; with TILEJIT_FAST_PATHS=0, torch is asked.
    from tilejit.frameworks.torch import views as torch_views
    from tilejit.runtime import host
    from tilejit.runtime.fast_paths import FAST_PATHS

    location = torch_views.locate()
    assert location is not None
    want = location if FAST_PATHS else torch_views.lazy_view
    assert host.view_check(torch.Tensor) == want
    assert host.view_check(torch.nn.Parameter) == want
    assert host.view_check(np.ndarray) is None


ASKING = """
import torch, tilejit
import tilejit
from tilejit import T
from tilejit.frameworks.torch import views as torch_views
torch_views._located.append(None)  # as if torch kept the bits elsewhere: ask torch
n = T.symbol("n")
for backend in ("cython", "dlpack", "ctypes"):
    k = tilejit.compile(tilejit.Program(name="f", source="void f(const float *A, int64_t n) {}",
        params=[T.Buffer((n,), "float32", name="A", const=True)]), execution_backend=backend)
    k(torch.ones(2))
    try:
        k(torch._neg_view(torch.ones(2)))
    except ValueError as exc:
        print(backend, exc)
"""


def test_without_the_bits_torch_is_asked(child_python):
    assert child_python("-c", ASKING).splitlines() == [
        f"{backend} f: argument 0 'A': {_LAZY} negative view (its negative bit is set); "
        f"materialise it with .resolve_neg()" for backend in ("cython", "dlpack", "ctypes")]
