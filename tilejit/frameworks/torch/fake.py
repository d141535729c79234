"""The torch op's fake implementation: the symbols a call binds and the outputs' shapes,
from sizes and strides that may be torch's symbolic ones, so that ``torch.compile`` keeps
symbolic sizes symbolic (``dynamic=True`` compiles once for every size).

The binding rules are the core's (``core/src/validate.c``), followed here on values the
core cannot see (a tracer's tensors have no data); ``tests/test_torch_autograd.py``
checks that the two agree on random signatures of every kind.
"""

from __future__ import annotations

import torch

from ...language.lang import Buffer, Expr, Scalar, Symbol
from .results import op_result

_guard: list = []  # [torch's guard_or_false, or bool], imported on the first symbolic size


def _known(condition) -> bool:
    """A condition on sizes, taken as False when torch may not know it yet (a symbolic,
    data-dependent one). Plain sizes answer with a bool; torch's symbolic shapes (and
    with them sympy, most of a second) are imported only for a symbolic one."""
    if condition is True or condition is False:
        return condition
    if not _guard:
        try:
            from torch.fx.experimental.symbolic_shapes import guard_or_false
        except ImportError:  # an older torch: every size is known here
            guard_or_false = bool
        _guard.append(guard_or_false)
    return _guard[0](condition)


def torch_dtype(name: str):
    return getattr(torch, name)


def bind_symbols(kernel, args) -> dict:
    """The symbols a call with inputs ``args`` (the kernel's inputs, in order) binds, by
    the core's rules (core/src/validate.c, ``check_buffer``), from sizes and strides that
    may be torch's symbolic ones: parameter by parameter, each lone-symbol extent of the
    shape binds its symbol on first sight, then each stride; the stride of a size-1 or
    empty dimension, which is never stepped over, binds a still-unbound symbol only
    loosely, and any later firm binding replaces it. A firmly bound symbol met again
    must match, as must constant extents and strides, refused with the core's words.
    ``tests/test_torch_autograd.py`` checks that this and the core agree on random
    signatures of every kind."""
    sig = kernel.artifact.signature
    params = kernel.params
    inputs = sig.inputs
    firm: dict[Symbol, tuple] = {}  # symbol -> (value, label of the argument binding it)
    loose: dict[Symbol, object] = {}
    bound_by_scalars = {s for s in sig.symbols if s.scalar is not None}
    first = None  # (device, label) of the first tensor: every other must be on its device
    for position, (i, value) in enumerate(zip(inputs, args)):
        param = params[i]
        label = f"argument {position} '{sig.names[i]}'"
        if isinstance(param, Scalar) and param._symbol in bound_by_scalars:
            _bind_scalar(sig, label, firm, loose, param._symbol, value)
            continue
        if not isinstance(param, Buffer) or value is None:
            continue
        if first is None:
            first = (value.device, label)
        elif value.device != first[0]:
            raise ValueError(f"{sig.name}: {label}: expected device {_device(first[0])} (that "
                             f"of {first[1]}), got {_device(value.device)}")
        _check_tensor(sig, label, param, value)

        shape = tuple(value.shape)
        for d, (e, size) in enumerate(zip(param.shape, shape)):
            _bind_one(sig, label, firm, loose, ("shape", d, e, size))
        empty = any(_known(size == 0) for size in shape)
        if param.strides is None:
            if not empty:
                _check_compact(sig, label, shape, tuple(value.stride()))
            continue
        for d, (e, stride) in enumerate(zip(param.strides, value.stride())):
            if empty or _known(shape[d] == 1):  # never stepped over: binds only loosely
                if isinstance(e, Symbol) and e not in firm and e not in loose:
                    loose[e] = stride
            else:
                _bind_one(sig, label, firm, loose, ("stride", d, e, stride))
    return {**loose, **{symbol: value for symbol, (value, _) in firm.items()}}


def _bind_one(sig, label: str, firm: dict, loose: dict, dim: tuple) -> None:
    """One extent or stride ``dim`` = (what, d, declared expression, actual) of argument
    ``label``, as the core's ``check_direct`` takes it: a constant must match; a symbol is
    bound on first sight (not negative, divisible as declared), and must match after."""
    what, d, e, actual = dim
    if isinstance(e, Symbol):
        if _agrees(sig, label, firm, e, actual, lambda bound: f"{what}[{d}] == {e.name} "
                                                              f"(= {bound}, "):
            return
        if _known(actual < 0):
            raise ValueError(f"{sig.name}: {label}: {what}[{d}] = {actual} is negative, and "
                             f"negative strides are not declared (symbol {e.name})")
        if _known(actual % e.divisibility != 0):
            raise ValueError(f"{sig.name}: {label}: {what}[{d}] = {actual} binds {e.name}, "
                             f"which must be divisible by {e.divisibility}")
        firm[e] = (actual, label)
        loose.pop(e, None)
    elif isinstance(e, int) and _known(actual != e):
        raise ValueError(f"{sig.name}: {label}: expected {what}[{d}] == {e}, got {actual}")


def _agrees(sig, label: str, firm: dict, symbol: Symbol, actual, expected) -> bool:
    """Whether ``symbol`` is firmly bound already; then ``actual`` must be its value, or
    the call is refused with the core's words (``expected(bound)`` says what)."""
    if symbol not in firm:
        return False
    bound, by = firm[symbol]
    if _known(actual != bound):
        raise ValueError(f"{sig.name}: {label}: expected {expected(bound)}bound by {by}), got "
                         f"{actual}")
    return True


def _bind_scalar(sig, label: str, firm: dict, loose: dict, symbol: Symbol, value) -> None:
    """An integer scalar's value (an int or a SymInt) binding its symbol, as the core's
    ``bind_scalar`` takes it: it must agree with a value already bound, and be divisible
    as declared."""
    if _agrees(sig, label, firm, symbol, value, lambda bound: f"{symbol.name} == {bound} ("):
        return
    if _known(value % symbol.divisibility != 0):
        raise ValueError(f"{sig.name}: {label}: value {value} binds {symbol.name}, which must "
                         f"be divisible by {symbol.divisibility}")
    firm[symbol] = (value, label)
    loose.pop(symbol, None)


def _check_compact(sig, label: str, shape: tuple, strides: tuple) -> None:
    """A buffer without declared strides takes compact row-major tensors (size-1
    dimensions may have any stride), refused with the core's words."""
    want, expected = [], 1
    for size in reversed(shape):
        want.append(expected)
        expected *= size
    want.reverse()
    if any(_known(size != 1) and _known(stride != w)
           for size, stride, w in zip(shape, strides, want)):
        raise ValueError(f"{sig.name}: {label}: expected a compact row-major tensor (strides "
                         f"{_tuple(want)}), got strides {_tuple(strides)}; declare strides to "
                         "accept strided tensors")


def _device(device) -> str:
    """A device as the core names it (``cpu:0``, ``cuda:1``, ``meta:0``)."""
    return f"{device.type}:{device.index or 0}"


def _tuple(values) -> str:
    return str(tuple(int(v) for v in values))


def _check_tensor(sig, label: str, param: Buffer, value) -> None:
    """What the core would refuse first and a tracer can tell without data: the dtype and
    the number of dimensions, with the core's wording."""
    if value.dtype != torch_dtype(param.dtype):
        got = str(value.dtype).removeprefix("torch.")
        raise ValueError(f"{sig.name}: {label}: expected dtype {param.dtype}, got {got}")
    if value.dim() != len(param.shape):
        raise ValueError(f"{sig.name}: {label}: expected a {len(param.shape)}-d tensor, got "
                         f"{value.dim()}-d with shape {tuple(value.shape)}")


def fake(kernel, traced=None):
    """The fake implementation: outputs shaped from the symbols the inputs bind
    (``bind_symbols``), on the first tensor's device. ``traced()``, when given, runs first
    at every call: a trace meets every op here, whoever called it (the kernel,
    ``kernel.torch_op``, an exported program)."""
    sig = kernel.artifact.signature
    params = kernel.params
    default = torch.device("cuda" if sig.target == "cuda" else "cpu")

    def fake(*args):
        if traced is not None:
            traced()
        values = bind_symbols(kernel, args)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), default)
        outputs = []
        for i in sig.out_idx:
            shape = [e.evaluate(values) if isinstance(e, Expr) else e for e in params[i].shape]
            for d, (e, size) in enumerate(zip(params[i].shape, shape)):
                # The core's words, for a size torch's symbols may hold (checked, or
                # guarded on, as torch checks its own sizes).
                torch._check_value(size >= 0, lambda i=i, d=d, e=e, size=size: (
                    f"{sig.name}: output '{sig.names[i]}': shape[{d}] == {e} evaluates to "
                    f"{size}, which is negative"))
            outputs.append(torch.empty(shape, dtype=torch_dtype(params[i].dtype),
                                       device=device))
        return op_result(outputs)

    return fake
