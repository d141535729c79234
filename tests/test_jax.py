"""Kernels called with JAX arrays (tilejit/frameworks/jax.py, core/src/xla.c): XLA FFI
custom calls, inside ``jax.jit`` and outside, on every backend, checked at trace time with
the messages of a direct call."""

from __future__ import annotations

import os
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
