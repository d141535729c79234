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


cdef extern from *:
    """
    /* Where this interpreter's headers keep an int's digit count (or tag) and first
     * digit (cpython/longintrepr.h): what tilejit's core reads in place for exact ints
     * of one digit (tj_host.int_layout). 0: a layout it does not read. */
    #if PYLONG_BITS_IN_DIGIT != 30
    #define TJW_INT_LAYOUT 0
    #define TJW_INT_HEAD 0
    #define TJW_INT_DIGIT 0
    #elif PY_VERSION_HEX >= 0x030C0000
    #define TJW_INT_LAYOUT 2
    #define TJW_INT_HEAD offsetof(PyLongObject, long_value.lv_tag)
    #define TJW_INT_DIGIT offsetof(PyLongObject, long_value.ob_digit)
    #else
    #define TJW_INT_LAYOUT 1
    #define TJW_INT_HEAD offsetof(PyVarObject, ob_size)
    #define TJW_INT_DIGIT offsetof(PyLongObject, ob_digit)
    #endif
    """
    const Py_ssize_t TJW_INT_LAYOUT
    const Py_ssize_t TJW_INT_HEAD
    const Py_ssize_t TJW_INT_DIGIT


cdef bint _reads_as(object value, Py_ssize_t layout, Py_ssize_t head_at, Py_ssize_t digit_at):
    """Whether the core's in-place read of the exact int ``value`` (host.c's
    compact_int) gives ``value``, or declines for an int of more than one digit."""
    cdef char *base = <char *><PyObject *>value
    cdef size_t head = (<size_t *>(base + head_at))[0]
    cdef long long sign
    cdef bint compact = (head + 1 <= 2) if layout == 1 else (head < (2 << 3))
    if not compact:
        return not (-(1 << 30) < value < (1 << 30))
    sign = <Py_ssize_t>head if layout == 1 else 1 - <long long>(head & 3)
    if sign == 0:
        return value == 0
    return sign * <long long>(<unsigned int *>(base + digit_at))[0] == value


def int_layout():
    """How this interpreter keeps an exact int of one digit, as its headers lay out
    PyLongObject: ``(layout, head offset, digit offset)`` for the host table's
    ``int_layout`` fields, checked here on ints of every size and sign (values and
    results of arithmetic), or ``(-1, -1, -1)`` when the headers' layout is not one the
    core reads or the check fails."""
    if TJW_INT_LAYOUT == 0:
        return (-1, -1, -1)
    big = 1 << 40
    samples = [0, 1, -1, 2, -2, 255, 1000, -1000, (1 << 30) - 1, -((1 << 30) - 1), 1 << 30,
               -(1 << 30), big, -big, (1 << 63) - 1, -(1 << 63), 1 << 64, big - big,
               int("7"), int("-123456"), (big + 5) - big, -((big + 5) - big), True + 0]
    for value in samples:
        if not _reads_as(value, TJW_INT_LAYOUT, TJW_INT_HEAD, TJW_INT_DIGIT):
            return (-1, -1, -1)
    return (TJW_INT_LAYOUT, TJW_INT_HEAD, TJW_INT_DIGIT)


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
