"""One call path: what used to differ between the backends now comes from one sequencer
in the core, so every backend gives the same result and the same error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")

import tilejit
import tilejit.runtime.fast_paths
from tilejit import T

BACKENDS = ("cython", "dlpack", "ctypes")

ADD = r"""
void add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""


@pytest.fixture(scope="module")
def add():
    n = T.symbol("n")
    prog = tilejit.Program("add", [T.Buffer((n,), "float32", name="A", const=True),
                                   T.Buffer((n,), "float32", name="B", const=True),
                                   T.Buffer((n,), "float32", name="C")], ADD)
    return tilejit.compile(prog, out_idx=-1)


class Tagged(torch.Tensor):
    """A torch.Tensor subclass defined outside torch."""


class NotACapsule:
    """A producer whose __dlpack__ hands back something else."""

    def __dlpack__(self, **kwargs):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_torch_subclass_gets_torch_outputs(add, backend):
    a = torch.ones(4).as_subclass(Tagged)
    out = add.with_backend(backend)(a, torch.ones(4))
    assert isinstance(out, torch.Tensor)
    assert out.tolist() == [2.0] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unknown_keyword_names_the_kernel(add, backend):
    with pytest.raises(TypeError) as info:
        add.with_backend(backend)(torch.ones(4), torch.ones(4), strem=0)
    assert str(info.value) == "add() got an unexpected keyword argument 'strem'"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dlpack_that_is_no_capsule_is_reported_once(add, backend):
    with pytest.raises(TypeError) as info:
        add.with_backend(backend)(torch.ones(4), NotACapsule())
    assert str(info.value) == ("add: argument 1 'B': cannot import the tensor through DLPack: "
                               "__dlpack__ returned an object that is not a DLPack capsule")


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_producers_views_and_streams(add, backend):
    kernel = add.with_backend(backend)
    a = torch.arange(6, dtype=torch.float32)
    view = tilejit.from_dlpack(torch.ones(6))
    # A view first: outputs come from its source's framework.
    out = kernel(view, a)
    assert isinstance(out, torch.Tensor) and out.tolist() == [1, 2, 3, 4, 5, 6]
    # NumPy first: NumPy out, whatever follows.
    out = kernel(np.ones(6, dtype=np.float32), a, stream=0)
    assert isinstance(out, np.ndarray) and out.tolist() == [1, 2, 3, 4, 5, 6]
    # The same call again (the ctypes backend now knows both types).
    out = kernel(view, view, stream=None)
    assert out.tolist() == [2.0] * 6
    with pytest.raises(ValueError, match=r"^add: a stream was given to a cpu kernel"):
        kernel(a, a, stream=7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_name_the_argument_the_core_recorded(add, backend):
    kernel = add.with_backend(backend)
    view = tilejit.from_dlpack(torch.ones(5))
    with pytest.raises(ValueError) as info:
        kernel(torch.ones(4), view)
    assert str(info.value) == ("add: argument 1 'B': expected shape[0] == n (= 4, bound by "
                               "argument 0 'A'), got 5")
    with pytest.raises(TypeError) as info:
        kernel(torch.ones(4), torch.ones(4), torch.ones(4))
    assert str(info.value) == "add: expected 2 arguments (A, B), got 3"


def test_exception_classes_come_from_the_core_table():
    from tilejit.runtime.cython_backend import wrapper_module

    table = wrapper_module().status_exception_names()
    assert table[-1] == ("TJ_ETYPE", "TypeError")
    assert table[-2] == ("TJ_EVALUE", "ValueError")
    assert table[-5] == ("TJ_EPYERR", "")
    assert table[-7] == ("TJ_ECLAIMED", "")


SCALED = r"""
void scaled(const float *A, const float *B, float *C, float alpha, int64_t k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + alpha * B[i] + (float)k;
}
"""


@pytest.fixture(scope="module")
def scaled():
    n = T.symbol("n")
    prog = tilejit.Program("scaled", [T.Buffer((n,), "float32", name="A", const=True),
                                      T.Buffer((n,), "float32", name="B", const=True),
                                      T.Buffer((n,), "float32", name="C"),
                                      T.Scalar("float32", name="alpha"),
                                      T.Scalar("int64", name="k")], SCALED)
    return tilejit.compile(prog, out_idx=2)


def _array_of_ones(n: int):
    array = tilejit.empty((n,), "float32")
    torch.from_dlpack(array).fill_(1.0)
    return array


def _python_calls(fn) -> list[str]:
    """The Python functions entered while ``fn()`` runs (C functions not counted). The
    garbage of earlier tests is collected first, and no collection runs meanwhile: the
    weakref callbacks of objects it frees are Python functions too."""
    import gc
    import sys

    seen = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_qualname if hasattr(frame.f_code, "co_qualname")
                        else frame.f_code.co_name)

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return seen[:-1] if seen and seen[-1] == "_python_calls" else seen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.skipif(not tilejit.runtime.fast_paths.FAST_PATHS,
                    reason="what the fast paths save: with TILEJIT_FAST_PATHS=0 the public "
                           "fallbacks (claims, __call__) are Python by design")
@pytest.mark.parametrize("make", [
    torch.ones,
    lambda n: tilejit.from_dlpack(torch.ones(n)),
    lambda n: _array_of_ones(n),
], ids=["torch", "view", "tilejit.Array"])
def test_a_call_runs_in_c_from_first_step_to_last(scaled, backend, make):
    """Tensors, Python and NumPy scalars, ``stream=``: once each type has been seen, a
    call enters no Python function of tilejit's (the ctypes backend's ``__call__``
    aside, the one line handing the call to the core's builtin entry; the dlpack
    backend's ``__dlpack__`` calls aside, which are what that backend is), so every
    backend stays on the core's fast path whatever the arguments are."""
    kernel = scaled.with_backend(backend)
    a, b = make(3), make(3)
    calls = [lambda: kernel(a, b, 2.0, 3), lambda: kernel(a, b, np.float32(2.0), np.int64(3)),
             lambda: kernel(a, b, 2, 7), lambda: kernel(a, b, 2.0, 3, stream=0)]
    for call in calls:
        call()  # the first call of each meets its types
    expected = [] if backend != "ctypes" else ["CtypesKernel.__call__"]
    for call in calls:
        entered = [name for name in _python_calls(call) if "<lambda>" not in name]
        if backend == "dlpack":  # every tensor through __dlpack__, as the backend says
            assert not {"describe", "scalar_kind", "stream_handle"} & set(entered), entered
        else:
            assert entered in (expected, [name.split(".")[-1] for name in expected]), entered
    assert torch.from_dlpack(kernel(a, b, 2.0, 3)).tolist() == [6.0] * 3
    # Errors come back through the same entry with the messages of the other backends.
    with pytest.raises(ValueError, match=r"^scaled: argument 1 'B': expected shape\[0\] == n"):
        kernel(a, make(4), 2.0, 3)
    with pytest.raises(TypeError, match=r"^scaled: argument 3 'k': expected an int scalar "
                                        r"\(int64\), got numpy.float32"):
        kernel(a, b, 2.0, np.float32(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_producers_error_names_the_argument(add, backend):
    kernel = add.with_backend(backend)
    with pytest.raises(ValueError, match=r"^add: argument 1 'B': cannot import the tensor "
                                         r"through DLPack: ") as info:
        kernel(torch.ones(3), torch.ones(3, device="meta"))
    assert info.value.__cause__ is not None


AXPB = r"""
void axpb(const float *x, float *y, float a, int32_t b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + (float)b;
}
"""


def _axpb():
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program("axpb", [
        T.Buffer((n,), "float32", name="x", const=True),
        T.Buffer((n,), "float32", name="y", align=16),
        T.Scalar("float32", name="a"), T.Scalar("int32", name="b")], AXPB))


def _outcome(k, *args, **kwargs):
    try:
        k(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - compared between two kernels
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_repeated_call_is_checked_as_a_first_call(backend):
    # A call that repeats the last one's dtypes, shapes and strides is read, checked and
    # launched in one pass; whatever differs takes the full path. Each argument below
    # follows calls that used that pass, and must end as it does on a fresh kernel.
    # torch's CPU allocator aligns to 64 bytes: y meets the kernel's 16.
    warm, x, y = _axpb().with_backend(backend), torch.arange(8.0), torch.empty(8)
    for _ in range(3):
        warm(x, y, 2.0, 1)
    assert torch.equal(y, 2 * x + 1)
    base = torch.zeros(16, dtype=torch.float32)
    cases = {
        "another shape": (torch.arange(5.0), torch.empty(5), 2.0, 1),
        "shapes that differ": (torch.arange(5.0), torch.empty(6), 2.0, 1),
        "float64": (x.double(), y, 2.0, 1),
        "requires grad": (x.clone().requires_grad_(), y, 2.0, 1),
        "negative view": (torch._neg_view(x), y, 2.0, 1),
        "sparse": (x.to_sparse(), y, 2.0, 1),
        "strided": (torch.arange(16.0)[::2], y, 2.0, 1),
        "misaligned": (x, base[1:9], 2.0, 1),
        "a numpy array": (x, np.zeros(8, np.float32), 2.0, 1),
        "int of two digits": (x, y, 2.0, 2**31 - 1),
        "int out of range": (x, y, 2.0, 2**40),
        "negative int": (x, y, 2.0, -(2**20)),
        "int for the float": (x, y, 3, 1),
        "float for the int": (x, y, 2.0, 1.0),
        "bool for the int": (x, y, 2.0, True),
        "float32 overflow": (x, y, 1e39, 1),
        "numpy scalars": (x, y, np.float32(0.5), np.int64(3)),
        "None": (x, y, None, 1),
        "stream=0": (x, y, 2.0, 1),
    }
    for name, args in cases.items():
        cold = _axpb().with_backend(backend)
        if name == "stream=0":
            got, want = _outcome(warm, *args, stream=0), _outcome(cold, *args, stream=0)
        else:
            got, want = _outcome(warm, *args), _outcome(cold, *args)
        assert got == want, name
        if got is None:  # it ran: y = a * x + b, in float32 as the kernel computes it
            xs, ys, a, b = args
            f32 = torch.float32
            assert torch.equal(torch.as_tensor(ys), xs * torch.tensor(float(a), dtype=f32)
                               + torch.tensor(float(b), dtype=f32)), name
        warm(x, y, 2.0, 1)  # the usual call again: the next case follows a repeat
    # What ran wrote what the kernel computes.
    ran = torch.empty(8)
    warm(x, ran, 0.5, -(2**20))
    assert torch.equal(ran, 0.5 * x - 2**20)


def test_repeated_calls_from_threads_with_their_own_shapes():
    # Each thread's shape replaces the record the others read: every call still gets
    # its own arguments (a record changing under a reader is a miss, never a mix).
    import threading

    k = _axpb()
    failures = []

    def work(n):
        x = torch.arange(float(n))
        for i in range(2000):
            y = torch.empty(n)
            k(x, y, 1.0, i)
            if not torch.equal(y, x + i):
                failures.append((n, i))
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in (3, 5, 8, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
