"""A DLPack producer written with ctypes, for tests that need to see inside the protocol:
how often a tensor is exported and deleted, device memory without a device, flags."""

from __future__ import annotations

import ctypes

from tilejit.native.ctypes_abi import DLTensor


class _Versioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PyDLL(None).PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeTensor:
    """A DLPack producer of one versioned managed tensor, which it exports as often as
    asked (``exports``) and whose deleter calls it counts (``deletes``). Its data pointer
    is never dereferenced unless a test points it at real memory.

    >>> f = FakeTensor((2, 3), device=(2, 0))    # a "CUDA" tensor on a CPU-only machine
    """

    def __init__(self, shape, strides=None, device=(1, 0), dtype=(2, 32, 1), flags=0,
                 data=0x10000, byte_offset=0):
        n = len(shape)
        self.device = device
        self.exports = 0
        self.deletes = 0
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(n, 1))(*strides)
        self._deleter = _DELETER(self._delete)
        m = self._managed = _Versioned()
        m.major, m.minor, m.flags = 1, 3, flags
        m.deleter = ctypes.cast(self._deleter, ctypes.c_void_p)
        t = m.dl_tensor
        t.data, t.ndim, t.byte_offset = data, n, byte_offset
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
        t.shape = self._shape
        if self._strides is not None:
            t.strides = self._strides

    def _delete(self, _):
        self.deletes += 1

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.exports += 1
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor_versioned", None)

    def __dlpack_device__(self):
        return self.device
