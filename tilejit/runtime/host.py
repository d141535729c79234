"""What the bindings call back into Python for.

The C core reads tensors through producers: the DLPack C exchange API of a type
(torch, ``tilejit.Array``) needs nothing from here. Objects without it (NumPy,
``__dlpack__``-only producers, every object under the ``dlpack`` backend) are
served by a producer the binding builds around the functions below: asking for
the capsule, allocating an output with the object's framework, asking that
framework for its current stream. Both bindings (the Cython wrapper, which is
handed this module by ``tilejit.runtime.cython_backend``, and the ctypes
backend) use these same functions, so the rules are written once.
"""

from __future__ import annotations

import numbers
import threading

from ..language import dtypes as _dtypes
from ..native import abi
from . import frameworks

MAX_VERSION = (abi.TJ_DLPACK_MAJOR, abi.TJ_DLPACK_MINOR)

def dlpack_capsule(obj):
    """``obj.__dlpack__()`` as a DLPack 1.3 consumer asks for it.

    A producer older than DLPack 1.0 takes no ``max_version``. The framework's adapter
    may add keywords (``Adapter.dlpack_keywords``: CuPy's ``stream``). An object its producer
    refuses to export (BufferError) may have an exportable alias over the same memory,
    which its framework's adapter gives (``Adapter.exportable``: torch's detached alias
    of a tensor that requires grad, whose storage a kernel reads and writes as it would
    through the exchange API). The adapter may then correct what the producer wrote
    (``Adapter.exported``: the strides older torch releases rewrite).
    """
    adapter = frameworks.adapter_for(type(obj))
    keywords = adapter.dlpack_keywords
    try:  # without **keywords where there are none: they cost a call 0.1 µs per tensor
        if keywords is None:
            capsule = obj.__dlpack__(max_version=MAX_VERSION)
        else:
            capsule = obj.__dlpack__(max_version=MAX_VERSION, **keywords)
    except TypeError:
        capsule = obj.__dlpack__() if keywords is None else obj.__dlpack__(**keywords)
    except BufferError:
        alias = adapter.exportable(obj)
        if alias is None:
            raise
        return dlpack_capsule(alias)
    return adapter.exported(obj, capsule)


PRODUCER_IMPORT = abi.TJ_PRODUCER_IMPORT  # tj_producer_step: which producer step failed


def producer_error(prefix: str, step: int, exc: BaseException, obj=None) -> BaseException:
    """The exception for a producer that failed inside a call, formatted once for every
    binding: the core's prefix (kernel, argument or output, what failed) and the first
    line of the producer's message (torch appends a C++ backtrace). An import keeps
    TypeError for a wrong kind of object and makes any other refusal (BufferError,
    KeyError, RuntimeError, ...) a ValueError; other steps keep the producer's exception
    class. The caller chains ``exc`` as the cause.

    ``obj``, the object an import failed on when the binding knows it, lets a refusal
    whose reason its framework's adapter can state itself (``import_refusal``) read the
    same on every path: torch words a sparse tensor's refusal one way through the
    exchange API and another through ``__dlpack__``.
    """
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    if step == PRODUCER_IMPORT:
        if obj is not None:
            text = frameworks.adapter_for(type(obj)).import_refusal(obj) or text
        cls = TypeError if isinstance(exc, TypeError) else ValueError
        return cls(f"{prefix}: {text}")
    try:
        return type(exc)(f"{prefix}: {text}")
    except Exception:  # noqa: BLE001 - a class with another constructor (NumPy's
        # _ArrayMemoryError takes a shape and a dtype): its nearest builtin base.
        base = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
        return base(f"{prefix}: {text}")


_DTYPE_NAMES = {d.dlpack: d.name for d in _dtypes.DTYPES.values()}
_lock = threading.Lock()
_allocators: dict = {}


# ---- What the binding asks of frameworks (tilejit.runtime.frameworks) -----------------


def view_check(cls: type):
    """How a binding learns whether an object of type ``cls`` is a lazy view (the core's
    ``TJ_VIEW_*`` bits): None when such objects never are; a ``tj_view_bits`` tuple to
    read the bits in place; or the framework's function asked per object (the core then
    calls ``lazy_view``)."""
    return frameworks.adapter_for(cls).view_check(cls)


def lazy_view(obj) -> int:
    """The ``TJ_VIEW_*`` bits of ``obj``, asked of its framework (``view_check``'s slow
    way)."""
    return frameworks.adapter_for(type(obj)).lazy_view(obj)


def reader(cls: type):
    """How a call reads objects of ``cls`` in place before asking ``__dlpack__``
    (``tj_producer.read``), and makes outputs before asking its allocator
    (``tj_producer.make``): the adapter's ``reader``, ``(read, context, make)`` or None."""
    return frameworks.adapter_for(cls).reader(cls)


def framework_claim(cls: type):
    """How the core learns that a framework must run a call with objects of ``cls``
    (``tj_claim``, core/include/tilejit/producer.h): the adapter's ``claim``."""
    return frameworks.adapter_for(cls).claim(cls)


def claims(obj, failed: int) -> int:
    """The public answer of ``framework_claim`` for one object (``tj_claim_kind``)."""
    return frameworks.adapter_for(type(obj)).claims(obj, failed)


# The wrapper's tilejit.Array and its `empty`, handed over by the cython backend when it
# loads the wrapper: host sits below the backends and never imports them.
_array = None
_array_empty = None


def use_array(cls: type, empty) -> None:
    """Makes ``cls`` (tilejit.Array) a type of "no framework", whose outputs
    ``empty(shape, dtype)`` allocates, as for calls with no tensor argument."""
    global _array, _array_empty
    _array, _array_empty = cls, empty


def array_type():
    """tilejit.Array when the wrapper is loaded, else None."""
    return _array


class OwnAdapter(frameworks.Adapter):
    """tilejit's own tensors (``tilejit.Array``) and calls with no tensor argument."""

    name = "tilejit"

    def allocator(self, dtype: str, device: tuple[int, int]):
        """tilejit's own Array when the wrapper is loaded (no framework needed), else the
        default framework's (NumPy)."""
        empty = _array_empty
        if empty is None:  # no wrapper: the default framework's host allocator
            return frameworks.adapter_for(object).allocator(dtype, device)
        return lambda shape: empty(shape, dtype)


frameworks.register_own(OwnAdapter())


def allocate(cls: type, shape: tuple, dtype: tuple[int, int, int], device: tuple[int, int]):
    """A new output of ``shape``, DLPack ``dtype`` ``(code, bits, lanes)`` on DLPack
    ``device``, made by the framework of argument type ``cls`` (its adapter's
    ``allocator``). The choice is made once per (type, dtype, device)."""
    key = (cls, dtype, device)
    fn = _allocators.get(key)
    if fn is None:
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            raise TypeError(f"no framework dtype for DLPack dtype {dtype}")
        with _lock:
            fn = _allocators.setdefault(
                key, frameworks.adapter_for(cls).allocator(name, device))
    return fn(shape)


def framework_stream(cls: type, device_type: int, device_id: int) -> int:
    """The current stream of the framework of ``cls`` on a device, for producers without
    the exchange API; 0 (none) when the framework has no notion of one."""
    return frameworks.adapter_for(cls).stream(device_type, device_id)


def _qualified_name(cls: type) -> str:
    """``torch.cpu.Stream`` for a class of a module, ``str`` for a builtin."""
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def stream_is_input(input_names) -> bool:
    """The ``stream=`` rule, for every callable tilejit makes: ``stream=`` is the launch
    stream, unless the callee has an input named ``stream`` (the keyword then passes that
    input, and the kernel launches on the framework's current stream). The core reads
    the answer from the kernel's plan (``tj_host_plan.stream_is_input``)."""
    return "stream" in input_names


def pop_stream(keywords: dict, input_names):
    """The launch stream of a call given ``keywords`` (None: not given), taken out of
    them by the ``stream=`` rule (``stream_is_input``)."""
    return None if stream_is_input(input_names) else keywords.pop("stream", None)


def stream_handle(stream, kernel: str) -> int:
    """A raw stream handle (``CUstream`` as an int) from what a caller passes as
    ``stream=``: an integer (an int, a ``numpy.int64``), a ``torch.cuda.Stream``
    (``.cuda_stream``), any object implementing ``__cuda_stream__``, or a stream object its
    framework's adapter reads (``Adapter.stream_handle``: CuPy's). A kernel with an
    input named ``stream`` never comes here: ``stream=`` passes that input."""
    said = f"{kernel}: stream= is the launch stream (the kernel has no input named 'stream')"
    if isinstance(stream, bool):
        raise TypeError(f"{said}: expected a stream handle, got bool")
    if isinstance(stream, numbers.Integral):  # an int, or numpy.int64 and the like
        handle = int(stream)
    elif hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    elif (handle := frameworks.adapter_for(type(stream)).stream_handle(stream)) is not None:
        pass  # a framework's own stream object (a cupy.cuda.Stream)
    else:
        raise TypeError(f"{said}: expected an int handle, a torch.cuda.Stream or an object "
                        f"with __cuda_stream__, got {_qualified_name(type(stream))}")
    if not isinstance(handle, int) or not 0 <= handle < (1 << 64):
        raise ValueError(f"{kernel}: stream handle must be a non-negative int, got {handle!r}")
    return handle


# How an argument that is no None, bool, int, float, tensor or tilejit.Pointer is read.
SCALAR_BOOL, SCALAR_INDEX, SCALAR_FLOAT, SCALAR_OTHER = "bool", "index", "float", "other"
_scalar_kinds: dict = {}


def scalar_kind(cls: type) -> str:
    """How both bindings read an argument of type ``cls`` that is none of the types they
    recognise at once (NumPy scalars and the like), decided once per type: a bool
    (``numpy.bool_``), an integer through ``__index__`` (integers first, so 3 never
    becomes 3.0), a float through ``__float__``, or something else, named in the
    message. A complex type (``numpy.complex128``) is something else, as Python's
    ``complex`` is: a float parameter refuses it rather than drop its imaginary part.

    >>> scalar_kind(numpy.float32), scalar_kind(numpy.complex64)
    ('float', 'other')
    """
    kind = _scalar_kinds.get(cls)
    if kind is None:
        import numbers

        if cls.__name__ in ("bool", "bool_"):
            kind = SCALAR_BOOL
        elif hasattr(cls, "__index__"):
            kind = SCALAR_INDEX
        elif issubclass(cls, numbers.Complex) and not issubclass(cls, numbers.Real):
            kind = SCALAR_OTHER
        elif hasattr(cls, "__float__") and not hasattr(cls, "__len__"):
            kind = SCALAR_FLOAT
        else:
            kind = SCALAR_OTHER
        kind = _scalar_kinds.setdefault(cls, kind)
    return kind

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE
_type_names: dict = {}


def type_name(cls: type) -> bytes:
    """How a message names an object's type, as CPython's ``tp_name`` spells it: the
    bare name for builtins and classes defined in Python, ``module.Name`` for types of C
    extensions. The bytes stay alive (the core borrows them for the call's messages)."""
    name = _type_names.get(cls)
    if name is None:
        module = getattr(cls, "__module__", "builtins")
        text = cls.__name__
        if not getattr(cls, "__flags__", 0) & _HEAPTYPE and module not in ("builtins", None):
            text = f"{module}.{text}"
        name = _type_names.setdefault(cls, text.encode())
    return name
