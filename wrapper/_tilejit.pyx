# cython: language_level=3
"""The per-call hot path: Python objects in, core calls, Python objects out.

Thin by design (STYLE.md): it converts arguments into ``tj_arg`` records,
calls the core, and maps core status codes to exceptions in one place
(``_raise``). Validation, binding and launch live in ``core/``.
"""
from cpython.bool cimport PyBool_Check
from cpython.dict cimport PyDict_GetItem
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.long cimport (PyLong_AsLongLongAndOverflow, PyLong_AsVoidPtr, PyLong_Check,
                           PyLong_FromVoidPtr)
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_SetName
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport free, malloc

from core cimport *
from dlpack_abi cimport (DLDataType, DLManagedTensor, DLManagedTensorVersioned,
                         DLPackExchangeAPI, DLPackExchangeAPIHeader, DLTensor,
                         TJ_DLPACK_MAJOR, kDLCPU)


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        const char *tp_name
    PyTypeObject *Py_TYPE(object)


__version__ = TJ_VERSION.decode()

_EXCEPTIONS = {
    TJ_ETYPE: TypeError,
    TJ_EVALUE: ValueError,
    TJ_ERUNTIME: RuntimeError,
    TJ_ENOMEM: MemoryError,
}


cdef int _raise(int rc) except -1:
    """Turns a failed core status into the matching Python exception."""
    if rc == TJ_EPYERR:
        return -1  # the exception is already set
    raise _EXCEPTIONS.get(rc, RuntimeError)(tj_last_error().decode("utf-8", "replace"))


cdef inline int _check(int rc) except -1:
    if rc != TJ_OK:
        _raise(rc)
    return 0


cdef int _import_dlpack(object obj, tj_arg *arg, bytes what) except -1:
    """Standard protocol: ``__dlpack__`` capsule, versioned or legacy.

    On success ``arg`` owns the managed tensor (``tj_arg_release`` deletes it)
    and the capsule is renamed ``used_*`` so its destructor leaves it alone.
    """
    cdef object capsule
    cdef void *ptr
    capsule = _dlpack_capsule(obj)
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        ptr = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        _check(tj_arg_from_versioned(arg, <DLManagedTensorVersioned *>ptr, NULL))
    elif PyCapsule_IsValid(capsule, b"dltensor"):
        ptr = PyCapsule_GetPointer(capsule, b"dltensor")
        PyCapsule_SetName(capsule, b"used_dltensor")
        tj_arg_from_legacy(arg, <DLManagedTensor *>ptr)
    else:
        raise TypeError(f"{what.decode()}: __dlpack__ returned {capsule!r}, not a DLPack capsule")
    return 0


# type -> int address of its DLPackExchangeAPI table (0: the type has none). The
# dict keeps each type alive, so an address is never reused for another type;
# _api_owners keeps the capsule or int that published the table alive too.
cdef dict _apis = {}
cdef dict _api_owners = {}


cdef const DLPackExchangeAPI *_discover_api(object cls) except? NULL:
    """Reads a type's exchange-API table once: the capsule attribute, else the
    older int-valued one; walks prev_api to a major version we speak."""
    cdef const DLPackExchangeAPIHeader *header = NULL
    owner = getattr(cls, "__dlpack_c_exchange_api__", None)
    if owner is not None and PyCapsule_IsValid(owner, b"dlpack_exchange_api"):
        header = <const DLPackExchangeAPIHeader *>PyCapsule_GetPointer(
            owner, b"dlpack_exchange_api")
    else:
        owner = getattr(cls, "__c_dlpack_exchange_api__", None)
        if isinstance(owner, int) and owner:
            header = <const DLPackExchangeAPIHeader *>PyLong_AsVoidPtr(owner)
    while header != NULL and header.version.major != TJ_DLPACK_MAJOR:
        header = header.prev_api
    cdef const DLPackExchangeAPI *api = <const DLPackExchangeAPI *>header
    if api != NULL and (api.managed_tensor_from_py_object_no_sync == NULL
                        or api.managed_tensor_to_py_object_no_sync == NULL
                        or api.managed_tensor_allocator == NULL):
        api = NULL  # a table missing required entries is not one we can use
    _api_owners[cls] = owner
    _apis[cls] = PyLong_FromVoidPtr(<void *>api)
    return api


# A one-entry memo in front of the dict: a call's tensors are nearly always of one
# type, so most lookups end here. Both globals change together under the GIL.
cdef PyObject *_last_type = NULL
cdef const DLPackExchangeAPI *_last_api = NULL


cdef inline const DLPackExchangeAPI *_exchange_api(object cls) except? NULL:
    global _last_type, _last_api
    if <PyObject *>cls == _last_type:
        return _last_api
    cdef PyObject *entry = PyDict_GetItem(_apis, cls)
    cdef const DLPackExchangeAPI *api
    if entry != NULL:
        api = <const DLPackExchangeAPI *>PyLong_AsVoidPtr(<object>entry)
    else:
        api = _discover_api(cls)
    # The dict holds a reference to every type seen, so the borrowed pointer stays valid.
    _last_type = <PyObject *>cls
    _last_api = api
    return api


cdef int _import_exchange(object obj, tj_arg *arg, const DLPackExchangeAPI *api) except -1:
    """Exchange API without the non-owning view: an owning export, deleted by
    tj_arg_release after the call."""
    cdef DLManagedTensorVersioned *managed = NULL
    if api.managed_tensor_from_py_object_no_sync(<void *>obj, &managed) != 0:
        return -1  # the producer set a Python exception
    return _check(tj_arg_from_versioned(arg, managed, NULL))


cdef object _allocate_exchange(const DLPackExchangeAPI *api, tj_frame *frame, int32_t i,
                               tj_arg *out, object label):
    """Output ``i`` from the producer's own allocator, validated (tj_call_allocate_output);
    returns the producer's new tensor object."""
    cdef void *result = NULL
    cdef int rc = tj_call_allocate_output(frame, i, api, out, &result)
    tensor = None
    if result != NULL:
        tensor = <object>result
        Py_DECREF(tensor)  # <object> took a reference; the producer gave us one already
    if rc == TJ_EPYERR:
        try:
            _pending()
        except Exception as exc:
            raise type(exc)(f"{label}: the producer could not return the output: {exc}") \
                from exc
    _check(rc)
    return tensor


include "_layout.pxi"

from tilejit.layout import Pointer as _Pointer


cdef extern from "Python.h":
    ctypedef struct PyInterpreterState:
        pass
    ctypedef struct PyThreadState:
        pass
    PyThreadState *PyThreadState_Get()
    PyInterpreterState *PyInterpreterState_Get()
    PyThreadState *PyInterpreterState_ThreadHead(PyInterpreterState *)
    PyThreadState *PyThreadState_Next(PyThreadState *)


cdef inline bint _single_thread() noexcept:
    """Whether this is the interpreter's only thread. Then no Python thread can be
    waiting for the GIL, and dropping and retaking it around the kernel (a mutex and a
    condition variable, about a fifth of a no-op call) would buy nothing; with any other
    thread the kernel runs without the GIL."""
    cdef PyThreadState *head = PyInterpreterState_ThreadHead(PyInterpreterState_Get())
    return head != NULL and PyThreadState_Next(head) == NULL


cdef int _pending() except -1:
    """Raises the exception a C callee left set (Cython propagates it from here)."""
    return -1


cdef int _convert(object obj, tj_arg *arg, bytes what, bint exchange) except -1:
    """Classifies one Python argument; the core decides whether it fits."""
    cdef int overflow = 0
    if obj is None:
        return 0
    if type(obj) is TensorView:  # imported once by from_dlpack: its DLTensor as it is
        tj_arg_from_dltensor(arg, &(<TensorView>obj)._tensor, (<TensorView>obj)._flags)
        return 0
    if PyBool_Check(obj):
        arg.kind = TJ_ARG_BOOL
        arg.value.i = 1 if obj is True else 0
        return 0
    if PyLong_Check(obj):
        arg.kind = TJ_ARG_INT
        arg.value.i = PyLong_AsLongLongAndOverflow(obj, &overflow)
        if overflow:
            arg.flags |= TJ_ARG_OUT_OF_RANGE
        return 0
    # Exact: a subtype check costs a walk of the MRO for every tensor; float subclasses
    # (numpy.float64) are taken by the __float__ branch below.
    if PyFloat_CheckExact(obj):
        arg.kind = TJ_ARG_FLOAT
        arg.value.f = PyFloat_AS_DOUBLE(obj)
        return 0
    if type(obj) is _Pointer:  # tilejit.make_ptr: an address that knows what it points to
        arg.kind = TJ_ARG_ADDRESS
        arg.value.p = PyLong_AsVoidPtr(obj.address)
        arg.tensor.dtype.code, arg.tensor.dtype.bits, arg.tensor.dtype.lanes = obj.dlpack_dtype
        arg.tensor.device.device_type = obj.dlpack_device_type
        return 0
    cls = type(obj)
    cdef const DLPackExchangeAPI *api = _exchange_api(cls) if exchange else NULL
    # The hot path: the producer fills the DLTensor, nothing to set up or release.
    if api != NULL and api.dltensor_from_py_object_no_sync != NULL:
        if api.dltensor_from_py_object_no_sync(<void *>obj, &arg.tensor) == 0:
            arg.kind = TJ_ARG_TENSOR
            return 0
    if api != NULL or hasattr(cls, "__dlpack__"):
        try:
            if api == NULL:
                return _import_dlpack(obj, arg, what)
            if api.dltensor_from_py_object_no_sync != NULL:
                return _pending()  # the view above failed; its exception is set
            return _import_exchange(obj, arg, api)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise _import_failure(what.decode(), exc) from exc
    # NumPy and other scalar types: integers first, so 3 never becomes 3.0.
    if cls.__name__ in ("bool", "bool_"):
        arg.kind = TJ_ARG_BOOL
        arg.value.i = 1 if obj else 0
    elif hasattr(cls, "__index__"):
        return _convert(obj.__index__(), arg, what, exchange)
    elif hasattr(cls, "__float__") and not hasattr(cls, "__len__"):
        arg.kind = TJ_ARG_FLOAT
        arg.value.f = float(obj)
    else:
        arg.kind = TJ_ARG_OTHER
        arg.type_name = Py_TYPE(obj).tp_name
    return 0


include "_array.pxi"


from tilejit.dlpack_import import dlpack_capsule as _dlpack_capsule
from tilejit.dlpack_import import import_failure as _import_failure
from tilejit.streams import framework_stream as _framework_stream
from tilejit.streams import stream_handle as _stream_handle


cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct PyTypeObject_vc "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


cdef object _kernel_vectorcall(object self, PyObject **args, size_t nargsf,
                               PyObject *kwnames):
    """The vectorcall entry of kernels: ``kernel(a, b, c)`` from Python arrives here
    with the arguments in place, no tuple, no keyword dict."""
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    stream = None
    if kwnames != NULL:
        names = <tuple>kwnames
        for j in range(len(names)):
            if names[j] != "stream":
                raise TypeError(f"{(<Kernel>self)._name}() got an unexpected keyword argument "
                                f"'{names[j]}'")
            stream = <object>args[count + j]
    return (<Kernel>self)._call(args, count, stream)


def _enable_vectorcall(type cls):
    """Turns on the vectorcall protocol for ``cls`` (Kernel or a subclass of it: CPython
    before 3.12 does not pass the flag on to heap subclasses). Calls then skip building
    an argument tuple."""
    cdef Kernel probe = Kernel.__new__(Kernel)
    cdef Py_ssize_t offset = <Py_ssize_t>(<char *>&probe._vectorcall - <char *><PyObject *>probe)
    cdef PyTypeObject_vc *t = <PyTypeObject_vc *><PyObject *>cls
    t.tp_vectorcall_offset = offset
    t.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    PyType_Modified(cls)


cdef class Kernel:
    """A finalized core kernel plus what the hot path needs to call it.

    ``spec`` is the plain description built by ``tilejit.signature``:
    ``(name, target, symbols, exprs, params, launch)`` where symbols are
    ``(name, divisibility)``, exprs ``(code, text)`` with code a flat tuple of
    (op, operand) pairs, params ``(kind, name, (code, bits, lanes),
    shape_ids, stride_ids or None, align, flags)``, and launch ``None`` (CPU)
    or the expression ids ``(grid_ids[3], block_ids[3], shared_mem_id)`` of a
    CUDA kernel. ``allocate(like, shape, index)`` returns a new output tensor
    for output ``index``.
    """
    cdef tj_kernel *_k
    cdef int32_t _nargs
    cdef int32_t _nout
    cdef tuple _labels  # "kernel: argument i 'name'" per caller argument, as bytes
    cdef tuple _out_labels  # "kernel: output 'name'" per output, as str
    cdef object _allocate
    cdef bint _exchange  # use producers' DLPack exchange API when they have one
    cdef tuple _out_order  # None when outputs return in declaration order
    cdef str _name
    cdef void *_vectorcall  # _kernel_vectorcall; see _enable_vectorcall

    def __cinit__(self, *args, **kwargs):
        # Python subclasses (tilejit.JITKernel's backend classes) pass their own
        # constructor arguments through here; the kernel is built by _bind.
        self._k = NULL
        self._vectorcall = <void *>_kernel_vectorcall

    def _bind(self, tuple spec, str library, str entry, object allocate, bint exchange_api,
              tuple out_order):
        """Builds and loads the core kernel; once. ``exchange_api`` False makes
        every tensor go through ``__dlpack__`` (the ``dlpack`` backend).
        ``out_order[j]`` is the core output number returned in position j."""
        if self._k != NULL:
            raise RuntimeError("kernel already bound")
        name, target, symbols, exprs, params, launch = spec
        self._name = name
        self._allocate = allocate
        self._exchange = exchange_api
        self._out_order = None if out_order == tuple(range(len(out_order))) else out_order
        _check(tj_kernel_create(name.encode(), len(params), target, &self._k))
        for sym_name, divisibility in symbols:
            _check(tj_kernel_add_symbol(self._k, sym_name.encode(), divisibility))
        cdef int32_t expr_id
        for code, text in exprs:
            self._add_expr(code, text.encode(), &expr_id)
        labels = []
        out_labels = []
        for index, param in enumerate(params):
            self._add_param(index, param)
            if param[6] & TJ_BUF_OUTPUT:
                out_labels.append(f"{name}: output '{param[1]}'")
            else:
                labels.append(f"{name}: argument {len(labels)} '{param[1]}'".encode())
        self._labels = tuple(labels)
        self._out_labels = tuple(out_labels)
        cdef int32_t grid_ids[3]
        cdef int32_t block_ids[3]
        if launch is not None:
            for d in range(3):
                grid_ids[d], block_ids[d] = launch[0][d], launch[1][d]
            _check(tj_kernel_set_launch(self._k, grid_ids, block_ids, launch[2]))
        _check(tj_kernel_finalize(self._k))
        self._nargs = len(self._labels)
        self._nout = tj_kernel_num_outputs(self._k)
        if library:
            _check(tj_kernel_load(self._k, library.encode(), entry.encode()))

    cdef int _add_expr(self, tuple code, bytes text, int32_t *out) except -1:
        cdef int64_t *buf = <int64_t *>malloc(max(len(code), 1) * sizeof(int64_t))
        if buf == NULL:
            raise MemoryError()
        try:
            for i, value in enumerate(code):
                buf[i] = value
            _check(tj_kernel_add_expr(self._k, buf, len(code) // 2, text, out))
        finally:
            free(buf)
        return 0

    cdef int _add_param(self, int32_t index, tuple param) except -1:
        kind, name, dtype_t, shape_ids, stride_ids, align, flags = param
        cdef DLDataType dtype
        dtype.code, dtype.bits, dtype.lanes = dtype_t
        cdef int32_t shape[16]
        cdef int32_t strides[16]
        bname = name.encode()
        if kind == TJ_PARAM_SCALAR:
            return _check(tj_kernel_set_scalar(self._k, index, bname, dtype))
        if kind == TJ_PARAM_POINTER:
            return _check(tj_kernel_set_pointer(self._k, index, bname, dtype, align, flags))
        if len(shape_ids) > 16:
            raise ValueError(f"parameter '{name}': more than 16 dimensions")
        for d, e in enumerate(shape_ids):
            shape[d] = e
        if stride_ids is not None:
            for d, e in enumerate(stride_ids):
                strides[d] = e
        return _check(tj_kernel_set_buffer(
            self._k, index, bname, dtype, len(shape_ids), shape,
            strides if stride_ids is not None else NULL, align, flags))

    def __dealloc__(self):
        tj_kernel_free(self._k)

    def __call__(self, *args, stream=None):
        return self._call(PySequence_Fast_ITEMS(args), len(args), stream)

    cdef object _call(self, PyObject **args, Py_ssize_t count, object stream):
        """One call: ``args`` are ``count`` borrowed references (the caller's tuple
        or vectorcall array, alive for the call)."""
        cdef int32_t nargs = <int32_t>count if count < 0x7fffffff else 0x7fffffff
        cdef int32_t i
        cdef int rc
        cdef tj_arg argv[64]  # TJ_MAX_PARAMS: the core refuses larger kernels
        cdef tj_arg outv[16]  # TJ_MAX_OUTPUTS
        cdef tj_frame frame
        cdef object like
        cdef const DLPackExchangeAPI *api
        if self._k == NULL:
            raise RuntimeError("kernel is not bound")
        if nargs != self._nargs:
            # The core reports a count mismatch before it looks at any argument.
            _check(tj_call_bind(self._k, NULL, nargs, &frame))
        for i in range(nargs):
            tj_arg_init(&argv[i])
        for i in range(self._nout):
            tj_arg_init(&outv[i])
        try:
            for i in range(nargs):
                _convert(<object>args[i], &argv[i], self._labels[i], self._exchange)
            _check(tj_call_bind(self._k, argv, nargs, &frame))
            outputs = [] if self._nout else None
            like = <object>args[frame.first_tensor] if frame.first_tensor >= 0 else None
            if type(like) is TensorView:  # outputs and streams follow the view's source
                like = (<TensorView>like).source
            if not self._exchange:
                api = NULL
            elif like is None:
                api = &_array_api  # no framework in sight: outputs are tilejit Arrays
            else:
                api = _exchange_api(type(like))
            # Stream: explicit > the producer's current work stream > none.
            if stream is not None:
                frame.stream = <void *><uintptr_t>_stream_handle(stream, self._name)
            elif frame.device.device_type != kDLCPU:
                if api != NULL:
                    if api.current_work_stream(frame.device.device_type, frame.device.device_id,
                                               &frame.stream) != 0:
                        _pending()  # the producer's exception
                elif like is not None:
                    frame.stream = <void *><uintptr_t>_framework_stream(
                        like, frame.device.device_type, frame.device.device_id)
            for i in range(self._nout):
                if api != NULL:
                    out = _allocate_exchange(api, &frame, i, &outv[i], self._out_labels[i])
                else:
                    shape = tuple([frame.out_shape[i][d] for d in range(frame.out_ndim[i])])
                    out = self._allocate(like, shape, i)
                    _import_dlpack(out, &outv[i], b"output")
                    _check(tj_call_set_output(&frame, i, &outv[i]))
                outputs.append(out)
            if _single_thread():
                rc = tj_call_launch(&frame)
            else:
                with nogil:
                    rc = tj_call_launch(&frame)
            _check(rc)
        finally:
            # Only owning imports owe a deleter call; views and scalars have none.
            for i in range(nargs):
                if argv[i].owner_kind != TJ_OWNER_NONE:
                    tj_arg_release(&argv[i])
            for i in range(self._nout):
                if outv[i].owner_kind != TJ_OWNER_NONE:
                    tj_arg_release(&outv[i])
        if self._nout == 0:
            return None
        if self._nout == 1:
            return outputs[0]
        if self._out_order is not None:
            return [outputs[j] for j in self._out_order]
        return outputs

    @property
    def name(self):
        return tj_kernel_name(self._k).decode()


_enable_vectorcall(Kernel)


def cuda_device_capability(int32_t device_id=-1):
    """``(major, minor)`` of CUDA device ``device_id`` (-1: the current context's
    device, else 0); RuntimeError when there is no driver or no such device."""
    cdef int32_t major = 0
    cdef int32_t minor = 0
    _check(tj_cuda_device_capability(device_id, &major, &minor))
    return major, minor


def status_exception_names():
    """The core's status-code table, for tests: {code: (name, exception)}."""
    return {code: (tj_status_name(code).decode(), tj_status_exception(code).decode())
            for code in (TJ_OK, TJ_ETYPE, TJ_EVALUE, TJ_ERUNTIME, TJ_ENOMEM, TJ_EPYERR)}
