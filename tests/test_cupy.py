"""CuPy arrays in and out (docs/cupy.md), on the fake CUDA driver with a fake CuPy
(tests/fake_cupy) that records what it was asked: the arrays go in through DLPack, asked
for no synchronisation; outputs come from ``cupy.empty`` on the input's device; the
kernel launches on CuPy's current stream (``with cupy.cuda.Stream():``) unless
``stream=`` says otherwise, a ``cupy.cuda.Stream`` included; bad inputs are refused naming
the kernel, the argument, what was expected and what was found. Every backend.

With the real CuPy importable (a GPU machine), these tests leave it alone and skip: the
GPU check (``python -m tilejit gpu-check``) runs CuPy there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy
import pytest
from conftest import load_fakes

import tilejit
from tilejit import T
from tilejit.tools.demo import CUDA_VEC_ADD

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("cupy") is not None and "cupy" not in sys.modules:
    pytest.skip("the real CuPy is installed: python -m tilejit gpu-check runs it",
                allow_module_level=True)

fakes = load_fakes()


@pytest.fixture(scope="module")
def cupy():
    """The fake CuPy, importable as ``cupy`` for this module's tests only."""
    sys.path.insert(0, str(HERE / "fake_cupy"))
    try:
        import cupy

        assert getattr(cupy, "FAKE", False)
        yield cupy
    finally:
        sys.path.remove(str(HERE / "fake_cupy"))
        for name in [n for n in sys.modules if n == "cupy" or n.startswith("cupy.")]:
            del sys.modules[name]


@pytest.fixture
def fresh(cupy, fake):
    """The fake CuPy's records and the fake driver's, emptied; device 0 current."""
    cupy.reset()
    fake.set_current(0)
    return cupy


def _vec_add(dtype="float32"):
    n = T.symbol("n")
    source = CUDA_VEC_ADD.replace("float", {"float32": "float", "float64": "double"}.get(
        dtype, "float"))
    return tilejit.Program("vec_add", [T.Buffer((n,), dtype, name="A", const=True),
                                       T.Buffer((n,), dtype, name="B", const=True),
                                       T.Buffer((n,), dtype, name="C")],
                           source, grid=(T.ceildiv(n, 256),), block=(256,))


@pytest.fixture(scope="module")
def kernels(driver, backend):
    """(vec_add with C allocated, vec_add writing C) behind the module's backend."""
    allocating = tilejit.compile(_vec_add(), out_idx=-1, target="cuda", compiler="nvcc",
                                 arch="sm_80", execution_backend=backend)
    plain = tilejit.compile(_vec_add(), target="cuda", compiler="nvcc", arch="sm_80",
                            execution_backend=backend)
    return allocating, plain


def _ptr(value: int) -> str:
    return value.to_bytes(8, "little").hex()


def test_cupy_arrays_in_and_a_cupy_array_out(fresh, fake, kernels):
    cupy, (k, _) = fresh, kernels
    a, b = cupy.empty(300), cupy.empty(300)
    cupy.reset()
    c = k(a, b)
    assert isinstance(c, cupy.ndarray) and (c.shape, c.dtype.name) == ((300,), "float32")
    assert cupy.RECORD["allocations"] == [((300,), "float32", 0)]
    launch = fake.launches()[-1]
    assert launch["args"] == [_ptr(a.data.ptr), _ptr(b.data.ptr), _ptr(c.data.ptr),
                              (300).to_bytes(8, "little").hex()]
    # A, B and the new C read through DLPack, each exported for CuPy's current stream,
    # where the kernel runs: no synchronisation asked of CuPy.
    assert [d["stream"] for d in cupy.RECORD["dlpack"]] == [-1, -1, -1]


def test_outputs_are_made_on_the_inputs_device(fresh, fake, kernels):
    cupy, (k, _) = fresh, kernels
    with cupy.cuda.Device(1):
        a, b = cupy.empty(64), cupy.empty(64)
    cupy.reset()
    c = k(a, b)  # device 0 is current: the output still goes where the inputs are
    assert c.device.id == 1 and cupy.RECORD["allocations"] == [((64,), "float32", 1)]
    assert fake.launches()[-1]["context"] == 1


def test_the_launch_is_on_cupys_current_stream(fresh, fake, kernels):
    cupy, (k, plain) = fresh, kernels
    a, b, c = cupy.empty(8), cupy.empty(8), cupy.empty(8)
    plain(a, b, c)
    assert fake.launches()[-1]["stream"] == 0  # CuPy's null stream
    with cupy.cuda.Stream() as s:
        assert s.ptr != 0
        plain(a, b, c)
        assert fake.launches()[-1]["stream"] == s.ptr
        k(a, b)
        assert fake.launches()[-1]["stream"] == s.ptr
        h = plain.bind(a, b, c)
        h()
        assert fake.launches()[-1]["stream"] == s.ptr
    assert s.ptr in cupy.RECORD["streams"]
    h()  # a bound launch asks again at every launch: the null stream now
    assert fake.launches()[-1]["stream"] == 0


def test_stream_takes_a_cupy_stream(fresh, fake, kernels):
    cupy, (_, plain) = fresh, kernels
    a, b, c = cupy.empty(8), cupy.empty(8), cupy.empty(8)
    other = cupy.cuda.Stream()
    plain(a, b, c, stream=other)
    assert fake.launches()[-1]["stream"] == other.ptr
    plain.bind(a, b, c)(stream=other)
    assert fake.launches()[-1]["stream"] == other.ptr
    plain(a, b, c, stream=other.ptr + 0x10)
    assert fake.launches()[-1]["stream"] == other.ptr + 0x10


def test_bad_arrays_are_refused_naming_kernel_argument_expected_and_found(fresh, fake,
                                                                          kernels):
    cupy, (k, plain) = fresh, kernels
    a = cupy.empty(16)
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected dtype float32, "
                                         r"got float64"):
        k(a, cupy.empty(16, dtype=cupy.float64))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected shape\[0\] == n "
                                         r"\(= 16, bound by argument 0 'A'\), got 17$"):
        k(a, cupy.empty(17))
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected .*compact.*"):
        k(a, cupy.empty(32)[::2])
    with pytest.raises(ValueError, match=r"^vec_add: argument 1 'B': expected .*cuda:0.*, "
                                         r"got .*cuda:1"):
        with cupy.cuda.Device(1):
            b1 = cupy.empty(16)
        k(a, b1)
    with pytest.raises(TypeError, match=r"^vec_add: argument 1 'B': expected a tensor.*got str"):
        k(a, "B")
    with pytest.raises(TypeError, match=r"^vec_add: stream= is the launch stream .*expected "
                                        r"an int handle.*got cupy\.cuda\.Event$"):
        plain(a, a, cupy.empty(16), stream=cupy.cuda.Event())
    assert fake.launches() == []  # nothing refused reached the driver


def test_a_cpu_kernel_refuses_cupy_arrays(fresh, build):
    cupy = fresh
    n = T.symbol("n")
    k = build("cpu_copy", [T.Buffer((n,), "float32", name="X", const=True),
                           T.Buffer((n,), "float32", name="Y")],
              "void cpu_copy(const float *x, float *y, int64_t n) {}", out_idx=-1)
    x = cupy.empty(4)
    cupy.reset()
    with pytest.raises(ValueError, match=r"^cpu_copy: argument 0 'X': expected .*cpu.*, got "
                                         r".*cuda:0"):
        k(x)
    assert cupy.RECORD["allocations"] == []


def test_an_output_cupy_cannot_hold_is_refused(fresh, fake, backend):
    cupy = fresh
    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program(
        "to_bf16", [T.Buffer((n,), "float32", name="X", const=True),
                    T.Buffer((n,), "bfloat16", name="Y")],
        '#include <cuda_bf16.h>\nextern "C" __global__ void to_bf16(const float *x, '
        '__nv_bfloat16 *y, int64_t n) {}',
        grid=(1,), block=(32,)), out_idx=-1, target="cuda", compiler="nvcc", arch="sm_80",
        execution_backend=backend)
    x = cupy.empty(4)
    cupy.reset()
    with pytest.raises(TypeError, match=r"^to_bf16: .*'Y'.*expected an element type and "
                                        r"device CuPy can allocate, found bfloat16"):
        k(x)
    assert fake.launches() == [] and cupy.RECORD["allocations"] == []


def test_cupy_is_imported_only_by_its_arrays(child_env):
    import subprocess

    code = ("import sys, numpy, tilejit, tilejit.frameworks\n"
            "from tilejit.runtime import frameworks\n"
            "frameworks.adapter_for(numpy.ndarray)\n"
            "assert 'cupy' not in sys.modules and 'tilejit.frameworks.cupy' not in sys.modules\n"
            "import cupy\n"
            "assert frameworks.adapter_for(cupy.ndarray).name == 'cupy'\n"
            "print('ok')\n")
    env = child_env(PYTHONPATH=f"{HERE / 'fake_cupy'}:{HERE.parent}")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


def test_dtypes_come_from_the_one_table(cupy):
    from tilejit.frameworks import cupy as adapter
    from tilejit.language import dtypes

    held = {name for name in dtypes.DTYPES if adapter.cupy_dtype(name) is not None}
    assert held == set(dtypes.DTYPES) - {"bfloat16", "float8_e4m3fn", "float8_e5m2"}
    # ml_dtypes (JAX imports it) names bfloat16 and the float8s to NumPy: still none.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert numpy.dtype(ml_dtypes.float8_e5m2).name == "float8_e5m2"
    assert adapter.cupy_dtype("bfloat16") is adapter.cupy_dtype("float8_e5m2") is None
    for name in held:
        assert adapter.cupy_dtype(name).itemsize * 8 == dtypes.DTYPES[name].bits
