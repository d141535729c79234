"""Kernels called with JAX arrays (tilejit/frameworks/jax.py, core/src/xla.c): XLA FFI
custom calls, inside ``jax.jit`` and outside, on every backend, checked at trace time with
the messages of a direct call."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install 'tilejit[jax]')")
jnp = pytest.importorskip("jax.numpy")

from kernels import VEC_ADD

from tilejit import T

n = T.symbol("n")

AXPY = """
void jx_axpy(const float *X, float *Y, float a, int64_t k, bool flag, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = a * X[i] + Y[i] + (flag ? (float)k : 0.0f);
}
"""
SPLIT = """
void jx_split(const float *X, float *S, float *D, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { S[i] = X[i] + 1; D[i] = 2 * X[i]; }
}
"""
SQUARE = """
void jx_square(const float *X, float *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * X[i];
}
"""
REPEAT = """
void jx_repeat(const float *X, float *Y, int64_t r, int64_t n) {
  for (int64_t j = 0; j < r; ++j) for (int64_t i = 0; i < n; ++i) Y[j * n + i] = X[i];
}
"""


@pytest.fixture(scope="module")
def k(build):
    r = T.Scalar("int64", name="r")
    vec = [T.Buffer((n,), "float32", name="A", const=True),
           T.Buffer((n,), "float32", name="B", const=True), T.Buffer((n,), "float32", name="C")]
    return {
        "add": build("vec_add", vec, VEC_ADD, out_idx=-1),
        "axpy": build("jx_axpy", [T.Buffer((n,), "float32", name="X", const=True),
                                  T.Buffer((n,), "float32", name="Y"),
                                  T.Scalar("float32", name="a"), T.Scalar("int64", name="k"),
                                  T.Scalar("bool", name="flag")], AXPY),
        "split": build("jx_split", [T.Buffer((n,), "float32", name="X", const=True),
                                    T.Buffer((n,), "float32", name="S"),
                                    T.Buffer((n,), "float32", name="D")], SPLIT, out_idx=[2, 1]),
        "square": build("jx_square", [T.Buffer((n,), "float32", name="X", const=True),
                                      T.Buffer((n,), "float32", name="Y")], SQUARE, out_idx=-1),
        "repeat": build("jx_repeat", [T.Buffer((n,), "float32", name="X", const=True),
                                      T.Buffer((r * n,), "float32", name="Y"),
                                      r], REPEAT, out_idx=1),
    }


def _f32(*values):
    return jnp.asarray(np.asarray(values, dtype=np.float32))


def test_a_call_on_jax_arrays_returns_jax_arrays_in_and_out_of_jit(k):
    a, b = jnp.arange(16, dtype=jnp.float32), jnp.ones(16, jnp.float32)
    eager = k["add"](a, b)
    assert isinstance(eager, jax.Array)
    np.testing.assert_array_equal(np.asarray(eager), np.arange(16) + 1)
    jitted = jax.jit(lambda x, y: k["add"](x, y) * 2)
    np.testing.assert_array_equal(np.asarray(jitted(a, b)), 2 * (np.arange(16) + 1))
    # Every size, one kernel: XLA traces per shape, tilejit compiles nothing.
    for size in (1, 5, 1000):
        x = jnp.arange(size, dtype=jnp.float32)
        np.testing.assert_array_equal(np.asarray(jitted(x, x)), 4 * np.arange(size))
    # A NumPy array beside a JAX array is an operand too.
    np.testing.assert_array_equal(np.asarray(k["add"](a, np.ones(16, np.float32))),
                                  np.arange(16) + 1)
    assert k["add"].jax_target.startswith("tilejit_vec_add_")
    # The program holds the custom call, named by the target, and no Python callback.
    text = jitted.lower(a, b).as_text()
    assert k["add"].jax_target in text
    assert "callback" not in text


def test_several_outputs_come_back_as_a_tuple_in_out_idx_order(k):
    x = _f32(0, 1, 2)
    for result in (k["split"](x), jax.jit(k["split"])(x)):
        assert isinstance(result, tuple) and len(result) == 2
        np.testing.assert_array_equal(np.asarray(result[0]), [0, 2, 4])  # D, out_idx[0]
        np.testing.assert_array_equal(np.asarray(result[1]), [1, 2, 3])


def test_a_written_parameter_comes_back_as_a_new_array_and_the_input_is_unchanged(k):
    x, y = _f32(0, 1, 2, 3), _f32(1, 1, 1, 1)
    result = k["axpy"](x, y, 2.0, 3, True)
    np.testing.assert_array_equal(np.asarray(result), [4, 6, 8, 10])
    np.testing.assert_array_equal(np.asarray(y), [1, 1, 1, 1])
    # Donated, the input's buffer is reused by XLA (input_output_aliases).
    donated = jax.jit(lambda x, y: k["axpy"](x, y, 2.0, 0, False), donate_argnums=1)
    y2 = _f32(1, 1, 1, 1)
    np.testing.assert_array_equal(np.asarray(donated(x, y2)), [1, 3, 5, 7])
    assert y2.is_deleted()


def test_scalars_as_python_numbers_and_as_traced_values(k):
    x, y = _f32(0, 1, 2, 3), _f32(1, 1, 1, 1)
    traces = []

    def f(x, y, a):
        traces.append(1)
        return k["axpy"](x, y, a, 3, False)

    jitted = jax.jit(f)
    for a in (2.0, 3.0, 5.5):  # a traced scalar: one trace for every value
        np.testing.assert_allclose(np.asarray(jitted(x, y, a)), a * np.arange(4) + 1)
    assert len(traces) == 1
    # A Python number is static: part of the program.
    np.testing.assert_array_equal(np.asarray(k["axpy"](x, y, np.float32(1.0), 2, True)),
                                  [3, 4, 5, 6])
    # A scalar that sets a size must be known when XLA compiles.
    np.testing.assert_array_equal(np.asarray(k["repeat"](_f32(1, 2), 3)), [1, 2] * 3)
    np.testing.assert_array_equal(np.asarray(jax.jit(k["repeat"], static_argnums=1)(
        _f32(1, 2), 2)), [1, 2] * 2)
    with pytest.raises(TypeError, match=r"^jx_repeat: argument 1 'r' sets a size of the call"):
        jax.jit(k["repeat"])(_f32(1, 2), 3)


@pytest.mark.parametrize("case", ["dtype", "rank", "relation", "count", "string", "extra"])
def test_a_bad_call_is_refused_at_trace_time_with_the_direct_calls_message(k, case):
    x4, y4 = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    args = {"dtype": ("add", (x4, y4.astype(np.float64))),
            "rank": ("add", (x4, y4.reshape(2, 2))),
            "relation": ("add", (x4, np.ones(3, np.float32))),
            "count": ("axpy", (x4, y4, 2.0)),
            "string": ("axpy", (x4, y4, "a", 3, True)),
            "extra": ("add", (x4, y4, y4))}[case]
    name, values = args
    kernel = k[name]
    with pytest.raises(Exception) as direct:  # the direct call on NumPy arrays
        kernel(*values)
    if case == "dtype":
        jax.config.update("jax_enable_x64", True)
    try:
        as_jax = tuple(jnp.asarray(v) if isinstance(v, np.ndarray) else v for v in values)
        arrays = [v for v in as_jax if isinstance(v, jax.Array)]

        def traced(*given):  # the arrays traced, everything else as written
            given = iter(given)
            return kernel(*(next(given) if isinstance(v, jax.Array) else v for v in as_jax))

        for call in (lambda: kernel(*as_jax), lambda: jax.jit(traced)(*arrays)):
            with pytest.raises(type(direct.value)) as refused:
                call()
            assert str(refused.value) == str(direct.value)
    finally:
        jax.config.update("jax_enable_x64", False)


def test_an_array_for_a_scalar_is_refused_naming_its_shape_and_dtype(k):
    x, y = _f32(0, 1, 2), _f32(1, 1, 1)
    a = jnp.ones((3,), jnp.float32)
    expected = ("jx_axpy: argument 2 'a': expected a float or int scalar (float32), got a "
                "tensor of shape (3,) and dtype float32")
    for call in (lambda: k["axpy"](x, y, a, 1, True),
                 lambda: jax.jit(lambda x, y, a: k["axpy"](x, y, a, 1, True))(x, y, a)):
        with pytest.raises(TypeError) as refused:
            call()
        assert str(refused.value) == expected
    # The words of a call on NumPy arrays, which says no more than "a tensor".
    with pytest.raises(TypeError) as direct:
        k["axpy"](np.array(x), np.array(y), np.array(a), 1, True)
    assert str(direct.value) == expected.split(" of shape")[0]
    # An object JAX defines is named as JAX's API names it, not by its module inside JAX.
    with pytest.raises(TypeError) as refused:
        k["axpy"](x, y, jax.ShapeDtypeStruct((), jnp.float32), 1, True)
    assert str(refused.value) == ("jx_axpy: argument 2 'a': expected a float or int scalar "
                                  "(float32), got jax.ShapeDtypeStruct")


@pytest.mark.parametrize("given", ["int4 buffer", "key buffer", "complex 0-d scalar",
                                   "complex NumPy scalar"])
def test_an_element_type_the_kernel_cannot_take_is_refused_naming_it(k, given):
    x = _f32(0, 1, 2)
    args, error, words = {
        "int4 buffer": ((jnp.ones(3, jnp.int4), x, 1.0, 1, True), ValueError,
                        "jx_axpy: argument 0 'X': expected dtype float32, got int4"),
        "key buffer": ((jax.random.key(0), x, 1.0, 1, True), ValueError,
                       "jx_axpy: argument 0 'X': expected dtype float32, got key<fry>"),
        "complex 0-d scalar": ((x, x, jnp.asarray(1 + 2j, jnp.complex64), 1, True), TypeError,
                               ("jx_axpy: argument 2 'a': expected a float or int scalar "
                               "(float32), got a tensor of shape () and dtype complex64")),
        "complex NumPy scalar": ((x, x, np.complex64(1), 1, True), TypeError,
                                 ("jx_axpy: argument 2 'a': expected a float or int scalar "
                                 "(float32), got numpy.complex64"))}[given]
    arrays = [a for a in args if isinstance(a, jax.Array)]

    def traced(*given_arrays):
        given_arrays = iter(given_arrays)
        return k["axpy"](*(next(given_arrays) if isinstance(a, jax.Array) else a for a in args))

    for call in (lambda: k["axpy"](*args), lambda: jax.jit(traced)(*arrays)):
        with pytest.raises(error) as refused:
            call()
        assert str(refused.value) == words


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_sixteen_bit_float_scalar_is_taken_as_its_value(k, dtype):
    x, y = _f32(1, 2, 3), _f32(0, 0, 0)
    scale = jax.jit(lambda x, y, a: k["axpy"](x, y, a, 0, False))
    for value in (0.5, -2.25, 65504.0, 6e-8, -1e-5, float("inf")):
        a = jnp.asarray(value, getattr(jnp, dtype))
        expected = np.float32(np.asarray(a).astype(np.float32)) * np.asarray([1, 2, 3], np.float32)
        for got in (k["axpy"](x, y, a, 0, False), scale(x, y, a)):
            np.testing.assert_array_equal(np.asarray(got), expected)
    if dtype == "float16":  # a NumPy float16, part of the program as a Python number is
        got = k["axpy"](x, y, np.float16(0.1), 0, False)
        np.testing.assert_array_equal(np.asarray(got),
                                      np.float32(np.float16(0.1)) * np.asarray([1, 2, 3],
                                                                                np.float32))


def test_eager_calls_are_kept_per_kind_telling_number_types_and_sizes_apart(k):
    x, y = _f32(0, 1, 2, 3), _f32(1, 1, 1, 1)
    for a in (2, 2.0, np.float32(2)):  # an int, a float, a NumPy float: three programs
        np.testing.assert_array_equal(np.asarray(k["axpy"](x, y, a, 3, True)), [4, 6, 8, 10])
    # A bool where an int goes is refused after the int of the same value was taken (and
    # the other way round), as a direct call refuses it.
    np.testing.assert_array_equal(np.asarray(k["axpy"](x, y, 1.0, 1, True)), [2, 3, 4, 5])
    for bad, words in ((True, "expected an int scalar (int64), got bool"),):
        with pytest.raises(TypeError, match=re.escape(words)):
            k["axpy"](x, y, 1.0, bad, True)
    with pytest.raises(TypeError, match=re.escape("expected a bool scalar (bool), got int")):
        k["axpy"](x, y, 1.0, 1, 1)
    # A scalar that sets a size, given as a concrete 0-d array: its value makes the program.
    for r in (3, 2, 3):
        out = k["repeat"](_f32(1, 2), jnp.asarray(r, jnp.int64 if jax.config.jax_enable_x64
                                                    else jnp.int32))
        np.testing.assert_array_equal(np.asarray(out), [1, 2] * r)
    # Shapes are told apart by JAX's own dispatch: one kept call for every size.
    k["add"](_f32(1), _f32(1))
    kinds = len(k["add"]._jax_calls)
    for size in (3, 5, 7):
        v = jnp.ones(size, jnp.float32)
        np.testing.assert_array_equal(np.asarray(k["add"](v, v)), np.full(size, 2.0))
    assert len(k["add"]._jax_calls) == kinds


def test_vmap_runs_the_kernel_once_per_element_by_default(k):
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    out = jax.vmap(lambda v: k["add"](v, v))(xs)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(12).reshape(3, 4))
    assert k["add"].jax_vmap_method == "sequential"
    with pytest.raises(ValueError, match="jax_vmap_method must be one of"):
        k["add"].jax_vmap_method = "parallel"


def test_custom_vjp_with_tilejit_kernels_and_grad_without_one(k):
    @jax.custom_vjp
    def square(x):
        return k["square"](x)

    def forward(x):
        return k["square"](x), x

    def backward(x, g):
        return (k["add"](k["square"](x) * 0 + x, x) * g,)

    square.defvjp(forward, backward)
    x = _f32(0, 1, 2, 3)
    expected = 2 * np.arange(4)
    for grad in (jax.grad(lambda v: square(v).sum()),
                 jax.jit(jax.grad(lambda v: square(v).sum()))):
        np.testing.assert_array_equal(np.asarray(grad(x)), expected)
    batched = jax.vmap(jax.grad(lambda v: square(v).sum()))(jnp.ones((2, 4), jnp.float32))
    np.testing.assert_array_equal(np.asarray(batched), np.full((2, 4), 2.0))
    with pytest.raises(TypeError, match=r"^jx_square: JAX cannot differentiate a tilejit "
                                        r"kernel by itself.*jax\.custom_vjp"):
        jax.grad(lambda v: k["square"](v).sum())(x)


def test_stream_is_refused_with_jax_arrays(k):
    with pytest.raises(ValueError, match=r"^vec_add: stream= cannot be given with JAX arrays"):
        k["add"](_f32(1), _f32(1), stream=0)


def test_the_target_name_is_the_same_in_every_process(k, child_python):
    code = textwrap.dedent(f"""
        import tilejit
        from tilejit import T
        n = T.symbol("n")
        k = tilejit.compile(tilejit.Program(name="vec_add", source={VEC_ADD!r}, params=[
            T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n,), "float32", name="B", const=True),
            T.Buffer((n,), "float32", name="C")]), out_idx=-1,
            execution_backend={k["add"].execution_backend!r})
        print(k.jax_target)
    """)
    assert child_python("-c", code).strip() == k["add"].jax_target


def test_the_handler_declarations_match_the_installed_jaxlib(tmp_path):
    # tilejit/xla.h declares the part of XLA's FFI C API the handler reads: checked here
    # field by field against the header of the jaxlib installed.
    from jax import ffi

    from build_tools import toolchain

    header = Path(ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    assert header.exists(), header
    pairs = {
        "tj_xla_extension": ("XLA_FFI_Extension_Base", ["struct_size", "type", "next"]),
        "tj_xla_api_version": ("XLA_FFI_Api_Version", ["struct_size", "extension_start",
                                                       "major_version", "minor_version"]),
        "tj_xla_metadata": ("XLA_FFI_Metadata", ["struct_size", "api_version", "traits"]),
        "tj_xla_metadata_extension": ("XLA_FFI_Metadata_Extension",
                                      ["extension_base", "metadata"]),
        "tj_xla_buffer": ("XLA_FFI_Buffer", ["struct_size", "extension_start", "dtype", "data",
                                             "rank", "dims"]),
        "tj_xla_byte_span": ("XLA_FFI_ByteSpan", ["ptr", "len"]),
        "tj_xla_scalar": ("XLA_FFI_Scalar", ["dtype", "value"]),
        "tj_xla_list": ("XLA_FFI_Args", ["struct_size", "extension_start", "size", "types",
                                         "items:args"]),
        "tj_xla_attrs": ("XLA_FFI_Attrs", ["struct_size", "extension_start", "size", "types",
                                           "names", "attrs"]),
        "tj_xla_error_create_args": ("XLA_FFI_Error_Create_Args", [
            "struct_size", "extension_start", "message", "errc"]),
        "tj_xla_stream_get_args": ("XLA_FFI_Stream_Get_Args", [
            "struct_size", "extension_start", "ctx", "stream"]),
        "tj_xla_device_ordinal_get_args": ("XLA_FFI_DeviceOrdinal_Get_Args", [
            "struct_size", "extension_start", "ctx", "device_ordinal"]),
        "tj_xla_call_frame": ("XLA_FFI_CallFrame", ["struct_size", "extension_start", "api",
                                                    "ctx", "stage", "args", "rets", "attrs",
                                                    "future"]),
        "tj_xla_api": ("XLA_FFI_Api", [
            "struct_size", "extension_start", "api_version", "internal_api",
            "error_create:XLA_FFI_Error_Create", "error_destroy:XLA_FFI_Error_Destroy",
            "stream_get:XLA_FFI_Stream_Get",
            "device_ordinal_get:XLA_FFI_DeviceOrdinal_Get"]),
    }
    # Fields and structs an older jaxlib lacks are not read by the handler there (it
    # checks struct_size first), so only what the header declares is compared.
    text = header.read_text()
    checks = []
    for ours, (theirs, fields) in pairs.items():
        if f"struct {theirs} {{" not in text and f"}} {theirs};" not in text:
            continue
        if ours not in ("tj_xla_metadata", "tj_xla_api"):  # read up to a field only
            checks.append(f"_Static_assert(sizeof({ours}) == sizeof({theirs}), \"{ours}\");")
        for field in fields:
            if field.partition(":")[2] and field.partition(":")[2] not in text:
                continue
            mine, _, other = field.partition(":")
            checks.append(f"_Static_assert(offsetof({ours}, {mine}) == offsetof({theirs}, "
                          f"{other or mine}), \"{ours}.{mine}\");")
    enums = {"XLA_FFI_Extension_Metadata": 1, "XLA_FFI_ExecutionStage_EXECUTE": 3,
             "XLA_FFI_AttrType_SCALAR": 3, "XLA_FFI_AttrType_STRING": 4,
             "XLA_FFI_ArgType_BUFFER": 1, "XLA_FFI_Error_Code_INVALID_ARGUMENT": 3,
             "XLA_FFI_Error_Code_INTERNAL": 13, "XLA_FFI_DataType_F32": 11,
             "XLA_FFI_DataType_BF16": 16, "XLA_FFI_DataType_C128": 18,
             "XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE": 1}
    checks += [f"_Static_assert({name} == {value}, \"{name}\");" for name, value in enums.items()]
    source = tmp_path / "check.c"
    source.write_text("#include <stddef.h>\n#include \"tilejit/xla.h\"\n"
                      "#include \"xla/ffi/api/c_api.h\"\n" + "\n".join(checks) + "\n")
    include = Path(__file__).resolve().parents[1] / "core" / "include"
    done = subprocess.run([*toolchain.c_compiler(), "-std=gnu11", "-fsyntax-only", f"-I{include}",
                           f"-I{ffi.include_dir()}", str(source)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_jax_is_loaded_only_by_a_process_that_uses_it(child_python):
    code = "import sys, numpy, tilejit; print('jax' in sys.modules)"
    assert child_python("-c", code).strip() == "False"


def _exported_program(kernel, path: Path) -> None:
    """A ``jax.export``-ed program calling ``kernel`` (x, y -> 2 * kernel(x, y)), written
    to ``path``; the custom call is allowed by name, as jax.export asks."""
    from jax import export

    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    exported = export.export(
        jax.jit(lambda a, b: kernel(a, b) * 2),
        disabled_checks=[export.DisabledSafetyCheck.custom_call(kernel.jax_target)])(x, x)
    path.write_bytes(exported.serialize())


RUN_EXPORTED = """
import sys, numpy as np, jax, jax.numpy as jnp
from jax import export
{register}
program = export.deserialize(bytearray(open(sys.argv[2], "rb").read()))
x = jnp.arange(4, dtype=jnp.float32)
print(np.asarray(program.call(x, x)).tolist())
"""

WITH_TILEJIT = """
import tilejit
tilejit.load(sys.argv[1])
"""

# A process without tilejit's Python: the export's own core opens the kernel and its
# handler is registered with XLA through ctypes (docs/jax.md).
WITHOUT_TILEJIT = """
import ctypes, glob, os, re
class _NoTilejit:
    def find_spec(self, name, path=None, target=None):
        if name == "tilejit" or name.startswith("tilejit."):
            raise ImportError("tilejit is not installed in this process")
sys.meta_path.insert(0, _NoTilejit())
directory = sys.argv[1]
core = ctypes.CDLL(glob.glob(os.path.join(directory, "libtilejit_core-*.so"))[0])
kernel = ctypes.c_void_p()
assert core.tj_kernel_open(directory.encode(), ctypes.byref(kernel)) == 0
header = open(os.path.join(directory, "kernel.h")).read()
target = re.search(r'_JAX_TARGET "([^"]+)"', header).group(1)
assert core.tj_xla_register(target.encode(), kernel, 1) == 0  # kDLCPU
jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(core.tj_xla_handler), platform="cpu")
"""


@pytest.mark.parametrize("process", ["with tilejit", "without tilejit"])
def test_an_exported_jax_program_runs_in_a_fresh_process(k, tmp_path, process):
    if k["add"].execution_backend != "cython":
        pytest.skip("the export is the same for every backend: run once")
    k["add"].export(tmp_path / "add")
    _exported_program(k["add"], tmp_path / "program.bin")
    code = RUN_EXPORTED.format(
        register=WITH_TILEJIT if process == "with tilejit" else WITHOUT_TILEJIT)
    from conftest import subprocess_env

    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "add"),
                           str(tmp_path / "program.bin")], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0.0, 4.0, 8.0, 12.0]"


BEFORE_JAX = """
import sys, numpy as np, tilejit
from tilejit import T
{make}
assert "jax" not in sys.modules and "jaxlib" not in sys.modules, "tilejit imported JAX"
import jax
from jax import export
program = export.deserialize(bytearray(open(sys.argv[2], "rb").read()))
x = np.arange(4, dtype=np.float32)
print(np.asarray(program.call(x, x)).tolist())
{more}
"""

LOADED_BEFORE_JAX = """
tilejit.load(sys.argv[1])  # not kept: the load registers it, whenever JAX comes
"""

COMPILED_BEFORE_JAX = """
n = T.symbol("n")
kernel = tilejit.compile(tilejit.Program(name="vec_add", source={source!r}, params=[
    T.Buffer((n,), "float32", name="A", const=True),
    T.Buffer((n,), "float32", name="B", const=True),
    T.Buffer((n,), "float32", name="C")]), out_idx=-1)
"""


@pytest.mark.parametrize("made", ["loaded", "compiled"])
def test_a_kernel_made_before_jax_is_imported_is_registered_when_it_is(k, tmp_path, made):
    if k["add"].execution_backend != "cython":
        pytest.skip("the export is the same for every backend: run once")
    k["add"].export(tmp_path / "add")
    _exported_program(k["add"], tmp_path / "program.bin")
    code = BEFORE_JAX.format(
        make=LOADED_BEFORE_JAX if made == "loaded" else COMPILED_BEFORE_JAX.format(
            source=VEC_ADD),
        more="" if made == "loaded" else
        "print(np.asarray(jax.jit(lambda a, b: kernel(a, b))(x, x)).tolist())")
    from conftest import subprocess_env

    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "add"),
                           str(tmp_path / "program.bin")], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    expected = ["[0.0, 4.0, 8.0, 12.0]"] + (["[0.0, 2.0, 4.0, 6.0]"] if made == "compiled" else [])
    assert done.stdout.splitlines() == expected


NOT_KEPT = """
import gc, sys, weakref
sys.modules["jax"] = None  # JAX cannot be imported in this process
import tilejit
kernel = weakref.ref(tilejit.load(sys.argv[1]))
gc.collect()
print(kernel() is None)
"""


def test_a_kernel_loaded_where_jax_cannot_be_imported_is_not_kept_for_it(k, tmp_path):
    if k["add"].execution_backend != "cython":
        pytest.skip("the export is the same for every backend: run once")
    k["add"].export(tmp_path / "add")
    from conftest import subprocess_env

    done = subprocess.run([sys.executable, "-c", NOT_KEPT, str(tmp_path / "add")],
                          env=subprocess_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


PUBLISH_FAILS = """
import sys, warnings, tilejit
from tilejit import T
from tilejit.runtime import frameworks

class Refusing(frameworks.Adapter):
    name = "tj_fake_framework"
    def publish(self, kernel):
        raise RuntimeError("this framework refuses every kernel")

frameworks.register("tj_fake_framework", Refusing, publishes=True)
n = T.symbol("n")
kernel = tilejit.compile(tilejit.Program(name="vec_add", source={source!r}, params=[
    T.Buffer((n,), "float32", name="A", const=True),
    T.Buffer((n,), "float32", name="B", const=True),
    T.Buffer((n,), "float32", name="C")]), out_idx=-1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tj_fake_framework  # the import goes on
print(tj_fake_framework.VALUE)
print([str(w.message) for w in caught if w.category is RuntimeWarning])
print([f.root for f in sys.meta_path if type(f).__name__ == "_AfterImport"])
"""


def test_a_kernel_a_framework_fails_to_publish_on_its_import_is_a_warning(tmp_path):
    (tmp_path / "tj_fake_framework.py").write_text("VALUE = 42\n")
    from conftest import subprocess_env

    code = PUBLISH_FAILS.format(source=VEC_ADD)
    env = subprocess_env()
    env["PYTHONPATH"] += f"{os.pathsep}{tmp_path}"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "42", ("['vec_add: not made callable by tj_fake_framework programs when "
               "tj_fake_framework was imported: RuntimeError: this framework refuses every "
               "kernel']"), "['jax']"]


def test_an_exported_program_without_its_kernel_says_which_target(k, tmp_path):
    if k["add"].execution_backend != "cython":
        pytest.skip("the export is the same for every backend: run once")
    _exported_program(k["add"], tmp_path / "program.bin")
    code = RUN_EXPORTED.format(register="")
    from conftest import subprocess_env

    done = subprocess.run([sys.executable, "-c", code, "-", str(tmp_path / "program.bin")],
                          env=subprocess_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode != 0
    assert k["add"].jax_target in done.stderr


def test_a_cuda_kernel_on_arrays_of_the_cpu_is_refused_as_a_direct_call_refuses(backend):
    import tilejit
    from tilejit.tools.demo import CUDA_VEC_ADD

    program = tilejit.Program("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                                          T.Buffer((n,), "float32", name="B", const=True),
                                          T.Buffer((n,), "float32", name="C")],
                              CUDA_VEC_ADD, grid=(T.ceildiv(n, 256),), block=(256,))
    kernel = tilejit.compile(program, out_idx=-1, target="cuda", compiler="nvcc",
                             execution_backend=backend)
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError) as direct:
        kernel(x, x)
    for call in (lambda: kernel(jnp.asarray(x), jnp.asarray(x)),
                 lambda: jax.jit(kernel)(jnp.asarray(x), jnp.asarray(x))):
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == str(direct.value)
        assert "expected a cuda tensor, got a tensor on device cpu:0" in str(refused.value)


# ---- Symbolic shapes (jax.export's shape polymorphism) ---------------------------------

PAIR = """
void jx_pair(const float *X, const float *Y, float *Z, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { Z[i] = X[i]; Z[n + i] = Y[i]; }
}
"""
PREFIX = """
void jx_prefix(const float *X, float *P, int64_t n) {
  P[0] = 0;
  for (int64_t i = 0; i < n; ++i) P[i + 1] = P[i] + X[i];
}
"""
ROWS = """
void jx_rows(const float *X, float *S, int64_t n) {
  for (int64_t i = 0; i < n; ++i) S[i] = X[4 * i] + X[4 * i + 1] + X[4 * i + 2] + X[4 * i + 3];
}
"""
RATIO = """
void jx_ratio(const float *X, const float *Y, float *Z, int64_t n, int64_t m) {
  for (int64_t i = 0; i < n / m; ++i) Z[i] = X[i * m] / Y[0];
}
"""
STRIDED = """
void jx_strided(const float *X, float *Y, int64_t n, int64_t s) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i * s];
}
"""


@pytest.fixture(scope="module")
def sym(k, build, backend):
    """Kernels whose outputs' shapes are expressions (``2 * n``, ``n + 1``), a static extent,
    a quotient of two symbols and declared strides. Their JAX calls do not depend on the
    backend: built once."""
    if backend != "cython":
        pytest.skip("a JAX call is the same for every backend: run once")
    m, s = T.symbol("m"), T.symbol("s")
    return {
        "add": k["add"], "repeat": k["repeat"], "split": k["split"], "axpy": k["axpy"],
        "pair": build("jx_pair", [T.Buffer((n,), "float32", name="X", const=True),
                                  T.Buffer((n,), "float32", name="Y", const=True),
                                  T.Buffer((2 * n,), "float32", name="Z")], PAIR, out_idx=-1),
        "prefix": build("jx_prefix", [T.Buffer((n,), "float32", name="X", const=True),
                                      T.Buffer((n + 1,), "float32", name="P")], PREFIX,
                        out_idx=-1),
        "rows": build("jx_rows", [T.Buffer((n, 4), "float32", name="X", const=True),
                                  T.Buffer((n,), "float32", name="S")], ROWS, out_idx=-1),
        "ratio": build("jx_ratio", [T.Buffer((n,), "float32", name="X", const=True),
                                    T.Buffer((m,), "float32", name="Y", const=True),
                                    T.Buffer((n // m,), "float32", name="Z")], RATIO,
                       out_idx=-1),
        "strided": build("jx_strided", [T.Buffer((n,), "float32", name="X", const=True,
                                                 strides=(s,)),
                                        T.Buffer((n,), "float32", name="Y")], STRIDED,
                         out_idx=-1),
    }


def _symbolic(spec: str, dtypes=()):
    """ShapeDtypeStructs of the shapes in ``spec`` ("b; b, 4"), in one symbolic scope, of
    ``dtypes`` (float32 past them)."""
    from jax import export

    shapes = [s.strip() for s in spec.split(";")]
    dims = export.symbolic_shape(", ".join(shapes))
    found, at = [], 0
    for i, shape in enumerate(shapes):
        rank = len(shape.split(","))
        dtype = dtypes[i] if i < len(dtypes) else jnp.float32
        found.append(jax.ShapeDtypeStruct(tuple(dims[at:at + rank]), dtype))
        at += rank
    return found


def _export(function, kernels, *specs):
    from jax import export

    return export.export(jax.jit(function), disabled_checks=[
        export.DisabledSafetyCheck.custom_call(kernel.jax_target) for kernel in kernels])(*specs)


def test_a_program_exported_with_symbolic_sizes_runs_at_every_size(sym):
    from jax import export

    def program(x, y, rows):
        return (sym["add"](x, y) * 2, sym["pair"](x, y), sym["prefix"](x),
                sym["repeat"](x, 3), sym["split"](x), sym["rows"](rows))

    b, c = export.symbolic_shape("b, c")
    specs = (jax.ShapeDtypeStruct((b,), jnp.float32),) * 2 + (
        jax.ShapeDtypeStruct((c, 4), jnp.float32),)
    exported = _export(program, [sym[name] for name in ("add", "pair", "prefix", "repeat",
                                                         "split", "rows")], *specs)
    # The outputs' shapes are the signature's expressions over the symbolic dimensions.
    shapes = [str(aval.shape) for aval in exported.out_avals]
    assert shapes == ["(b,)", "(2*b,)", "(b + 1,)", "(3*b,)", "(b,)", "(b,)", "(c,)"]
    program_again = export.deserialize(exported.serialize())
    for size in (2, 5):
        x, rows = np.arange(size, dtype=np.float32), np.ones((size + 1, 4), np.float32)
        out = [np.asarray(o) for o in jax.tree_util.tree_leaves(
            program_again.call(x, x + 1, rows))]
        np.testing.assert_array_equal(out[0], 2 * (2 * x + 1))
        np.testing.assert_array_equal(out[1], np.concatenate([x, x + 1]))
        np.testing.assert_array_equal(out[2], np.concatenate([[0], np.cumsum(x)]))
        np.testing.assert_array_equal(out[3], np.tile(x, 3))
        np.testing.assert_array_equal(out[4], 2 * x)
        np.testing.assert_array_equal(out[5], x + 1)
        np.testing.assert_array_equal(out[6], np.full(size + 1, 4.0))
    # jax.jit under shape polymorphism: the same shapes, without exporting.
    shape = jax.eval_shape(lambda x, y: sym["pair"](x, y), *specs[:2]).shape
    assert str(shape) == "(2*b,)"


def test_a_symbolic_relation_that_fails_when_the_program_runs_is_the_direct_calls_error(sym):
    a_spec, b_spec = _symbolic("a; b")
    exported = _export(lambda x, y: sym["add"](x, y), [sym["add"]], a_spec, b_spec)
    assert str(exported.out_avals[0].shape) == "(a,)"
    x3, x4 = np.ones(3, np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(np.asarray(exported.call(x3, x3)), 2 * x3)
    with pytest.raises(ValueError) as direct:
        sym["add"](x3, x4)
    with pytest.raises(Exception) as refused:  # XLA's error, carrying the core's message
        exported.call(x3, x4)
    assert str(direct.value) in str(refused.value)
    assert "vec_add: argument 1 'B': expected shape[0] == n (= 3" in str(refused.value)


@pytest.mark.parametrize("case", ["dtype", "rank", "static", "never", "scalar"])
def test_a_symbolic_call_is_refused_at_trace_time_where_no_size_can_make_it_right(sym, case):
    given = {"dtype": ("add", _symbolic("b; b", (jnp.float32, jnp.int32))),
             "rank": ("add", _symbolic("b; b, 2")),
             "static": ("rows", _symbolic("b, 3")),
             "never": ("add", _symbolic("b; b + 1")),
             "scalar": ("axpy", [*_symbolic("b; b; b"), 1, True])}[case]
    name, specs = given
    kernel = sym[name]
    expected = {
        "dtype": (ValueError, "vec_add: argument 1 'B': expected dtype float32, got int32"),
        "rank": (ValueError, ("vec_add: argument 1 'B': expected a 1-d tensor, got 2-d with "
                             "shape (b, 2)")),
        "static": (ValueError, "jx_rows: argument 0 'X': expected shape[1] == 4, got 3"),
        "never": (ValueError, ("vec_add: argument 1 'B': expected shape[0] == n (= b, bound by "
                              "argument 0 'A'), got b + 1")),
        "scalar": (TypeError, ("jx_axpy: argument 2 'a': expected a float or int scalar "
                              "(float32), got a tensor of shape (b,) and dtype float32"))}[case]
    arrays = [s for s in specs if isinstance(s, jax.ShapeDtypeStruct)]

    def traced(*given):
        given = iter(given)
        return kernel(*(next(given) if isinstance(s, jax.ShapeDtypeStruct) else s
                        for s in specs))

    with pytest.raises(expected[0]) as refused:
        _export(traced, [kernel], *arrays)
    assert str(refused.value) == expected[1]
    # The same words as the direct call at a size (the symbolic part as the call gave it).
    concrete = [np.zeros(tuple(3 if not isinstance(d, int) else d for d in s.shape), s.dtype)
                if isinstance(s, jax.ShapeDtypeStruct) else s for s in specs]
    if case == "never":
        concrete[1] = np.zeros(4, np.float32)
    with pytest.raises(expected[0]) as direct:
        kernel(*concrete)
    if case in ("dtype", "static"):
        assert str(direct.value) == expected[1]
    assert str(direct.value).split(": expected")[0] == expected[1].split(": expected")[0]


def test_a_quotient_of_symbols_and_declared_strides_under_symbolic_sizes(sym):
    b, c = _symbolic("b; c")
    exported = _export(lambda x, y: sym["ratio"](x, y), [sym["ratio"]], b, c)
    assert str(exported.out_avals[0].shape) == "(floordiv(b, c),)"
    np.testing.assert_array_equal(np.asarray(exported.call(_f32(2, 4, 6, 8), _f32(2, 1))),
                                  [1, 3])
    # A buffer that declares strides takes static sizes only: XLA's strides are products
    # of the dimensions.
    np.testing.assert_array_equal(np.asarray(jax.jit(sym["strided"])(_f32(1, 2))), [1, 2])
    with pytest.raises(TypeError) as refused:
        _export(lambda x: sym["strided"](x), [sym["strided"]], b)
    assert str(refused.value) == (
        "jx_strided: argument 0 'X': the kernel declares this buffer's strides, which a call "
        "with symbolic dimensions (b,) cannot be checked against when it is traced: export "
        "the program with static sizes for it")


def test_a_symbolic_program_runs_in_a_fresh_process_after_load(sym, tmp_path):
    sym["pair"].export(tmp_path / "pair")
    b, b_again = _symbolic("b; b")
    exported = _export(lambda x, y: sym["pair"](x, y) + 1, [sym["pair"]], b, b_again)
    (tmp_path / "program.bin").write_bytes(exported.serialize())
    code = textwrap.dedent("""
        import sys, numpy as np, tilejit
        tilejit.load(sys.argv[1])
        import jax
        from jax import export
        program = export.deserialize(bytearray(open(sys.argv[2], "rb").read()))
        for size in (2, 7):
            x = np.arange(size, dtype=np.float32)
            print(np.asarray(program.call(x, x)).tolist())
    """)
    from conftest import subprocess_env

    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pair"),
                           str(tmp_path / "program.bin")], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    expected = [(np.concatenate([np.arange(s), np.arange(s)]) + 1.0).tolist()
                for s in (2, 7)]
    assert done.stdout.split("\n")[:2] == [str(e) for e in expected]


SERVE = """
import dataclasses, sys
sys.path.insert(0, sys.argv[1])
from _markdown import code_blocks, run_block
page, line, directory = sys.argv[2:5]
block = next(b for b in code_blocks(open(page).read()) if b.line == int(line))
sys.argv = ["serve.py", directory]
run_block(dataclasses.replace(block, no_run=False), "docs/jax.md", {"__name__": "__main__"})
"""


def test_the_deploy_example_of_the_jax_page_runs_in_a_fresh_process():
    # The page's blocks up to the program that serves the export run here, as a reader
    # runs them (printing the directory); that program runs in a fresh interpreter, its
    # printed result checked against the page.
    from _markdown import code_blocks, run_block
    from conftest import subprocess_env

    page = Path(__file__).resolve().parents[1] / "docs" / "jax.md"
    blocks = code_blocks(page.read_text())
    serve = next(i for i, b in enumerate(blocks) if b.code.startswith("# serve.py"))
    namespace: dict = {"__name__": "docs.jax"}
    for block in blocks[:serve]:
        run_block(block, "docs/jax.md", namespace)
    done = subprocess.run([sys.executable, "-c", SERVE, str(Path(__file__).parent), str(page),
                           str(blocks[serve].line), namespace["deploy"]], env=subprocess_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[1. 2. 3. 4.]\n"
