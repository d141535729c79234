"""What must hold on every torch tilejit supports (2.9 to 2.14), and what it says outside:

- a kernel with an optional input and a registered backward: ``setup_context`` gets every
  input, the optional one included (None where None), eagerly, under ``torch.compile``
  with ``fullgraph=True``, under AOT dispatch and ``opcheck``, on every backend;
- a size-1 dimension's stride is the tensor's own on every torch and every backend (torch
  2.9's ``__dlpack__`` rewrites it to 1);
- the claim is asked per tensor when libc10's probe is off, even while the forward-AD
  probe is on (torch 2.9 turned the first off and kept the second: calls on tensors that
  require grad were run without autograd);
- a recorded call runs no signature binding (torch 2.14 binds ``forward``'s signature in C
  for every Function with a ``setup_context``);
- the supported range, and the warning outside it.

The suite runs on the oldest and the newest torch of the range (``.ci/torch-range``), and
with ``TILEJIT_FAST_PATHS=0`` (tests/test_fast_paths.py).
"""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from conftest import python_calls

from tilejit import T
from tilejit.frameworks.torch import versions

BIAS_LAST = """
void bias_last(const float *X, const float *B, float *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = 2.0f * X[i] + (B ? B[i] : 0.0f);
}
"""
BIAS_FIRST = """
void bias_first(const float *B, const float *X, float *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = 2.0f * X[i] + (B ? B[i] : 0.0f);
}
"""
ROW_STRIDE = """
void row_stride(const float *X, int64_t *S, int64_t m, int64_t n, int64_t s0) { S[0] = s0; }
"""


def _optional(build, first: bool):
    """``Y = 2 X + B`` with ``B`` optional, first or last of the inputs, with a backward
    whose ``setup_context`` records what it was given."""
    n = T.symbol("n")
    x = T.Buffer((n,), "float32", name="X", const=True)
    b = T.Buffer((n,), "float32", name="B", const=True, optional=True)
    y = T.Buffer((n,), "float32", name="Y")
    name = "bias_first" if first else "bias_last"
    kernel = build(name, [b, x, y] if first else [x, b, y],
                   BIAS_FIRST if first else BIAS_LAST, out_idx=-1)
    seen: list = []
    at = 0 if first else 1

    def setup_context(ctx, inputs, output):
        seen.append(tuple(None if v is None else tuple(v.shape) for v in inputs))
        # One entry per input, whichever way the call was recorded.
        assert len(ctx.needs_input_grad) == len(inputs) == 2, ctx.needs_input_grad
        ctx.has_bias = inputs[at] is not None

    def backward(ctx, grad):
        grads = [grad * 2, grad if ctx.has_bias else None]
        return tuple(reversed(grads)) if first else tuple(grads)

    kernel.register_autograd(backward, setup_context=setup_context)
    return kernel, seen


def _args(first: bool, x, bias):
    return (bias, x) if first else (x, bias)


@pytest.mark.parametrize("first", [False, True], ids=["optional_last", "optional_first"])
@pytest.mark.parametrize("given", [False, True], ids=["none", "given"])
def test_setup_context_gets_every_input(build, first, given):
    kernel, seen = _optional(build, first)
    x = torch.rand(8, requires_grad=True)
    bias = torch.rand(8, requires_grad=True) if given else None
    expected_inputs = _args(first, (8,), (8,) if given else None)

    def grads(fn):
        x.grad = None
        if bias is not None:
            bias.grad = None
        seen.clear()
        fn().sum().backward()
        assert seen and all(s == expected_inputs for s in seen), seen
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
        if bias is not None:
            torch.testing.assert_close(bias.grad, torch.ones_like(bias))

    args = _args(first, x, bias)
    expected = 2 * x.detach() + (bias.detach() if given else 0)
    torch.testing.assert_close(kernel(*args).detach(), expected)
    grads(lambda: kernel(*args))  # the direct call, claimed
    grads(lambda: kernel.torch_op(*args))  # the op through the dispatcher
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: kernel.torch_op(*a), fullgraph=True)
    grads(lambda: compiled(*args))
    compiled = torch.compile(lambda *a: kernel(*a), fullgraph=True)
    grads(lambda: compiled(*args))
    # Every test of opcheck (schema, autograd registration, fake, AOT dispatch).
    torch.library.opcheck(kernel.torch_op, args)


def test_a_size_one_dimension_keeps_its_stride(build):
    m, n, s0 = T.symbol("m"), T.symbol("n"), T.symbol("s0")
    kernel = build("row_stride", [T.Buffer((m, n), "float32", name="X", const=True,
                                           strides=(s0, 1)),
                                  T.Buffer((1,), "int64", name="S")], ROW_STRIDE, out_idx=-1)
    base = torch.zeros(3, 100)
    assert kernel(base[:1, :4]).tolist() == [100]  # what x.stride() says, on every torch
    assert kernel(base[1:2, 10:14]).tolist() == [100]
    assert kernel(base[:2, :4]).tolist() == [100]
    assert kernel(torch.zeros(1, 4)).tolist() == [4]


RELU = """
void relu(const float *X, float *Y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = X[i] > 0.0f ? X[i] : 0.0f;
}
"""


def _relu(build):
    n = T.symbol("n")
    return build("relu", [T.Buffer((n,), "float32", name="X", const=True),
                          T.Buffer((n,), "float32", name="Y")], RELU, out_idx=-1)


def _read_in_place(backend) -> tuple[bool, bool]:
    """Whether this process's calls through ``backend`` read torch tensors in place
    (torch without the DLPack exchange API, fast paths on; not the dlpack backend, whose
    calls go through ``__dlpack__``) and make their outputs in C; each checked against
    what ``doctor`` records (``fast_paths.state``)."""
    from tilejit.frameworks.torch import adapter, probes
    from tilejit.runtime import fast_paths

    exchange = any(hasattr(torch.Tensor, name) for name in
                   ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"))
    found = adapter.ADAPTER.reader(torch.Tensor)
    if exchange:  # read through the exchange API (the dlpack backend: __dlpack__)
        assert found is None
        return False, False
    state = fast_paths.state()
    assert found is None or state[probes.READER][0], state.get(probes.READER)
    # This project's torch builds all check out: the fast path is on wherever it may be.
    assert (found is not None) == fast_paths.FAST_PATHS, state.get(probes.READER)
    made = found is not None and found[2] is not None
    assert made == (found is not None and state[probes.MAKER][0]), state.get(probes.MAKER)
    if backend == "dlpack":
        return False, False
    return found is not None, made


def test_a_direct_call_reads_torch_tensors_as_the_op_does(build, backend):
    """On a torch without the DLPack exchange API (2.9), with the fast paths on, a direct
    call reads each tensor's TensorImpl in place and makes its outputs in C, as the op's
    C kernels do: no ``__dlpack__`` capsule, no Python allocator; with
    ``TILEJIT_FAST_PATHS=0`` both go the public way, with the same results."""
    kernel = _relu(build)
    reads, makes = _read_in_place(backend)
    exchange = not reads and not makes and any(
        hasattr(torch.Tensor, name) for name in
        ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__")) and backend != "dlpack"
    x = torch.randn(7)
    for tensor in (x, x[1:], torch.randn(3, 5)[1], torch.empty(0)):
        assert torch.equal(kernel(tensor), torch.relu(tensor))
    with pytest.raises(ValueError, match=r"relu: argument 0 'X': expected a compact row-major "
                       r"tensor \(strides \(1,\)\), got strides \(2,\)"):
        kernel(x[::2])
    with pytest.raises(ValueError, match=r"relu: argument 0 'X': expected dtype float32, "
                       r"got float64"):
        kernel(x.double())
    calls = {function for _, _, function in python_calls(lambda: kernel(x))}
    assert ("__dlpack__" in calls) == (not reads and not exchange), sorted(calls)
    assert ("allocate" in calls) == (not makes and not exchange), sorted(calls)
    # A tensor it does not read in place (an inference tensor's key set is not a plain
    # tensor's) goes through __dlpack__, with the same result.
    with torch.inference_mode():
        y = torch.randn(4)
    calls = {function for _, _, function in python_calls(lambda: kernel(y))}
    assert torch.equal(kernel(y), torch.relu(y))
    assert ("__dlpack__" in calls) == (not exchange), sorted(calls)


def test_an_output_made_in_c_is_a_plain_tensor_of_its_own(build, backend):
    """The output a call makes (in C on torch 2.9 with the fast paths on, else by
    ``torch.empty``) is a plain ``torch.Tensor``, compact, not requiring grad, held by its
    caller alone: freed with its last reference."""
    import sys
    import weakref

    kernel = _relu(build)
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y = kernel(x)
    assert type(y) is torch.Tensor and not y.requires_grad and y.grad_fn is None
    assert y.stride() == (1,) and y.dtype == torch.float32 and y.device == x.device
    assert torch.equal(y, torch.relu(x.detach()))
    assert sys.getrefcount(y) == sys.getrefcount(torch.empty(3))
    alive = weakref.ref(y)
    del y
    assert alive() is None
    with torch.inference_mode():  # made as torch.empty makes it there: an inference tensor
        z = kernel(torch.randn(2))
    assert z.is_inference() and torch.equal(z, z.clamp(min=0))


def test_restore_strides_writes_back_what_an_export_rewrote():
    import ctypes

    from tilejit.frameworks.torch import dlpack

    view = torch.zeros(3, 100)[:1, :4]
    capsule = view.__dlpack__()
    dl = dlpack._dltensor(capsule)
    # As torch 2.9's export writes it, in an array of the export's own (this torch's may
    # point into the tensor itself, which must not change).
    own = (ctypes.c_int64 * 2)(1, 1)
    kept = dl.strides
    dl.strides = ctypes.cast(own, type(kept))
    try:
        assert dlpack.restore_strides(view, capsule) is capsule
        assert list(own) == [100, 1]
    finally:
        dl.strides = kept
    assert view.stride() == (100, 1)  # the tensor itself is untouched
    assert torch.from_dlpack(capsule).shape == (1, 4)  # still a valid capsule
    # This torch's own export is decided once, and true only where it rewrites.
    rewrites = dlpack.rewrites_strides(torch)
    exported = view.__dlpack__()  # alive while its DLTensor is read
    assert rewrites == (dlpack._dltensor(exported).strides[0] != 100)
    del exported


_CLAIM_WITHOUT_LIBC10 = r"""
import torch, tilejit
from tilejit import T
from tilejit.frameworks.torch import probes
probes.grad_probe = lambda torch: None  # as on a torch whose object layout is unknown
n = T.symbol("n")
src = "void sq(const float *X, float *Y, int64_t n) {for (int64_t i = 0; i < n; ++i) Y[i] = X[i] * X[i];}"
k = tilejit.compile(tilejit.Program(name="sq", source=src, params=[
    T.Buffer((n,), "float32", name="X", const=True), T.Buffer((n,), "float32", name="Y")]),
    out_idx=-1, execution_backend=BACKEND)
x = torch.rand(4, requires_grad=True)
try:
    k(x)
    print("not refused")
except RuntimeError as exc:
    print("refused:", str(exc).split(",")[0])
k.register_autograd(lambda ctx, g: 2 * g * ctx.saved_tensors[0],
                    setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]))
k(x).sum().backward()
print("grad:", torch.allclose(x.grad, 2 * x.detach()))
"""


def test_claims_are_asked_when_libc10_is_not_read(child_python, backend):
    out = child_python("-c", _CLAIM_WITHOUT_LIBC10.replace("BACKEND", repr(backend)))
    assert out.splitlines() == ["refused: sq: argument 0 'X' requires grad", "grad: True"]


def test_a_recorded_call_binds_no_signature(build):
    # With the fast paths off too: outside functorch's transforms the op's Function has
    # no setup_context for Function.apply to bind a signature for.
    kernel, _ = _optional(build, first=False)
    x = torch.rand(8, requires_grad=True)
    kernel(x, None)
    kernel.torch_op(x, None)
    modules = {module for _, module, _ in python_calls(lambda: kernel(x, None))}
    modules |= {module for _, module, _ in python_calls(lambda: kernel.torch_op(x, None))}
    assert "inspect" not in modules, sorted(modules)


def test_the_range():
    assert versions.inside("2.9.0") and versions.inside("2.9.1+cu128")
    assert versions.inside("2.14.1+cu130") and versions.inside("2.13.0+cpu")
    assert not versions.inside("2.8.0") and not versions.inside("2.15.0")
    assert not versions.inside("3.0.0") and not versions.inside("nightly")
    assert versions.RANGE == "2.9 to 2.14"
    assert "OUTSIDE" in versions.describe("2.15.0") and "inside" in versions.describe("2.9.1")


def test_outside_the_range_it_warns_once(monkeypatch):
    monkeypatch.setattr(versions, "_warned", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.warn_outside("2.15.0")
        versions.warn_outside("2.15.0")
        versions.warn_outside("2.13.0")
    assert len(caught) == 1 and caught[0].category is versions.TorchVersionWarning
    text = str(caught[0].message)
    assert "torch 2.9 to 2.14" in text and "this is torch 2.15.0" in text
    monkeypatch.setattr(versions, "_warned", [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.warn_outside("2.13.0")
    assert not caught


def test_doctor_states_the_torch_and_the_range(child_python):
    info = json.loads(child_python("-m", "tilejit", "doctor", "--json"))
    assert info["torch_range"]["version"] == torch.__version__
    assert info["torch_range"]["inside"] == versions.inside(torch.__version__)
    assert info["torch_range"]["range"] == versions.RANGE
    text = child_python("-m", "tilejit", "doctor")
    assert f"torch    {torch.__version__} (inside the supported range 2.9 to 2.14" in text
