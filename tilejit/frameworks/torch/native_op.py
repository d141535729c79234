"""A kernel's torch op implemented in C: the dispatcher calls the core, no Python between.

``op.definition`` defines the op (schema, fake implementation) from Python, then hands its
kernels to the core (``tj_torch_impl``, core/src/torch.c), which registers them through
torch's stable C ABI, found in the loaded libtorch:

- the backend kernel (dispatch keys CPU and CUDA) reads the dispatcher's stack, runs the
  core's call (the same validation, messages and exception classes as a direct call:
  the core's status decides what the op raises, a ``TypeError`` through libc10's
  ``c10::TypeError`` where the process has it, else a ``RuntimeError``), allocates the
  outputs with torch and
  launches on torch's current stream;
- the autograd kernel (an op that writes none of its arguments, ``autograd_in_c``): a
  plain call (plain dense tensors without autograd record, no
  dispatch mode, tracer or transform active on the thread, read in place: a fast path,
  ``probes.plain_call``) runs the kernel at once, as the dispatcher would below
  autograd; any other call is handed to the op's Python autograd kernel
  (``autograd.fallback_kernel``: record, refuse, or run below autograd, through the
  dispatcher's other keys: modes, functionalization, fake tensors). With
  ``TILEJIT_FAST_PATHS=0`` the op keeps Python's autograd kernel for every call.

``TILEJIT_TORCH_OPS=python`` registers the Python implementation instead (as does a torch
whose stable ABI lacks a function tilejit needs): the same semantics.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from ctypes import c_char_p, c_int, c_uint64, c_void_p

import torch

from ...builder import torch_schema as schema
from ...native import abi
from ...native._build import env
from ...native.ctypes_abi import (
    DLTensor,
    TorchFallback,
    TorchOp,
    TorchPlain,
    TorchPlainObjects,
    TorchReader,
)
from ...native.library import core_library, status_of
from ...runtime import fast_paths
from ...runtime.fast_paths import FAST_PATHS
from . import autograd, probes
from .record import record
from .results import op_outputs

MODE = env.choice("TILEJIT_TORCH_OPS", ("c", "python")) or "c"

_lock = threading.Lock()
_available: list = []  # [why not, or None], decided once
_plain_found: list = []  # [TorchPlain, or None], decided once
_reader_lock = threading.Lock()  # beside _lock: the reader's probe takes it (plain_probe)
_reader_found: list = []  # [(function, context, make) addresses, or None; the context]
_objects_found: list = []  # [(function, context) addresses, or None; the context]


def available() -> str | None:
    """None when ops can be implemented in C here, else why not (decided once)."""
    with _lock:
        if not _available:
            _available.append(_why_not())
    return _available[0]


def describe() -> str:
    """How this process registers ops, for ``python -m tilejit doctor``."""
    why = available()
    return ("in C, through torch's stable C ABI" if why is None else
            f"in Python ({why})")


def _why_not() -> str | None:
    if MODE == "python":
        return "TILEJIT_TORCH_OPS=python"
    core = core_library()
    if core.tj_torch_init():
        return core.tj_last_error().decode("utf-8", "replace")
    if not hasattr(torch._C, "_aoti"):
        return "torch._C._aoti (tensor handles from Python) is missing"
    return None


def plain_probe():
    """What the C autograd kernel reads to run a plain call at once (``tj_torch_plain``),
    found and checked once (``probes.plain_call``); None without fast paths or when it
    does not check out: every call of an op with the C autograd kernel then asks
    Python's."""
    with _lock:
        if not _plain_found:
            found = None
            if FAST_PATHS:
                found = probes.plain_call(torch, _handle_is_impl, _tls_word, _handles())
            else:
                fast_paths.decided(probes.PLAIN_CALL, False, "TILEJIT_FAST_PATHS=0")
            if found is not None:
                meta, keyset, words, tls, fw_grad, undefined = found
                words = (c_uint64 * abi.TJ_TORCH_MAX_KEYSETS)(*words)
                found = TorchPlain(meta, keyset, words, len(found[2]), tls.encode(), fw_grad,
                                   undefined)
            _plain_found.append(found)
    return _plain_found[0]


def plain_objects(impl_offset: int):
    """``(tj_torch_plain_object, its context)``, addresses, for the core's record gate
    (``tj_host_plan.record_plain``): whether the thread and each tensor are plain, read
    in place where a tensor's object keeps its ``TensorImpl *`` at byte ``impl_offset``
    (``probes.grad_probe``); None when ``plain_probe`` found nothing to read them by.
    The context lives for the process."""
    plain = plain_probe()
    if plain is None:
        return None
    with _lock:
        if not _objects_found:
            context = TorchPlainObjects(impl_offset, ctypes.pointer(plain))
            function = ctypes.cast(core_library().tj_torch_plain_object, c_void_p).value
            _objects_found.extend(((function, ctypes.addressof(context)), context))
    return _objects_found[0]


def reader():
    """``(tj_torch_read_object, its context, tj_torch_make_object or None)``, addresses for
    ``tj_producer.read`` and ``make``: a direct call on a torch without the DLPack exchange
    API reads a tensor's ``TensorImpl`` in place through torch's stable C ABI, as the op's
    C kernels read a tensor handle, where it would ask ``__dlpack__`` for a capsule
    (``probes.READER``, a fast path), and makes its outputs in C as the op does, wrapped
    by libtorch_python (``probes.MAKER``, another). Found and checked once
    (``probes.reader_probe``, ``probes.maker_probe``) from what the plain-call probe
    found (the plain key sets) and the ``TensorImpl *`` word of a tensor object
    (``views.locate``); None without fast paths, without torch's stable ABI, or where
    anything does not check out. The context lives for the process."""
    with _reader_lock:
        if not _reader_found:
            _reader_found.extend(_find_reader())
    return _reader_found[0]


def _find_reader() -> tuple:
    """``(reader's answer, the context it points to)``, its decision recorded."""
    from .views import locate

    if not FAST_PATHS:
        fast_paths.decided(probes.READER, False, "TILEJIT_FAST_PATHS=0")
        fast_paths.decided(probes.MAKER, False, "TILEJIT_FAST_PATHS=0")
        return None, None
    # torch's stable ABI found (not the op's registration: TILEJIT_TORCH_OPS=python reads
    # tensors in place too), and handles made from Python (the plain-call probe's).
    core = core_library()
    why = (core.tj_last_error().decode("utf-8", "replace") if core.tj_torch_init() else
           None if hasattr(torch._C, "_aoti") else "torch._C._aoti is missing")
    plain = plain_probe() if why is None else None
    located = locate() if plain is not None else None
    if why is not None or plain is None or located is None:
        why = why or "the plain-call probe or the TensorImpl word did not check out"
        fast_paths.decided(probes.READER, False, f"{why}: every tensor through __dlpack__")
        fast_paths.decided(probes.MAKER, False, f"{why}: outputs from torch.empty")
        return None, None
    read = core.tj_torch_read_object
    context = TorchReader(located[0], ctypes.pointer(plain), None, 0)

    def read_as(tensor, vtable, dtypes):
        """The DLTensor the core reads of ``tensor`` under those settings, or None."""
        context.impl_vtable, context.dtypes = vtable, dtypes
        out = DLTensor()
        return out if read(ctypes.addressof(context), id(tensor), ctypes.addressof(out)) == 0 \
            else None

    found = probes.reader_probe(torch, read_as, located[0])
    if found is None:
        fast_paths.decided(probes.MAKER, False, "tensors are not read in place: outputs from "
                           "torch.empty")
        return None, None
    context.impl_vtable, context.dtypes = found
    make_address = ctypes.cast(core.tj_torch_make_object, c_void_p).value
    # Called holding the GIL (a PYFUNCTYPE): it makes a Python object.
    make = ctypes.PYFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p)(make_address)

    def make_as(prototype):
        """The tensor the core makes like ``prototype`` (a DLTensor), or None."""
        made = c_void_p()
        if make(ctypes.addressof(context), ctypes.addressof(prototype), ctypes.byref(made)):
            return None
        tensor = ctypes.cast(made, ctypes.py_object).value
        _decref(tensor)  # the reference the core made: `tensor` holds one of its own
        return tensor

    context.wrap = _wrap_function()
    if context.wrap is None or not probes.maker_probe(torch, make_as):
        if context.wrap is None:
            fast_paths.decided(probes.MAKER, False, "libtorch_python exports no "
                               f"{_WRAP}: outputs from torch.empty")
        context.wrap = None
    return (ctypes.cast(read, c_void_p).value, ctypes.addressof(context),
            make_address if context.wrap else None), context


_decref = ctypes.pythonapi.Py_DecRef
_decref.restype, _decref.argtypes = None, [ctypes.py_object]

_WRAP = "_Z16THPVariable_WrapRKN2at10TensorBaseE"  # THPVariable_Wrap(const at::TensorBase &)


def _wrap_function() -> int | None:
    """The address of libtorch_python's ``THPVariable_Wrap(const at::TensorBase &)``, the
    Python object of a tensor (what torch's own bindings return a tensor through), or
    None where it is not exported."""
    from pathlib import Path

    libraries = sorted((Path(torch.__file__).parent / "lib").glob("libtorch_python.*"))
    try:
        return ctypes.cast(ctypes.CDLL(str(libraries[0]))[_WRAP], c_void_p).value
    except (IndexError, OSError, AttributeError):
        return None


def _tls_word(symbol: str) -> int:
    """The calling thread's value of a thread-local word of libc10 (``tj_torch_tls_word``)."""
    core, word = core_library(), c_uint64()
    if core.tj_torch_tls_word(symbol.encode(), ctypes.byref(word)):
        raise LookupError(core.tj_last_error().decode("utf-8", "replace"))
    return word.value


def _handles():
    """``(tensor of handle, handle of tensor)``: torch's own conversions between tensors and
    AtenTensorHandles (``torch._C._aoti``, which AOTInductor's Python runner uses), over
    addresses: the first takes ownership of the handle, the second makes a new one."""
    aoti = torch._C._aoti
    pointer, capsule = ctypes.pythonapi.PyCapsule_GetPointer, ctypes.pythonapi.PyCapsule_New
    pointer.restype, pointer.argtypes = c_void_p, [ctypes.py_object, c_char_p]
    capsule.restype, capsule.argtypes = ctypes.py_object, [c_void_p, c_char_p, c_void_p]
    steal, make = aoti.alloc_tensor_by_stealing_from_void_ptr, aoti.unsafe_alloc_void_ptr_from_tensor

    def tensor_of(handle: int):
        return steal(capsule(handle, None, None))

    def handle_of(tensor) -> int:
        return pointer(make(tensor), None)

    return tensor_of, handle_of


def _handle_is_impl() -> bool:
    """Whether an AtenTensorHandle (an ``at::Tensor *``) starts with its TensorImpl's
    address, which the C autograd kernel reads."""
    tensor_of, handle_of = _handles()
    for tensor in (torch.ones(2), torch.ones(3, requires_grad=True), torch.empty(0)):
        handle = handle_of(tensor)
        try:
            if ctypes.c_void_p.from_address(handle).value != tensor._cdata:
                return False
        finally:
            tensor_of(handle)  # frees the handle
    return True


def autograd_in_c(mutates: bool) -> bool:
    """Whether an op gets the C autograd kernel: not when it writes an argument (Python's
    bumps the version counters: ``op._versions_bumped``), nor when plain calls cannot be
    told (``plain_probe``: without fast paths), where every call would be handed to
    Python's anyway. Tracers (Dynamo, AOT autograd, ``torch.export``) run with torch's
    Python dispatcher on, which takes the op's Python autograd kernel instead
    (``op.definition`` registers it with ``py_impl``): an integer stays a ``SymInt``
    there, where a C kernel would read it as an int and specialize the graph."""
    return not mutates and plain_probe() is not None


def register(kernel, op, name: str, namespace: str, mutates: bool) -> bool:
    """Registers the C kernels of ``op`` (see the module); False when they cannot be (no
    stable ABI, no slot left): the caller registers Python's instead."""
    if available() is not None or not schema.implementable_in_c(kernel.artifact):
        return False
    core = core_library()
    kinds = schema.input_kinds(kernel.artifact)
    fallback = TorchFallback(_fallback(kernel, op, name, kinds)) if autograd_in_c(mutates) else None
    plain = plain_probe() if fallback is not None else None
    # The op's returns as the kernel's outputs: return r is output returns[r].
    returns = kernel.artifact.signature.output_order
    order = (ctypes.c_int32 * max(len(returns), 1))(*returns)
    spec = TorchOp(namespace.encode(), name.encode(), kinds.encode(),
                    fallback if fallback is not None else TorchFallback(), None,
                    ctypes.pointer(plain) if plain is not None else None, order)
    # Kept whatever the answer: a registration torch failed half-way may still call it.
    record(name).keep((kernel._core_kernel, fallback))
    if core.tj_torch_impl(kernel._core_kernel.address, ctypes.byref(spec)):
        message = core.tj_last_error().decode("utf-8", "replace")
        fast_paths.decided(f"torch op {name} in C", False, message)
        return False
    return True


def _fallback(kernel, op, name: str, kinds: str):
    """The C autograd kernel's way into Python's (``autograd.fallback_kernel``): the
    stack's handles (inputs of ``kinds``) become tensors (stolen), the outputs new
    handles."""
    steal, handle_of = _handles()
    python_kernel = autograd.fallback_kernel(kernel, op, name)
    as_double = struct.Struct("<d").unpack
    as_bits = struct.Struct("<Q").pack

    def decode(kind, value):
        if kind in "Tt":
            return steal(value) if value else None
        if kind == "i":
            return value - (1 << 64) if value >= 1 << 63 else value
        if kind == "f":
            return as_double(as_bits(value))[0]
        return bool(value & 0xFF)

    def run(context, stack, nargs, nouts, message, size):
        try:
            args = tuple(decode(kind, stack[i]) for i, kind in enumerate(kinds))
            result = python_kernel(*args)
            for o, tensor in enumerate(op_outputs(result)):
                stack[o] = handle_of(tensor)
            return 0
        except BaseException as exc:  # noqa: BLE001 - handed to C, which raises it in torch
            text = str(exc).encode("utf-8", "replace")[:max(size - 1, 0)] + b"\0"
            ctypes.memmove(message, text, len(text))
            return status_of(exc)

    return run
