# The kernel object and its call. Included by _tilejit.pyx.

cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object)
    void *_type_of "Py_TYPE"(object)  # borrowed: the object keeps its type alive
    PyObject *_raw_type_of "Py_TYPE"(PyObject *)  # the same, taking no reference
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct PyTypeObject_vc "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


cdef int _convert(object obj, tj_arg *arg, bint exchange) except -1:
    """Classifies one Python argument; the core imports tensors and decides whether each
    argument fits its parameter. (_kernel_vectorcall takes objects of the memoised
    tensor type itself.)"""
    cdef int overflow = 0
    cdef const tj_producer *producer
    cdef PyObject *cls = <PyObject *>_type_of(obj)
    tj_arg_init(arg)
    if obj is None:
        return 0
    if PyBool_Check(obj):
        arg.kind = TJ_ARG_BOOL
        arg.value.i = 1 if obj is True else 0
        return 0
    if PyLong_Check(obj):
        arg.kind = TJ_ARG_INT
        arg.value.i = PyLong_AsLongLongAndOverflow(obj, &overflow)
        if overflow > 0 and obj < _UINT64_END:  # a uint64 of 2**63 or more: its bits
            arg.value.i = <int64_t>PyLong_AsUnsignedLongLong(obj)
            arg.flags |= TJ_ARG_UNSIGNED
        elif overflow:  # only a float parameter takes it: as a double, or ±inf
            arg.flags |= TJ_ARG_OUT_OF_RANGE
            try:
                arg.value.f = float(obj)
            except OverflowError:
                arg.value.f = _INF if obj > 0 else -_INF
        return 0
    # Exact: a subtype check costs a walk of the MRO for every tensor; float subclasses
    # (numpy.float64) are taken by the __float__ branch below.
    if PyFloat_CheckExact(obj):
        arg.kind = TJ_ARG_FLOAT
        arg.value.f = PyFloat_AS_DOUBLE(obj)
        return 0
    producer = _producer_of(<object>cls, exchange)
    if producer != NULL:  # a tensor: the core imports it through its producer
        tj_arg_object(arg, <void *>obj, producer)
        return 0
    if <object>cls is _hooks.pointer_type:  # tilejit.make_ptr: an address that knows its target
        arg.kind = TJ_ARG_ADDRESS
        arg.value.p = PyLong_AsVoidPtr(obj.address)
        arg.tensor.dtype.code, arg.tensor.dtype.bits, arg.tensor.dtype.lanes = obj.dlpack_dtype
        arg.tensor.device.device_type = obj.dlpack_device_type
        return 0
    # NumPy and other scalar types, read as tilejit.host.scalar_kind says.
    kind = _hooks.scalar_kind(<object>cls)
    if kind == "bool":
        arg.kind = TJ_ARG_BOOL
        arg.value.i = 1 if obj else 0
    elif kind == "index":
        _convert(obj.__index__(), arg, exchange)
    elif kind == "float":
        arg.kind = TJ_ARG_FLOAT
        arg.value.f = float(obj)
    else:
        arg.kind = TJ_ARG_OTHER
    name = _hooks.type_name(<object>cls)  # cached there: alive for the call
    arg.type_name = <bytes>name  # messages name numpy.float32, not float
    return 0


cdef inline object _take(void *ref):
    """The object of a new reference the core handed over (None for NULL), taking it."""
    if ref == NULL:
        return None
    out = <object>ref
    Py_DECREF(out)  # <object> took a reference; the core gave us one already
    return out


_INF = float("inf")
_UINT64_END = 1 << 64  # a Python int below it and from 2**63 on is a uint64


def _enable_vectorcall(type cls):
    """Turns on the vectorcall protocol for ``cls`` (Kernel or a subclass of it: CPython
    before 3.12 does not pass the flag on to heap subclasses). Calls then skip building
    an argument tuple. Cython declares no vectorcall slot for a cdef class's __call__, so
    the type's public tp_vectorcall_offset/tp_flags are set here."""
    cdef Kernel probe = Kernel.__new__(Kernel)
    cdef Py_ssize_t offset = <Py_ssize_t>(<char *>&probe._vectorcall - <char *><PyObject *>probe)
    cdef PyTypeObject_vc *t = <PyTypeObject_vc *><PyObject *>cls
    t.tp_vectorcall_offset = offset
    t.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    PyType_Modified(cls)


cdef class Kernel:
    """A core kernel plus what a call needs: its name, how many arguments and outputs
    it has, the order outputs are returned in, and whether producers' DLPack exchange
    API is used (``cython``) or every tensor goes through ``__dlpack__`` (``dlpack``).
    """
    cdef const tj_kernel *_k
    cdef object _owner  # keeps the core kernel alive (tilejit.core_kernel.CoreKernel)
    cdef int32_t _nargs
    cdef int32_t _nout
    cdef bint _exchange
    cdef tuple _out_order  # None when outputs return in declaration order
    cdef str _name
    cdef void *_vectorcall  # _kernel_vectorcall; see _enable_vectorcall

    def __cinit__(self, *args, **kwargs):
        # Python subclasses (tilejit.JITKernel's backend classes) pass their own
        # constructor arguments through here; the kernel is attached by _attach.
        self._k = NULL
        self._vectorcall = <void *>_kernel_vectorcall

    def _attach(self, object core_kernel, bint exchange_api, tuple out_order):
        """Attaches a built and loaded core kernel (tilejit.core_kernel.CoreKernel: its
        ``address`` and counts); once. ``out_order[j]`` is the core output number
        returned in position j."""
        if self._k != NULL:
            raise RuntimeError("kernel already bound")
        self._owner = core_kernel
        self._k = <const tj_kernel *><uintptr_t>core_kernel.address
        self._name = core_kernel.name
        self._nargs = core_kernel.num_inputs
        self._nout = core_kernel.num_outputs
        self._exchange = exchange_api
        self._out_order = None if out_order == tuple(range(len(out_order))) else out_order

    def __call__(self, *args, **keywords):
        # Python's calls arrive through the vectorcall slot; this serves explicit
        # Kernel.__call__(k, ...) with the same arguments, keywords decided there.
        if not keywords:
            return _kernel_vectorcall(self, PySequence_Fast_ITEMS(args), len(args), NULL)
        names = tuple(keywords)
        items = [*args, *keywords.values()]
        return _kernel_vectorcall(self, PySequence_Fast_ITEMS(items), len(args),
                                  <PyObject *>names)

    @property
    def name(self):
        return self._name


cdef object _kernel_vectorcall(object kernel, PyObject **args, size_t nargsf,
                               PyObject *kwnames):
    """The vectorcall entry of kernels, and every call's one function: ``kernel(a, b,
    c)`` from Python arrives here with the arguments in place (borrowed references,
    alive for the call), no tuple, no keyword dict."""
    cdef Kernel self = <Kernel>kernel
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    cdef tj_arg argv[TJ_MAX_PARAMS]
    cdef void *outv[TJ_MAX_OUTPUTS]
    cdef tj_call call
    cdef int32_t i
    cdef int rc
    cdef PyObject *memo_type
    cdef const tj_producer *memo_producer
    stream = None
    if kwnames != NULL:
        names = <tuple>kwnames
        if len(names) != 1 or names[0] != "stream":  # inputs by name: tilejit.JITKernel
            return self._keyword_call(tuple([<object>args[i] for i in range(count)]),
                                      {names[j]: <object>args[count + j]
                                       for j in range(len(names))})
        stream = <object>args[count]
    if self._k == NULL:
        raise RuntimeError("kernel is not bound")
    call.nargs = <int32_t>count if count < 0x7fffffff else 0x7fffffff
    call.args = argv
    call.has_stream = 0
    call.stream = NULL
    call.fallback = &_array_producers[1 if self._exchange else 0]
    call.host = &_host
    call.outputs = outv
    if call.nargs <= self._nargs:  # else the core reports the count, reading none
        # The hot path inline: objects of the type the last call's tensors had.
        # Borrowed pointers throughout: no reference counting per argument.
        memo_producer = _memo_producer[self._exchange]
        memo_type = _memo_type[self._exchange] if memo_producer != NULL else NULL
        for i in range(call.nargs):
            if _raw_type_of(args[i]) == memo_type:
                tj_arg_object(&argv[i], <void *>args[i], memo_producer)
            else:
                _convert(<object>args[i], &argv[i], self._exchange)
    if stream is not None:
        call.has_stream = 1
        call.stream = <void *><uintptr_t>_hooks.stream_handle(stream, self._name)
    rc = tj_call_run(self._k, &call)
    if rc == TJ_ECLAIMED:  # the framework runs it (tilejit.JITKernel._claimed_call)
        return self._claimed_call(tuple([<object>args[i] for i in range(count)]), stream)
    if self._nout == 0:
        if rc != TJ_OK:
            _raise(rc, args, count)
        return None
    if self._nout == 1:  # no list: one new reference, ours even when the call failed
        out = _take(outv[0])
        if rc != TJ_OK:
            _raise(rc, args, count)
        return out
    outputs = [_take(outv[i]) for i in range(self._nout)]
    if rc != TJ_OK:
        _raise(rc, args, count)
    if self._out_order is not None:
        return [outputs[j] for j in self._out_order]
    return outputs


_enable_vectorcall(Kernel)
