"""``tilejit.Program``: a kernel's source (or prebuilt binary), its signature and launch shape."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .lang import Expr, Param, TensorMap, Workspace

LANGUAGES = ("c", "c++", "cuda")
_CXX_FLAGS = ("-x c++", "-xc++")


def param_name(param: Param, index: int):
    """The name parameter ``index`` goes by: its own, else ``arg<index>``."""
    return param.name if param.name is not None else f"arg{index}"


def _readonly_indices(owner: str, params: tuple, items) -> tuple[int, ...]:
    """``readonly_params`` as parameter indices; an item naming no parameter is refused."""
    names = [param_name(p, i) for i, p in enumerate(params)]
    found = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and -len(names) <= item < len(names):
            found.append(item % len(names))
        elif isinstance(item, str) and item in names:
            found.append(names.index(item))
        else:
            raise ValueError(f"{owner}: readonly_params names {item!r}, which is no parameter "
                             f"(parameters: {', '.join(names)})")
    return tuple(found)


def _check_kernel_args(owner: str, items) -> tuple:
    args = tuple(items)
    for i, a in enumerate(args):
        if not isinstance(a, (Param, Expr, TensorMap, str, int)) or isinstance(a, bool):
            raise TypeError(f"{owner}: kernel_args[{i}] must be a parameter, its name, a "
                            f"symbol, an expression or a T.TensorMap, got {type(a).__name__}")
    return args


@dataclass(frozen=True)
class Launch:
    """One CUDA kernel function of a program's source, launched at every call after the
    ones before it, on the same stream (``Program(launches=[...])``).

    >>> Launch("main_kernel", grid=(T.ceildiv(m, 64), 4), block=(256,), shared_mem=16384,
    ...        kernel_args=[T.TensorMap(A, box=(32, 64)), C, m], cluster=(2, 1, 1))

    ``grid``, ``block``, ``shared_mem`` and ``kernel_args`` mean what they mean on a
    single-kernel Program. Launch attributes (through ``cuLaunchKernelEx``; a launch
    without any goes through ``cuLaunchKernel``):

    - ``cluster``: thread block cluster dimensions (Hopper and newer);
    - ``cooperative``: a cooperative launch (grid-wide synchronisation);
    - ``pdl``: programmatic dependent launch: the kernel may start while the previous
      one on the stream finishes (it must wait with ``cudaGridDependencySynchronize``).
    """

    name: str
    grid: tuple
    block: tuple
    shared_mem: object = 0
    kernel_args: Sequence | None = None
    cluster: tuple | None = None
    cooperative: bool = False
    pdl: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Launch name must be a C identifier, got {self.name!r}")
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "grid", tuple(self.grid))
        object.__setattr__(self, "block", tuple(self.block))
        if self.cluster is not None:
            object.__setattr__(self, "cluster", tuple(self.cluster))
            if self.cooperative:
                raise ValueError(f"{self.name}: a cooperative launch cannot have cluster "
                                 "dimensions")
        if self.kernel_args is not None:
            object.__setattr__(self, "kernel_args",
                               _check_kernel_args(self.name, self.kernel_args))


@dataclass(frozen=True)
class Program:
    """What to compile: the entry function ``name`` defined in ``source``, its parameters,
    and for CUDA kernels the grid, block and dynamic shared memory (ints or expressions).

    >>> n = T.symbol("n")
    >>> prog = Program(name="vec_add", source=SRC,
    ...                params=[T.Buffer((n,), "float32", name="A"),
    ...                        T.Buffer((n,), "float32", name="B")])

    The kernel's definition is read from the source and checked for ABI compatibility
    with the parameters (docs/kernel-abi.md): qualifiers and spellings are free, kinds
    and widths are not. Further fields, all optional:

    - ``kernel_args``: the exact list the kernel function receives, in its order:
      parameters (the ``T.Buffer``/``T.Scalar``/``T.Pointer`` objects or their names),
      symbols and expressions over them; parameters left out are still validated and
      bind symbols. Default: every parameter in order, then every symbol.
    - ``language``: ``"c"`` or ``"c++"`` for CPU kernels (default C; C++ is also inferred
      from ``compile_flags`` such as ``-x c++`` or ``-std=c++17``). CUDA sources are CUDA C++.
    - ``binary``: a prebuilt kernel instead of ``source`` (a path or bytes): a cubin,
      fatbin or PTX for ``target="cuda"``, a shared library for ``target="cpu"``.
    - ``readonly_params``: names (or indices) of ``const=True`` parameters a code generator
      has proven read-only although its definition takes a non-const pointer (TileLang's
      ``tl.readonly_param_indices``); without this, such a definition is refused. Kept as
      indices; one that names no parameter is a ValueError.
    - ``returns``: for a prebuilt CPU library, ``"int32"`` when the function returns a
      status (non-zero fails the call); sources say it in their definition.
    - ``launches``: CUDA programs of several kernel functions, or with launch attributes:
      a list of `Launch`, run in order on one stream at every call (then ``name`` names
      the program, and ``grid``/``block``/``shared_mem``/``kernel_args`` stay unset).
    - ``workspaces``: `T.Workspace` scratch buffers allocated at every call and passed
      where ``kernel_args`` (or a ``T.TensorMap``) names them; callers never see them.
    """

    name: str
    params: Sequence[Param]
    source: str | None = None
    grid: tuple = field(default=())
    block: tuple = field(default=())
    shared_mem: object = 0
    kernel_args: Sequence | None = None
    language: str | None = None
    binary: bytes | str | os.PathLike | None = None
    readonly_params: Sequence = ()
    returns: str | None = None
    launches: Sequence[Launch] | None = None
    workspaces: Sequence[Workspace] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Program name must be a C identifier, got {self.name!r}")
        # Code generators pass their own str subclasses; the core wants a plain str.
        object.__setattr__(self, "name", str(self.name))
        if self.source is None and self.binary is None:
            raise TypeError(f"{self.name}: give source= (the kernel's code) or binary= (a "
                            "prebuilt kernel)")
        if self.source is not None and self.binary is not None:
            raise TypeError(f"{self.name}: give source= or binary=, not both")
        if self.source is not None and not isinstance(self.source, str):
            raise TypeError(f"{self.name}: source must be a str, got {type(self.source).__name__}")
        if self.binary is not None and not isinstance(self.binary, (bytes, bytearray, str,
                                                                    os.PathLike)):
            raise TypeError(f"{self.name}: binary must be bytes or a path, got "
                            f"{type(self.binary).__name__}")
        if self.language is not None and self.language not in LANGUAGES:
            raise ValueError(f"{self.name}: language must be one of {', '.join(LANGUAGES)}, "
                             f"got {self.language!r}")
        if self.returns not in (None, "void", "int", "int32"):
            raise ValueError(f"{self.name}: returns must be 'void' or 'int32', got "
                             f"{self.returns!r}")
        params = tuple(self.params)
        for i, p in enumerate(params):
            if not isinstance(p, Param):
                raise TypeError(f"{self.name}: parameter {i} must be T.Buffer, T.Scalar or "
                                f"T.Pointer, got {type(p).__name__}")
            if isinstance(p, Workspace):
                raise TypeError(f"{self.name}: parameter {i} is a T.Workspace, which callers "
                                "never pass; give it to workspaces=")
        object.__setattr__(self, "params", params)
        workspaces = tuple(self.workspaces)
        for i, w in enumerate(workspaces):
            if not isinstance(w, Workspace):
                raise TypeError(f"{self.name}: workspaces[{i}] must be a T.Workspace, got "
                                f"{type(w).__name__}")
        object.__setattr__(self, "workspaces", workspaces)
        object.__setattr__(self, "grid", tuple(self.grid))
        object.__setattr__(self, "block", tuple(self.block))
        object.__setattr__(self, "readonly_params",
                           _readonly_indices(self.name, params, self.readonly_params))
        if self.kernel_args is not None:
            object.__setattr__(self, "kernel_args",
                               _check_kernel_args(self.name, self.kernel_args))
        if self.launches is not None:
            launches = tuple(self.launches)
            if not launches or not all(isinstance(x, Launch) for x in launches):
                raise TypeError(f"{self.name}: launches must be a non-empty list of "
                                "tilejit.Launch")
            if self.grid or self.block or self.shared_mem or self.kernel_args is not None:
                raise ValueError(f"{self.name}: with launches=, give grid, block, shared_mem "
                                 "and kernel_args per Launch")
            names = [x.name for x in launches]
            if len(set(names)) != len(names):
                raise ValueError(f"{self.name}: launches name a kernel function twice")
            object.__setattr__(self, "launches", launches)

    def kernel_launches(self) -> tuple[Launch, ...]:
        """The kernel functions a CUDA program launches, in order: ``launches``, or the
        one function ``name`` with the program's grid, block, shared memory and
        kernel_args."""
        if self.launches is not None:
            return self.launches
        return (Launch(self.name, self.grid, self.block, self.shared_mem, self.kernel_args),)

    @property
    def returns_status(self) -> bool:
        """Whether ``returns`` declares an int status (sources say it in their definition)."""
        return self.returns in ("int", "int32")

    def binary_bytes(self) -> bytes:
        """The prebuilt kernel's bytes (``binary``: bytes, or a path read now)."""
        if isinstance(self.binary, (bytes, bytearray)):
            return bytes(self.binary)
        try:
            with open(self.binary, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise FileNotFoundError(f"{self.name}: cannot read binary= "
                                    f"{os.fspath(self.binary)!r}: {exc.strerror}") from None

    def language_for(self, target: str, flags: Sequence[str]) -> str:
        """The source language: "cuda" for CUDA, else the declared one, else C++ when the
        compile flags ask for it (``-x c++``, ``-std=c++17``, ``-std=gnu++20``), else C."""
        if target == "cuda":
            return "cuda"
        if self.language is not None:
            return self.language
        joined = " ".join(flags)
        if any(f in joined for f in _CXX_FLAGS) or any(
                f.startswith(("-std=c++", "-std=gnu++")) for f in flags):
            return "c++"
        return "c"
