"""Inductor calling a kernel without the dispatcher (tilejit.frameworks.torch.inductor):
a compiled graph calls the kernel's direct call into a buffer Inductor allocated, where
the kernel's shape allows; every other kernel, AOTInductor, and ``TILEJIT_FAST_PATHS=0``
go through the op. Results are the same either way, and so are graphs Inductor cached."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="these tests compile graphs with torch.compile")
inductor_utils = pytest.importorskip("torch._inductor.utils",
                                     reason="these tests read the code Inductor generates")
from conftest import python_calls, subprocess_env

from tilejit import T
from tilejit.frameworks.torch import inductor
from tilejit.runtime.fast_paths import FAST_PATHS

ADD = """
void ind_add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""


def _add_params():
    n = T.symbol("n")
    return [T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n,), "float32", name="B", const=True), T.Buffer((n,), "float32", name="C")]


def _compiled(fn, *args, **options):
    """``(result, generated code)`` of ``fn(*args)`` compiled by inductor, Inductor's and
    AOT autograd's caches left out (a graph cached earlier would hide what is generated
    now)."""
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = torch.compile(fn, fullgraph=True, **options)
        result, code = inductor_utils.run_and_get_code(compiled, *args)
    return result, "\n".join(code), compiled


def test_a_compiled_graph_calls_the_kernel_without_the_dispatcher(build):
    add = build("ind_add", _add_params(), ADD, out_idx=-1)
    a, b = torch.rand(16), torch.rand(16)
    result, code, compiled = _compiled(lambda x, y: add(x, y) * 2, a, b)
    torch.testing.assert_close(result, (a + b) * 2)
    name = add.artifact.op_name
    if FAST_PATHS:
        assert f"torch.ops.tilejit.{name}.default.tilejit_direct(arg0_1, arg1_1, buf0)" in code
        assert f"torch.ops.tilejit.{name}.default(" not in code
        assert "assert_size_stride(buf0" not in code
        # No Python of tilejit's between the graph and the kernel; on a torch without the
        # DLPack exchange API (2.9), only the import of each tensor through __dlpack__.
        ours = [f"{module}:{function}" for _, module, function in
                python_calls(lambda: compiled(a, b)) if module.split(".")[0] == "tilejit"]
        if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
            assert not ours, ours
        else:
            assert set(ours) <= {"tilejit.runtime.host:dlpack_capsule",
                                 "tilejit.runtime.frameworks:adapter_for",
                                 "tilejit.frameworks.torch.adapter:exported",
                                 "tilejit.frameworks.torch.dlpack:rewrites_strides",
                                 "tilejit.frameworks.torch.dlpack:restore_strides"}, ours
    else:
        assert f"torch.ops.tilejit.{name}.default(" in code
    # Dynamic sizes, the empty one included.
    result, code, compiled = _compiled(lambda x, y: add(x, y), a, b, dynamic=True)
    for n in (0, 1, 7, 100):
        x, y = torch.rand(n), torch.rand(n)
        torch.testing.assert_close(compiled(x, y), x + y)
    if FAST_PATHS:
        assert f"{name}.default.tilejit_direct(" in code


def test_a_kernel_that_refuses_a_call_refuses_it_in_a_compiled_graph(build):
    # The direct call validates as the op does: an input misaligned for the kernel.
    n = T.symbol("n")
    aligned = build("ind_aligned", [T.Buffer((n,), "float32", name="A", const=True, align=64),
                                    T.Buffer((n,), "float32", name="C")],
                    "void ind_aligned(const float *A, float *C, int64_t n) {\n"
                    "  for (int64_t i = 0; i < n; ++i) C[i] = 2 * A[i];\n}\n", out_idx=-1)
    x = torch.rand(80)
    compiled = _compiled(lambda t: aligned(t), x[:64])[2]
    shifted = x[1:65]
    with pytest.raises(ValueError, match=r"^ind_aligned: argument 0 'A': .*aligned to 64 bytes"):
        compiled(shifted)
    with pytest.raises(ValueError, match=r"^ind_aligned: argument 0 'A': .*aligned to 64 bytes"):
        aligned(shifted)


def test_kernels_of_other_shapes_are_called_through_the_op(build):
    n = T.symbol("n")
    # An output aligned beyond what torch's allocator gives: the op's checks and messages
    # (such a call may fail either way: the allocator does not promise that alignment).
    wide = build("ind_wide", [T.Buffer((n,), "float32", name="A", const=True),
                              T.Buffer((n,), "float32", name="C", align=4096)],
                 "void ind_wide(const float *A, float *C, int64_t n) {\n"
                 "  for (int64_t i = 0; i < n; ++i) C[i] = A[i];\n}\n", out_idx=-1)
    two = build("ind_two", [T.Buffer((n,), "float32", name="A", const=True),
                            T.Buffer((n,), "float32", name="S"),
                            T.Buffer((n,), "float32", name="D")],
                "void ind_two(const float *A, float *S, float *D, int64_t n) {\n"
                "  for (int64_t i = 0; i < n; ++i) { S[i] = A[i] + 1; D[i] = A[i] - 1; }\n}\n",
                out_idx=[1, 2])
    scaled = build("ind_scaled", [T.Buffer((n,), "float32", name="A", const=True),
                                  T.Buffer((n,), "float32", name="C"),
                                  T.Scalar("float32", name="f")],
                   "void ind_scaled(const float *A, float *C, float f, int64_t n) {\n"
                   "  for (int64_t i = 0; i < n; ++i) C[i] = f * A[i];\n}\n", out_idx=1)
    first = build("ind_first", [T.Buffer((n,), "float32", name="C"),
                                T.Buffer((n,), "float32", name="A", const=True)],
                  "void ind_first(float *C, const float *A, int64_t n) {\n"
                  "  for (int64_t i = 0; i < n; ++i) C[i] = -A[i];\n}\n", out_idx=0)
    x = torch.rand(8)
    assert not inductor._of_the_shape(wide)
    for kernel, fn, expected in ((two, lambda t: two(t)[1], x - 1),
                                 (scaled, lambda t: scaled(t, 3.0), 3 * x),
                                 (first, lambda t: first(t), -x)):
        result, code, _ = _compiled(fn, x)
        torch.testing.assert_close(result, expected)
        assert f"torch.ops.tilejit.{kernel.artifact.op_name}.default(" in code


CACHED = """
import sys
import torch
import tilejit
from tilejit import T
from torch._dynamo.utils import counters

n = T.symbol("n")
program = tilejit.Program("ind_cached", [T.Buffer((n,), "float32", name="A", const=True),
                                         T.Buffer((n,), "float32", name="B", const=True),
                                         T.Buffer((n,), "float32", name="C")],
                          "void ind_cached(const float *A, const float *B, float *C, "
                          "int64_t n) { for (int64_t i = 0; i < n; ++i) C[i] = A[i] * B[i]; }")
if sys.argv[1] == "load":
    add = tilejit.load(sys.argv[2])
elif sys.argv[1] == "op":
    add = tilejit.compile(program, out_idx=-1)
else:
    add = tilejit.compile(program, out_idx=-1)
    if sys.argv[1] == "export":
        add.export(sys.argv[2])
x = torch.arange(6.0)
if sys.argv[1] == "op":  # the op called as an op: no call of the kernel is traced
    op = add.torch_op
    out = torch.compile(lambda a, b: op(a, b) + 1, fullgraph=True)(x, x)
else:
    out = torch.compile(lambda a, b: add(a, b) + 1, fullgraph=True)(x, x)
print(out.tolist(), counters["inductor"]["fxgraph_cache_hit"])
"""


def test_a_graph_cached_with_the_fast_path_runs_wherever_it_is_loaded(tmp_path):
    # Inductor's cache keeps the generated code, which names the kernel's entry: a process
    # without the fast path, or with the kernel opened from an export, provides it too.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TILEJIT_CACHE_DIR": str(tmp_path / "tilejit")}

    def run(*argv, **extra):
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(CACHED), *argv],
                              env=subprocess_env(**env, **extra), capture_output=True,
                              text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split("\n")[-2]

    expected = str([float(i * i + 1) for i in range(6)])
    export = str(tmp_path / "export")
    assert run("export", export) == f"{expected} 0"
    assert run("compile", TILEJIT_FAST_PATHS="0") == f"{expected} 1"
    assert run("load", export) == f"{expected} 1"
    # The op defined before Inductor is loaded (kernel.torch_op), the graph never tracing
    # the kernel's call: the op's fake implementation, which the trace runs, provides it.
    assert run("op") == f"{expected} 1"
    assert run("op", TILEJIT_FAST_PATHS="0") == f"{expected} 1"
