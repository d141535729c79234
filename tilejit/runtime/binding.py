"""The one binding: what the core's host layer needs from Python, for every backend.

A kernel call runs in C from its first step to its last (``tj_host_call``,
core/src/host.c): classifying the arguments, finding the producer of each Python type,
``stream=``, the core's sequencer, the result, the exception. What only Python knows is
given to it here, once per process:

- the host table (``tj_host``): CPython's C API functions by address, the objects
  ``None``/``True``/``int``/``float``/``bool``, an exception class per status code, and
  tilejit's host functions (``tilejit.runtime.host``, and ``describe`` below);
- ``describe(type, exchange)``: how objects of a Python type are read (a tensor through
  its producer, a ``tilejit.Pointer``, a NumPy-style scalar, anything else), asked once
  per type by the core's registry;
- ``Plan``: one kernel's ``tj_host_plan``.

The Cython backend's kernel type calls ``tj_host_call`` from its vectorcall slot; the
ctypes backend calls it through a builtin function over ``tj_host_method`` (``entry``).
Nothing here runs per call.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import addressof, c_int, c_int32, c_ssize_t, c_void_p, py_object

from ..language.pointer import Pointer
from ..native import abi
from ..native.ctypes_abi import (
    TjClaim,
    TjHost,
    TjHostClaimMode,
    TjHostPlan,
    TjHostType,
    TjProducer,
    TjViewBits,
)
from ..native.library import core_library, exception_class
from . import host

_lock = threading.RLock()


def _c_function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), c_void_p).value


# ---- Per Python type: how its objects are read -------------------------------------------

_types: dict = {}  # (type, exchange) -> TjHostType, alive for the process
_own: dict = {}  # (type, exchange) -> producer address a compiled binding registered


def register(cls: type, exchange: bool, producer_address: int) -> None:
    """Makes ``producer_address`` (a ``tj_producer`` that lives for the process) the
    producer of objects of ``cls``: the Cython wrapper's own types (layout views)."""
    _own[(cls, bool(exchange))] = producer_address


def _exchange_header(cls) -> int:
    """The address of the exchange-API table a type publishes, or 0: the capsule
    attribute, else the older int-valued one."""
    owner = getattr(cls, "__dlpack_c_exchange_api__", None)
    if owner is not None and _capsule_valid(owner, b"dlpack_exchange_api"):
        return _capsule_pointer(owner, b"dlpack_exchange_api") or 0
    owner = getattr(cls, "__c_dlpack_exchange_api__", None)
    if isinstance(owner, int) and not isinstance(owner, bool) and owner > 0:
        return owner
    return 0


def _producer(cls, exchange: bool):
    """A new ``TjProducer`` for objects of ``cls`` (None: they are no tensors): the
    core's adapter over the type's exchange-API table (unless ``exchange`` is false),
    else the core's ``__dlpack__`` producer over tilejit.runtime.host, with the framework's
    in-place read where it has one (``host.reader``) unless ``exchange`` is false; with
    the framework's lazy-view check and claim."""
    core = core_library()
    producer = None
    header = _exchange_header(cls) if exchange else 0
    if header:
        producer = TjProducer()
        if core.tj_producer_from_exchange(addressof(producer), header, id(cls)) == 0:
            producer.host = host_address()
        else:  # no usable version: read it through __dlpack__ below
            producer = None
    how = host.framework_claim(cls)
    # A type whose framework runs every call with it (a tracer's symbolic integer) is
    # given a producer too, for its claim: the core hands such a call over before reading
    # the object, which would fix its value.
    if producer is None and (hasattr(cls, "__dlpack__") or cls is type(None)
                             or how == ("always",)):
        producer = TjProducer()
        core.tj_host_dlpack_producer(addressof(producer), host_address(), id(cls))
        # A fast path: read in place, __dlpack__ where it cannot; not for the backend whose
        # calls are to go through __dlpack__ (exchange false: the dlpack backend).
        read = host.reader(cls) if exchange and how != ("always",) else None
        if read is not None:
            producer.read, producer.read_context, producer.make = read
    if producer is None:
        return None
    keep = [producer, cls]
    check = host.view_check(cls)
    if isinstance(check, tuple):
        bits = TjViewBits(*check)
        keep.append(bits)
        producer.view_bits = addressof(bits)
    elif check is not None:
        core.tj_host_ask_view(addressof(producer))
    claim = _claim(how)
    if claim is not None:  # see tj_claim
        keep.append(claim)
        producer.claim = addressof(claim)
    producer._keep = keep
    return producer


_claims: dict = {}  # framework_claim's answer -> its TjClaim, alive for the process


def _claim(how):
    """The ``TjClaim`` of ``host.framework_claim``'s answer (None: no claim): ``("always",)``
    claims every call at once; ``("ask", probe, scope, key, idle)`` asks per tensor, by
    ``probe`` ``(offset, requires_grad, grad_enabled, meta_offset)`` (C functions and
    offsets, None: the public ``host.claims``), and, when ``probe`` is given, per call only
    while the namespace ``scope`` holds at ``key`` another object than ``idle`` (scope
    None: always; without ``probe`` always too, since only the public answer can then tell
    that a tensor requires grad)."""
    if how is None:
        return None
    key = (how[0], *(() if how[0] == "always" else (how[1], *map(id, how[2:]))))
    with _lock:
        claim = _claims.get(key)
        if claim is None:
            if how[0] == "always":
                claim = TjClaim(always=1, meta_offset=-1)
            else:
                _, probe, scope, level_key, idle_level = how
                core = core_library()
                mode = TjHostClaimMode(host=host_address(), scope=id(scope) if scope else None,
                                       key=id(level_key), idle=id(idle_level))
                claim = TjClaim(ask=ctypes.cast(core.tj_host_claim_ask, c_void_p).value,
                                context=addressof(mode), meta_offset=-1)
                # Asked only inside a forward-AD level when the probe answers the grad
                # question in place; without the probe every tensor is asked, for both.
                if scope is not None and probe is not None:
                    claim.active = ctypes.cast(core.tj_host_claim_active, c_void_p).value
                if probe is not None:
                    (claim.offset, claim.requires_grad, claim.grad_enabled,
                     claim.meta_offset) = probe
                claim._keep = (mode, scope, level_key, idle_level)
            claim = _claims.setdefault(key, claim)
    return claim


def _describe(cls, exchange: bool) -> TjHostType:
    name = host.type_name(cls)
    info = TjHostType(kind=abi.TJ_HOST_OTHER, producer=None, name=name)
    info._keep = [cls, name]
    own = _own.get((cls, exchange))
    producer = own if own is not None else _producer(cls, exchange)
    if producer is not None:
        info.kind = abi.TJ_HOST_TENSOR
        if own is None:
            info._keep.append(producer)
            producer = addressof(producer)
        info.producer = producer
    elif cls is Pointer:
        info.kind = abi.TJ_HOST_POINTER
    else:
        info.kind = _SCALAR_KINDS[host.scalar_kind(cls)]
    return info


_SCALAR_KINDS = {host.SCALAR_BOOL: abi.TJ_HOST_BOOL, host.SCALAR_INDEX: abi.TJ_HOST_INDEX,
                 host.SCALAR_FLOAT: abi.TJ_HOST_FLOAT, host.SCALAR_OTHER: abi.TJ_HOST_OTHER}


def describe(cls, exchange) -> int:
    """The address of the ``tj_host_type`` of ``cls`` in a mode (``tj_host.describe``):
    made once, alive for the process."""
    key = (cls, bool(exchange))
    info = _types.get(key)
    if info is None:
        with _lock:
            info = _types.get(key)
            if info is None:
                info = _types[key] = _describe(cls, bool(exchange))
    return addressof(info)


_fallbacks: dict = {}  # (exchange, tilejit.Array or None) -> (address, what keeps it alive)


def fallback_producer(exchange: bool) -> int:
    """The producer that allocates the outputs of a call with no tensor argument: with
    the exchange API, tilejit.Array's own (when the wrapper is loaded); else the
    ``__dlpack__`` producer of "no framework" (tilejit.runtime.host.allocate for ``NoneType``)."""
    array = host.array_type()
    key = (bool(exchange), array)
    with _lock:
        if key not in _fallbacks:
            if exchange and array is not None:  # kept alive by the registry
                _fallbacks[key] = (TjHostType.from_address(describe(array, True)).producer,
                                   None)
            else:
                producer = _producer(type(None), False)
                _fallbacks[key] = (addressof(producer), producer)
    return _fallbacks[key][0]


# ---- The host table ----------------------------------------------------------------------

_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = c_int, [py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [py_object, ctypes.c_char_p]

_FUNCTIONS = {
    "capsule_is_valid": "PyCapsule_IsValid", "capsule_pointer": "PyCapsule_GetPointer",
    "capsule_set_name": "PyCapsule_SetName", "object_type": "PyObject_Type",
    "release": "Py_DecRef", "sequence_size": "PyTuple_Size",
    "sequence_item": "PyTuple_GetItem", "tuple_new": "PyTuple_New",
    "tuple_set": "PyTuple_SetItem", "retain": "Py_IncRef", "list_new": "PyList_New",
    "list_set": "PyList_SetItem", "int64_of": "PyLong_AsLongLongAndOverflow",
    "uint64_of": "PyLong_AsUnsignedLongLong", "double_of": "PyFloat_AsDouble",
    "index_of": "PyNumber_Index", "truth": "PyObject_IsTrue", "int_new": "PyLong_FromLongLong",
    "string_new": "PyUnicode_FromString", "string_compare": "PyUnicode_CompareWithASCIIString",
    "attribute": "PyObject_GetAttrString", "call": "PyObject_CallObject",
    "error_pending": "PyErr_Occurred", "error_clear": "PyErr_Clear",
    "error_fetch": "PyErr_Fetch", "error_normalize": "PyErr_NormalizeException",
    "error_set": "PyErr_SetString", "error_set_object": "PyErr_SetObject",
    "exception_set_cause": "PyException_SetCause", "error_restore": "PyErr_Restore",
    "dict_item": "PyDict_GetItemWithError", "unlock": "PyEval_SaveThread",
    "lock": "PyEval_RestoreThread", "interpreter": "PyInterpreterState_Get",
    "thread_head": "PyInterpreterState_ThreadHead", "thread_next": "PyThreadState_Next",
}

# tilejit's host functions, referenced from the table: alive for the process.
_HOOKS = {"describe": describe, "dlpack_capsule": host.dlpack_capsule,
          "allocate": host.allocate, "framework_stream": host.framework_stream,
          "stream_handle": host.stream_handle, "lazy_view": host.lazy_view,
          "producer_error": host.producer_error, "claims": host.claims}

_host = None


def _exception_classes() -> list:
    """The host table's exception class per status (index: minus the code), the core's
    status table read once (``exception_class``): what the core's host layer raises for
    a failed call, and the wrapper for its own functions."""
    return [id(exception_class(-index)) if index else 0
            for index in range(abi.TJ_HOST_NUM_STATUS)]


def host_table() -> TjHost:
    """The process's host table, made (and given to ``tj_host_method``) once."""
    global _host
    with _lock:
        if _host is None:
            table = TjHost(**{field: _c_function(name) for field, name in _FUNCTIONS.items()},
                           **{field: id(fn) for field, fn in _HOOKS.items()},
                           type_offset=-1, float_value_offset=-1, int_layout=-1,
                           int_head_offset=-1, int_digit_offset=-1, none=id(None),
                           true_object=id(True), int_type=id(int), float_type=id(float),
                           bool_type=id(bool))
            table.exceptions[:] = _exception_classes()
            core_library().tj_host_method_install(addressof(table))
            _host = table
    return _host


def host_address() -> int:
    return addressof(host_table())


def use_type_offset(offset: int, float_value_offset: int = -1,
                    int_layout: tuple = (-1, -1, -1)) -> None:
    """Lets the core read an object's type in place, at byte ``offset`` of the object,
    instead of calling ``PyObject_Type`` and ``Py_DecRef``, and an exact float's value at
    ``float_value_offset`` instead of calling ``PyFloat_AsDouble``: the Cython wrapper
    states ``offsetof(PyObject, ob_type)`` and ``offsetof(PyFloatObject, ob_fval)`` as
    the interpreter's headers give them. ``int_layout`` ``(layout, head offset, digit
    offset)``: where an exact int of one digit keeps its value (the wrapper's
    ``int_layout()``, a fast path), read in place instead of calling
    ``PyLong_AsLongLongAndOverflow``; ``(-1, -1, -1)``: not read in place."""
    table = host_table()
    table.type_offset = offset
    table.float_value_offset = float_value_offset
    table.int_layout, table.int_head_offset, table.int_digit_offset = int_layout


# ---- Kernels -----------------------------------------------------------------------------


class Plan:
    """A kernel's ``tj_host_plan``: the core kernel, the mode, the output order and the
    kernel object's methods for the calls the core hands back (inputs by name,
    calls a framework claims). ``kernel`` owns its plan; the plan borrows it.
    ``unclaimed``: no framework claims its calls (the plan of the kernel's torch op,
    which is what a claimed call runs)."""

    def __init__(self, kernel, core_kernel, exchange: bool, out_order: tuple, *,
                 unclaimed: bool = False):
        n = core_kernel.num_outputs
        self._order = None
        if out_order != tuple(range(n)):
            self._order = (c_int32 * n)(*out_order)
        cls = type(kernel)
        self._keep = (core_kernel, core_kernel.name, cls._call_with_keywords, cls._claimed_call)
        self.struct = TjHostPlan(
            kernel=core_kernel.address, host=host_address(), exchange=int(bool(exchange)),
            out_order=self._order, fallback=fallback_producer(exchange),
            name=id(core_kernel.name), kernel_object=id(kernel),
            keywords=id(cls._call_with_keywords), claimed=id(cls._claimed_call),
            unclaimed=int(unclaimed),
            stream_is_input=int(host.stream_is_input(core_kernel.input_names)))
        self.address = addressof(self.struct)
        self._runners = []  # every runner the plan handed claims to: a call may be in one

    def hand_claims_to(self, runner, *, at_once: bool = False, record=None) -> None:
        """Hands the calls a framework claims to ``runner(kernel, args, stream)`` instead
        of the kernel class's ``_claimed_call``: one Python frame less for every call
        autograd records. ``runner`` must take every call ``_claimed_call`` takes (it may
        pass any on to it). ``at_once``: calls without ``stream=`` reach it claimed at
        their first argument that requires grad, before the rest is imported or any
        validated (``tj_host_plan.claim_at_once``): the runner validates each call it
        runs, and passes any other to a plan that validates it first
        (``JITKernel._validated``). ``record``, with ``at_once``: ``(apply, types,
        wrapped, off, (scope, key, idle), quick)``, the core's own way to the runner's common
        case: such a call whose every argument is None or of one of the two exact
        ``types``, none ``wrapped(arg)``, while neither of the two ``off()`` is true and
        ``scope[key] is idle``, goes to ``apply(*args)`` with no Python frame in between
        (``tj_host_plan.record``); ``quick``, None or ``(function, context)`` addresses,
        answers the ``off`` and ``wrapped`` questions in place where it can
        (``tj_host_plan.record_plain``). Kept alive with the plan, as each earlier one."""
        struct = self.struct
        # Never at once or recorded with a runner that expects validation.
        struct.claim_at_once, struct.record = 0, None
        self._runners.append((runner, record))
        struct.claimed = id(runner)
        if at_once and record is not None:
            apply, types, wrapped, off, (scope, key, idle), quick = record
            mode = TjHostClaimMode(host=host_address(), scope=id(scope), key=id(key),
                                   idle=id(idle))
            self._runners.append((mode, scope, key, idle))
            struct.record_types[0], struct.record_types[1] = map(id, types)
            struct.record_wrapped = id(wrapped)
            struct.record_off[0], struct.record_off[1] = map(id, off)
            struct.record_mode = addressof(mode)
            if quick is not None:
                struct.record_plain, struct.record_plain_context = quick
            struct.record = id(apply)
        struct.claim_at_once = int(at_once)


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef (stable ABI)."""

    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", c_void_p), ("ml_flags", c_int),
                ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL_KEYWORDS = 0x0080 | 0x0002
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = py_object, [c_void_p, ctypes.c_char_p, c_void_p]
_function_new = ctypes.pythonapi.PyCFunction_NewEx
_function_new.restype, _function_new.argtypes = py_object, [c_void_p, py_object, c_void_p]
_method_def = []  # one PyMethodDef for every kernel's entry, alive for the process
_PLAN_CAPSULE = abi.TJ_HOST_PLAN_CAPSULE.encode()


def entry(plan: Plan):
    """A builtin function that runs the call of ``plan`` (``tj_host_method``): CPython
    calls the core directly with the arguments in place, no conversion by ctypes. The
    plan must outlive the function (its kernel holds both)."""
    with _lock:
        if not _method_def:
            host_table()
            address = ctypes.cast(core_library().tj_host_method, c_void_p).value
            _method_def.append(_MethodDef(b"tilejit_call", address, _METH_FASTCALL_KEYWORDS,
                                          None))
    return _function_new(addressof(_method_def[0]),
                         _capsule_new(plan.address, _PLAN_CAPSULE, None), None)


# ---- Bound launches ------------------------------------------------------------------------

_bound_defs: dict = {}  # the PyMethodDefs of the bound launches' builtins, alive for the process


def _builtin(name: str, self_object):
    """A builtin function over the core's ``name`` (``tj_host_method``'s shape) with
    ``self_object`` as its ``self``."""
    with _lock:
        if name not in _bound_defs:
            host_table()
            address = ctypes.cast(getattr(core_library(), name), c_void_p).value
            _bound_defs[name] = _MethodDef(name.encode(), address, _METH_FASTCALL_KEYWORDS, None)
    return _function_new(addressof(_bound_defs[name]), self_object, None)


def bind_entry(plan: Plan):
    """A builtin that binds a call of ``plan`` (``tj_host_bind_method``) with positional
    arguments, returning ``(address, outputs)``; see `bound_entries`."""
    return _builtin("tj_host_bind_method", _capsule_new(plan.address, _PLAN_CAPSULE, None))


# The bound launch type (tj_host_bound_fields after the object header), made once with
# CPython's PyType_FromSpec: its calls are vectorcalls of the core's launch.
class _TypeSlot(ctypes.Structure):
    _fields_ = [("slot", c_int), ("pfunc", c_void_p)]


class _TypeSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("basicsize", c_int), ("itemsize", c_int),
                ("flags", ctypes.c_uint), ("slots", ctypes.POINTER(_TypeSlot))]


class _MemberDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", c_int), ("offset", ctypes.c_ssize_t),
                ("flags", c_int), ("doc", ctypes.c_char_p)]


# typeslots.h and structmember.h: CPython's stable ABI.
_TP_CALL, _TP_DOC, _TP_METHODS, _TP_TRAVERSE, _TP_MEMBERS, _TP_FINALIZE = 50, 56, 64, 71, 72, 80
_T_OBJECT_EX, _T_PYSSIZET, _READONLY = 16, 19, 1
_TPFLAGS = (1 << 18) | (1 << 14) | (1 << 11) | (1 << 7)  # default, GC, vectorcall, no new
_bound_type: list = []  # [the type, what its spec points at]
_FIELDS = ("vectorcall", "bound", "kernel", "outputs", "inputs")  # tj_host_bound_fields


def bound_type(doc: str) -> type:
    """The type of bound launches (``tj_host_bound_fields``, core/include/tilejit/host.h),
    made once: ``kernel``, ``outputs`` and ``_bound`` read-only attributes, a
    ``_update(position, tensor)`` method, and calls that reach the core's launch with
    the arguments in place (vectorcall). Python code adds its own methods to it."""
    with _lock:
        if _bound_type:
            return _bound_type[0]
        host_table()
        lib, header, word = core_library(), object.__basicsize__, ctypes.sizeof(c_void_p)
        offset = {name: header + i * word for i, name in enumerate(_FIELDS)}
        members = (_MemberDef * 5)(
            _MemberDef(b"__vectorcalloffset__", _T_PYSSIZET, offset["vectorcall"], _READONLY),
            _MemberDef(b"kernel", _T_OBJECT_EX, offset["kernel"], _READONLY),
            _MemberDef(b"outputs", _T_OBJECT_EX, offset["outputs"], _READONLY),
            _MemberDef(b"_bound", _T_OBJECT_EX, offset["inputs"], _READONLY), _MemberDef())
        update = ctypes.cast(lib.tj_host_bound_update_method, c_void_p).value
        methods = (_MethodDef * 2)(_MethodDef(b"_update", update, _METH_FASTCALL_KEYWORDS, None),
                                   _MethodDef())
        doc_bytes = ctypes.create_string_buffer(doc.encode())

        def at(function) -> int:
            return ctypes.cast(function, c_void_p).value

        slots = (_TypeSlot * 7)(
            _TypeSlot(_TP_CALL, at(ctypes.pythonapi.PyVectorcall_Call)),
            _TypeSlot(_TP_DOC, addressof(doc_bytes)), _TypeSlot(_TP_METHODS, addressof(methods)),
            _TypeSlot(_TP_MEMBERS, addressof(members)),
            _TypeSlot(_TP_TRAVERSE, at(lib.tj_host_bound_traverse)),
            _TypeSlot(_TP_FINALIZE, at(lib.tj_host_bound_finalize)), _TypeSlot())
        spec = _TypeSpec(b"tilejit.runtime.bound.BoundLaunch", header + len(_FIELDS) * word, 0,
                         _TPFLAGS, slots)
        lib.tj_host_bound_layout(header)
        from_spec = ctypes.pythonapi.PyType_FromSpec
        from_spec.restype, from_spec.argtypes = py_object, [c_void_p]
        cls = from_spec(addressof(spec))
        _bound_type[:] = [cls, (spec, slots, members, methods, doc_bytes)]
        return cls


_generic_alloc = ctypes.pythonapi.PyType_GenericAlloc
_generic_alloc.restype, _generic_alloc.argtypes = py_object, [py_object, ctypes.c_ssize_t]
_attach: list = []


def bound_launch(entry, cls: type, kernel, args: tuple, inputs: list):
    """A new bound launch (of ``cls``, `bound_type`) of ``kernel`` with ``args``, bound by
    ``entry`` (`bind_entry`): it owns the core's bound launch, and keeps ``inputs`` (a
    list, the binding's record of what each input is bound to) as ``_bound``."""
    if not _attach:
        address = ctypes.cast(core_library().tj_host_bound_attach, c_void_p).value
        _attach.append(ctypes.PYFUNCTYPE(c_int, py_object, c_ssize_t, py_object, py_object,
                                         py_object)(address))
    handle = _generic_alloc(cls, 0)  # first: nothing to undo if it fails
    address, outputs = entry(*args)
    if _attach[0](handle, address, kernel, outputs, inputs) != 0:
        raise RuntimeError(f"{kernel.name}: the bound launch could not be attached")
    return handle
