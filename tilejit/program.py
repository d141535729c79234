"""``tilejit.Program``: a kernel's source plus its signature and launch shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .lang import Param


@dataclass(frozen=True)
class Program:
    """What to compile: the entry symbol ``name`` defined in ``source``, its parameters, and
    for CUDA kernels the grid, block and dynamic shared memory (ints or expressions).

    >>> n = T.symbol("n")
    >>> prog = Program(name="vec_add", source=SRC,
    ...                params=[T.Buffer((n,), "float32", name="A"),
    ...                        T.Buffer((n,), "float32", name="B")])
    """

    name: str
    params: Sequence[Param]
    source: str
    grid: tuple = field(default=())
    block: tuple = field(default=())
    shared_mem: object = 0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Program name must be a C identifier, got {self.name!r}")
        if not isinstance(self.source, str):
            raise TypeError(f"{self.name}: source must be a str, got {type(self.source).__name__}")
        params = tuple(self.params)
        for i, p in enumerate(params):
            if not isinstance(p, Param):
                raise TypeError(f"{self.name}: parameter {i} must be T.Buffer, T.Scalar or "
                                f"T.Pointer, got {type(p).__name__}")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "grid", tuple(self.grid))
        object.__setattr__(self, "block", tuple(self.block))
