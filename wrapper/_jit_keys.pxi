# Keys of jit(layout=...) calls: what a compiled kernel depends on for each tensor
# argument (its layout text, dtype and alignment), computed in C without making a
# view where the producer lends its DLTensor. Included by _tilejit.pyx after
# _layout.pxi, whose TensorView and layout helpers it uses.


cdef tuple _layout_key(const tj_layout *layout, DLDataType dtype, int64_t align,
                       bint implicit):
    """The layout text (implicit conversion's, or the marks as they are), the dtype and
    the alignment: everything T.Buffer.like reads."""
    cdef tj_layout lay = layout[0]
    if implicit:
        _check(tj_layout_mark_dynamic(&lay, TJ_LEADING_DIM_IMPLICIT, 0))
    return (_format_layout(&lay), dtype.code, dtype.bits, dtype.lanes, align)


cdef int _view_import(const tj_producer *self, void *obj, tj_arg *arg) noexcept:
    """The view producer: the view's own DLTensor as it is (imported once, by
    from_dlpack), and its source's producer for outputs and streams."""
    cdef TensorView view = <TensorView>obj
    tj_arg_from_dltensor(arg, &view._tensor, view._flags)
    arg.producer = view._sources[<intptr_t>self.context]
    return TJ_OK


for _mode in range(2):
    _view_producers[_mode].import_ = _view_import
    _view_producers[_mode].type = <void *>TensorView
    _view_producers[_mode].context = <void *><intptr_t>_mode


cdef tuple _lent_key(object tensor, const DLPackExchangeAPI *api, bint implicit):
    """The key of a tensor whose producer lends its DLTensor (exchange API): what
    ``from_dlpack(tensor)._jit_key(implicit)`` gives, without making the view."""
    cdef DLTensor t
    cdef tj_layout lay
    cdef int64_t align = 0
    if api.dltensor_from_py_object_no_sync(<void *>tensor, &t) != 0:
        _pending()
    if t.ndim < 0 or t.ndim > TJ_MAX_NDIM:
        raise ValueError(f"from_dlpack: a {t.ndim}-d tensor has too many dimensions "
                         f"(at most {TJ_MAX_NDIM})")
    _check(tj_layout_init(&lay, t.ndim, t.shape, t.strides))
    _check(tj_check_assumed_align(<uint64_t><uintptr_t>t.data + t.byte_offset, t.dtype, 0,
                                  &align))
    return _layout_key(&lay, t.dtype, align, implicit)


def _jit_arguments(object items, bint implicit):
    """Classifies the ``(name, value)`` arguments of a call to a ``jit(layout=...)``
    function. Returns ``(args, keys, parts)``: per tensor argument what the kernel gets
    (the tensor itself when its producer lends its DLTensor, else the view made to read
    it, so nothing is imported twice) and its key (``TensorView._jit_key``: the implicit
    layout for tensors, a view's own marks); ``parts`` is the hashable key of the call,
    constants included as ``(name, type, value)``."""
    cdef list args = [], keys = [], parts = []
    cdef const tj_producer *producer
    cdef const DLPackExchangeAPI *api
    for name, value in items:
        cls = type(value)
        if cls is TensorView:
            key = (<TensorView>value)._jit_key(False)
            args.append(value)
        else:
            # A tensor is what a kernel call takes as one: a type the core's registry
            # gives a producer (None, which the registry also serves, is a constant).
            producer = NULL if value is None else _producer_of(cls, True)
            if producer == NULL:
                parts.append((name, cls, value))
                continue
            api = producer.api
            if api != NULL and api.dltensor_from_py_object_no_sync != NULL:
                key = _lent_key(value, api, implicit)
                args.append(value)
            else:
                view = from_dlpack(value)
                key = view._jit_key(implicit)
                args.append(view)
        keys.append(key)
        parts.append((name, key))
    return args, keys, tuple(parts)
