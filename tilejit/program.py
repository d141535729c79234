"""``tilejit.Program``: a kernel's source (or prebuilt binary), its signature and launch shape."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .lang import Expr, Param

LANGUAGES = ("c", "c++", "cuda")
_CXX_FLAGS = ("-x c++", "-xc++")


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
      ``tl.readonly_param_indices``); without this, such a definition is refused.
    - ``returns``: for a prebuilt CPU library, ``"int32"`` when the function returns a
      status (non-zero fails the call); sources say it in their definition.
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
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "grid", tuple(self.grid))
        object.__setattr__(self, "block", tuple(self.block))
        object.__setattr__(self, "readonly_params", tuple(self.readonly_params))
        if self.kernel_args is not None:
            args = tuple(self.kernel_args)
            for i, a in enumerate(args):
                if not isinstance(a, (Param, Expr, str, int)) or isinstance(a, bool):
                    raise TypeError(f"{self.name}: kernel_args[{i}] must be a parameter, its "
                                    f"name, a symbol or an expression, got {type(a).__name__}")
            object.__setattr__(self, "kernel_args", args)

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
