"""Layout views and raw pointers (SPEC section 4, after the CuTe DSL's framework page).

``from_dlpack`` makes a zero-copy view of any DLPack producer with a static layout that
``mark_layout_dynamic`` / ``mark_compact_shape_dynamic`` make (partly) dynamic;
``T.Buffer.like(view)`` (``tilejit.lang.buffer_like``) turns the marked layout into a
kernel parameter, and the view
itself can be passed to kernels without being imported again. ``make_ptr`` wraps a raw
address for ``T.Pointer`` parameters. The layout algebra is the C core's
(``core/src/layout.c``); the view's storage is the Cython wrapper's ``TensorView``.

>>> x = torch.empty(16, 4, 8, 2).permute(2, 1, 0, 3)
>>> v = tilejit.from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=2)
>>> v.layout
'(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)'
>>> T.Buffer.like(v, name="A")
Buffer((A_shape0, 4, 16, 2), float32, strides=(2, A_stride1, A_stride2, 1), name='A', align=4)
"""

from __future__ import annotations

from . import dtypes as _dtypes

__all__ = ["Pointer", "from_dlpack", "is_view", "make_ptr"]

MEMSPACES = ("generic", "gmem")


def _wrapper():
    """The compiled wrapper, or a RuntimeError saying views need it."""
    from .backends.cython_backend import wrapper_module

    try:
        return wrapper_module()
    except Exception as exc:  # any build or load failure means: no views
        raise RuntimeError(
            f"tilejit.from_dlpack needs the compiled Cython wrapper, which is unavailable "
            f"({exc}); kernels still take framework tensors directly "
            "(execution_backend='ctypes')") from exc


def from_dlpack(tensor, assumed_align=None):
    """A zero-copy view of ``tensor`` (torch, NumPy, any ``__dlpack__`` producer) with a
    fully static layout, keeping ``tensor`` alive.

    ``assumed_align`` is the alignment in bytes the base address is promised to have
    (default: the element size); an address it does not divide raises ``ValueError``.
    Attributes: ``shape``, ``stride`` (ints), ``memspace`` (``"generic"`` host,
    ``"gmem"`` device), ``element_type`` (``"Float32"``...), ``data_ptr``, ``layout``,
    ``dtype``, ``assumed_align``, ``source``. Needs the compiled wrapper: without it,
    ``RuntimeError``.

    >>> y = tilejit.from_dlpack(torch.randn(30, 20))
    >>> y.shape, y.stride, y.memspace, y.element_type
    ((30, 20), (20, 1), 'generic', 'Float32')
    >>> print(y)
    Tensor<0x000000000875f580@generic o (30, 20):(20, 1)>
    >>> y.mark_layout_dynamic().layout
    '(?,?):(?,1)'
    """
    global _from_dlpack
    if _from_dlpack is None:
        _from_dlpack = _wrapper().from_dlpack
    return _from_dlpack(tensor, assumed_align)


_from_dlpack = None  # the wrapper's, once loaded


def is_view(obj) -> bool:
    """Whether ``obj`` is a view made by ``from_dlpack``."""
    return getattr(type(obj), "_tilejit_view", False) is True


_ELEMENT_TYPES = {"bool": "Boolean", "bfloat16": "BFloat16", "float8_e4m3fn": "Float8E4M3FN",
                  "float8_e5m2": "Float8E5M2"}


def element_type_name(dtype: str) -> str:
    """CuTe's name of a tilejit dtype (``"float16"`` -> ``"Float16"``)."""
    return _ELEMENT_TYPES.get(dtype) or dtype[0].upper() + dtype[1:]


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
        return 2 if self.memspace == "gmem" else 1

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
