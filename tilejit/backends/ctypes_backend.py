"""The ``ctypes`` backend: pure-Python marshalling into the core's shared library.

It needs no compiled wrapper (only the core, built with the C compiler), so it works
where Cython is unavailable; ``execution_backend="auto"`` falls back to it. A call is one
foreign call whenever every argument is an object of a producer type the kernel has met
(torch tensors, tilejit Arrays, layout views, with or without ``stream=``): the core
reads the argument tuple through CPython's C API and runs its sequencer. Without
``stream=`` that call is not even a ctypes call: each kernel holds a builtin function,
made here with ``PyCFunction_NewEx`` over the core's ``tj_call_method``, which CPython
calls directly (no argument conversion, no libffi). Any other call is classified here
and handed to the same sequencer (``tj_call_run``). The core produces every validation message, so results, exception
types and messages are those of the other backends.
"""

from __future__ import annotations

import ctypes
import math
import threading
from ctypes import POINTER, addressof, byref, c_int, c_void_p, py_object

from .. import abi, host
from ..pointer import Pointer
from .core import check, core_library, core_library_gil
from .ctypes_abi import (
    ALLOCATE_FN,
    IMPORT_FN,
    STREAM_FN,
    VIEW_FN,
    TjArg,
    TjCall,
    TjCallPlan,
    TjClaim,
    TjHost,
    TjProducer,
    TjViewBits,
)

ARG_TENSOR, ARG_INT, ARG_BOOL, ARG_FLOAT = (abi.TJ_ARG_TENSOR, abi.TJ_ARG_INT, abi.TJ_ARG_BOOL,
                                            abi.TJ_ARG_FLOAT)
ARG_ADDRESS, ARG_OTHER, ARG_OBJECT = abi.TJ_ARG_ADDRESS, abi.TJ_ARG_OTHER, abi.TJ_ARG_OBJECT
ARG_OUT_OF_RANGE = abi.TJ_ARG_OUT_OF_RANGE
ARG_UNSIGNED = abi.TJ_ARG_UNSIGNED
EPYERR, EDECLINED, ECLAIMED = abi.TJ_EPYERR, abi.TJ_EDECLINED, abi.TJ_ECLAIMED
MAX_OUTPUTS = abi.TJ_MAX_OUTPUTS


# ---- The host table: CPython's C API functions, by address --------------------------

def _c_function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), c_void_p).value


# tj_host.list_new takes no argument; PyList_New takes the length: a C shim is not at
# hand without a compiler, so a ctypes callback makes the (rare: several outputs) list.
_LIST_NEW = ctypes.PYFUNCTYPE(py_object)(lambda: _new_list())


def _new_list():
    items = []
    _incref(items)  # the callback's result is borrowed by ctypes; the core owns one more
    return items


_HOST = TjHost(
    capsule_is_valid=_c_function("PyCapsule_IsValid"),
    capsule_pointer=_c_function("PyCapsule_GetPointer"),
    capsule_set_name=_c_function("PyCapsule_SetName"),
    object_type=_c_function("PyObject_Type"),
    release=_c_function("Py_DecRef"),
    sequence_size=_c_function("PyTuple_Size"),
    sequence_item=_c_function("PyTuple_GetItem"),
    retain=_c_function("Py_IncRef"),
    list_new=ctypes.cast(_LIST_NEW, c_void_p).value,
    list_append=_c_function("PyList_Append"),
    unlock=_c_function("PyEval_SaveThread"),
    lock=_c_function("PyEval_RestoreThread"),
    interpreter=_c_function("PyInterpreterState_Get"),  # the GIL is kept with one thread
    thread_head=_c_function("PyInterpreterState_ThreadHead"),
    thread_next=_c_function("PyThreadState_Next"),
    error_pending=_c_function("PyErr_Occurred"))
_HOST_ADDRESS = addressof(_HOST)


# ---- The call entry: a builtin function over the core's tj_call_method --------------

class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef (stable ABI)."""

    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", c_void_p), ("ml_flags", c_int),
                ("ml_doc", ctypes.c_char_p)]


_METH_O = 0x0008  # CPython's METH_O: the function takes one argument (here the tuple)
_PLAN_CAPSULE = abi.TJ_CALL_PLAN_CAPSULE.encode()  # alive for the process: capsules keep it
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = py_object, [c_void_p, ctypes.c_char_p, c_void_p]
_function_new = ctypes.pythonapi.PyCFunction_NewEx
_function_new.restype, _function_new.argtypes = py_object, [c_void_p, py_object, c_void_p]
_method_def = None  # one _MethodDef for every kernel's entry, alive for the process


def _call_entry(plan_address: int):
    """A builtin function that runs the call of ``plan_address`` on an argument tuple
    (``tj_call_method``): CPython calls the core directly, with no conversion of the
    arguments by ctypes. The plan must outlive the function (its kernel holds both)."""
    return _function_new(addressof(_method_def), _capsule_new(plan_address, _PLAN_CAPSULE,
                                                                None), None)


# ---- Producers ------------------------------------------------------------------------

# A producer written in Python cannot leave its exception pending for the core's caller
# (ctypes would report it as unraisable), so it parks it here, per thread, returns
# TJ_EPYERR, and the binding raises it after the call.
_parked = threading.local()


def _park(exc: BaseException) -> int:
    _parked.exc = exc
    return EPYERR


def _type_at(producer) -> type:
    return ctypes.cast(producer.contents.context, py_object).value


@IMPORT_FN
def _dlpack_import(producer, obj, arg):
    try:
        capsule = host.dlpack_capsule(ctypes.cast(obj, py_object).value)
    except BaseException as exc:  # noqa: BLE001 - every failure is the producer's
        return _park(exc)
    return _from_capsule(arg, capsule, _HOST_ADDRESS)


@ALLOCATE_FN
def _dlpack_allocate(producer, proto, out, result):
    p = proto.contents
    try:
        tensor = host.allocate(_type_at(producer), tuple(p.shape[:p.ndim]),
                               (p.dtype.code, p.dtype.bits, p.dtype.lanes),
                               (p.device.device_type, p.device.device_id))
    except BaseException as exc:  # noqa: BLE001
        return _park(exc)
    _incref(tensor)  # the core's reference, handed to the caller in the output slot
    result[0] = id(tensor)
    try:
        capsule = host.dlpack_capsule(tensor)
    except BaseException as exc:  # noqa: BLE001
        return _park(exc)
    return _from_capsule(out, capsule, _HOST_ADDRESS)


@STREAM_FN
def _dlpack_stream(producer, device_type, device_id, stream):
    try:
        stream[0] = host.framework_stream(_type_at(producer), device_type, device_id) or None
    except BaseException as exc:  # noqa: BLE001
        return _park(exc)
    return 0


@VIEW_FN
def _ask_view(producer, obj, view):
    """The view bits asked of the framework, when tilejit.torch_views could not find
    where torch keeps them (slow)."""
    try:
        view[0] = host.lazy_view(ctypes.cast(obj, py_object).value)
    except BaseException as exc:  # noqa: BLE001
        return _park(exc)
    return 0


def _set_view(producer: TjProducer, cls) -> TjProducer:
    """Makes the core check objects of ``cls`` for lazy views before import
    (tilejit.host.view_check): in place, or by asking the framework."""
    check = host.view_check(cls)
    if isinstance(check, tuple):
        bits = TjViewBits(*check)
        producer._keep = bits  # the producer, kept in the registry, keeps its bits alive
        producer.view_bits = addressof(bits)
    elif check is not None:
        producer.view = ctypes.cast(_ask_view, c_void_p).value
    return producer


_incref = ctypes.pythonapi.Py_IncRef
_incref.restype, _incref.argtypes = None, [py_object]
_decref = ctypes.pythonapi.Py_DecRef
_decref.restype, _decref.argtypes = None, [py_object]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = c_int, [py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [py_object, ctypes.c_char_p]

# What the core returns from a one-call entry that has no result (see tj_call_sequence).
_FAILED = object()

_lock = threading.Lock()
_registry: dict = {}  # type -> TjProducer (kept alive), or None: no tensors
_claims: dict = {}  # type -> the TjClaim its producer points to
_from_capsule = None  # tj_arg_from_capsule, set with the core
_run = None           # tj_call_run
_sequence_on = None   # tj_call_sequence_on


def _exchange_header(cls) -> int:
    """The address of the exchange-API table a type publishes, or 0."""
    owner = getattr(cls, "__dlpack_c_exchange_api__", None)
    if owner is not None and _capsule_valid(owner, b"dlpack_exchange_api"):
        return _capsule_pointer(owner, b"dlpack_exchange_api") or 0
    owner = getattr(cls, "__c_dlpack_exchange_api__", None)
    if isinstance(owner, int) and not isinstance(owner, bool) and owner > 0:
        return owner
    return 0


def _discover(cls):
    if getattr(cls, "_tilejit_view", False):  # a layout view: the wrapper's producer
        from .cython_backend import wrapper_module

        return TjProducer.from_address(wrapper_module().producer_address(cls, True))
    producer = None
    header = _exchange_header(cls)
    if header:
        producer = TjProducer()
        if core_library().tj_producer_from_exchange(addressof(producer), header, id(cls)) == 0:
            producer.host = _HOST_ADDRESS
        else:
            producer = None
    if producer is None and (hasattr(cls, "__dlpack__") or cls is type(None)):
        producer = _dlpack_producer(cls)
    if producer is not None:
        _set_view(producer, cls)
        claim = host.framework_claim(cls)
        if claim is not None:  # see tj_claim; kept alive with the producer, by the registry
            _claims[cls] = TjClaim(*claim)
            producer.claim = addressof(_claims[cls])
    return producer


def _dlpack_producer(cls) -> TjProducer:
    return TjProducer(import_=ctypes.cast(_dlpack_import, c_void_p).value,
                      allocate=ctypes.cast(_dlpack_allocate, c_void_p).value,
                      current_stream=ctypes.cast(_dlpack_stream, c_void_p).value,
                      type=id(cls), context=id(cls), host=_HOST_ADDRESS)


def _producer_of(cls):
    """The producer for objects of type ``cls`` (None: they are no tensors); the registry
    keeps the type and the producer alive for the process."""
    try:
        return _registry[cls]
    except KeyError:
        pass
    with _lock:
        return _registry.setdefault(cls, _discover(cls))


def _classify(obj, arg: TjArg, kernel) -> None:
    """One argument into ``arg``, in the order the Cython binding's ``_convert`` uses."""
    if obj is None:
        return
    cls = type(obj)
    if cls is bool:
        arg.kind, arg.value.i = ARG_BOOL, int(obj)
    elif isinstance(obj, int):
        arg.kind = ARG_INT
        if -(1 << 63) <= obj < (1 << 63):
            arg.value.i = obj
        elif 0 < obj < (1 << 64):  # a uint64 of 2**63 or more: its bits
            arg.flags |= ARG_UNSIGNED
            arg.value.i = obj - (1 << 64)
        else:  # only a float parameter takes it: as a double, or ±inf
            arg.flags |= ARG_OUT_OF_RANGE
            try:
                arg.value.f = float(obj)
            except OverflowError:
                arg.value.f = math.inf if obj > 0 else -math.inf
    elif cls is float:
        arg.kind, arg.value.f = ARG_FLOAT, obj
    elif (producer := _producer_of(cls)) is not None:
        arg.kind, arg.value.p, arg.producer = ARG_OBJECT, id(obj), addressof(producer)
        kernel._learn(producer)
    elif cls is Pointer:  # tilejit.make_ptr: an address that knows what it points to
        arg.kind, arg.value.p = ARG_ADDRESS, obj.address
        arg.tensor.dtype.code, arg.tensor.dtype.bits, arg.tensor.dtype.lanes = obj.dlpack_dtype
        arg.tensor.device.device_type = obj.dlpack_device_type
    else:  # NumPy and other scalar types; messages name numpy.float32, not float
        if (kind := host.scalar_kind(cls)) == host.SCALAR_BOOL:
            arg.kind, arg.value.i = ARG_BOOL, 1 if obj else 0
        elif kind == host.SCALAR_INDEX:
            _classify(obj.__index__(), arg, kernel)
        elif kind == host.SCALAR_FLOAT:
            arg.kind, arg.value.f = ARG_FLOAT, float(obj)
        else:
            arg.kind = ARG_OTHER
        arg.type_name = host.type_name(cls)


def _init_core() -> None:
    global _from_capsule, _run, _sequence_on, _method_def
    with _lock:
        if _run is None:
            core_library().tj_call_method_host(_HOST_ADDRESS)
            entry = ctypes.cast(core_library().tj_call_method, c_void_p).value
            _method_def = _MethodDef(b"tilejit_call", entry, _METH_O, None)
            gil = core_library_gil()
            _from_capsule, _sequence_on = gil.tj_arg_from_capsule, gil.tj_call_sequence_on
            _run = gil.tj_call_run


def _failure(exc: BaseException, args: tuple) -> BaseException:
    """A producer's exception raised out of a core call on ``args``, with the core's
    prefix."""
    info = core_library().tj_last_error_info().contents
    if info.code == EPYERR and info.producer:
        obj = args[info.argument] if 0 <= info.argument < len(args) else None
        return host.producer_error(core_library().tj_last_error().decode("utf-8", "replace"),
                                   info.producer, exc, obj)
    return exc


def _check(rc: int, args: tuple) -> None:
    """The ctypes binding's check of a call on ``args``: a parked producer error, or the
    core's exception."""
    if rc == EPYERR:
        exc = getattr(_parked, "exc", None)
        _parked.exc = None
        if exc is not None:
            raise _failure(exc, args) from exc
    check(rc)


class CtypesKernel:
    """Mixin giving ``JITKernel`` a ctypes ``__call__`` (see ``tilejit.backends``)."""

    _core_kernel = None

    def _attach(self, core_kernel, exchange_api, out_order):
        _init_core()
        self._core_kernel = core_kernel
        self._nargs = core_kernel.num_inputs
        self._nout = core_kernel.num_outputs
        self._out_order = None if out_order == tuple(range(len(out_order))) else out_order
        self._fallback = _producer_of(type(None))
        self._known = (c_void_p * 8)()  # producers met so far, for one-call dispatch
        self._plan = TjCallPlan(kernel=core_kernel.address, host=_HOST_ADDRESS,
                                fallback=addressof(self._fallback),
                                producers=ctypes.cast(self._known, POINTER(c_void_p)),
                                nproducers=0, none=id(None), failed=id(_FAILED))
        self._multiple = self._nout > 1
        self._plan_address = addressof(self._plan)
        self._entry = _call_entry(self._plan_address)
        self._outs_type = py_object * max(self._nout, 1)

    def _learn(self, producer) -> None:
        """Lets later calls with objects of this producer's type take one foreign call."""
        address = addressof(producer)
        plan = self._plan
        known = self._known[:plan.nproducers]
        if address not in known and plan.nproducers < len(self._known):
            self._known[plan.nproducers] = address  # the pointer first, then the count
            plan.nproducers += 1

    def __call__(self, *args, **keywords):
        # **keywords: stream=, and inputs by name (JITKernel._keyword_call); an unknown
        # keyword is reported with the kernel's name, as the other backends do.
        if keywords:
            if len(keywords) == 1 and "stream" in keywords:
                return self._call_on(args, keywords["stream"])
            return self._keyword_call(args, keywords)
        try:
            result = self._entry(args)
        except BaseException as exc:  # noqa: BLE001 - a producer's error: see where
            return self._failed(exc, args, None)
        if result is _FAILED:
            return self._failed(None, args, None)
        return self._ordered(result) if self._multiple else result

    def _call_on(self, args, stream):
        if stream is None:
            return self(*args)
        handle = host.stream_handle(stream, self.name)
        try:
            result = _sequence_on(self._plan_address, args, handle)
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc, args, handle)
        if result is _FAILED:
            return self._failed(None, args, handle)
        return self._ordered(result) if self._multiple else result

    def _failed(self, exc, args, stream):
        """The one-call entry failed: ``exc`` is the producer's error ctypes raised, or
        None when the core returned its "no result" sentinel. The record says why."""
        info = core_library().tj_last_error_info().contents
        if info.code == EDECLINED:
            return self._call_args(args, stream)
        if info.code == ECLAIMED:
            return self._claimed_call(args, stream)
        if info.code == EPYERR:
            parked = getattr(_parked, "exc", None)
            _parked.exc = None
            if parked is not None:
                exc = parked
            raise _failure(exc, args) from exc
        check(info.code)
        raise exc if exc is not None else RuntimeError(f"{self.name}: the call failed")

    def _call_args(self, args, stream):
        """The call classified here, then run by the core's sequencer; ``stream`` is
        the explicit stream's handle or None."""
        nargs = len(args)
        argv = (TjArg * max(nargs, self._nargs, 1))()  # room for left-out optional buffers
        if nargs <= self._nargs:
            for i, obj in enumerate(args):
                _classify(obj, argv[i], self)
        outs = self._outs_type()
        call = TjCall(args=argv, nargs=nargs, has_stream=stream is not None,
                      stream=stream or None, fallback=addressof(self._fallback),
                      host=_HOST_ADDRESS, outputs=addressof(outs))
        try:
            rc = _run(self._core_kernel.address, byref(call))
        except BaseException as exc:
            self._collect(outs)
            raise _failure(exc, args) from exc
        outputs = self._collect(outs)
        if rc == ECLAIMED:
            return self._claimed_call(args, stream)
        _check(rc, args)
        if self._nout == 0:
            return None
        if self._nout == 1:
            return outputs[0]
        return self._ordered(outputs)

    def _ordered(self, outputs):
        """Outputs made in declaration order, returned in out_idx order."""
        if self._out_order is None:
            return outputs
        return [outputs[j] for j in self._out_order]

    def _collect(self, outs):
        """The objects in an output array (NULL slots skipped); the core's references
        are dropped, each object read once."""
        outputs = []
        for i in range(self._nout):
            try:
                out = outs[i]
            except ValueError:  # NULL: the call failed before making this output
                continue
            _decref(out)
            outputs.append(out)
        return outputs
