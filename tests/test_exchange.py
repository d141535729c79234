"""The DLPack C exchange API, consumer side (docs/backends.md): tensors read in C
through a producer's table, outputs allocated by its allocator, the older int-valued
attribute, prev_api, producers failing mid-call; and tilejit's own producer,
``tilejit.empty``, read by torch, NumPy and kernels.

The producer under test is ``tests/producer/xproducer.c``, a C extension built here.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="these tests run kernels on torch tensors")

import tilejit
from tilejit import T

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "producer" / "xproducer.c"
INCLUDE = HERE.parent / "core" / "include"

ADD = r"""
void add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""


@pytest.fixture(scope="module")
def xp(tmp_path_factory):
    """The xproducer extension module, compiled for this interpreter."""
    out = tmp_path_factory.mktemp("xproducer") / ("xproducer" + sysconfig.get_config_var(
        "EXT_SUFFIX"))
    cc = shutil.which("cc") or shutil.which("gcc")
    cmd = [cc, "-shared", "-fPIC", "-O1", "-std=gnu11", "-Wall", "-Werror",
           f"-I{sysconfig.get_paths()['include']}", f"-I{INCLUDE}", str(SOURCE), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    spec = importlib.util.spec_from_file_location("xproducer", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["xproducer"] = module
    yield module
    module.set_modes()


@pytest.fixture
def counts(xp):
    """Resets the producer's counters and switches; returns a reader."""
    xp.set_modes()
    xp.reset_counts()
    yield xp.counts
    xp.set_modes()


@pytest.fixture(scope="module")
def add():
    n = T.symbol("n")
    prog = tilejit.Program("add", [T.Buffer((n,), "float32", name="A", const=True),
                                   T.Buffer((n,), "float32", name="B", const=True),
                                   T.Buffer((n,), "float32", name="C")], ADD)
    return tilejit.compile(prog, out_idx=-1, execution_backend="cython")


def _pair(cls, n=5):
    a, b = cls((n,)), cls((n,))
    a.fill(1.5)
    b.fill(2.0)
    return a, b


def _balanced(c):
    """Every managed tensor the producer handed out was deleted exactly once."""
    gc.collect()
    return c()["deletes"] == c()["exports"] + c()["allocs"]


def test_inputs_are_views_and_the_output_comes_from_the_producer(xp, counts, add):
    a, b = _pair(xp.XTensor)
    c = add(a, b)
    assert type(c) is xp.XTensor and c.shape == (5,) and c.tolist() == [3.5] * 5
    seen = counts()
    # Inputs: the non-owning view, no export; output: the producer's allocator, then
    # handed over as a Python object. No stream query for a CPU device.
    assert (seen["views"], seen["exports"], seen["allocs"], seen["to_py"]) == (2, 0, 1, 1)
    assert seen["streams"] == 0
    del c
    assert _balanced(counts)


def test_refcounts_and_counters_stay_balanced_over_many_calls(xp, counts, add):
    a, b = _pair(xp.XTensor)
    before = (sys.getrefcount(a), sys.getrefcount(b))
    for _ in range(2000):
        add(a, b)
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before
    assert counts()["allocs"] == 2000 and _balanced(counts)


def test_int_valued_attribute_and_owning_exports(xp, counts, add):
    # XTensorOld publishes the older int attribute, on a table without the view entry:
    # each input is exported as an owning tensor and deleted after the call.
    a, b = _pair(xp.XTensorOld)
    c = add(a, b)
    assert c.tolist() == [3.5] * 5
    seen = counts()
    assert (seen["views"], seen["exports"]) == (0, 2)
    assert _balanced(counts)


def test_prev_api_is_walked_to_a_major_version_we_speak(xp, counts, add):
    a, b = _pair(xp.XTensorChain)
    assert add(a, b).tolist() == [3.5] * 5
    assert counts()["views"] == 2


@pytest.mark.parametrize("mode, cls, text", [
    ("fail_view", "XTensor", ("add: argument 1 'B': cannot import the tensor through DLPack: "
                             "xproducer: view refused")),
    ("fail_export", "XTensorOld", ("add: argument 1 'B': cannot import the tensor through "
                                  "DLPack: xproducer: export refused")),
    ("fail_alloc", "XTensor", ("add: output 'C': cannot allocate the output: xproducer: "
                              "allocation refused")),
    ("fail_to_py", "XTensor", ("add: output 'C': cannot allocate the output: xproducer: to_py "
                              "refused")),
])
@pytest.mark.parametrize("backend", ["cython", "ctypes"])
def test_a_failing_producer_raises_cleanly_and_leaks_nothing(xp, counts, add, mode, cls, text,
                                                            backend):
    add = add.with_backend(backend)
    # The first argument is an xproducer tensor too for the output cases (it decides who
    # allocates); for the import cases a torch tensor goes first, so the failure comes
    # after one tensor was already imported and must still be released.
    b = getattr(xp, cls)((5,))
    a = (getattr(xp, cls)((5,)) if mode in ("fail_alloc", "fail_to_py", "fail_view_all")
         else torch.ones(5))
    before = sys.getrefcount(a), sys.getrefcount(b)
    xp.set_modes(**{mode.removesuffix("_all"): True})
    # A producer refusing a tensor is bad input (ValueError); one failing to allocate an
    # output is a runtime failure.
    expected = RuntimeError if mode in ("fail_alloc", "fail_to_py") else ValueError
    with pytest.raises(expected) as info:
        add(a, b)
    message = str(info.value)
    del info  # its traceback's frames refer to a and b
    assert message == text
    xp.set_modes()
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before
    assert _balanced(counts), counts()
    assert add(a, b).tolist() == a.tolist()  # and the kernel works afterwards (b is 0)


def test_dlpack_backend_does_not_use_the_exchange_api(xp, counts, add):
    a, b = _pair(xp.XTensor)
    with pytest.raises(TypeError, match=r"^add: argument 0 'A': expected a tensor \(an object "
                                        r"supporting DLPack\), got xproducer.XTensor"):
        add.with_backend("dlpack")(a, b)
    assert counts()["views"] == 0


# ---- tilejit.empty: a producer of our own -------------------------------------------------

def test_empty_is_read_zero_copy_by_torch_and_numpy():
    a = tilejit.empty((2, 3), "float32")
    assert a.shape == (2, 3) and a.dtype == "float32" and a.strides == (3, 1)
    t = torch.from_dlpack(a)
    n = np.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr == n.ctypes.data
    t.fill_(4.0)
    assert n.tolist() == [[4.0] * 3] * 2
    # Views keep the Array alive; dropping them drops the references.
    before = sys.getrefcount(a)
    extra = [torch.from_dlpack(a) for _ in range(10)]
    assert sys.getrefcount(a) == before + 10
    del extra
    gc.collect()
    assert sys.getrefcount(a) == before


def test_empty_legacy_capsule_for_old_consumers():
    a = tilejit.empty((4,), "int32")
    t = torch.utils.dlpack.from_dlpack(a.__dlpack__())  # no max_version: "dltensor"
    t.copy_(torch.arange(4, dtype=torch.int32))
    assert np.from_dlpack(a).tolist() == [0, 1, 2, 3]


def test_empty_dtypes_and_errors():
    for name in ("bool", "int8", "uint64", "float16", "bfloat16", "float64", "complex64"):
        assert tilejit.empty((3,), name).dtype == name
    assert tilejit.empty((0, 5), torch.float32).shape == (0, 5)
    with pytest.raises(ValueError, match="unknown dtype"):
        tilejit.empty((3,), "float13")
    with pytest.raises(ValueError, match="negative dimension"):
        tilejit.empty((3, -1), "float32")
    with pytest.raises(ValueError, match="only 'cpu'"):
        tilejit.empty((3,), "float32", device="cuda")
    # Dimensions are ints (NumPy's too), as NumPy and torch take them; nothing truncated.
    assert tilejit.empty((np.int64(2), 3), "float32").shape == (2, 3)
    assert tilejit.empty(np.int32(4), "int8").shape == (4,)
    for bad in [(2.5,), (2.0,), (np.float64(3.7),), (True, 3), ("3",)]:
        with pytest.raises(TypeError, match=r"^tilejit.empty: expected the shape's dimensions "
                                            r"as ints, got "):
            tilejit.empty(bad, "float32")
    with pytest.raises(TypeError, match=r"^tilejit.empty: expected a shape \(a tuple of ints\), "
                                        r"got float 2.5$"):
        tilejit.empty(2.5, "float32")
    # Sizes whose bytes overflow int64 are refused by name, not wrapped around.
    for huge in [(2**62, 4), (2**63,), (2**64,), (2**31, 2**31, 4), (0, 2**64)]:
        with pytest.raises(ValueError, match=r"^tilejit.empty: shape .* of float32 is \d+ "
                                             r"bytes, more than an array can hold"):
            tilejit.empty(huge, "float32")


@pytest.mark.parametrize("backend", ["cython", "dlpack", "ctypes"])
def test_arrays_in_arrays_out(add, backend):
    kernel = add.with_backend(backend)
    a, b = tilejit.empty((6,), "float32"), tilejit.empty((6,), "float32")
    np.from_dlpack(a)[:] = 1.0
    np.from_dlpack(b)[:] = 0.25
    c = kernel(a, b)
    assert type(c) is type(a)
    assert np.from_dlpack(c).tolist() == [1.25] * 6
    before = sys.getrefcount(a)
    for _ in range(1000):
        kernel(a, b)
    assert sys.getrefcount(a) == before


# ---- tilejit.Array: importable, loaded on first access -----------------------------------


def test_array_is_the_class_of_empty():
    from tilejit import Array

    assert Array is tilejit.Array
    assert type(tilejit.empty((2,), "float32")) is Array
    assert "Array" in dir(tilejit)
    with pytest.raises(AttributeError, match="has no attribute 'Arrays'"):
        tilejit.Arrays  # noqa: B018


def test_import_tilejit_loads_no_wrapper_until_array(child_python):
    code = ("import sys, tilejit\n"
            "assert 'tilejit._tilejit' not in sys.modules\n"
            "a = tilejit.Array\n"
            "assert sys.modules['tilejit._tilejit'].Array is a\n"
            "print('ok')\n")
    assert child_python("-c", code).strip() == "ok"


def test_array_without_a_wrapper_is_an_import_error_saying_why(child_python, tmp_path):
    # A fresh cache and no C compiler: neither the core nor the wrapper can be built.
    code = ("import tilejit\n"
            "try:\n"
            "    from tilejit import Array\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    out = child_python("-c", code, TILEJIT_CACHE_DIR=str(tmp_path), TILEJIT_CC="/nonexistent/cc")
    assert out.startswith("ImportError tilejit.Array is defined by the compiled Cython "
                          "wrapper, which cannot be loaded: "), out
    assert "TILEJIT_CC='/nonexistent/cc'" in out, out
