"""Test doubles for the CUDA target on machines without a GPU.

- `FakeDriver`: builds ``fake_cuda.c`` (the fake libcuda beside this file) with the C
  compiler and reads what it recorded: every driver call, with the module image, the
  function, grid, block, shared memory, stream and each argument's bytes.
- `FakeCudaTensor`: a tensor "on a CUDA device" that is only a fake device address, a
  shape and a dtype. Its type publishes the DLPack C exchange API (the
  ``__dlpack_c_exchange_api__`` capsule torch publishes), whose ``current_work_stream``
  reports `SENTINEL_STREAM` and whose allocator makes new fake tensors; its per-call
  entries are C (``fake_exchange.c``), as torch's are; it also speaks ``__dlpack__``.
  Nothing ever dereferences its address: the fake driver launches nothing.

Loaded by file path (tests/ is not a package):

>>> fakes = load_module(Path(__file__))
>>> a = fakes.FakeCudaTensor((1000,))
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import ClassVar

from tilejit.native.ctypes_abi import DLDataType, DLDevice, DLTensor

HERE = Path(__file__).resolve().parent
KDL_CUDA = 2
#: What the exchange API's current_work_stream reports: a stream no real driver hands out.
SENTINEL_STREAM = 0x5EED5


def load_module(path: Path = HERE / "fakes.py", name: str = "tilejit_test_fakes"):
    """This module, imported once by file path."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# ---- The fake driver -------------------------------------------------------------------------


def cuda_include_dir() -> str | None:
    """The real cuda.h's directory, to build the fake against (None without a toolkit)."""
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda.h").is_file():
            return str(Path(home) / "include")
    return None


def build_fake_driver(out_dir: Path) -> Path:
    """Compiles fake_cuda.c into ``out_dir/libfake_cuda.so``."""
    out = Path(out_dir) / "libfake_cuda.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    include = cuda_include_dir()
    command = [cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
               *(["-DFAKE_CUDA_REAL_HEADER", f"-I{include}"] if include else []),
               str(HERE / "fake_cuda.c"), "-o", str(out), "-pthread"]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return out


class FakeDriver:
    """Control of a loaded fake driver (the same copy the core loads from the same path)."""

    def __init__(self, path: Path):
        self.path = str(path)
        lib = ctypes.CDLL(self.path)
        lib.fake_cuda_json.restype = c_char_p
        lib.fake_cuda_fail.argtypes = [c_char_p, c_int, c_int]
        lib.fake_cuda_count.argtypes = [c_char_p]
        self._lib = lib

    def reset(self) -> None:
        """Forgets the records and injected failures: two devices of capability 8.0."""
        self._lib.fake_cuda_reset()

    def fail(self, fn: str, code: int, count: int = 1) -> None:
        """The next `count` calls of driver entry point `fn` return `code`."""
        self._lib.fake_cuda_fail(fn.encode(), code, count)

    def quiet(self, on: bool = True) -> None:
        """On: successful ``cuCtxGetCurrent`` and ``cuLaunchKernel`` calls are checked but not
        recorded (they then cost about what a driver's host side does: a benchmark's mode);
        ``reset`` keeps the setting."""
        self._lib.fake_cuda_quiet(int(on))

    def set_capability(self, major: int, minor: int) -> None:
        self._lib.fake_cuda_set_capability(major, minor)

    def set_device_capability(self, device: int, major: int, minor: int) -> None:
        """Gives one device a capability of its own (a machine of mixed GPUs)."""
        self._lib.fake_cuda_set_device_capability(device, major, minor)

    def set_current(self, device: int) -> None:
        """Makes `device`'s primary context current on this thread (-1: none)."""
        self._lib.fake_cuda_set_current(device)

    def begin_capture(self, stream: int) -> None:
        """Starts capturing ``stream`` (``cuStreamBeginCapture``, global mode), as
        ``torch.cuda.graph`` does."""
        assert self._lib.cuStreamBeginCapture_v2(c_void_p(stream), 0) == 0

    def end_capture(self, stream: int) -> int:
        """Ends the capture of ``stream``: 0, or 901 (invalidated) when a forbidden call
        broke it."""
        graph = c_void_p()
        return self._lib.cuStreamEndCapture(c_void_p(stream), ctypes.byref(graph))

    def forbidden(self) -> int:
        """Calls made while a stream was captured that the driver refuses then (module
        load, cuMemAlloc, synchronize)."""
        return self._lib.fake_cuda_forbidden()

    def records(self, fn: str | None = None) -> list[dict]:
        """Every recorded call (of `fn` only, if given), oldest first."""
        calls = json.loads(self._lib.fake_cuda_json().decode())
        return [c for c in calls if fn is None or c["fn"] == fn]

    def launches(self) -> list[dict]:
        """cuLaunchKernel and cuLaunchKernelEx records, oldest first."""
        return [c for c in self.records() if c["fn"] in ("cuLaunchKernel", "cuLaunchKernelEx")]


# ---- DLPack structures (the ctypes backend's mirrors, plus the managed wrapper) ----------


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    pass


_DELETER = CFUNCTYPE(None, POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p),
                                     ("deleter", _DELETER), ("flags", c_uint64),
                                     ("dl_tensor", DLTensor)]

_DTYPES = {"float32": (2, 32), "float64": (2, 64), "float16": (2, 16), "bfloat16": (4, 16),
           "int32": (0, 32), "int64": (0, 64), "int8": (0, 8), "uint8": (1, 8)}


def _noop_deleter(managed):
    pass


_NOOP_DELETER = _DELETER(_noop_deleter)


class FakeCudaTensor:
    """A tensor on CUDA device `device_id` that is only an address, a shape and a dtype.

    Addresses are handed out 1 MiB apart from 0x7f00_0000_0000 unless given; `data_ptr()`
    is the address plus `byte_offset`, what a kernel must receive.
    """

    _next_address = 0x7F0000000000
    #: Calls the exchange API received: {"current_work_stream": n, "allocator": n}.
    api_calls: ClassVar[_ApiCalls]

    def __init__(self, shape, dtype="float32", device_id=0, address=None, byte_offset=0,
                 strides=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device_id = device_id
        if address is None:
            address = FakeCudaTensor._next_address
            FakeCudaTensor._next_address += 1 << 20
        self.address = address
        self.byte_offset = byte_offset
        self.strides = None if strides is None else tuple(strides)
        ndim = len(self.shape)
        self._shape = (c_int64 * max(ndim, 1))(*self.shape)
        self._strides = None if strides is None else (c_int64 * max(ndim, 1))(*strides)
        self._exported = []  # managed tensors handed out by __dlpack__, kept alive
        # What the exchange API's dltensor_from_py_object_no_sync copies (fake_exchange.c).
        self._dl = DLTensor()
        self._fill(self._dl)
        self._dl_address = ctypes.addressof(self._dl)

    def data_ptr(self) -> int:
        return self.address + self.byte_offset

    def _fill(self, t: DLTensor) -> None:
        code, bits = _DTYPES[self.dtype]
        t.data = self.address
        t.device = DLDevice(KDL_CUDA, self.device_id)
        t.ndim = len(self.shape)
        t.dtype = DLDataType(code, bits, 1)
        t.shape = ctypes.cast(self._shape, POINTER(c_int64))
        t.strides = None if self._strides is None else ctypes.cast(self._strides,
                                                                    POINTER(c_int64))
        t.byte_offset = self.byte_offset

    def _managed(self) -> DLManagedTensorVersioned:
        managed = DLManagedTensorVersioned()
        managed.version = DLPackVersion(1, 3)
        managed.deleter = _NOOP_DELETER
        self._fill(managed.dl_tensor)
        self._exported.append(managed)
        return managed

    def __dlpack_device__(self):
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        managed = self._managed()
        return _capsule_new(ctypes.addressof(managed), _VERSIONED, None)

    def __repr__(self) -> str:
        return f"FakeCudaTensor({self.shape}, {self.dtype}, cuda:{self.device_id}, " \
               f"{self.address:#x})"


# Capsule names are borrowed by the capsule: module-level bytes outlive every capsule.
_VERSIONED, _API_NAME = b"dltensor_versioned", b"dlpack_exchange_api"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_char_p, c_void_p]
_incref = ctypes.pythonapi.Py_IncRef
_incref.argtypes = [ctypes.py_object]


# ---- The DLPack C exchange API of FakeCudaTensor ------------------------------------------


def _object(address: int):
    return ctypes.cast(address, ctypes.py_object).value


_ALLOCATOR = CFUNCTYPE(c_int, POINTER(DLTensor), POINTER(POINTER(DLManagedTensorVersioned)),
                       c_void_p, c_void_p)
_FROM_PY = CFUNCTYPE(c_int, c_void_p, POINTER(POINTER(DLManagedTensorVersioned)))
_TO_PY = CFUNCTYPE(c_int, POINTER(DLManagedTensorVersioned), POINTER(c_void_p))
_DLTENSOR_FROM_PY = CFUNCTYPE(c_int, c_void_p, POINTER(DLTensor))
_CURRENT_STREAM = CFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))

# Tensors the allocator made, by the address of their managed tensor, until they are
# wrapped into Python objects.
_allocated: dict = {}


def _build_exchange() -> ctypes.PyDLL:
    """fake_exchange.c, compiled once per source into the temporary directory (published
    atomically: several test processes may build it at once) and loaded."""
    import hashlib
    import tempfile

    source = HERE / "fake_exchange.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"tilejit-fake-exchange-{digest}.so"
    if not out.is_file():
        cc = shutil.which("cc") or shutil.which("gcc")
        partial = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared",
                        "-fPIC", str(source), "-o", str(partial)],
                       check=True, capture_output=True, text=True)
        os.replace(partial, out)
    lib = ctypes.PyDLL(str(out))
    lib.fake_exchange_init.argtypes = [ctypes.c_size_t]
    lib.fake_exchange_stream_calls.restype = c_uint64
    if lib.fake_exchange_init(SENTINEL_STREAM) != 0:
        raise RuntimeError("fake_exchange.c: the Python C API is not in this process")
    return lib


try:
    _EXCHANGE = _build_exchange()
except (OSError, RuntimeError, subprocess.CalledProcessError, TypeError):
    _EXCHANGE = None  # the same entries as ctypes callbacks (slower): see _c_entry


class _ApiCalls:
    """``FakeCudaTensor.api_calls``: the exchange API's calls by entry, read as a dict."""

    _allocator = 0
    _streams = 0  # without fake_exchange.c

    def __getitem__(self, name: str) -> int:
        if name == "current_work_stream":
            return (self._streams if _EXCHANGE is None
                    else _EXCHANGE.fake_exchange_stream_calls())
        if name == "allocator":
            return self._allocator
        raise KeyError(name)


def _allocate(prototype, out, error_ctx, set_error):
    FakeCudaTensor.api_calls._allocator += 1
    p = prototype.contents
    dtype = next(name for name, (code, bits) in _DTYPES.items()
                 if (code, bits) == (p.dtype.code, p.dtype.bits))
    tensor = FakeCudaTensor([p.shape[d] for d in range(p.ndim)], dtype, p.device.device_id)
    managed = tensor._managed()
    _allocated[ctypes.addressof(managed)] = tensor
    out[0] = ctypes.pointer(managed)
    return 0


def _from_py(obj, out):
    out[0] = ctypes.pointer(_object(obj)._managed())
    return 0


def _to_py(managed, out):
    tensor = _allocated.pop(ctypes.addressof(managed.contents))
    _incref(tensor)  # a new reference for the caller
    out[0] = id(tensor)
    return 0


class _ExchangeAPI(Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", c_void_p),
                ("managed_tensor_allocator", _ALLOCATOR),
                ("managed_tensor_from_py_object_no_sync", _FROM_PY),
                ("managed_tensor_to_py_object_no_sync", _TO_PY),
                ("dltensor_from_py_object_no_sync", _DLTENSOR_FROM_PY),
                ("current_work_stream", _CURRENT_STREAM)]


def _dltensor_from_py(obj, out):
    ctypes.memmove(out, _object(obj)._dl_address, ctypes.sizeof(DLTensor))
    return 0


def _current_work_stream(device_type, device_id, out):
    FakeCudaTensor.api_calls._streams += 1
    out[0] = SENTINEL_STREAM if device_type == KDL_CUDA else None
    return 0


def _c_entry(prototype, name: str):
    """fake_exchange.c's entry ``name``, or its Python twin where that could not be built."""
    if _EXCHANGE is None:
        return prototype({"fake_exchange_dltensor": _dltensor_from_py,
                          "fake_exchange_current_work_stream": _current_work_stream}[name])
    return prototype(ctypes.cast(getattr(_EXCHANGE, name), c_void_p).value)


FakeCudaTensor.api_calls = _ApiCalls()
_API = _ExchangeAPI(DLPackVersion(1, 3), None, _ALLOCATOR(_allocate), _FROM_PY(_from_py),
                    _TO_PY(_to_py), _c_entry(_DLTENSOR_FROM_PY, "fake_exchange_dltensor"),
                    _c_entry(_CURRENT_STREAM, "fake_exchange_current_work_stream"))
FakeCudaTensor.__dlpack_c_exchange_api__ = _capsule_new(ctypes.addressof(_API), _API_NAME,
                                                        None)
