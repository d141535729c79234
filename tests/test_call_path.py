"""One call path: what used to differ between the backends now comes from one sequencer
in the core, so every backend gives the same result and the same error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilejit
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
    from tilejit.backends.cython_backend import wrapper_module

    table = wrapper_module().status_exception_names()
    assert table[-1] == ("TJ_ETYPE", "TypeError")
    assert table[-2] == ("TJ_EVALUE", "ValueError")
    assert table[-5] == ("TJ_EPYERR", "")
    assert table[-6] == ("TJ_EDECLINED", "")


def test_ctypes_plain_calls_go_through_no_ctypes_function(add, monkeypatch):
    """Without stream=, a call of known producer types is CPython calling the core's
    tj_call_method (a builtin made over it): no ctypes function object is involved."""
    from tilejit.backends import ctypes_backend

    kernel = add.with_backend("ctypes")
    a, b = torch.ones(3), torch.full((3,), 2.0)
    kernel(a, b)

    def no_ctypes_call(*args):
        raise AssertionError("a ctypes function was called")

    for name in ("_run", "_sequence_on"):
        monkeypatch.setattr(ctypes_backend, name, no_ctypes_call)
    monkeypatch.setattr(kernel, "_call_args", no_ctypes_call)
    assert kernel(a, b).tolist() == [3.0] * 3
    # Errors, a producer's included, come back through the same entry with the messages
    # of the other backends.
    with pytest.raises(ValueError, match=r"^add: argument 1 'B': expected shape\[0\] == n"):
        kernel(a, torch.ones(4))
    with pytest.raises(ValueError, match=r"^add: argument 1 'B': cannot import the tensor "
                                         r"through DLPack: "):
        kernel(a, torch.ones(3, device="meta"))
    assert kernel(a, b).tolist() == [3.0] * 3


@pytest.mark.parametrize("make", [
    torch.ones,
    lambda n: tilejit.from_dlpack(torch.ones(n)),
    lambda n: tilejit.empty((n,), "float32"),
], ids=["torch", "view", "tilejit.Array"])
def test_ctypes_takes_one_foreign_call(add, make, monkeypatch):
    kernel = add.with_backend("ctypes")
    a, b = make(3), make(3)
    kernel(a, b)  # the first call meets the producer type

    def classified_in_python(*args):
        raise AssertionError("the call was classified in Python")

    monkeypatch.setattr(kernel, "_call_args", classified_in_python)
    kernel(a, b)
    kernel(a, b, stream=0)
    with pytest.raises(ValueError, match=r"^add: argument 1 'B': expected shape\[0\] == n"):
        kernel(a, make(4))
