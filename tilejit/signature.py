"""Lowering a Program to what the core and the compiler need.

One pass produces, consistently: the parameter names, the order of the
symbols, the core's signature description (``spec``), the arguments the
kernel function receives (``kernel_args``) and the C prototype tilejit
declares for it; `tilejit.glue` checks the kernel's own definition against
that and writes the packed entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from . import abi
from . import dtypes as _dtypes
from .lang import Buffer, Expr, PointerParam, Scalar, Symbol, lower_expr
from .program import Program

TARGETS = {"cpu": abi.TJ_TARGET_CPU, "cuda": abi.TJ_TARGET_CUDA}
BUF_OPTIONAL, BUF_CONST, BUF_OUTPUT = abi.TJ_BUF_OPTIONAL, abi.TJ_BUF_CONST, abi.TJ_BUF_OUTPUT
ENTRY_SYMBOL = "tilejit_packed_entry"


class ParamSpec(NamedTuple):
    """One kernel parameter as the core is told it (``tj_kernel_set_*``)."""

    kind: int                    # abi.TJ_PARAM_BUFFER / _SCALAR / _POINTER
    name: str
    dtype: tuple[int, int, int]  # DLPack (code, bits, lanes)
    shape: tuple[int, ...]       # expression ids, one per dimension (buffers)
    strides: tuple[int, ...] | None  # expression ids, or None for compact row-major
    align: int                   # bytes; 0 = the element size
    flags: int                   # abi.TJ_BUF_* bits


class LaunchSpec(NamedTuple):
    """A CUDA kernel's launch shape, as expression ids."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_memory: int


class AbiSpec(NamedTuple):
    """One argument of the kernel function (``tj_kernel_set_abi``)."""

    source: int                  # abi.TJ_ABI_PARAM / _SYMBOL / _EXPR
    index: int
    dtype: tuple[int, int, int]  # expressions: the integer type passed


class KernelArg(NamedTuple):
    """One argument the kernel function receives, as tilejit declares it."""

    name: str
    source: int                  # abi.TJ_ABI_*
    index: int                   # parameter, symbol or expression id
    dtype: str                   # element type (pointers) or value type
    pointer: bool
    const: bool                  # a pointer declared const=True
    param: int | None            # the parameter index, for parameters

    @property
    def c_type(self) -> str:
        """``const float *`` for a pointer, ``int32_t`` for a value."""
        c_type = _dtypes.DTYPES[self.dtype].c_type
        if self.pointer:
            return f"{'const ' if self.const else ''}{c_type} *"
        return c_type

    @property
    def c_decl(self) -> str:
        return f"{self.c_type}{'' if self.pointer else ' '}{self.name}"


class CoreSpec(NamedTuple):
    """The lowered signature: everything ``tj_kernel_create`` .. ``tj_kernel_finalize`` take.
    Built here only (`lower`); read only by ``tilejit.backends.core.CoreKernel``."""

    name: str
    target: int                              # abi.TJ_TARGET_*
    symbols: tuple[tuple[str, int, tuple], ...]  # (name, divisibility, dtype)
    exprs: tuple[tuple[tuple[int, ...], str], ...]  # (opcode pairs, text)
    params: tuple[ParamSpec, ...]
    launch: LaunchSpec | None           # CUDA only
    abi: tuple[AbiSpec, ...] | None     # None: every parameter, then every symbol


@dataclass(frozen=True)
class Signature:
    name: str
    target: str
    names: tuple[str, ...]        # parameter names, declaration order
    out_idx: tuple[int, ...]      # normalized, in the order outputs are returned
    symbols: tuple[Symbol, ...]   # in order of first appearance
    spec: CoreSpec                # what the core kernel is built from
    c_prototype: str
    kernel_args: tuple[KernelArg, ...]  # what the kernel function receives, in order
    entry: str = ENTRY_SYMBOL     # what tj_kernel_load resolves: the glue's entry, or the
                                  # CUDA kernel itself


def normalize_out_idx(out_idx, nparams: int, kernel: str) -> tuple[int, ...]:
    """``None``, an int (negative allowed) or a list of them -> tuple of indices."""
    if out_idx is None:
        return ()
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    result = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"{kernel}: out_idx entries must be ints, got {item!r}")
        index = item + nparams if item < 0 else item
        if not 0 <= index < nparams:
            raise ValueError(f"{kernel}: out_idx {item} out of range for {nparams} parameters")
        if index in result:
            raise ValueError(f"{kernel}: out_idx names parameter {index} twice")
        result.append(index)
    return tuple(result)


def lower(program: Program, out_idx, target: str) -> Signature:
    """Checks the program against the kernel ABI and derives everything from it once."""
    kname = program.name
    if target not in TARGETS:
        raise ValueError(f"{kname}: unknown target {target!r}; expected 'cpu' or 'cuda'")
    params = program.params
    outs = normalize_out_idx(out_idx, len(params), kname)

    names = []
    for i, p in enumerate(params):
        name = p.name if p.name is not None else f"arg{i}"
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{kname}: parameter {i} name must be a C identifier, got {name!r}")
        names.append(name)
    for i in outs:
        if not isinstance(params[i], Buffer):
            raise TypeError(f"{kname}: out_idx names parameter {i} '{names[i]}', which is a "
                            f"{type(params[i]).__name__}, not a T.Buffer")
        if params[i].optional:
            raise ValueError(f"{kname}: output '{names[i]}' cannot be optional")

    # Symbols T.Buffer.like made without a name take the parameter's: deterministic
    # names, so the same program gets the same prototype and cache key in any process.
    for i, p in enumerate(params):
        if isinstance(p, Buffer):
            for role, dims in (("shape", p.shape), ("stride", p.strides or ())):
                for d, e in enumerate(dims):
                    if isinstance(e, Symbol) and e.anonymous:
                        e.name = f"{names[i]}_{role}{d}"

    # Symbols in order of first appearance: param by param, shape before strides.
    symbols: dict[Symbol, int] = {}
    for p in params:
        if isinstance(p, Buffer):
            for e in p.shape + (p.strides or ()):
                if isinstance(e, Expr):
                    for s in e.symbols():
                        symbols.setdefault(s, len(symbols))
    by_name: dict[str, Symbol] = {}
    for s in symbols:
        if by_name.setdefault(s.name, s) is not s:
            raise ValueError(f"{kname}: two different symbols are named '{s.name}'")
    clash = set(by_name) & set(names)
    if len(set(names)) != len(names) or clash:
        dup = sorted(clash or {n for n in names if names.count(n) > 1})
        raise ValueError(f"{kname}: duplicate parameter/symbol name(s) {', '.join(dup)}")

    # A symbol reaches the kernel only if some required input carries it alone.
    bindable = set()
    for i, p in enumerate(params):
        if isinstance(p, Buffer) and i not in outs and not p.optional:
            bindable.update(e for e in p.shape + (p.strides or ()) if isinstance(e, Symbol))
    for s in symbols:
        if s not in bindable:
            where = [names[i] for i in outs if s in _buffer_symbols(params[i])]
            raise ValueError(
                f"{kname}: symbol '{s.name}' is not bound by any input"
                + (f" (used by output {', '.join(where)})" if where else "")
                + ": it must appear alone as a dimension or stride of a required input buffer")

    exprs: list[tuple[tuple[int, ...], str]] = []
    expr_ids: dict[object, int] = {}

    def expr_id(e) -> int:
        key = e if isinstance(e, Expr) else ("const", e)
        if key not in expr_ids:
            expr_ids[key] = len(exprs)
            exprs.append((lower_expr(e, symbols), str(e)))
        return expr_ids[key]

    spec_params = []
    for i, p in enumerate(params):
        dt = _dtypes.DTYPES[p.dtype]
        if isinstance(p, Buffer):
            flags = ((BUF_OPTIONAL if p.optional else 0) | (BUF_CONST if p.const else 0)
                     | (BUF_OUTPUT if i in outs else 0))
            shape_ids = tuple(expr_id(e) for e in p.shape)
            stride_ids = None if p.strides is None else tuple(expr_id(e) for e in p.strides)
            spec_params.append(ParamSpec(abi.TJ_PARAM_BUFFER, names[i], dt.dlpack, shape_ids,
                                         stride_ids, p.align or 0, flags))
        elif isinstance(p, Scalar):
            spec_params.append(ParamSpec(abi.TJ_PARAM_SCALAR, names[i], dt.dlpack, (), None, 0, 0))
        elif isinstance(p, PointerParam):
            spec_params.append(ParamSpec(abi.TJ_PARAM_POINTER, names[i], dt.dlpack, (), None,
                                         p.align or 0, BUF_CONST if p.const else 0))

    kargs = _kernel_args(program, names, symbols, expr_id)
    target_id = TARGETS[target]
    launch = _lower_launch(program, symbols, expr_id) if target == "cuda" else None
    abi_spec = None if program.kernel_args is None else tuple(
        AbiSpec(a.source, a.index, _dtypes.DTYPES[a.dtype].dlpack) for a in kargs)
    spec = CoreSpec(kname, target_id,
                    tuple((s.name, s.divisibility, _dtypes.DTYPES[s.dtype].dlpack)
                          for s in symbols),
                    tuple(exprs), tuple(spec_params), launch, abi_spec)
    returns = "int32_t" if program.returns_status else "void"
    prototype = f"{returns} {kname}({', '.join(a.c_decl for a in kargs) or 'void'})"
    if target == "cuda":
        return Signature(kname, target, tuple(names), outs, tuple(symbols), spec,
                         f'extern "C" __global__ {prototype}', kargs, kname)
    return Signature(kname, target, tuple(names), outs, tuple(symbols), spec, prototype, kargs)


def _kernel_args(program: Program, names: list[str], symbols: dict, expr_id) -> tuple:
    """The arguments the kernel function receives, in its order (``Program.kernel_args``,
    or every parameter then every symbol)."""
    kname, params = program.name, program.params
    items = program.kernel_args
    if items is None:
        items = (*params, *symbols)
    by_name = {n: i for i, n in enumerate(names)}
    result = []
    for position, item in enumerate(items):
        if isinstance(item, str):
            if item not in by_name:
                raise ValueError(f"{kname}: kernel_args[{position}] = {item!r} names no "
                                 f"parameter (parameters: {', '.join(names)})")
            item = params[by_name[item]]
        if isinstance(item, (Buffer, Scalar, PointerParam)):
            index = next((i for i, p in enumerate(params) if p is item), None)
            if index is None:
                raise ValueError(f"{kname}: kernel_args[{position}] is a parameter that is not "
                                 "in params")
            p = item
            pointer = not isinstance(p, Scalar)
            const = pointer and p.const
            result.append(KernelArg(names[index], abi.TJ_ABI_PARAM, index, p.dtype, pointer,
                                    const, index))
            continue
        if isinstance(item, Symbol) and item in symbols:
            result.append(KernelArg(item.name, abi.TJ_ABI_SYMBOL, symbols[item], item.dtype,
                                    False, False, None))
            continue
        if isinstance(item, Expr):
            for s in item.symbols():
                if s not in symbols:
                    raise ValueError(f"{kname}: kernel_args[{position}] = {item} uses symbol "
                                     f"'{s.name}', which no parameter's shape or strides carry")
        # An expression (or an int constant): as wide as its widest symbol.
        used = list(item.symbols()) if isinstance(item, Expr) else []
        dtype = "int32" if used and all(s.dtype == "int32" for s in used) else "int64"
        result.append(KernelArg(f"arg{position}", abi.TJ_ABI_EXPR, expr_id(item), dtype, False,
                                False, None))
    seen = set()
    for a in result:
        if a.param is not None:
            if a.param in seen:
                raise ValueError(f"{kname}: kernel_args passes parameter '{a.name}' twice")
            seen.add(a.param)
    if len(result) > abi.TJ_MAX_ABI_ARGS:
        raise ValueError(f"{kname}: {len(result)} kernel arguments, at most "
                         f"{abi.TJ_MAX_ABI_ARGS}")
    return tuple(result)


def _lower_launch(program: Program, symbols: dict, expr_id) -> LaunchSpec:
    """A CUDA program's grid, block (padded to 3 with 1) and shared memory as expression
    ids; every symbol they use must be one the parameters bind."""
    kname = program.name
    for what, dims in (("grid", program.grid), ("block", program.block)):
        if not 1 <= len(dims) <= 3:
            raise ValueError(f"{kname}: a CUDA program needs {what}= with 1 to 3 entries, got "
                             f"{dims!r}")
    entries = [(f"grid[{i}]", g, 0) for i, g in enumerate(program.grid)]
    entries += [(f"block[{i}]", b, 1) for i, b in enumerate(program.block)]
    entries.append(("shared_mem", program.shared_mem, 0))
    for what, value, low in entries:
        if isinstance(value, bool) or not isinstance(value, (int, Expr)):
            raise TypeError(f"{kname}: {what} must be an int or a symbolic expression, got "
                            f"{type(value).__name__}")
        if isinstance(value, int) and value < low:
            raise ValueError(f"{kname}: {what} = {value}, expected >= {low}")
        if isinstance(value, Expr):
            for s in value.symbols():
                if s in symbols:
                    continue
                if any(known.name == s.name for known in symbols):
                    raise ValueError(f"{kname}: {what} = {value} uses a symbol '{s.name}' other "
                                     f"than the parameters' '{s.name}' (each T.symbol() call "
                                     "makes a new symbol)")
                raise ValueError(f"{kname}: {what} = {value} uses symbol '{s.name}', which "
                                 "no parameter's shape or strides carry")
    ids = [expr_id(value) for _, value, _ in entries]
    grid = ids[:len(program.grid)] + [expr_id(1)] * (3 - len(program.grid))
    block = ids[len(program.grid):-1] + [expr_id(1)] * (3 - len(program.block))
    return LaunchSpec(tuple(grid), tuple(block), ids[-1])


def _buffer_symbols(p) -> set:
    return {s for e in p.shape + (p.strides or ()) if isinstance(e, Expr) for s in e.symbols()}
