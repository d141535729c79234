"""Layout views (docs/layout-views.md, after the CuTe DSL's framework page).

``from_dlpack`` makes a zero-copy view of any DLPack producer with a static layout that
``mark_layout_dynamic`` / ``mark_compact_shape_dynamic`` make (partly) dynamic;
``T.Buffer.like(view)`` (``tilejit.language.lang.buffer_like``) turns the marked layout into a
kernel parameter, and the view
itself can be passed to kernels without being imported again. (``make_ptr``, the raw
address for ``T.Pointer`` parameters, is ``tilejit.language.pointer``.) The layout algebra is the C core's
(``core/src/layout.c``); the view's storage is the Cython wrapper's ``TensorView``.

>>> x = torch.empty(16, 4, 8, 2).permute(2, 1, 0, 3)
>>> v = tilejit.from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=2)
>>> v.layout
'(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)'
>>> T.Buffer.like(v, name="A")
Buffer((A_shape0, 4, 16, 2), float32, strides=(2, A_stride1, A_stride2, 1), name='A', align=4)
"""

from __future__ import annotations

from ..language.lang import is_view
from . import cython_backend

__all__ = ["from_dlpack", "is_view"]


def _wrapper():
    """The compiled wrapper, or a RuntimeError saying views need it."""
    try:
        return cython_backend.wrapper_module()
    except Exception as exc:  # any build or load failure means: no views
        raise RuntimeError(
            f"tilejit.from_dlpack needs the compiled Cython wrapper, which is unavailable "
            f"({exc}); kernels still take framework tensors directly "
            "(execution_backend='ctypes')") from exc


def from_dlpack(tensor, assumed_align=None):
    """A zero-copy view of ``tensor`` (torch, NumPy, any ``__dlpack__`` producer) with a
    fully static layout, keeping ``tensor`` alive.

    The view reads the data pointer, shape and strides once. It keeps the source object
    alive, not the memory the source has later: after the source is resized in place
    (``torch.Tensor.resize_``, ``numpy.ndarray.resize(refcheck=False)``) or given another
    storage (``torch.Tensor.set_``, assigning ``.data``), the view still describes the
    old memory, which may be freed; make a new view.

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
