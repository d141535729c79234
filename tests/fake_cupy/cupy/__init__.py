"""A stand-in for CuPy on machines without a GPU (tests/test_cupy.py): the few parts of
CuPy's API that tilejit's adapter uses, over fake device memory that nothing dereferences
(the fake CUDA driver launches nothing), and a record of everything asked of it.

- ``ndarray(shape, dtype, device_id=None, strides=None)``: an array "on" a device (the
  current one by default), an address, a shape and strides in bytes, exported through
  DLPack (``__dlpack__``, ``__dlpack_device__``) and ``__cuda_array_interface__``;
- ``empty(shape, dtype)``: a new array on the current device (``cuda.Device``);
- ``cuda``: ``Device`` and ``Stream`` context managers, ``get_current_stream``, ``Event``.

``RECORD`` keeps what happened: ``allocations`` ((shape, dtype name, device) of each
``empty``), ``streams`` (each ``get_current_stream`` answer's ``ptr``), ``dlpack`` (the
keywords of each ``__dlpack__`` call). ``reset()`` forgets it.
"""

from __future__ import annotations

import ctypes

import numpy

from tilejit.native.ctypes_abi import DLTensor

from . import cuda

__version__ = "13.99.0+fake"
FAKE = True
RECORD: dict = {"allocations": [], "streams": [], "dlpack": []}

dtype = numpy.dtype
float16, float32, float64 = numpy.float16, numpy.float32, numpy.float64
int32, int64, uint8 = numpy.int32, numpy.int64, numpy.uint8


def reset() -> None:
    for kept in RECORD.values():
        kept.clear()
    cuda._reset()


class _Versioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class _Legacy(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DLPACK_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
_next_address = [0x7E0000000000]


class _Memory:
    def __init__(self, ptr: int, device_id: int):
        self.ptr, self.device_id = ptr, device_id


class ndarray:  # CuPy's name
    """A CuPy array on a fake device: only an address, a shape, strides and a dtype."""

    def __init__(self, shape, dtype=numpy.float32, device_id=None, strides=None, address=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = numpy.dtype(dtype)
        self.device = cuda.Device(cuda._current_device() if device_id is None else device_id)
        size = max(int(numpy.prod(self.shape)), 1) * self.dtype.itemsize
        if address is None:
            address = _next_address[0]
            _next_address[0] += max(size, 1 << 20)
        self.data = _Memory(address, self.device.id)
        itemsize = self.dtype.itemsize
        if strides is None:
            strides, step = [], itemsize
            for extent in reversed(self.shape):
                strides.insert(0, step)
                step *= max(extent, 1)
        self.strides = tuple(strides)
        self._exports = []  # the DLPack structures handed out, alive with the array

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(numpy.prod(self.shape))

    def __dlpack_device__(self):
        return (2, self.device.id)  # kDLCUDA

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        RECORD["dlpack"].append({"stream": stream, "max_version": max_version})
        if stream is not None and (not isinstance(stream, int) or stream == 0 or stream < -1):
            raise ValueError(f"invalid stream {stream!r}")  # as DLPack (and CuPy) say
        versioned = max_version is not None and max_version[0] >= 1
        managed = _Versioned() if versioned else _Legacy()
        n, t = self.ndim, managed.dl_tensor
        shape = (ctypes.c_int64 * max(n, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(n, 1))(*(s // self.dtype.itemsize for s in self.strides))
        t.data, t.ndim, t.byte_offset = self.data.ptr, n, 0
        t.device.device_type, t.device.device_id = 2, self.device.id
        t.dtype.code = _DLPACK_CODES[self.dtype.kind]
        t.dtype.bits, t.dtype.lanes = self.dtype.itemsize * 8, 1
        t.shape, t.strides = shape, strides
        # No deleter (DLPack allows NULL): the array owns the structures. A deleter written
        # in Python would be called by the consumer while an exception may be pending.
        managed.deleter = None
        if versioned:
            managed.major, managed.minor = 1, 0
        self._exports.append((managed, shape, strides))
        name = b"dltensor_versioned" if versioned else b"dltensor"
        return _capsule_new(ctypes.addressof(managed), name, None)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": self.strides, "version": 3,
                "stream": cuda.get_current_stream().ptr or 1}

    def __getitem__(self, key):
        """Basic slicing of a 1-d array with a step (a strided view), for tests."""
        if self.ndim != 1 or not isinstance(key, slice):
            raise NotImplementedError("the fake slices 1-d arrays only")
        start, stop, step = key.indices(self.shape[0])
        count = len(range(start, stop, step))
        return ndarray((count,), self.dtype, self.device.id, (self.strides[0] * step,),
                       self.data.ptr + start * self.strides[0])


def empty(shape, dtype=numpy.float32, order="C"):
    """A new array on the current device (recorded)."""
    if isinstance(shape, int):
        shape = (shape,)
    array = ndarray(shape, numpy.dtype(dtype))
    RECORD["allocations"].append((array.shape, array.dtype.name, array.device.id))
    return array


def asarray(values, dtype=None):
    """A fake array of ``values``' shape and dtype (the values themselves are not kept)."""
    values = numpy.asarray(values, dtype=dtype)
    return ndarray(values.shape, values.dtype)
