"""Lowering a Program to what the core and the compiler need.

One pass produces, consistently: the parameter names, the order of the
symbols, the core's signature description (``spec``), the arguments the
kernel function receives (``kernel_args``) and the C prototype tilejit
declares for it; `tilejit.builder.glue` checks the kernel's own definition against
that and writes the packed entry.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from dataclasses import field as _field
from typing import NamedTuple

from ..language import dtypes as _dtypes
from ..language.lang import (
    TENSORMAP_DATA_TYPES,
    Buffer,
    Expr,
    PointerParam,
    Scalar,
    Symbol,
    TensorMap,
    is_integer,
    lower_expr,
)
from ..language.program import Launch, Program, param_name
from ..native import abi
from .cdecl import classify, find_definition

TARGETS = {"cpu": abi.TJ_TARGET_CPU, "cuda": abi.TJ_TARGET_CUDA}
BUF_OPTIONAL, BUF_CONST, BUF_OUTPUT = abi.TJ_BUF_OPTIONAL, abi.TJ_BUF_CONST, abi.TJ_BUF_OUTPUT
BUF_WORKSPACE, BUF_ZERO = abi.TJ_BUF_WORKSPACE, abi.TJ_BUF_ZERO
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
    binds: int = -1              # an integer scalar: the symbol its value binds, else -1


class AbiSpec(NamedTuple):
    """One argument of the kernel function (``tj_kernel_set_abi``)."""

    source: int                  # abi.TJ_ABI_PARAM / _SYMBOL / _EXPR / _TENSORMAP
    index: int
    dtype: tuple[int, int, int]  # expressions: the integer type passed


class LaunchSpec(NamedTuple):
    """One CUDA kernel function's launch: its name, shape (expression ids), arguments and
    attributes (``tj_kernel_set_launch`` / ``tj_kernel_add_launch``)."""

    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_memory: int
    abi: tuple[AbiSpec, ...]
    cluster: tuple[int, int, int] | None  # expression ids
    flags: int                            # abi.TJ_LAUNCH_*


class TensorMapSpec(NamedTuple):
    """A tensor map (``tj_kernel_add_tensormap``); arrays of expression ids. An im2col
    map has ``im2col`` (lower corner, upper corner, channels per pixel, pixels per
    column) and an empty ``box``."""

    name: str
    param: int
    data_type: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int
    im2col: tuple | None = None  # (lower ids, upper ids, channels id, pixels id)


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
        if self.source == abi.TJ_ABI_TENSORMAP:
            return "const CUtensorMap"
        c_type = _dtypes.DTYPES[self.dtype].c_type
        if self.pointer:
            return f"{'const ' if self.const else ''}{c_type} *"
        return c_type

    @property
    def c_decl(self) -> str:
        grid_constant = "__grid_constant__ " if self.source == abi.TJ_ABI_TENSORMAP else ""
        return f"{grid_constant}{self.c_type}{'' if self.pointer else ' '}{self.name}"


class KernelFunction(NamedTuple):
    """One kernel function the program calls (CPU) or launches (CUDA)."""

    name: str
    kernel_args: tuple[KernelArg, ...]
    c_prototype: str


class CoreSpec(NamedTuple):
    """The lowered signature: everything ``tj_kernel_create`` .. ``tj_kernel_finalize`` take.
    Built here only (`lower`); read only by ``tilejit.native.library.CoreKernel``."""

    name: str
    target: int                              # abi.TJ_TARGET_*
    symbols: tuple[tuple[str, int, tuple], ...]  # (name, divisibility, dtype)
    exprs: tuple[tuple[tuple[int, ...], str], ...]  # (opcode pairs, text)
    params: tuple[ParamSpec, ...]
    abi: tuple[AbiSpec, ...] | None     # launch 0's; None: every parameter, then every symbol
    launches: tuple[LaunchSpec, ...] = ()   # CUDA only
    tensormaps: tuple[TensorMapSpec, ...] = ()


@dataclass(frozen=True)
class Signature:
    name: str
    target: str
    names: tuple[str, ...]        # parameter names, declaration order
    out_idx: tuple[int, ...]      # normalized, in the order outputs are returned
    symbols: tuple[Symbol, ...]   # in order of first appearance
    spec: CoreSpec                # what the core kernel is built from
    functions: tuple[KernelFunction, ...]  # the kernel functions, in launch order
    entry: str = ENTRY_SYMBOL     # what tj_kernel_load resolves: the glue's entry, or the
                                  # (first) CUDA kernel itself
    # The kernel's facts every part of tilejit reads (its call, its torch op, its JAX
    # call, its export), computed here once (__post_init__), as plain attributes: traced
    # code (Dynamo) reads them too.
    # The parameters a call passes (every one not in out_idx), in call order; their names.
    inputs: tuple[int, ...] = _field(init=False, repr=False, compare=False)
    input_names: tuple[str, ...] = _field(init=False, repr=False, compare=False)
    # For each output in out_idx (return) order, its place among the outputs in
    # declaration order (the order the core allocates and numbers them in).
    output_order: tuple[int, ...] = _field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        outputs = set(self.out_idx)
        inputs = tuple(i for i in range(len(self.names)) if i not in outputs)
        declared = sorted(self.out_idx)
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "input_names", tuple(self.names[i] for i in inputs))
        object.__setattr__(self, "output_order",
                           tuple(declared.index(i) for i in self.out_idx))

    @property
    def kernel_args(self) -> tuple[KernelArg, ...]:
        """What the (first) kernel function receives, in order."""
        return self.functions[0].kernel_args


    @property
    def c_prototype(self) -> str:
        """The prototype tilejit declares for each kernel function, one per line."""
        return "\n".join(f.c_prototype for f in self.functions)


def normalize_out_idx(out_idx, nparams: int, kernel: str) -> tuple[int, ...]:
    """``None``, an int (negative allowed) or a list of them -> tuple of indices."""
    if out_idx is None:
        return ()
    if is_integer(out_idx) or isinstance(out_idx, bool):  # an int, a NumPy integer (a bool:
        items = [out_idx]                                  # refused below as an entry)
    else:
        try:
            items = list(out_idx)
        except TypeError:
            raise TypeError(f"{kernel}: out_idx must be an int or a list of ints, got "
                            f"{type(out_idx).__name__} {out_idx!r}") from None
    result = []
    for item in items:
        if not is_integer(item):
            raise TypeError(f"{kernel}: out_idx entries must be ints, got {item!r}")
        item = operator.index(item)
        index = item + nparams if item < 0 else item
        if not 0 <= index < nparams:
            raise ValueError(f"{kernel}: out_idx {item} out of range for {nparams} parameters")
        if index in result:
            raise ValueError(f"{kernel}: out_idx names parameter {index} twice")
        result.append(index)
    return tuple(result)


def lower(program: Program, out_idx, target: str) -> Signature:
    """Checks the program against the kernel ABI and derives everything from it once:
    the parameter names, the outputs, the symbols in order, the core's spec and each
    kernel function's arguments and prototype."""
    kname = program.name
    if target not in TARGETS:
        raise ValueError(f"{kname}: unknown target {target!r}; expected 'cpu' or 'cuda'")
    params = program.params
    if len(params) + len(program.workspaces) > abi.TJ_MAX_PARAMS:
        raise ValueError(f"{kname}: {len(params) + len(program.workspaces)} parameters "
                         f"(workspaces included), at most {abi.TJ_MAX_PARAMS}")
    outs = normalize_out_idx(out_idx, len(params), kname)
    names = _param_names(program)
    # Workspaces follow the parameters in the core's list (the caller never sees them).
    everything = params + program.workspaces
    all_names = names + [w.name or f"workspace{j}" for j, w in enumerate(program.workspaces)]
    _check_outputs(kname, params, names, outs)
    _name_anonymous_symbols(params, names)
    symbols = _symbols(program, target, names, all_names)
    _check_bound(kname, params, names, outs, symbols)

    table = _ExprTable(symbols)
    spec_params = (_param_specs(params, names, outs, symbols, table)
                   + _workspace_specs(program, all_names[len(params):], symbols, table))
    if target != "cuda":
        if program.launches is not None:
            raise ValueError(f"{kname}: launches= is for CUDA programs")
        kargs = _kernel_args(kname, program.kernel_args, params, everything, all_names, symbols,
                             table.id, None)
        returns = "int32_t" if _returns_status(program, target, len(kargs)) else "void"
        abi_spec = None if program.kernel_args is None else _abi(kargs)
        prototype = f"{returns} {kname}({', '.join(a.c_decl for a in kargs) or 'void'})"
        spec = _core_spec(kname, TARGETS[target], symbols, table.exprs, spec_params, abi_spec)
        return Signature(kname, target, tuple(names), outs, tuple(symbols), spec,
                         (KernelFunction(kname, kargs, prototype),))

    returns = "int32_t" if _returns_status(program, target) else "void"
    maps: dict[TensorMap, int] = {}
    map_specs: list[TensorMapSpec] = []

    def tensormap_id(m: TensorMap, where: str) -> int:
        if m not in maps:
            maps[m] = len(map_specs)
            map_specs.append(_lower_tensormap(m, where, everything, all_names, symbols,
                                              table.id))
        return maps[m]

    functions, launch_specs = [], []
    for launch in program.kernel_launches():
        where = kname if program.launches is None else f"{kname}: {launch.name}"
        kargs = _kernel_args(where, launch.kernel_args, params, everything, all_names, symbols,
                             table.id, tensormap_id)
        prototype = (f'extern "C" __global__ {returns} {launch.name}('
                     f"{', '.join(a.c_decl for a in kargs) or 'void'})")
        functions.append(KernelFunction(launch.name, kargs, prototype))
        launch_specs.append(_lower_launch(where, launch, symbols, table.id, _abi(kargs)))
    first = program.kernel_launches()[0]
    abi_spec = None if first.kernel_args is None else launch_specs[0].abi
    spec = _core_spec(kname, TARGETS[target], symbols, table.exprs, spec_params, abi_spec,
                      tuple(launch_specs), tuple(map_specs))
    return Signature(kname, target, tuple(names), outs, tuple(symbols), spec,
                     tuple(functions), first.name)


def _param_names(program: Program) -> list[str]:
    """Each parameter's name (declared, or its position's), a C identifier."""
    names = []
    for i, p in enumerate(program.params):
        name = param_name(p, i)
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{program.name}: parameter {i} name must be a C identifier, "
                             f"got {name!r}")
        names.append(name)
    return names


def _check_outputs(kname: str, params, names: list[str], outs: tuple[int, ...]) -> None:
    """An output is a required T.Buffer."""
    for i in outs:
        if not isinstance(params[i], Buffer):
            raise TypeError(f"{kname}: out_idx names parameter {i} '{names[i]}', which is a "
                            f"{type(params[i]).__name__}, not a T.Buffer")
        if params[i].optional:
            raise ValueError(f"{kname}: output '{names[i]}' cannot be optional")


def _name_anonymous_symbols(params, names: list[str]) -> None:
    """Symbols T.Buffer.like made without a name take the parameter's (deterministic
    names: the same program gets the same prototype and cache key in any process); an
    integer scalar used in an expression binds a symbol named after it."""
    for i, p in enumerate(params):
        if isinstance(p, Buffer):
            for role, dims in (("shape", p.shape), ("stride", p.strides or ())):
                for d, e in enumerate(dims):
                    if isinstance(e, Symbol) and e.anonymous:
                        e.name = f"{names[i]}_{role}{d}"
        elif isinstance(p, Scalar) and p._symbol is not None:
            p._symbol.name = names[i]


def _symbols(program: Program, target: str, names: list[str],
             all_names: list[str]) -> dict[Symbol, int]:
    """The symbols in order of first appearance: param by param, shape before strides;
    then the scalars' that only launch shapes, kernel arguments and tensor maps use. Each
    scalar's is a parameter's, and no two share a name, nor with a parameter."""
    kname = program.name
    scalars = {p for p in program.params if isinstance(p, Scalar)}
    symbols: dict[Symbol, int] = {}
    for p in program.params:
        if isinstance(p, Buffer):
            for e in p.shape + (p.strides or ()):
                if isinstance(e, Expr):
                    for s in e.symbols():
                        symbols.setdefault(s, len(symbols))
    for s in _scalar_symbols(program, target):
        symbols.setdefault(s, len(symbols))
    for s in symbols:
        if s.scalar is not None and s.scalar not in scalars:
            raise ValueError(f"{kname}: an expression uses scalar '{s.name}', which is not "
                             "a parameter of this program")
    by_name: dict[str, Symbol] = {}
    for s in symbols:
        if by_name.setdefault(s.name, s) is not s:
            raise ValueError(f"{kname}: two different symbols are named '{s.name}'")
    clash = {n for n, s in by_name.items() if s.scalar is None} & set(all_names)
    if len(set(all_names)) != len(all_names) or clash:
        dup = sorted(clash or {n for n in all_names if all_names.count(n) > 1})
        raise ValueError(f"{kname}: duplicate parameter/symbol name(s) {', '.join(dup)}")
    return symbols


def _check_bound(kname: str, params, names: list[str], outs: tuple[int, ...],
                 symbols: dict[Symbol, int]) -> None:
    """A symbol reaches the kernel only if some required input carries it alone, or it
    is an integer scalar's."""
    bindable = {s for s in symbols if s.scalar is not None}
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


class _ExprTable:
    """The program's expressions as the core numbers them: each distinct expression (or
    constant) once, in order of first use."""

    def __init__(self, symbols: dict[Symbol, int]):
        self.symbols = symbols
        self.exprs: list[tuple[tuple[int, ...], str]] = []
        self._ids: dict[object, int] = {}

    def id(self, e) -> int:
        key = e if isinstance(e, Expr) else ("const", e)
        if key not in self._ids:
            self._ids[key] = len(self.exprs)
            self.exprs.append((lower_expr(e, self.symbols), str(e)))
        return self._ids[key]


def _param_specs(params, names: list[str], outs: tuple[int, ...], symbols: dict[Symbol, int],
                 table: _ExprTable) -> list[ParamSpec]:
    """The core's description of each parameter."""
    specs = []
    for i, p in enumerate(params):
        dt = _dtypes.DTYPES[p.dtype]
        if isinstance(p, Buffer):
            flags = ((BUF_OPTIONAL if p.optional else 0) | (BUF_CONST if p.const else 0)
                     | (BUF_OUTPUT if i in outs else 0))
            shape_ids = tuple(table.id(e) for e in p.shape)
            stride_ids = None if p.strides is None else tuple(table.id(e) for e in p.strides)
            specs.append(ParamSpec(abi.TJ_PARAM_BUFFER, names[i], dt.dlpack, shape_ids,
                                   stride_ids, p.align or 0, flags))
        elif isinstance(p, Scalar):
            specs.append(ParamSpec(abi.TJ_PARAM_SCALAR, names[i], dt.dlpack, (), None, 0, 0,
                                   symbols.get(p._symbol, -1)))
        elif isinstance(p, PointerParam):
            specs.append(ParamSpec(abi.TJ_PARAM_POINTER, names[i], dt.dlpack, (), None,
                                   p.align or 0, BUF_CONST if p.const else 0))
    return specs


def _workspace_specs(program: Program, names: list[str], symbols: dict[Symbol, int],
                     table: _ExprTable) -> list[ParamSpec]:
    """The core's description of each global workspace, after the parameters."""
    specs = []
    for w, name in zip(program.workspaces, names):
        where = f"{program.name}: workspace '{name}'"
        for d, e in enumerate(w.shape):
            _check_launch_value(where, f"shape[{d}]", e, 0, symbols)
        specs.append(ParamSpec(abi.TJ_PARAM_BUFFER, name, _dtypes.DTYPES[w.dtype].dlpack,
                               tuple(table.id(e) for e in w.shape), None, w.align or 0,
                               BUF_WORKSPACE | (BUF_ZERO if w.zero else 0)))
    return specs


def _scalar_symbols(program: Program, target: str) -> list[Symbol]:
    """The symbols of the integer scalars the program's expressions use, in order of
    first use: buffer shapes and strides, workspace shapes, then each kernel function's
    grid, block, shared memory, cluster and arguments (a scalar passed on its own is
    the parameter, not an expression), tensor maps included."""
    found: dict[Symbol, None] = {}

    def visit(value):
        if isinstance(value, Expr):
            for s in value.symbols():
                if s.scalar is not None:
                    found.setdefault(s)
        elif isinstance(value, TensorMap):
            for field in (value.dims, value.strides, value.box, value.element_strides,
                          *(value.im2col or ())):
                visit(field)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)

    for p in (*program.params, *program.workspaces):
        if isinstance(p, Buffer):
            visit(p.shape)
            visit(p.strides)
    launches = program.kernel_launches() if target == "cuda" else (
        Launch(program.name, (), (), 0, program.kernel_args),)
    for launch in launches:
        visit((launch.grid, launch.block, launch.shared_mem, launch.cluster))
        for item in launch.kernel_args or ():
            if not isinstance(item, Scalar):
                visit(item)
    return list(found)


def _returns_status(program: Program, target: str, arity: int | None = None) -> bool:
    """Whether the CPU kernel returns an int status: as its definition taking ``arity``
    parameters says (a definition returning something else is refused when compiled),
    else ``Program.returns``."""
    if target == "cpu" and program.source is not None:
        definition = find_definition(program.source, program.name, arity)
        if definition is not None:
            return classify(definition.returns) == ("int", 32)
    return program.returns_status


def _abi(kargs) -> tuple[AbiSpec, ...]:
    return tuple(AbiSpec(a.source, a.index, _dtypes.DTYPES[a.dtype].dlpack
                         if a.source == abi.TJ_ABI_EXPR else _INT64) for a in kargs)


_INT64 = _dtypes.DTYPES["int64"].dlpack


def _core_spec(kname, target_id, symbols, exprs, spec_params, abi_spec, launches=(),
               tensormaps=()) -> CoreSpec:
    return CoreSpec(kname, target_id,
                    tuple((s.name, s.divisibility, _dtypes.DTYPES[s.dtype].dlpack)
                          for s in symbols),
                    tuple(exprs), tuple(spec_params), abi_spec, launches, tensormaps)


def _kernel_args(kname: str, items, callers, params, names: list[str], symbols: dict, expr_id,
                 tensormap_id) -> tuple:
    """The arguments a kernel function receives, in its order (``kernel_args``, or every
    caller parameter then every symbol no scalar binds). ``params`` and ``names`` hold
    the workspaces too. ``tensormap_id`` registers a T.TensorMap (None: the target has
    none)."""
    if items is None:
        items = (*callers, *(s for s in symbols if s.scalar is None))
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
        if isinstance(item, TensorMap):
            if tensormap_id is None:
                raise ValueError(f"{kname}: kernel_args[{position}] is a T.TensorMap, which "
                                 "only CUDA kernels take")
            index = tensormap_id(item, f"{kname}: kernel_args[{position}]")
            name = item.name or f"{_map_target(item, params, names)}_desc"
            result.append(KernelArg(name, abi.TJ_ABI_TENSORMAP, index, "uint8", False, False,
                                    None))
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


def _check_launch_value(where: str, what: str, value, low: int, symbols: dict) -> None:
    """`value` (an int or expression) is a launch dimension: ints at least `low`, and
    expressions only over the symbols the parameters bind."""
    if isinstance(value, bool) or not isinstance(value, (int, Expr)):
        raise TypeError(f"{where}: {what} must be an int or a symbolic expression, got "
                        f"{type(value).__name__}")
    if isinstance(value, int) and value < low:
        raise ValueError(f"{where}: {what} = {value}, expected >= {low}")
    if isinstance(value, Expr):
        for s in value.symbols():
            if s in symbols:
                continue
            if any(known.name == s.name for known in symbols):
                raise ValueError(f"{where}: {what} = {value} uses a symbol '{s.name}' other "
                                 f"than the parameters' '{s.name}' (each T.symbol() call "
                                 "makes a new symbol)")
            raise ValueError(f"{where}: {what} = {value} uses symbol '{s.name}', which "
                             "no parameter's shape or strides carry")


def _lower_launch(where: str, launch: Launch, symbols: dict, expr_id, abi_spec) -> LaunchSpec:
    """A CUDA kernel function's grid, block (padded to 3 with 1), shared memory and
    cluster as expression ids, with its arguments and attribute flags."""
    padded = {}
    for what, dims, low in (("grid", launch.grid, 0), ("block", launch.block, 1),
                            ("cluster", launch.cluster, 1)):
        if dims is None:
            continue
        if not 1 <= len(dims) <= 3:
            raise ValueError(f"{where}: a CUDA program needs {what}= with 1 to 3 entries, "
                             f"got {dims!r}")
        for i, value in enumerate(dims):
            _check_launch_value(where, f"{what}[{i}]", value, low, symbols)
        padded[what] = tuple(expr_id(v) for v in dims) + (expr_id(1),) * (3 - len(dims))
    _check_launch_value(where, "shared_mem", launch.shared_mem, 0, symbols)
    flags = ((abi.TJ_LAUNCH_COOPERATIVE if launch.cooperative else 0)
             | (abi.TJ_LAUNCH_PDL if launch.pdl else 0))
    return LaunchSpec(launch.name, padded["grid"], padded["block"], expr_id(launch.shared_mem),
                      abi_spec, padded.get("cluster"), flags)


def _map_target(m: TensorMap, params, names) -> str:
    return m.buffer if isinstance(m.buffer, str) else next(
        (names[i] for i, p in enumerate(params) if p is m.buffer), "?")


def _lower_tensormap(m: TensorMap, where: str, params, names, symbols: dict,
                     expr_id) -> TensorMapSpec:
    """A T.TensorMap's fields as expression ids, its defaults filled from the buffer."""
    if isinstance(m.buffer, str):
        if m.buffer not in names:
            raise ValueError(f"{where}: T.TensorMap of {m.buffer!r}, which names no parameter "
                             f"(parameters: {', '.join(names)})")
        index = names.index(m.buffer)
    else:
        index = next((i for i, p in enumerate(params) if p is m.buffer), None)
        if index is None:
            raise ValueError(f"{where}: T.TensorMap of a buffer that is not in params")
    p = params[index]
    if not isinstance(p, (Buffer, PointerParam)):
        raise TypeError(f"{where}: T.TensorMap of '{names[index]}', which is a scalar")
    rank = len(m.box)
    itemsize = _dtypes.DTYPES[p.dtype].itemsize
    dims, strides = m.dims, m.strides
    if dims is None or strides is None:
        if not isinstance(p, Buffer) or len(p.shape) != rank:
            what = (f"has {len(p.shape)} dimensions" if isinstance(p, Buffer)
                    else "is a pointer")
            raise ValueError(f"{where}: T.TensorMap of '{names[index]}' needs dims= and "
                             f"strides= (its box has {rank} entries, the parameter {what})")
        shape = p.shape[::-1]
        if p.strides is not None:
            elem_strides = p.strides[::-1]
        else:
            elem_strides, step = [], 1
            for extent in shape:
                elem_strides.append(step)
                step = step * extent
        dims = shape if dims is None else dims
        strides = tuple(s * itemsize for s in elem_strides[1:]) if strides is None else strides
    data_type = m.data_type
    if data_type is None:
        if p.dtype not in TENSORMAP_DATA_TYPES:
            raise ValueError(f"{where}: T.TensorMap of '{names[index]}': the TMA unit has no "
                             f"{p.dtype} elements; give data_type=")
        data_type = TENSORMAP_DATA_TYPES[p.dtype]
    name = m.name or f"{names[index]}_desc"
    if m.im2col is None:
        _check_box(f"{where}: T.TensorMap '{name}'", m, data_type)
    else:
        _check_channels(f"{where}: T.TensorMap '{name}'", m, data_type)
    fields = {}
    groups = [("dims", dims, 1), ("strides", strides, 1),
              ("element_strides", m.element_strides, 1)]
    if m.im2col is None:
        groups.append(("box", m.box, 1))
    else:
        groups += [("lower_corner", m.im2col[0], -(1 << 31)),
                   ("upper_corner", m.im2col[1], -(1 << 31)),
                   ("channels_per_pixel", m.im2col[2], 1), ("pixels_per_column", m.im2col[3], 1)]
    for field, values, low in groups:
        for i, v in enumerate(values):
            _check_launch_value(where, f"T.TensorMap {field}[{i}]", v, low, symbols)
        fields[field] = tuple(expr_id(v) for v in values)
    im2col = None if m.im2col is None else (
        fields["lower_corner"], fields["upper_corner"], fields["channels_per_pixel"][0],
        fields["pixels_per_column"][0])
    return TensorMapSpec(name, index, data_type, fields["dims"], fields["strides"],
                         fields.get("box", ()), fields["element_strides"], m.interleave,
                         m.swizzle, m.l2_promotion, m.oob_fill, im2col)


# Bytes per element of each CUtensorMapDataType (uint8 .. tfloat32_ftz).
_TENSORMAP_ELEMENT_BYTES = _dtypes.TENSORMAP_ELEMENT_BYTES


def _check_box(where: str, m: TensorMap, data_type: int) -> None:
    """The driver's rules for the box's inner dimension (cuTensorMapEncodeTiled), checked
    when the program is compiled where the box is a constant: without interleave it spans
    a multiple of 16 bytes, and with a 32, 64 or 128-byte swizzle at most that many."""
    inner = m.box[0]
    if m.interleave != 0 or not isinstance(inner, int) or not 0 <= data_type < len(
            _TENSORMAP_ELEMENT_BYTES):
        return
    size = _TENSORMAP_ELEMENT_BYTES[data_type]
    span = inner * size
    if span % 16:
        raise ValueError(f"{where}: box[0] = {inner} elements of {size} bytes span {span} "
                         "bytes; the driver needs a multiple of 16 bytes")
    if m.swizzle in (1, 2, 3) and span > 16 << m.swizzle:
        raise ValueError(f"{where}: box[0] = {inner} elements of {size} bytes span {span} "
                         f"bytes, more than the {16 << m.swizzle}-byte swizzle "
                         f"(swizzle={m.swizzle}) allows; use a larger swizzle or a smaller "
                         "box")


def _check_channels(where: str, m: TensorMap, data_type: int) -> None:
    """An im2col map's constant channels per pixel, checked when the program is compiled
    as the driver checks it (cuTensorMapEncodeIm2col): at most 256, and with a 32, 64 or
    128-byte swizzle spanning at most that many bytes."""
    (channels,) = m.im2col[2]
    if not isinstance(channels, int) or not 0 <= data_type < len(_TENSORMAP_ELEMENT_BYTES):
        return
    if not 1 <= channels <= 256:
        raise ValueError(f"{where}: channels_per_pixel = {channels}, expected 1 to 256")
    size = _TENSORMAP_ELEMENT_BYTES[data_type]
    if m.interleave == 0 and m.swizzle in (1, 2, 3) and channels * size > 16 << m.swizzle:
        raise ValueError(f"{where}: channels_per_pixel = {channels} elements of {size} bytes "
                         f"span {channels * size} bytes, more than the {16 << m.swizzle}-byte "
                         f"swizzle (swizzle={m.swizzle}) allows")


def _buffer_symbols(p) -> set:
    return {s for e in p.shape + (p.strides or ()) if isinstance(e, Expr) for s in e.symbols()}
