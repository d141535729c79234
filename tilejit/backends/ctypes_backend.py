"""The ``ctypes`` backend: pure-Python marshalling into the core's shared library.

It needs no compiled wrapper (only the core, built with the C compiler), so it works
where Cython is unavailable; ``execution_backend="auto"`` falls back to it. It walks the
same steps as the Cython wrapper — import, ``tj_call_bind``, outputs, ``tj_call_launch``,
release — and the core produces every validation message, so results, exception types
and messages are the same.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import (
    POINTER,
    Structure,
    Union,
    byref,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import NamedTuple

from ..dlpack_import import dlpack_capsule, import_failure
from ..layout import Pointer
from ..streams import framework_stream, stream_handle

MAX_PARAMS, MAX_SYMBOLS, MAX_NDIM, MAX_OUTPUTS = 64, 64, 16, 16  # tilejit.h TJ_MAX_*
ARG_NONE, ARG_TENSOR, ARG_INT, ARG_BOOL, ARG_FLOAT, ARG_OTHER = 0, 1, 2, 3, 4, 6
ARG_OUT_OF_RANGE = 2
ARG_ADDRESS = 5
BUF_OUTPUT = 4
OWNER_NONE = 0
EPYERR = -5
_EXCEPTIONS = {-1: TypeError, -2: ValueError, -3: RuntimeError, -4: MemoryError}


# ---- Mirrors of core/include/tilejit/dlpack_abi.h and tilejit.h ---------------------------

class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _Value(Union):
    _fields_ = [("i", c_int64), ("f", c_double), ("p", c_void_p)]


class TjArg(Structure):
    _fields_ = [("kind", c_int32), ("flags", c_uint32), ("tensor", DLTensor), ("value", _Value),
                ("type_name", c_char_p), ("owner_kind", c_int32), ("owner", c_void_p)]


class TjFrame(Structure):
    _fields_ = [("kernel", c_void_p), ("params", c_void_p * MAX_PARAMS),
                ("symbols", c_int64 * MAX_SYMBOLS), ("device", DLDevice),
                ("has_device", c_int32), ("first_tensor", c_int32),
                ("out_ndim", c_int32 * MAX_OUTPUTS),
                ("out_shape", (c_int64 * MAX_NDIM) * MAX_OUTPUTS),
                ("out_dtype", DLDataType * MAX_OUTPUTS), ("stream", c_void_p)]


_lock = threading.Lock()
_core = None
_core_gil = None
_call_objects = None  # tj_call_objects, through _core_gil


def core_library() -> ctypes.CDLL:
    """The core as a shared library (built and cached on first use), with prototypes set."""
    global _core
    with _lock:
        if _core is None:
            try:
                from .._build_tools import build_core_library
            except ImportError:  # a source checkout on sys.path, not installed
                from build_tools import build_core_library
            lib = ctypes.CDLL(str(build_core_library()))
            argp = POINTER(TjArg)
            protos = {
                "tj_last_error": (c_char_p, []),
                "tj_kernel_create": (c_int, [c_char_p, c_int32, c_int32, POINTER(c_void_p)]),
                "tj_kernel_free": (None, [c_void_p]),
                "tj_kernel_add_symbol": (c_int, [c_void_p, c_char_p, c_int64]),
                "tj_kernel_add_expr": (c_int, [c_void_p, POINTER(c_int64), c_int32, c_char_p,
                                               POINTER(c_int32)]),
                "tj_kernel_set_buffer": (c_int, [c_void_p, c_int32, c_char_p, DLDataType, c_int32,
                                                 POINTER(c_int32), POINTER(c_int32), c_int64,
                                                 c_uint32]),
                "tj_kernel_set_scalar": (c_int, [c_void_p, c_int32, c_char_p, DLDataType]),
                "tj_kernel_set_pointer": (c_int, [c_void_p, c_int32, c_char_p, DLDataType,
                                                  c_int64, c_uint32]),
                "tj_kernel_finalize": (c_int, [c_void_p]),
                "tj_kernel_load": (c_int, [c_void_p, c_char_p, c_char_p]),
                "tj_kernel_set_launch": (c_int, [c_void_p, POINTER(c_int32), POINTER(c_int32),
                                                 c_int32]),
                "tj_kernel_num_outputs": (c_int32, [c_void_p]),
                "tj_arg_from_versioned": (c_int, [argp, c_void_p, c_char_p]),
                "tj_arg_from_legacy": (None, [argp, c_void_p]),
                "tj_arg_release": (None, [argp]),
                "tj_call_objects_failed": (c_int32, []),
                "tj_call_bind": (c_int, [c_void_p, argp, c_int32, POINTER(TjFrame)]),
                "tj_call_set_output": (c_int, [POINTER(TjFrame), c_int32, argp]),
                "tj_call_launch": (c_int, [POINTER(TjFrame)]),
                "tj_cuda_device_capability": (c_int, [c_int32, POINTER(c_int32),
                                                      POINTER(c_int32)]),
            }
            for name, (restype, argtypes) in protos.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            # The same library through PyDLL: calls keep the GIL (the producer's view
            # function needs it) and raise the Python error a producer set.
            global _core_gil
            gil = ctypes.PyDLL(str(lib._name))
            fn = gil.tj_args_from_exchange
            fn.restype = c_int
            fn.argtypes = [c_void_p, POINTER(c_void_p), argp, c_int32, POINTER(c_int32)]
            fn = gil.tj_call_objects
            fn.restype = c_int
            fn.argtypes = [c_void_p, c_void_p, c_void_p]
            global _call_objects
            _call_objects = fn
            _core_gil = gil
            _core = lib
    return _core


def _check(rc: int) -> None:
    if rc:
        message = _core.tj_last_error().decode("utf-8", "replace")
        raise _EXCEPTIONS.get(rc, RuntimeError)(message)


# The capsule C API, with the GIL held (PyDLL), on a private handle so the global
# ctypes.pythonapi prototypes stay untouched.
_py = ctypes.PyDLL(None)
_capsule_valid = _py.PyCapsule_IsValid
_capsule_valid.restype, _capsule_valid.argtypes = c_int, [ctypes.py_object, c_char_p]
_capsule_pointer = _py.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [ctypes.py_object, c_char_p]
_capsule_rename = _py.PyCapsule_SetName
_capsule_rename.restype, _capsule_rename.argtypes = c_int, [ctypes.py_object, c_char_p]
# PyCapsule_SetName keeps the pointer: these bytes objects live as long as the module.
_VERSIONED, _USED_VERSIONED = b"dltensor_versioned", b"used_dltensor_versioned"
_LEGACY, _USED_LEGACY = b"dltensor", b"used_dltensor"
_TP_NAME_OFFSET = 3 * ctypes.sizeof(c_void_p)


# ---- The DLPack C exchange API, called with the GIL held ------------------------------

_from_py = ctypes.PYFUNCTYPE(c_int, ctypes.py_object, POINTER(DLTensor))
_work_stream = ctypes.PYFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))
_export = ctypes.PYFUNCTYPE(c_int, ctypes.py_object, POINTER(c_void_p))


class DLPackExchangeAPI(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev_api", c_void_p),
                ("managed_tensor_allocator", c_void_p),
                ("managed_tensor_from_py_object_no_sync", c_void_p),
                ("managed_tensor_to_py_object_no_sync", c_void_p),
                ("dltensor_from_py_object_no_sync", c_void_p),
                ("current_work_stream", c_void_p)]


class _Producer(NamedTuple):
    """What a producer type's exchange-API table offers this backend, read once per type."""

    fill: object         # dltensor_from_py_object_no_sync as a ctypes callable, or None
    fill_address: int    # its address (tj_args_from_exchange takes it), or 0
    export: object       # managed_tensor_from_py_object_no_sync, when there is no view
    current: object      # current_work_stream as a ctypes callable, or None
    call_api: int        # the table's address when tj_call_objects can take whole calls
    owner: object        # the capsule or int that published the table (kept alive)


_NO_PRODUCER = _Producer(None, 0, None, None, 0, None)
_producers: dict = {}  # type -> _Producer; keeps each type alive


def _producer(cls) -> _Producer:
    """The exchange API of type ``cls``: the capsule attribute, else the older int-valued
    one; walks prev_api to a major version we speak. Read once per type."""
    try:
        return _producers[cls]
    except KeyError:
        pass
    owner = getattr(cls, "__dlpack_c_exchange_api__", None)
    address = None
    if owner is not None and _capsule_valid(owner, b"dlpack_exchange_api"):
        address = _capsule_pointer(owner, b"dlpack_exchange_api")
    elif isinstance(getattr(cls, "__c_dlpack_exchange_api__", None), int):
        owner = address = cls.__c_dlpack_exchange_api__
    producer = _NO_PRODUCER
    while address:
        api = DLPackExchangeAPI.from_address(address)
        if api.major == 1:
            view = api.dltensor_from_py_object_no_sync
            whole = view and api.managed_tensor_allocator and \
                api.managed_tensor_to_py_object_no_sync
            producer = _Producer(
                fill=_from_py(view) if view else None, fill_address=view or 0,
                export=(_export(api.managed_tensor_from_py_object_no_sync)
                        if not view and api.managed_tensor_from_py_object_no_sync else None),
                current=(_work_stream(api.current_work_stream) if api.current_work_stream
                         else None),
                call_api=address if whole else 0, owner=owner)
            break
        address = api.prev_api
    _producers[cls] = producer
    return producer


class _CallPlan(Structure):
    """tj_call_plan: a kernel, a producer type's table, the GIL to drop around the kernel."""

    _fields_ = [("kernel", c_void_p), ("api", c_void_p), ("unlock", c_void_p),
                ("lock", c_void_p)]


_SAVE_THREAD = ctypes.cast(_py.PyEval_SaveThread, c_void_p).value
_RESTORE_THREAD = ctypes.cast(_py.PyEval_RestoreThread, c_void_p).value
def _tuple_items_offset() -> int:
    """Where a tuple's item pointers start, past its header (object header and size, and
    on newer CPythons a cached hash), found on a live tuple rather than assumed."""
    items = tuple(object() for _ in range(8))
    word = ctypes.sizeof(c_void_p)
    for offset in range(2 * word, 6 * word, word):
        if all(c_void_p.from_address(id(items) + offset + i * word).value == id(item)
               for i, item in enumerate(items)):
            return offset
    raise RuntimeError("tilejit: cannot find the items of a tuple in this Python")


# So the core reads a call's argument handles straight from the tuple Python built for it.
_TUPLE_ITEMS = _tuple_items_offset()
_FAILED_STREAM = -1000  # TJ_FAILED_STREAM
_drop = _py.Py_DecRef
_drop.restype, _drop.argtypes = None, [ctypes.py_object]


def _import_dlpack(obj, arg: TjArg, what: bytes) -> None:
    """The standard protocol, exactly as the Cython wrapper's ``_import_dlpack``."""
    capsule = dlpack_capsule(obj)
    if _capsule_valid(capsule, _VERSIONED):
        ptr = _capsule_pointer(capsule, _VERSIONED)
        _capsule_rename(capsule, _USED_VERSIONED)
        _check(_core.tj_arg_from_versioned(byref(arg), ptr, None))
    elif _capsule_valid(capsule, _LEGACY):
        ptr = _capsule_pointer(capsule, _LEGACY)
        _capsule_rename(capsule, _USED_LEGACY)
        _core.tj_arg_from_legacy(byref(arg), ptr)
    else:
        raise TypeError(f"{what.decode()}: __dlpack__ returned {capsule!r}, not a DLPack capsule")


def _convert(obj, arg: TjArg, what: bytes, exchange: bool) -> None:
    """Classifies one argument, in the same order as the Cython wrapper's ``_convert``."""
    if obj is None:
        return
    cls = type(obj)
    if cls is bool:
        arg.kind, arg.value.i = ARG_BOOL, int(obj)
    elif isinstance(obj, int):
        arg.kind = ARG_INT
        if -(1 << 63) <= obj < (1 << 63):
            arg.value.i = obj
        else:
            arg.flags |= ARG_OUT_OF_RANGE
            arg.value.i = -1 if obj < 0 else (1 << 63) - 1
    elif isinstance(obj, float):
        arg.kind, arg.value.f = ARG_FLOAT, obj
    elif cls is Pointer:  # tilejit.make_ptr: an address that knows what it points to
        arg.kind, arg.value.p = ARG_ADDRESS, obj.address
        arg.tensor.dtype.code, arg.tensor.dtype.bits, arg.tensor.dtype.lanes = obj.dlpack_dtype
        arg.tensor.device.device_type = obj.dlpack_device_type
    elif exchange and (_producer(cls).fill is not None or _producer(cls).export is not None):
        producer = _producer(cls)
        managed = c_void_p()
        try:
            if producer.fill is not None:
                producer.fill(obj, byref(arg.tensor))  # raises what the producer set
            else:  # a table without the view: an owning export, deleted after the call
                producer.export(obj, byref(managed))
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise import_failure(what.decode(), exc) from exc
        if producer.fill is not None:
            arg.kind = ARG_TENSOR
        else:
            _check(_core.tj_arg_from_versioned(byref(arg), managed, None))
    elif getattr(cls, "_tilejit_view", False):  # tilejit.from_dlpack: its DLTensor as it is
        ctypes.memmove(byref(arg.tensor), obj._dltensor_address, ctypes.sizeof(DLTensor))
        arg.kind, arg.flags = ARG_TENSOR, obj._arg_flags
    elif hasattr(cls, "__dlpack__"):
        try:
            _import_dlpack(obj, arg, what)
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            raise import_failure(what.decode(), exc) from exc
    elif cls.__name__ in ("bool", "bool_"):
        arg.kind, arg.value.i = ARG_BOOL, 1 if obj else 0
    elif hasattr(cls, "__index__"):
        _convert(obj.__index__(), arg, what, exchange)
    elif hasattr(cls, "__float__") and not hasattr(cls, "__len__"):
        arg.kind, arg.value.f = ARG_FLOAT, float(obj)
    else:
        arg.kind = ARG_OTHER
        # The type's own tp_name, as the Cython wrapper reports it: PyTypeObject starts
        # with the object header (refcount, type, size), then the tp_name pointer.
        arg.type_name = c_char_p.from_address(id(cls) + _TP_NAME_OFFSET)


class CtypesKernel:
    """Mixin giving ``JITKernel`` a ctypes ``__call__`` (see ``tilejit.backends``)."""

    _handle = None

    def _bind(self, spec, library, entry, allocate, exchange_api, out_order):
        core = core_library()
        name, target, symbols, exprs, params, launch = spec
        handle = c_void_p()
        _check(core.tj_kernel_create(name.encode(), len(params), target, byref(handle)))
        self._handle = handle
        for sym_name, divisibility in symbols:
            _check(core.tj_kernel_add_symbol(handle, sym_name.encode(), divisibility))
        expr_id = c_int32()
        for code, text in exprs:
            buf = (c_int64 * len(code))(*code)
            _check(core.tj_kernel_add_expr(handle, buf, len(code) // 2, text.encode(),
                                           byref(expr_id)))
        labels, out_labels = [], []
        for index, (kind, pname, dtype_t, shape_ids, stride_ids, align, flags) in \
                enumerate(params):
            dtype = DLDataType(*dtype_t)
            bname = pname.encode()
            if kind == 2:
                _check(core.tj_kernel_set_scalar(handle, index, bname, dtype))
            elif kind == 3:
                _check(core.tj_kernel_set_pointer(handle, index, bname, dtype, align, flags))
            else:
                shape = (c_int32 * max(len(shape_ids), 1))(*shape_ids)
                strides = None if stride_ids is None else (c_int32 * max(len(stride_ids), 1))(
                    *stride_ids)
                _check(core.tj_kernel_set_buffer(handle, index, bname, dtype, len(shape_ids),
                                                 shape, strides, align, flags))
            if flags & BUF_OUTPUT:
                out_labels.append(pname)
            else:
                labels.append(f"{name}: argument {len(labels)} '{pname}'".encode())
        if launch is not None:  # a CUDA kernel: grid, block, shared memory expression ids
            _check(core.tj_kernel_set_launch(handle, (c_int32 * 3)(*launch[0]),
                                             (c_int32 * 3)(*launch[1]), launch[2]))
        _check(core.tj_kernel_finalize(handle))
        _check(core.tj_kernel_load(handle, library.encode(), entry.encode()))
        self._labels = tuple(labels)
        self._nargs = len(labels)
        self._nout = len(out_labels)
        self._out_names = tuple(out_labels)
        self._ctypes_allocate = allocate
        self._out_order = None if out_order == tuple(range(len(out_order))) else out_order
        self._plans = {}  # producer type -> byref(tj_call_plan) for tj_call_objects
        self._outs_type = ctypes.py_object * max(self._nout, 1)

    def __del__(self):
        if self._handle is not None and _core is not None:
            _core.tj_kernel_free(self._handle)
            self._handle = None

    def _import_views(self, fill, objects, argv, nargs):
        failed = c_int32(-1)
        try:
            _core_gil.tj_args_from_exchange(fill, objects, argv, nargs, byref(failed))
        except (TypeError, ValueError, RuntimeError, BufferError) as exc:
            what = self._labels[failed.value].decode()
            raise import_failure(what, exc) from exc

    def __call__(self, *args, stream=None):
        # The whole call in one foreign call when every argument is a tensor of one
        # producer type with the exchange API (all torch, say): each ctypes call costs
        # about as much as the core's work for a call.
        if stream is None and len(args) == self._nargs and args:
            cls = type(args[0])
            plan = self._plans.get(cls)
            if plan is None and _producer(cls).call_api:
                plan = self._plan(cls)
            if plan is not None:
                for a in args:
                    if type(a) is not cls:
                        break
                else:
                    if self._nout:
                        return self._call_objects(plan, args)
                    # No outputs, inline: a Python call frame is a tenth of this call.
                    try:
                        rc = _call_objects(plan, id(args) + _TUPLE_ITEMS, None)
                    except Exception as exc:  # a producer's error, raised with its context
                        raise self._producer_failure(exc) from exc
                    if rc:
                        _check(rc)
                    return None
        return self._call_args(args, stream)

    def _call_objects(self, plan, args):
        # The core writes new references into these slots, which ctypes does not own:
        # each one read is dropped once after reading.
        outs = self._outs_type()
        try:
            rc = _call_objects(plan, id(args) + _TUPLE_ITEMS, outs)
        except Exception as exc:  # a producer's error, raised with its context
            self._collect(outs)
            raise self._producer_failure(exc) from exc
        if not rc and self._nout == 1:
            out = outs[0]
            _drop(out)
            return out
        outputs = self._collect(outs)
        if rc:
            _check(rc)
        if self._out_order is not None:
            return [outputs[j] for j in self._out_order]
        return outputs

    def _producer_failure(self, exc):
        """The error for a producer failing inside tj_call_objects, as the step-by-step
        path (and the Cython wrapper) would raise it."""
        where = _core.tj_call_objects_failed()
        if where >= 0:
            return import_failure(self._labels[where].decode(), exc)
        if where == _FAILED_STREAM:
            return type(exc)(f"{self.name}: the producer's current stream: {exc}")
        label = f"{self.name}: output '{self._out_names[-1 - where]}'"
        return type(exc)(f"{label}: the producer could not return the output: {exc}")

    def _collect(self, outs):
        """The objects in a tj_call_objects output array (NULL slots skipped)."""
        outputs = []
        for i in range(self._nout):
            try:
                out = outs[i]
            except ValueError:  # NULL: the call failed before making this output
                continue
            _drop(out)
            outputs.append(out)
        return outputs

    def _plan(self, cls):
        """This kernel's tj_call_plan for tensors of type ``cls`` (made once)."""
        plan = _CallPlan(self._handle.value, _producer(cls).call_api, _SAVE_THREAD,
                         _RESTORE_THREAD)
        self._plans[cls] = byref(plan)  # the byref object keeps the struct alive
        return self._plans[cls]

    def _call_args(self, args, stream):
        core = _core
        frame = TjFrame()
        nargs = len(args)
        if nargs != self._nargs:
            _check(core.tj_call_bind(self._handle, None, nargs, byref(frame)))
        argv = (TjArg * max(nargs, 1))()
        outv = (TjArg * max(self._nout, 1))()
        converted = False  # whether any argument went through _convert (may own a tensor)
        try:
            # Tensors of one exchange-API type (the common case: all torch) are imported
            # by the core in one call; everything else goes through _convert.
            objects = fill = None
            for i, obj in enumerate(args):
                address = _producer(type(obj)).fill_address
                if address and (fill is None or address == fill):
                    if fill is None:
                        fill, objects = address, (c_void_p * nargs)()
                    objects[i] = id(obj)
                else:
                    converted = True
                    _convert(obj, argv[i], self._labels[i], True)
            if fill is not None:
                self._import_views(fill, objects, argv, nargs)
            _check(core.tj_call_bind(self._handle, argv, nargs, byref(frame)))
            like = args[frame.first_tensor] if frame.first_tensor >= 0 else None
            if getattr(type(like), "_tilejit_view", False):  # outputs follow the view's source
                like = like.source
            # Stream: explicit > the producer's current work stream (exchange API, else
            # its framework's) > none.
            if stream is not None:
                frame.stream = stream_handle(stream, self.name)
            elif frame.device.device_type != 1 and like is not None:
                current = _producer(type(like)).current
                if current is not None:
                    handle = c_void_p()
                    current(frame.device.device_type, frame.device.device_id, byref(handle))
                    frame.stream = handle.value
                else:
                    frame.stream = framework_stream(like, frame.device.device_type,
                                                    frame.device.device_id)
            outputs = []
            for i in range(self._nout):
                shape = tuple(frame.out_shape[i][:frame.out_ndim[i]])
                out = self._ctypes_allocate(like, shape, i)
                _import_dlpack(out, outv[i], b"output")
                _check(core.tj_call_set_output(byref(frame), i, byref(outv[i])))
                outputs.append(out)
            _check(core.tj_call_launch(byref(frame)))  # ctypes releases the GIL here
        finally:
            # Only imports that own a managed tensor owe a deleter call; views (the
            # exchange API's, the layout views') and scalars have nothing to release, and
            # a ctypes call costs more than the check.
            if converted:
                for arg in argv:
                    if arg.owner_kind:
                        core.tj_arg_release(byref(arg))
            if self._nout:
                for arg in outv:
                    if arg.owner_kind:
                        core.tj_arg_release(byref(arg))
        if self._nout == 0:
            return None
        if self._nout == 1:
            return outputs[0]
        if self._out_order is not None:
            return [outputs[j] for j in self._out_order]
        return outputs
