# cython: language_level=3
"""The Cython binding: the kernel type whose calls go straight into the core.

A call of a kernel is CPython's vectorcall of ``Kernel``, which hands the arguments in
place to the core's host layer (``tj_host_call``, core/src/host.c): classification,
producers, ``stream=``, the sequencer, the result and the exception are the core's, as
for every backend. What is really this binding's own: the ``Kernel`` type and its build
per interpreter, ``tilejit.Array`` (an exchange-API producer with no framework), layout
views (``from_dlpack``) and the keys of ``jit(layout=...)`` calls.

Layering: this module imports nothing from ``tilejit``. The host table and the Python
functions it needs (``__dlpack__`` capsules, the formatting of producer errors) are
handed over once by ``configure`` (tilejit.runtime.cython_backend).

Files, by concern: ``_errors.pxi`` (status codes to exceptions, for the functions
here), ``_producers.pxi`` (the host table's use here), ``_array.pxi``
(``tilejit.Array``), ``_layout.pxi`` (layout views), ``_jit_keys.pxi`` (keys of
``jit(layout=...)`` calls), ``_kernel.pxi`` (the kernel type).
"""
from cpython.exc cimport PyErr_Occurred
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int32_t, int64_t, intptr_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free

from core cimport *
from dlpack cimport (DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPackExchangeAPI,
                     DLTensor, kDLCPU)


__version__ = TJ_VERSION.decode()


class _Hooks:
    """What tilejit hands the wrapper (``configure``); unset until then."""
    dlpack_capsule = None
    producer_error = None


cdef object _hooks = _Hooks
cdef const tj_host *_host = NULL  # the process's host table (tilejit.runtime.binding)


def configure(*, host_address, dlpack_capsule, producer_error):
    """Installs the host table and the Python functions the binding calls back: once,
    by tilejit, before any kernel is made."""
    global _host
    _host = <const tj_host *><uintptr_t>host_address
    _hooks.dlpack_capsule = dlpack_capsule
    _hooks.producer_error = producer_error
    for mode in range(2):
        _view_producers[mode].host = _host


include "_errors.pxi"
include "_producers.pxi"
include "_array.pxi"
include "_layout.pxi"
include "_jit_keys.pxi"
include "_kernel.pxi"
