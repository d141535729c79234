# The producers this binding reads objects with. Included by _tilejit.pyx.
#
# The registry of producers per Python type is the core's (tj_host_type_of,
# core/src/host.c); this binding asks it, and makes the producers of its own types.

cdef extern from "Python.h":
    void PyType_Modified(object)
    ctypedef struct _PyObjectHead "PyObject":
        void *ob_type
    ctypedef struct _PyFloatHead "PyFloatObject":
        double ob_fval


def type_offset():
    """Where an object keeps its type, as this interpreter's headers lay out PyObject
    (offsetof(PyObject, ob_type)): the host table's type_offset."""
    probe = object()
    cdef _PyObjectHead *head = <_PyObjectHead *><PyObject *>probe
    return <Py_ssize_t>(<char *>&head.ob_type - <char *>head)


def float_value_offset():
    """Where an exact float keeps its value, as this interpreter's headers lay out
    PyFloatObject (offsetof(PyFloatObject, ob_fval), what PyFloat_AS_DOUBLE reads): the
    host table's float_value_offset."""
    cdef object probe = 1.5
    cdef _PyFloatHead *head = <_PyFloatHead *><PyObject *>probe
    return <Py_ssize_t>(<char *>&head.ob_fval - <char *>head)


# Layout views (_layout.pxi): [0] under the dlpack backend, [1] with the exchange API.
cdef tj_producer _view_producers[2]


def view_producer_address(bint exchange):
    """The address of the producer of layout views (TensorView) in a mode."""
    return <uintptr_t>&_view_producers[1 if exchange else 0]


cdef const tj_producer *_producer_of(object cls, bint exchange) except? NULL:
    """The producer for objects of type ``cls`` (NULL: they are no tensors)."""
    cdef const tj_host_type *info = tj_host_type_of(_host, <void *>cls, exchange)
    if info == NULL:
        _pending()
    return info.producer if info.kind == TJ_HOST_TENSOR else NULL
