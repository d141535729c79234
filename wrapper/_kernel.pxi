# The kernel type. Included by _tilejit.pyx.

cdef extern from "Python.h":
    PyObject **PySequence_Fast_ITEMS(object)
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL
    ctypedef struct PyTypeObject_vc "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags


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
    """A core kernel's call plan (``tj_host_plan``, made by tilejit.runtime.binding):
    calling the kernel runs ``tj_host_call`` on it with the arguments in place."""
    cdef const tj_host_plan *_plan
    cdef object _plan_owner  # keeps the plan (and through it the core kernel) alive
    cdef void *_vectorcall  # _kernel_vectorcall; see _enable_vectorcall

    def __cinit__(self, *args, **kwargs):
        # Python subclasses (tilejit.JITKernel's backend classes) pass their own
        # constructor arguments through here; the plan is attached by _attach_plan.
        self._plan = NULL
        self._vectorcall = <void *>_kernel_vectorcall

    def _attach_plan(self, object plan):
        """Attaches a plan (tilejit.runtime.binding.Plan); once."""
        if self._plan != NULL:
            raise RuntimeError("kernel already bound")
        self._plan_owner = plan
        self._plan = <const tj_host_plan *><uintptr_t>plan.address

    def __call__(self, /, *args, **keywords):
        # The call slot (tilejit.runtime.backends' kernel classes call it from their
        # __call__); with the vectorcall fast path Python's calls arrive through
        # _kernel_vectorcall instead, the arguments in place.
        if not keywords:
            return _kernel_vectorcall(self, PySequence_Fast_ITEMS(args), len(args), NULL)
        names = tuple(keywords)
        items = [*args, *keywords.values()]
        return _kernel_vectorcall(self, PySequence_Fast_ITEMS(items), len(args),
                                  <PyObject *>names)


cdef object _kernel_vectorcall(object kernel, PyObject **args, size_t nargsf,
                               PyObject *kwnames):
    """The vectorcall entry of kernels: ``kernel(a, b, c)`` from Python arrives here with
    the arguments in place (borrowed, alive for the call) and goes to the core."""
    cdef const tj_host_plan *plan = (<Kernel>kernel)._plan
    if plan == NULL:
        raise RuntimeError("kernel is not bound")
    return tj_host_call(plan, <void **>args, nargsf, <void *>kwnames)
