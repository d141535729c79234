"""JAX as the runtime sees it: a call of a kernel on JAX arrays is an XLA FFI custom call.

JAX claims every call with a JAX array or tracer among its arguments (``claim``): the
core hands it here before importing anything, and the call becomes
``jax.ffi.ffi_call(kernel.jax_target, ...)``, inside ``jax.jit`` and outside. When a
compiled program runs the call, XLA calls the core's handler (``tj_xla_handler``,
``core/src/xla.c``): the kernel runs on XLA's buffers, outputs included, with the
validation and binding of a direct call and no Python.

How a call is described to XLA (``tilejit/xla.h``): the kernel's key and one letter per
input as attributes, buffers (and scalars given as traced values) as operands, Python
numbers as attributes. When the call is traced, the core binds exactly that description
(``tj_xla_bind``) on the operands' shapes and dtypes: a call a direct call refuses is
refused here, at trace time, with the same message, and the outputs' shapes come from the
same binding (``out_idx`` expressions included). Symbolic dimensions (``jax.export``'s
shape polymorphism) are bound as far as they allow by ``jax_symbolic``.

Every call, eager or traced, goes through a jitted function kept per kind of call
(``call``): the binding above runs when JAX traces it, once per shape and dtype, and an
eager call costs a dictionary look-up before JAX's own dispatch.

Results: the outputs (in ``out_idx`` order; one output as an array, several as a tuple),
then each parameter the kernel writes that is not an output, as a new array
(``input_output_aliases``: a donated input is reused; the input itself is unchanged).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_void_p

import jax
import numpy

from ..language import dtypes
from ..language.lang import Buffer, Scalar
from ..native import abi
from ..native.ctypes_abi import (
    DLDataType,
    DLDevice,
)
from ..native.ctypes_abi import (
    TjXlaAttrs as _Attrs,
)
from ..native.ctypes_abi import (
    TjXlaBuffer as _Buffer,
)
from ..native.ctypes_abi import (
    TjXlaByteSpan as _Span,
)
from ..native.ctypes_abi import (
    TjXlaCallFrame as _Frame,
)
from ..native.ctypes_abi import (
    TjXlaList as _List,
)
from ..native.ctypes_abi import (
    TjXlaScalar as _Scalar,
)
from ..native.library import core_library, exception_class
from ..runtime import frameworks
from . import jax_symbolic

_MAX_NDIM, _MAX_OUTPUTS = 16, 16
_ALIGNED = 1 << 16  # the address a traced operand stands at: aligned as XLA aligns
_PLATFORMS = {"cpu": ("cpu", abi.kDLCPU), "cuda": ("CUDA", abi.kDLCUDA)}
_NAMES = {(d.code, d.bits): d.name for d in dtypes.DTYPES.values()}


# XLA's PrimitiveType of each element type a kernel takes (xla_data.proto).
_XLA_TYPES = {d.name: d.xla for d in dtypes.ALL.values() if d.xla}
_ATTR_TYPES = {bool: numpy.bool_, int: numpy.int64, float: numpy.float64}
# The element types a scalar may be given as (a 0-d array, a NumPy scalar): XLA's real
# and boolean ones the handler reads as a number.
_SCALAR_DTYPES = frozenset(d.name for d in dtypes.DTYPES.values()
                           if d.family in ("bool", "int", "uint", "float", "bfloat"))


def _core():
    return core_library()


_lock = threading.Lock()
_registered: dict = {}  # (target name, platform) -> the kernel registered under it


def register(kernel) -> str:
    """Registers ``kernel`` with the core's handler and XLA (once per process and
    target); its target name."""
    name = kernel.jax_target
    platform, device_type = _PLATFORMS[kernel.target]
    if (name, platform) not in _registered:
        def register_kernel() -> None:
            core = _core()
            if core.tj_xla_register(name.encode(), kernel._core_kernel.address, device_type):
                raise RuntimeError(core.tj_last_error().decode("utf-8", "replace"))

        _register_target(name, platform, kernel, register_kernel)
    return name


def _register_target(name: str, platform: str, kept, before=None) -> None:
    """Registers the core's handler with XLA as target ``name`` on ``platform``, once per
    process (``before()`` first, under the same lock); ``kept`` stays alive with it."""
    with _lock:
        if (name, platform) not in _registered:
            if before is not None:
                before()
            handler = ctypes.cast(_core().tj_xla_handler, c_void_p).value
            jax.ffi.register_ffi_target(name, _capsule(handler), platform=platform)
            _registered[(name, platform)] = kept  # the core borrows the kernel's tj_kernel


def _capsule(address: int):
    """The handler as XLA takes it: a PyCapsule of the function's address."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [c_void_p, c_char_p, c_void_p]
    return new(address, None, None)


def describe() -> str:
    """For ``python -m tilejit doctor``: whether XLA takes the core's handler, asked by
    registering it under a name of its own (XLA queries the handler's FFI version and
    traits when a target is registered, and refuses a handler it cannot call)."""
    try:
        _register_target("tilejit_doctor", "cpu", None)
    except Exception as exc:  # noqa: BLE001 - said as it is
        return f"XLA refuses the core's handler: {type(exc).__name__}: {exc}"
    return ("kernels run as XLA FFI custom calls through the core's handler "
            f"(tj_xla_handler, XLA FFI API {abi_version()}), which XLA accepts")


def abi_version() -> str:
    """The XLA FFI version the handler declares (tilejit/xla.h)."""
    return f"{abi.TJ_XLA_API_MAJOR}.{abi.TJ_XLA_API_MINOR}"


class _Described:
    """One call as XLA sees it: the operands, the letters, the attributes."""

    def __init__(self, kernel, args: tuple):
        inputs = _inputs(kernel)
        self.operands, self.layout, self.attrs, self.written = [], [], {}, []
        for position, value in enumerate(args):
            param = inputs[position] if position < len(inputs) else None
            self.layout.append(self._letter(kernel, position, param, value))

    def _letter(self, kernel, position: int, param, value) -> str:
        if param is None:
            return "n"  # past the kernel's inputs: the core reports the count
        if value is None:
            return "n"
        array = _as_array(value)
        if array is not None:
            dtype = _dtype_name(array)
            if isinstance(param, Scalar):
                if array.ndim != 0 or dtype not in _SCALAR_DTYPES:
                    # Named as the core names a tensor, with what it is.
                    self.attrs[f"tj_{position}"] = (
                        f"a tensor of shape {jax_symbolic.shape_text(array.shape)} and dtype "
                        f"{dtype}")
                    return "o"
                if isinstance(array, jax.core.Tracer) and param._symbol in _sizes(kernel):
                    raise TypeError(
                        f"{kernel.name}: argument {position} '{_input_name(kernel, position)}'"
                        f" sets a size of the call, which XLA must know when it compiles: "
                        f"give it as a Python int, not a traced value")
                self.operands.append(array)
                return "s"
            if dtype not in _XLA_TYPES:  # no XLA type the handler reads: said as the core says
                raise ValueError(f"{kernel.name}: argument {position} "
                                 f"'{_input_name(kernel, position)}': expected dtype "
                                 f"{getattr(param, 'dtype', 'of a tensor')}, got {dtype}")
            self.operands.append(array)
            if isinstance(param, Buffer) and not param.const and not _is_output(kernel, param):
                self.written.append(len(self.operands) - 1)
                return "w"
            return "b"
        if type(value) in _ATTR_TYPES or (isinstance(value, numpy.generic)
                                          and value.dtype.name in _SCALAR_DTYPES):
            scalar = value if isinstance(value, numpy.generic) else _ATTR_TYPES[type(value)](value)
            if isinstance(value, int) and not isinstance(value, bool) and not (
                    -2**63 <= value < 2**64):
                return self._other(position, type(value))
            if isinstance(value, int) and value >= 2**63:
                scalar = numpy.uint64(value)
            if scalar.dtype.name in ("float16", "bfloat16"):  # XLA has no such attributes
                scalar = numpy.float32(scalar)  # the same value
            self.attrs[f"tj_{position}"] = scalar
            return "a"
        return self._other(position, type(value))

    def _other(self, position: int, cls: type) -> str:
        self.attrs[f"tj_{position}"] = _type_name(cls)
        return "o"


def _type_name(cls: type) -> str:
    """A type as a message names it: by its module and name, a builtin by its name, and a
    type JAX defines as JAX's API names it (``jax.ShapeDtypeStruct``), never by the module
    inside JAX that defines it."""
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    if module.split(".")[0] in ("jax", "jaxlib"):
        public = getattr(jax, cls.__name__, None) is cls
        return f"jax.{cls.__name__}" if public else cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def _inputs(kernel) -> list:
    """The kernel's inputs (the parameters a call gives), in declaration order."""
    return [kernel.params[i] for i in kernel.artifact.signature.inputs]


def _input_name(kernel, position: int) -> str:
    return kernel._core_kernel.input_names[position]


def _sizes(kernel) -> set:
    """The symbols a scalar input sets (a size the outputs' shapes may depend on)."""
    return {s for s in kernel.artifact.signature.symbols if s.scalar is not None}


def _allocated(kernel) -> int:
    """How many results the handler writes: the outputs, then the workspaces."""
    return kernel._core_kernel.num_outputs + len(kernel.program.workspaces)


def _is_output(kernel, param) -> bool:
    return any(kernel.params[i] is param for i in kernel.out_idx)


def _as_array(value):
    """A JAX array or tracer as it is; a NumPy array as a JAX array; else None."""
    if isinstance(value, (jax.Array, jax.core.Tracer)):
        return value
    if isinstance(value, numpy.ndarray):
        return jax.numpy.asarray(value)
    return None


def _bind(kernel, described: _Described, shapes: list | None = None):
    """The outputs' ``ShapeDtypeStruct``s, as the core binds the call; raises what a direct
    call raises, with its message, when the core refuses it. ``shapes``: the operands'
    shapes to bind in place of their own (``jax_symbolic``'s stand-in sizes); a call
    with symbolic dimensions goes to ``jax_symbolic``, which binds what it can here."""
    operands = described.operands
    if shapes is None:
        shapes = [a.shape for a in operands]
        if not all(type(d) is int for shape in shapes for d in shape):
            return jax_symbolic.bind(kernel, described, _bind)
    n = len(operands)
    dims = [(c_int64 * max(len(shape), 1))(*shape) for shape in shapes]
    buffers = (_Buffer * max(n, 1))(*[
        _Buffer(ctypes.sizeof(_Buffer), None, _xla_type(a), _ALIGNED, len(shapes[i]), dims[i])
        for i, a in enumerate(operands)])
    # A scalar operand's value: its own when concrete; a traced one's is not known, and any
    # value the kernel's checks take stands for it (a symbol it binds is checked at run
    # time). Kept alive, as dims and attrs, until the core has read them.
    values = {i: numpy.asarray(a) if not isinstance(a, jax.core.Tracer) else
              numpy.ones((), dtype=a.dtype) for i, a in enumerate(operands) if a.ndim == 0}
    for i, value in values.items():
        buffers[i].data = value.ctypes.data
    attrs = _attributes(kernel, described, for_core=True)
    frame = _Frame(ctypes.sizeof(_Frame), None, None, None, 3,
                   _List(ctypes.sizeof(_List), None, n, (c_int32 * max(n, 1))(*[1] * n),
                         (c_void_p * max(n, 1))(*[ctypes.addressof(b) for b in buffers[:n]])),
                   _List(ctypes.sizeof(_List), None, 0, None, None), attrs[0], None)
    core = _core()
    ndim = (c_int32 * _MAX_OUTPUTS)()
    shape = (c_int64 * (_MAX_OUTPUTS * _MAX_NDIM))()
    dtype = (DLDataType * _MAX_OUTPUTS)()
    rc = core.tj_xla_bind(ctypes.byref(frame), _device(operands), ndim, shape, dtype)
    if rc:
        raise exception_class(rc)(core.tj_last_error().decode("utf-8", "replace"))
    count = _allocated(kernel)
    return [jax.ShapeDtypeStruct(tuple(shape[o * _MAX_NDIM:o * _MAX_NDIM + ndim[o]]),
                                 _NAMES[(dtype[o].code, dtype[o].bits)]) for o in range(count)]


def _device(operands: list) -> DLDevice:
    """Where the call will run: the device of its concrete arrays, else (all traced) the
    backend JAX places programs on."""
    platform, index = jax.default_backend(), 0
    for array in operands:
        if not isinstance(array, jax.core.Tracer):
            device = next(iter(array.devices()))
            platform, index = device.platform, device.id
            break
    device_type = {"cpu": abi.kDLCPU, "gpu": abi.kDLCUDA, "cuda": abi.kDLCUDA,
                   "rocm": abi.kDLROCM}.get(platform, abi.kDLExtDev)
    return DLDevice(device_type, index if device_type != abi.kDLCPU else 0)


def _xla_type(array) -> int:
    return _XLA_TYPES.get(_dtype_name(array), 0)


def _dtype_name(array) -> str:
    """The name of an array's element type, one NumPy cannot describe included (a key
    array's ``key<fry>``)."""
    try:
        return numpy.dtype(array.dtype).name
    except TypeError:
        return str(array.dtype)


def _attributes(kernel, described: _Described, for_core: bool):
    """The call's attributes: as ``ffi_call`` keywords, or (``for_core``) as the core reads
    them (``tj_xla_attrs``, sorted by name as XLA sorts them)."""
    key = kernel.jax_target
    named = {"tilejit": key, "tilejit_inputs": "".join(described.layout), **described.attrs}
    if not for_core:
        return named
    names = sorted(named)
    spans, types, items, keep = [], [], [], []
    for name in names:
        value = named[name]
        span = _Span(name.encode(), len(name))
        spans.append(ctypes.pointer(span))
        keep.append(span)
        if isinstance(value, str):
            data = value.encode()
            text = _Span(data, len(data))
            keep.append(text)
            types.append(4)
            items.append(ctypes.addressof(text))
        else:
            array = numpy.asarray(value)
            scalar = _Scalar(_XLA_TYPES[array.dtype.name], array.ctypes.data)
            keep += [array, scalar]
            types.append(3)
            items.append(ctypes.addressof(scalar))
    n = len(names)
    attrs = _Attrs(ctypes.sizeof(_Attrs), None, n, (c_int32 * n)(*types),
                   (POINTER(_Span) * n)(*spans), (c_void_p * n)(*items))
    return attrs, keep


_operand_types: dict = {}  # type -> whether a call passes its objects as operands (arrays)


def _is_operand(cls: type) -> bool:
    found = _operand_types.get(cls)
    if found is None:
        found = _operand_types.setdefault(
            cls, issubclass(cls, (jax.Array, jax.core.Tracer, numpy.ndarray)))
    return found


def call(kernel, args: tuple):
    """``kernel(*args)`` with JAX arrays among ``args``: the XLA custom call (see the
    module), through a jitted function kept per kind of call: which arguments are arrays
    (its operands) and the values of the others, with their types (the call's attributes:
    another value is another program). JAX's own dispatch tells the operands' shapes and
    dtypes apart, and traces the function once for each (``_traced_call``, which checks
    the call): an eager call costs a look-up here, then JAX's dispatch of the compiled
    program."""
    calls = kernel.__dict__.get("_jax_calls")
    if calls is None:
        kernel.__dict__.setdefault("_jax_sized", _sized_positions(kernel))
        calls = kernel.__dict__.setdefault("_jax_calls", {})
    sized = kernel.__dict__["_jax_sized"]
    key = [kernel.__dict__.get("_jax_vmap_method")]
    for position, value in enumerate(args):
        cls = type(value)
        operand = _operand_types.get(cls)  # _is_operand, inline: this runs for every call
        if not (operand if operand is not None else _is_operand(cls)):
            key.append((cls, value))
        elif sized and position in sized and _static(value):
            value = numpy.asarray(value)
            key.append((cls, value.dtype.name, value.item()))
        else:
            key.append(cls)
    try:
        made = calls.get(key := tuple(key))
    except TypeError:  # an unhashable argument (refused as the core refuses it)
        made, key = None, None
    if made is None:
        made = _kind(kernel, args, sized)
        if key is not None:
            calls[key] = made
    function, operands = made
    return function(*args) if operands is None else function(*[args[i] for i in operands])


def _static(value) -> bool:
    """Whether an array given for a scalar that sets a size is part of the program: a
    concrete 0-d one (a traced one is refused when traced: XLA must know sizes)."""
    return not isinstance(value, jax.core.Tracer) and numpy.ndim(value) == 0


def _sized_positions(kernel) -> frozenset:
    """The positions of the scalar inputs that set a size: given as a concrete 0-d array,
    such a value is part of the program (as a Python number is), not an operand."""
    sizes = _sizes(kernel)
    return frozenset(position for position, param in enumerate(_inputs(kernel))
                     if isinstance(param, Scalar) and param._symbol in sizes)


def _kind(kernel, args: tuple, sized: frozenset):
    """``(the jitted call for calls like args, the positions of its operands (None: every
    argument))``: the other arguments are part of it, as they are."""
    operands, template = [], list(args)
    for position, value in enumerate(args):
        if _is_operand(type(value)) and not (position in sized and _static(value)):
            operands.append(position)
            template[position] = None  # the closure keeps no array alive

    def traced(*given):
        values = list(template)
        for position, operand in zip(operands, given):
            values[position] = operand
        return _traced_call(kernel, tuple(values))

    return jax.jit(traced), None if len(operands) == len(args) else tuple(operands)


def _traced_call(kernel, args: tuple):
    """The call as JAX traces it: described, checked by the core (or, with symbolic
    dimensions, as far as they allow: ``jax_symbolic``), and made the custom call."""
    name = register(kernel)
    described = _Described(kernel, args)
    run = _made(kernel, name, described, _bind(kernel, described))
    return run(*described.operands)


def _made(kernel, name: str, described: _Described, results: list):
    """The call for calls like ``described``, whose kernel makes ``results``."""
    allocated = len(results)
    aliases = {}
    for w, operand in enumerate(described.written):
        aliases[operand] = allocated + w
        written = described.operands[operand]
        results.append(jax.ShapeDtypeStruct(written.shape, written.dtype))
    ffi = jax.ffi.ffi_call(name, results, vmap_method=kernel.jax_vmap_method,
                           input_output_aliases=aliases or None)
    run = _undifferentiable(kernel, ffi, _attributes(kernel, described, for_core=False))
    order = kernel.artifact.signature.output_order

    def returned(*operands):
        out = run(*operands)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        values = [out[o] for o in order] + out[allocated:]
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    return returned


def _undifferentiable(kernel, ffi, attributes: dict):
    """The call as a function of its operands that JAX refuses to differentiate with a
    message saying how to give it a derivative (the custom call has none)."""

    @jax.custom_jvp
    def run(*operands):
        return ffi(*operands, **attributes)

    @run.defjvp
    def refuse(primals, tangents):
        raise TypeError(
            f"{kernel.name}: JAX cannot differentiate a tilejit kernel by itself. Give the "
            "function that calls it a derivative rule: jax.custom_vjp (a forward and a "
            "backward, each of which may call tilejit kernels) or jax.custom_jvp; "
            "see docs/jax.md")

    return run


class JaxAdapter(frameworks.Adapter):
    name = "jax"

    def claim(self, cls: type):
        """Every call with a JAX array or tracer is JAX's: an XLA custom call."""
        return ("always",)

    def claims(self, obj, failed: int) -> int:
        return frameworks.CLAIM_NOW

    def claimed_call(self, kernel, args: tuple, stream):
        if stream is not None:
            raise ValueError(f"{kernel.name}: stream= cannot be given with JAX arrays: the "
                             "call runs on the stream XLA gives it")
        return call(kernel, args)

    def publish(self, kernel) -> None:
        register(kernel)

    def allocator(self, dtype: str, device: tuple[int, int]):
        def refuse(shape):
            raise TypeError("JAX arrays are immutable: tilejit never allocates one to write")

        return refuse


ADAPTER = JaxAdapter()
