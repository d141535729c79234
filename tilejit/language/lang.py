"""``tilejit.T``: the signature language (symbols, expressions, parameters).

>>> n = T.symbol("n", divisibility=16)
>>> T.Buffer((n, 4), "float32", name="A").shape
(n, 4)
>>> str(T.ceildiv(n + 1, 256))
'ceildiv(n + 1, 256)'
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Iterator
from typing import Union

from ..native import abi
from . import dtypes as _dtypes

IntLike = Union[int, "Expr"]

# The integer types a symbol can reach the kernel as.
SYMBOL_DTYPES = ("int64", "int32", "uint64", "uint32")

OP_CONST, OP_SYM, OP_ADD, OP_SUB = abi.TJ_OP_CONST, abi.TJ_OP_SYM, abi.TJ_OP_ADD, abi.TJ_OP_SUB
OP_MUL, OP_FLOORDIV, OP_MOD, OP_CEILDIV = (abi.TJ_OP_MUL, abi.TJ_OP_FLOORDIV, abi.TJ_OP_MOD,
                                           abi.TJ_OP_CEILDIV)

_BINARY = {
    "+": (OP_ADD, operator.add),
    "-": (OP_SUB, operator.sub),
    "*": (OP_MUL, operator.mul),
    "//": (OP_FLOORDIV, operator.floordiv),
    "%": (OP_MOD, operator.mod),
    "ceildiv": (OP_CEILDIV, lambda a, b: -(-a // b)),
    "min": (abi.TJ_OP_MIN, min),
    "max": (abi.TJ_OP_MAX, max),
}
_CALLS = ("ceildiv", "min", "max")  # written as calls: ceildiv(n, 4)


def is_integer(value: object) -> bool:
    """An int, or an integer of another library (``__index__``: a NumPy integer); not a
    bool, not a float."""
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def _wrap(value: object) -> Expr | int:
    if isinstance(value, Expr):
        if isinstance(value, Scalar):
            value.symbol  # noqa: B018 -- refuses float and bool scalars here, saying why
        return value
    if not is_integer(value):  # numpy integers are welcome; floats and bools are not
        raise TypeError(f"expected an int or a tilejit expression, got {type(value).__name__}")
    return value if isinstance(value, int) else operator.index(value)


def _binary(op: str, a: object, b: object) -> Expr | int:
    a, b = _wrap(a), _wrap(b)
    if op in ("//", "%", "ceildiv") and isinstance(b, int) and b == 0:
        # Whatever the dividend, a constant divisor of zero fails every call: said now.
        raise ZeroDivisionError(f"{op} by zero in a shape expression")
    if isinstance(a, int) and isinstance(b, int):
        return _BINARY[op][1](a, b)
    return BinaryExpr(op, a, b)


class Expr:
    """An integer expression over symbols; build with + - * // % and T.ceildiv."""

    __slots__ = ()

    def __add__(self, other):
        return _binary("+", self, other)

    def __radd__(self, other):
        return _binary("+", other, self)

    def __sub__(self, other):
        return _binary("-", self, other)

    def __rsub__(self, other):
        return _binary("-", other, self)

    def __mul__(self, other):
        return _binary("*", self, other)

    def __rmul__(self, other):
        return _binary("*", other, self)

    def __floordiv__(self, other):
        return _binary("//", self, other)

    def __rfloordiv__(self, other):
        return _binary("//", other, self)

    def __mod__(self, other):
        return _binary("%", self, other)

    def __rmod__(self, other):
        return _binary("%", other, self)

    def __repr__(self) -> str:
        return str(self)

    def symbols(self) -> Iterator[Symbol]:
        """Symbols in order of first appearance, left to right."""
        raise NotImplementedError

    def evaluate(self, values: dict[Symbol, int]) -> int:
        raise NotImplementedError


class Symbol(Expr):
    """A dynamic dimension, bound at call time from the first tensor carrying it."""

    __slots__ = ("anonymous", "divisibility", "dtype", "name", "scalar")

    def __init__(self, name: str, divisibility: int = 1, *, anonymous: bool = False,
                 dtype: str = "int64", scalar=None):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"symbol name must be a C identifier, got {name!r}")
        name = str(name)
        try:
            dtype = _dtypes.canonical(dtype)  # "int", torch.int32, numpy.int32 ...
        except (TypeError, ValueError, KeyError):
            pass
        if dtype not in SYMBOL_DTYPES:
            raise ValueError(f"symbol {name!r}: dtype must be one of {', '.join(SYMBOL_DTYPES)}, "
                             f"got {dtype!r}")
        if isinstance(divisibility, bool) or not isinstance(divisibility, int) or divisibility < 1:
            raise ValueError(f"symbol {name!r}: divisibility must be an int >= 1, "
                             f"got {divisibility!r}")
        self.name = name
        self.divisibility = divisibility
        self.dtype = dtype  # the integer type the kernel receives it as
        # Made by T.Buffer.like without a name: the kernel it ends up in names it after
        # the parameter and mode (`arg0_shape1`), so the name, the prototype and the
        # cache key do not depend on what else the process created first.
        self.anonymous = anonymous
        # The T.Scalar whose value binds it (a scalar used in an expression), or None.
        self.scalar = scalar

    def __str__(self) -> str:
        return self.name

    def symbols(self) -> Iterator[Symbol]:
        yield self

    def evaluate(self, values: dict[Symbol, int]) -> int:
        return values[self]


class BinaryExpr(Expr):
    __slots__ = ("lhs", "op", "rhs")

    def __init__(self, op: str, lhs: Expr | int, rhs: Expr | int):
        self.op, self.lhs, self.rhs = op, lhs, rhs

    def __str__(self) -> str:
        def part(x):
            return f"({x})" if isinstance(x, BinaryExpr) and x.op not in _CALLS else str(x)
        if self.op in _CALLS:
            return f"{self.op}({self.lhs}, {self.rhs})"
        return f"{part(self.lhs)} {self.op} {part(self.rhs)}"

    def symbols(self) -> Iterator[Symbol]:
        for side in (self.lhs, self.rhs):
            if isinstance(side, Expr):
                yield from side.symbols()

    def evaluate(self, values: dict[Symbol, int]) -> int:
        def value(x):
            return x.evaluate(values) if isinstance(x, Expr) else x
        return _BINARY[self.op][1](value(self.lhs), value(self.rhs))


def lower_expr(expr: Expr | int, symbol_ids: dict[Symbol, int]) -> tuple[int, ...]:
    """The core's RPN program for ``expr``: flat (op, operand) pairs."""
    if isinstance(expr, int):
        return (OP_CONST, expr)
    if isinstance(expr, Scalar):
        expr = expr.symbol
    if isinstance(expr, Symbol):
        return (OP_SYM, symbol_ids[expr])
    return (lower_expr(expr.lhs, symbol_ids) + lower_expr(expr.rhs, symbol_ids)
            + (_BINARY[expr.op][0], 0))


def symbol(name: str, divisibility: int = 1, dtype: str = "int64") -> Symbol:
    """A dynamic integer. ``T.symbol("n", divisibility=16)`` accepts only multiples of 16;
    ``dtype`` (int64, int32, uint64, uint32) is the integer type the kernel receives it
    as: ``T.symbol("n", dtype="int32")`` reaches an ``int n`` parameter, and a bound value
    that does not fit is a ValueError."""
    return Symbol(name, divisibility, dtype=dtype)


def ceildiv(a: IntLike, b: IntLike) -> Expr | int:
    """``ceil(a / b)`` for positive b, as an expression. ``T.ceildiv(n, 256)``."""
    return _binary("ceildiv", a, b)


def min_(a: IntLike, b: IntLike) -> Expr | int:
    """The smaller of two values, as an expression: ``T.min(n, 1024)``."""
    return _binary("min", a, b)


def max_(a: IntLike, b: IntLike) -> Expr | int:
    """The larger of two values, as an expression: ``T.max(n, 1)``."""
    return _binary("max", a, b)


class Param:
    """Base of kernel parameters."""

    __slots__ = ("name",)
    kind = 0  # tj_param_kind; set by each parameter class


def shape_text(shape) -> str:
    """A shape as a Python tuple reads: ``(n, 4)``, ``(n,)``."""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Buffer(Param):
    """A tensor parameter.

    >>> n = T.symbol("n")
    >>> T.Buffer((n, 16), "float32", strides=(T.symbol("s0"), 1), name="A")
    Buffer((n, 16), float32, strides=(s0, 1), name='A')
    """

    __slots__ = ("align", "const", "dtype", "optional", "shape", "strides")
    kind = abi.TJ_PARAM_BUFFER

    def __init__(self, shape, dtype, strides=None, name=None, align=None, optional=False,
                 const=False):
        if isinstance(shape, (int, Expr)):
            shape = (shape,)
        where = "T.Buffer" if name is None else f"buffer {name!r}"
        self.shape = tuple(_wrap(d) for d in shape)
        self.dtype = _dtypes.canonical(dtype)
        if strides is not None:
            strides = tuple(_wrap(s) for s in strides)
            if len(strides) != len(self.shape):
                raise ValueError(f"{where}: {len(strides)} strides for "
                                 f"{len(self.shape)} dimensions")
        # A negative constant no tensor can match (tilejit takes no negative strides).
        for what, values in (("shape", self.shape), ("strides", strides or ())):
            for d, value in enumerate(values):
                if isinstance(value, int) and value < 0:
                    raise ValueError(f"{where}: {what}[{d}] is {value}; a constant "
                                     f"{'dimension' if what == 'shape' else 'stride'} is >= 0")
        self.strides = strides
        if align is not None and (not isinstance(align, int) or align < 1
                                  or align & (align - 1)):
            raise ValueError(f"{where}: align must be a power of two, got {align!r}")
        self.name = name
        self.align = align
        self.optional = bool(optional)
        self.const = bool(const)

    @classmethod
    def like(cls, view, name=None, *, const=False, optional=False) -> Buffer:
        """The parameter a layout view describes (``tilejit.from_dlpack(x)``, marked or
        not): static modes become ints, dynamic modes symbols with their divisibility,
        the view's ``assumed_align`` the ``align``. See ``buffer_like``.

        >>> v = tilejit.from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=16)
        >>> T.Buffer.like(v, name="A")
        Buffer((A_shape0, 8), float32, strides=(8, 1), name='A', align=4)
        """
        return buffer_like(view, name, const=const, optional=optional)

    def __repr__(self) -> str:
        extra = "".join([
            f", strides={self.strides}" if self.strides is not None else "",
            f", name={self.name!r}" if self.name else "",
            f", align={self.align}" if self.align else "",
            ", optional=True" if self.optional else "",
            ", const=True" if self.const else "",
        ])
        return f"Buffer({shape_text(self.shape)}, {self.dtype}{extra})"


# The integer type a scalar's value is evaluated as when it binds a symbol.
_SCALAR_SYMBOL_DTYPES = {"int8": "int32", "int16": "int32", "int32": "int32", "int64": "int64",
                         "uint8": "uint32", "uint16": "uint32", "uint32": "uint32",
                         "uint64": "uint64"}


class Scalar(Param, Expr):
    """A scalar parameter (int, uint, float32/64 or bool), passed by value.

    An integer scalar is also an expression, usable wherever a symbol is: in shapes,
    strides, grid, block, shared memory, cluster, kernel arguments and tensor-map fields.
    Its value at each call binds it, with the checks of a symbol (a tensor extent that
    should equal it must).

    >>> n = T.Scalar("int32", name="max_len")
    >>> T.ceildiv(n, 64)
    ceildiv(max_len, 64)
    """

    __slots__ = ("_symbol", "dtype")
    kind = abi.TJ_PARAM_SCALAR

    def __init__(self, dtype, name=None):
        self.dtype = _dtypes.canonical(dtype)
        if self.dtype not in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                              "uint32", "uint64", "float32", "float64"):
            raise ValueError(f"scalar {name!r}: dtype {self.dtype} is not supported "
                             "(int, uint, float32, float64, bool)")
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise ValueError(f"scalar name must be a C identifier, got {name!r}")
        self.name = name
        self._symbol = None

    @property
    def is_integer(self) -> bool:
        """Whether the scalar is an integer one: its value can be used in shape, launch and
        tensor-map expressions (``symbol``)."""
        return self.dtype in _SCALAR_SYMBOL_DTYPES

    @property
    def symbol(self) -> Symbol:
        """The symbol this scalar's value binds when an expression uses it (integer
        scalars only); a kernel names it after the parameter."""
        if self._symbol is None:
            if self.dtype not in _SCALAR_SYMBOL_DTYPES:
                raise TypeError(f"scalar {self.name or '(unnamed)'!r} is {self.dtype}; only "
                                "integer scalars can be used in shape, launch and tensor-map "
                                "expressions")
            self._symbol = Symbol(self.name or "scalar", anonymous=self.name is None,
                                  dtype=_SCALAR_SYMBOL_DTYPES[self.dtype], scalar=self)
        return self._symbol

    def __str__(self) -> str:
        return self.symbol.name if self._symbol is not None else (self.name or "scalar")

    def __repr__(self) -> str:
        return f"Scalar({self.dtype}" + (f", name={self.name!r})" if self.name else ")")

    def symbols(self) -> Iterator[Symbol]:
        yield self.symbol

    def evaluate(self, values: dict[Symbol, int]) -> int:
        return values[self.symbol]


class Workspace(Buffer):
    """A global scratch buffer the kernel needs but the caller never sees: allocated at
    every call (like an ``out_idx`` output, by the framework of the first tensor
    argument, on its device and stream), passed to the kernel functions and tensor maps
    that name it, and released once the launch is enqueued. ``zero=True`` zero-fills it
    before the kernel runs (on the launch stream); otherwise its contents are undefined.
    Give them to ``Program(workspaces=[...])``.

    >>> n = T.symbol("n")
    >>> T.Workspace((T.ceildiv(n, 256), 4), "float32", name="partial")
    Workspace((ceildiv(n, 256), 4), float32, name='partial')
    """

    __slots__ = ("zero",)

    def __init__(self, shape, dtype, name=None, align=None, zero=False):
        super().__init__(shape, dtype, name=name, align=align)
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise ValueError(f"workspace name must be a C identifier, got {name!r}")
        self.zero = bool(zero)

    def __repr__(self) -> str:
        extra = "".join([f", name={self.name!r}" if self.name else "",
                         f", align={self.align}" if self.align else "",
                         ", zero=True" if self.zero else ""])
        return f"Workspace({shape_text(self.shape)}, {self.dtype}{extra})"


class PointerParam(Param):
    """A raw pointer parameter, spelled ``T.Pointer``: accepts a tensor (its data pointer),
    a ``tilejit.Pointer`` (``tilejit.make_ptr``), an int address or None.

    ``const=True`` promises the kernel only reads through it (a ``const`` pointer in the
    prototype); only then are read-only tensors accepted.
    """

    __slots__ = ("align", "const", "dtype")
    kind = abi.TJ_PARAM_POINTER

    def __init__(self, dtype, align=None, name=None, const=False):
        self.const = bool(const)
        self.dtype = _dtypes.canonical(dtype)
        if align is not None and (not isinstance(align, int) or align < 1
                                  or align & (align - 1)):
            raise ValueError(f"pointer {name!r}: align must be a power of two, got {align!r}")
        self.align = align
        self.name = name

    def __repr__(self) -> str:
        return f"Pointer({self.dtype}" + (f", name={self.name!r})" if self.name else ")")


# CUtensorMapDataType per element type the TMA unit takes (dtypes.DType.tma).
TENSORMAP_DATA_TYPES = {d.name: d.tma for d in _dtypes.DTYPES.values() if d.tma >= 0}


class TensorMap:
    """A TMA descriptor (``CUtensorMap``) of a buffer, encoded by tilejit at every call
    with the driver's ``cuTensorMapEncodeTiled`` from the bound tensor's address; the
    kernel receives it by value (``__grid_constant__ const CUtensorMap A_desc``). Name it
    in ``kernel_args`` where the kernel takes it. CUDA only.

    Every field is an int or an expression over the symbols, in the driver's order:
    innermost dimension first.

    >>> m, k = T.symbol("m"), 256
    >>> A = T.Buffer((m, k), "float16", name="A")
    >>> T.TensorMap(A, box=(32, 64), swizzle=2)   # dims (256, m), strides (512,) bytes
    TensorMap(A_desc of A, box=(32, 64), swizzle=2)

    - ``dims``: the global dimensions (default: the buffer's shape, reversed);
    - ``strides``: the byte strides of dimensions 1.. (default: the buffer's strides, or
      compact row-major, times the element size);
    - ``element_strides`` (default all 1), ``interleave``, ``swizzle``, ``l2_promotion``,
      ``oob_fill``: as the driver numbers them; ``data_type``: a ``CUtensorMapDataType``
      (default: the buffer's dtype's).
    """

    __slots__ = ("box", "buffer", "data_type", "dims", "element_strides", "im2col",
                 "interleave", "l2_promotion", "name", "oob_fill", "strides", "swizzle")

    def __init__(self, buffer, box, *, dims=None, strides=None, element_strides=None,
                 data_type=None, interleave=0, swizzle=0, l2_promotion=0, oob_fill=0,
                 name=None):
        if not isinstance(buffer, (Buffer, PointerParam, str)):
            raise TypeError(f"T.TensorMap: buffer must be a T.Buffer, a T.Pointer or a "
                            f"parameter name, got {type(buffer).__name__}")
        self.buffer = buffer
        self.box = _dims("box", box)
        rank = len(self.box)
        if not 1 <= rank <= abi.TJ_MAX_TENSORMAP_RANK:
            raise ValueError(f"T.TensorMap: rank {rank}, expected 1 to "
                             f"{abi.TJ_MAX_TENSORMAP_RANK} (one box entry per dimension)")
        self.dims = None if dims is None else _dims("dims", dims, rank)
        self.strides = None if strides is None else _dims("strides", strides, rank - 1)
        self.element_strides = (1,) * rank if element_strides is None else _dims(
            "element_strides", element_strides, rank)
        self.data_type = data_type
        for field, value in (("interleave", interleave), ("swizzle", swizzle),
                             ("l2_promotion", l2_promotion), ("oob_fill", oob_fill)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"T.TensorMap: {field} must be a non-negative int, got "
                                f"{value!r}")
        self.interleave, self.swizzle = interleave, swizzle
        self.l2_promotion, self.oob_fill = l2_promotion, oob_fill
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise ValueError(f"T.TensorMap: name must be a C identifier, got {name!r}")
        self.name = name
        self.im2col = None

    @classmethod
    def im2col_map(cls, buffer, *, lower_corner, upper_corner, channels_per_pixel,
                   pixels_per_column, dims=None, strides=None, element_strides=None,
                   data_type=None, interleave=0, swizzle=0, l2_promotion=0, oob_fill=0,
                   name=None) -> TensorMap:
        """An im2col TMA descriptor (``cuTensorMapEncodeIm2col``) of an NWC, NHWC or
        NDHWC buffer (rank 3 to 5), for convolutions: ``lower_corner`` and
        ``upper_corner`` are the pixel box's corner offsets {D, H, W} (rank - 2 each,
        innermost last as the driver takes them, may be negative),
        ``channels_per_pixel`` (at most 256) and ``pixels_per_column`` (at most 1024) the
        box the TMA unit loads. The other fields are a tiled map's. Spelled
        ``T.TensorMap.im2col_map``; every field is an int or an expression.

        >>> X = T.Buffer((n, 16, 16, 64), "float16", name="X")
        >>> T.TensorMap.im2col_map(X, lower_corner=(-1, -1), upper_corner=(-1, -1),
        ...                        channels_per_pixel=64, pixels_per_column=64)
        """
        if dims is not None:
            rank = len(_dims("dims", dims))
        elif isinstance(buffer, Buffer):
            rank = len(buffer.shape)
        else:
            raise ValueError("T.TensorMap.im2col_map: give dims= (the buffer is not a "
                             "T.Buffer with a shape)")
        if not 3 <= rank <= 5:
            raise ValueError(f"T.TensorMap.im2col_map: rank {rank}, expected 3, 4 or 5 (NWC, "
                             "NHWC, NDHWC)")
        # The box is unused by an im2col map: one placeholder entry per dimension keeps
        # the rank where a tiled map keeps it.
        self = cls(buffer, (1,) * rank, dims=dims, strides=strides,
                   element_strides=element_strides, data_type=data_type,
                   interleave=interleave, swizzle=swizzle, l2_promotion=l2_promotion,
                   oob_fill=oob_fill, name=name)
        self.im2col = (_dims("lower_corner", lower_corner, rank - 2),
                       _dims("upper_corner", upper_corner, rank - 2),
                       _dims("channels_per_pixel", channels_per_pixel, 1),
                       _dims("pixels_per_column", pixels_per_column, 1))
        return self

    def __repr__(self) -> str:
        target = self.buffer if isinstance(self.buffer, str) else self.buffer.name
        name = self.name or f"{target}_desc"
        extra = "".join(f", {f}={getattr(self, f)}" for f in
                        ("interleave", "swizzle", "l2_promotion", "oob_fill") if getattr(self, f))
        if self.im2col is not None:
            lower, upper, (channels,), (pixels,) = self.im2col
            return (f"TensorMap({name} of {target}, im2col lower_corner={lower}, "
                    f"upper_corner={upper}, channels_per_pixel={channels}, "
                    f"pixels_per_column={pixels}{extra})")
        return f"TensorMap({name} of {target}, box={self.box}{extra})"


def _dims(field: str, values, rank: int | None = None) -> tuple:
    values = (values,) if isinstance(values, (int, Expr)) else tuple(values)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, Expr)):
            raise TypeError(f"T.TensorMap: {field} entries must be ints or expressions, got "
                            f"{type(v).__name__}")
    if rank is not None and len(values) != rank:
        raise ValueError(f"T.TensorMap: {len(values)} {field} entries, expected {rank}")
    return values


_prefixes = itertools.count()
_prefix_lock = threading.Lock()


def _fresh_prefix() -> str:
    with _prefix_lock:
        return f"view{next(_prefixes)}"


def is_view(obj) -> bool:
    """Whether ``obj`` is a layout view made by ``tilejit.from_dlpack`` (its type says so:
    the compiled wrapper's ``TensorView``)."""
    return getattr(type(obj), "_tilejit_view", False) is True


def buffer_like(view, name=None, *, const=False, optional=False, implicit=False):
    """``T.Buffer.like``: the parameter a marked view describes. Static modes become ints,
    dynamic ones fresh symbols ``<name>_shape<d>`` / ``<name>_stride<d>`` carrying their
    divisibility; ``align`` is the view's ``assumed_align``. Without ``name`` the symbols
    get a process-unique prefix (``view0_shape0``) until a kernel names them after its
    parameter (``arg0_shape0``). ``implicit`` uses the layout of
    implicit conversion (``tilejit.jit(layout="dynamic")``) instead of the view's marks.
    A ``T.Buffer`` given instead of a view is copied with the new name and flags.
    """
    if isinstance(view, Buffer):
        return Buffer(view.shape, view.dtype, strides=view.strides,
                      name=view.name if name is None else name, align=view.align,
                      optional=optional, const=const)
    if not is_view(view):
        raise TypeError(f"T.Buffer.like expects a view made by tilejit.from_dlpack (or a "
                        f"T.Buffer), got {type(view).__name__}")
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise ValueError(f"T.Buffer.like: name must be a C identifier, got {name!r}")
    dtype = view.dtype
    if dtype not in _dtypes.DTYPES:
        raise ValueError(f"T.Buffer.like: tilejit kernels do not take {dtype} tensors")
    prefix = name if name is not None else _fresh_prefix()
    shape, strides = [], []
    for d, (extent, extent_div, stride, stride_div) in enumerate(view._modes(implicit)):
        anonymous = name is None
        shape.append(Symbol(f"{prefix}_shape{d}", extent_div, anonymous=anonymous)
                     if extent_div else extent)
        strides.append(Symbol(f"{prefix}_stride{d}", stride_div, anonymous=anonymous)
                       if stride_div else stride)
    return Buffer(tuple(shape), dtype, strides=tuple(strides), name=name,
                  align=view.assumed_align, optional=optional, const=const)


class _T:
    """The namespace exported as ``tilejit.T``."""

    symbol = staticmethod(symbol)
    ceildiv = staticmethod(ceildiv)
    min = staticmethod(min_)
    max = staticmethod(max_)
    Buffer = Buffer
    Scalar = Scalar
    Workspace = Workspace
    Pointer = PointerParam
    TensorMap = TensorMap
    Symbol = Symbol
    Expr = Expr


T = _T()
