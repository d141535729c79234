"""Bound launches (docs/bound-launches.md): ``kernel.bind(*args)`` on CPU kernels, over
every backend, with torch and NumPy. The CUDA target's are in test_cuda.py."""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")
from kernels import VEC_ADD

from tilejit import T

SCALE = r"""
void scale(const float *X, float *Y, float a, int32_t k, int64_t n) {
  for (int64_t i = 0; i < n; ++i) Y[i] = a * X[i] + (float)k;
}
"""


@pytest.fixture(scope="module")
def vec_add(build):
    n = T.symbol("n")
    return build("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                             T.Buffer((n,), "float32", name="B", const=True),
                             T.Buffer((n,), "float32", name="C")], VEC_ADD, out_idx=-1)


@pytest.fixture(scope="module")
def scale(build):
    n = T.symbol("n")
    return build("scale", [T.Buffer((n,), "float32", name="X", const=True),
                           T.Buffer((n,), "float32", name="Y"), T.Scalar("float32", name="a"),
                           T.Scalar("int32", name="k")], SCALE)


def test_bind_allocates_once_and_relaunches_into_the_same_outputs(vec_add):
    a, b = torch.arange(8.0), torch.ones(8)
    h = vec_add.bind(a, b)
    c = h.outputs
    assert isinstance(c, torch.Tensor) and c.shape == (8,)
    assert h() is c and torch.equal(c, a + b)
    a += 10  # the bound tensors are the caller's: a relaunch reads them as they are now
    assert h() is c and torch.equal(c, a + b)
    assert torch.equal(vec_add(a, b), c)  # the direct call computes the same


def test_bind_takes_inputs_by_name_and_numpy(vec_add):
    a = np.arange(4, dtype=np.float32)
    h = vec_add.bind(a, B=np.ones(4, np.float32))
    assert isinstance(h.outputs, np.ndarray)
    np.testing.assert_array_equal(h(), a + 1)


def test_scalars_are_bound_with_the_call(scale):
    x, y = torch.arange(4.0), torch.zeros(4)
    h = scale.bind(x, y, 2.0, 3)
    assert h() is None and h.outputs is None
    assert torch.equal(y, 2 * x + 3)


def test_update_swaps_a_tensor(vec_add):
    a, b = torch.ones(6), torch.ones(6)
    h = vec_add.bind(a, b)
    assert h.update(B=torch.full((6,), 4.0)) is h
    assert torch.equal(h(), torch.full((6,), 5.0))
    h.update(A=torch.zeros(6), B=torch.zeros(6))
    assert torch.equal(h(), torch.zeros(6))


def test_update_checks_name_the_kernel_and_the_argument(vec_add, scale):
    h = vec_add.bind(torch.ones(6), torch.ones(6))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected shape\[0\] == n "
                       r"\(= 6, bound by the inputs\), got 7$"):
        h.update(B=torch.ones(7))
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected dtype float32, "
                       r"got float64"):
        h.update(A=torch.ones(6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': .*compact"):
        h.update(B=torch.ones(12)[::2])
    with pytest.raises(ValueError, match=r"^vec_add: argument 0 'A': expected the data pointer "
                       r"aligned to 4 bytes"):
        h.update(A=_misaligned(6))
    with pytest.raises(TypeError, match=r"^vec_add: argument 0 'A': expected a tensor to "
                       r"replace the bound one, got float$"):
        h.update(A=1.0)
    with pytest.raises(TypeError, match=r"^vec_add: update\(\) got an unexpected keyword "
                       r"argument 'C' \(inputs: A, B\)$"):
        h.update(C=torch.ones(6))
    hs = scale.bind(torch.ones(2), torch.ones(2), 1.0, 1)
    with pytest.raises(TypeError, match=r"^scale: argument 2 'a': update swaps a tensor argument "
                       r"for another; 'a' is not a buffer$"):
        hs.update(a=2.0)
    # A failed update leaves the launch as it was.
    assert torch.equal(h(), torch.full((6,), 2.0))


def _misaligned(n):
    """A float32 tensor whose data starts 2 bytes into an element (through NumPy, which
    allows any offset)."""
    raw = np.zeros(4 * n + 4, np.uint8)
    return torch.from_numpy(raw[2:2 + 4 * n].view(np.float32))


def test_bind_refuses_what_a_call_refuses(vec_add):
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected shape\[0\] == n "
                       r"\(= 4, bound by argument 0 'A'\), got 5$"):
        vec_add.bind(torch.ones(4), torch.ones(5))
    with pytest.raises(TypeError, match=r"^vec_add: expected 2 arguments \(A, B\), got 1$"):
        vec_add.bind(torch.ones(4))
    with pytest.raises(TypeError, match=r"^vec_add.bind\(\) takes no stream="):
        vec_add.bind(torch.ones(4), torch.ones(4), stream=0)
    with pytest.raises(TypeError, match=r"^vec_add: argument 0 'A': a bound launch cannot take a "
                       r"tensor that requires grad"):
        vec_add.bind(torch.ones(4, requires_grad=True), torch.ones(4))


def test_a_launch_takes_only_a_stream(vec_add):
    h = vec_add.bind(torch.ones(4), torch.ones(4))
    with pytest.raises(TypeError, match=r"^vec_add: a bound launch takes only stream="):
        h(torch.ones(4))
    with pytest.raises(TypeError, match=r"^vec_add: a bound launch takes only stream="):
        h(A=torch.ones(4))
    assert torch.equal(h(stream=None), torch.full((4,), 2.0))
    assert torch.equal(h(stream=0), torch.full((4,), 2.0))
    with pytest.raises(ValueError, match=r"^vec_add: a stream was given to a cpu kernel"):
        h(stream=5)


def test_a_handle_keeps_its_tensors_alive(vec_add):
    h = vec_add.bind(torch.ones(1000), torch.ones(1000))
    out = h.outputs
    gc.collect()
    assert torch.equal(h(), torch.full((1000,), 2.0)) and h() is out
    h.update(A=torch.zeros(1000))  # the replaced tensor may go; the new one is kept
    gc.collect()
    assert torch.equal(h(), torch.ones(1000))
    del h
    gc.collect()
    assert torch.equal(out, torch.ones(1000))  # the output outlives the handle


def test_update_takes_an_input_named_self(build):
    # Any parameter name can be given by name, `self` included.
    n = T.symbol("n")
    copy = build("copy_self", [T.Buffer((n,), "float32", name="self", const=True),
                               T.Buffer((n,), "float32", name="out")],
                 "void copy_self(const float *s, float *o, int64_t n) {"
                 " for (int64_t i = 0; i < n; ++i) o[i] = s[i]; }", out_idx=-1)
    h = copy.bind(torch.zeros(3))
    assert torch.equal(h.update(self=torch.ones(3))(), torch.ones(3))


def test_update_names_a_trailing_optional_buffer_left_out_at_the_bind(build):
    # Left out or given None: the same handle, the same answer to an update.
    n = T.symbol("n")
    add_bias = build("add_bias_opt", [T.Buffer((n,), "float32", name="X", const=True),
                                      T.Buffer((n,), "float32", name="bias", const=True,
                                               optional=True),
                                      T.Buffer((n,), "float32", name="Y")],
                     "void add_bias_opt(const float *x, const float *b, float *y, int64_t n) {"
                     " for (int64_t i = 0; i < n; ++i) y[i] = x[i] + (b ? b[i] : 1.0f); }",
                     out_idx=-1)
    x = torch.zeros(3)
    for h in (add_bias.bind(x), add_bias.bind(x, None)):
        assert torch.equal(h(), torch.ones(3))
        with pytest.raises(TypeError, match=r"^add_bias_opt: argument 1 'bias': update swaps a "
                                            r"tensor argument for another; 'bias' is bound to "
                                            r"None$"):
            h.update(bias=torch.ones(3))


def test_stream_takes_an_integer_of_any_type(vec_add):
    a, b = torch.ones(3), torch.ones(3)
    h = vec_add.bind(a, b)
    for zero in (0, np.int64(0), np.uint8(0)):
        assert torch.equal(vec_add(a, b, stream=zero), a + b)
        assert torch.equal(h(stream=zero), a + b)
    with pytest.raises(TypeError, match=r"^vec_add: stream= is the launch stream .*got "
                                        r"numpy\.bool"):
        vec_add(a, b, stream=np.bool_(False))
    with pytest.raises(ValueError, match=r"^vec_add: a stream was given to a cpu kernel"):
        vec_add(a, b, stream=np.int64(3))


def test_an_update_of_several_tensors_is_all_or_nothing(vec_add):
    a, b = torch.zeros(4), torch.zeros(4)
    h = vec_add.bind(a, b)
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected shape\[0\] == n "
                                         r"\(= 4, bound by the inputs\), got 5$"):
        h.update(A=torch.ones(4), B=torch.ones(5))
    assert torch.equal(h(), torch.zeros(4))  # A was swapped back
    with pytest.raises(TypeError, match=r"update\(\) got an unexpected keyword argument 'Z'"):
        h.update(A=torch.ones(4), Z=torch.ones(4))
    assert torch.equal(h(), torch.zeros(4))
    assert torch.equal(h.update(A=torch.ones(4), B=torch.ones(4))(), torch.full((4,), 2.0))


def test_the_handle_is_a_c_callable(vec_add):
    # h() goes from the caller to the core's launch with no Python frame between (the
    # handle's type is a C type whose calls are vectorcalls of the core), on every backend.
    import pickle

    from conftest import python_calls

    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    h = vec_add.bind(a, b)
    h()
    assert python_calls(h) == []
    assert python_calls(lambda: h(stream=None)) == [(__file__, __name__, "<lambda>")]
    np.testing.assert_array_equal(h(), a + 1)
    assert repr(h) == "<BoundLaunch of vec_add>"
    with pytest.raises(TypeError, match="a bound launch cannot be pickled"):
        pickle.dumps(h)


def test_the_handle_is_its_own_c_type(vec_add):
    import functools
    import weakref

    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    h = vec_add.bind(a, b)
    cls = type(h)
    assert not isinstance(h, functools.partial)
    assert cls.__name__ == "BoundLaunch" and cls.__module__ == "tilejit.runtime.bound"
    assert cls.__flags__ & (1 << 11)  # Py_TPFLAGS_HAVE_VECTORCALL
    assert h.kernel is vec_add and cls.__doc__.startswith("A call of a kernel bound once")
    for name in ("kernel", "outputs"):
        with pytest.raises(AttributeError):
            setattr(h, name, None)
    with pytest.raises(TypeError):
        cls()  # only kernel.bind makes one
    with pytest.raises(TypeError):
        object.__new__(cls)
    # It keeps what it binds alive, and lets it go with itself.
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is not None
    del h
    assert alive() is None


def test_a_handle_in_a_reference_cycle_is_collected(vec_add):
    import weakref

    class Holder:
        pass

    holder = Holder()
    a = np.arange(4, dtype=np.float32)
    alive = weakref.ref(a)
    h = vec_add.bind(a, np.ones(4, np.float32))
    holder.h = h
    h._bound.append(holder)  # a cycle: the handle holds the holder, which holds the handle
    del h, holder, a
    gc.collect()
    assert alive() is None
