/*
 * Argument validation and symbol binding (docs/validation.md).
 * Every failure names the kernel, the argument and what was expected.
 */
#include "validate.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "internal.h"

/* Per-call binding state beyond the frame: who bound each symbol. */
typedef struct {
  tj_frame *frame;
  const tj_kernel *k;
  int32_t bound_by[TJ_MAX_SYMBOLS]; /* parameter index, -1 while unbound */
  /* Bit s: symbol s is bound only by the stride of a size-1 or empty dimension,
   * which is never stepped over and so carries no information (any value is
   * valid there, its sign and divisibility unchecked). A later occurrence that
   * matters binds it again, with every check (check_direct). */
  uint64_t loose;
  int32_t device_param; /* parameter that set frame->device, -1 if none */
} binder;

/* bound_by value while checking an output: tj_call_bind bound every symbol,
 * and the frame does not record which input did. */
#define BOUND_BY_INPUTS (-2)

#define LABEL(b, i, buf) tj__param_label((b)->k, (i), (buf), (int32_t)sizeof(buf))

/* Whether symbol s has a value a later occurrence must agree with (bound, and
 * not only loosely). */
static inline int firmly_bound(const binder *b, int32_t s) {
  return b->bound_by[s] != -1 && !(b->loose >> s & 1);
}

/* Binds symbol s to `value`, firmly, by parameter `index`. */
static void bind_symbol(binder *b, int32_t s, int32_t index, int64_t value) {
  b->frame->symbols[s] = value;
  b->bound_by[s] = index;
  b->loose &= ~((uint64_t)1 << s);
}

TJ__COLD static int fail(binder *b, int code, int32_t index, const char *what) {
  char label[160];
  LABEL(b, index, label);
  const tj__param *p = &b->k->params[index];
  tj_set_error(code, "%s: %s: %s", b->k->name, label, what);
  return tj_error_at(code, p->position, p->output, TJ_PRODUCER_NONE);
}

static int host_accessible(int32_t device_type) {
  return device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost;
}

static int device_ok_for_target(int32_t target, int32_t device_type) {
  if (target == TJ_TARGET_CPU) return host_accessible(device_type);
  return device_type == kDLCUDA || device_type == kDLCUDAManaged;
}

static int check_device(binder *b, int32_t index, const DLDevice *dev) {
  char msg[320];
  if (!device_ok_for_target(b->k->target, dev->device_type)) {
    snprintf(msg, sizeof(msg), "expected a %s tensor, got a tensor on device %s:%d",
             b->k->target == TJ_TARGET_CPU ? "cpu" : "cuda", tj_device_name(dev->device_type),
             dev->device_id);
    return fail(b, TJ_EVALUE, index, msg);
  }
  tj_frame *f = b->frame;
  if (b->device_param < 0) {
    f->device = *dev;
    f->has_device = 1;
    b->device_param = index;
    return TJ_OK;
  }
  if (f->device.device_type != dev->device_type || f->device.device_id != dev->device_id) {
    char other[160];
    LABEL(b, b->device_param, other);
    snprintf(msg, sizeof(msg), "expected device %s:%d (that of %s), got %s:%d",
             tj_device_name(f->device.device_type), f->device.device_id, other,
             tj_device_name(dev->device_type), dev->device_id);
    return fail(b, TJ_EVALUE, index, msg);
  }
  return TJ_OK;
}

TJ__COLD static int misaligned(binder *b, int32_t index, uintptr_t addr, int64_t align) {
  char msg[200];
  snprintf(msg, sizeof(msg),
           "expected the data pointer aligned to %lld bytes, got address %p (misaligned by %llu)",
           (long long)align, (void *)addr, (unsigned long long)(addr % (uint64_t)align));
  return fail(b, TJ_EVALUE, index, msg);
}

static int check_alignment(binder *b, int32_t index, uintptr_t addr, int64_t align) {
  /* align is a power of two (tj_kernel_set_buffer/set_pointer check it). */
  if ((addr & (uint64_t)(align - 1)) != 0) return misaligned(b, index, addr, align);
  return TJ_OK;
}

TJ__COLD static int offset_wraps(binder *b, int32_t index, const DLTensor *t) {
  char msg[200];
  snprintf(msg, sizeof(msg), "expected data + byte_offset within the address space, got %p + %llu",
           t->data, (unsigned long long)t->byte_offset);
  return fail(b, TJ_EVALUE, index, msg);
}

/* The address of a tensor's first element, data + byte_offset, computed on
 * integers: a producer's byte_offset must not make pointer arithmetic wrap,
 * which C leaves undefined. */
static int first_element(binder *b, int32_t index, const DLTensor *t, uintptr_t *out) {
  if (!__builtin_add_overflow((uintptr_t)t->data, t->byte_offset, out)) return TJ_OK;
  return offset_wraps(b, index, t);
}

/*
 * Checks one dimension (or stride) value against its declared expression when
 * the expression is a constant or a lone symbol; binds the symbol on its first
 * occurrence. Complex expressions are left for check_complex once all
 * symbols are bound. `what` is "shape" or "stride".
 */
static int check_direct(binder *b, int32_t index, const char *what, int32_t d, int32_t expr_id,
                        int64_t actual, int may_bind_negative) {
  const tj_kernel *k = b->k;
  const tj__expr *e = &k->exprs[expr_id];
  char msg[400];
  if (e->is_const) {
    if (actual == e->cval) return TJ_OK;
    snprintf(msg, sizeof(msg), "expected %s[%d] == %lld, got %lld", what, d, (long long)e->cval,
             (long long)actual);
    return fail(b, TJ_EVALUE, index, msg);
  }
  int32_t s = e->sym;
  if (s < 0) return TJ_OK;
  if (firmly_bound(b, s)) {
    if (actual == b->frame->symbols[s]) return TJ_OK;
    char other[160] = "the inputs";
    if (b->bound_by[s] >= 0) LABEL(b, b->bound_by[s], other);
    snprintf(msg, sizeof(msg), "expected %s[%d] == %s (= %lld, bound by %s), got %lld", what, d,
             k->symbol_names[s], (long long)b->frame->symbols[s], other, (long long)actual);
    return fail(b, TJ_EVALUE, index, msg);
  }
  if (actual < 0 && !may_bind_negative) {
    snprintf(msg, sizeof(msg),
             "%s[%d] = %lld is negative, and negative strides are not declared (symbol %s)", what,
             d, (long long)actual, k->symbol_names[s]);
    return fail(b, TJ_EVALUE, index, msg);
  }
  if (actual % k->symbol_div[s] != 0) {
    snprintf(msg, sizeof(msg), "%s[%d] = %lld binds %s, which must be divisible by %lld", what, d,
             (long long)actual, k->symbol_names[s], (long long)k->symbol_div[s]);
    return fail(b, TJ_EVALUE, index, msg);
  }
  bind_symbol(b, s, index, actual);
  return TJ_OK;
}

static int check_complex_one(binder *b, int32_t index, const char *what, int32_t d, int32_t expr_id,
                             int64_t actual) {
  const tj__expr *e = &b->k->exprs[expr_id];
  if (e->sym >= 0 || e->is_const) return TJ_OK;
  int64_t want;
  char msg[400];
  if (tj_expr_eval(e->code, e->n, b->frame->symbols, &want) != TJ_OK) {
    snprintf(msg, sizeof(msg), "cannot evaluate %s[%d] == %s: %s", what, d, e->text,
             tj_last_error());
    return fail(b, TJ_EVALUE, index, msg);
  }
  if (want == actual) return TJ_OK;
  snprintf(msg, sizeof(msg), "expected %s[%d] == %s (= %lld), got %lld", what, d, e->text,
           (long long)want, (long long)actual);
  return fail(b, TJ_EVALUE, index, msg);
}

/* The compact row-major strides of `shape` (non-negative extents); 1 when one
 * does not fit int64, which only an empty tensor's can fail to (a non-empty
 * tensor's are bounded by its element count, checked by check_buffer). */
static int compact_strides(const int64_t *shape, int32_t ndim, int64_t *out) {
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    out[d] = expected;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return 1;
  }
  return 0;
}

static int is_empty(const DLTensor *t) {
  for (int32_t d = 0; d < t->ndim; ++d)
    if (t->shape[d] == 0) return 1;
  return 0;
}

/* Strides as the producer gave them, or the compact ones for NULL strides
 * (NULL when those do not fit int64). */
static const int64_t *effective_strides(const DLTensor *t, int64_t *scratch) {
  if (t->strides) return t->strides;
  return compact_strides(t->shape, t->ndim, scratch) ? NULL : scratch;
}

/* A shape no memory can hold: more than INT64_MAX elements, or strides that
 * do not fit int64. Refused before a kernel computes indices with them. */
TJ__COLD static int too_large(binder *b, int32_t index, const DLTensor *t, const char *expected) {
  char shape[200], msg[400];
  tj__format_tuple(t->shape, t->ndim, shape, sizeof(shape));
  snprintf(msg, sizeof(msg), "expected %s, got shape %s", expected, shape);
  return fail(b, TJ_EVALUE, index, msg);
}

/* Why check_buffer refused a tensor's span (tj__span_fits):
 * no data, an offset that wraps, or elements beyond the address space. */
TJ__COLD static int span_refused(binder *b, int32_t index, const DLTensor *t,
                                 const int64_t *strides) {
  char shape[200], st[200] = "NULL (compact)", msg[600];
  uintptr_t first;
  tj__format_tuple(t->shape, t->ndim, shape, sizeof(shape));
  if (t->data == NULL) {
    snprintf(msg, sizeof(msg), "expected a data pointer, got NULL for a tensor of shape %s", shape);
    return fail(b, TJ_EVALUE, index, msg);
  }
  int rc = first_element(b, index, t, &first);
  if (rc) return rc;
  if (strides) tj__format_tuple(strides, t->ndim, st, sizeof(st));
  snprintf(msg, sizeof(msg),
           "expected elements within the address space, got shape %s with strides %s from "
           "address %p",
           shape, st, (void *)first);
  return fail(b, TJ_EVALUE, index, msg);
}

/*
 * A non-empty tensor must describe memory that can exist: a data pointer, and
 * every element's address, data + byte_offset + offset * element size, within
 * the address space. Producers hand over raw integers; a kernel indexing with
 * them must never wrap around.
 *
 * The span is the part that depends on shape and strides alone: the bytes
 * below the first element (`below`, for negative strides) and from it to the
 * end of the highest element (`above`). 0 when they fit 64 bits.
 */
static int tensor_span(const DLTensor *t, const int64_t *strides, uint64_t *below,
                       uint64_t *above) {
  int64_t low = 0, high = 0, step, bytes = tj__dtype_bytes(t->dtype);
  int ok = 1;
  for (int32_t d = 0; d < t->ndim && ok; ++d)
    ok = !__builtin_mul_overflow(t->shape[d] - 1, strides[d], &step) &&
         !__builtin_add_overflow(step < 0 ? low : high, step, step < 0 ? &low : &high);
  if (ok && !__builtin_mul_overflow(low, bytes, &low) && !__builtin_add_overflow(high, 1, &high) &&
      !__builtin_mul_overflow(high, bytes, &high)) {
    *below = (uint64_t)0 - (uint64_t)low;
    *above = (uint64_t)high;
    return 0;
  }
  return 1;
}

/* The span of a buffer argument as its parameter reads it (strides as given
 * when it declares them, else compact): 0 when it fits. */
int tj__buffer_span(const tj__param *p, const DLTensor *t, uint64_t *below, uint64_t *above) {
  int64_t scratch[TJ_MAX_NDIM];
  const int64_t *strides = p->has_strides ? effective_strides(t, scratch) : NULL;
  if (strides != NULL) return tensor_span(t, strides, below, above);
  /* Compact: the element count (which check_buffer made sure fits) times the
   * element size. */
  int64_t count = 1, size;
  for (int32_t d = 0; d < t->ndim; ++d) count *= t->shape[d];
  if (p->has_strides || __builtin_mul_overflow(count, tj__dtype_bytes(t->dtype), &size)) return 1;
  *below = 0;
  *above = (uint64_t)size;
  return 0;
}

TJ__COLD static int negative_extent(binder *b, int32_t index, int32_t d, int64_t extent) {
  char msg[100];
  snprintf(msg, sizeof(msg), "expected shape[%d] >= 0, got %lld", d, (long long)extent);
  return fail(b, TJ_EVALUE, index, msg);
}

TJ__COLD static int wrong_dtype(binder *b, int32_t index, DLDataType want, DLDataType got) {
  char msg[160], a[48], c[48];
  tj_dtype_format(want, a, sizeof(a));
  tj_dtype_format(got, c, sizeof(c));
  snprintf(msg, sizeof(msg), "expected dtype %s, got %s", a, c);
  return fail(b, TJ_EVALUE, index, msg);
}

TJ__COLD static int wrong_ndim(binder *b, int32_t index, int32_t want, const DLTensor *t) {
  char msg[300], shape[200] = "";
  /* A 0-d tensor's shape is (), whether or not the producer gave a shape array. */
  if (t->ndim >= 0 && t->ndim <= TJ_MAX_NDIM * 4 && (t->shape != NULL || t->ndim == 0))
    tj__format_tuple(t->shape, t->ndim, shape, sizeof(shape));
  snprintf(msg, sizeof(msg), "expected a %d-d tensor, got %d-d with shape %s", want, t->ndim,
           shape);
  return fail(b, TJ_EVALUE, index, msg);
}

TJ__COLD static int not_compact(binder *b, int32_t index, const DLTensor *t) {
  int64_t want[TJ_MAX_NDIM];
  char ws[200], gs[200], msg[600];
  compact_strides(t->shape, t->ndim, want);
  tj__format_tuple(want, t->ndim, ws, sizeof(ws));
  tj__format_tuple(t->strides, t->ndim, gs, sizeof(gs));
  snprintf(msg, sizeof(msg),
           "expected a compact row-major tensor (strides %s), got strides %s; declare strides to "
           "accept strided tensors",
           ws, gs);
  return fail(b, TJ_EVALUE, index, msg);
}

/* Phase 1 for a buffer: everything but complex expressions. */
/* Whether a non-empty tensor with strides is compact row-major: right to left,
 * size-1 dimensions may have any stride. The running product stays below the
 * element count, which the caller checked fits. */
static int compact(const DLTensor *t) {
  int64_t expected = 1;
  int is_compact = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    is_compact &= t->shape[d] == 1 || t->strides[d] == expected;
    expected *= t->shape[d];
  }
  return is_compact;
}

static int check_buffer(binder *b, int32_t index, const tj_arg *arg) {
  const tj_kernel *k = b->k;
  const tj__param *p = &k->params[index];
  const DLTensor *t = &arg->tensor;
  int rc;
  /* Same device as the tensor before it: nothing more to check. */
  if (!(b->device_param >= 0 && t->device.device_type == b->frame->device.device_type &&
        t->device.device_id == b->frame->device.device_id) &&
      (rc = check_device(b, index, &t->device)))
    return rc;
  if (t->dtype.code != p->dtype.code || t->dtype.bits != p->dtype.bits ||
      t->dtype.lanes != p->dtype.lanes)
    return wrong_dtype(b, index, p->dtype, t->dtype);
  if (t->ndim != p->ndim) return wrong_ndim(b, index, p->ndim, t);
  if (t->ndim > 0 && t->shape == NULL)
    return fail(b, TJ_EVALUE, index, "expected a shape array, got NULL");
  if ((arg->flags & TJ_ARG_READ_ONLY) && !(p->flags & TJ_BUF_CONST))
    return fail(b, TJ_EVALUE, index,
                "the tensor is read-only (DLPack READ_ONLY flag), but the parameter is not "
                "declared const=True");
  /* Each extent, in one pass with the element count, which must fit int64
   * unless the tensor is empty. */
  int64_t count = 1;
  int empty = 0, wraps = 0;
  for (int32_t d = 0; d < p->ndim; ++d) {
    int64_t extent = t->shape[d];
    if (extent < 0) return negative_extent(b, index, d, extent);
    empty |= extent == 0;
    wraps |= __builtin_mul_overflow(count, extent, &count);
    /* The common case inline: a constant, or a symbol firmly bound, that matches.
     * Binding and every mismatch go through check_direct. */
    const tj__expr *e = &k->exprs[p->shape[d]];
    if (e->is_const ? extent == e->cval
                    : e->sym >= 0 && firmly_bound(b, e->sym) && extent == b->frame->symbols[e->sym])
      continue;
    if ((rc = check_direct(b, index, "shape", d, p->shape[d], extent, 0))) return rc;
  }
  if (wraps && !empty) return too_large(b, index, t, "at most 2**63 - 1 elements");
  const int64_t *strides = t->strides;
  int64_t scratch[TJ_MAX_NDIM];
  if (p->has_strides) {
    if (strides == NULL && (strides = effective_strides(t, scratch)) == NULL)
      return too_large(b, index, t, "compact strides that fit in 64 bits");
    for (int32_t d = 0; d < p->ndim; ++d) {
      /* A size-1 (or empty) dimension is never stepped over, so its stride
       * carries no information: it only binds a still-unbound symbol, loosely. */
      int32_t id = p->strides[d];
      const tj__expr *e = &k->exprs[id];
      if (empty || t->shape[d] == 1) {
        if (e->sym >= 0 && b->bound_by[e->sym] == -1) {
          b->frame->symbols[e->sym] = strides[d];
          b->bound_by[e->sym] = index;
          b->loose |= (uint64_t)1 << e->sym;
        }
        continue;
      }
      if ((rc = check_direct(b, index, "stride", d, id, strides[d], 0))) return rc;
    }
  } else if (!empty && strides && !compact(t)) {
    return not_compact(b, index, t);
  }
  if (empty) return TJ_OK;
  uint64_t below, above;
  uintptr_t first;
  if (tj__buffer_span(p, t, &below, &above) || !tj__span_fits(t, below, above, &first))
    return span_refused(b, index, t, p->has_strides ? strides : t->strides);
  return check_alignment(b, index, first, p->align);
}

static int check_complex(binder *b, int32_t index, const tj_arg *arg) {
  const tj__param *p = &b->k->params[index];
  const DLTensor *t = &arg->tensor;
  int rc;
  for (int32_t d = 0; d < p->ndim; ++d)
    if ((rc = check_complex_one(b, index, "shape", d, p->shape[d], t->shape[d]))) return rc;
  if (!p->has_strides || is_empty(t)) return TJ_OK;
  int64_t scratch[TJ_MAX_NDIM];
  /* check_buffer made sure the compact strides fit. */
  const int64_t *strides = effective_strides(t, scratch);
  for (int32_t d = 0; d < p->ndim; ++d)
    if (t->shape[d] != 1 &&
        (rc = check_complex_one(b, index, "stride", d, p->strides[d], strides[d])))
      return rc;
  return TJ_OK;
}

static const char *kind_name(const tj_arg *arg) {
  switch (arg->kind) {
    case TJ_ARG_NONE: return "None";
    case TJ_ARG_TENSOR: return "a tensor";
    case TJ_ARG_INT: return arg->type_name ? arg->type_name : "int";
    case TJ_ARG_BOOL: return arg->type_name ? arg->type_name : "bool";
    case TJ_ARG_FLOAT: return arg->type_name ? arg->type_name : "float";
    case TJ_ARG_ADDRESS: return "a pointer";
  }
  return arg->type_name ? arg->type_name : "an unsupported object";
}

/* The fewest significant digits that read back as `v` ("1e+300"), as
 * Python's repr writes a float. */
static const char *shortest_double(double v, char *buf, int32_t size) {
  for (int digits = 1; digits <= 17; ++digits) {
    snprintf(buf, (size_t)size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

TJ__COLD static int scalar_refused(binder *b, int32_t index, const tj_arg *arg) {
  const tj__param *p = &b->k->params[index];
  char msg[300], dt[48], num[32];
  tj_dtype_format(p->dtype, dt, sizeof(dt));
  int kind_ok = p->dtype.code == kDLBool    ? arg->kind == TJ_ARG_BOOL
                : p->dtype.code == kDLFloat ? arg->kind == TJ_ARG_FLOAT || arg->kind == TJ_ARG_INT
                                            : arg->kind == TJ_ARG_INT;
  if (!kind_ok) {
    snprintf(msg, sizeof(msg), "expected %s scalar (%s), got %s",
             p->dtype.code == kDLBool    ? "a bool"
             : p->dtype.code == kDLFloat ? "a float or int"
                                         : "an int",
             dt, kind_name(arg));
    return fail(b, TJ_ETYPE, index, msg);
  }
  if (p->dtype.code == kDLFloat && tj__int_beyond_double(arg))
    snprintf(msg, sizeof(msg), "value is an int too large for %s", dt);
  else if (p->dtype.code == kDLFloat && arg->kind == TJ_ARG_FLOAT &&
           (arg->flags & TJ_ARG_OUT_OF_RANGE))
    snprintf(msg, sizeof(msg), "value is finite but beyond a double's range, out of range for %s",
             dt);
  else if (p->dtype.code == kDLFloat)
    snprintf(msg, sizeof(msg), "value %s is out of range for %s (it would round to inf)",
             shortest_double(tj__float_value(arg), num, sizeof(num)), dt);
  else if (arg->flags & TJ_ARG_OUT_OF_RANGE)
    snprintf(msg, sizeof(msg), "value does not fit in 64 bits, out of range for %s", dt);
  else if (arg->flags & TJ_ARG_UNSIGNED)
    snprintf(msg, sizeof(msg), "value %llu is out of range for %s",
             (unsigned long long)(uint64_t)arg->value.i, dt);
  else
    snprintf(msg, sizeof(msg), "value %lld is out of range for %s", (long long)arg->value.i, dt);
  return fail(b, TJ_EVALUE, index, msg);
}

static int check_scalar(binder *b, int32_t index, const tj_arg *arg) {
  return tj__scalar_fits(&b->k->params[index], arg) ? TJ_OK : scalar_refused(b, index, arg);
}

/* An integer scalar that binds its symbol (tj_kernel_set_scalar_symbol), once
 * check_scalar accepted the value for the scalar's own dtype: binds it as a
 * tensor extent would, or must agree with the value already bound. */
static int bind_scalar(binder *b, int32_t index, const tj_arg *arg) {
  const tj_kernel *k = b->k;
  const int32_t s = k->params[index].binds;
  const int64_t v = arg->value.i;
  char msg[400];
  if ((arg->flags & TJ_ARG_UNSIGNED) && v < 0) {
    snprintf(msg, sizeof(msg),
             "value %llu binds %s, which is evaluated as an int64: expected at most 2**63 - 1",
             (unsigned long long)(uint64_t)v, k->symbol_names[s]);
    return fail(b, TJ_EVALUE, index, msg);
  }
  if (firmly_bound(b, s)) {
    if (v == b->frame->symbols[s]) return TJ_OK;
    char other[160];
    LABEL(b, b->bound_by[s], other);
    snprintf(msg, sizeof(msg), "expected %s == %lld (bound by %s), got %lld", k->symbol_names[s],
             (long long)b->frame->symbols[s], other, (long long)v);
    return fail(b, TJ_EVALUE, index, msg);
  }
  if (v % k->symbol_div[s] != 0) {
    snprintf(msg, sizeof(msg), "value %lld binds %s, which must be divisible by %lld", (long long)v,
             k->symbol_names[s], (long long)k->symbol_div[s]);
    return fail(b, TJ_EVALUE, index, msg);
  }
  bind_symbol(b, s, index, v);
  return TJ_OK;
}

static int check_pointer(binder *b, int32_t index, const tj_arg *arg) {
  const tj__param *p = &b->k->params[index];
  char msg[300];
  switch (arg->kind) {
    case TJ_ARG_NONE: return TJ_OK;
    case TJ_ARG_INT:
      /* An int that is negative or does not fit 64 bits is no address: passing
       * its truncated value would launch on garbage. */
      if ((arg->flags & TJ_ARG_OUT_OF_RANGE) || arg->value.i < 0) {
        snprintf(msg, sizeof(msg), "expected an address (an int in [0, 2**63)), got %s",
                 (arg->flags & TJ_ARG_OUT_OF_RANGE) ? "an int that does not fit in 64 bits"
                 : (arg->flags & TJ_ARG_UNSIGNED)   ? "an int of 2**63 or more"
                                                    : "a negative int");
        return fail(b, TJ_EVALUE, index, msg);
      }
      return check_alignment(b, index, (uintptr_t)arg->value.p, p->align);
    case TJ_ARG_ADDRESS:
      /* A typed address (tilejit.make_ptr) must point to the declared element type,
       * in memory the target can address. */
      if (arg->tensor.dtype.bits != 0) {
        const DLDataType *t = &arg->tensor.dtype;
        if (t->code != p->dtype.code || t->bits != p->dtype.bits || t->lanes != p->dtype.lanes) {
          char want[48], got[48];
          tj_dtype_format(p->dtype, want, sizeof(want));
          tj_dtype_format(*t, got, sizeof(got));
          snprintf(msg, sizeof(msg), "expected a pointer to %s, got a pointer to %s", want, got);
          return fail(b, TJ_EVALUE, index, msg);
        }
        if (!device_ok_for_target(b->k->target, arg->tensor.device.device_type)) {
          snprintf(msg, sizeof(msg), "expected a pointer to %s memory, got one to %s memory",
                   b->k->target == TJ_TARGET_CPU ? "cpu" : "cuda",
                   tj_device_name(arg->tensor.device.device_type));
          return fail(b, TJ_EVALUE, index, msg);
        }
      }
      return check_alignment(b, index, (uintptr_t)arg->value.p, p->align);
    case TJ_ARG_TENSOR: {
      int rc = check_device(b, index, &arg->tensor.device);
      if (rc) return rc;
      if ((arg->flags & TJ_ARG_READ_ONLY) && !(p->flags & TJ_BUF_CONST))
        return fail(b, TJ_EVALUE, index,
                    "the tensor is read-only (DLPack READ_ONLY flag), but the parameter is not "
                    "declared const=True");
      /* The shape is not checked, but a tensor that claims elements has data. */
      const DLTensor *t = &arg->tensor;
      int empty = 0;
      for (int32_t d = 0; t->data == NULL && t->shape != NULL && d < t->ndim && !empty; ++d)
        empty = t->shape[d] == 0;
      if (t->data == NULL && !empty)
        return fail(b, TJ_EVALUE, index,
                    "expected a data pointer, got NULL for a tensor that is not empty");
      uintptr_t first;
      if ((rc = first_element(b, index, t, &first))) return rc;
      return check_alignment(b, index, first, p->align);
    }
  }
  snprintf(msg, sizeof(msg), "expected a pointer (tensor, tilejit.Pointer or int address), got %s",
           kind_name(arg));
  return fail(b, TJ_ETYPE, index, msg);
}

static int check_kind(binder *b, int32_t index, const tj_arg *arg) {
  const tj__param *p = &b->k->params[index];
  if (p->kind == TJ_PARAM_SCALAR) return check_scalar(b, index, arg);
  if (p->kind == TJ_PARAM_POINTER) return check_pointer(b, index, arg);
  if (arg->kind == TJ_ARG_TENSOR) return check_buffer(b, index, arg);
  if (arg->kind == TJ_ARG_NONE && (p->flags & TJ_BUF_OPTIONAL)) return TJ_OK;
  char msg[300];
  snprintf(msg, sizeof(msg), "expected a tensor (an object supporting DLPack), got %s%s",
           kind_name(arg), arg->kind == TJ_ARG_NONE ? " (the parameter is not optional)" : "");
  return fail(b, TJ_ETYPE, index, msg);
}

static int fits(DLDataType t, int64_t v) {
  if (t.bits == 64) return t.code == kDLInt || v >= 0;
  return t.code == kDLInt ? v >= INT32_MIN && v <= INT32_MAX : v >= 0 && v <= (int64_t)UINT32_MAX;
}

static const char *index_type(DLDataType t) {
  if (t.code == kDLInt) return t.bits == 32 ? "int32" : "int64";
  return t.bits == 32 ? "uint32" : "uint64";
}

/* A symbol declared narrower than int64, and every expression the kernel
 * receives, must fit the integer type the kernel takes it as. */
static int check_integers(binder *b) {
  const tj_kernel *k = b->k;
  const tj_frame *f = b->frame;
  char msg[400];
  for (int32_t s = 0; s < k->nsymbols; ++s) {
    DLDataType t = k->symbol_dtype[s];
    if (fits(t, f->symbols[s])) continue;
    snprintf(msg, sizeof(msg), "symbol '%s' = %lld does not fit its type %s", k->symbol_names[s],
             (long long)f->symbols[s], index_type(t));
    if (b->bound_by[s] >= 0) return fail(b, TJ_EVALUE, b->bound_by[s], msg);
    return tj_set_error(TJ_EVALUE, "%s: %s", k->name, msg);
  }
  for (int32_t l = 0; l < k->nlaunches; ++l) {
    const tj__launch *launch = &k->launches[l];
    /* "main_kernel_1: " before the message when a program launches several. */
    const char *fn = k->nlaunches > 1 ? launch->symbol : "";
    const char *sep = k->nlaunches > 1 ? ": " : "";
    for (int32_t a = 0; a < launch->nabi; ++a) {
      const tj_abi_arg *entry = &launch->abi[a];
      if (entry->source != TJ_ABI_EXPR) continue;
      const char *text = k->exprs[entry->index].text;
      int64_t value;
      if (tj__abi_integer(f, entry, &value) != TJ_OK)
        return tj__prefix_error(TJ_EVALUE, "%s: %s%skernel argument %d (%s): ", k->name, fn, sep, a,
                                text);
      if (!fits(entry->dtype, value))
        return tj_set_error(TJ_EVALUE, "%s: %s%skernel argument %d (%s) = %lld does not fit %s",
                            k->name, fn, sep, a, text, (long long)value, index_type(entry->dtype));
    }
  }
  return TJ_OK;
}

static void binder_init(binder *b, const tj_kernel *k, tj_frame *frame) {
  b->frame = frame;
  b->k = k;
  b->loose = 0;
  b->device_param = -1;
  for (int32_t s = 0; s < k->nsymbols; ++s) b->bound_by[s] = -1;
}

/* A call with `nargs` arguments where the kernel takes k->ninputs, in Python's
 * way: the trailing optional buffers, which a call may leave out
 * (tj_call_run), are written `name=None`. */
static int count_refused(const tj_kernel *k, int32_t nargs) {
  char names[512], fewest[32] = "";
  int32_t used = 0;
  names[0] = 0;
  for (int32_t i = 0; i < k->nparams && used < (int32_t)sizeof(names); ++i)
    if (k->params[i].output < 0)
      used += snprintf(names + used, sizeof(names) - (size_t)used, "%s%s%s", used ? ", " : "",
                       k->params[i].name, k->params[i].position >= k->nrequired ? "=None" : "");
  if (k->nrequired < k->ninputs) snprintf(fewest, sizeof(fewest), "%d to ", k->nrequired);
  return tj_set_error(TJ_ETYPE, "%s: expected %s%d argument%s (%s), got %d", k->name, fewest,
                      k->ninputs, k->ninputs == 1 ? "" : "s", names, nargs);
}

/* Checks every input in declaration order, binding the symbols, then the
 * complex tensors and the symbols' integer ranges. */
static int check_inputs(binder *b, tj_arg *args) {
  const tj_kernel *k = b->k;
  tj_frame *frame = b->frame;
  int32_t any_complex = 0, rc;
  for (int32_t i = 0; i < k->nparams; ++i) {
    const tj__param *p = &k->params[i];
    if (p->output >= 0) {
      frame->params[i] = NULL;
      continue;
    }
    tj_arg *arg = &args[p->position];
    frame->params[i] = arg;
    if (arg->kind == TJ_ARG_TENSOR && frame->first_tensor < 0) frame->first_tensor = p->position;
    if ((rc = check_kind(b, i, arg))) return rc;
    if (p->binds >= 0 && (rc = bind_scalar(b, i, arg))) return rc;
    any_complex |= p->has_complex && arg->kind == TJ_ARG_TENSOR;
  }
  if (any_complex)
    for (int32_t i = 0; i < k->nparams; ++i) {
      const tj__param *p = &k->params[i];
      if (p->output < 0 && p->has_complex && frame->params[i]->kind == TJ_ARG_TENSOR &&
          (rc = check_complex(b, i, frame->params[i])))
        return rc;
    }
  if (k->check_integers && (rc = check_integers(b))) return rc;
  return TJ_OK;
}

/* The shape of output (or workspace) `o`, now that every symbol is bound. */
static int output_shape(binder *b, int32_t o) {
  const tj_kernel *k = b->k;
  tj_frame *frame = b->frame;
  const tj__param *p = &k->params[k->output_params[o]];
  frame->out_ndim[o] = p->ndim;
  frame->out_dtype[o] = p->dtype;
  for (int32_t d = 0; d < p->ndim; ++d) {
    const tj__expr *e = &k->exprs[p->shape[d]];
    int64_t v;
    if (tj_expr_eval(e->code, e->n, frame->symbols, &v) != TJ_OK) {
      char msg[400];
      snprintf(msg, sizeof(msg), "cannot evaluate shape[%d] == %s: %s", d, e->text,
               tj_last_error());
      return fail(b, TJ_EVALUE, k->output_params[o], msg);
    }
    if (v < 0) {
      char msg[300];
      snprintf(msg, sizeof(msg), "shape[%d] == %s evaluates to %lld, which is negative", d, e->text,
               (long long)v);
      return fail(b, TJ_EVALUE, k->output_params[o], msg);
    }
    frame->out_shape[o][d] = v;
  }
  /* An output no allocator could make is refused here, the same way for every
   * framework, rather than with each allocator's own words. */
  int64_t bytes = tj__dtype_bytes(p->dtype);
  int empty = 0, fits = 1;
  for (int32_t d = 0; d < p->ndim; ++d) {
    empty |= frame->out_shape[o][d] == 0;
    fits = fits && !__builtin_mul_overflow(bytes, frame->out_shape[o][d], &bytes);
  }
  if (!fits && !empty) {
    char shape[200], dtype[48], msg[400];
    tj__format_tuple(frame->out_shape[o], p->ndim, shape, sizeof(shape));
    tj_dtype_format(p->dtype, dtype, sizeof(dtype));
    snprintf(msg, sizeof(msg), "expected at most 2**63 - 1 bytes, got shape %s of %s", shape,
             dtype);
    return fail(b, TJ_EVALUE, k->output_params[o], msg);
  }
  return TJ_OK;
}

static int bind_checked(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  frame->kernel = k;
  frame->has_device = 0;
  frame->first_tensor = -1;
  frame->stream = NULL;
  frame->device.device_type = kDLCPU;
  frame->device.device_id = 0;
  if (!k->finalized) return tj_set_error(TJ_ERUNTIME, "%s: the kernel is not finalized", k->name);
  if (nargs != k->ninputs) return count_refused(k, nargs);
  binder b;
  binder_init(&b, k, frame);
  int rc = check_inputs(&b, args);
  for (int32_t o = 0; rc == TJ_OK && o < k->nallocs; ++o) rc = output_shape(&b, o);
  return rc;
}

int tj__bind_checked(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  return bind_checked(k, args, nargs, frame);
}

/* Whether an output is exactly what its allocator was asked for: the frame's
 * device, the parameter's dtype, the shape tj_call_bind computed, compact,
 * writable, its span in the address space and aligned. Frameworks' allocators
 * return just that; anything else takes the checks of an input, which say
 * what is wrong. */
static int output_as_asked(const tj_frame *f, int32_t o, const tj__param *p, const tj_arg *arg) {
  const DLTensor *t = &arg->tensor;
  if (arg->kind != TJ_ARG_TENSOR || (arg->flags & TJ_ARG_READ_ONLY) || p->has_strides ||
      p->has_complex || !f->has_device || t->device.device_type != f->device.device_type ||
      t->device.device_id != f->device.device_id || t->ndim != p->ndim ||
      t->dtype.code != p->dtype.code || t->dtype.bits != p->dtype.bits ||
      t->dtype.lanes != p->dtype.lanes || (t->ndim > 0 && t->shape == NULL))
    return 0;
  int64_t count = 1;
  int empty = 0, wraps = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] != f->out_shape[o][d] || t->shape[d] < 0) return 0;
    empty |= t->shape[d] == 0;
    wraps |= __builtin_mul_overflow(count, t->shape[d], &count);
  }
  if (empty) return 1;
  if (wraps || (t->strides != NULL && !compact(t))) return 0;
  uint64_t below, above;
  uintptr_t first;
  return !tj__buffer_span(p, t, &below, &above) && tj__span_fits(t, below, above, &first) &&
         (first & (uint64_t)(p->align - 1)) == 0;
}

int tj_call_set_output(tj_frame *frame, int32_t i, tj_arg *arg) {
  TJ__REFUSE_NULL("tj_call_set_output", frame);
  TJ__REFUSE_NULL("tj_call_set_output", arg);
  const tj_kernel *k = frame->kernel;
  if (i < 0 || i >= k->nallocs)
    return tj_set_error(TJ_EVALUE, "%s: output index %d out of range", k->name, i);
  int32_t index = k->output_params[i];
  const tj__param *p = &k->params[index];
  if (output_as_asked(frame, i, p, arg)) {
    frame->params[index] = arg;
    return TJ_OK;
  }
  binder b;
  binder_init(&b, k, frame);
  /* Every symbol is bound: checks against them, never rebinding. */
  for (int32_t s = 0; s < k->nsymbols; ++s) b.bound_by[s] = BOUND_BY_INPUTS;
  if (arg->kind != TJ_ARG_TENSOR)
    return fail(&b, TJ_ETYPE, index, "the allocator did not return a tensor");
  /* The output must be where the inputs are. On the CPU target "where" is host memory:
   * a framework allocating for a pinned (cuda_host) input hands back plain host memory,
   * which the kernel reads the same way. */
  int same_device = arg->tensor.device.device_type == frame->device.device_type &&
                    arg->tensor.device.device_id == frame->device.device_id;
  if (k->target == TJ_TARGET_CPU && arg->tensor.device.device_type != frame->device.device_type &&
      host_accessible(arg->tensor.device.device_type) && host_accessible(frame->device.device_type))
    same_device = 1;
  if (frame->has_device && !same_device) {
    char msg[200];
    snprintf(msg, sizeof(msg), "allocated on %s:%d, expected %s:%d",
             tj_device_name(arg->tensor.device.device_type), arg->tensor.device.device_id,
             tj_device_name(frame->device.device_type), frame->device.device_id);
    return fail(&b, TJ_ERUNTIME, index, msg);
  }
  b.device_param = -1;
  DLDevice saved_device = frame->device;
  int32_t saved_has_device = frame->has_device;
  int rc = check_buffer(&b, index, arg);
  if (!rc && p->has_complex) rc = check_complex(&b, index, arg);
  /* check_device records the device of the tensor it checks. If the inputs
   * established one, the check above made this output's equal to it; if none
   * did (only outputs are tensors), a valid output establishes it. A failed
   * output leaves the frame as it was. */
  if (rc) {
    frame->device = saved_device;
    frame->has_device = saved_has_device;
    return rc;
  }
  frame->params[index] = arg;
  return TJ_OK;
}

int tj__check_replacement(tj_frame *frame, int32_t index, const tj_arg *arg) {
  const tj_kernel *k = frame->kernel;
  binder b;
  binder_init(&b, k, frame);
  /* Every symbol keeps its value: the tensor is checked against them, as an
   * output is, and on the device the call is bound to. */
  for (int32_t s = 0; s < k->nsymbols; ++s) b.bound_by[s] = BOUND_BY_INPUTS;
  if (arg->kind != TJ_ARG_TENSOR) {
    char msg[200];
    snprintf(msg, sizeof(msg), "expected a tensor to replace the bound one, got %s",
             kind_name(arg));
    return fail(&b, TJ_ETYPE, index, msg);
  }
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].position == frame->first_tensor && k->params[i].output < 0) b.device_param = i;
  int rc = check_buffer(&b, index, arg);
  if (!rc && k->params[index].has_complex) rc = check_complex(&b, index, arg);
  return rc;
}
