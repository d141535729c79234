/*
 * tilejit layout algebra: the layouts of tensor views (docs/layout-views.md, after
 * the CuTe DSL framework-integration page). A view's layout starts fully
 * static, the tensor's own shape and strides; marking makes modes dynamic:
 *
 *   tj_layout_mark_dynamic()                 every shape mode dynamic, every
 *                                            stride dynamic except the
 *                                            leading dimension's (1) and
 *                                            broadcast strides (0);
 *   tj_layout_mark_compact_shape_dynamic()   one shape mode dynamic, with a
 *                                            divisibility; strides recomputed
 *                                            as a compact layout in a stride
 *                                            order, divisibility propagated
 *                                            into them, size-1 modes stride 0.
 *
 * Conventions are those of tilejit/core.h: fallible functions return a tj_status
 * and leave the message in thread-local storage (tj_last_error); a failing
 * mark leaves the layout exactly as it was. Every message of the reference
 * page is reproduced word for word (its "decude" typo fixed).
 *
 * Shapes and strides count elements, as DLPack's do. A tj_layout holds no
 * pointers and owns nothing: it is caller-owned (stack or embedded), copied by
 * assignment, and needs no destroy.
 */
#ifndef TILEJIT_LAYOUT_H_
#define TILEJIT_LAYOUT_H_

#include <stdint.h>

#include "dlpack/dlpack.h"
#include "tilejit/core.h"
#include "tilejit/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A buffer this large always holds tj_layout_format's text (16 modes of
 * "?{div=<int64>}" or int64 values, twice, with separators). */
#define TJ_LAYOUT_FORMAT_SIZE 1024

/* A layout: one shape and one stride entry per mode, each static (a value)
 * or dynamic (known only to be divisible by a divisibility >= 1).
 * Initialise with tj_layout_init; read the fields freely; change it only
 * through the tj_layout_mark_* functions, which keep these invariants. */
typedef struct tj_layout {
  int32_t ndim;                       /* 0 .. TJ_MAX_NDIM */
  int32_t has_stride_order;           /* 1 once a compact marking fixed stride_order */
  int64_t shape[TJ_MAX_NDIM];         /* the tensor's extents; a static mode's value */
  int64_t stride[TJ_MAX_NDIM];        /* a static stride's value (marking may rewrite it) */
  int64_t shape_div[TJ_MAX_NDIM];     /* 0: static; >= 1: dynamic, divisible by this */
  int64_t stride_div[TJ_MAX_NDIM];    /* 0: static; >= 1: dynamic, divisible by this */
  int64_t tensor_stride[TJ_MAX_NDIM]; /* the tensor's strides as imported, never rewritten */
  int32_t stride_order[TJ_MAX_NDIM];  /* when has_stride_order: modes, outermost first */
} tj_layout;

/* Sets `layout` to the fully static layout of a tensor with `ndim` modes.
 * Borrows shape and strides (copied); strides NULL means compact row-major,
 * as DLPack says of NULL strides. Fails (TJ_EVALUE) for ndim outside
 * [0, TJ_MAX_NDIM] or a negative extent. */
TJ_API int tj_layout_init(tj_layout *layout, int32_t ndim, const int64_t *shape,
                          const int64_t *strides);

/* How tj_layout_mark_dynamic finds the leading dimension. */
typedef enum {
  /* `leading_dim` names it; it must be in range and have static stride 1. */
  TJ_LEADING_DIM_GIVEN = 0,
  /* The reference's rule: the one mode whose stride is 1; none means no
   * leading dimension (every stride dynamic); several is an error. */
  TJ_LEADING_DIM_DEDUCE = 1,
  /* Implicit conversion (tilejit.jit(layout="dynamic")): like DEDUCE, but
   * never fails. Size-1 modes, whose stride carries no information, lose ties
   * to other stride-1 modes; among size-1 modes only, the last one wins;
   * several stride-1 modes of size > 1 (an overlapping tensor) mean none. */
  TJ_LEADING_DIM_IMPLICIT = 2,
} tj_leading_dim_rule;

/* Finds the leading dimension by `rule` (DEDUCE or IMPLICIT) among the modes
 * whose stride is statically 1: writes it to *out, or -1 when there is none.
 * Fails only for DEDUCE with several candidates. Borrows layout. */
TJ_API int tj_layout_deduce_leading_dim(const tj_layout *layout, int32_t rule, int32_t *out);

/* mark_layout_dynamic: every shape mode becomes dynamic (one already dynamic
 * keeps its divisibility); every stride becomes dynamic except the leading
 * dimension's, which stays 1, and static strides equal to 0 (broadcasting),
 * which stay 0. `leading_dim` is read only for TJ_LEADING_DIM_GIVEN. Forgets
 * any stride order of an earlier compact marking. */
TJ_API int tj_layout_mark_dynamic(tj_layout *layout, int32_t rule, int64_t leading_dim);

/* Deduces the stride order of the tensor's strides (tensor_stride): modes
 * sorted by stride, largest (outermost) first. Ties put modes of size > 1
 * outside size-1 modes (a compact tensor's size-1 mode shares the stride of
 * the mode just outside it), then follow mode order. Unlike
 * torch.Tensor.dim_order(), size-1 modes are placed by their strides too.
 * Fails when several modes have stride 1. Writes ndim entries to `order`. */
TJ_API int tj_layout_deduce_stride_order(const tj_layout *layout, int32_t *order);

/* mark_compact_shape_dynamic: makes shape mode `mode` dynamic with
 * `divisibility` and recomputes every stride as the compact layout in the
 * stride order, outermost first:
 *
 * - a previous compact marking's order, which a given `stride_order` must
 *   equal ("not consistent with the last stride_order");
 * - else the deduced order (tj_layout_deduce_stride_order), with which a
 *   given one must agree: along it the tensor's strides must never grow
 *   ("not consistent with the deduced stride_order");
 * - else, when the order cannot be deduced, the given one, which must
 *   describe the tensor compactly ("not consistent with the layout").
 *
 * The tensor must be compact in that order (size-1 modes aside). A stride
 * is the product of the extents inside it: static while they all are, else
 * dynamic with their divisibilities multiplied in; static size-1 modes get
 * stride 0. `stride_order` has `order_len` entries (NULL: none given); it is
 * read only when order_len == ndim, so a caller may pass a longer length than
 * the array it holds to have the length reported. Borrows stride_order. */
TJ_API int tj_layout_mark_compact_shape_dynamic(tj_layout *layout, int64_t mode,
                                                const int64_t *stride_order, int32_t order_len,
                                                int64_t divisibility);

/* 1 when no shape or stride entry is dynamic. */
TJ_API int tj_layout_is_static(const tj_layout *layout);

/* Writes the layout's text into buf (NUL-terminated): a static layout like
 * Python tuples, "(30, 20):(20, 1)", "(8,):(1,)"; a dynamic one compactly,
 * "(?{div=2},4,16,2):(2,?{div=4},?{div=16},1)", divisibility 1 printing as
 * "?". Fails (TJ_EVALUE, text truncated) only when size is below
 * TJ_LAYOUT_FORMAT_SIZE and the text does not fit. */
TJ_API int tj_layout_format(const tj_layout *layout, char *buf, int32_t size);

/* Writes the CuTe-style element type name of `dtype` into buf ("Float32",
 * "BFloat16", "Int8", "Uint64", "Boolean", "Float8E4M3FN", "Complex64";
 * "Float32x4" for lanes > 1); falls back to tj_dtype_format's name for types
 * CuTe does not name. */
TJ_API void tj_element_type_format(DLDataType dtype, char *buf, int32_t size);

/* The memory space of a device type: "generic" for host-addressable memory
 * (CPU, CUDA and ROCm pinned host memory), "gmem" for device memory. A static
 * string. */
TJ_API const char *tj_memspace_name(int32_t device_type);

/* Checks a view's assumed alignment: `align` (bytes; 0 means the element
 * size of `dtype`) must be a power of two, and `address` (data +
 * byte_offset) divisible by it. Writes the alignment in effect to
 * *out_align. */
TJ_API int tj_check_assumed_align(uint64_t address, DLDataType dtype, int64_t align,
                                  int64_t *out_align);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_LAYOUT_H_ */
