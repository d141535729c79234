"""kernel.export / tilejit.load / tj_kernel_open: kernels that leave the Python process.

Loaded kernels must behave as the kernels that were exported (results, checks and
messages, outputs, symbols, with_backend, torch_op), open with no compiler at hand, and
every damaged export must be refused naming the directory, the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from conftest import REPO_ROOT, assert_reads_back, load_fakes

import tilejit
from tilejit import T
from tilejit.native._build import build_tools

HERE = Path(__file__).resolve().parent
DOCS = REPO_ROOT / "docs" / "export.md"

# Every parameter kind: symbols, expressions, strides, an optional buffer, a pointer,
# scalars of every width, and outputs returned in an order of their own.
EVERYTHING = r"""
#include <stdbool.h>
void everything(const float *A, const double *B, const float *bias, float *P, int8_t *S,
                float *T2, const float *Q, int8_t i8, int16_t i16, int32_t i32, int64_t i64,
                uint8_t u8, uint16_t u16, uint32_t u32, uint64_t u64, float f32, double f64,
                bool flag, int64_t m, int64_t n, int64_t s) {
  double total = (double)i8 + i16 + i32 + (double)i64 + u8 + u16 + u32 + (double)u64
                 + f32 + f64 + flag;
  for (int64_t i = 0; i < m; ++i) {
    float row = 0;
    for (int64_t j = 0; j < n; ++j) row += A[i * s + j];
    P[i] = row + (bias ? bias[i] : 0) + (float)B[i] + (Q ? Q[0] : 0);
  }
  for (int64_t i = 0; i < m + 1; ++i) T2[i] = (float)total;
  S[0] = (int8_t)m;
}
"""


def _everything_program():
    m, n = T.symbol("m"), T.symbol("n", divisibility=2)
    s = T.symbol("s")
    return tilejit.Program("everything", [
        T.Buffer((m, n), "float32", strides=(s, 1), name="A", const=True),
        T.Buffer((m,), "float64", name="B", const=True, align=8),
        T.Buffer((m,), "float32", name="bias", const=True, optional=True),
        T.Buffer((m,), "float32", name="P"),
        T.Buffer((1,), "int8", name="S"),
        T.Buffer((m + 1,), "float32", name="T2"),
        T.Pointer("float32", name="Q", const=True),
        *(T.Scalar(dt, name=name) for dt, name in (
            ("int8", "i8"), ("int16", "i16"), ("int32", "i32"), ("int64", "i64"),
            ("uint8", "u8"), ("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"),
            ("float32", "f32"), ("float64", "f64"), ("bool", "flag")))], EVERYTHING)


SCALARS = (-3, 300, -70000, 2**40, 200, 60000, 2**31 + 5, 2**63 + 7, 0.5, 0.25, True)


def _everything_args(m=6, n=4):
    a = torch.rand(m, 2 * n)[:, :n]  # strided rows: s = 2n
    b = torch.rand(m, dtype=torch.float64)
    return (a, b, None, torch.ones(1), *SCALARS)


@pytest.fixture(scope="module")
def everything(tilejit_cache_dir):
    return tilejit.compile(_everything_program(), out_idx=[5, 3, 4])


@pytest.fixture(scope="module")
def exported(everything, tmp_path_factory):
    # A space in the path: the manifest names files, never paths.
    return everything.export(tmp_path_factory.mktemp("exports") / "my kernels" / "everything")


BACKENDS = ["cython", "dlpack", "ctypes"]


def _error(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test compares whatever is raised
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loaded_kernel_behaves_as_the_exported_one(everything, exported, backend):
    loaded = tilejit.load(exported, execution_backend=backend)
    original = everything.with_backend(backend)
    assert loaded.execution_backend == backend
    assert loaded.c_prototype == original.c_prototype
    assert loaded.out_idx == [5, 3, 4] and [str(s) for s in loaded.symbols] == ["m", "n", "s"]
    assert repr(loaded.params) == repr(original.params)
    assert_reads_back(original, loaded)
    args = _everything_args()
    for got, want in zip(loaded(*args), original(*args)):
        torch.testing.assert_close(got, want)
    t2, p, s = loaded(*args)
    assert t2.shape == (7,) and p.shape == (6,) and s.tolist() == [6]
    bias = torch.rand(6)
    torch.testing.assert_close(loaded(*args[:2], bias, *args[3:])[1],
                               original(*args[:2], bias, *args[3:])[1])
    # NumPy in, NumPy out; inputs by name.
    a, b = np.random.rand(3, 4).astype(np.float32), np.random.rand(3)
    np.testing.assert_allclose(loaded(a, b, None, None, *SCALARS)[1],
                               original(a, b, None, None, *SCALARS)[1])
    named = dict(zip(["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64",
                      "flag"], SCALARS))
    torch.testing.assert_close(loaded(*args[:4], **named)[0], original(*args[:4], **named)[0])
    # Every refusal is the original's, message included.
    bad_calls = [
        lambda k: k(args[0].double(), *args[1:]),
        lambda k: k(torch.rand(6, 3), *args[1:]),                 # n not a multiple of 2
        lambda k: k(args[0], torch.rand(5, dtype=torch.float64), *args[2:]),
        lambda k: k(args[0].contiguous().t(), *args[1:]),
        lambda k: k(*args[:4], 200, *SCALARS[1:]),               # int8 out of range
        lambda k: k(*args[:-1], "yes"),
        lambda k: k(*args[:5]),
        lambda k: k(args[0], args[1][::2], *args[2:]),
    ]
    for call in bad_calls:
        refused = _error(lambda call=call: call(loaded))
        assert refused is not None and refused == _error(lambda call=call: call(original))
    # The same kernel to torch: the same op, so compiled graphs and backwards carry over.
    assert loaded.artifact.op_name == original.artifact.op_name
    assert loaded.with_backend("ctypes").execution_backend == "ctypes"
    torch.testing.assert_close(loaded.with_backend("ctypes")(*args)[0], original(*args)[0])


SQUARE = ("void square(const double *X, double *Y, int64_t n) {\n"
          "  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * X[i];\n}\n")


def test_the_torch_op_and_backward_of_a_loaded_kernel(tmp_path, tilejit_cache_dir):
    n = T.symbol("n")
    square = tilejit.compile(tilejit.Program("square", [
        T.Buffer((n,), "float64", name="X", const=True), T.Buffer((n,), "float64", name="Y")],
        SQUARE), out_idx=-1)
    loaded = tilejit.load(square.export(tmp_path / "square"))
    assert loaded.artifact.op_name == square.artifact.op_name
    x = torch.rand(5, dtype=torch.float64)
    compiled = torch.compile(lambda t: loaded(t) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), x * x * 2)
    # A backward registered on the original is the loaded kernel's: it is the same op.
    square.register_autograd(lambda ctx, g: 2 * g * ctx.saved_tensors[0],
                             setup_context=lambda ctx, inputs, output: ctx.save_for_backward(
                                 inputs[0]))
    leaf = x.clone().requires_grad_()
    loaded(leaf).sum().backward()
    torch.testing.assert_close(leaf.grad, 2 * x)


def _child_without_compilers(tmp_path, tilejit_cache_dir) -> dict:
    """A child's environment in which no compiler can run: an empty PATH, and the
    variables naming compilers pointing at nothing (TILEJIT_CC is part of the core's
    cache key: it stays as it is, so the child finds the core this process built)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    paths = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(PATH=str(empty), PYTHONPATH=os.pathsep.join(paths), CC="/nonexistent/cc",
               CXX="/nonexistent/c++",
               TILEJIT_NVCC="/nonexistent/nvcc", TILEJIT_NVRTC="/nonexistent/libnvrtc.so",
               TILEJIT_CACHE_DIR=str(tilejit_cache_dir))
    return env


def test_load_in_a_fresh_process_without_compilers(everything, exported, tmp_path,
                                                   tilejit_cache_dir):
    args = _everything_args()
    want = [t.tolist() for t in everything(*args)]
    code = textwrap.dedent(f"""
        import sys, torch, tilejit
        k = tilejit.load({str(exported)!r})
        a = torch.arange(48, dtype=torch.float32).reshape(6, 8)[:, :4]
        b = torch.arange(6, dtype=torch.float64)
        out = k(a, b, None, torch.ones(1), *{SCALARS!r})
        print([t.tolist() for t in out])
        try:
            k(a.double(), b, None, None, *{SCALARS!r})
        except ValueError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_child_without_compilers(tmp_path, tilejit_cache_dir),
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    a = torch.arange(48, dtype=torch.float32).reshape(6, 8)[:, :4]
    b = torch.arange(6, dtype=torch.float64)
    first, second = done.stdout.splitlines()
    assert first == str([t.tolist() for t in everything(a, b, None, torch.ones(1), *SCALARS)])
    assert second == "everything: argument 0 'A': expected dtype float32, got float64"
    assert len(want) == 3


# ---- Writing: refusing, replacing ------------------------------------------------------------


def test_export_refuses_a_non_empty_directory_and_replaces_it_when_asked(everything, tmp_path):
    target = tmp_path / "k"
    target.mkdir()
    everything.export(target)  # an empty directory is taken
    (target / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"everything: cannot export to .*k: the "
                                              r"directory is not empty \(pass overwrite=True"):
        everything.export(target)
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError, match="it is a file"):
        everything.export(tmp_path / "file")
    everything.export(target, overwrite=True)
    assert not (target / "notes.txt").exists()
    # A kernel with a T.Pointer cannot be a torch op: no torch_op.so (test_torch_native.py).
    assert sorted(os.listdir(target)) == ["MANIFEST", "kernel.h", "kernel.so", "signature.tj"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    tilejit.load(target)


def test_the_manifest_lists_every_file_with_its_hash(exported):
    lines = (exported / "MANIFEST").read_text().splitlines()
    assert lines[:4] == ["tilejit-export 1", f"tilejit {tilejit.__version__}", "target cpu",
                         f"arch {os.uname().machine}"]
    files = {}
    for line in lines[4:]:
        key, name, size, digest = line.split()
        assert key == "file"
        files[name] = (int(size), digest)
    assert set(files) == {"kernel.h", "kernel.so", "signature.tj"}
    for name, (size, digest) in files.items():
        data = (exported / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest)


# ---- Damaged exports -------------------------------------------------------------------------


def _rehash(directory: Path, name: str) -> None:
    """Rewrites MANIFEST's line for ``name`` to match the file as it now is."""
    data = (directory / name).read_bytes()
    lines = [f"file {name} {len(data)} {hashlib.sha256(data).hexdigest()}"
             if line.startswith(f"file {name} ") else line
             for line in (directory / "MANIFEST").read_text().splitlines()]
    (directory / "MANIFEST").write_text("\n".join(lines) + "\n")


def _edit(directory: Path, name: str, old: str, new: str, rehash: bool = True) -> None:
    text = (directory / name).read_text()
    assert old in text, (old, text)
    (directory / name).write_text(text.replace(old, new, 1))
    if rehash and name != "MANIFEST":
        _rehash(directory, name)


def _drop_lines(directory: Path, name: str, starts: tuple) -> None:
    lines = (directory / name).read_text().splitlines(keepends=True)
    (directory / name).write_text("".join(x for x in lines if not x.startswith(starts)))
    _rehash(directory, name)


def _flip_byte(directory: Path, name: str) -> None:
    data = bytearray((directory / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (directory / name).write_bytes(bytes(data))


DAMAGES = {
    "image changed": (lambda d: _flip_byte(d, "kernel.so"),
                      (r"kernel.so: its SHA-256 is [0-9a-f]{64}, but MANIFEST lists "
                       r"[0-9a-f]{64}: the file was changed")),
    "image truncated": (lambda d: (d / "kernel.so").write_bytes(b"\x7fELF"),
                        r"kernel.so: 4 bytes, but MANIFEST lists \d+"),
    "image missing": (lambda d: (d / "kernel.so").unlink(),
                      r"kernel.so: cannot read it \(No such file or directory\)"),
    "header changed": (lambda d: _edit(d, "kernel.h", "float32", "float64", rehash=False),
                       "kernel.h: its SHA-256 is"),
    "signature changed": (lambda d: _edit(d, "signature.tj", "scalar 7 i8 0:8:1",
                                          "scalar 7 i8 1:8:1", rehash=False),
                          "signature.tj: its SHA-256 is"),
    "no manifest": (lambda d: (d / "MANIFEST").unlink(),
                    (r"MANIFEST: cannot read it \(No such file or directory\): is this a "
                     "tilejit export directory")),
    "unknown export format": (lambda d: _edit(d, "MANIFEST", "tilejit-export 1",
                                              "tilejit-export 2"),
                              (r"MANIFEST: export format version 2; this tilejit \(\S+\) "
                               "reads version 1")),
    "unknown signature format": (lambda d: _edit(d, "signature.tj", "tilejit-signature 1",
                                                 "tilejit-signature 7"),
                                 r"signature.tj: line 1: signature format version 7"),
    "another machine": (lambda d: _edit(d, "MANIFEST", f"arch {os.uname().machine}",
                                        "arch riscv64"),
                        (f"MANIFEST: a cpu kernel for riscv64; this machine is "
                         f"{os.uname().machine}")),
    "unknown target": (lambda d: _edit(d, "MANIFEST", "target cpu", "target tpu"),
                       "MANIFEST: target 'tpu'; expected cpu or cuda"),
    "a path outside": (lambda d: _edit(d, "MANIFEST", "file kernel.h ", "file ../kernel.h "),
                       r"MANIFEST: line \d+: '../kernel.h' is not a plain file name"),
    "unknown entry": (lambda d: _edit(d, "MANIFEST", "target cpu", "target cpu\nsigned-by me"),
                      "MANIFEST: line 4: unknown entry 'signed-by'"),
    "signature unlisted": (lambda d: _edit(d, "MANIFEST", "file signature.tj", "file other.tj"),
                           "other.tj: cannot read it"),
    "load names an unlisted file": (
        lambda d: _edit(d, "signature.tj", "load kernel.so", "load other.so"),
        r"signature.tj: line \d+: 'load' names file 'other.so', which MANIFEST does not list"),
    "garbage entry": (lambda d: _edit(d, "signature.tj", "kernel everything",
                                      "launch_codes 1 2 3\nkernel everything"),
                      r"signature.tj: line 3: expected the 'kernel' line first"),
    "malformed field": (lambda d: _edit(d, "signature.tj", "scalar 7 i8 0:8:1",
                                        "scalar 7 i8 int8"),
                        r"signature.tj: line \d+: dtype 'int8' is not code:bits:lanes"),
    "inconsistent signature": (lambda d: _edit(d, "signature.tj", "symbol m 1 0:64:1",
                                               "symbol m 1 0:64:1\nsymbol m 1 0:64:1"),
                               r"signature.tj: line \d+: .*m"),
    "no load line": (lambda d: _edit(d, "signature.tj", "load kernel.so", "# load kernel.so"),
                     r"signature.tj: line \d+: the file ends before its load line"),
    "wrong entry symbol": (lambda d: _edit(d, "signature.tj", "tilejit_packed_entry",
                                           "not_an_entry"),
                           r"signature.tj: line \d+: .*not_an_entry"),
    # The lines beyond the builder calls, read by the core too.
    "out_idx not the outputs": (
        lambda d: _edit(d, "signature.tj", "out_idx 3 5 3 4", "out_idx 3 5 3 0"),
        (r"signature.tj: line \d+: out_idx \(5, 3, 0\) does not list the output buffers "
        r"\(3, 4, 5\)")),
    "no function": (lambda d: _drop_lines(d, "signature.tj", ("function ", "arg ")),
                    (r"signature.tj: no 'function' line: the Python binding shows each kernel "
                    r"function's prototype")),
    "arg without a function": (
        lambda d: _edit(d, "signature.tj", "out_idx 3 5 3 4",
                        "out_idx 3 5 3 4\narg x 1 0 int8 0 0 7"),
        r"signature.tj: line \d+: 'arg' before any 'function' line"),
    "unknown arg dtype": (lambda d: _edit(d, "signature.tj", "arg i8 1 7 int8", "arg i8 1 7 int9"),
                          (r"signature.tj: function 'everything': argument 'i8': unknown dtype "
                          r"'int9'")),
    "bad arg flag": (lambda d: _edit(d, "signature.tj", "arg i8 1 7 int8 0 0 7",
                                     "arg i8 1 7 int8 2 0 7"),
                     r"signature.tj: line \d+: pointer '2' is not an integer in \[0, 1\]"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_every_damaged_export_is_refused_by_name(exported, tmp_path, damage):
    damaged = tmp_path / "damaged"
    shutil.copytree(exported, damaged)
    spoil, message = DAMAGES[damage]
    spoil(damaged)
    with pytest.raises(ValueError) as info:
        tilejit.load(damaged)
    assert str(info.value).startswith(f"tilejit export {damaged}: "), str(info.value)
    assert re.search(message, str(info.value)), str(info.value)


def test_without_an_out_idx_line_the_outputs_come_in_declaration_order(exported, tmp_path):
    # What a C program writing its own signature.tj may leave out: the core returns the
    # outputs in declaration order, and so does the loaded kernel.
    edited = tmp_path / "edited"
    shutil.copytree(exported, edited)
    _drop_lines(edited, "signature.tj", ("out_idx ",))
    loaded = tilejit.load(edited)
    assert loaded.out_idx == [3, 4, 5]
    p, s, t2 = loaded(*_everything_args())
    assert (p.shape, s.shape, t2.shape) == ((6,), (1,), (7,)) and s.tolist() == [6]


def test_every_expression_the_core_reads_loads(exported, tmp_path):
    # A signature.tj written by hand may use an operation tilejit never writes (unary
    # minus): the core reads it, and so does the loaded kernel.
    edited = tmp_path / "edited"
    shutil.copytree(exported, edited)
    _edit(edited, "signature.tj", "expr 3 2 0 1 1 3 0 m + 1",
          "expr 5 2 0 9 0 9 0 1 1 3 0 -(-m) + 1")
    loaded = tilejit.load(edited)
    assert str(loaded.program.params[5].shape[0]) == "(0 - (0 - m)) + 1"
    assert loaded(*_everything_args())[0].shape == (7,)


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"tilejit export .*nothing: MANIFEST: cannot read"):
        tilejit.load(tmp_path / "nothing")


# ---- Prebuilt CPU libraries ------------------------------------------------------------------


def prebuilt_scale(tmp_path):
    """``(kernel, library)``: a kernel given as a prebuilt library (``binary=``), x *= 3."""
    source = tmp_path / "scale.c"
    source.write_text("void scale(float *x, long n) { for (long i = 0; i < n; ++i) x[i] *= 3; }")
    library = tmp_path / "libscale.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program("scale", [T.Buffer((n,), "float32", name="x")],
                                           binary=library)), library


def test_a_prebuilt_library_exports_with_its_glue(tmp_path, tilejit_cache_dir):
    k, library = prebuilt_scale(tmp_path)
    out = k.export(tmp_path / "scale")
    assert_reads_back(k, tilejit.load(out))
    core = build_tools.core_library_path().name  # with torch_op.so, which links it
    assert sorted(os.listdir(out)) == sorted(["MANIFEST", "glue.so", "kernel.h", "kernel.so",
                                              "signature.tj", "torch_op.so", "torch_op.txt",
                                              core])
    library.unlink()
    x = torch.ones(5)
    tilejit.load(out)(x)
    assert x.tolist() == [3.0] * 5


# ---- CUDA, against the test driver -----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_multi_launch_cuda_kernel_with_tensor_maps_round_trips(fake, tmp_path, backend,
                                                                 tilejit_cache_dir):
    from test_cuda import _tma_program

    fakes = load_fakes()
    k = tilejit.compile(_tma_program(), target="cuda", arch="sm_90a", compiler="nvcc",
                        execution_backend=backend)
    out = k.export(tmp_path / "tma")
    assert "arch sm_90a" in (out / "MANIFEST").read_text()
    assert (out / "kernel.cubin").is_file()
    with pytest.raises(ValueError, match=r"tma.*MANIFEST: a cuda kernel built for sm_90a, which "
                                         r"does not run on this machine's devices \(compute "
                                         r"capability 8.0\)"):
        tilejit.load(out, execution_backend=backend)
    fake.set_capability(9, 0)
    loaded = tilejit.load(out, execution_backend=backend)
    assert loaded.c_prototype == k.c_prototype
    assert_reads_back(k, loaded)  # launches, clusters, flags, tensor maps
    a, c = fakes.FakeCudaTensor((100, 64)), fakes.FakeCudaTensor((100, 64))
    records = []
    for kernel in (k, loaded):
        before = len(fake.launches())
        kernel(a, c, stream=0x77)
        launches = fake.launches()[before:]
        for launch in launches:
            launch.pop("module")  # each kernel loads its own
        records.append((launches, fake.records("cuTensorMapEncodeTiled")[-1]))
    assert records[0] == records[1]
    assert [x["function"] for x in records[1][0]] == ["load_tiles", "finish"]
    with pytest.raises(ValueError, match="tma: argument 0 'A': expected dtype float32"):
        loaded(fakes.FakeCudaTensor((100, 64), dtype="float64"), fakes.FakeCudaTensor((100, 64)))


@pytest.mark.parametrize("arch, capability, runs", [
    ("sm_80", (8, 6), True), ("sm_80", (9, 0), False), ("sm_86", (8, 0), False),
    ("sm_90a", (9, 0), True), ("compute_80", (9, 0), True), ("compute_80", (7, 5), False),
    ("sm_75,sm_90", (9, 0), True), ("sm_75,sm_90", (8, 0), False)])
def test_a_cuda_export_opens_where_its_image_runs(fake, tmp_path, arch, capability, runs,
                                                  tilejit_cache_dir):
    from test_cuda import vec_add_program

    k = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda", arch=arch,
                        compiler="nvcc")
    out = k.export(tmp_path / "vec_add")
    kind = "fatbin" if "," in arch else "ptx" if arch.startswith("compute") else "cubin"
    assert (out / f"kernel.{kind}").is_file() and f"arch {arch}\n" in (out / "MANIFEST").read_text()
    fake.set_capability(*capability)
    if runs:  # and a loaded kernel exports again as it was
        again = tilejit.load(out).export(tmp_path / "again")
        assert (again / "MANIFEST").read_text() == (out / "MANIFEST").read_text()
        a = load_fakes().FakeCudaTensor((1000,))
        tilejit.load(out)(a, a)
        assert fake.launches()[-1]["grid"] == [4, 1, 1]
    else:
        with pytest.raises(ValueError, match=rf"vec_add: MANIFEST: a cuda kernel built for "
                                             rf"{arch}, which does not run on this machine's "
                                             rf"devices \(compute capability "
                                             rf"{capability[0]}.{capability[1]}\)"):
            tilejit.load(out)


def test_a_cuda_export_opens_where_any_device_runs_it(fake, tmp_path, tilejit_cache_dir):
    # A machine of mixed GPUs: the current device (0) cannot run an sm_90a image, device 1
    # can; with none that can, the refusal lists what the machine has.
    from test_cuda import vec_add_program

    out = tilejit.compile(vec_add_program(), out_idx=-1, target="cuda", arch="sm_90a",
                          compiler="nvcc").export(tmp_path / "vec_add")
    fake.set_device_capability(1, 9, 0)
    tilejit.load(out)
    fake.set_device_capability(0, 7, 5)
    fake.set_device_capability(1, 8, 6)
    with pytest.raises(ValueError, match=r"built for sm_90a, which does not run on this "
                                         r"machine's devices \(compute capability 7.5, 8.6\)"):
        tilejit.load(out)


def test_a_cuda_export_needs_a_driver(tmp_path, tilejit_cache_dir, monkeypatch):
    from test_cuda import vec_add_program

    k = tilejit.compile(vec_add_program(), target="cuda", arch="sm_80", compiler="nvcc")
    out = k.export(tmp_path / "vec_add")
    monkeypatch.setenv("TILEJIT_LIBCUDA", str(tmp_path / "no-libcuda.so"))
    code = f"import tilejit; tilejit.load({str(out)!r})"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 1
    assert re.search(r"ValueError: tilejit export .*vec_add: a cuda kernel, but no CUDA device "
                     r"is usable here: ", done.stderr), done.stderr


# ---- C and C++ programs ----------------------------------------------------------------------


def _doc_block(language: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert blocks, f"docs/export.md has no {language} block"
    return blocks[0]


def _config_output(*flags: str) -> str:
    return subprocess.run([sys.executable, "-m", "tilejit", "config", *flags], check=True,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).stdout


def _config(*flags: str) -> list[str]:
    return shlex.split(_config_output(*flags))  # quoted where a directory has a space


def test_config_prints_the_flags_and_directories():
    cflags, libs = _config("--cflags"), _config("--libs")
    # One directory alone is printed as it is: "$(python -m tilejit config --libdir)".
    include, libdir = (_config_output(flag).rstrip("\n") for flag in ("--includedir", "--libdir"))
    assert _config("--includedir", "--libdir") == [include, libdir]
    assert cflags == [f"-I{include}"] and (Path(include) / "tilejit" / "tilejit.h").is_file()
    assert libs == [f"-L{libdir}", "-ltilejit", f"-Wl,-rpath,{libdir}"]
    assert (Path(libdir) / "libtilejit.so").is_file()
    assert _config("--cflags", "--libs") == cflags + libs


def test_the_documented_c_program_calls_an_export(tmp_path, tilejit_cache_dir):
    # The program and the kernel are docs/export.md's own.
    namespace: dict = {}
    code = compile(_doc_block("python").split("\nsame(")[0], "docs/export.md", "exec")
    exec(code, namespace)  # noqa: S102 - the page's own example
    export = namespace["directory"]
    source = tmp_path / "app.c"
    source.write_text(_doc_block("c"))
    app = tmp_path / "app"
    for compiler in ("cc", "c++"):
        flags = ["-x", "c++"] if compiler == "c++" else []
        subprocess.run([compiler, *flags, "-Wall", "-Wextra", "-Werror", str(source),
                        *_config("--cflags"), f"-I{export}", *_config("--libs"),
                        "-o", str(app)], check=True)
        done = subprocess.run([str(app), str(export)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "Y = 2.5 5 7.5 10",
            "refused: axpy: argument 0 'X': expected dtype float32, got int32"]
    (export / "kernel.so").unlink()  # this process has it loaded: a new file, not a write
    (export / "kernel.so").write_bytes(b"\x7fELF")
    done = subprocess.run([str(app), str(export)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    assert re.fullmatch(rf"tilejit export {export}: kernel.so: 4 bytes, but "
                        r"MANIFEST lists \d+: the file was changed\n", done.stderr)


# ---- Edited signatures: refused or loaded, never a crash -------------------------------------

MUTATE = r"""
import hashlib, random, shutil, sys
from pathlib import Path
import tilejit

source, work = Path(sys.argv[1]), Path(sys.argv[2])
rng = random.Random(int(sys.argv[3]))
values = ["-1", "0", "1", "2", "3", "7", "64", "255", "256", "65535", "99999", "2147483647",
          "-2147483648", "9223372036854775807", "-", "x", "1:64:1", "0:64:1", "2:32:1",
          "0:0:0", "17:255:65535", ""]
loaded = refused = 0
for attempt in range(int(sys.argv[4])):
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    lines = (work / "signature.tj").read_text().splitlines()
    for _ in range(rng.randint(1, 3)):
        j = rng.randrange(1, len(lines))
        fields = lines[j].split(" ")
        k = rng.randrange(len(fields))
        roll = rng.random()
        if roll < 0.7:
            fields[k] = rng.choice(values)
        elif roll < 0.85:
            del fields[k]
        else:
            fields.insert(k, rng.choice(values))
        lines[j] = " ".join(fields)
    data = ("\n".join(lines) + "\n").encode()
    (work / "signature.tj").write_bytes(data)
    manifest = [f"file signature.tj {len(data)} {hashlib.sha256(data).hexdigest()}"
                if line.startswith("file signature.tj ") else line
                for line in (work / "MANIFEST").read_text().splitlines()]
    (work / "MANIFEST").write_text("\n".join(manifest) + "\n")
    try:
        tilejit.load(work)
        loaded += 1
    except ValueError as exc:
        assert str(exc).startswith(f"tilejit export {work}: "), exc
        refused += 1
print(loaded, refused)
"""


def test_edited_signatures_are_refused_or_loaded_never_a_crash(exported, tmp_path,
                                                               child_python):
    # Consistent edits (the manifest rehashed) get past the hashes: the core's reading of
    # every field, and Python's of the lines it alone reads, must still hold. In a child:
    # a crash fails the test instead of the run.
    script = tmp_path / "mutate.py"
    script.write_text(MUTATE)
    loaded, refused = map(int, child_python(str(script), str(exported), str(tmp_path / "work"),
                                            "7", "150").split())
    assert loaded + refused == 150 and refused > 100
