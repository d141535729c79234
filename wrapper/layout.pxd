# The declarations of core/include/tilejit/layout.h that the wrapper uses, nothing more
# (tests/test_abi_mirrors.py compiles them against the header).
from libc.stdint cimport int32_t, int64_t, uint64_t

from core cimport TJ_MAX_NDIM

from dlpack cimport DLDataType


cdef extern from "tilejit/layout.h" nogil:
    enum: TJ_LAYOUT_FORMAT_SIZE

    ctypedef struct tj_layout:
        int32_t ndim
        int32_t has_stride_order
        int64_t shape[TJ_MAX_NDIM]
        int64_t stride[TJ_MAX_NDIM]
        int64_t shape_div[TJ_MAX_NDIM]
        int64_t stride_div[TJ_MAX_NDIM]
        int64_t tensor_stride[TJ_MAX_NDIM]
        int32_t stride_order[TJ_MAX_NDIM]

    int tj_layout_init(tj_layout *layout, int32_t ndim, const int64_t *shape,
                       const int64_t *strides)

    enum:
        TJ_LEADING_DIM_GIVEN
        TJ_LEADING_DIM_DEDUCE
        TJ_LEADING_DIM_IMPLICIT

    int tj_layout_mark_dynamic(tj_layout *layout, int32_t rule, int64_t leading_dim)
    int tj_layout_mark_compact_shape_dynamic(tj_layout *layout, int64_t mode,
                                             const int64_t *stride_order, int32_t order_len,
                                             int64_t divisibility)
    int tj_layout_format(const tj_layout *layout, char *buf, int32_t size)
    void tj_element_type_format(DLDataType dtype, char *buf, int32_t size)
    const char *tj_memspace_name(int32_t device_type)
    int tj_check_assumed_align(uint64_t address, DLDataType dtype, int64_t align,
                               int64_t *out_align)
