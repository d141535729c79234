"""Kernels written the way people write them (issue: kernels as written): definitions
ABI-compatible with the signature are accepted whatever their spelling, mismatches are
refused naming the parameter, symbol widths, kernel_args order, C++ and status returns,
prebuilt shared libraries. Every call on every backend."""

from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")

import tilejit
from tilejit import T

BACKENDS = ["cython", "dlpack", "ctypes"]


def _scale_params(symbol_dtype="int64", const=True):
    n = T.symbol("n", dtype=symbol_dtype)
    return [T.Buffer((n,), "float32", name="x", const=const), T.Buffer((n,), "float32", name="y")]


@pytest.mark.parametrize("signature", [
    "void scale(const float *x, float *y, int64_t n)",
    "void scale(const float * __restrict__ x, float * restrict y, long long n)",
    "void scale(float const *x, float y[], long n)",
    "static inline void scale(const float *x, volatile float *y, signed long int n)",
    "void scale(const real *x, real *y, idx n)",  # the source's own typedefs
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_accepted_spellings_run(signature, backend):
    source = ("typedef float real;\ntypedef int64_t idx;\n" + signature +
              " {\n  for (long i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n")
    k = tilejit.compile(tilejit.Program("scale", _scale_params(), source), out_idx=-1,
                        execution_backend=backend)
    x = torch.arange(5, dtype=torch.float32)
    assert torch.equal(k(x), 2 * x)


@pytest.mark.parametrize("definition, message", [
    ("void scale(const float *x, float *y, int n)",
     ("scale: parameter 2 'n' is declared int64_t n, the definition has 'int n': 32-bit integer, "
     "not int64 (declare T.symbol('n', dtype='int32') for a 32-bit symbol)")),
    ("void scale(const double *x, float *y, int64_t n)",
     ("scale: parameter 0 'x' is declared const float *x, the definition has 'const double *x': "
     "a pointer to 64-bit float, not to float32")),
    ("void scale(float *x, float *y, int64_t n)",
     ("scale: parameter 0 'x' is declared const float *x, the definition has 'float *x': the "
     "parameter is declared const=True")),
    ("void scale(const float *x, float *y)",
     ("scale: the definition of scale takes 2 parameters, the signature declares 3: "
     "void scale(const float *x, float *y, int64_t n)")),
    ("void scale(const float *x, float y, int64_t n)",
     ("scale: parameter 1 'y' is declared float *y, the definition has 'float y': expected a "
     "pointer")),
    ("void scale(const float *x, float *y, int64_t *n)",
     ("scale: parameter 2 'n' is declared int64_t n, the definition has 'int64_t *n': expected "
     "a int64 value, found a pointer")),
    ("float scale(const float *x, float *y, int64_t n)",
     "scale: the definition of scale returns 'float': a kernel returns void, or an int status"),
])
def test_mismatches_are_refused_naming_the_parameter(definition, message):
    source = definition + " { (void)x; (void)y; (void)n; return 0; }\n"
    with pytest.raises(tilejit.CompileError) as info:
        tilejit.compile(tilejit.Program("scale", _scale_params(), source), out_idx=-1)
    assert str(info.value).startswith(message)


_SCALE = ("void scale(const float *x, float *y, int64_t n) {\n"
          "  for (long i = 0; i < n; ++i) y[i] = 2 * x[i];\n}\n")


@pytest.mark.parametrize("language, source", [
    ("c", "#if 0  /* the old version */\nvoid scale(float *x, int n) {}\n#endif\n" + _SCALE),
    ("c", "#if 1\n" + _SCALE + "#else\nvoid scale(double *x) {}\n#endif\n"),
    ("c", "#ifdef TJ_TEST_OLD\nvoid scale(double *x) {}\n#else\n" + _SCALE + "#endif\n"),
    ("c++", "namespace helpers { inline float scale(float v) { return 2 * v; } }\n" + _SCALE),
    ("c++", "struct S { void scale(int) {} };\nvoid S2(int);\n" + _SCALE),
    ("c++", "static inline float scale(float v) { return 2 * v; }\n" + _SCALE),
    ("c++", 'extern "C" {\n' + _SCALE + "}\n"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_definition_checked_is_the_one_the_compiler_sees(language, source, backend):
    # Another function of the kernel's name in a dropped #if group, another #ifdef branch,
    # a namespace, a class, or a C++ overload of another arity is not the kernel's.
    k = tilejit.compile(tilejit.Program("scale", _scale_params(), source, language=language),
                        out_idx=-1, execution_backend=backend)
    x = torch.arange(5, dtype=torch.float32)
    assert torch.equal(k(x), 2 * x)


def test_a_mismatch_after_a_dropped_group_is_still_refused():
    source = ("#if 0\nvoid scale(const float *x, float *y, int64_t n) {}\n#endif\n"
              "void scale(const float *x, float *y, int n) { (void)x; (void)y; (void)n; }\n")
    with pytest.raises(tilejit.CompileError, match="parameter 2 'n' is declared int64_t n, "
                       "the definition has 'int n'"):
        tilejit.compile(tilejit.Program("scale", _scale_params(), source), out_idx=-1)


def test_readonly_params_accept_a_proven_non_const_pointer():
    source = "void scale(float *x, float *y, int64_t n) { for (long i = 0; i < n; ++i) " \
             "y[i] = x[i]; }\n"
    k = tilejit.compile(tilejit.Program("scale", _scale_params(), source,
                                        readonly_params=["x"]), out_idx=-1)
    x = torch.ones(3)
    assert torch.equal(k(x), x)


@pytest.mark.parametrize(("item", "index"), [("y", 1), (0, 0), (-1, 1)])
def test_readonly_params_are_kept_as_indices(item, index):
    source = "void scale(float *x, float *y, int64_t n) { }\n"
    program = tilejit.Program("scale", _scale_params(), source, readonly_params=[item])
    assert program.readonly_params == (index,)


@pytest.mark.parametrize("item", ["z", 2, -3, True, 1.0])
def test_readonly_params_naming_no_parameter_are_refused(item):
    source = "void scale(float *x, float *y, int64_t n) { }\n"
    with pytest.raises(ValueError, match=rf"^scale: readonly_params names {item!r}, which is "
                                         r"no parameter \(parameters: x, y\)$"):
        tilejit.Program("scale", _scale_params(), source, readonly_params=[item])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int32_symbols_reach_an_int_and_overflow_is_a_value_error(backend):
    source = "void scale(const float *x, float *y, int n) { for (int i = 0; i < n; ++i) " \
             "y[i] = 2 * x[i]; }\n"
    k = tilejit.compile(tilejit.Program("scale", _scale_params("int32"), source), out_idx=-1,
                        execution_backend=backend)
    assert k.c_prototype == "void scale(const float *x, float *y, int32_t n)"
    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(k(x), 2 * x)
    n, s = T.symbol("n", dtype="int32"), T.symbol("s")
    strided = tilejit.compile(tilejit.Program(
        "strided", [T.Buffer((n,), "float32", strides=(s,), name="x", const=True)],
        "void strided(const float *x, int n, int64_t s) { (void)x; (void)n; (void)s; }\n"),
        execution_backend=backend)
    big = torch.ones(1).expand(2**31)  # one element of memory behind 2**31 elements
    with pytest.raises(ValueError, match=r"strided: argument 0 'x': symbol 'n' = 2147483648 "
                                         r"does not fit its type int32"):
        strided(big)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_args_reorder_omit_and_pass_expressions(backend):
    m, n = T.symbol("m", dtype="int32"), T.symbol("n")
    A = T.Buffer((m, n), "float32", name="A", const=True)
    unused = T.Buffer((m,), "float32", name="unused", const=True)
    B = T.Buffer((m, n), "float32", name="B")
    source = r"""
    void k(int64_t total, float *B, const float *A, int m) {
      for (int64_t i = 0; i < total; ++i) B[i] = A[i] + m;
    }
    """
    k = tilejit.compile(tilejit.Program("k", [A, unused, B], source,
                                        kernel_args=[m * n, "B", A, m]),
                        out_idx=-1, execution_backend=backend)
    assert k.c_prototype == "void k(int64_t arg0, float *B, const float *A, int32_t m)"
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(k(a, torch.zeros(2)), a + 2)
    with pytest.raises(ValueError, match="argument 1 'unused'"):
        k(a, torch.zeros(3))  # still validated: binds m


def test_kernel_args_errors():
    n = T.symbol("n")
    A = T.Buffer((n,), "float32", name="A")
    with pytest.raises(ValueError, match=r"k: kernel_args\[0\] = 'B' names no parameter"):
        tilejit.compile(tilejit.Program("k", [A], "void k(void) {}", kernel_args=["B"]))
    with pytest.raises(ValueError, match="k: kernel_args passes parameter 'A' twice"):
        tilejit.compile(tilejit.Program("k", [A], "void k(void) {}", kernel_args=[A, "A"]))
    with pytest.raises(ValueError, match=r"uses symbol 'm', which no parameter"):
        tilejit.compile(tilejit.Program("k", [A], "void k(void) {}",
                                        kernel_args=[T.symbol("m")]))


CXX_SOURCE = r"""
#include <cstdint>
template <typename T> static T twice(T v) { return v + v; }
extern "C" int32_t scale(const float *__restrict__ x, float *__restrict__ y, int64_t n) {
  if (n > 100) return 7;
  for (int64_t i = 0; i < n; ++i) y[i] = twice(x[i]);
  return 0;
}
"""


@pytest.mark.parametrize("how", [{"language": "c++"}, {"flags": "-std=c++17"},
                                 {"flags": "-x c++"}])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cxx_kernels_with_a_status(how, backend):
    program = tilejit.Program("scale", _scale_params(), CXX_SOURCE,
                              language=how.get("language"))
    k = tilejit.compile(program, out_idx=-1, execution_backend=backend,
                        compile_flags=how.get("flags"))
    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(k(x), 2 * x)
    with pytest.raises(RuntimeError, match=r"scale: the kernel returned status 7 \(0 is "
                                           r"success\)"):
        k(torch.zeros(101))


@pytest.mark.parametrize("backend", BACKENDS)
def test_prebuilt_shared_library(tmp_path, backend):
    source = tmp_path / "axpy.c"
    source.write_text("int axpy(const float *x, float *y, float a, int n) {\n"
                      "  if (a < 0) return 3;\n"
                      "  for (int i = 0; i < n; ++i) y[i] += a * x[i];\n  return 0;\n}\n")
    library = tmp_path / "libaxpy.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(source), "-o", str(library)],
                   check=True)
    n = T.symbol("n", dtype="int32")
    params = [T.Buffer((n,), "float32", name="x", const=True),
              T.Buffer((n,), "float32", name="y"), T.Scalar("float32", name="a")]
    for binary in (library, library.read_bytes()):
        k = tilejit.compile(tilejit.Program("axpy", params, binary=binary, returns="int32"),
                            execution_backend=backend)
        x, y = torch.ones(4), torch.arange(4, dtype=torch.float32)
        k(x, y, 0.5)
        assert torch.equal(y, torch.arange(4) + 0.5)
        with pytest.raises(RuntimeError, match="axpy: the kernel returned status 3"):
            k(x, y, -1.0)
        with pytest.raises(TypeError, match="axpy: argument 2 'a': expected a float"):
            k(x, y, "no")


def test_prebuilt_errors(tmp_path):
    params = [T.Buffer((4,), "float32", name="x")]
    with pytest.raises(ValueError, match="k: binary= for target='cpu' must be a shared library"):
        tilejit.compile(tilejit.Program("k", params, binary=b"not a library"))
    with pytest.raises(FileNotFoundError, match="k: cannot read binary="):
        tilejit.compile(tilejit.Program("k", params, binary=tmp_path / "missing.so"))
    with pytest.raises(TypeError, match="give source= or binary=, not both"):
        tilejit.Program("k", params, "void k(float *x) {}", binary=b"x")


class GeneratedName(str):
    """A code generator's own string type."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_names_may_be_str_subclasses(backend):
    source = "void scale(const float *x, float *y, int64_t n) { for (long i = 0; i < n; ++i) " \
             "y[i] = x[i]; }\n"
    program = tilejit.Program(GeneratedName("scale"), _scale_params(), source)
    assert type(program.name) is str
    k = tilejit.compile(program, out_idx=-1, execution_backend=backend)
    x = torch.ones(2)
    assert torch.equal(k(x), x)
