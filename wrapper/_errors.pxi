# Status codes to exceptions, for this binding's own functions (layout views, Array).
# Included by _tilejit.pyx. A kernel call's exception is raised by the core's host layer.
import builtins as _builtins

cdef dict _exception_classes = {}


cdef object _exception_class(int rc):
    cls = _exception_classes.get(rc)
    if cls is None:
        name = tj_status_exception(rc).decode()
        cls = getattr(_builtins, name, RuntimeError) if name else RuntimeError
        _exception_classes[rc] = cls
    return cls


cdef int _pending() except -1:
    """Raises the exception a C callee left set (Cython propagates it from here)."""
    return -1


cdef inline int _check(int rc) except -1:
    if rc == TJ_EPYERR and PyErr_Occurred() != NULL:
        _pending()
    if rc != TJ_OK:
        raise _exception_class(rc)(tj_last_error().decode("utf-8", "replace"))
    return 0


def status_exception_names():
    """The core's status-code table, for tests: {code: (name, exception)}."""
    return {code: (tj_status_name(code).decode(), tj_status_exception(code).decode())
            for code in (TJ_OK, TJ_ETYPE, TJ_EVALUE, TJ_ERUNTIME, TJ_ENOMEM, TJ_EPYERR,
                         TJ_ECLAIMED)}
