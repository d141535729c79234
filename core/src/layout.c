/*
 * The layout algebra of tensor views (layout.h): leading-dimension and
 * stride-order deduction, stride-order validation, divisibility propagation
 * and printing. Marking works on a copy that replaces the layout only on
 * success, so a failed call changes nothing.
 */
#include "tilejit/layout.h"

#include <stdio.h>
#include <string.h>

#include "internal.h"

int tj_layout_init(tj_layout *layout, int32_t ndim, const int64_t *shape, const int64_t *strides) {
  TJ__REFUSE_NULL("tj_layout_init", layout);
  memset(layout, 0, sizeof(*layout));
  if (ndim < 0 || ndim > TJ_MAX_NDIM)
    return tj_set_error(TJ_EVALUE, "a layout has 0 to %d modes, got %d", TJ_MAX_NDIM, ndim);
  int64_t compact = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (shape[d] < 0)
      return tj_set_error(TJ_EVALUE, "shape[%d] = %lld is negative", d, (long long)shape[d]);
    layout->shape[d] = shape[d];
    layout->tensor_stride[d] = strides ? strides[d] : compact;
    layout->stride[d] = layout->tensor_stride[d];
    /* Only NULL strides need the running product; a wrapped product there is
     * impossible for a tensor that exists. */
    if (!strides && __builtin_mul_overflow(compact, shape[d], &compact)) compact = 0;
  }
  layout->ndim = ndim;
  return TJ_OK;
}

/* One shape or stride entry as the dynamic form prints it: "4", "?",
 * "?{div=8}". Returns what snprintf returns. */
static int format_entry(char *buf, size_t size, int64_t value, int64_t div) {
  if (div == 0) return snprintf(buf, size, "%lld", (long long)value);
  if (div == 1) return snprintf(buf, size, "?");
  return snprintf(buf, size, "?{div=%lld}", (long long)div);
}

/* Appends "(a, b)" (static: Python tuple style) or "(a,b)" (dynamic). */
static int32_t format_tuple(char *buf, int32_t size, int32_t used, const int64_t *values,
                            const int64_t *divs, int32_t n, int is_static) {
  used += snprintf(buf + used, (size_t)(size - used), "(");
  for (int32_t d = 0; d < n && used < size; ++d) {
    if (d) used += snprintf(buf + used, (size_t)(size - used), is_static ? ", " : ",");
    if (used < size)
      used += format_entry(buf + used, (size_t)(size - used), values[d], is_static ? 0 : divs[d]);
  }
  if (used < size)
    used += snprintf(buf + used, (size_t)(size - used), is_static && n == 1 ? ",)" : ")");
  return used;
}

int tj_layout_is_static(const tj_layout *layout) {
  for (int32_t d = 0; d < layout->ndim; ++d)
    if (layout->shape_div[d] || layout->stride_div[d]) return 0;
  return 1;
}

int tj_layout_format(const tj_layout *l, char *buf, int32_t size) {
  TJ__REFUSE_NULL("tj_layout_format", l);
  TJ__REFUSE_NULL("tj_layout_format", buf);
  if (size <= 0) return tj_set_error(TJ_EVALUE, "layout text does not fit in %d bytes", size);
  int is_static = tj_layout_is_static(l);
  int32_t used = format_tuple(buf, size, 0, l->shape, l->shape_div, l->ndim, is_static);
  if (used < size) used += snprintf(buf + used, (size_t)(size - used), ":");
  if (used < size)
    used = format_tuple(buf, size, used, l->stride, l->stride_div, l->ndim, is_static);
  if (used >= size) {
    buf[size - 1] = 0;
    return tj_set_error(TJ_EVALUE, "layout text does not fit in %d bytes", size);
  }
  return TJ_OK;
}

/* The tensor's own layout, fully static, for messages. */
static void format_tensor_layout(const tj_layout *l, char *buf, int32_t size) {
  tj_layout plain;
  tj_layout_init(&plain, l->ndim, l->shape, l->tensor_stride);
  tj_layout_format(&plain, buf, size);
}

/* ---- mark_layout_dynamic ------------------------------------------------- */

static int static_stride_is(const tj_layout *l, int32_t d, int64_t value) {
  return l->stride_div[d] == 0 && l->stride[d] == value;
}

int tj_layout_deduce_leading_dim(const tj_layout *l, int32_t rule, int32_t *out) {
  TJ__REFUSE_NULL("tj_layout_deduce_leading_dim", l);
  TJ__REFUSE_NULL("tj_layout_deduce_leading_dim", out);
  int32_t count = 0, last = -1, wide = 0, last_wide = -1;
  for (int32_t d = 0; d < l->ndim; ++d) {
    if (!static_stride_is(l, d, 1)) continue;
    ++count;
    last = d;
    if (l->shape_div[d] || l->shape[d] != 1) {
      ++wide;
      last_wide = d;
    }
  }
  *out = -1;
  if (count == 1) {
    *out = last;
  } else if (count > 1) {
    if (rule != TJ_LEADING_DIM_IMPLICIT)
      return tj_set_error(TJ_EVALUE,
                          "Can't deduce the leading dimension from layout, please specify the "
                          "leading_dim explicitly.");
    *out = wide == 1 ? last_wide : wide == 0 ? last : -1;
  }
  return TJ_OK;
}

int tj_layout_mark_dynamic(tj_layout *layout, int32_t rule, int64_t leading_dim) {
  TJ__REFUSE_NULL("tj_layout_mark_dynamic", layout);
  tj_layout l = *layout;
  int32_t lead = -1;
  if (rule == TJ_LEADING_DIM_GIVEN) {
    if (leading_dim < 0 || leading_dim >= l.ndim)
      return tj_set_error(TJ_EVALUE,
                          "Expected leading_dim value to be in range [0, %d), but got %lld", l.ndim,
                          (long long)leading_dim);
    lead = (int32_t)leading_dim;
    if (!static_stride_is(&l, lead, 1)) {
      char got[64];
      format_entry(got, sizeof(got), l.stride[lead], l.stride_div[lead]);
      return tj_set_error(TJ_EVALUE, "Expected strides[leading_dim] == 1, but got %s", got);
    }
  } else if (rule == TJ_LEADING_DIM_DEDUCE || rule == TJ_LEADING_DIM_IMPLICIT) {
    int rc = tj_layout_deduce_leading_dim(&l, rule, &lead);
    if (rc) return rc;
  } else {
    return tj_set_error(TJ_EVALUE, "unknown leading-dimension rule %d", rule);
  }
  for (int32_t d = 0; d < l.ndim; ++d) {
    if (l.shape_div[d] == 0) l.shape_div[d] = 1;
    if (d == lead) {
      l.stride[d] = 1;
      l.stride_div[d] = 0;
    } else if (!static_stride_is(&l, d, 0)) {
      l.stride_div[d] = 1;
    }
  }
  l.has_stride_order = 0;
  *layout = l;
  return TJ_OK;
}

/* ---- mark_compact_shape_dynamic ------------------------------------------ */

static int count_unit_strides(const tj_layout *l) {
  int32_t count = 0;
  for (int32_t d = 0; d < l->ndim; ++d) count += l->tensor_stride[d] == 1;
  return count;
}

/* Whether mode a sits outside mode b in the deduced order. */
static int outer_than(const tj_layout *l, int32_t a, int32_t b) {
  int64_t sa = l->tensor_stride[a], sb = l->tensor_stride[b];
  if (sa != sb) return sa > sb;
  int a_unit = l->shape[a] == 1, b_unit = l->shape[b] == 1;
  if (a_unit != b_unit) return b_unit;
  return a < b;
}

int tj_layout_deduce_stride_order(const tj_layout *l, int32_t *order) {
  TJ__REFUSE_NULL("tj_layout_deduce_stride_order", l);
  TJ__REFUSE_NULL("tj_layout_deduce_stride_order", order);
  if (count_unit_strides(l) > 1)
    return tj_set_error(TJ_EVALUE,
                        "The layout could not be deduced, please specify the stride_order "
                        "explicitly");
  /* Insertion sort: at most TJ_MAX_NDIM modes, and stable by construction. */
  for (int32_t d = 0; d < l->ndim; ++d) {
    int32_t j = d;
    while (j > 0 && outer_than(l, d, order[j - 1])) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = d;
  }
  return TJ_OK;
}

/* Whether the tensor is compact when its modes are nested in `order`
 * (outermost first). Size-1 modes are never stepped over, so their strides do
 * not matter; an empty tensor is compact in every order. */
static int compact_in_order(const tj_layout *l, const int32_t *order) {
  for (int32_t d = 0; d < l->ndim; ++d)
    if (l->shape[d] == 0) return 1;
  int64_t expected = 1;
  int overflowed = 0; /* only an error if a stride must equal the product */
  for (int32_t i = l->ndim - 1; i >= 0; --i) {
    int32_t m = order[i];
    if (l->shape[m] == 1) continue;
    if (overflowed || l->tensor_stride[m] != expected) return 0;
    overflowed = __builtin_mul_overflow(expected, l->shape[m], &expected);
  }
  return 1;
}

/* Whether the tensor's strides never grow going inwards along `order`. */
static int descending_in_order(const tj_layout *l, const int32_t *order) {
  for (int32_t i = 1; i < l->ndim; ++i)
    if (l->tensor_stride[order[i]] > l->tensor_stride[order[i - 1]]) return 0;
  return 1;
}

/* Checks a given stride_order is a permutation of the modes. */
static int check_order_given(const tj_layout *l, const int64_t *given, int32_t len,
                             int32_t *order) {
  if (len != l->ndim)
    return tj_set_error(TJ_EVALUE, "Expected stride_order to have %d elements, but got %d.",
                        l->ndim, len);
  int seen[TJ_MAX_NDIM] = {0};
  for (int32_t i = 0; i < len; ++i)
    if (given[i] >= 0 && given[i] < l->ndim) seen[given[i]] = 1;
  for (int32_t d = 0; d < l->ndim; ++d)
    if (!seen[d])
      return tj_set_error(TJ_EVALUE,
                          "Expected stride_order to contain all the dimensions of the tensor, but "
                          "it doesn't contain %d.",
                          d);
  for (int32_t i = 0; i < len; ++i) order[i] = (int32_t)given[i];
  return TJ_OK;
}

/* Picks the stride order a compact marking uses, validating a given one. */
static int choose_order(const tj_layout *l, const int64_t *given, int32_t len, int32_t *order) {
  int32_t mine[TJ_MAX_NDIM];
  int rc;
  if (given && (rc = check_order_given(l, given, len, mine))) return rc;
  if (l->has_stride_order) {
    if (given && memcmp(mine, l->stride_order, sizeof(int32_t) * (size_t)l->ndim) != 0)
      return tj_set_error(TJ_EVALUE,
                          "The stride_order is not consistent with the last stride_order");
    memcpy(order, l->stride_order, sizeof(int32_t) * (size_t)l->ndim);
    return TJ_OK;
  }
  if (count_unit_strides(l) > 1) {
    if (!given) return tj_layout_deduce_stride_order(l, order);
    if (!compact_in_order(l, mine))
      return tj_set_error(TJ_EVALUE, "The stride_order is not consistent with the layout");
    memcpy(order, mine, sizeof(int32_t) * (size_t)l->ndim);
    return TJ_OK;
  }
  if (given) {
    if (!descending_in_order(l, mine))
      return tj_set_error(TJ_EVALUE,
                          "The stride_order is not consistent with the deduced stride_order");
    memcpy(order, mine, sizeof(int32_t) * (size_t)l->ndim);
  } else {
    tj_layout_deduce_stride_order(l, order);
  }
  if (!compact_in_order(l, order)) {
    char text[TJ_LAYOUT_FORMAT_SIZE];
    format_tensor_layout(l, text, sizeof(text));
    return tj_set_error(TJ_EVALUE,
                        "The layout %s is not compact; mark_compact_shape_dynamic needs a "
                        "compact layout (mark_layout_dynamic takes any)",
                        text);
  }
  return TJ_OK;
}

/* Rewrites every stride as the compact layout in `order`: a running product
 * of the extents inside, kept as a static factor and the product of the
 * divisibilities of the dynamic extents in it. */
static int compact_strides(tj_layout *l, const int32_t *order) {
  int64_t factor = 1, divs = 1;
  int dynamic = 0;
  for (int32_t i = l->ndim - 1; i >= 0; --i) {
    int32_t m = order[i];
    if (l->shape_div[m] == 0 && l->shape[m] == 1) {
      l->stride[m] = 0;
      l->stride_div[m] = 0;
      continue;
    }
    if (dynamic && factor != 0) {
      l->stride_div[m] = 0;
      if (__builtin_mul_overflow(factor, divs, &l->stride_div[m])) goto overflow;
      l->stride[m] = 0;
    } else {
      l->stride[m] = dynamic ? 0 : factor;
      l->stride_div[m] = 0;
    }
    if (i == 0) break; /* the outermost extent is in no stride */
    if (l->shape_div[m]) {
      dynamic = 1;
      if (__builtin_mul_overflow(divs, l->shape_div[m], &divs)) goto overflow;
    } else if (__builtin_mul_overflow(factor, l->shape[m], &factor)) {
      goto overflow;
    }
  }
  return TJ_OK;
overflow:
  return tj_set_error(TJ_EVALUE, "the strides of this layout overflow 64 bits");
}

int tj_layout_mark_compact_shape_dynamic(tj_layout *layout, int64_t mode,
                                         const int64_t *stride_order, int32_t order_len,
                                         int64_t divisibility) {
  TJ__REFUSE_NULL("tj_layout_mark_compact_shape_dynamic", layout);
  tj_layout l = *layout;
  if (mode < 0 || mode >= l.ndim)
    return tj_set_error(TJ_EVALUE, "Expected mode value to be in range [0, %d), but got %lld",
                        l.ndim, (long long)mode);
  if (divisibility < 1)
    return tj_set_error(TJ_EVALUE, "Expected divisibility to be a positive integer, but got %lld",
                        (long long)divisibility);
  int32_t order[TJ_MAX_NDIM];
  int rc = choose_order(&l, stride_order, stride_order ? order_len : 0, order);
  if (rc) return rc;
  if (l.shape[mode] % divisibility != 0)
    return tj_set_error(TJ_EVALUE,
                        "The shape(%lld) of mode(%lld) is not divisible by the divisibility(%lld)",
                        (long long)l.shape[mode], (long long)mode, (long long)divisibility);
  l.shape_div[mode] = divisibility;
  if ((rc = compact_strides(&l, order))) return rc;
  memcpy(l.stride_order, order, sizeof(int32_t) * (size_t)l.ndim);
  l.has_stride_order = 1;
  *layout = l;
  return TJ_OK;
}

/* ---- Names and alignment ------------------------------------------------- */

void tj_element_type_format(DLDataType dtype, char *buf, int32_t size) {
  const tj_dtype_row *row = tj__dtype_row_of_code(dtype.code);
  if (row == NULL || row->cute == NULL) {
    tj_dtype_format(dtype, buf, size);
    return;
  }
  int n = tj__dtype_family_sized(row) ? snprintf(buf, (size_t)size, "%s%u", row->cute, dtype.bits)
                                      : snprintf(buf, (size_t)size, "%s", row->cute);
  if (dtype.lanes != 1 && n >= 0 && n < size)
    snprintf(buf + n, (size_t)(size - n), "x%u", dtype.lanes);
}

const char *tj_memspace_name(int32_t device_type) {
  switch (device_type) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost: return "generic";
  }
  return "gmem";
}

int tj_check_assumed_align(uint64_t address, DLDataType dtype, int64_t align, int64_t *out_align) {
  if (align == 0) align = tj__dtype_bytes(dtype);
  if (align < 1 || (align & (align - 1)) != 0)
    return tj_set_error(TJ_EVALUE, "assumed_align must be a positive power of two, got %lld",
                        (long long)align);
  if (address % (uint64_t)align != 0)
    return tj_set_error(TJ_EVALUE,
                        "The tensor's base address 0x%016llx is not divisible by assumed_align "
                        "(%lld bytes)",
                        (unsigned long long)address, (long long)align);
  *out_align = align;
  return TJ_OK;
}
