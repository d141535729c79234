# The producers this binding reads objects with. Included by _tilejit.pyx.
#
# The registry of producers per Python type is the core's (tj_host_type_of,
# core/src/host.c); this binding asks it, and makes the producers of its own types.

cdef extern from "Python.h":
    void PyType_Modified(object)
    void *_type_of "Py_TYPE"(void *)


cdef void *_borrowed_type(void *obj) noexcept:
    """The host table's type_of: Py_TYPE, compiled (no reference counting)."""
    return _type_of(obj)


def type_of_address():
    """The address of a compiled ``Py_TYPE`` for the host table (tj_host.type_of)."""
    return <uintptr_t>_borrowed_type


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
