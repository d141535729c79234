# Status codes to exceptions, in one place. Included by _tilejit.pyx.
#
# The classes come from the core's status table (tj_status_exception); a producer's
# own error (TJ_EPYERR) is pending as a Python exception and is joined to the core's
# prefix by the one formatting function every binding shares (tilejit.host).
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


cdef int _raise(int rc, PyObject **args=NULL, Py_ssize_t nargs=0) except -1:
    """Raises the exception for a failed core status; ``args``, the call's arguments
    when there are any, name the object a producer failed on."""
    cdef const tj_error_info *info = tj_last_error_info()
    message = tj_last_error().decode("utf-8", "replace")
    if rc == TJ_EPYERR:
        step = info.producer
        where = info.argument
        try:
            _pending()
        except BaseException as exc:
            if step == TJ_PRODUCER_NONE:
                raise
            obj = <object>args[where] if args != NULL and 0 <= where < nargs else None
            raise _hooks.producer_error(message, step, exc, obj) from exc
    raise _exception_class(rc)(message)


cdef inline int _check(int rc) except -1:
    if rc != TJ_OK:
        _raise(rc)
    return 0


def status_exception_names():
    """The core's status-code table, for tests: {code: (name, exception)}."""
    return {code: (tj_status_name(code).decode(), tj_status_exception(code).decode())
            for code in (TJ_OK, TJ_ETYPE, TJ_EVALUE, TJ_ERUNTIME, TJ_ENOMEM, TJ_EPYERR,
                         TJ_EDECLINED, TJ_ECLAIMED)}
