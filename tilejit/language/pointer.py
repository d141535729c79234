"""``tilejit.make_ptr`` and ``tilejit.Pointer``: a raw address with an element type, memory
space and alignment, for ``T.Pointer`` parameters (the CuTe DSL page's "bypass DLPack").

A leaf module: the bindings check arguments against `Pointer`, so it depends on nothing
but the dtype table.

>>> p = tilejit.make_ptr("float16", x.data_ptr(), memspace="gmem", assumed_align=32)
>>> kernel(p, m, n)
"""

from __future__ import annotations

from ..native import abi
from . import dtypes as _dtypes

__all__ = ["MEMSPACES", "Pointer", "element_type_name", "make_ptr"]

MEMSPACES = ("generic", "gmem")

def element_type_name(dtype: str) -> str:
    """CuTe's name of a tilejit dtype (``"float16"`` -> ``"Float16"``)."""
    return _dtypes.DTYPES[dtype].element_type


class Pointer:
    """A raw address with an element type, memory space and known alignment, made by
    ``tilejit.make_ptr``; ``T.Pointer`` parameters take it as the address it holds."""

    __slots__ = ("address", "assumed_align", "dtype", "memspace")

    def __init__(self, dtype: str, address: int, memspace: str, assumed_align: int):
        self.dtype = dtype
        self.address = address
        self.memspace = memspace
        self.assumed_align = assumed_align

    @property
    def element_type(self) -> str:
        return element_type_name(self.dtype)

    @property
    def dlpack_dtype(self) -> tuple[int, int, int]:
        """(code, bits, lanes) of the element type, for the core's pointer checks."""
        return _dtypes.DTYPES[self.dtype].dlpack

    @property
    def dlpack_device_type(self) -> int:
        """The DLPack device type of the memory: kDLCPU for generic, kDLCUDA for gmem."""
        return abi.kDLCUDA if self.memspace == "gmem" else abi.kDLCPU

    def __int__(self) -> int:
        return self.address

    def __repr__(self) -> str:
        return (f"Pointer<0x{self.address:016x}@{self.memspace}, {self.element_type}, "
                f"align={self.assumed_align}>")


def make_ptr(dtype, address, memspace="generic", assumed_align=None) -> Pointer:
    """A ``tilejit.Pointer`` to ``address``: the reference's "bypass DLPack" path, for
    ``T.Pointer`` parameters. ``assumed_align`` (bytes, default the element size) must be
    a power of two dividing ``address``, else ``ValueError``.

    >>> p = tilejit.make_ptr("float16", x.data_ptr(), memspace="gmem", assumed_align=32)
    >>> kernel(p, m, n)
    """
    name = _dtypes.canonical(dtype)
    if isinstance(address, bool) or not hasattr(type(address), "__index__"):
        raise TypeError(f"make_ptr: address must be an int, got {type(address).__name__}")
    address = address.__index__()
    if not 0 <= address < (1 << 64):
        raise ValueError(f"make_ptr: address must be in [0, 2**64), got {address}")
    if memspace not in MEMSPACES:
        raise ValueError(f"make_ptr: memspace must be one of {', '.join(MEMSPACES)}, got "
                         f"{memspace!r}")
    if assumed_align is None:
        assumed_align = _dtypes.DTYPES[name].itemsize
    if (isinstance(assumed_align, bool) or not isinstance(assumed_align, int)
            or assumed_align < 1 or assumed_align & (assumed_align - 1)):
        raise ValueError(f"make_ptr: assumed_align must be a positive power of two, got "
                         f"{assumed_align!r}")
    if address % assumed_align:
        raise ValueError(f"make_ptr: address 0x{address:016x} is not divisible by "
                         f"assumed_align ({assumed_align} bytes)")
    return Pointer(name, address, memspace, assumed_align)
