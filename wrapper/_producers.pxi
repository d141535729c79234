# The host table and the producer of each Python type. Included by _tilejit.pyx.
#
# A producer (tj_producer, core/include/tilejit/producer.h) is how the core reads one
# kind of object: the core's adapter over a type's DLPack C exchange API table, or the
# producer built here around __dlpack__ and the framework allocators of tilejit.host.
# Producers live as long as the process (a few per process), one per (type, mode).

cdef extern from "Python.h":
    ctypedef struct PyThreadState:
        pass
    ctypedef struct PyInterpreterState:
        pass
    PyThreadState *PyEval_SaveThread() nogil
    void PyEval_RestoreThread(PyThreadState *) nogil
    PyThreadState *PyInterpreterState_ThreadHead(PyInterpreterState *)
    PyThreadState *PyThreadState_Next(PyThreadState *)
    PyInterpreterState *PyInterpreterState_Get()
    PyObject *PyObject_Type(PyObject *)
    void Py_DecRef(PyObject *)
    Py_ssize_t PyTuple_Size(PyObject *)
    PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t)
    int PyList_Append(PyObject *, PyObject *)
    PyObject *PyList_New(Py_ssize_t)
    void Py_IncRef(PyObject *)
    void PyType_Modified(object)


# ---- The host table: CPython's object operations, for the core ---------------------

cdef int _h_capsule_is_valid(void *capsule, const char *name) noexcept:
    return PyCapsule_IsValid(<object>capsule, name)


cdef void *_h_capsule_pointer(void *capsule, const char *name) noexcept:
    return PyCapsule_GetPointer(<object>capsule, name)


cdef int _h_capsule_set_name(void *capsule, const char *name) noexcept:
    return PyCapsule_SetName(<object>capsule, name)


cdef void *_h_object_type(void *obj) noexcept:
    return <void *>PyObject_Type(<PyObject *>obj)


cdef void _h_release(void *obj) noexcept:
    Py_DecRef(<PyObject *>obj)


cdef intptr_t _h_sequence_size(void *seq) noexcept:
    return PyTuple_Size(<PyObject *>seq)


cdef void *_h_sequence_item(void *seq, intptr_t i) noexcept:
    return <void *>PyTuple_GetItem(<PyObject *>seq, i)


cdef void _h_retain(void *obj) noexcept:
    Py_IncRef(<PyObject *>obj)


cdef void *_h_list_new() noexcept:
    return <void *>PyList_New(0)


cdef int _h_list_append(void *items, void *item) noexcept:
    return PyList_Append(<PyObject *>items, <PyObject *>item)


cdef void *_h_unlock() noexcept:
    return <void *>PyEval_SaveThread()


cdef void *_h_error_pending() noexcept:
    return <void *>PyErr_Occurred()


cdef void _h_lock(void *token) noexcept:
    PyEval_RestoreThread(<PyThreadState *>token)


cdef tj_host _host
_host.capsule_is_valid = _h_capsule_is_valid
_host.capsule_pointer = _h_capsule_pointer
_host.capsule_set_name = _h_capsule_set_name
_host.object_type = _h_object_type
_host.release = _h_release
_host.sequence_size = _h_sequence_size
_host.sequence_item = _h_sequence_item
_host.retain = _h_retain
_host.list_new = _h_list_new
_host.list_append = _h_list_append
_host.unlock = _h_unlock
_host.lock = _h_lock
# The core keeps the GIL when this is the interpreter's only thread. CPython's own
# functions, called directly: they take and return pointers, as the table's do.
_host.interpreter = <void *(*)() noexcept>PyInterpreterState_Get
_host.thread_head = <void *(*)(void *) noexcept>PyInterpreterState_ThreadHead
_host.thread_next = <void *(*)(void *) noexcept>PyThreadState_Next
_host.error_pending = _h_error_pending


cdef int _fail_pending(object exc) noexcept:
    """Leaves ``exc`` pending for the caller of the core and says so (TJ_EPYERR)."""
    PyErr_SetObject(type(exc), exc)
    return TJ_EPYERR


# ---- The __dlpack__ producer: context is the Python type it serves -------------------

cdef int _dlpack_import(const tj_producer *self, void *obj, tj_arg *arg) noexcept:
    cdef object capsule = None
    cdef object failure = None
    try:
        capsule = _hooks.dlpack_capsule(<object>obj)
    except BaseException as exc:
        failure = exc
    if failure is not None:
        return _fail_pending(failure)
    return tj_arg_from_capsule(arg, <void *>capsule, &_host)


cdef int _dlpack_allocate(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                          void **result) noexcept:
    cdef object tensor = None
    cdef object capsule = None
    cdef object failure = None
    try:
        tensor = _hooks.allocate(<object>self.context,
                                 tuple([proto.shape[d] for d in range(proto.ndim)]),
                                 (proto.dtype.code, proto.dtype.bits, proto.dtype.lanes),
                                 (proto.device.device_type, proto.device.device_id))
        capsule = _hooks.dlpack_capsule(tensor)
    except BaseException as exc:
        failure = exc
    if tensor is not None:  # the caller owns it from here, whatever happens next
        Py_INCREF(tensor)
        result[0] = <void *>tensor
    if failure is not None:
        return _fail_pending(failure)
    return tj_arg_from_capsule(out, <void *>capsule, &_host)


cdef int _dlpack_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                        void **stream) noexcept:
    cdef object failure = None
    try:
        stream[0] = <void *><uintptr_t>_hooks.framework_stream(<object>self.context,
                                                               device_type, device_id)
    except BaseException as exc:
        failure = exc
    if failure is not None:
        return _fail_pending(failure)
    return TJ_OK


# ---- Lazy views: torch's conjugate and negative views -----------------------------------

cdef int _ask_view(const tj_producer *self, void *obj, uint32_t *view) noexcept:
    """The view bits asked of the framework, when tilejit.torch_views could not find
    where torch keeps them (slow: two calls into torch per tensor)."""
    cdef object failure = None
    try:
        view[0] = _hooks.lazy_view(<object>obj)
    except BaseException as exc:
        failure = exc
    if failure is not None:
        return _fail_pending(failure)
    return TJ_OK


cdef int _set_view(tj_producer *producer, object cls) except -1:
    """Makes the core check objects of ``cls`` for lazy views before import
    (tilejit.host.view_check): in place, or by asking the framework."""
    cdef tj_view_bits *bits
    check = _hooks.view_check(cls)
    if check is None:
        return 0
    if isinstance(check, tuple):
        bits = <tj_view_bits *>calloc(1, sizeof(tj_view_bits))  # lives with the producer
        if bits == NULL:
            raise MemoryError()
        bits.block_offset, bits.word_offset, bits.conjugate, bits.negative = check
        producer.view_bits = bits
    else:
        producer.view = _ask_view
    return 0


# ---- The registry ---------------------------------------------------------------------

# (type, exchange) -> int address of its tj_producer (0: objects of the type are no
# tensors). The keys keep each type alive, so an address is never reused for another
# type; _owners keeps alive what published a table (a capsule or an int).
cdef dict _registry = {}
cdef dict _owners = {}


cdef tj_producer *_new_producer() except NULL:
    """A zeroed producer that lives as long as the process (never freed: kernels and
    other threads may hold its address)."""
    cdef tj_producer *producer = <tj_producer *>calloc(1, sizeof(tj_producer))
    if producer == NULL:
        raise MemoryError()
    producer.host = &_host
    return producer


# Layout views (_layout.pxi): [0] under the dlpack backend, [1] with the exchange API.
cdef tj_producer _view_producers[2]


cdef const DLPackExchangeAPIHeader *_exchange_header(object cls) except? NULL:
    """The table a type publishes: the capsule attribute, else the older int-valued one."""
    owner = getattr(cls, "__dlpack_c_exchange_api__", None)
    if owner is not None and PyCapsule_IsValid(owner, b"dlpack_exchange_api"):
        _owners[cls] = owner
        return <const DLPackExchangeAPIHeader *>PyCapsule_GetPointer(owner,
                                                                     b"dlpack_exchange_api")
    owner = getattr(cls, "__c_dlpack_exchange_api__", None)
    if isinstance(owner, int) and not isinstance(owner, bool) and owner > 0:
        _owners[cls] = owner
        return <const DLPackExchangeAPIHeader *>PyLong_AsVoidPtr(owner)
    return NULL


ctypedef c_bool (*_requires_grad_fn)(const void *) noexcept
ctypedef c_bool (*_grad_enabled_fn)() noexcept


cdef int _set_claim(tj_producer *producer, object cls) except -1:
    """Gives the producer its framework's claim on calls (tj_claim), if the framework
    makes one for objects of ``cls`` (tilejit.host.framework_claim). The claim lives as
    long as the producer: the process."""
    found = _hooks.framework_claim(cls)
    if found is None:
        return 0
    cdef tj_claim *claim = <tj_claim *>calloc(1, sizeof(tj_claim))
    if claim == NULL:
        raise MemoryError()
    always, offset, requires_grad, grad_enabled = found
    claim.always = always
    claim.offset = offset
    claim.requires_grad = <_requires_grad_fn><uintptr_t>requires_grad
    claim.grad_enabled = <_grad_enabled_fn><uintptr_t>grad_enabled
    producer.claim = claim
    return 0


cdef const tj_producer *_discover(object cls, bint exchange) except? NULL:
    cdef const DLPackExchangeAPIHeader *header
    cdef tj_producer *producer = NULL
    if cls is TensorView:
        producer = &_view_producers[1 if exchange else 0]
    else:
        header = _exchange_header(cls) if exchange else NULL
        if header != NULL:
            producer = _new_producer()
            if tj_producer_from_exchange(producer, header, <void *>cls) != TJ_OK:
                producer = NULL  # no usable version: read it through __dlpack__ below
            else:
                producer.host = &_host
        if producer == NULL and hasattr(cls, "__dlpack__"):
            producer = _new_producer()
            producer.import_ = _dlpack_import
            producer.allocate = _dlpack_allocate
            producer.current_stream = _dlpack_stream
            producer.type = <void *>cls
            producer.context = <void *>cls
        if producer != NULL:
            _set_view(producer, cls)
            _set_claim(producer, cls)
    _registry[(cls, exchange)] = PyLong_FromVoidPtr(<void *>producer)
    return producer


# A one-entry memo per mode in front of the dict: a call's tensors are nearly always of
# one type. Changed only under the GIL.
cdef PyObject *_memo_type[2]
cdef const tj_producer *_memo_producer[2]


cdef inline const tj_producer *_producer_of(object cls, bint exchange) except? NULL:
    """The producer for objects of type ``cls`` (NULL: they are no tensors)."""
    cdef PyObject *entry
    cdef const tj_producer *producer
    if <PyObject *>cls == _memo_type[exchange]:
        return _memo_producer[exchange]
    entry = PyDict_GetItem(_registry, (cls, exchange))
    if entry != NULL:
        producer = <const tj_producer *>PyLong_AsVoidPtr(<object>entry)
    else:
        producer = _discover(cls, exchange)
    _memo_type[exchange] = <PyObject *>cls  # the registry keeps the type alive
    _memo_producer[exchange] = producer
    return producer


def producer_address(cls, bint exchange=True):
    """The address of the tj_producer this binding uses for objects of type ``cls``
    (0 when they are no tensors); the ctypes backend borrows the view producer."""
    return <uintptr_t>_producer_of(cls, exchange)


def host_address():
    """The address of this binding's tj_host."""
    return <uintptr_t>&_host
