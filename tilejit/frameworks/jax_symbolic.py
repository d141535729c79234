"""Calls traced with symbolic dimensions (``jax.export`` with ``symbolic_shape``, shape
polymorphism): a program exported once that runs at every size.

When the call is traced, an operand's dimension may be an expression over symbols (``b``,
``2*b``) whose value only the running program knows. The core binds numbers, so the call
is checked in two steps:

- Here, in the core's order (inputs in declaration order, each buffer's extents, then the
  extents given by expressions), each kernel symbol is bound to what first sets it (a
  static size, a Python number, or a symbolic dimension), and every later extent is
  compared with what the signature expects. A relation that holds symbolically (``b``
  against ``b``, ``2*b`` against ``n * 2`` with ``n = b``) passes; one that can never hold
  (``b + 1`` against ``b``) is refused now, in the words the core uses; one that depends
  on the values (``a`` against ``b``, ``b`` against ``4``) is left to the handler, which
  checks it when the program runs (an XLA error carrying the direct call's message).
- The core then binds the call on stand-in sizes, made so that every relation of the first
  step holds: what it refuses (a dtype, a rank, a static size, a scalar) is refused with
  the direct call's exception and message.

The outputs' shapes are the signature's expressions evaluated over the symbolic binding
(JAX's symbolic dimensions take ``+ - * // %``, ``min`` and ``max``).
"""

from __future__ import annotations

import jax

from ..language.lang import BinaryExpr, Buffer, Scalar, Symbol

# The stand-in size of a symbolic dimension that sets a symbol, times the symbol's
# divisibility: large enough that expressions such as n - 1 stay positive, small enough
# that a buffer with several such dimensions still fits the core's 64-bit sizes.
_STAND_IN = 1024


def bind(kernel, described, bind_numbers) -> list:
    """The outputs' ``ShapeDtypeStruct``s (their shapes symbolic) of a call whose operands
    have symbolic dimensions, checked as far as they allow (see the module);
    ``bind_numbers(kernel, described, shapes)`` is the core's binding on numbers."""
    walk = _Walk(kernel, described)
    try:
        bound = bind_numbers(kernel, described, walk.stand_ins)
    except (TypeError, ValueError) as exc:  # a shape in the message, as the call gave it
        message = str(exc)
        for array, stand_ins in zip(described.operands, walk.stand_ins):
            message = message.replace(f"shape {shape_text(stand_ins)}",
                                      f"shape {shape_text(array.shape)}")
        raise type(exc)(message) from None
    sig = kernel.artifact.signature
    results = [kernel.params[i] for i in sorted(sig.out_idx)] + list(kernel.program.workspaces)
    return [jax.ShapeDtypeStruct(walk.shape_of(param), struct.dtype)
            for param, struct in zip(results, bound)]


def _symbol(expr):
    """The symbol a lone-symbol extent binds (a ``T.Scalar`` stands for its symbol)."""
    if isinstance(expr, Scalar):
        return expr.symbol
    return expr if isinstance(expr, Symbol) else None


def _is_number(value) -> bool:
    return type(value) is int


def _differ(expected, given) -> bool:
    """Whether two sizes, one at least symbolic, differ for every value of the symbols:
    their difference is a constant other than 0."""
    difference = expected - given
    return _is_number(difference) and difference != 0


class _Walk:
    """The call's operands against the kernel's signature, in the core's order: the
    symbols' values (numbers or symbolic dimensions), the stand-in sizes the core binds,
    and the refusals that hold for every value of the symbols."""

    def __init__(self, kernel, described):
        self.kernel = kernel
        self.values: dict = {}  # kernel symbol -> a number or a symbolic dimension
        self.numbers: dict = {}  # kernel symbol -> the number the core sees for it
        self.bound_by: dict = {}  # kernel symbol -> the input position that bound it
        inputs = [kernel.params[i] for i in kernel.artifact.signature.inputs]
        given = self._given_inputs(described, inputs)
        self.set_by_scalars = {param._symbol: value for param, value, _ in given
                               if isinstance(param, Scalar) and _is_number(value)}
        self.stand_ins, later = [], []  # one list of extents per operand
        for position, (param, value, array) in enumerate(given):
            if isinstance(param, Scalar) and _is_number(value) and param._symbol is not None:
                self._bind_symbol(param._symbol, value, position)
            if array is not None:
                shape = list(array.shape)
                if isinstance(param, Buffer) and len(shape) == len(param.shape):
                    self._strides(param, position, shape)
                    shape = self._extents(param, position, shape, later)
                self.stand_ins.append([d if _is_number(d) else _STAND_IN for d in shape])
        for position, param, extent, stand_ins, d in later:
            stand_ins[d] = self._expression(param, position, extent, d)

    @staticmethod
    def _given_inputs(described, inputs: list) -> list:
        """``(parameter, the number given, the operand)`` for each input: the number of a
        Python integer or of a concrete 0-d array (else None), the array the call passes
        as an operand (else None)."""
        given, operand = [], 0
        for position, letter in enumerate(described.layout):
            param = inputs[position] if position < len(inputs) else None
            value = array = None
            if letter in "bws":
                array = described.operands[operand]
                operand += 1
                if letter == "s" and not isinstance(array, jax.core.Tracer):
                    value = array.item()
            elif letter == "a":
                value = described.attrs[f"tj_{position}"].item()
            given.append((param, value if _is_number(value) else None, array))
        return given

    def _bind_symbol(self, symbol, value, position: int) -> None:
        """Binds ``symbol`` to ``value`` where nothing bound it before (a later value is
        the core's to compare, or, symbolic, the handler's)."""
        if symbol not in self.values:
            self.values[symbol], self.bound_by[symbol] = value, position
            self.numbers[symbol] = value if _is_number(value) else self.set_by_scalars.get(
                symbol, _STAND_IN * symbol.divisibility)

    def _strides(self, param, position: int, shape: list) -> None:
        """A buffer that declares strides: its symbolic dimensions are refused (its strides,
        which XLA makes compact, are products of them); with static ones, a stride that is
        a lone symbol binds it, as the core binds it."""
        if param.strides is None:
            return
        if not all(_is_number(d) for d in shape):
            raise TypeError(
                f"{self._label(position)}: the kernel declares this buffer's strides, which "
                f"a call with symbolic dimensions {shape_text(shape)} cannot be checked "
                "against when it is traced: export the program with static sizes for it")
        stride = 1
        for expr, extent in reversed(list(zip(param.strides, shape))):
            symbol = _symbol(expr)
            if symbol is not None and extent > 1:
                self._bind_symbol(symbol, stride, position)
            stride *= extent

    def _extents(self, param, position: int, shape: list, later: list) -> list:
        """``shape`` with each symbolic extent's stand-in; extents given by an expression
        other than a lone symbol are left in ``later`` (the core checks them last)."""
        stand_ins = list(shape)
        for d, (expr, given) in enumerate(zip(param.shape, shape)):
            symbol = _symbol(expr)
            if _is_number(expr):
                stand_ins[d] = expr if not _is_number(given) else given
            elif symbol is None:
                later.append((position, param, given, stand_ins, d))
            elif symbol not in self.values:
                self._bind_symbol(symbol, given, position)
                stand_ins[d] = self.numbers[symbol]
            elif not (_is_number(given) and _is_number(self.values[symbol])):
                if _differ(self.values[symbol], given):
                    bound = self.bound_by[symbol]
                    raise ValueError(
                        f"{self._label(position)}: expected shape[{d}] == {symbol.name} (= "
                        f"{self.values[symbol]}, bound by {self._label(bound, False)}), got "
                        f"{given}")
                stand_ins[d] = self.numbers[symbol]
        return stand_ins

    def _expression(self, param, position: int, given, d: int) -> int:
        """The stand-in of extent ``d`` given by an expression of the symbols: ``given``
        itself when both are numbers (the core checks them), else the expression's value
        over the stand-ins, once it is not refused for every value."""
        expr = param.shape[d]
        try:
            expected = self._evaluate(expr)
        except Exception:  # noqa: BLE001 - not computable symbolically: left to the handler
            expected = None
        if _is_number(expected) and _is_number(given):
            return given
        if expected is not None and _differ(expected, given):
            raise ValueError(f"{self._label(position)}: expected shape[{d}] == {expr} (= "
                             f"{expected}), got {given}")
        try:
            return expr.evaluate(self.numbers)
        except (KeyError, ArithmeticError):  # a symbol not bound: the core refuses the call
            return given if _is_number(given) else _STAND_IN

    def _evaluate(self, expr):
        """``expr`` over the symbols' values, numbers and symbolic dimensions."""
        if _is_number(expr):
            return expr
        symbol = _symbol(expr)
        if symbol is not None:
            return self.values[symbol]
        assert isinstance(expr, BinaryExpr)
        lhs, rhs = self._evaluate(expr.lhs), self._evaluate(expr.rhs)
        if _is_number(lhs) and _is_number(rhs):
            return BinaryExpr(expr.op, lhs, rhs).evaluate({})
        if expr.op == "ceildiv":
            return -(-lhs // rhs)
        if expr.op in ("min", "max"):
            return (jax.core.min_dim if expr.op == "min" else jax.core.max_dim)(lhs, rhs)
        return {"+": lambda: lhs + rhs, "-": lambda: lhs - rhs, "*": lambda: lhs * rhs,
                "//": lambda: lhs // rhs, "%": lambda: lhs % rhs}[expr.op]()

    def shape_of(self, param) -> tuple:
        """The shape of a result (``param``, an output or a workspace), from its
        signature's expressions over the symbols' values."""
        return tuple(self._evaluate(expr) for expr in param.shape)

    def _label(self, position: int, with_kernel: bool = True) -> str:
        name = self.kernel._core_kernel.input_names[position]
        label = f"argument {position} '{name}'"
        return f"{self.kernel.name}: {label}" if with_kernel else label


def shape_text(shape) -> str:
    """A shape as Python writes a tuple, symbolic dimensions by their expressions."""
    inner = ", ".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"

