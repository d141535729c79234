"""Compiling: exact C prototypes, compiler errors, ``@tilejit.jit`` and its canonical keys,
options from the environment, and the on-disk kernel cache seen from several
processes."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")

import tilejit
from tilejit import T

jit_module = importlib.import_module("tilejit.runtime.jit")


def _program(name, params, source):
    return tilejit.Program(name=name, params=params, source=source)


def _values(tensor, list_=True):
    """A kernel output as NumPy sees it through DLPack (outputs of calls without a framework
    tensor argument are only promised to be DLPack tensors)."""
    array = np.from_dlpack(tensor)
    return array.tolist() if list_ else array


# --- c_prototype ------------------------------------------------------------------------------


def test_prototype_with_const_pointers(build):
    n = T.symbol("n")
    k = build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                          T.Buffer((n,), "float32", name="B", const=True),
                          T.Buffer((n,), "float32", name="C")],
              "void vec_add(const float *A, const float *B, float *C, int64_t n) "
              "{ for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i]; }", out_idx=-1)
    assert k.c_prototype == "void vec_add(const float *A, const float *B, float *C, int64_t n)"


PROTO = """
void proto(const tj_float16 *X, double alpha, int8_t *ws, bool *Y, uint16_t *Z,
           int64_t n, int64_t m, int64_t s, int64_t q, int64_t r) {
  (void)X; (void)alpha; (void)ws; (void)Y; (void)n; (void)s; (void)q; (void)r;
  for (int64_t i = 0; i < n + m; ++i) Z[i] = (uint16_t)i;
}
"""


def test_prototype_symbols_in_order_of_first_appearance_shape_before_strides(build):
    n, m, s, q, r = (T.symbol(x) for x in "nmsqr")
    k = build("proto", [T.Buffer((n, m), "float16", strides=(s, 1), name="X", const=True),
                        T.Scalar("float64", name="alpha"),
                        T.Pointer("int8", name="ws"),
                        T.Buffer((m, q), "bool", strides=(r, 1), name="Y"),
                        T.Buffer((n + m,), "uint16", name="Z")], PROTO, out_idx=[-1])
    assert k.c_prototype == (
        "void proto(const tj_float16 *X, double alpha, int8_t *ws, bool *Y, uint16_t *Z, "
        "int64_t n, int64_t m, int64_t s, int64_t q, int64_t r)")
    assert [sym.name for sym in k.symbols] == ["n", "m", "s", "q", "r"]
    x = torch.zeros(2, 3, dtype=torch.float16)
    y = torch.zeros(3, 4, dtype=torch.bool)
    z = k(x, 1.0, None, y)
    assert z.dtype == torch.uint16 and z.tolist() == [0, 1, 2, 3, 4]


def test_prototype_of_scalars_and_default_names(build):
    k = build("misc", [T.Buffer((4,), "int32"), T.Scalar("uint64", name="count"),
                       T.Scalar("bool", name="flag"), T.Scalar("float32"),
                       T.Buffer((2, 2), "complex64", name="Cz")],
              "void misc(int32_t *arg0, uint64_t count, bool flag, float arg3, "
              "tj_complex64 *Cz) { arg0[0] = (int32_t)count + flag + (int32_t)arg3; "
              "(void)Cz; }")
    assert k.c_prototype == ("void misc(int32_t *arg0, uint64_t count, bool flag, float arg3, "
                             "tj_complex64 *Cz)")
    a = np.zeros(4, np.int32)
    k(a, 5, True, 2.0, np.zeros((2, 2), np.complex64))
    assert a[0] == 8


def test_prototype_without_parameters(build):
    k = build("nothing", [], "void nothing(void) {}")
    assert k.c_prototype == "void nothing(void)"
    assert k() is None


# --- compiler errors --------------------------------------------------------------------------


def _compiles(log: Path, kernel: str) -> list[str]:
    """The logged compiler runs that built `kernel` (not `--version` probes, nor a link
    whose output is named `<kernel>.cpython-...so`)."""
    return [line for line in log.read_text().splitlines() if f"/{kernel}.c " in f"{line} "]


def test_prototype_conflict_is_a_compile_error():
    n = T.symbol("n")
    program = _program("conflict", [T.Buffer((n,), "float32", name="A")],
                       "void conflict(double *A, int64_t n) { (void)A; (void)n; }\n")
    with pytest.raises(tilejit.CompileError) as info:
        tilejit.compile(program)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.kernel_name == "conflict"
    assert str(err) == ("conflict: parameter 0 'A' is declared float *A, the definition has "
                        "'double *A': a pointer to 64-bit float, not to float32")


def test_syntax_error_reports_message_and_source_line_and_is_not_cached(cc_log):
    n = T.symbol("n")
    tag = uuid.uuid4().hex[:8]
    name = f"broken_{tag}"
    bad = f"void {name}(float *A, int64_t n) {{\n  int x = ;\n  (void)A; (void)n;\n}}\n"
    program = _program(name, [T.Buffer((n,), "float32", name="A")], bad)
    for attempt in (1, 2):
        with pytest.raises(tilejit.CompileError) as info:
            tilejit.compile(program)
        err = info.value
        assert err.lineno == 2
        assert err.line_text.strip() == "int x = ;"
        text = str(err)
        assert text.startswith(f"{name}: compilation failed")
        assert "error: expected expression before ';' token" in text
        assert "line 2: int x = ;" in text
        # A failure is never cached: the compiler runs again.
        assert len(_compiles(cc_log, name)) == attempt
    fixed = _program(name, [T.Buffer((n,), "float32", name="A")],
                     bad.replace("int x = ;", "for (int64_t i = 0; i < n; ++i) A[i] = 2;"))
    k = tilejit.compile(fixed)
    a = torch.zeros(3)
    k(a)
    assert a.tolist() == [2, 2, 2]


def test_missing_compiler_is_a_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEJIT_CC", str(tmp_path / "no-such-cc"))
    program = _program("nocc", [], "void nocc(void) {}")
    with pytest.raises(tilejit.CompileError, match="no C compiler found"):
        tilejit.compile(program)


def test_kernel_named_like_a_libc_function_is_not_interposed(build):
    # Exported, `write` would resolve to libc's write(2) and the kernel would never run.
    k = build("write", [T.Buffer((T.symbol("n"),), "float32", name="A")],
              "void write(float *A, int64_t n) { for (int64_t i = 0; i < n; ++i) A[i] = 9; }")
    a = np.zeros(3, np.float32)
    k(a)
    assert a.tolist() == [9, 9, 9]


def test_compile_argument_errors():
    with pytest.raises(TypeError, match="tilejit.compile expects a tilejit.Program, got str"):
        tilejit.compile("void f(void) {}")
    with pytest.raises(ValueError, match=r"^p: unknown target 'tpu'; expected 'cpu' or 'cuda'$"):
        tilejit.compile(_program("p", [], "void p(void) {}"), target="tpu")
    with pytest.raises(ValueError, match="unknown execution_backend 'fast'"):
        tilejit.compile(_program("p", [], "void p(void) {}"), execution_backend="fast")


# --- @tilejit.jit -----------------------------------------------------------------------------

SCALE = """
void scale_{factor}(const {ctype} *A, {ctype} *B, int64_t n) {{
  for (int64_t i = 0; i < n; ++i) B[i] = A[i] * {factor};
}}
"""


def _scale_program(factor, dtype="float32"):
    n = T.symbol("n")
    ctype = {"float32": "float", "float64": "double"}[dtype]
    return _program(f"scale_{factor}", [T.Buffer((n,), dtype, name="A", const=True),
                                        T.Buffer((n,), dtype, name="B")],
                    SCALE.format(factor=factor, ctype=ctype))


def test_bare_jit_is_lazy_and_compiles_once():
    calls = []

    @tilejit.jit
    def scale(factor: int = 2):
        calls.append(factor)
        return _scale_program(factor)

    assert isinstance(scale, tilejit.JITFunction)
    assert scale.__name__ == "scale" and calls == []
    k = scale()
    assert isinstance(k, tilejit.JITKernel) and calls == [2]
    assert k.out_idx == []
    a, b = torch.arange(4.0), torch.zeros(4)
    assert k(a, b) is None
    assert b.tolist() == [0, 2, 4, 6]
    assert scale() is k and scale(2) is k and calls == [2]


def test_jit_with_options():
    @tilejit.jit(out_idx=-1, target="cpu", execution_backend="cython", compile_flags=["-O3"])
    def scale(factor: int = 2):
        return _scale_program(factor)

    k = scale(5)
    assert k.out_idx == [1] and k.execution_backend == "cython" and k.target == "cpu"
    assert k(torch.arange(3.0)).tolist() == [0, 5, 10]


def test_jit_compiles_nothing_until_called(monkeypatch):
    compiled = []
    real = jit_module.compile

    def counting(program, **options):
        compiled.append(program.name)
        return real(program, **options)

    monkeypatch.setattr(jit_module, "compile", counting)

    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2):
        return _scale_program(factor)

    assert compiled == []
    scale(3)
    scale(3)
    assert compiled == ["scale_3"]


def test_jit_canonical_key():
    calls = []

    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2, dtype: str = "float32"):
        calls.append((factor, dtype))
        return _scale_program(factor, dtype)

    k = scale()
    # Defaults applied, positional or keyword, any keyword order: one key, one kernel.
    for same in (scale(2), scale(factor=2), scale(2, "float32"), scale(dtype="float32"),
                 scale(factor=2, dtype="float32"), scale(dtype="float32", factor=2),
                 scale(2, dtype="float32")):
        assert same is k
    assert calls == [(2, "float32")]
    assert scale.cache_info() == 1
    # Distinct arguments, distinct kernels.
    k3, k64 = scale(3), scale(2, "float64")
    assert len({id(k), id(k3), id(k64)}) == 3
    assert calls == [(2, "float32"), (3, "float32"), (2, "float64")]
    assert scale.cache_info() == 3
    assert k3(torch.ones(2)).tolist() == [3, 3]
    assert k64(np.ones(2)).dtype == np.float64
    with pytest.raises(TypeError):
        scale(2, "float32", 7)  # not an argument set of the function at all


def test_jit_raw_call_never_matches_another_calls_key():
    calls = []

    @tilejit.jit(out_idx=-1)
    def tagged(block=256):
        calls.append(block)
        value = block[1] + 1 if isinstance(block, tuple) else block
        return _program("tagged", [T.Buffer((1,), "int64", name="O")],
                        f"void tagged(int64_t *O) {{ O[0] = {value}; }}")

    assert _values(tagged(block=128)()) == [128]
    # This positional tuple looks like the canonical key of block=128; it is another call.
    assert _values(tagged(("block", 128))()) == [129]
    assert calls == [128, ("block", 128)]


def test_jit_arguments_of_different_types_are_distinct_keys():
    c_types = {"bool": "bool", "int64": "int64_t", "float64": "double"}

    @tilejit.jit(out_idx=-1)
    def typed(value=1):
        dtype = {bool: "bool", int: "int64", float: "float64"}[type(value)]
        return _program(f"typed_{dtype}", [T.Buffer((1,), dtype, name="O")],
                        f"void typed_{dtype}({c_types[dtype]} *O) {{ O[0] = 1; }}")

    assert _values(typed(1)(), list_=False).dtype == np.int64
    assert _values(typed(1.0)(), list_=False).dtype == np.float64
    assert _values(typed(True)(), list_=False).dtype == np.bool_


def test_jit_unhashable_argument_names_it():
    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2, shape=(4,)):
        return _scale_program(factor)

    with pytest.raises(TypeError) as info:
        scale(2, shape=[4])
    assert str(info.value) == ("scale: argument 'shape' of type list is unhashable; jit "
                               "arguments must be hashable (use tuples, not lists)")
    with pytest.raises(TypeError, match=r"argument 'factor' of type dict is unhashable"):
        scale({"a": 1})
    # Arguments the function does not take: named after it, as Python names a function.
    with pytest.raises(TypeError, match=r"^scale\(\): too many positional arguments$"):
        scale(2, (4,), 5)
    with pytest.raises(TypeError, match=r"^scale\(\): got an unexpected keyword argument "
                                        r"'size'$"):
        scale(size=3)


def test_jit_kernels_are_shared_across_threads():
    import threading

    calls = []

    @tilejit.jit(out_idx=-1)
    def scale(factor: int = 2):
        calls.append(factor)
        time.sleep(0.05)  # widen the window for a second compile
        return _scale_program(factor)

    results = []
    threads = [threading.Thread(target=lambda: results.append(scale(7))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [7]
    assert len({id(k) for k in results}) == 1


# --- options from the environment -------------------------------------------------------------

FLAGGED = """
void flagged(int64_t *O) {
#ifdef TJ_VALUE
  O[0] = TJ_VALUE;
#else
  O[0] = -1;
#endif
}
"""


def _flagged():
    return _program("flagged", [T.Buffer((1,), "int64", name="O")], FLAGGED)


def test_compile_flags_fall_back_to_the_environment(monkeypatch):
    assert _values(tilejit.compile(_flagged(), out_idx=0)()) == [-1]
    monkeypatch.setenv("TILEJIT_COMPILE_FLAGS", "-DTJ_VALUE=7 -O1")
    assert _values(tilejit.compile(_flagged(), out_idx=0)()) == [7]
    # An explicit option wins over the environment.
    explicit = tilejit.compile(_flagged(), out_idx=0, compile_flags=["-DTJ_VALUE=3"])
    assert _values(explicit()) == [3]
    four = tilejit.compile(_flagged(), out_idx=0, compile_flags="-DTJ_VALUE=4")
    assert _values(four()) == [4]


def test_jit_options_fall_back_to_the_environment_at_compile_time(monkeypatch):
    @tilejit.jit(out_idx=0)
    def flagged(version: int = 0):
        return _flagged()

    monkeypatch.setenv("TILEJIT_COMPILE_FLAGS", "-DTJ_VALUE=11")
    assert _values(flagged(1)()) == [11]
    monkeypatch.setenv("TILEJIT_COMPILE_FLAGS", "-DTJ_VALUE=12")
    assert _values(flagged(1)()) == [11]  # compiled already: cached per key
    assert _values(flagged(2)()) == [12]

    @tilejit.jit(out_idx=0, compile_flags=["-DTJ_VALUE=5"])
    def pinned(version: int = 0):
        return _flagged()

    assert _values(pinned()()) == [5]


def test_backend_target_and_verbose_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("TILEJIT_EXECUTION_BACKEND", "dlpack")
    monkeypatch.setenv("TILEJIT_VERBOSE", "1")
    k = tilejit.compile(_flagged(), out_idx=0)
    assert k.execution_backend == "dlpack"
    assert "tilejit: flagged: void flagged(int64_t *O) -> " in capsys.readouterr().err
    monkeypatch.setenv("TILEJIT_EXECUTION_BACKEND", "bogus")
    with pytest.raises(ValueError, match="TILEJIT_EXECUTION_BACKEND='bogus': expected one of "
                                         "auto, cython, dlpack, ctypes"):
        tilejit.compile(_flagged(), out_idx=0)
    monkeypatch.delenv("TILEJIT_EXECUTION_BACKEND")
    monkeypatch.setenv("TILEJIT_TARGET", "tpu")
    with pytest.raises(ValueError, match="TILEJIT_TARGET='tpu': expected one of cpu, cuda"):
        tilejit.compile(_flagged(), out_idx=0)


# --- the kernel cache -------------------------------------------------------------------------


def test_same_program_reuses_the_library_in_process(cc_log):
    name = f"reuse_{uuid.uuid4().hex[:8]}"
    program = _program(name, [T.Buffer((1,), "int64", name="O")],
                       f"void {name}(int64_t *O) {{ O[0] = 42; }}")
    first = tilejit.compile(program, out_idx=0)
    second = tilejit.compile(program, out_idx=0)
    assert first.library_path == second.library_path
    assert Path(first.library_path).is_relative_to(os.environ["TILEJIT_CACHE_DIR"])
    assert len(_compiles(cc_log, name)) == 1
    assert _values(second()) == [42]


CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    import tilejit
    from tilejit import T

    name, go = sys.argv[1], sys.argv[2]
    while go and not os.path.exists(go):
        time.sleep(0.001)
    n = T.symbol("n")
    program = tilejit.Program(
        name=name, params=[T.Buffer((n,), "float32", name="A", const=True),
                           T.Buffer((n,), "float32", name="B")],
        source="void %s(const float *A, float *B, int64_t n) "
               "{ for (int64_t i = 0; i < n; ++i) B[i] = A[i] + 1; }" % name)
    kernel = tilejit.compile(program, out_idx=-1)
    out = kernel(np.arange(3, dtype=np.float32))
    print(json.dumps({"path": kernel.library_path, "out": out.tolist()}))
""")


def _start_child(tmp_path, env, name, go=""):
    script = tmp_path / "child.py"
    if not script.exists():
        script.write_text(CHILD)
    return subprocess.Popen([sys.executable, str(script), name, go], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(child):
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["out"] == [1.0, 2.0, 3.0]
    return result["path"]


def _child_program(name):
    """The program CHILD compiles, built here in the parent."""
    n = T.symbol("n")
    return tilejit.Program(
        name=name, params=[T.Buffer((n,), "float32", name="A", const=True),
                           T.Buffer((n,), "float32", name="B")],
        source=f"void {name}(const float *A, float *B, int64_t n) "
               "{ for (int64_t i = 0; i < n; ++i) B[i] = A[i] + 1; }")


def _no_compiles_since(log: Path, before: str) -> None:
    # A `--version` probe for the cache key is allowed; a kernel build (its output goes to
    # the cache's kernels/ directory) is not. A wrapper rebuild, should the core's sources
    # change in between, is not a kernel compile.
    new_lines = log.read_text()[len(before):].splitlines()
    assert not [line for line in new_lines if "/kernels/" in line], new_lines


@pytest.mark.slow  # subprocesses
def test_cache_is_reused_by_another_process(tmp_path, child_env, logging_cc, monkeypatch):
    log = tmp_path / "cc.log"
    log.touch()
    env = child_env(TILEJIT_CC=str(logging_cc), TILEJIT_CC_LOG=str(log))
    name = f"across_{uuid.uuid4().hex[:8]}"
    first = _finish(_start_child(tmp_path, env, name))
    assert Path(first).is_relative_to(os.environ["TILEJIT_CACHE_DIR"])
    assert len(_compiles(log, name)) == 1
    before = log.read_text()
    second = _finish(_start_child(tmp_path, env, name))
    assert second == first
    _no_compiles_since(log, before)
    # And this process, with the same compiler, finds the same library too.
    monkeypatch.setenv("TILEJIT_CC", str(logging_cc))
    monkeypatch.setenv("TILEJIT_CC_LOG", str(log))
    before = log.read_text()
    kernel = tilejit.compile(_child_program(name), out_idx=-1)
    assert kernel.library_path == first
    _no_compiles_since(log, before)
    assert kernel(torch.zeros(2)).tolist() == [1.0, 1.0]


@pytest.mark.slow  # subprocesses
def test_processes_compiling_at_once_share_one_library(tmp_path, child_env, logging_cc):
    log = tmp_path / "cc.log"
    log.touch()
    # An empty cache: the four also race to build the wrapper, which must be built once too.
    cache = tmp_path / "empty-cache"
    env = child_env(TILEJIT_CC=str(logging_cc), TILEJIT_CC_LOG=str(log),
                    TILEJIT_CACHE_DIR=str(cache))
    name = f"race_{uuid.uuid4().hex[:8]}"
    go = tmp_path / "go"
    children = [_start_child(tmp_path, env, name, str(go)) for _ in range(4)]
    time.sleep(0.3)
    go.touch()
    paths = {_finish(child) for child in children}
    assert len(paths) == 1
    assert Path(next(iter(paths))).is_relative_to(cache)
    assert len(_compiles(log, name)) == 1
    assert len(_compiles(log, "_tilejit")) <= 1  # the wrapper's Cython output, if built here
    entry = Path(paths.pop()).parent
    assert sorted(p.name for p in entry.iterdir()) == ["kernel.so", "meta.json"]
    leftovers = [p for p in entry.parent.parent.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_disable_cache_gives_a_private_library(monkeypatch):
    name = f"private_{uuid.uuid4().hex[:8]}"
    program = _program(name, [T.Buffer((1,), "int64", name="O")],
                       f"void {name}(int64_t *O) {{ O[0] = 5; }}")
    cached = tilejit.compile(program, out_idx=0)
    monkeypatch.setenv("TILEJIT_DISABLE_CACHE", "1")
    first = tilejit.compile(program, out_idx=0)
    second = tilejit.compile(program, out_idx=0)
    root = os.environ["TILEJIT_CACHE_DIR"]
    for k in (first, second):
        assert not Path(k.library_path).is_relative_to(root)
        assert _values(k()) == [5]
    assert len({cached.library_path, first.library_path, second.library_path}) == 3
