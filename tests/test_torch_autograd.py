"""tilejit kernels under torch's autograd, as a training user meets them: the same
semantics as torch's own custom ops, eager and compiled, on every backend, whatever the
grad mode, inference mode, tensor subclass or functorch transform; the claimed calls
validated like direct ones; keyword names and scalar conversions.

Every test here also runs with ``TILEJIT_FAST_PATHS=0`` (tests/test_fast_paths.py), where
every fast path is off and the public fallbacks answer.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from conftest import python_calls
from torch.autograd import forward_ad

import tilejit
from tilejit import T
from tilejit.frameworks.torch import fake as torch_fake
from tilejit.frameworks.torch import op as top

SQUARE = """
void sq(const double *X, double *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * X[i];
}
"""
TWICE = """
void twice(const double *G, const double *X, double *DX, int64_t n) {
  for (int64_t i = 0; i < n; ++i) DX[i] = 2.0 * G[i] * X[i];
}
"""
NOGRAD = """
void nograd(const double *X, double *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] + 1.0;
}
"""
AXPY = """
void axpy(const double *X, double *Y, double a, int64_t k, bool flag, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = flag ? a * X[i] + (double)k : X[i];
}
"""
# Parameters named like the call's own machinery: every one can be passed by name.
ODD_NAMES = """
void odd(const float *self, const float *stream, float *out, float kernel, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = self[i] + kernel * stream[i];
}
"""


@pytest.fixture(scope="module")
def k(build):
    n = T.symbol("n")
    x, y = T.Buffer((n,), "float64", name="X", const=True), T.Buffer((n,), "float64", name="Y")
    found = {
        "sq": build("sq", [x, y], SQUARE, out_idx=-1),
        "twice": build("twice", [T.Buffer((n,), "float64", name="G", const=True), x,
                                 T.Buffer((n,), "float64", name="DX")], TWICE, out_idx=-1),
        "nograd": build("nograd", [x, y], NOGRAD, out_idx=-1),
        "axpy": build("axpy", [x, y, T.Scalar("float64", name="a"), T.Scalar("int64", name="k"),
                               T.Scalar("bool", name="flag")], AXPY, out_idx=1),
        "odd": build("odd", [T.Buffer((n,), "float32", name="self", const=True),
                             T.Buffer((n,), "float32", name="stream", const=True),
                             T.Buffer((n,), "float32", name="out"),
                             T.Scalar("float32", name="kernel")], ODD_NAMES, out_idx=2),
    }
    sq, twice = found["sq"], found["twice"]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # torch.func differentiates with create_graph: the backward kernel, itself without
        # a backward, runs outside autograd's recording.
        with torch.no_grad():
            return twice(grad.contiguous(), x)

    sq.register_autograd(backward, setup_context=setup_context)
    return found


def _x(n=6):
    return torch.linspace(-1, 2, n, dtype=torch.float64)


# ---- Without a backward: refused, never a silently lost gradient ------------------------


NO_BACKWARD = r"^nograd: argument 0 'X' requires grad, but no backward is registered"


def test_a_kernel_without_backward_refuses_a_differentiable_call_eagerly(k):
    x = _x().requires_grad_()
    with pytest.raises(RuntimeError, match=NO_BACKWARD):
        k["nograd"](x)
    with pytest.raises(RuntimeError, match=NO_BACKWARD):
        k["nograd"].torch_op(x)  # the op itself, as torch.compile emits it
    assert not top.has_backward(k["nograd"])


@pytest.mark.parametrize("backend_name", ["aot_eager", "inductor"])
def test_a_kernel_without_backward_refuses_in_compiled_code(k, backend_name):
    torch._dynamo.reset()
    x = _x().requires_grad_()
    compiled = torch.compile(lambda t: k["nograd"](t) * 2, fullgraph=True, backend=backend_name)
    with pytest.raises(Exception, match=r"nograd: argument 0 'X' requires grad, but no "
                                        r"backward is registered") as raised:
        compiled(x).sum().backward()
    assert x.grad is None, raised
    # Without anything to differentiate, the same compiled function runs.
    torch.testing.assert_close(compiled(_x()), (_x() + 1) * 2)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "set_grad_enabled(False)",
                                  "detached"])
def test_without_autograd_recording_a_kernel_without_backward_runs(k, mode):
    x = _x().requires_grad_()
    contexts = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
                "set_grad_enabled(False)": lambda: torch.set_grad_enabled(False)}
    if mode == "detached":
        out = k["nograd"](x.detach())
    else:
        with contexts[mode]():
            out = k["nograd"](x)
    torch.testing.assert_close(out, x.detach() + 1)
    assert out.grad_fn is None


# ---- With a backward: recorded, eager and compiled, on every backend -------------------


def test_a_backward_trains_eagerly_and_compiled(k):
    x = _x().requires_grad_()
    y = k["sq"](x)
    assert y.grad_fn is not None
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    for backend_name in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        x.grad = None
        compiled = torch.compile(lambda t: (k["sq"](t) * 3).sum(), fullgraph=True,
                                 backend=backend_name)
        compiled(x).backward()
        torch.testing.assert_close(x.grad, 6 * x.detach())


def test_with_backend_keeps_the_backward(k, backend):
    sq = k["sq"]
    for other in tilejit.runtime.backends.BACKENDS:
        twin = sq.with_backend(other)
        assert top.has_backward(twin) and twin.torch_op is sq.torch_op
        x = _x().requires_grad_()
        twin(x).sum().backward()
        torch.testing.assert_close(x.grad, 2 * x.detach())


def test_gradcheck_and_opcheck_on_every_signature_kind(k):
    x = _x().requires_grad_()
    assert torch.autograd.gradcheck(k["sq"], (x,))
    samples = {
        "sq": [(_x(),), (_x().requires_grad_(),), (torch.zeros(0, dtype=torch.float64),)],
        "nograd": [(_x(),)],
        "axpy": [(_x(), 2.0, 3, True), (_x(), -1.5, 0, False)],
        "odd": [(torch.ones(4), torch.ones(4), 2.0)],
    }
    for name, cases in samples.items():
        for args in cases:
            torch.library.opcheck(k[name].torch_op, args)


def test_grad_mode_combinations_never_recurse(k):
    sq = k["sq"]
    x = _x().requires_grad_()
    with torch.no_grad():
        with torch.enable_grad():
            y = sq(x)
        assert y.grad_fn is not None
        assert sq(x).grad_fn is None
    with torch.inference_mode():
        inference = sq(_x())
    assert inference.is_inference()
    with torch.inference_mode(False):
        assert sq(x).grad_fn is not None
    # Inference mode records nothing, even with grad mode turned back on inside it, as
    # torch's own ops; the kernel still runs.
    with torch.inference_mode(), torch.enable_grad():
        assert torch.square(x).grad_fn is None
        inside = sq(x)
        assert inside.grad_fn is None and not inside.requires_grad
        torch.testing.assert_close(inside, x.detach() ** 2)
        assert k["nograd"](x).grad_fn is None  # not refused: nothing would be recorded
    param = torch.nn.Parameter(_x())
    sq(param).sum().backward()
    torch.testing.assert_close(param.grad, 2 * param.detach())

    class Plain(torch.Tensor):  # a subclass without __torch_dispatch__
        pass

    sub = _x().as_subclass(Plain).requires_grad_()
    out = sq(sub)
    out.sum().backward()
    torch.testing.assert_close(sub.grad, 2 * sub.detach().as_subclass(torch.Tensor))
    # A backward that itself calls kernels with grad enabled (double backward off).
    x.grad = None
    (g,) = torch.autograd.grad(sq(x).sum(), x, create_graph=False)
    torch.testing.assert_close(g, 2 * x.detach())


# ---- Forward-mode AD and functorch -----------------------------------------------------


def test_forward_mode_ad_is_refused_naming_the_kernel(k):
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(_x(), torch.ones(6, dtype=torch.float64))
        for name in ("sq", "nograd"):
            with pytest.raises(RuntimeError, match=rf"^{name}: argument 0 'X' carries a "
                                                   r"forward-mode AD tangent"):
                k[name](dual)
        # The primal alone runs.
        torch.testing.assert_close(k["sq"](forward_ad.unpack_dual(dual).primal), _x() ** 2)
    with pytest.raises(RuntimeError, match=r"carries a forward-mode AD tangent"):
        torch.func.jvp(k["sq"], (_x(),), (torch.ones(6, dtype=torch.float64),))


def test_a_recorded_call_binds_no_signature_with_the_fast_paths(k, monkeypatch):
    # torch binds a Function's arguments with inspect.signature at every call when it has
    # a setup_context (in Function.apply, from 2.14 in the C apply): outside functorch's
    # transforms the op's Function has none (its forward takes ctx), so a recorded call
    # binds nothing, through the C apply (fast paths) or through Function.apply.
    import inspect

    k["sq"](_x().requires_grad_()).sum().backward()  # the ops registered (torch binds there)
    bound = []
    signature = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda *a, **kw: bound.append(a) or
                        signature(*a, **kw))
    x = _x().requires_grad_()
    y = k["sq"](x)
    y.sum().backward()
    assert bound == []
    torch.testing.assert_close(x.grad, 2 * x.detach())
    # Inside a functorch transform, autograd.Function.apply runs, as torch requires.
    bound.clear()
    torch.func.grad(lambda t: k["sq"](t).sum())(_x())
    assert bound


def _python_frames(fn) -> list[str]:
    """The Python functions ``fn()`` runs, in order (``module:function``)."""
    return [f"{module}:{function}" for _, module, function in python_calls(fn)]


def test_a_recorded_call_reaches_the_functions_apply_from_the_core(k, build):
    # The core hands a plain call autograd records of a kernel of buffers straight to the
    # C apply of the op's autograd.Function (tj_host_plan.record), and one with scalars to
    # the op's runner, which calls it: no generic hand-over, adapter lookup, applier or
    # signature binding in between, only that Function's forward and setup_context (which
    # runs the user's).
    from tilejit.runtime.fast_paths import FAST_PATHS

    x = _x().requires_grad_()
    k["sq"](x)  # the first claim installs the runner
    # What the claim runs (the dlpack backend's imports call Python too, before it).
    claim_path = ("tilejit.frameworks.torch.op:", "tilejit.frameworks.torch.autograd:",
                  "tilejit.frameworks.torch.record:", "tilejit.runtime.kernel:",
                  "tilejit.runtime.frameworks:claimer")
    frames = [f for f in _python_frames(lambda: k["sq"](x)) if f.startswith(claim_path)]
    n = T.symbol("n")
    # The C apply asks the Function's metaclass its calling convention (_convention),
    # then calls forward(ctx, *inputs), which runs the setup_context.
    function = ["tilejit.frameworks.torch.autograd:_convention",
                "tilejit.frameworks.torch.autograd:forward",
                "tilejit.frameworks.torch.autograd:setup_context"]
    if FAST_PATHS:
        assert frames == function, frames
    else:  # the generic route, through autograd.Function.apply
        assert "tilejit.runtime.kernel:_claimed_call" in frames
    # Without a setup_context, the same: the kernel validates the call in the forward.
    plus_one = build("plus_one", [T.Buffer((n,), "float64", name="X", const=True),
                                  T.Buffer((n,), "float64", name="Y")],
                     NOGRAD.replace("nograd(", "plus_one("), out_idx=-1)
    plus_one.register_autograd(lambda ctx, g: g * 3)
    x = _x().requires_grad_()
    plus_one(x)
    frames = [f for f in _python_frames(lambda: plus_one(x)) if f.startswith(claim_path)]
    if FAST_PATHS:
        assert frames == function[:2], frames
        with pytest.raises(ValueError, match=r"^plus_one: argument 0 'X': expected a 1-d tensor, got 2-d"):
            plus_one(torch.ones(2, 2, dtype=torch.float64, requires_grad=True))
    y = plus_one(x)
    assert type(y.grad_fn).__name__ == "plus_oneBackward"
    torch.testing.assert_close(y.detach(), x.detach() + 1)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
    # A setup_context registered later is used from then on.
    plus_one.register_autograd(lambda ctx, g: g * ctx.k,
                               setup_context=lambda ctx, inputs, out: setattr(ctx, "k", 5))
    x.grad = None
    plus_one(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 5.0))
    if FAST_PATHS:
        frames = [f for f in _python_frames(lambda: plus_one(x)) if f.startswith(claim_path)]
        assert frames == function, frames
    # Scalars reach the backward as the schema's types on that path too (a kernel of its
    # own: a backward is registered for every kernel of one op).
    axpy = build("axpy_recorded", [
        T.Buffer((n,), "float64", name="X", const=True), T.Buffer((n,), "float64", name="Y"),
        T.Scalar("float64", name="a"), T.Scalar("int64", name="k"),
        T.Scalar("bool", name="flag")], AXPY.replace("axpy(", "axpy_recorded("), out_idx=1)
    seen = []
    axpy.register_autograd(lambda ctx, g: (g * ctx.a, None, None, None),
                           setup_context=lambda ctx, inputs, out: (
                               seen.append(inputs[1:]), setattr(ctx, "a", inputs[1])))
    x = _x().requires_grad_()
    for _ in range(2):
        y = axpy(x, np.float64(2.0), np.int64(3), True)
    y.sum().backward()
    assert [tuple(type(v) for v in s) for s in seen] == [(float, int, bool)] * 2
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    # Scalars are converted after validation: by the runner, after the core's checks.
    frames = [f for f in _python_frames(lambda: axpy(x, 2.0, 3, True))
              if f.startswith(claim_path)]
    if FAST_PATHS:
        assert frames == ["tilejit.frameworks.torch.op:run",
                          "tilejit.frameworks.torch.autograd:decide",
                          "tilejit.frameworks.torch.autograd:tangents_idle",
                          "tilejit.frameworks.torch.autograd:requiring_grad",
                          "tilejit.frameworks.torch.op:_schema_args",
                          "tilejit.frameworks.torch.record:schema_inputs",
                          "tilejit.frameworks.torch.record:record",
                          *function], frames


def test_the_record_gate_reads_the_thread_and_tensors_in_place(k):
    # With the fast paths on, the core's record gate answers "is this thread plain" and
    # "is this tensor a functorch wrapper" from torch's key sets in place
    # (tj_torch_plain_object); a thread or tensor it cannot vouch for is asked the public
    # way, and the call still records the same gradient.
    import ctypes

    from tilejit.native.library import core_library
    from tilejit.runtime.fast_paths import FAST_PATHS

    x = _x().requires_grad_()
    k["sq"](x)
    struct = k["sq"].__dict__["_call_plan"].struct
    if not FAST_PATHS:
        assert not struct.record and not struct.record_plain
        return
    address = ctypes.cast(core_library().tj_torch_plain_object, ctypes.c_void_p).value
    assert struct.record and struct.record_plain == address
    context = ctypes.cast(struct.record_plain_context, ctypes.c_void_p)
    plain = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.py_object)(address)
    thread = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(address)
    assert thread(context, None) == 1 and plain(context, x) == 1
    with torch.inference_mode():
        assert thread(context, None) == 0
    seen = []
    torch.func.grad(lambda t: seen.append((thread(context, None), plain(context, t)))
                    or k["sq"](t).sum())(_x())
    assert seen == [(0, 0)]
    torch.testing.assert_close(torch.func.grad(lambda t: k["sq"](t).sum())(_x()), 2 * _x())
    with torch.inference_mode(), torch.enable_grad():
        y = k["sq"](_x())
    assert y.grad_fn is None
    x.grad = None
    k["sq"](x).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_the_runner_hands_other_claims_to_the_generic_route(k):
    # Under no_grad, with a stream=, or inside torch.func: the runner's fast case does
    # not hold, and the generic route gives the same answers as before.
    x = _x().requires_grad_()
    k["sq"](x)
    with torch.no_grad():
        assert k["sq"](x).grad_fn is None
    with pytest.raises(ValueError, match=r"^sq: stream= cannot be given"):
        k["sq"](x, stream=0)
    torch.testing.assert_close(torch.func.grad(lambda t: k["sq"](t).sum())(_x()), 2 * _x())
    with torch.inference_mode(), torch.enable_grad():
        assert k["sq"](_x().requires_grad_()).grad_fn is None


def test_a_tensor_left_by_a_finished_transform(k):
    # A tensor that escaped torch.func.grad (kept by a closure) is a dead wrapper once the
    # transform is over: autograd.Function.apply unwraps it, and so does the fast path.
    leaked = []

    def loss(t):
        leaked.append(t)
        return (t * 2).sum()

    torch.func.grad(loss)(_x())
    (dead,) = leaked
    assert torch._C._functorch.is_functorch_wrapped_tensor(dead) and dead.requires_grad
    torch.testing.assert_close(k["sq"](dead), _x() ** 2)


def test_batched_gradients(k):
    # Batched gradients run the backward under vmap: its kernel sees tensors without
    # storage, which torch's dispatcher runs through the op, slice by slice.
    x = _x(4).requires_grad_()
    expected = torch.diag(2 * x.detach())
    (rows,) = torch.autograd.grad(k["sq"](x), x, torch.eye(4, dtype=torch.float64),
                                  is_grads_batched=True)
    torch.testing.assert_close(rows, expected)
    torch.testing.assert_close(
        torch.autograd.functional.jacobian(k["sq"], x.detach(), vectorize=True), expected)
    assert torch.autograd.gradcheck(k["sq"], (x,), check_batched_grad=True)
    with torch.no_grad():  # the backward's own kernel, called directly under vmap
        twice = torch.vmap(lambda g: k["twice"](g, x.detach()))(torch.eye(4, dtype=torch.float64))
    torch.testing.assert_close(twice, expected)


def test_functorch_transforms(k):
    x = _x()
    torch.testing.assert_close(torch.func.grad(lambda t: k["sq"](t).sum())(x), 2 * x)
    with pytest.raises(RuntimeError, match=NO_BACKWARD):
        torch.func.grad(lambda t: k["nograd"](t).sum())(x)
    batch = torch.stack([x, 2 * x])
    torch.testing.assert_close(torch.func.vmap(k["sq"])(batch), batch ** 2)
    torch.testing.assert_close(torch.func.jacrev(k["sq"])(x), torch.diag(2 * x))


@pytest.mark.parametrize("transform", ["grad", "vmap", "FakeTensorMode", "inference_mode"])
def test_the_first_call_of_a_process_inside_a_transform(transform, child_python, backend):
    # Torch's state of the caller (a transform, a dispatch mode, inference mode) must not
    # reach tilejit's one-time probes of torch, which run on a thread of their own.
    if backend != "cython":
        pytest.skip("one child process per transform, behind the default backend")
    code = textwrap.dedent(f"""
        import torch
        import tilejit
        from tilejit import T
        from torch._subclasses.fake_tensor import FakeTensorMode
        n = T.symbol("n")
        k = tilejit.compile(tilejit.Program(name="sq", source={SQUARE!r}, params=[
            T.Buffer((n,), "float64", name="X", const=True),
            T.Buffer((n,), "float64", name="Y")]), out_idx=-1)
        k2 = tilejit.compile(tilejit.Program(name="twice", source={TWICE!r}, params=[
            T.Buffer((n,), "float64", name="G", const=True),
            T.Buffer((n,), "float64", name="X", const=True),
            T.Buffer((n,), "float64", name="DX")]), out_idx=-1)
        def backward(ctx, g):
            with torch.no_grad():
                return k2(g.contiguous(), ctx.saved_tensors[0])
        k.register_autograd(backward,
                            setup_context=lambda ctx, inputs, output:
                                ctx.save_for_backward(inputs[0]))
        x = torch.arange(4.0, dtype=torch.float64)
        transform = {transform!r}
        if transform == "grad":
            print(torch.func.grad(lambda t: k(t).sum())(x).tolist())
        elif transform == "vmap":
            print(torch.func.vmap(k)(torch.stack([x, x]))[1].tolist())
        elif transform == "FakeTensorMode":
            with FakeTensorMode() as mode:
                fake = mode.from_tensor(x)
                print(tuple(k(fake).shape))
            print(k(x).tolist())
        else:
            with torch.inference_mode():
                print(k(x).tolist())
            y = x.clone().requires_grad_()
            k(y).sum().backward()
            print(y.grad.tolist())
        """)
    out = child_python("-c", code, timeout=300)
    expected = {"grad": "[0.0, 2.0, 4.0, 6.0]", "vmap": "[0.0, 1.0, 4.0, 9.0]",
                "FakeTensorMode": "(4,)\n[0.0, 1.0, 4.0, 9.0]",
                "inference_mode": "[0.0, 1.0, 4.0, 9.0]\n[0.0, 2.0, 4.0, 6.0]"}[transform]
    assert out.strip() == expected


# ---- The autograd path validates as the direct call does ----------------------------------


def _message(fn, *args, **keywords):
    with pytest.raises(Exception) as raised:
        fn(*args, **keywords)
    return type(raised.value), str(raised.value)


@pytest.mark.parametrize("case", ["dtype", "ndim", "count", "mismatch", "scalar", "bool"])
def test_claimed_calls_are_validated_like_direct_ones(k, case):
    axpy = k["axpy"]
    x = _x()
    args = {"dtype": (x.float(), 1.0, 2, True), "ndim": (x[None], 1.0, 2, True),
            "count": (x, 1.0), "mismatch": (x, 1.0, "two", True),
            "scalar": (x, 1.0, 2**70, True), "bool": (x, 1.0, 2, "yes")}[case]
    direct = _message(axpy, *args)
    grad_args = (args[0].clone().requires_grad_(), *args[1:])
    assert _message(axpy, *grad_args) == direct


@pytest.mark.parametrize("case", ["dtype", "ndim", "mismatch", "count", "extra", "none",
                                  "string", "numpy", "second"])
def test_calls_claimed_at_once_are_validated_like_direct_ones(build, case):
    # A kernel of buffers only: with the fast paths on, the core hands a call over at its
    # first tensor that requires grad, before the others are read; the kernel's own run
    # in the forward validates it (or the validating plan, for a call not recorded
    # there), with the direct call's exception and message.
    n = T.symbol("n")
    product = build("product_at_once", [T.Buffer((n,), "float64", name="G", const=True),
                                        T.Buffer((n,), "float64", name="X", const=True),
                                        T.Buffer((n,), "float64", name="DX")],
                    TWICE.replace("twice(", "product_at_once("), out_idx=-1)
    product.register_autograd(lambda ctx, grad: (2 * grad * ctx.x, None),
                              setup_context=lambda ctx, inputs, out: setattr(ctx, "x", inputs[1]))
    g, x = _x(), _x()
    other = {"dtype": (x.float(),), "ndim": (x[None],), "mismatch": (_x(5),), "count": (),
             "extra": (x, x), "none": (None,), "string": ("x",), "numpy": (x.numpy(),),
             "second": (x,)}[case]
    grad_g = g.clone().requires_grad_()
    if case in ("numpy", "second"):  # accepted: recorded, the gradient right
        for _ in range(2):
            grad_g.grad = None
            y = product(grad_g, *other)
            y.sum().backward()
            torch.testing.assert_close(y.detach(), 2 * g * x)
            torch.testing.assert_close(grad_g.grad, 2 * x)
        if case == "second":  # the first input plain, the second requires grad
            y = product(g, x.clone().requires_grad_())
            assert y.grad_fn is not None
        from tilejit.runtime.fast_paths import FAST_PATHS
        assert product.__dict__["_call_plan"].struct.claim_at_once == FAST_PATHS
        return
    direct = _message(product, g, *other)
    assert direct[1].startswith("product_at_once: "), direct
    for _ in range(3):  # the first claim installs the runner; the next go through it
        assert _message(product, grad_g, *other) == direct


def test_claimed_calls_take_scalars_by_tilejit_rules(k):
    axpy = k["axpy"]
    x = _x().requires_grad_()
    # NumPy scalars, bools as truth: accepted as they are by a direct call; the schema
    # would refuse numpy.int64 for an int and numpy.bool_ for a bool.
    with pytest.raises(RuntimeError, match=r"^axpy: argument 0 'X' requires grad, but no "):
        axpy(x, np.float32(2.0), np.int64(3), np.bool_(True))
    with torch.no_grad():
        want = axpy(x, 2.0, 3, True)
    with torch.no_grad():
        got = axpy(x, np.float32(2.0), np.int64(3), np.bool_(True))
    torch.testing.assert_close(got, want)


# ---- Keyword names and scalar conversions ---------------------------------------------


def test_any_parameter_name_can_be_passed_by_keyword(k):
    odd = k["odd"]
    a, b = torch.ones(3), torch.full((3,), 2.0)
    want = a + 0.5 * b
    torch.testing.assert_close(odd(self=a, stream=b, kernel=0.5), want)
    torch.testing.assert_close(odd(a, b, kernel=0.5), want)
    torch.testing.assert_close(odd.__call__(a, stream=b, kernel=0.5), want)
    torch.testing.assert_close(type(odd).__call__(odd, self=a, stream=b, kernel=0.5), want)
    compiled = torch.compile(lambda p, q: odd(self=p, stream=q, kernel=0.5), fullgraph=True,
                             backend="aot_eager")
    torch.testing.assert_close(compiled(a, b), want)
    # stream= is the parameter here, not the launch stream.
    with pytest.raises(TypeError, match=r"^odd\(\) missing 1 argument: 'kernel'"):
        odd(a, stream=b)


def test_stream_keyword_is_the_launch_stream_unless_a_parameter_has_the_name(k):
    with pytest.raises(TypeError, match=r"^sq: stream= is the launch stream \(the kernel has "
                                        r"no input named 'stream'\)"):
        k["sq"](_x(), stream=_x())


class _Broken:
    def __index__(self):
        raise ArithmeticError("cannot be an index")

    def __float__(self):
        raise ArithmeticError("cannot be a float")


def test_a_scalar_whose_conversion_raises_is_named(k):
    with pytest.raises(ArithmeticError, match=r"^axpy: argument 2 'k': cannot convert the "
                                              r"_Broken: cannot be an index") as raised:
        k["axpy"](_x(), 1.0, _Broken(), True)
    assert isinstance(raised.value.__cause__, ArithmeticError)


def test_call_dunder_is_the_call(k):
    sq = k["sq"]
    a = np.arange(4.0)
    np.testing.assert_allclose(sq.__call__(a), sq(a))
    np.testing.assert_allclose(type(sq).__call__(sq, a), a * a)
    for fn in (sq, sq.__call__):
        with pytest.raises(ValueError, match=r"^sq: argument 0 'X': expected dtype float64"):
            fn(np.arange(4.0, dtype=np.float32))


# ---- The fake implementation binds symbols as the core does ---------------------------

STRIDED = """
void strided(const float *A, const float *B, float *O, int64_t m, int64_t n, int64_t s,
             int64_t t) {
  for (int64_t i = 0; i < s + t; ++i) O[i] = 0.0f;
}
"""


def test_fake_shapes_equal_the_cores_on_every_binding_kind(build):
    m, n, s, t = T.symbol("m"), T.symbol("n"), T.symbol("s"), T.symbol("t")
    kernel = build("strided", [
        T.Buffer((m, n), "float32", name="A", strides=(s, 1), const=True),
        T.Buffer((n, m), "float32", name="B", strides=(t, s), const=True),
        T.Buffer((s + t,), "float32", name="O")], STRIDED, out_idx=-1)
    base = torch.zeros(64, 64)
    cases = [
        (base[:3, :4], base[:4, :3]),          # s and t from the rows
        (base[:1, :4], base[:4, :1]),          # A has one row: s binds loosely, then B's
        (base[:1, :4], torch.zeros(4, 1)),     # loosely bound by A's size-1 row, firm by B
        (base[:0, :4], base[:4, :0]),          # empty: every stride loose
        (torch.zeros(1, 5), torch.zeros(5, 1)),
        (base[::2, :3][:2], base[:3, :2]),
    ]
    for a, b in cases:
        try:
            eager = tuple(kernel(a, b).shape)
        except ValueError as exc:
            with pytest.raises(ValueError) as raised:
                torch_fake.fake(kernel)(a, b)
            assert str(raised.value) == str(exc)
            continue
        assert tuple(torch_fake.fake(kernel)(a, b).shape) == eager, (a.stride(), b.stride())
        compiled = torch.compile(lambda p, q: kernel(p, q), fullgraph=True, backend="aot_eager")
        assert tuple(compiled(a, b).shape) == eager
        torch._dynamo.reset()


def _random_signature(rng, index: int):
    """A signature of every kind the core binds from: shapes of constants and symbols,
    strides declared with symbols (or not), symbols shared between buffers, and an output
    shaped by an expression over all of them."""
    symbols = [T.symbol(f"s{index}_{j}", divisibility=int(rng.choice([1, 1, 2])))
               for j in range(3)]
    params, exprs = [], []
    for b in range(2):
        ndim = int(rng.integers(1, 4))
        shape = tuple(symbols[int(rng.integers(0, 3))] if rng.random() < 0.7
                      else int(rng.integers(1, 4)) for _ in range(ndim))
        strides = None
        if rng.random() < 0.6:
            strides = tuple(symbols[int(rng.integers(0, 3))] if rng.random() < 0.2 else
                            T.symbol(f"t{index}_{b}_{d}") for d in range(ndim))
        params.append(T.Buffer(shape, "float32", name=f"B{b}", strides=strides, const=True))
        exprs += [e for e in (*shape, *(strides or ())) if not isinstance(e, int)]
    total = exprs[0]
    for e in exprs[1:]:
        total = total + e
    params.append(T.Buffer((total + 1,), "float32", name="O"))
    names = sorted({e.name for e in exprs}, key=str)
    source = (f"void rnd{index}(" + ", ".join(["const float *B0", "const float *B1", "float *O",
                                              *[f"int64_t {n}" for n in names]])
              + ") { (void)B0; (void)B1; (void)O; }")
    return params, source


def _random_tensor(rng, param, values: dict):
    """A tensor for ``param``: half the time shaped by ``values`` (the symbols' sizes of
    this call), else of any size; often a strided view, sometimes transposed."""
    ndim = len(param.shape)
    if rng.random() < 0.5:
        sizes = [e if isinstance(e, int) else values.setdefault(e, int(rng.choice([1, 2, 4])))
                 for e in param.shape]
    else:
        sizes = [int(rng.choice([0, 1, 1, 2, 3, 4])) for _ in range(ndim)]
    base = torch.zeros(*[max(s, 1) * 3 for s in sizes])
    view = base
    if rng.random() < 0.5:  # a strided view of a larger tensor
        view = base[tuple(slice(0, None, int(rng.integers(1, 3))) for _ in range(ndim))]
    view = view[tuple(slice(0, s) for s in sizes)]
    if ndim > 1 and rng.random() < 0.3:
        view = view.transpose(0, 1)
    return view


def test_fake_binding_agrees_with_the_core_on_random_signatures(build):
    # The fake implementation (compiled code) and the core (eager) must give the same
    # output shapes, or refuse the same calls with the same message.
    rng = np.random.default_rng(23)
    for index in range(12):
        params, source = _random_signature(rng, index)
        kernel = build(f"rnd{index}", params, source, out_idx=-1)
        fake = torch_fake.fake(kernel)
        for _ in range(40):
            values: dict = {}
            args = [_random_tensor(rng, p, values) for p in params[:2]]
            try:
                eager = tuple(kernel(*args).shape)
            except ValueError as exc:
                # The fake checks what it can without data; when it refuses, it says
                # what the core says.
                try:
                    fake(*args)
                except ValueError as fake_exc:
                    assert str(fake_exc) == str(exc)
                continue
            assert tuple(fake(*args).shape) == eager, [(a.shape, a.stride()) for a in args]


def test_a_recorded_call_is_named_after_the_kernel(k):
    y = k["sq"](_x().requires_grad_())
    assert type(y.grad_fn).__name__ == "sqBackward"


U64 = """
void u64(const double *X, double *Y, uint64_t u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] + (double)(u >> 62);
}
"""


def test_an_integer_torch_cannot_pass_is_refused_by_name(build):
    n = T.symbol("n")
    kernel = build("u64", [T.Buffer((n,), "float64", name="X", const=True),
                           T.Buffer((n,), "float64", name="Y"), T.Scalar("uint64", name="u")],
                   U64, out_idx=1)
    x = _x()
    torch.testing.assert_close(kernel(x, 2**63 + 5), x + 2)  # a direct call takes it
    with pytest.raises(ValueError, match=r"^u64: argument 1 'u': 9223372036854775813 does not "
                                         r"fit int64, the integer type of torch ops"):
        kernel(x.clone().requires_grad_(), 2**63 + 5)


MUL = """
void mul(const double *A, const double *B, double *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] * B[i];
}
"""


def test_a_recorded_call_takes_other_frameworks_tensors_beside_torchs(k, build):
    # A NumPy array beside a tensor that requires grad: the call runs through autograd
    # on a torch tensor over the array's memory.
    x = _x().requires_grad_()
    with pytest.raises(RuntimeError, match=r"^twice: argument 1 'X' requires grad, but no "):
        k["twice"](np.full(6, 2.0), x)  # refused by name, not by torch's schema parser
    n = T.symbol("n")
    mul = build("mul", [T.Buffer((n,), "float64", name="A", const=True),
                        T.Buffer((n,), "float64", name="B", const=True),
                        T.Buffer((n,), "float64", name="C")], MUL, out_idx=-1)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, grad * a

    mul.register_autograd(backward, setup_context=setup_context)
    a = np.full(6, 3.0)
    (grad,) = torch.autograd.grad(mul(a, x).sum(), x)
    torch.testing.assert_close(grad, torch.full((6,), 3.0, dtype=torch.float64))


DROP = """
void %s(const double *X, int64_t seed, double *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = (i + seed) %% 2 ? 2.0 * X[i] : 0.0;
}
"""


@pytest.mark.parametrize("backend_name", ["aot_eager", "inductor"])
def test_an_integer_saved_for_the_backward_stays_symbolic(build, backend_name):
    # A dropout-like kernel whose seed changes every step; its backward, which AOT
    # autograd traces, calls a kernel directly with the seed saved on ctx (a SymInt once
    # Dynamo made the seed dynamic). The call runs as the op, which keeps it symbolic: no
    # graph per seed (with fullgraph=True, no FailOnRecompileLimitHit).
    import torch._dynamo.testing

    n = T.symbol("n")
    params = [T.Buffer((n,), "float64", name="X", const=True), T.Scalar("int64", name="seed"),
              T.Buffer((n,), "float64", name="Y")]
    drop = build("drop_fw", params, DROP % "drop_fw", out_idx=-1)
    drop_bw = build("drop_bw", params, DROP % "drop_bw", out_idx=-1)

    def setup_context(ctx, inputs, output):
        ctx.seed = inputs[1]

    drop.register_autograd(lambda ctx, grad: (drop_bw(grad.contiguous(), ctx.seed), None),
                           setup_context=setup_context)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend_name)
    step = torch.compile(lambda x, seed: drop(x, seed).sum(), backend=counter, fullgraph=True)
    x = _x(8).requires_grad_()
    for seed in range(6):
        step(x, seed).backward()
        expected = torch.tensor([2.0 * ((i + seed) % 2) for i in range(8)], dtype=torch.float64)
        torch.testing.assert_close(x.grad, expected)
        x.grad = None
    # Dynamo's own rule for an int: the first graph takes it as a constant, the second
    # makes it dynamic; then no more.
    assert counter.frame_count <= 2
