# tilejit's own tensor: tilejit.empty() and the outputs of kernels called without any
# framework tensor. Included by _tilejit.pyx.
#
# An Array owns one aligned host allocation (or, when it wraps a tensor another producer
# handed us, that managed tensor). It is a DLPack producer both ways: __dlpack__ capsules
# for any consumer, and a DLPack C exchange-API table on the type, which tilejit's own
# wrapper (and any other exchange-API consumer) uses to read it and to allocate outputs.
# Every exported managed tensor holds a reference to its Array, dropped by its deleter.

from cpython.pycapsule cimport PyCapsule_New
from libc.string cimport memcpy

from dlpack cimport (DLPackCurrentWorkStream, DLPackDLTensorFromPyObjectNoSync,
                     DLPackManagedTensorAllocator, DLPackManagedTensorFromPyObjectNoSync,
                     DLPackManagedTensorToPyObjectNoSync, DLPackVersion,
                     DLPACK_FLAG_BITMASK_READ_ONLY, DLDeviceType)

import operator

from tilejit.language.dtypes import DTYPES as _DTYPES


cdef extern from "stdlib.h" nogil:
    void *aligned_alloc(size_t alignment, size_t size)


cdef extern from "Python.h":
    void Py_DecRef(PyObject *)

cdef int64_t _ARRAY_ALIGN = 64

# An exported tensor: the DLPack struct plus room for its own shape and strides, so
# the consumer's view stays valid whatever happens to the Array's Python attributes.
ctypedef struct _Export:
    DLManagedTensorVersioned managed
    int64_t dims[2 * TJ_MAX_NDIM]


# Consumers may delete from any thread, with or without the GIL: `with gil` takes it.
cdef void _export_deleter(DLManagedTensorVersioned *self) noexcept with gil:
    Py_DecRef(<PyObject *>self.manager_ctx)
    free(self)


cdef void _legacy_deleter(DLManagedTensor *self) noexcept with gil:
    Py_DecRef(<PyObject *>self.manager_ctx)
    free(self)


cdef void _capsule_destructor(object capsule) noexcept:
    # A capsule never consumed still owns its tensor; a consumed one was renamed.
    cdef DLManagedTensorVersioned *versioned
    cdef DLManagedTensor *legacy
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        versioned = <DLManagedTensorVersioned *>PyCapsule_GetPointer(
            capsule, b"dltensor_versioned")
        versioned.deleter(versioned)
    elif PyCapsule_IsValid(capsule, b"dltensor"):
        legacy = <DLManagedTensor *>PyCapsule_GetPointer(capsule, b"dltensor")
        legacy.deleter(legacy)


# The element types of tilejit's table (tilejit/language/dtypes.py), read once at import.
_ARRAY_DTYPES = {d.name: (d.code, d.bits) for d in _DTYPES.values()}
_ARRAY_NAMES = {value: name for name, value in _ARRAY_DTYPES.items()}


cdef DLPackExchangeAPI _array_api  # filled below, once the functions it names exist


cdef class Array:
    """A minimal host tensor that speaks DLPack; see ``tilejit.empty``.

    >>> a = tilejit.empty((2, 3), "float32")
    >>> torch.from_dlpack(a).shape     # zero-copy
    torch.Size([2, 3])
    """
    # Published on the type, as the exchange-API proposal asks: a class attribute of the
    # type's own (the table is static, its fields set at module load).
    __dlpack_c_exchange_api__ = PyCapsule_New(&_array_api, b"dlpack_exchange_api", NULL)
    cdef DLTensor _t
    cdef int64_t _dims[2 * TJ_MAX_NDIM]
    cdef void *_data  # owned allocation, or NULL when wrapping
    cdef DLManagedTensorVersioned *_wrapped  # owned foreign tensor, or NULL
    cdef bint _read_only
    cdef object __weakref__

    def __cinit__(self):
        self._data = NULL
        self._wrapped = NULL

    def __dealloc__(self):
        free(self._data)
        if self._wrapped != NULL and self._wrapped.deleter != NULL:
            self._wrapped.deleter(self._wrapped)

    @property
    def shape(self):
        return tuple([self._t.shape[d] for d in range(self._t.ndim)])

    @property
    def strides(self):
        """Strides in elements."""
        return tuple([self._t.strides[d] for d in range(self._t.ndim)])

    @property
    def dtype(self):
        return _ARRAY_NAMES.get((self._t.dtype.code, self._t.dtype.bits), "unknown")

    @property
    def device(self):
        return "cpu"

    @property
    def data_ptr(self):
        return <uintptr_t>self._t.data + self._t.byte_offset

    @property
    def nbytes(self):
        return _numel(&self._t) * ((self._t.dtype.bits * self._t.dtype.lanes + 7) // 8)

    def __repr__(self):
        return f"tilejit.Array(shape={self.shape}, dtype={self.dtype}, device=cpu)"

    def __dlpack_device__(self):
        return (self._t.device.device_type, self._t.device.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("tilejit.Array does not copy on export")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"tilejit.Array lives on {self.__dlpack_device__()}, "
                              f"not {tuple(dl_device)}")
        if max_version is not None and max_version[0] >= 1:
            return PyCapsule_New(_export(self), b"dltensor_versioned", _capsule_destructor)
        if self._read_only:
            raise BufferError("a read-only tilejit.Array needs a DLPack >= 1.0 consumer")
        return PyCapsule_New(_export_legacy(self), b"dltensor", _capsule_destructor)


cdef int64_t _numel(const DLTensor *t) noexcept:
    cdef int64_t n = 1
    for d in range(t.ndim):
        n *= t.shape[d]
    return n


cdef DLManagedTensorVersioned *_export(Array array) except NULL:
    cdef _Export *e = <_Export *>calloc(1, sizeof(_Export))
    if e == NULL:
        raise MemoryError()
    e.managed.version.major = TJ_DLPACK_MAJOR
    e.managed.version.minor = TJ_DLPACK_MINOR
    e.managed.dl_tensor = array._t
    memcpy(e.dims, array._dims, sizeof(e.dims))
    e.managed.dl_tensor.shape = e.dims
    e.managed.dl_tensor.strides = e.dims + TJ_MAX_NDIM
    e.managed.flags = DLPACK_FLAG_BITMASK_READ_ONLY if array._read_only else 0
    Py_INCREF(array)
    e.managed.manager_ctx = <void *>array
    e.managed.deleter = _export_deleter
    return &e.managed


ctypedef struct _LegacyExport:
    DLManagedTensor managed
    int64_t dims[2 * TJ_MAX_NDIM]


cdef DLManagedTensor *_export_legacy(Array array) except NULL:
    cdef _LegacyExport *e = <_LegacyExport *>calloc(1, sizeof(_LegacyExport))
    if e == NULL:
        raise MemoryError()
    e.managed.dl_tensor = array._t
    memcpy(e.dims, array._dims, sizeof(e.dims))
    e.managed.dl_tensor.shape = e.dims
    e.managed.dl_tensor.strides = e.dims + TJ_MAX_NDIM
    Py_INCREF(array)
    e.managed.manager_ctx = <void *>array
    e.managed.deleter = _legacy_deleter
    return &e.managed


cdef Array _new_array(tuple shape, int code, int bits):
    """A compact, uninitialised host Array."""
    if len(shape) > TJ_MAX_NDIM:
        raise ValueError(f"tilejit.empty: at most {TJ_MAX_NDIM} dimensions, got {len(shape)}")
    cdef Array a = Array.__new__(Array)
    cdef int64_t n = 1
    cdef int32_t d
    a._t.ndim = len(shape)
    for d in range(a._t.ndim):
        if shape[d] < 0:
            raise ValueError(f"tilejit.empty: negative dimension {shape[d]} in {shape}")
        a._dims[d] = shape[d]
        n *= shape[d]
    cdef int64_t stride = 1
    for d in range(a._t.ndim - 1, -1, -1):
        a._dims[TJ_MAX_NDIM + d] = stride
        stride *= a._dims[d]
    cdef int64_t nbytes = n * ((bits + 7) // 8)
    # Round up so aligned_alloc's size is a multiple of the alignment; never 0.
    cdef int64_t blocks = (nbytes + _ARRAY_ALIGN - 1) // _ARRAY_ALIGN
    a._data = aligned_alloc(_ARRAY_ALIGN, (blocks if blocks > 0 else 1) * _ARRAY_ALIGN)
    if a._data == NULL:
        raise MemoryError(f"tilejit.empty: cannot allocate {nbytes} bytes")
    a._t.data = a._data
    a._t.device.device_type = kDLCPU
    a._t.device.device_id = 0
    a._t.dtype.code = code
    a._t.dtype.bits = bits
    a._t.dtype.lanes = 1
    a._t.shape = a._dims
    a._t.strides = a._dims + TJ_MAX_NDIM
    a._t.byte_offset = 0
    return a


def empty(shape, dtype="float32", device="cpu"):
    """An uninitialised compact tilejit.Array on the host.

    >>> a = tilejit.empty((4, 4), "float32")
    """
    if device not in ("cpu", None):
        raise ValueError(f"tilejit.empty: device {device!r} is not supported (only 'cpu')")
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name not in _ARRAY_DTYPES:
        raise ValueError(f"tilejit.empty: unknown dtype {dtype!r}")
    code, bits = _ARRAY_DTYPES[name]
    dims = _shape(shape)
    nbytes = (bits + 7) // 8
    for size in dims:
        nbytes *= size
    if nbytes > _MAX_BYTES or any(size > _MAX_BYTES for size in dims):
        raise ValueError(f"tilejit.empty: shape {dims} of {name} is {nbytes} bytes, more than "
                         f"an array can hold ({_MAX_BYTES} bytes)")
    return _new_array(dims, code, bits)


_MAX_BYTES = 2**63 - 1


def _shape(shape) -> tuple:
    """``shape`` as a tuple of Python ints: an int (or an object with ``__index__``: a NumPy
    integer) is one dimension; a bool, a float or a string is refused, as NumPy and torch
    refuse it."""
    if hasattr(type(shape), "__index__") and not isinstance(shape, bool):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"tilejit.empty: expected a shape (a tuple of ints), got "
                        f"{type(shape).__name__} {shape!r}") from None
    dims = []
    for size in items:
        if isinstance(size, bool) or not hasattr(type(size), "__index__"):
            raise TypeError(f"tilejit.empty: expected the shape's dimensions as ints, got "
                            f"{type(size).__name__} {size!r} in {items!r}")
        dims.append(operator.index(size))
    return tuple(dims)


# ---- The exchange-API table of tilejit.Array ------------------------------------------

cdef int _array_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                          void (*set_error)(void *, const char *, const char *) noexcept
                          ) noexcept with gil:
    if prototype.device.device_type != kDLCPU or prototype.dtype.lanes != 1:
        set_error(error_ctx, b"ValueError", b"tilejit.Array allocates host tensors only")
        return -1
    try:
        shape = tuple([prototype.shape[d] for d in range(prototype.ndim)])
        out[0] = _export(_new_array(shape, prototype.dtype.code, prototype.dtype.bits))
        return 0
    except Exception as exc:
        message = str(exc).encode("utf-8", "replace")
        set_error(error_ctx, b"RuntimeError", message)
        return -1


cdef int _array_from_py(void *obj, DLManagedTensorVersioned **out) noexcept with gil:
    try:
        out[0] = _export(<Array>obj)
        return 0
    except Exception:
        return -1  # the exception stays set for the caller


cdef int _array_to_py(DLManagedTensorVersioned *tensor, void **out) noexcept with gil:
    cdef Array a
    try:
        if tensor.deleter == _export_deleter:
            a = <Array>tensor.manager_ctx  # one of ours: hand back the Array itself
            Py_INCREF(a)
            out[0] = <void *>a
            tensor.deleter(tensor)
            return 0
        if tensor.dl_tensor.ndim > TJ_MAX_NDIM:
            raise ValueError(f"tilejit.Array holds at most {TJ_MAX_NDIM} dimensions")
        a = Array.__new__(Array)
        a._t = tensor.dl_tensor
        for d in range(a._t.ndim):
            a._dims[d] = tensor.dl_tensor.shape[d]
            a._dims[TJ_MAX_NDIM + d] = (tensor.dl_tensor.strides[d]
                                        if tensor.dl_tensor.strides != NULL else 0)
        if tensor.dl_tensor.strides == NULL:
            stride = 1
            for d in range(a._t.ndim - 1, -1, -1):
                a._dims[TJ_MAX_NDIM + d] = stride
                stride *= a._dims[d]
        a._t.shape = a._dims
        a._t.strides = a._dims + TJ_MAX_NDIM
        a._read_only = (tensor.flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0
        a._wrapped = tensor
        Py_INCREF(a)
        out[0] = <void *>a
        return 0
    except Exception:
        return -1


cdef int _array_view(void *obj, DLTensor *out) noexcept with gil:
    out[0] = (<Array>obj)._t
    return 0


cdef int _array_stream(DLDeviceType device_type, int32_t device_id, void **out) noexcept:
    out[0] = NULL
    return 0


_array_api.header.version.major = TJ_DLPACK_MAJOR
_array_api.header.version.minor = TJ_DLPACK_MINOR
_array_api.header.prev_api = NULL
_array_api.managed_tensor_allocator = <DLPackManagedTensorAllocator>_array_allocator
_array_api.managed_tensor_from_py_object_no_sync = (
    <DLPackManagedTensorFromPyObjectNoSync>_array_from_py)
_array_api.managed_tensor_to_py_object_no_sync = (
    <DLPackManagedTensorToPyObjectNoSync>_array_to_py)
_array_api.dltensor_from_py_object_no_sync = <DLPackDLTensorFromPyObjectNoSync>_array_view
_array_api.current_work_stream = <DLPackCurrentWorkStream>_array_stream
