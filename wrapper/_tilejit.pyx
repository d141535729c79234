# cython: language_level=3
"""The Cython binding: Python objects in, one core call, Python objects out.

Thin by design: it classifies each argument into a ``tj_arg`` (a scalar, or an object
with the producer that can read it), hands the whole call to the core's sequencer
(``tj_call_run``) and raises what the core reports, in one place (``_check``).
Import, validation, binding, the stream, outputs, launch and release live in ``core/``.

Layering: this module imports nothing from ``tilejit``. What it needs from Python
(``__dlpack__`` capsules, framework allocators and streams, stream handles, the
formatting of producer errors) it is handed once by ``configure`` (tilejit.host).

Files, by concern: ``_errors.pxi`` (status codes to exceptions),
``_producers.pxi`` (the host table and the producer of each Python type),
``_array.pxi`` (``tilejit.Array``), ``_layout.pxi`` (layout views),
``_jit_keys.pxi`` (keys of ``jit(layout=...)`` calls),
``_kernel.pxi`` (the kernel object and its call).
"""
from cpython.bool cimport PyBool_Check
from cpython.dict cimport PyDict_GetItem
from cpython.exc cimport PyErr_Occurred, PyErr_SetObject
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong,
                           PyLong_AsVoidPtr, PyLong_Check, PyLong_FromVoidPtr)
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_SetName
from libc.stdint cimport int32_t, int64_t, intptr_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free

from core cimport *
from dlpack cimport (DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
                     DLPackExchangeAPIHeader, DLTensor, kDLCPU)


__version__ = TJ_VERSION.decode()


class _Hooks:
    """What tilejit hands the wrapper (``configure``); unset until then."""
    dlpack_capsule = None
    producer_error = None
    allocate = None
    framework_stream = None
    stream_handle = None
    pointer_type = None
    type_name = None
    scalar_kind = None
    view_check = None
    lazy_view = None
    framework_claim = None


cdef object _hooks = _Hooks


def configure(*, dlpack_capsule, producer_error, allocate, framework_stream, stream_handle,
              pointer_type, type_name, scalar_kind, view_check, lazy_view, framework_claim):
    """Installs the Python functions the binding calls back (see tilejit.host): once,
    by tilejit, before any kernel is made."""
    _hooks.dlpack_capsule = dlpack_capsule
    _hooks.producer_error = producer_error
    _hooks.allocate = allocate
    _hooks.framework_stream = framework_stream
    _hooks.stream_handle = stream_handle
    _hooks.pointer_type = pointer_type
    _hooks.type_name = type_name
    _hooks.scalar_kind = scalar_kind
    _hooks.view_check = view_check
    _hooks.lazy_view = lazy_view
    _hooks.framework_claim = framework_claim


include "_errors.pxi"
include "_producers.pxi"
include "_array.pxi"
include "_layout.pxi"
include "_jit_keys.pxi"
include "_kernel.pxi"
