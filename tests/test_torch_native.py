"""A kernel's torch op implemented in C (core/src/torch.c through torch's stable C ABI):
the dispatcher reaches the core with no Python of tilejit's between, with the results and
messages of a direct call; calls that need Python's autograd (a dispatch mode, a tensor
requiring grad) still get it; ``TILEJIT_TORCH_OPS=python`` gives the same behaviour; and
an export's ``torch_op.so`` registers the op in a process that has only torch, including
one running an AOTInductor package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels as torch ops")
from conftest import NO_TILEJIT, Background, clean_subprocess_env, python_calls, subprocess_env
from torch.utils._python_dispatch import TorchDispatchMode

import tilejit
from tilejit import T
from tilejit.frameworks.torch import native_op
from tilejit.runtime.fast_paths import FAST_PATHS

ROOT = Path(__file__).resolve().parent.parent
TILEJIT = str(ROOT / "tilejit")

AFFINE = """
void affine(const double *X, const double *bias, double *Y, double a, int32_t k, bool flag,
            int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = (flag ? a * X[i] + k : X[i]) + (bias ? bias[i] : 0.0);
}
"""
SUM_DIFF = """
void sum_diff(const float *A, const float *B, float *S, float *D, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { S[i] = A[i] + B[i]; D[i] = A[i] - B[i]; }
}
"""
SCALE = """
void scale(const float *X, float *Y, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * factor;
}
"""


def _build(name, params, source, out_idx):
    return tilejit.compile(tilejit.Program(name, params, source), out_idx=out_idx)


@pytest.fixture(scope="module")
def kernels(tilejit_cache_dir):
    # The op's path is the same whatever backend a kernel's direct calls use: one is enough.
    n = T.symbol("n")
    const = {"const": True}
    build = _build
    return {
        "affine": build("affine", [T.Buffer((n,), "float64", name="X", **const),
                                   T.Buffer((n,), "float64", name="bias", optional=True, **const),
                                   T.Buffer((n,), "float64", name="Y"),
                                   T.Scalar("float64", name="a"), T.Scalar("int32", name="k"),
                                   T.Scalar("bool", name="flag")], AFFINE, out_idx=2),
        "sum_diff": build("sum_diff", [T.Buffer((n,), "float32", name="A", **const),
                                       T.Buffer((n,), "float32", name="B", **const),
                                       T.Buffer((n,), "float32", name="S"),
                                       T.Buffer((n,), "float32", name="D")],
                          SUM_DIFF, out_idx=[3, 2]),
        "scale": build("scale", [T.Buffer((n,), "float32", name="X", **const),
                                 T.Buffer((n,), "float32", name="Y"),
                                 T.Scalar("float32", name="factor")], SCALE, out_idx=1),
    }


def _python_frames(fn) -> list[str]:
    """The Python functions that run during ``fn()`` (file:function), besides torch's own
    OpOverload.__call__ (Python, for every op, torch's included)."""
    seen = [f"{file}:{function}" for file, _, function in python_calls(fn)]
    return [f for f in seen if not f.endswith("_ops.py:__call__") and not f.startswith(__file__)]


def test_this_torch_registers_ops_in_c():
    assert native_op.available() is None
    assert native_op.describe() == "in C, through torch's stable C ABI"


def test_an_eager_op_call_runs_no_python_of_tilejit(kernels):
    op = kernels["sum_diff"].torch_op
    a, b = torch.arange(4.0), torch.ones(4)
    op(a, b)
    scale = kernels["scale"].torch_op
    scale(a, 2.0)
    affine = kernels["affine"].torch_op  # an integer too: torch reads it as an int here
    x = torch.arange(3, dtype=torch.float64)
    affine(x, None, 2.0, 1, True)
    if FAST_PATHS:
        assert _python_frames(lambda: op(a, b)) == []
        assert _python_frames(lambda: scale(a, 2.0)) == []
        assert _python_frames(lambda: affine(x, None, 2.0, 1, True)) == []
    else:  # plain calls cannot be told: Python's autograd kernel takes every call
        assert f"{TILEJIT}/frameworks/torch/autograd.py:autograd_kernel" in _python_frames(
            lambda: op(a, b))


def test_every_input_kind_and_the_return_order(kernels):
    affine, sum_diff = kernels["affine"], kernels["sum_diff"]
    x = torch.arange(4, dtype=torch.float64)
    bias = torch.full((4,), 0.5, dtype=torch.float64)
    for args in [(x, None, 2.0, 3, True), (x, bias, -1.5, -7, True), (x, bias, 2.0, 3, False)]:
        torch.testing.assert_close(affine.torch_op(*args), affine(*args))
    a, b = torch.arange(5.0), torch.full((5,), 2.0)
    d, s = sum_diff.torch_op(a, b)  # out_idx=[3, 2]: D first
    torch.testing.assert_close(d, a - b)
    torch.testing.assert_close(s, a + b)


@pytest.mark.parametrize("case", ["dtype", "shape", "bias shape", "strides"])
def test_refusals_carry_the_direct_calls_message(kernels, case):
    affine = kernels["affine"]
    x = torch.arange(4, dtype=torch.float64)
    args = {"dtype": (x.float(), None, 1.0, 1, True),
            "shape": (x.reshape(2, 2), None, 1.0, 1, True),
            "bias shape": (x, torch.ones(3, dtype=torch.float64), 1.0, 1, True),
            "strides": (torch.arange(8, dtype=torch.float64)[::2], None, 1.0, 1, True)}[case]
    with pytest.raises(ValueError) as direct:
        affine(*args)
    with pytest.raises(ValueError) as through_op:
        affine.torch_op(*args)
    assert str(through_op.value) == str(direct.value)
    assert str(direct.value).startswith("affine: argument ")


def test_none_for_a_required_buffer_carries_the_direct_calls_message(kernels):
    # torch hands None for a Tensor to the op as an undefined tensor: refused as None,
    # not as a tensor DLPack cannot read.
    affine = kernels["affine"]
    with pytest.raises(TypeError) as direct:
        affine(None, None, 1.0, 1, True)
    # The same class: the C registration throws the core's TypeError as torch's own
    # operators do (c10::TypeError), the Python one raises it.
    with pytest.raises(TypeError) as through_op:
        affine.torch_op(None, None, 1.0, 1, True)
    assert type(through_op.value) is TypeError
    assert str(through_op.value) == str(direct.value)
    assert str(direct.value).endswith("got None (the parameter is not optional)")


def _torch_dtypes() -> list:
    """Every dtype this torch has that a 1-d tensor can be made of."""
    found = []
    for value in vars(torch).values():
        if isinstance(value, torch.dtype) and value not in found:
            try:
                torch.zeros(8, dtype=torch.uint8).view(value)
            except (RuntimeError, TypeError):
                continue
            found.append(value)
    return found


@pytest.mark.parametrize("dtype", _torch_dtypes(), ids=str)
def test_every_torch_dtype_is_read_as_the_direct_call_reads_it(kernels, dtype):
    # The op reads torch's tensor handles with its own dtype table: every dtype means what
    # torch's __dlpack__ says it means, so a refusal is the direct call's, class and words.
    scale = kernels["scale"]
    x = torch.zeros(8, dtype=torch.uint8).view(dtype)
    if dtype == torch.float32:
        torch.testing.assert_close(scale.torch_op(x, 2.0), scale(x, 2.0))
        return
    with pytest.raises(Exception) as direct:
        scale(x, 2.0)
    with pytest.raises(Exception) as through_op:
        scale.torch_op(x, 2.0)
    assert type(through_op.value) is type(direct.value) is ValueError
    # The words differ where torch's __dlpack__ and its C ABI disagree: torch 2.9's
    # __dlpack__ refuses float8 tensors, which its C ABI reads; __dlpack__ exports the
    # sub-byte integer dtypes (uint1 to int7) as 8-bit integers, which the C ABI has no
    # dtype function for.
    if all("expected dtype float32" in str(e.value) for e in (direct, through_op)):
        assert str(through_op.value) == str(direct.value)


@pytest.mark.parametrize("error", [TypeError, ValueError])
def test_an_exception_of_the_ops_python_autograd_keeps_its_class(error, tilejit_cache_dir):
    # A call requiring grad goes from the C autograd kernel to Python's, whose exception
    # crosses torch's C++ as the class the core's status table names for it.
    # A kernel of its own: a registration is the op's, which every kernel of the same
    # content shares.
    n = T.symbol("n")
    name = f"scale_{error.__name__.lower()}"
    k = _build(name, [T.Buffer((n,), "float32", name="X", const=True),
                      T.Buffer((n,), "float32", name="Y"),
                      T.Scalar("float32", name="factor")],
               SCALE.replace("void scale(", f"void {name}("), out_idx=1)

    def setup_context(ctx, inputs, output):
        raise error("setup_context refuses")

    k.register_autograd(lambda ctx, g: (g, None), setup_context=setup_context)
    x = torch.ones(3, requires_grad=True)
    for call in (k, k.torch_op):
        with pytest.raises(error, match="^setup_context refuses$") as raised:
            call(x, 2.0)
        assert type(raised.value) is error


def test_a_dispatch_mode_sees_the_op_and_its_python_autograd_runs(kernels):
    op = kernels["sum_diff"].torch_op
    a, b = torch.arange(3.0), torch.ones(3)
    seen = []

    class Watching(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watching():
        frames = _python_frames(lambda: op(a, b))
    assert op in seen
    # Python's autograd kernel ran: handed over by the C one (or registered itself, without
    # fast paths).
    assert any(f == f"{TILEJIT}/frameworks/torch/autograd.py:{name}"
               for f in frames for name in ("without_keyset", "autograd_kernel"))


def test_a_call_requiring_grad_goes_to_pythons_autograd(kernels):
    scale = kernels["scale"]
    x = torch.arange(3.0, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^scale: argument 0 'X' requires grad, but no "
                                           r"backward is registered"):
        scale.torch_op(x, 2.0)
    with torch.no_grad():
        torch.testing.assert_close(scale.torch_op(x, 2.0), x.detach() * 2.0)
    with torch.inference_mode():
        torch.testing.assert_close(scale.torch_op(x, 2.0), x.detach() * 2.0)


def test_autograd_records_through_the_c_kernel():
    build = _build
    n = T.symbol("n")
    params = [T.Buffer((n,), "float32", name="X", const=True),
              T.Buffer((n,), "float32", name="Y"), T.Scalar("float32", name="factor")]
    k = build("scale_grad", params, SCALE.replace("scale(", "scale_grad("), out_idx=1)
    k.register_autograd(lambda ctx, g: (g * ctx.factor, None),
                        setup_context=lambda ctx, inputs, output: setattr(ctx, "factor",
                                                                          inputs[1]))
    x = torch.arange(4.0, requires_grad=True)
    y = k.torch_op(x, 3.0)
    assert y.grad_fn is not None
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0))
    with torch.inference_mode():
        assert k.torch_op(x, 3.0).grad_fn is None


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=subprocess_env(**env), timeout=600, check=False)


def test_the_python_registration_behaves_the_same(tmp_path):
    code = f"""
    import torch, tilejit
    from tilejit import T
    from tilejit.frameworks.torch import native_op
    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program("sum_diff", [
        T.Buffer((n,), "float32", name="A", const=True),
        T.Buffer((n,), "float32", name="B", const=True),
        T.Buffer((n,), "float32", name="S"), T.Buffer((n,), "float32", name="D")],
        {SUM_DIFF!r}), out_idx=[3, 2])
    print(native_op.describe())
    d, s = k.torch_op(torch.arange(3.0), torch.ones(3))
    print(d.tolist(), s.tolist())
    try:
        k.torch_op(torch.arange(3.0), torch.ones(4))
    except ValueError as exc:
        print(type(exc).__name__, exc)
    """
    c, python = _run(code), _run(code, TILEJIT_TORCH_OPS="python")
    assert c.returncode == 0 and python.returncode == 0, c.stderr + python.stderr
    assert c.stdout.splitlines()[0] == "in C, through torch's stable C ABI"
    assert python.stdout.splitlines()[0] == "in Python (TILEJIT_TORCH_OPS=python)"
    assert c.stdout.splitlines()[1:] == python.stdout.splitlines()[1:]
    assert c.stdout.splitlines()[1] == "[-1.0, 0.0, 1.0] [1.0, 2.0, 3.0]"
    assert c.stdout.splitlines()[2].startswith("ValueError sum_diff: argument 1 'B': ")
    bad = _run("from tilejit.frameworks.torch import native_op", TILEJIT_TORCH_OPS="C")
    assert bad.returncode == 1
    assert "TILEJIT_TORCH_OPS='C': expected one of c, python" in bad.stderr


def _torch_suites_with_the_python_registration(work: Path):
    tests = [str(ROOT / "tests" / name) for name in ("test_torch_op.py",
                                                      "test_torch_autograd.py")]
    # One backend: the op's registration is what differs, not the direct call.
    return ([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
             "-k", "not dlpack and not ctypes", *tests],
            subprocess_env(TILEJIT_TORCH_OPS="python"), ROOT)


PYTHON_REGISTRATION = Background(_torch_suites_with_the_python_registration, timeout=1200)


@pytest.mark.slow
@pytest.mark.background(PYTHON_REGISTRATION)
def test_the_torch_suites_pass_with_the_python_registration():
    done = PYTHON_REGISTRATION.result()
    tail = "\n".join(done.stdout.splitlines()[-20:])
    assert done.returncode == 0, tail + done.stderr[-3000:]
    assert " passed" in tail and "failed" not in tail


# ---- Exports: torch_op.so ------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(kernels, tmp_path_factory):
    """The affine kernel's export, moved away from where it was written."""
    directory = kernels["affine"].export(tmp_path_factory.mktemp("written") / "affine")
    moved = tmp_path_factory.mktemp("moved") / "affine"
    shutil.copytree(directory, moved)
    shutil.rmtree(directory)
    return moved


def test_an_export_carries_torch_op_so_and_its_core(exported, kernels):
    names = sorted(os.listdir(exported))
    core = [n for n in names if n.startswith("libtilejit_core-") and n.endswith(".so")]
    assert len(core) == 1
    assert names == sorted(["MANIFEST", "kernel.h", "kernel.so", "signature.tj",
                            "torch_op.so", "torch_op.txt", *core])
    assert (exported / "torch_op.txt").read_text().splitlines() == [
        "tilejit-torch-op 1", "namespace tilejit",
        (f"schema {kernels['affine'].artifact.op_name}(Tensor X, Tensor? bias, float a, "
         "SymInt k, bool flag) -> Tensor"),
        "inputs Ttfib", "order 0"]


def test_torch_loads_the_op_without_tilejit(exported, kernels, tmp_path):
    name = kernels["affine"].artifact.op_name
    code = NO_TILEJIT + f"""
torch.ops.load_library({str(exported / "torch_op.so")!r})
op = torch.ops.tilejit.{name}.default
print(op._schema)
x = torch.arange(4, dtype=torch.float64)
print(op(x, None, 2.0, 3, True).tolist(), op(x, x, 1.0, 0, False).tolist())
try:
    op(x.float(), None, 2.0, 3, True)
except ValueError as exc:
    print("ValueError", exc)
print(sorted(m for m in sys.modules if m.startswith("tilejit")))
"""
    # No compiler and an empty cache: nothing is built, nothing is read from a cache.
    done = _run(code, PATH="/nonexistent", TILEJIT_CACHE_DIR=str(tmp_path / "empty"),
                PYTHONPATH="")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    x = torch.arange(4, dtype=torch.float64)
    assert done.stdout.splitlines() == [
        str(kernels["affine"].torch_op._schema),
        f"{kernels['affine'](x, None, 2.0, 3, True).tolist()} {(x + x).tolist()}",
        "ValueError affine: argument 0 'X': expected dtype float64, got float32",
        "[]"]


def test_tilejit_takes_the_op_a_torch_op_so_loaded_first_registered(exported, kernels):
    # The export's torch_op.so loaded first defines the op; the same kernel made afterwards
    # in that process takes it (no second definition), its fake implementation and its
    # autograd kernel added: the op, torch.compile and autograd all work.
    name = kernels["affine"].artifact.op_name
    code = f"""
    import torch
    torch.ops.load_library({str(exported / "torch_op.so")!r})
    import tilejit
    from tilejit import T
    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program("affine", [
        T.Buffer((n,), "float64", name="X", const=True),
        T.Buffer((n,), "float64", name="bias", optional=True, const=True),
        T.Buffer((n,), "float64", name="Y"), T.Scalar("float64", name="a"),
        T.Scalar("int32", name="k"), T.Scalar("bool", name="flag")], {AFFINE!r}), out_idx=2)
    assert k.torch_op is torch.ops.tilejit.{name}.default
    x = torch.arange(4, dtype=torch.float64)
    print(k.torch_op(x, None, 2.0, 3, True).tolist())
    compiled = torch.compile(lambda t: k(t, None, 2.0, 3, True) + 1, fullgraph=True)
    print(compiled(x).tolist())
    try:
        k(x.clone().requires_grad_(), None, 2.0, 3, True)
    except RuntimeError as exc:
        print("RuntimeError", exc)
    k.register_autograd(lambda ctx, g: (2.0 * g, None, None, None, None))
    leaf = x.clone().requires_grad_()
    k(leaf, None, 2.0, 3, True).sum().backward()
    print(leaf.grad.tolist())
    """
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[3.0, 5.0, 7.0, 9.0]", "[4.0, 6.0, 8.0, 10.0]",
        ("RuntimeError affine: argument 0 'X' requires grad, but no backward is registered for "
         "this kernel, so its outputs would carry no gradient. Register one with "
         "kernel.register_autograd(backward), or call the kernel under torch.no_grad() or on "
         "detached tensors"),
        "[2.0, 2.0, 2.0, 2.0]"]


def test_a_damaged_torch_op_txt_is_refused_by_name(exported, tmp_path):
    import hashlib

    damaged = tmp_path / "damaged"
    shutil.copytree(exported, damaged)
    text = (damaged / "torch_op.txt").read_text().replace("inputs Ttfib", "outputs 1")
    (damaged / "torch_op.txt").write_text(text)
    data = text.encode()
    manifest = [f"file torch_op.txt {len(data)} {hashlib.sha256(data).hexdigest()}"
                if line.startswith("file torch_op.txt ") else line
                for line in (damaged / "MANIFEST").read_text().splitlines()]
    (damaged / "MANIFEST").write_text("\n".join(manifest) + "\n")
    done = _run(NO_TILEJIT + f"torch.ops.load_library({str(damaged / 'torch_op.so')!r})")
    assert done.returncode == 0
    assert done.stderr == (f"tilejit: {damaged}/torch_op.so: the operator is not registered: "
                           f"tilejit export {damaged}: torch_op.txt: line 4: unknown entry "
                           "'outputs 1'\n")
    (damaged / "torch_op.txt").write_text(text + "# edited\n")  # MANIFEST's hash no longer
    done = _run(NO_TILEJIT + f"torch.ops.load_library({str(damaged / 'torch_op.so')!r})")
    assert "torch_op.txt: 159 bytes, but MANIFEST lists 150: the file was changed" in done.stderr


def test_a_c_program_links_the_core_inside_the_export(exported, tmp_path):
    source = tmp_path / "app.c"
    source.write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include <tilejit/core.h>
        int main(int argc, char **argv) {
          tj_kernel *k = NULL;
          if (argc < 2 || tj_kernel_open(argv[1], &k) != TJ_OK) {
            fprintf(stderr, "%s\\n", tj_last_error());
            return 1;
          }
          printf("%s %d\\n", tj_kernel_name(k), tj_kernel_num_outputs(k));
          tj_kernel_free(k);
          return 0;
        }
        """))
    core = next(exported.glob("libtilejit_core-*.so"))
    app = tmp_path / "app"
    include = ROOT / "core" / "include"
    subprocess.run(["cc", str(source), f"-I{include}", f"-L{exported}", f"-l:{core.name}",
                    f"-Wl,-rpath,{exported}", "-o", str(app)], check=True)
    done = subprocess.run([str(app), str(exported)], capture_output=True, text=True,
                          env={"PATH": "/nonexistent", "TILEJIT_CACHE_DIR": str(tmp_path)},
                          timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "affine 1\n", "")


# The model's package and the kernel's export, made by a child process that starts once
# the tests are collected (inductor's compile takes most of a minute) and writes them to
# the directory it is given.
AOTI_BUILD = """
import sys
from pathlib import Path

import torch

import tilejit
from tilejit import T

out = Path(sys.argv[1])
n = T.symbol("n")
add = tilejit.compile(tilejit.Program(
    "aoti_add", [T.Buffer((n,), "float32", name="A", const=True),
                 T.Buffer((n,), "float32", name="B", const=True),
                 T.Buffer((n,), "float32", name="C")],
    "void aoti_add(const float *A, const float *B, float *C, int64_t n) {\\n"
    "  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];\\n}\\n"), out_idx=-1)


class Model(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(add(x, y)) * 2


x, y = torch.randn(8), torch.randn(8)
# A graph compiled first: tilejit's Inductor lowering is installed, and must leave
# AOTInductor's C++ wrapper to the op's fallback kernel.
assert torch.equal(torch.compile(lambda a, b: add(a, b), fullgraph=True)(x, y), x + y)
program = torch.export.export(Model(), (x, y))
assert any(str(node.target).startswith("tilejit.") for node in program.graph.nodes)
torch._inductor.aoti_compile_and_package(program, package_path=str(out / "model.pt2"))
add.export(out / "aoti_add")
torch.save((x, y, Model()(x, y)), out / "io.pt")
"""
def _aoti_package(work: Path):
    return ([sys.executable, "-c", AOTI_BUILD, str(work)],
            clean_subprocess_env(work / "cache"), ROOT)


AOTI_PACKAGE = Background(_aoti_package, timeout=900)


@pytest.mark.slow
@pytest.mark.background(AOTI_PACKAGE)
def test_an_aotinductor_package_runs_with_only_torch_and_torch_op_so():
    pytest.importorskip("torch._inductor")
    built = AOTI_PACKAGE.result()
    assert built.returncode == 0, built.stderr[-3000:]
    work = AOTI_PACKAGE.work
    package, exported = str(work / "model.pt2"), work / "aoti_add"
    done = _run(NO_TILEJIT + f"""
torch.ops.load_library({str(exported / "torch_op.so")!r})
runner = torch._inductor.aoti_load_package({package!r})
x, y, expected = torch.load({str(work / "io.pt")!r})
torch.testing.assert_close(runner(x, y), expected)
print("ok", sorted(m for m in sys.modules if m.startswith("tilejit")))
""", PYTHONPATH="")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok []\n"
    # docs/torch-compile.md's C++ loader, on the same package and export.
    if shutil.which("g++") is None:
        return
    page = (ROOT / "docs" / "torch-compile.md").read_text()
    (source,) = re.findall(r"```cpp\n(.*?)```", page, re.DOTALL)
    (work / "run_model.cpp").write_text(source)
    lib = Path(torch.__file__).parent
    subprocess.run(["g++", "-std=c++20", "-O1", str(work / "run_model.cpp"),
                    f"-I{lib}/include", f"-I{lib}/include/torch/csrc/api/include",
                    f"-L{lib}/lib", "-Wl,--no-as-needed", "-ltorch", "-ltorch_cpu", "-lc10",
                    "-Wl,--as-needed", f"-Wl,-rpath,{lib}/lib",
                    "-o", str(work / "run_model")], check=True, capture_output=True)
    done = subprocess.run([str(work / "run_model"), package,
                           str(exported / "torch_op.so")], capture_output=True, text=True,
                          timeout=120, check=False)
    x, y = torch.arange(8, dtype=torch.float32) - 4, torch.ones(8)
    expected = float((torch.relu(x + y) * 2).sum())
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"[8] {expected:g}\n"


def test_the_cached_torch_op_so_is_an_entry_of_the_cache(exported, tilejit_cache_dir):
    import json

    listed = subprocess.run([sys.executable, "-m", "tilejit", "cache", "ls", "--json"],
                            capture_output=True, text=True, check=True, timeout=120,
                            env=subprocess_env(TILEJIT_CACHE_DIR=str(tilejit_cache_dir)))
    entries = [e for e in json.loads(listed.stdout) if e["name"] == "tilejit torch_op.so"]
    assert len(entries) == 1 and entries[0]["key"].endswith("-torch_op"), listed.stdout
    assert entries[0]["damaged"] is None
    assert (Path(entries[0]["path"]) / "torch_op.so").read_bytes() == (
        exported / "torch_op.so").read_bytes()


def test_grad_off_tensors_requiring_grad_run_in_c_and_tangents_are_refused(kernels):
    # Inside a custom autograd.Function's forward (and a compiled training graph's), grad
    # mode is off and the inputs still require grad: nothing to record, a plain call.
    op = kernels["sum_diff"].torch_op
    a, b = torch.arange(3.0, requires_grad=True), torch.ones(3)
    with torch.no_grad():
        op(a, b)
        frames = _python_frames(lambda: op(a, b))
    if FAST_PATHS:
        assert frames == []
    else:  # Python's autograd kernel takes every call
        assert f"{TILEJIT}/frameworks/torch/autograd.py:autograd_kernel" in frames
    # A forward-mode tangent is refused with grad mode off too, as with it on.
    from torch.autograd import forward_ad

    with forward_ad.dual_level(), torch.no_grad():
        dual = forward_ad.make_dual(torch.arange(3.0), torch.ones(3))
        with pytest.raises(RuntimeError, match=r"^sum_diff: argument 0 'A' carries a "
                                               r"forward-mode AD tangent"):
            op(dual, b)


def test_load_adopts_the_core_an_export_carries_where_none_can_be_built(exported, tmp_path):
    # An empty cache and no compiler: tilejit.load takes the export's own copy of the core
    # (its SHA-256 checked against MANIFEST) instead of building one.
    code = f"""
import torch, tilejit
k = tilejit.load({str(exported)!r}, execution_backend="ctypes")
x = torch.arange(3, dtype=torch.float64)
print(k(x, None, 2.0, 1, True).tolist())
"""
    cache = tmp_path / "cache"
    done = _run(code, PATH="/nonexistent", TILEJIT_CACHE_DIR=str(cache))
    assert (done.returncode, done.stdout) == (0, "[1.0, 3.0, 5.0]\n"), done.stderr
    core = next(exported.glob("libtilejit_core-*.so"))
    assert (cache / "core" / core.name[len("libtilejit_core-"):-3] / core.name).read_bytes() == \
        core.read_bytes()
    # A copy that is not what MANIFEST lists is never adopted: the core is built instead,
    # which fails here for want of a compiler.
    damaged = tmp_path / "damaged"
    shutil.copytree(exported, damaged)
    data = bytearray(core.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (damaged / core.name).write_bytes(bytes(data))
    done = _run(code.replace(str(exported), str(damaged)), PATH="/nonexistent",
                TILEJIT_CACHE_DIR=str(tmp_path / "cache2"))
    assert done.returncode == 1 and "no C compiler found" in done.stderr, done.stderr
