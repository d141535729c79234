"""Calling compiled CPU kernels: out_idx forms, symbols and expressions, frameworks, scalars,
optional buffers, raw pointers and threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from kernels import VEC_ADD

import tilejit
from tilejit import T


def _vec_add_params():
    n = T.symbol("n")
    return [T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n,), "float32", name="B", const=True),
            T.Buffer((n,), "float32", name="C")]


@pytest.fixture(scope="module")
def vec_add(build):
    return build("vec_add", _vec_add_params(), VEC_ADD, out_idx=-1)


# --- out_idx forms ----------------------------------------------------------------------------


def test_out_idx_none_writes_into_passed_tensor(build):
    k = build("vec_add", _vec_add_params(), VEC_ADD, out_idx=None)
    assert k.out_idx == []
    a, b = torch.rand(100), torch.rand(100)
    c = torch.full((100,), -1.0)
    assert k(a, b, c) is None
    assert torch.equal(c, a + b)
    an, bn = a.numpy().copy(), b.numpy().copy()
    cn = np.zeros(100, np.float32)
    assert k(an, bn, cn) is None
    np.testing.assert_array_equal(cn, an + bn)


@pytest.mark.parametrize("out_idx", [2, -1, [2], [-1]])
def test_out_idx_int_and_negative_return_the_tensor(build, out_idx):
    k = build("vec_add", _vec_add_params(), VEC_ADD, out_idx=out_idx)
    assert k.out_idx == [2]
    a, b = torch.rand(37), torch.rand(37)
    c = k(a, b)
    assert isinstance(c, torch.Tensor)
    assert c.dtype == torch.float32 and c.shape == (37,)
    assert torch.equal(c, a + b)


def test_out_idx_kernels_share_one_library(build, vec_add):
    # out_idx changes only how the kernel is called, never the compiled binary.
    k = build("vec_add", _vec_add_params(), VEC_ADD, out_idx=None)
    assert k.library_path == vec_add.library_path


MIDDLE = """
void mid(const float *A, float *OUT, const float *B, int64_t n) {
  for (int64_t i = 0; i < n; ++i) OUT[i] = A[i] - B[i];
}
"""


def test_output_in_the_middle_position(build):
    n = T.symbol("n")
    k = build("mid", [T.Buffer((n,), "float32", name="A", const=True),
                      T.Buffer((n,), "float32", name="OUT"),
                      T.Buffer((n,), "float32", name="B", const=True)], MIDDLE, out_idx=1)
    assert k.c_prototype == "void mid(const float *A, float *OUT, const float *B, int64_t n)"
    a, b = torch.rand(9), torch.rand(9)
    assert torch.equal(k(a, b), a - b)
    # The caller's argument 1 is B: errors are numbered in the caller's terms.
    with pytest.raises(ValueError) as info:
        k(a, torch.rand(8))
    assert str(info.value) == ("mid: argument 1 'B': expected shape[0] == n (= 9, bound by "
                               "argument 0 'A'), got 8")
    with pytest.raises(TypeError, match=r"^mid: expected 2 arguments \(A, B\), got 3$"):
        k(a, b, b)


SHAPES = """
void shapes(const float *A, float *X, int64_t *Y, double *Z, int64_t n) {
  for (int64_t i = 0; i < n + 1; ++i) X[i] = i < n ? A[i] : -1.0f;
  for (int64_t j = 0; j < (n + 3) / 4; ++j) Y[j] = 100 + j;
  for (int64_t i = 0; i < 2 * n; ++i) Z[i] = 0.5 * (double)i;
}
"""


def _shapes_params():
    n = T.symbol("n")
    return [T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n + 1,), "float32", name="X"),
            T.Buffer((T.ceildiv(n, 4),), "int64", name="Y"),
            T.Buffer((n * 2,), "float64", name="Z")]


@pytest.fixture(scope="module")
def shapes_kernels(build):
    return {tuple(order): build("shapes", _shapes_params(), SHAPES, out_idx=order)
            for order in ([1, 2, 3], [3, 1, 2], [-1, -2, 1])}


def _expected_shapes(a):
    n = len(a)
    x = np.append(np.asarray(a, np.float32), np.float32(-1))
    y = 100 + np.arange(-(-n // 4), dtype=np.int64)
    z = 0.5 * np.arange(2 * n, dtype=np.float64)
    return {1: x, 2: y, 3: z}


@pytest.mark.parametrize("n", [0, 1, 4, 5, 17])
@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_output_shape_expressions(shapes_kernels, n, framework):
    k = shapes_kernels[(1, 2, 3)]
    a = np.arange(n, dtype=np.float32) * 3
    args = torch.from_numpy(a.copy()) if framework == "torch" else a
    x, y, z = k(args)
    kind = torch.Tensor if framework == "torch" else np.ndarray
    assert all(isinstance(t, kind) for t in (x, y, z))
    assert tuple(x.shape) == (n + 1,)
    assert tuple(y.shape) == (-(-n // 4),)
    assert tuple(z.shape) == (2 * n,)
    want = _expected_shapes(a)
    for index, got in zip((1, 2, 3), (x, y, z)):
        got = got.numpy() if framework == "torch" else got
        assert got.dtype == want[index].dtype
        np.testing.assert_array_equal(got, want[index])


@pytest.mark.parametrize("order", [(3, 1, 2), (-1, -2, 1)])
@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_several_outputs_return_a_list_in_out_idx_order(shapes_kernels, order, framework):
    k = shapes_kernels[order]
    assert k.out_idx == [i % 4 for i in order]
    a = np.arange(6, dtype=np.float32)
    result = k(torch.from_numpy(a) if framework == "torch" else a)
    assert isinstance(result, list) and len(result) == len(order)
    want = _expected_shapes(a)
    for index, got in zip(k.out_idx, result):
        got = got.numpy() if framework == "torch" else got
        assert got.dtype == want[index].dtype
        np.testing.assert_array_equal(got, want[index])


def _two_params():
    n = T.symbol("n")
    return [T.Buffer((n,), "float32", name="A"), T.Scalar("int32", name="s"),
            T.Buffer((n,), "float32", name="B")]


@pytest.mark.parametrize(("out_idx", "exc", "message"), [
    (3, ValueError, r"^two: out_idx 3 out of range for 3 parameters$"),
    (-4, ValueError, r"^two: out_idx -4 out of range for 3 parameters$"),
    ([2, 2], ValueError, r"^two: out_idx names parameter 2 twice$"),
    ([0, -3], ValueError, r"^two: out_idx names parameter 0 twice$"),
    (1, TypeError, r"^two: out_idx names parameter 1 's', which is a Scalar, not a T\.Buffer$"),
    ([-2], TypeError, r"names parameter 1 's', which is a Scalar"),
    ("2", TypeError, r"^two: out_idx entries must be ints, got '2'$"),
    ([1.0], TypeError, r"^two: out_idx entries must be ints, got 1\.0$"),
    (True, TypeError, r"out_idx entries must be ints, got True"),
    (1.0, TypeError, r"^two: out_idx must be an int or a list of ints, got float 1\.0$"),
    (np.int64(5), ValueError, r"^two: out_idx 5 out of range for 3 parameters$"),
])
def test_out_idx_errors_at_compile_time(out_idx, exc, message):
    # The source is never compiled: these are found while lowering the signature.
    program = tilejit.Program(name="two", params=_two_params(), source="#error not compiled\n")
    with pytest.raises(exc, match=message):
        tilejit.compile(program, out_idx=out_idx)


@pytest.mark.parametrize("flags, message", [
    (["-O2", 3], r"^two: compile_flags must be strings, got int 3 in \['-O2', 3\]$"),
    (3, r"^two: compile_flags must be a list of strings \(or one string\), got int 3$"),
])
def test_compile_flags_are_strings(flags, message):
    program = tilejit.Program(name="two", params=_two_params(), source="#error not compiled\n")
    with pytest.raises(TypeError, match=message):
        tilejit.compile(program, compile_flags=flags)


def test_too_many_parameters_are_refused_before_compiling():
    params = [T.Scalar("int32", name=f"p{i}") for i in range(65)]
    program = tilejit.Program(name="many", params=params, source="#error not compiled\n")
    with pytest.raises(ValueError, match=r"^many: 65 parameters \(workspaces included\), at "
                                         r"most 64$"):
        tilejit.compile(program)


def test_out_idx_takes_numpy_integers(build):
    n = T.symbol("n")
    k = build("copy_np_idx", [T.Buffer((n,), "float32", name="A", const=True),
                              T.Buffer((n,), "float32", name="B")],
              "void copy_np_idx(const float *A, float *B, int64_t n) {\n"
              "  for (int64_t i = 0; i < n; ++i) B[i] = A[i];\n}\n", out_idx=np.int64(-1))
    assert k(np.arange(3, dtype=np.float32)).tolist() == [0.0, 1.0, 2.0]


def test_optional_output_is_rejected_at_compile_time():
    n = T.symbol("n")
    program = tilejit.Program(name="opt_out", source="#error not compiled\n", params=[
        T.Buffer((n,), "float32", name="A"), T.Buffer((n,), "float32", name="B", optional=True)])
    with pytest.raises(ValueError, match=r"^opt_out: output 'B' cannot be optional$"):
        tilejit.compile(program, out_idx=1)


def test_output_symbol_bound_by_no_input_is_a_compile_time_error():
    n, m = T.symbol("n"), T.symbol("m")
    program = tilejit.Program(name="unbound", source="#error not compiled\n", params=[
        T.Buffer((n,), "float32", name="A"), T.Buffer((m,), "float32", name="B")])
    with pytest.raises(ValueError, match=r"^unbound: symbol 'm' is not bound by any input "
                                         r"\(used by output B\)"):
        tilejit.compile(program, out_idx=1)
    # A symbol used only inside an expression of an input binds nothing either.
    program = tilejit.Program(name="unbound", source="#error not compiled\n", params=[
        T.Buffer((n + 1,), "float32", name="A"), T.Buffer((n,), "float32", name="B")])
    with pytest.raises(ValueError, match=r"symbol 'n' is not bound by any input"):
        tilejit.compile(program, out_idx=1)


# --- symbols bound across tensors -------------------------------------------------------------

MATMUL = """
void matmul(const double *A, const double *B, double *C, int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += A[i * k + p] * B[p * n + j];
      C[i * n + j] = acc;
    }
}
"""


@pytest.fixture(scope="module")
def matmul(build):
    m, k, n = T.symbol("m"), T.symbol("k"), T.symbol("n")
    return build("matmul", [T.Buffer((m, k), "float64", name="A", const=True),
                            T.Buffer((k, n), "float64", name="B", const=True),
                            T.Buffer((m, n), "float64", name="C")], MATMUL, out_idx=-1)


def test_symbols_bound_across_several_tensors(matmul):
    assert matmul.c_prototype == ("void matmul(const double *A, const double *B, double *C, "
                                  "int64_t m, int64_t k, int64_t n)")
    assert [s.name for s in matmul.symbols] == ["m", "k", "n"]
    a = torch.rand(5, 7, dtype=torch.float64)
    b = torch.rand(7, 3, dtype=torch.float64)
    c = matmul(a, b)
    assert c.shape == (5, 3) and c.dtype == torch.float64
    torch.testing.assert_close(c, a @ b)
    cn = matmul(a.numpy(), b.numpy())
    assert isinstance(cn, np.ndarray) and cn.shape == (5, 3)
    np.testing.assert_allclose(cn, a.numpy() @ b.numpy())


def test_symbol_mismatch_names_both_arguments(matmul):
    a = torch.rand(5, 7, dtype=torch.float64)
    with pytest.raises(ValueError) as info:
        matmul(a, torch.rand(6, 3, dtype=torch.float64))
    assert str(info.value) == ("matmul: argument 1 'B': expected shape[0] == k (= 7, bound by "
                               "argument 0 'A'), got 6")


# --- frameworks -------------------------------------------------------------------------------


def test_torch_in_torch_out_numpy_in_numpy_out(vec_add):
    a, b = torch.rand(10), torch.rand(10)
    c = vec_add(a, b)
    assert type(c) is torch.Tensor and c.dtype == torch.float32 and c.device.type == "cpu"
    assert torch.equal(c, a + b)
    an, bn = a.numpy(), b.numpy()
    cn = vec_add(an, bn)
    assert type(cn) is np.ndarray and cn.dtype == np.float32 and cn.shape == (10,)
    np.testing.assert_array_equal(cn, an + bn)


def test_first_tensor_argument_chooses_the_output_framework(vec_add):
    a, b = torch.rand(4), torch.rand(4)
    assert type(vec_add(a.numpy(), b)) is np.ndarray
    assert type(vec_add(a, b.numpy())) is torch.Tensor
    np.testing.assert_array_equal(vec_add(a.numpy(), b), (a + b).numpy())


@pytest.mark.parametrize("framework", ["torch", "numpy"])
def test_zero_size_inputs_give_zero_size_outputs(vec_add, framework):
    a = torch.empty(0) if framework == "torch" else np.empty(0, np.float32)
    c = vec_add(a, a)
    assert isinstance(c, type(a))
    assert tuple(c.shape) == (0,)


def test_outputs_are_fresh_tensors(vec_add):
    a = torch.rand(8)
    c1, c2 = vec_add(a, a), vec_add(a, a)
    assert c1.data_ptr() != c2.data_ptr()
    assert c1.is_contiguous()


class _HandlelessStream:  # like torch.cpu.Stream: a stream object with no handle to give
    pass


@pytest.mark.parametrize(("stream", "exc", "message"), [
    ("0", TypeError, (r"^vec_add: stream= is the launch stream \(the kernel has no input "
                      r"named 'stream'\): expected an int handle, a torch.cuda.Stream or an "
                      r"object with __cuda_stream__, got str$")),
    (_HandlelessStream(), TypeError, r"got (tests\.)?test_call\._HandlelessStream$"),
    (True, TypeError, (r"^vec_add: stream= is the launch stream \(the kernel has no input "
                       r"named 'stream'\): expected a stream handle, got bool$")),
    (-1, ValueError, r"^vec_add: stream handle must be a non-negative int, got -1$"),
])
def test_bad_streams(vec_add, stream, exc, message):
    a = torch.ones(3)
    with pytest.raises(exc, match=message):
        vec_add(a, a, stream=stream)


def test_stream_none_or_zero_only_for_cpu(vec_add):
    a = torch.rand(3)
    assert torch.equal(vec_add(a, a, stream=None), a + a)
    assert torch.equal(vec_add(a, a, stream=0), a + a)
    with pytest.raises(ValueError, match=r"^vec_add: .*stream.* cpu kernel"):
        vec_add(a, a, stream=5)


# --- optional buffers -------------------------------------------------------------------------

OPTIONAL = """
void opt(const float *A, const float *B, int32_t *F, int64_t n) {
  F[0] = B == NULL;
  F[1] = (int32_t)n;
  F[2] = B == NULL ? -1 : (int32_t)B[0];
}
"""


@pytest.fixture(scope="module")
def optional_kernel(build):
    n = T.symbol("n")
    return build("opt", [T.Buffer((n,), "float32", name="A", const=True),
                         T.Buffer((n,), "float32", name="B", const=True, optional=True),
                         T.Buffer((3,), "int32", name="F")], OPTIONAL, out_idx=-1)


def test_optional_none_reaches_the_kernel_as_null(optional_kernel):
    assert optional_kernel(torch.zeros(3), None).tolist() == [1, 3, -1]
    assert optional_kernel(torch.zeros(3), torch.full((3,), 7.0)).tolist() == [0, 3, 7]
    out = optional_kernel(np.zeros(2, np.float32), None)
    assert type(out) is np.ndarray and out.tolist() == [1, 2, -1]


def test_trailing_optional_buffers_may_be_left_out(optional_kernel):
    # As a Python function's trailing `B=None`: left out, positionally or by name.
    assert optional_kernel(torch.zeros(3)).tolist() == [1, 3, -1]
    assert optional_kernel(A=torch.zeros(3)).tolist() == [1, 3, -1]
    assert optional_kernel(np.zeros(2, np.float32)).tolist() == [1, 2, -1]
    assert optional_kernel(torch.zeros(3), B=torch.full((3,), 7.0)).tolist() == [0, 3, 7]
    for args in [(), (torch.zeros(3),) * 3]:
        with pytest.raises(TypeError, match=rf"^opt: expected 1 to 2 arguments \(A, B=None\), "
                                            rf"got {len(args)}$"):
            optional_kernel(*args)


def test_an_optional_buffer_before_a_required_input_is_left_out_by_name(build):
    n = T.symbol("n")
    k = build("mid_opt", [T.Buffer((n,), "float32", name="A", const=True),
                          T.Buffer((n,), "float32", name="B", const=True, optional=True),
                          T.Scalar("float32", name="s"), T.Buffer((n,), "float32", name="O")],
              "void mid_opt(const float *A, const float *B, float s, float *O, int64_t n) {\n"
              "  for (int64_t i = 0; i < n; ++i) O[i] = A[i] * s + (B ? B[i] : 100.0f);\n}\n",
              out_idx=-1)
    assert k(torch.ones(2), s=3.0).tolist() == [103, 103]
    assert k(torch.ones(2), None, 3.0).tolist() == [103, 103]
    # Only trailing ones may be left out positionally: B is not.
    with pytest.raises(TypeError, match=r"^mid_opt: expected 3 arguments \(A, B, s\), got 2$"):
        k(torch.ones(2), 3.0)
    with pytest.raises(TypeError, match=r"^mid_opt\(\) missing 1 argument: 's'$"):
        k(torch.ones(2), B=None)


def test_optional_buffer_is_still_validated(optional_kernel):
    with pytest.raises(ValueError, match=r"^opt: argument 1 'B': expected shape\[0\] == n "
                                         r"\(= 3, bound by argument 0 'A'\), got 4$"):
        optional_kernel(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"^opt: argument 1 'B': expected dtype float32, "
                                         r"got int32$"):
        optional_kernel(torch.zeros(3), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^opt: argument 0 'A': expected a tensor .*got None "
                                        r"\(the parameter is not optional\)$"):
        optional_kernel(None, torch.zeros(3))


# --- scalars ----------------------------------------------------------------------------------

SCALARS = """
void scal(int32_t a, int64_t b, float c, double d, bool e, int8_t f, uint8_t g, double *O) {
  O[0] = a; O[1] = (double)b; O[2] = c; O[3] = d; O[4] = e; O[5] = f; O[6] = g;
}
"""


@pytest.fixture(scope="module")
def scalars(build):
    return build("scal", [T.Scalar("int32", name="a"), T.Scalar("int64", name="b"),
                          T.Scalar("float32", name="c"), T.Scalar("float64", name="d"),
                          T.Scalar("bool", name="e"), T.Scalar("int8", name="f"),
                          T.Scalar("uint8", name="g"), T.Buffer((7,), "float64", name="O")],
                 SCALARS, out_idx=-1)


def test_scalar_prototype(scalars):
    assert scalars.c_prototype == ("void scal(int32_t a, int64_t b, float c, double d, bool e, "
                                   "int8_t f, uint8_t g, double *O)")


def test_scalars_reach_the_kernel(scalars):
    # No tensor argument: the output's framework is not specified; DLPack reads it.
    out = np.from_dlpack(scalars(-7, 2**40 + 3, 1.5, -2.25, True, -128, 255))
    assert out.dtype == np.float64
    assert out.tolist() == [-7, 2**40 + 3, 1.5, -2.25, 1, -128, 255]
    out = np.from_dlpack(scalars(2**31 - 1, -2**63, 0.1, 1e300, False, 127, 0))
    assert out.tolist() == [2**31 - 1, float(-2**63), float(np.float32(0.1)), 1e300, 0, 127, 0]
    assert np.from_dlpack(scalars(-2**31, 2**63 - 1, 0.0, 0.0, False, 0, 0))[0] == -2**31


def test_ints_of_every_size_and_sign_reach_the_kernel_whole(scalars):
    # One 30-bit digit or more, cached small ints and ints made by arithmetic: what
    # the core reads in place (exact ints of one digit) or asks the interpreter for.
    big = 2**40
    values = [0, 1, -1, 5, -5, 256, -257, 2**30 - 1, -(2**30 - 1), 2**30, -2**30, 2**30 + 1,
              (big + 7) - big, -((big + 7) - big), big - big, 2**31 - 1, -2**31]
    for a in values:
        for b in (a, a * 3, 2**52 + a, -2**52 - a):
            out = np.from_dlpack(scalars(a, b, 0.0, 0.0, False, 0, 0))
            assert out[:2].tolist() == [a, b], (a, b)


def test_float_scalars_take_ints_beyond_64_bits_as_float_does(scalars):
    # float(2**70) and float(-3**100): a double holds them (rounded), as Python's float does.
    out = np.from_dlpack(scalars(1, 2, 2**70, -3**100, True, 0, 0))
    assert out.tolist()[2:4] == [float(np.float32(2**70)), float(-3**100)]
    assert np.from_dlpack(scalars(1, 2, 0.0, 2**1023, True, 0, 0))[3] == 2.0**1023


def test_float32_scalars_take_inf_nan_and_their_largest_values(scalars):
    # Only a finite value that float32 would round to inf is refused (see test_bad_scalars).
    big = float(np.finfo(np.float32).max)
    out = np.from_dlpack(scalars(0, 0, float("inf"), 0.0, True, 0, 0))
    assert out[2] == np.inf
    assert np.isnan(np.from_dlpack(scalars(0, 0, float("nan"), 0.0, True, 0, 0))[2])
    assert np.from_dlpack(scalars(0, 0, -big, 0.0, True, 0, 0))[2] == -big


def test_int_given_for_float_is_accepted(scalars):
    out = np.from_dlpack(scalars(1, 2, 3, -4, True, 0, 0))
    assert out.tolist()[:4] == [1, 2, 3.0, -4.0]


def test_numpy_scalars_are_accepted(scalars):
    out = np.from_dlpack(scalars(np.int32(5), np.int64(6), np.float32(1.5), np.float64(2.5),
                                 np.bool_(True), np.int8(-3), np.uint8(4)))
    assert out.tolist() == [5, 6, 1.5, 2.5, 1, -3, 4]


@pytest.mark.parametrize(("args", "exc", "message"), [
    ((1.0, 2, 3.0, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 0 'a': expected an int scalar \(int32\), got float$"),
    ((1, 2.5, 3.0, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 1 'b': expected an int scalar \(int64\), got float$"),
    ((True, 2, 3.0, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 0 'a': expected an int scalar \(int32\), got bool$"),
    ((1, 2, 3.0, 4.0, 1, 1, 1), TypeError,
     r"^scal: argument 4 'e': expected a bool scalar \(bool\), got int$"),
    ((1, 2, True, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 2 'c': expected a float or int scalar \(float32\), got bool$"),
    ((1, 2, 3.0, None, True, 1, 1), TypeError,
     r"^scal: argument 3 'd': expected a float or int scalar \(float64\), got None$"),
    ((1, 2, 3.0, 4.0, True, 1, "1"), TypeError,
     r"^scal: argument 6 'g': expected an int scalar \(uint8\), got str$"),
    ((torch.zeros(1), 2, 3.0, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 0 'a': expected an int scalar \(int32\), got a tensor$"),
    ((1, 2, 3.0, 4.0, True, 300, 1), ValueError,
     r"^scal: argument 5 'f': value 300 is out of range for int8$"),
    ((1, 2, 3.0, 4.0, True, -129, 1), ValueError, r"value -129 is out of range for int8$"),
    ((2**31, 2, 3.0, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 0 'a': value 2147483648 is out of range for int32$"),
    ((1, 2, 3.0, 4.0, True, 1, -1), ValueError,
     r"^scal: argument 6 'g': value -1 is out of range for uint8$"),
    ((1, 2, 3.0, 4.0, True, 1, 256), ValueError, r"value 256 is out of range for uint8$"),
    ((1, 2**70, 3.0, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 1 'b': value does not fit in 64 bits, out of range for int64$"),
    ((1, 2**63, 3.0, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 1 'b': value 9223372036854775808 is out of range for int64$"),
    ((2**64 - 1, 2, 3.0, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 0 'a': value 18446744073709551615 is out of range for int32$"),
    ((1, 2, 3.0, 4.0, True, 1, 2**64), ValueError,
     r"^scal: argument 6 'g': value does not fit in 64 bits, out of range for uint8$"),
    ((1, 2, 1e300, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 2 'c': value 1e\+300 is out of range for float32 \(it would round to inf"),
    ((1, 2, np.float64(-3.5e38), 4.0, True, 1, 1), ValueError,
     r"^scal: argument 2 'c': value -3.5e\+38 is out of range for float32"),
    # An int beyond 64 bits is a float's value as a double has it, up to a double's range.
    ((1, 2, 2**200, 4.0, True, 1, 1), ValueError,
     r"^scal: argument 2 'c': value 1.6069380442589903e\+60 is out of range for float32"),
    ((1, 2, 3.0, 2**1024, True, 1, 1), ValueError,
     r"^scal: argument 3 'd': value is an int too large for float64$"),
    ((1, 2, -(2**2000), 4.0, True, 1, 1), ValueError,
     r"^scal: argument 2 'c': value is an int too large for float32$"),
    # NumPy scalars are named by their type.
    ((np.float64(1.0), 2, 3.0, 4.0, True, 1, 1), TypeError,
     r"^scal: argument 0 'a': expected an int scalar \(int32\), got numpy.float64$"),
    ((1, 2, 3.0, 4.0, np.int64(1), 1, 1), TypeError,
     r"^scal: argument 4 'e': expected a bool scalar \(bool\), got numpy.int64$"),
    ((1, 2, 3.0, 4.0, True, np.bool_(True), 1), TypeError,
     r"^scal: argument 5 'f': expected an int scalar \(int8\), got numpy.bool_?$"),
])
def test_bad_scalars(scalars, args, exc, message):
    with pytest.raises(exc, match=message):
        scalars(*args)


@pytest.mark.skipif(np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
                    reason="this platform's long double is a double: nothing lies beyond")
def test_a_finite_float_beyond_a_doubles_range_is_refused(scalars):
    # numpy.longdouble holds finite values a double reads as inf: refused, not taken as inf.
    for column, dtype in ((2, "float32"), (3, "float64")):
        args = [1, 2, 3.0, 4.0, True, 1, 1]
        args[column] = np.longdouble("-1e4000")
        with pytest.raises(ValueError, match=f"^scal: argument {column} '.': value is finite but "
                                             f"beyond a double's range, out of range for {dtype}$"):
            scalars(*args)
        args[column] = np.longdouble("inf")  # an infinity is a float value as it is
        scalars(*args)


WIDE = """
void wide(uint64_t u, double x, uint64_t *O) { O[0] = u; O[1] = (uint64_t)(x / 2); }
"""


@pytest.fixture(scope="module")
def wide(build):
    return build("wide", [T.Scalar("uint64", name="u"), T.Scalar("float64", name="x"),
                          T.Buffer((2,), "uint64", name="O")], WIDE, out_idx=-1)


@pytest.mark.parametrize("value", [2**63, 2**64 - 1, np.uint64(2**64 - 1), 2**63 - 1, 0])
def test_uint64_scalars_take_their_whole_range(wide, value):
    # Python ints of 2**63 and more fit a uint64 parameter and reach the kernel whole; an
    # int parameter given one names the value, and a float parameter takes it as a float.
    out = np.from_dlpack(wide(value, 2.0))
    assert out.tolist() == [int(value), 1]
    out = np.from_dlpack(wide(0, value))
    assert out.tolist() == [0, int(float(value) / 2)]


def test_uint64_beyond_the_range_is_refused(wide):
    with pytest.raises(ValueError, match=r"^wide: argument 0 'u': value does not fit in 64 "
                                         r"bits, out of range for uint64$"):
        wide(2**64, 1.0)
    with pytest.raises(ValueError, match=r"^wide: argument 0 'u': value -1 is out of range "
                                         r"for uint64$"):
        wide(-1, 1.0)


# --- inputs by name ---------------------------------------------------------------------------

AXPY = """
void axpy(const float *X, float *Y, float a, int32_t k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = a * X[i] + (float)k;
}
"""


@pytest.fixture(scope="module")
def axpy(build):
    n = T.symbol("n")
    return build("axpy", [T.Buffer((n,), "float32", name="X", const=True),
                          T.Buffer((n,), "float32", name="Y"), T.Scalar("float32", name="a"),
                          T.Scalar("int32", name="k")], AXPY, out_idx=1)


@pytest.mark.parametrize("call", [
    lambda k, x: k(x, 2.0, 1),
    lambda k, x: k(x, 2.0, k=1),
    lambda k, x: k(x, k=1, a=2.0),
    lambda k, x: k(X=x, a=2.0, k=1, stream=None),
    lambda k, x: k(x, a=2.0, k=1, stream=0),
], ids=["positional", "last-by-name", "any-order", "all-by-name", "with-stream"])
def test_inputs_may_be_given_by_name(axpy, call):
    x = torch.arange(4, dtype=torch.float32)
    assert call(axpy, x).tolist() == [1.0, 3.0, 5.0, 7.0]


@pytest.mark.parametrize(("call", "message"), [
    (lambda k, x: k(x, 2.0), r"^axpy: expected 3 arguments \(X, a, k\), got 2$"),
    (lambda k, x: k(x, a=2.0), r"^axpy\(\) missing 1 argument: 'k'$"),
    (lambda k, x: k(a=2.0), r"^axpy\(\) missing 2 arguments: 'X', 'k'$"),
    (lambda k, x: k(x, 2.0, 1, a=2.0), r"^axpy\(\) got multiple values for argument 'a'$"),
    (lambda k, x: k(x, 2.0, 1, alpha=2.0),
     r"^axpy\(\) got an unexpected keyword argument 'alpha'$"),
    (lambda k, x: k(x, 2.0, 1, Y=x),
     r"^axpy\(\) got an unexpected keyword argument 'Y' \(an output: the call allocates it\)$"),
], ids=["too-few", "missing", "missing-two", "twice", "unknown", "output"])
def test_inputs_by_name_refused(axpy, call, message):
    with pytest.raises(TypeError, match=message):
        call(axpy, torch.zeros(4))


# --- raw pointers -----------------------------------------------------------------------------

POINTER = """
void bump(float *p, int64_t count) {
  if (p == NULL) return;
  for (int64_t i = 0; i < count; ++i) p[i] += 1.0f;
}
"""


@pytest.fixture(scope="module")
def bump(build):
    return build("bump", [T.Pointer("float32", name="p"), T.Scalar("int64", name="count")],
                 POINTER)


def test_pointer_param_takes_a_tensor(bump):
    assert bump.c_prototype == "void bump(float *p, int64_t count)"
    a = torch.zeros(6)
    assert bump(a, 4) is None
    assert a.tolist() == [1, 1, 1, 1, 0, 0]
    an = np.zeros(5, np.float32)
    bump(an[2:], 2)  # a view: the pointer is that of its first element
    assert an.tolist() == [0, 0, 1, 1, 0]
    bump(torch.zeros(2, 3)[1], 3)  # any shape, unchecked


def test_pointer_param_takes_an_int_address_or_none(bump):
    a = torch.zeros(4)
    bump(a.data_ptr(), 2)
    assert a.tolist() == [1, 1, 0, 0]
    an = np.zeros(3, np.float32)
    bump(an.ctypes.data, 3)
    assert an.tolist() == [1, 1, 1]
    bump(None, 3)


@pytest.mark.parametrize(("value", "exc", "message"), [
    ("p", TypeError, (r"^bump: argument 0 'p': expected a pointer \(tensor, tilejit\.Pointer "
                      r"or int address\), got str$")),
    (1.5, TypeError, r"^bump: argument 0 'p': expected a pointer .*got float$"),
    (True, TypeError, r"^bump: argument 0 'p': expected a pointer .*got bool$"),
    (-8, ValueError, r"^bump: argument 0 'p': expected an address .*got a negative int$"),
    (2**64 + 8, ValueError, r"^bump: argument 0 'p': expected an address .*does not fit"),
    (2**63 + 8, ValueError, (r"^bump: argument 0 'p': expected an address \(an int in \[0, "
                             r"2\*\*63\)\), got an int of 2\*\*63 or more$")),
])
def test_pointer_param_rejects_non_pointers(bump, value, exc, message):
    with pytest.raises(exc, match=message):
        bump(value, 0)


def test_pointer_alignment_is_checked(build):
    k = build("ptr_align", [T.Pointer("float32", name="p", align=16)],
              "void ptr_align(float *p) { (void)p; }")
    k(16 * 1024)
    k(None)
    with pytest.raises(ValueError, match=r"^ptr_align: argument 0 'p': expected the data pointer "
                                         r"aligned to 16 bytes, got address 0x4004 "
                                         r"\(misaligned by 4\)$"):
        k(0x4004)
    base = torch.zeros(64)
    offset = next(i for i in range(1, 4) if (base.data_ptr() + 4 * i) % 16)
    with pytest.raises(ValueError, match="aligned to 16 bytes"):
        k(base[offset:])


def test_read_only_array_for_non_const_pointer(bump):
    a = np.zeros(4, np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match=r"^bump: argument 0 'p': the tensor is read-only"):
        bump(a, 4)
    assert a.tolist() == [0, 0, 0, 0]


def test_const_pointer_takes_a_read_only_array():
    prog = tilejit.Program("first", [T.Pointer("float32", name="p", const=True),
                                     T.Buffer((1,), "float32", name="O")],
                           "void first(const float *p, float *O) { O[0] = p[2]; }")
    kernel = tilejit.compile(prog, out_idx=-1)
    assert kernel.c_prototype == "void first(const float *p, float *O)"
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    assert kernel(a).tolist() == [2.0]


# --- threads ----------------------------------------------------------------------------------


def test_the_gil_is_released_while_the_kernel_runs(build):
    nap = build("nap", [T.Scalar("int64", name="us")],
                "#include <unistd.h>\nvoid nap(int64_t us) { usleep((useconds_t)us); }\n")
    started, done = threading.Event(), []

    def call():
        started.set()
        nap(400_000)
        done.append(time.perf_counter())

    worker = threading.Thread(target=call)
    worker.start()
    started.wait()
    time.sleep(0.05)  # let the worker enter the kernel
    # Plain Python on this thread makes progress while the other one is in the kernel.
    spins, deadline = 0, time.perf_counter() + 0.1
    while time.perf_counter() < deadline:
        spins += 1
    finished_spinning = time.perf_counter()
    worker.join()
    assert spins > 1000
    assert finished_spinning < done[0] - 0.1


def test_many_threads_call_one_kernel(vec_add):
    errors = []
    barrier = threading.Barrier(4)

    def work(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            a = torch.rand(64 + seed, generator=gen)
            b = torch.rand(64 + seed, generator=gen)
            an, bn = a.numpy().copy(), b.numpy().copy()
            want = a + b
            barrier.wait()
            for i in range(2000):
                if i % 2:
                    got = vec_add(a, b)
                    if not torch.equal(got, want):
                        raise AssertionError(f"thread {seed}: wrong result at call {i}")
                else:
                    got = vec_add(an, bn)
                    if not np.array_equal(got, want.numpy()):
                        raise AssertionError(f"thread {seed}: wrong result at call {i}")
                if i % 500 == 0:
                    # Errors are per thread too: a failing call must not disturb the others.
                    with pytest.raises(ValueError, match=f"got {63 + seed}$"):
                        vec_add(a, b[1:])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# --- JITKernel attributes ---------------------------------------------------------------------


def test_kernel_attributes(vec_add, backend):
    import os

    assert vec_add.target == "cpu"
    assert vec_add.execution_backend == backend
    assert vec_add.out_idx == [2]
    assert vec_add.name == "vec_add"
    assert [p.name for p in vec_add.params] == ["A", "B", "C"]
    assert vec_add.get_kernel_source() == VEC_ADD
    host = vec_add.get_host_source()
    assert VEC_ADD in host and vec_add.c_prototype + ";" in host
    assert os.path.isfile(vec_add.library_path)
    other = vec_add.with_backend("cython")
    assert other.library_path == vec_add.library_path
    a = torch.rand(3)
    assert torch.equal(other(a, a), a + a)
    with pytest.raises(ValueError, match="unknown execution_backend 'nope'"):
        vec_add.with_backend("nope")


def test_wrapper_kernels_are_called_through_vectorcall(vec_add, backend):
    # A fast path: the wrapper's kernels take calls without an argument tuple
    # (Py_TPFLAGS_HAVE_VECTORCALL, set by hand on the backend class: before 3.12 heap
    # subclasses do not inherit it); off with TILEJIT_FAST_PATHS=0.
    from tilejit.runtime.fast_paths import FAST_PATHS

    have_vectorcall = 1 << 11
    assert bool(type(vec_add).__flags__ & have_vectorcall) == (backend != "ctypes"
                                                                and FAST_PATHS)
    a = torch.ones(3)
    assert vec_add(a, a, stream=None).tolist() == [2.0] * 3
    # __call__ and type(k).__call__ make the same call.
    assert vec_add.__call__(a, a).tolist() == [2.0] * 3
    assert type(vec_add).__call__(vec_add, a, a).tolist() == [2.0] * 3
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'streams'"):
        vec_add(a, a, streams=0)
