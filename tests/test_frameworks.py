"""A framework is an adapter (tilejit.runtime.frameworks): a second one, registered under
its module's name, gets its outputs, its streams and its words for tensors it cannot
export, on every backend, with nothing else of tilejit changed."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tilejit import T
from tilejit.runtime import frameworks

ROOT = "toyfw"  # the top-level module of the toy framework's tensor type


class _ToyTensor:
    """A tensor of a framework tilejit has never heard of: a NumPy array behind
    ``__dlpack__``, in a module of its own."""

    def __init__(self, array, refuse=False):
        self.array, self.refuse = array, refuse

    def __dlpack__(self, *args, **kwargs):
        if self.refuse:
            raise BufferError("toyfw: this tensor lives in a compressed store")
        return self.array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class _ToyAdapter(frameworks.Adapter):
    name = ROOT

    def __init__(self):
        self.allocations = []

    def allocator(self, dtype, device):
        def make(shape):
            self.allocations.append((tuple(shape), dtype, device))
            return ToyTensor(np.empty(shape, dtype=dtype))

        return make

    def import_refusal(self, obj):
        return "expected a toyfw tensor in plain memory; call .decompress() first"


module = types.ModuleType(ROOT)
ToyTensor = type("ToyTensor", (_ToyTensor,), {"__module__": ROOT})
module.ToyTensor = ToyTensor


@pytest.fixture(scope="module")
def toy(monkeypatch_module):
    adapter = _ToyAdapter()
    monkeypatch_module.setitem(sys.modules, ROOT, module)
    monkeypatch_module.setitem(frameworks._loaders, ROOT, lambda: adapter)
    monkeypatch_module.setattr(frameworks, "_by_type", {})
    yield adapter


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    yield patch
    patch.undo()


@pytest.fixture(scope="module")
def twice(build):
    n = T.symbol("n")
    src = ("void twice(const float *A, float *B, int64_t n) "
           "{ for (int64_t i = 0; i < n; ++i) B[i] = 2 * A[i]; }")
    return build("twice", [T.Buffer((n,), "float32", name="A", const=True),
                           T.Buffer((n,), "float32", name="B")], src, out_idx=-1)


def test_outputs_come_from_the_frameworks_own_allocator(toy, twice):
    x = ToyTensor(np.arange(4, dtype=np.float32))
    out = twice(x)
    assert type(out) is ToyTensor
    np.testing.assert_array_equal(out.array, [0, 2, 4, 6])
    assert toy.allocations[-1] == ((4,), "float32", (1, 0))  # kDLCPU
    assert frameworks.framework_of(ToyTensor) == ROOT


def test_a_refusal_is_worded_by_the_adapter(toy, twice):
    with pytest.raises(ValueError, match=r"^twice: argument 0 'A': cannot import the tensor "
                                         r"through DLPack: expected a toyfw tensor in plain "
                                         r"memory; call \.decompress\(\) first$"):
        twice(ToyTensor(np.ones(4, dtype=np.float32), refuse=True))


def test_types_of_no_registered_framework_get_the_defaults_outputs(twice):
    Other = type("Other", (_ToyTensor,), {"__module__": "nobody_registered_this"})
    out = twice(Other(np.ones(3, dtype=np.float32)))
    assert isinstance(out, np.ndarray) and out.tolist() == [2.0, 2.0, 2.0]
    assert frameworks.framework_of(Other) == "numpy"
