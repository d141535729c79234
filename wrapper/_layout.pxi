# Layout views (docs/layout-views.md): the storage behind tilejit.from_dlpack. Included by
# _tilejit.pyx, whose helpers (_check, _pending, _producer_of) it uses.
#
# A TensorView imports its tensor once and keeps it: the managed tensor (its deleter runs
# exactly once, when the view dies), a reference to the source object, and a DLTensor of
# its own whose shape and strides arrays live in the view. Kernels take that DLTensor as
# it is (the view producer, _jit_keys.pxi), so a view is never imported again. The
# layout marks live in a tj_layout, changed only through the core's algebra
# (core/src/layout.c).
cimport cython
from libc.stdint cimport uint32_t, uint64_t

from layout cimport *


cdef int64_t _layout_int(object value, str what) except? -1:
    """An int argument of the marking methods, as the core's int64."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    value = value.__index__()
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{what} {value} is out of range")
    return value


cdef str _format_layout(const tj_layout *layout):
    cdef char buf[TJ_LAYOUT_FORMAT_SIZE]
    _check(tj_layout_format(layout, buf, sizeof(buf)))
    return buf.decode()


@cython.final
cdef class TensorView:
    """A zero-copy view of a DLPack tensor with a layout that can be marked dynamic.

    Made by ``tilejit.from_dlpack(x)``; ``shape``/``stride`` are the tensor's own,
    ``layout`` the marked layout, ``str(view)`` CuTe's ``Tensor<0x...@generic o
    (30, 20):(20, 1)>``. Passed to a kernel, the view is used without importing the
    tensor again; it keeps ``source`` alive, not the memory ``source`` has after it is
    resized in place or given another storage (make a new view then).
    """
    cdef DLTensor _tensor
    cdef int64_t _shape[TJ_MAX_NDIM]
    cdef int64_t _strides[TJ_MAX_NDIM]
    cdef uint32_t _flags
    cdef tj_arg _owner
    cdef tj_layout _layout
    cdef int64_t _align
    cdef readonly object source  # the object the view was made from, kept alive
    # The producers of the source's type (dlpack backend, exchange API): a kernel given
    # the view allocates its outputs and finds its stream as for the source itself.
    cdef const tj_producer *_sources[2]

    # Lets code without the compiled wrapper (the ctypes backend) recognise views.
    _tilejit_view = True

    def __cinit__(self):
        tj_arg_init(&self._owner)

    def __init__(self):
        raise TypeError("TensorView cannot be created directly; use tilejit.from_dlpack(x)")

    def __dealloc__(self):
        tj_arg_release(&self._owner)

    cdef int _adopt(self, object source, object assumed_align) except -1:
        """Copies the imported tensor's description into the view's own arrays."""
        cdef const DLTensor *t = &self._owner.tensor
        cdef int64_t align = 0
        cdef int32_t d
        if t.ndim < 0 or t.ndim > TJ_MAX_NDIM:
            raise ValueError(f"from_dlpack: a {t.ndim}-d tensor has too many dimensions "
                             f"(at most {TJ_MAX_NDIM})")
        _check(tj_layout_init(&self._layout, t.ndim, t.shape, t.strides))
        self._tensor = t[0]
        for d in range(t.ndim):
            self._shape[d] = self._layout.shape[d]
            self._strides[d] = self._layout.tensor_stride[d]
        self._tensor.shape = self._shape
        self._tensor.strides = self._strides
        self._flags = self._owner.flags & TJ_ARG_READ_ONLY
        if assumed_align is not None:
            align = _layout_int(assumed_align, "assumed_align")
            if align < 1:
                raise ValueError(f"assumed_align must be a positive power of two, got {align}")
        _check(tj_check_assumed_align(<uint64_t><uintptr_t>t.data + t.byte_offset, t.dtype,
                                      align, &self._align))
        self.source = source
        return 0

    def mark_layout_dynamic(self, leading_dim=None):
        """Makes every shape mode dynamic, and every stride except the leading
        dimension's (1) and broadcast strides (0). ``leading_dim=None`` deduces it
        from the unique stride-1 mode. Returns the view.

        >>> tilejit.from_dlpack(torch.empty(8, 4)).mark_layout_dynamic().layout
        '(?,?):(?,1)'
        """
        if leading_dim is None:
            _check(tj_layout_mark_dynamic(&self._layout, TJ_LEADING_DIM_DEDUCE, 0))
        else:
            _check(tj_layout_mark_dynamic(&self._layout, TJ_LEADING_DIM_GIVEN,
                                          _layout_int(leading_dim, "leading_dim")))
        return self

    def mark_compact_shape_dynamic(self, mode, stride_order=None, divisibility=1):
        """Makes shape mode ``mode`` dynamic with ``divisibility`` and recomputes the
        strides as a compact layout in ``stride_order`` (``torch.Tensor.dim_order()``
        convention; deduced when None). Returns the view.

        >>> x = torch.empty(16, 4, 8, 2).permute(2, 1, 0, 3)
        >>> tilejit.from_dlpack(x).mark_compact_shape_dynamic(mode=0, divisibility=2).layout
        '(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)'
        """
        cdef int64_t order[TJ_MAX_NDIM]
        cdef int32_t n = 0
        cdef int64_t m = _layout_int(mode, "mode")
        cdef int64_t div = _layout_int(divisibility, "divisibility")
        if stride_order is None:
            _check(tj_layout_mark_compact_shape_dynamic(&self._layout, m, NULL, 0, div))
            return self
        items = tuple(stride_order)
        if len(items) > (1 << 30):
            raise ValueError("stride_order is too long")
        n = len(items)
        # The core reads the order only when its length equals ndim (<= TJ_MAX_NDIM);
        # longer ones are reported by length, so only the first entries are needed.
        for i, item in enumerate(items[:TJ_MAX_NDIM]):
            if isinstance(item, bool) or not hasattr(type(item), "__index__"):
                raise TypeError(f"stride_order entries must be ints, got "
                                f"{type(item).__name__}")
            item = item.__index__()
            # Out of int64 range is out of range anyway: the core reports the mode it lacks.
            order[i] = item if -(1 << 63) <= item < (1 << 63) else -1
        _check(tj_layout_mark_compact_shape_dynamic(&self._layout, m, order, n, div))
        return self

    @property
    def shape(self):
        """The tensor's extents (ints), whatever the marks."""
        return tuple([self._shape[d] for d in range(self._tensor.ndim)])

    @property
    def stride(self):
        """The tensor's strides in elements (ints), whatever the marks."""
        return tuple([self._strides[d] for d in range(self._tensor.ndim)])

    @property
    def ndim(self):
        return self._tensor.ndim

    @property
    def layout(self):
        """``"(30, 20):(20, 1)"`` while static, ``"(?,?):(?,1)"`` style once marked."""
        return _format_layout(&self._layout)

    @property
    def stride_order(self):
        """The stride order of the last compact marking (outermost mode first), or None."""
        if not self._layout.has_stride_order:
            return None
        return tuple([self._layout.stride_order[d] for d in range(self._layout.ndim)])

    @property
    def memspace(self):
        """``"generic"`` for host memory, ``"gmem"`` for device memory."""
        return tj_memspace_name(self._tensor.device.device_type).decode()

    @property
    def element_type(self):
        """CuTe's name of the element type: ``"Float32"``, ``"BFloat16"``, ``"Boolean"``..."""
        cdef char buf[64]
        tj_element_type_format(self._tensor.dtype, buf, sizeof(buf))
        return buf.decode()

    @property
    def dtype(self):
        """tilejit's name of the element type: ``"float32"``, ``"bfloat16"``, ``"bool"``..."""
        cdef char buf[64]
        tj_dtype_format(self._tensor.dtype, buf, sizeof(buf))
        return buf.decode()

    @property
    def device(self):
        """``(device_type, device_id)`` as DLPack numbers them (CPU is ``(1, 0)``)."""
        return (<int>self._tensor.device.device_type, self._tensor.device.device_id)

    @property
    def data_ptr(self):
        """Address of the first element (``data + byte_offset``)."""
        return <uintptr_t>self._tensor.data + self._tensor.byte_offset

    @property
    def assumed_align(self):
        """The alignment in bytes the base address is known to have."""
        return self._align

    @property
    def read_only(self):
        """Whether the producer marked the tensor read-only (DLPack READ_ONLY flag)."""
        return bool(self._flags & TJ_ARG_READ_ONLY)

    @property
    def _dltensor_address(self):
        """Address of the view's DLTensor, valid while the view lives (ctypes backend)."""
        return <uintptr_t>&self._tensor

    @property
    def _arg_flags(self):
        return self._flags

    def _modes(self, bint implicit=False):
        """Per mode ``(extent, extent_div, stride, stride_div)``, a div of 0 meaning
        static; ``implicit`` gives those of implicit conversion instead of the marks."""
        cdef tj_layout lay = self._layout
        if implicit:
            _check(tj_layout_mark_dynamic(&lay, TJ_LEADING_DIM_IMPLICIT, 0))
        return tuple([(lay.shape[d], lay.shape_div[d], lay.stride[d], lay.stride_div[d])
                      for d in range(lay.ndim)])

    def _jit_key(self, bint implicit):
        """What a parameter derived from this view depends on (see _jit_key_of)."""
        return _layout_key(&self._layout, self._tensor.dtype, self._align, implicit)

    def __str__(self):
        return f"Tensor<0x{self.data_ptr:016x}@{self.memspace} o {self.layout}>"

    def __repr__(self):
        return self.__str__()


def from_dlpack(object tensor, assumed_align=None):
    """A TensorView of ``tensor`` (any DLPack producer), zero-copy, with a static layout.

    Producers with the DLPack C exchange API (torch) are imported in C, the others
    through ``__dlpack__``. ``assumed_align`` (bytes, default the element size) must
    divide the base address. The view keeps ``tensor`` alive but not its later memory:
    resized in place or given another storage, the source may free the memory the view
    still describes (see tilejit.from_dlpack).
    """
    cdef TensorView view = TensorView.__new__(TensorView)
    cdef const tj_producer *producer = _producer_of(type(tensor), True)
    cdef int rc
    if producer == NULL or type(tensor) is TensorView:
        raise TypeError(f"from_dlpack: expected a tensor supporting DLPack (__dlpack__), got "
                        f"{type(tensor).__name__}")
    # The producer a call imports this type with, its lazy-view check included; owning,
    # since the view outlives this call.
    rc = tj_producer_import_owned(producer, <void *>tensor, &view._owner)
    if rc == TJ_EPYERR and PyErr_Occurred() != NULL:
        try:
            _pending()
        except Exception as exc:  # the producer's own error, labelled as a kernel's would be
            raise _hooks.producer_error("from_dlpack: cannot import the tensor through DLPack",
                                        TJ_PRODUCER_IMPORT, exc) from exc
    if rc != TJ_OK:
        raise _exception_class(rc)("from_dlpack: " + tj_last_error().decode("utf-8", "replace"))
    view._sources[0] = _producer_of(type(tensor), False)
    view._sources[1] = producer
    view._adopt(tensor, assumed_align)
    return view
