# Status codes to exceptions, for this binding's own functions (layout views, Array).
# Included by _tilejit.pyx. A kernel call's exception is raised by the core's host layer.
cdef object _exception_class(int rc):
    """The class the host table gives status ``rc`` (tilejit.runtime.binding fills it from
    the core's status table, the one map from codes to exceptions)."""
    cdef int index = -rc
    if _host != NULL and 0 < index < TJ_HOST_NUM_STATUS and _host.exceptions[index] != NULL:
        return <object>_host.exceptions[index]
    return RuntimeError


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
