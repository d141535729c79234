"""tilejit kernels inside torch: every kernel a torch custom op (schema, mutation, a fake
implementation shaped by the symbols), traced by ``torch.compile``, recorded by autograd
with a registered backward, and left alone by eager calls.

Compiles are what is slow here (Dynamo, and inductor most of all): each test compiles
little, the inductor model is compiled once per module, and the kernels are compiled once
per backend (``kernels``).
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
pytest.importorskip("torch._dynamo.testing")
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import tilejit
from tilejit import T
from tilejit.frameworks.torch import dynamo
from tilejit.frameworks.torch import op as top
from tilejit.runtime import frameworks
from tilejit.runtime.fast_paths import FAST_PATHS

SUM_DIFF = """
void sum_diff(const float *A, const float *B, float *S, float *D, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { S[i] = A[i] + B[i]; D[i] = A[i] - B[i]; }
}
"""
PAD1 = """
void pad1(const float *A, float *B, int64_t n) {
  for (int64_t i = 0; i < n; ++i) B[i] = A[i];
  B[n] = -1.0f;
}
"""
SCALE_ = """
void scale_(float *X, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) X[i] *= factor;
}
"""
ADD_BIAS = """
void add_bias(const float *A, const float *bias, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + (bias ? bias[i] : 0.0f);
}
"""
AFFINE = """
void affine(const double *X, double *Y, double a, int32_t k, bool flag, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = flag ? a * X[i] + k : X[i];
}
"""
COPY32 = """
void copy32(const float *A, float *B, int32_t n) {
  for (int32_t i = 0; i < n; ++i) B[i] = A[i];
}
"""
ROWSUM = """
void rowsum(const float *A, float *S, int64_t m, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    S[i] = 0.0f;
    for (int64_t j = 0; j < n; ++j) S[i] += A[i * n + j];
  }
}
"""
SQUARE = """
void square64(const double *X, double *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * X[i];
}
"""
SQUARE_BACKWARD = """
void square_backward(const double *G, const double *X, double *DX, int64_t n) {
  for (int64_t i = 0; i < n; ++i) DX[i] = 2.0 * G[i] * X[i];
}
"""


def _buffers(*specs, n=None):
    """``T.Buffer``s over one symbol ``n``: specs are (name, dtype, flags) with shape (n,)."""
    n = n if n is not None else T.symbol("n")
    return [T.Buffer((n,), dtype, name=name, **flags) for name, dtype, flags in specs]


@pytest.fixture(scope="module")
def kernels(build):
    """The module's kernels, behind the module's backend."""
    n = T.symbol("n")
    m = T.symbol("m")
    n32 = T.symbol("n", dtype="int32")
    const = {"const": True}
    found = {
        "sum_diff": build("sum_diff", _buffers(("A", "float32", const), ("B", "float32", const),
                                               ("S", "float32", {}), ("D", "float32", {})),
                          SUM_DIFF, out_idx=[3, 2]),
        "pad1": build("pad1", [T.Buffer((n,), "float32", name="A", const=True),
                               T.Buffer((n + 1,), "float32", name="B")], PAD1, out_idx=-1),
        "scale_": build("scale_", [T.Buffer((T.symbol("n"),), "float32", name="X"),
                                   T.Scalar("float32", name="factor")], SCALE_),
        "add_bias": build("add_bias", _buffers(("A", "float32", const),
                                               ("bias", "float32", {**const, "optional": True}),
                                               ("C", "float32", {})),
                          ADD_BIAS, out_idx=-1),
        "affine": build("affine", [*_buffers(("X", "float64", const), ("Y", "float64", {})),
                                   T.Scalar("float64", name="a"), T.Scalar("int32", name="k"),
                                   T.Scalar("bool", name="flag")], AFFINE, out_idx=1),
        "copy32": build("copy32", _buffers(("A", "float32", const), ("B", "float32", {}),
                                           n=n32), COPY32, out_idx=-1),
        "rowsum": build("rowsum", [T.Buffer((m, n), "float32", name="A", const=True),
                                   T.Buffer((m,), "float32", name="S")], ROWSUM, out_idx=-1),
        "square": build("square64", _buffers(("X", "float64", const), ("Y", "float64", {})),
                        SQUARE, out_idx=-1),
        "square_backward": build("square_backward",
                                 _buffers(("G", "float64", const), ("X", "float64", const),
                                          ("DX", "float64", {})), SQUARE_BACKWARD, out_idx=-1),
    }
    return found


# ---- The op: schema, name, fake implementation ------------------------------------------


def test_schema_comes_from_the_signature(kernels):
    def schema(name):
        return top.schema(kernels[name].artifact)

    assert schema("sum_diff") == ("(Tensor A, Tensor B) -> (Tensor, Tensor)", ())
    assert schema("scale_") == ("(Tensor(a0!) X, float factor) -> ()", ("X",))
    # A trailing optional buffer may be left out, as in a direct call.
    assert schema("add_bias") == ("(Tensor A, Tensor? bias=None) -> Tensor", ())
    assert schema("affine") == ("(Tensor X, float a, SymInt k, bool flag) -> Tensor", ())
    op = kernels["pad1"].torch_op
    assert isinstance(op, torch._ops.OpOverload)
    assert str(op._schema) == f"tilejit::{kernels['pad1'].artifact.op_name}(Tensor A) -> Tensor"


def test_a_raw_pointer_parameter_cannot_be_an_op(build):
    n = T.symbol("n")
    k = build("peek", [T.Buffer((n,), "float32", name="A"), T.Pointer("float32", name="P")],
              "void peek(float *A, float *P, int64_t n) { (void)A; (void)P; (void)n; }")
    with pytest.raises(TypeError, match=r"^peek: parameter 1 'P' is a T.Pointer, which a torch "
                                        r"op cannot take"):
        k.torch_op  # noqa: B018


def test_op_names_are_the_kernel_name_and_a_stable_hash(kernels, build, backend):
    k = kernels["pad1"]
    name = k.artifact.op_name
    assert name.startswith("pad1_") and len(name) == len("pad1_") + 16
    # The same program compiled again is the same op, and so is the kernel on another
    # backend (with_backend: the same kernel); another out_idx is not.
    again = build("pad1", list(k.params), PAD1, out_idx=-1)
    assert again is not k and again.artifact.op_name == name and again.torch_op is k.torch_op
    other = "ctypes" if backend != "ctypes" else "cython"
    assert k.with_backend(other).torch_op is k.torch_op
    assert build("pad1", list(k.params), PAD1).artifact.op_name != name


def _opcheck_cases(kernels):
    x = torch.rand(7)
    y = torch.rand(7)
    return {
        "several outputs": (kernels["sum_diff"], (x, y)),
        "output shaped n + 1": (kernels["pad1"], (x,)),
        "in-place buffer and a float": (kernels["scale_"], (x.clone(), 0.5)),
        "optional buffer given None": (kernels["add_bias"], (x, None)),
        "optional buffer given": (kernels["add_bias"], (x, y)),
        "scalars": (kernels["affine"], (x.double(), 2.5, -3, True)),
        "int32 symbol": (kernels["copy32"], (x,)),
        "int64 symbols, two dimensions": (kernels["rowsum"], (torch.rand(3, 5),)),
    }


@pytest.mark.parametrize("case", ["several outputs", "output shaped n + 1",
                                  "in-place buffer and a float", "optional buffer given None",
                                  "optional buffer given", "scalars", "int32 symbol",
                                  "int64 symbols, two dimensions"])
def test_opcheck(kernels, case):
    kernel, args = _opcheck_cases(kernels)[case]
    torch.library.opcheck(kernel.torch_op, args)


def test_the_op_computes_what_the_kernel_does(kernels):
    x, y = torch.rand(6), torch.rand(6)
    d, s = kernels["sum_diff"].torch_op(x, y)  # the op returns a tuple in out_idx order
    torch.testing.assert_close(d, x - y)
    torch.testing.assert_close(s, x + y)
    assert kernels["sum_diff"](x, y)[0].equal(d)  # the kernel, a list
    z = x.clone()
    assert kernels["scale_"].torch_op(z, 3.0) is None
    torch.testing.assert_close(z, 3 * x)
    # Written in place through the op, a tensor autograd saved is known to have changed.
    w = torch.rand(6, requires_grad=True)
    saved = w * z
    kernels["scale_"].torch_op(z, 2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()


def test_fake_tensors_get_symbolic_shapes_from_the_symbols(kernels):
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.rand(9))
        a = mode.from_tensor(torch.rand(4, 3))
        # A FakeTensor reaching the kernel is handed to torch, which runs the fake.
        padded = kernels["pad1"](x)
        assert padded.shape == (10,) and padded.dtype == torch.float32
        d, s = kernels["sum_diff"](x, x)
        assert d.shape == s.shape == (9,)
        assert kernels["rowsum"](a).shape == (4,)
        with pytest.raises(ValueError, match=r"^pad1: argument 0 'A': expected dtype float32, "
                                             r"got float64$"):
            kernels["pad1"](mode.from_tensor(torch.rand(3, dtype=torch.float64)))
        with pytest.raises(ValueError, match=r"^rowsum: argument 0 'A': expected a 2-d tensor, "
                                             r"got 1-d with shape \(9,\)$"):
            kernels["rowsum"](x)


# ---- Eager calls ---------------------------------------------------------------------------


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_eager_calls_run_the_kernel_directly(kernels):
    x = torch.rand(5)
    with _OpLog() as log:
        kernels["pad1"](x)
        with torch.no_grad():
            kernels["pad1"](torch.rand(5, requires_grad=True))
    assert not [op for op in log.ops if op.startswith("tilejit.")]


def test_requires_grad_without_a_backward_says_so(kernels, build):
    x = torch.rand(5, requires_grad=True)
    # A kernel whose op nobody has asked for yet.
    n = T.symbol("n")
    fresh = build("fresh", [T.Buffer((n,), "float32", name="A", const=True)],
                  "void fresh(const float *A, int64_t n) { (void)A; (void)n; }")
    with pytest.raises(RuntimeError, match=r"^fresh: argument 0 'A' requires grad"):
        fresh(x)
    with pytest.raises(RuntimeError, match=r"^sum_diff: argument 1 'B' requires grad, but no "
                                           r"backward is registered for this kernel"):
        kernels["sum_diff"](torch.rand(5), x)
    with pytest.raises(RuntimeError, match=r"^pad1: argument 0 'A' requires grad"):
        kernels["pad1"](torch.nn.Parameter(torch.rand(3)))
    # Without autograd recording, the kernel runs, and nothing carries a gradient.
    with torch.no_grad():
        out = kernels["pad1"](x)
    assert not out.requires_grad
    assert kernels["pad1"](x.detach()).shape == (6,)
    with pytest.raises(ValueError, match=r"^pad1: stream= cannot be given to a call that torch "
                                         r"runs as an op"):
        kernels["pad1"](x, stream=0)


def test_a_module_whose_parameter_feeds_a_kernel_without_a_backward_exports(kernels):
    # As a torch custom op without autograd: torch.export (and AOTInductor, which exports)
    # captures the op, though the parameter requires grad. Eager calls still refuse it.
    pad1 = kernels["pad1"]

    class Padded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(4))

        def forward(self, x):
            return pad1(x * self.weight)

    model, x = Padded(), torch.rand(4)
    program = torch.export.export(model, (x,))
    assert any(node.target is pad1.torch_op for node in program.graph.nodes)
    with torch.no_grad():  # run eagerly, the refusal below applies
        torch.testing.assert_close(program.module()(x), pad1(x * model.weight))
    with pytest.raises(RuntimeError, match=r"^pad1: argument 0 'A' requires grad, but no "
                                           r"backward is registered"):
        model(x)


def test_a_module_whose_parameter_feeds_a_kernel_with_a_backward_exports(build):
    # torch.export (non-strict, its default) runs the module on fake tensors: the call
    # autograd records is the op there, not the kernel (which cannot read a fake tensor);
    # so is a call make_fx traces on fake tensors.
    from torch.fx.experimental.proxy_tensor import make_fx

    n = T.symbol("n")
    scaled = build("scaled", _buffers(("X", "float32", {"const": True}),
                                      ("W", "float32", {"const": True}), ("Y", "float32", {}),
                                      n=n),
                   "void scaled(const float *X, const float *W, float *Y, int64_t n) {\n"
                   "  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * W[i];\n}\n", out_idx=-1)
    scaled.register_autograd(lambda ctx, g: (None, g))

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(4))

        def forward(self, x):
            return scaled(x, self.weight)

    model, x = Scaled(), torch.rand(4)
    for strict in (False, True):
        program = torch.export.export(model, (x,), strict=strict)
        assert any(node.target is scaled.torch_op for node in program.graph.nodes)
        torch.testing.assert_close(program.module()(x), x * model.weight.detach())
    traced = make_fx(lambda a, w: scaled(a, w), tracing_mode="fake")(
        x, torch.rand(4, requires_grad=True))
    assert any(node.target is scaled.torch_op for node in traced.graph.nodes)
    out = model(x)  # eager: recorded, with the backward registered
    out.sum().backward()
    torch.testing.assert_close(model.weight.grad, torch.ones(4))


def test_the_op_refuses_tensors_on_two_devices(kernels):
    # Meta tensors run the op's fake implementation: it allocates on one device, so
    # tensors on two are refused with the core's words, as a direct call refuses them.
    sum_diff = kernels["sum_diff"]
    cpu, meta = torch.rand(4), torch.rand(4, device="meta")
    with pytest.raises(ValueError, match=r"^sum_diff: argument 1 'B': expected device cpu:0 "
                                         r"\(that of argument 0 'A'\), got meta:0$"):
        sum_diff.torch_op(cpu, meta)
    with pytest.raises(ValueError, match=r"^sum_diff: argument 1 'B': expected device meta:0 "
                                         r"\(that of argument 0 'A'\), got cpu:0$"):
        sum_diff.torch_op(meta, cpu)
    s, d = sum_diff.torch_op(meta, meta)
    assert s.device.type == d.device.type == "meta" and s.shape == (4,)


def test_a_negative_output_size_is_refused_in_the_kernels_words_when_traced(build):
    n, k = T.symbol("n"), T.Scalar("int64", name="k")
    rep = build("rep_neg", [T.Buffer((n,), "float32", name="X", const=True), k,
                            T.Buffer((k * n,), "float32", name="Y")],
                "void rep_neg(const float *x, int64_t k, float *y, int64_t n)"
                " { (void)x; (void)k; (void)y; (void)n; }", out_idx=-1)
    words = r"rep_neg: output 'Y': shape\[0\] == k \* n evaluates to -6, which is negative"
    for call in (rep, rep.torch_op):
        with pytest.raises(ValueError, match="^" + words + "$"):
            call(torch.ones(3), -2)
    with FakeTensorMode(), pytest.raises(ValueError, match="^" + words + "$"):
        rep.torch_op(torch.ones(3), -2)


def test_a_trailing_optional_buffer_may_be_left_out_of_the_op(kernels):
    add_bias = kernels["add_bias"]
    a, bias = torch.rand(4), torch.rand(4)
    torch.testing.assert_close(add_bias.torch_op(a), add_bias(a))
    torch.testing.assert_close(add_bias.torch_op(a, bias), add_bias(a, bias))
    compiled = torch.compile(lambda t: add_bias(t) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a), add_bias(a) * 2)


def test_gradcheck_through_a_registered_tilejit_backward(kernels):
    square, backward = kernels["square"], kernels["square_backward"]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def square_grad(ctx, grad):
        (x,) = ctx.saved_tensors
        return backward(grad.contiguous(), x)

    square.register_autograd(square_grad, setup_context=setup_context)
    assert top.has_backward(square)
    x = torch.rand(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(square, (x,))
    y = square(x)
    assert y.grad_fn is not None
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    torch.library.opcheck(square.torch_op, (x.detach().clone().requires_grad_(),))

    # Trained under torch.compile: AOT autograd traces the backward kernel as its op too.
    x.grad = None
    compiled = torch.compile(lambda t: (square(t) * 3).sum(), fullgraph=True,
                             backend="aot_eager")
    compiled(x).backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())


# ---- torch.compile -------------------------------------------------------------------------


def _model(kernels):
    sum_diff, pad1, scale_ = kernels["sum_diff"], kernels["pad1"], kernels["scale_"]

    def model(x, y, state):
        d, s = sum_diff(x, y)  # two outputs, returned in out_idx order
        p = pad1(d)  # shaped n + 1
        scale_(state, 2.0)  # written in place
        return torch.sin(p[:-1]) * s + state, p[-1]

    return model


def _inputs(n: int):
    return torch.rand(n), torch.rand(n), torch.rand(n)


def _run(fn, x, y, state):
    state = state.clone()
    out, last = fn(x, y, state)
    return out, last, state


def test_a_model_compiles_as_one_graph_and_matches_eager(kernels):
    model = _model(kernels)
    x, y, state = _inputs(11)
    expected = _run(model, x, y, state)
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    for got, want in zip(_run(compiled, x, y, state), expected):
        torch.testing.assert_close(got, want)
    assert counter.frame_count == 1
    explained = torch._dynamo.explain(model)(x, y, state.clone())
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    ops = [str(node.target) for graph in explained.graphs for node in graph.graph.nodes
           if node.op == "call_function"]
    assert sum(op.startswith("tilejit.") for op in ops) == 3


def _leaf_guards(compiled) -> int:
    """How many checks a call of ``compiled`` makes before it runs its latest graph (the
    first cache entry: a lambda's code is shared by every test that made it)."""
    latest = torch._dynamo.eval_frame._debug_get_cache_entry_list(
        compiled._torchdynamo_orig_callable.__code__)[0]
    return sum("+- " in line and "GuardManager" not in line
               for line in str(latest.guard_manager).splitlines())


def test_a_compiled_call_guards_the_kernel_and_its_op_only(kernels):
    # Every global and attribute the traced call reads is a guard each call of the compiled
    # function checks: against the same function calling torch's op, the kernel costs the
    # checks on itself (its type, its __call__, its key) and on its op, not on the modules
    # and helpers on the way.
    if not hasattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list"):
        pytest.skip("this torch has no torch._dynamo.eval_frame._debug_get_cache_entry_list")
    if not FAST_PATHS:
        pytest.skip("with TILEJIT_FAST_PATHS=0 Dynamo traces the kernel's Python __call__ "
                    "(no inlined entry), which reads the runtime's modules: more guards")
    pad1 = kernels["pad1"]
    x = torch.rand(5)
    ours = torch.compile(lambda t: pad1(t), fullgraph=True, backend="eager")
    theirs = torch.compile(lambda t: torch.neg(t), fullgraph=True, backend="eager")
    torch.testing.assert_close(ours(x)[:5], x)
    theirs(x)
    baseline = _leaf_guards(theirs)
    assert baseline > 0, "no guard read: the guard manager's text changed"
    assert _leaf_guards(ours) - baseline <= 8


def test_dynamic_shapes_compile_once_for_every_size(kernels):
    model = _model(kernels)
    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=counter)
    for n in (5, 9, 13):
        x, y, state = _inputs(n)
        for got, want in zip(_run(compiled, x, y, state), _run(model, x, y, state)):
            torch.testing.assert_close(got, want)
    assert counter.frame_count == 1


def test_data_dependent_sizes_compile(kernels):
    # A masked tensor's size is unknown while tracing: the fake implementation takes what
    # it cannot tell as unknown rather than guarding on it (the kernel checks at run time).
    sum_diff = kernels["sum_diff"]
    x = torch.tensor([0.1, 0.9, 0.7, 0.2])

    def masked(t):
        kept = t[t > 0.5]
        return sum_diff(kept, kept * 2)

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        got = torch.compile(masked, fullgraph=True, backend="eager")(x)
    for g, w in zip(got, masked(x)):
        torch.testing.assert_close(g, w)


def test_inductor(kernels, backend):
    if backend != "cython":
        pytest.skip("inductor compiles once, behind the default backend (slow)")
    model = _model(kernels)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    x, y, state = _inputs(17)
    for got, want in zip(_run(compiled, x, y, state), _run(model, x, y, state)):
        torch.testing.assert_close(got, want)


def test_inputs_by_name_inside_torch_compile(kernels):
    affine = kernels["affine"]
    x = torch.rand(5, dtype=torch.float64)
    compiled = torch.compile(lambda t: affine(t, k=2, flag=True, a=0.5), fullgraph=True,
                             backend="eager")
    torch.testing.assert_close(compiled(x), affine(x, 0.5, 2, True))


def test_stream_is_refused_inside_torch_compile(kernels):
    pad1 = kernels["pad1"]
    compiled = torch.compile(lambda x: pad1(x, stream=0), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="pad1: stream= is not supported inside torch.compile"):
        compiled(torch.rand(3))


def test_jit_factories_compile_outside_the_graph(backend):
    @tilejit.jit(out_idx=-1, execution_backend=backend)
    def scale(factor: int = 2):
        n = T.symbol("n")
        source = (f"void scale(const float *A, float *B, int64_t n) {{\n"
                  f"  for (int64_t i = 0; i < n; ++i) B[i] = A[i] * {factor};\n}}\n")
        return tilejit.Program("scale", [T.Buffer((n,), "float32", name="A", const=True),
                                         T.Buffer((n,), "float32", name="B")], source)

    def f(x):
        return scale(3)(x) + scale(factor=5)(x)

    counter = torch._dynamo.testing.CompileCounter()
    x = torch.rand(6)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend=counter)(x), 8 * x)
    assert counter.frame_count == 1 and scale.cache_info() == 2


def test_layout_jit_specialises_at_trace_time(backend):
    @tilejit.jit(layout="dynamic", out_idx=-1, execution_backend=backend)
    def rowsum(A):
        m = A.shape[0]
        source = ("void rowsum(float *A, float *S, int64_t m, int64_t n, int64_t s) {\n"
                  "  for (int64_t i = 0; i < m; ++i) {\n    S[i] = 0.0f;\n"
                  "    for (int64_t j = 0; j < n; ++j) S[i] += A[i * s + j];\n  }\n}\n")
        return tilejit.Program("rowsum", [A, T.Buffer((m,), "float32", name="S")], source)

    counter = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(lambda a: rowsum(a) * 2, fullgraph=True, dynamic=True,
                             backend=counter)
    for shape in ((3, 4), (5, 2)):
        a = torch.rand(shape)
        torch.testing.assert_close(compiled(a), a.sum(1) * 2)
    assert counter.frame_count == 1 and rowsum.cache_info() == 1


def test_traced_code_hands_dynamo_constant_functions_strings(kernels, monkeypatch):
    # Before torch 2.13, assume_constant_result takes only constants and tensors: a kernel
    # or jit function handed over fails the trace. Traced code hands its trace key.
    looked_up = []
    find = frameworks.traced_object
    monkeypatch.setattr(frameworks, "traced_object",
                        lambda key: looked_up.append(key) or find(key))
    pad1 = kernels["pad1"]
    torch._dynamo.reset()
    x = torch.rand(4)
    torch.testing.assert_close(torch.compile(lambda t: pad1(t) * 2, fullgraph=True,
                                             backend="eager")(x), pad1(x) * 2)
    assert looked_up == [pad1._trace_key] and isinstance(pad1._trace_key, str)
    assert frameworks.traced_object(pad1._trace_key) is pad1


def test_the_trace_time_constants_are_marked_as_torch_marks_them():
    def probe():
        return 0

    torch.compiler.assume_constant_result(probe)
    marked = {name: value for name, value in vars(probe).items()}
    assert marked == {name: vars(dynamo._traced_op_entry)[name] for name in marked}


def test_a_kernel_made_before_torch_is_imported(kernels, backend, child_python):
    # And the op's name is the same in another process: a stable name for a same kernel.
    if backend != "cython":
        pytest.skip("one child process (torch's import is slow), behind the default backend")
    code = textwrap.dedent(f"""
        import sys
        import tilejit
        from tilejit import T
        n = T.symbol("n")
        k = tilejit.compile(tilejit.Program(name="pad1", source={PAD1!r}, params=[
            T.Buffer((n,), "float32", name="A", const=True),
            T.Buffer((n + 1,), "float32", name="B")]), out_idx=-1)
        assert "torch" not in sys.modules
        import torch
        f = torch.compile(lambda x: k(x) * 2, fullgraph=True, backend="eager")
        print(f(torch.ones(2)).tolist())
        print(k.artifact.op_name)
        """)
    out = child_python("-c", code, timeout=300)
    assert out.split("\n")[:2] == ["[2.0, 2.0, -2.0]", kernels["pad1"].artifact.op_name]
