/*
 * Argument validation and symbol binding (validate.c): the full checks of a
 * call, and the pieces of them the memo (memo.c) re-runs on a call it
 * recognises.
 */
#ifndef TILEJIT_VALIDATE_H_
#define TILEJIT_VALIDATE_H_

#include <math.h>

#include "internal.h"

/* Validates the arguments and binds the symbols into `frame`, every check
 * (tj_call_bind without the memo). */
int tj__bind_checked(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame);

/* Bytes below the first element and from it to the end of the last, for a
 * non-empty buffer argument as its parameter reads it; 0 when they fit. */
int tj__buffer_span(const tj__param *p, const DLTensor *t, uint64_t *below, uint64_t *above);

/* 1 when the tensor has data and its span around data + byte_offset lies in
 * the address space (the part of that check that depends on the address);
 * writes the first element's address. Inline: the memo runs it every call. */
static inline int tj__span_fits(const DLTensor *t, uint64_t below, uint64_t above,
                                uintptr_t *first) {
  uintptr_t edge;
  return t->data != NULL && !__builtin_add_overflow((uintptr_t)t->data, t->byte_offset, first) &&
         !__builtin_sub_overflow(*first, (uintptr_t)below, &edge) &&
         !__builtin_add_overflow(*first, (uintptr_t)above, &edge);
}

/* Whether a finite double rounds to infinity as a float32: |v| at or beyond
 * FLT_MAX plus half its last place (the tie rounds to even, which is up).
 * Infinities and NaN are float32 values as they are. */
static inline int tj__float32_overflows(double v) {
  return isfinite(v) && fabs(v) >= 0x1.ffffffp127;
}

/* An int too large for a double: it is no float value at all. */
static inline int tj__int_beyond_double(const tj_arg *arg) {
  return arg->kind == TJ_ARG_INT && (arg->flags & TJ_ARG_OUT_OF_RANGE) && !isfinite(arg->value.f);
}

/* Whether a scalar argument is of a kind the parameter takes, and in its
 * type's range: the binding flags Python ints that did not even fit int64
 * (a float parameter takes them as a double does). Inline: the memo checks
 * every scalar of every call it recognises. */
static inline int tj__scalar_fits(const tj__param *p, const tj_arg *arg) {
  if (p->dtype.code == kDLBool) return arg->kind == TJ_ARG_BOOL;
  if (p->dtype.code == kDLFloat)
    return ((arg->kind == TJ_ARG_FLOAT && !(arg->flags & TJ_ARG_OUT_OF_RANGE)) ||
            (arg->kind == TJ_ARG_INT && !tj__int_beyond_double(arg))) &&
           (p->dtype.bits != 32 || !tj__float32_overflows(tj__float_value(arg)));
  if (arg->kind != TJ_ARG_INT || (arg->flags & TJ_ARG_OUT_OF_RANGE)) return 0;
  if (arg->flags & TJ_ARG_UNSIGNED) return p->dtype.code == kDLUInt && p->dtype.bits == 64;
  int64_t v = arg->value.i;
  if (p->dtype.code == kDLInt) {
    int64_t hi = p->dtype.bits == 64 ? INT64_MAX : ((int64_t)1 << (p->dtype.bits - 1)) - 1;
    return v >= -hi - 1 && v <= hi;
  }
  return v >= 0 && (p->dtype.bits == 64 || v <= ((int64_t)1 << p->dtype.bits) - 1);
}

/* What tj__scalar_fits concludes for the commonest arguments, worked out once
 * per scalar parameter (the memo keeps it for each scalar input): an INT
 * without flags fits when lo <= value <= hi (lo > hi: no INT does); a FLOAT
 * without flags fits always (`floats` 1), unless it overflows float32 (2), or
 * never (0). `known` 0: not worked out (not a scalar of the dtypes scalars
 * take): tj__scalar_fits answers every argument. */
typedef struct {
  int64_t lo, hi;
  int32_t floats;
  int32_t known;
} tj__scalar_range;

static inline tj__scalar_range tj__scalar_range_of(const tj__param *p) {
  tj__scalar_range r = {1, 0, 0, 1};
  const int bits = p->dtype.bits;
  const int int_bits = bits == 8 || bits == 16 || bits == 32 || bits == 64;
  if (p->kind != TJ_PARAM_SCALAR || p->dtype.lanes != 1) {
    r.known = 0;
  } else if (p->dtype.code == kDLBool) {
    /* takes BOOL alone: no INT, no FLOAT */
  } else if (p->dtype.code == kDLFloat && (bits == 16 || bits == 32 || bits == 64)) {
    /* any int64 is a double, and none overflows float32 */
    r.lo = INT64_MIN, r.hi = INT64_MAX, r.floats = bits == 32 ? 2 : 1;
  } else if (p->dtype.code == kDLInt && int_bits) {
    r.hi = bits == 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    r.lo = -r.hi - 1;
  } else if (p->dtype.code == kDLUInt && int_bits) {
    r.lo = 0, r.hi = bits == 64 ? INT64_MAX : ((int64_t)1 << bits) - 1;
  } else {
    r.known = 0;
  }
  return r;
}

/* tj__scalar_fits through the parameter's range: the same answer, fewer steps
 * for an INT or FLOAT without flags. */
static inline int tj__scalar_fits_range(const tj__scalar_range *r, const tj__param *p,
                                        const tj_arg *arg) {
  if (r->known && arg->flags == 0) {
    if (arg->kind == TJ_ARG_INT) return arg->value.i >= r->lo && arg->value.i <= r->hi;
    if (arg->kind == TJ_ARG_FLOAT)
      return r->floats == 1 || (r->floats == 2 && !tj__float32_overflows(arg->value.f));
  }
  return tj__scalar_fits(p, arg);
}

/* Checks tensor `arg` in place of input buffer parameter `index` of a bound
 * frame, every symbol keeping its value and the device the frame's: what a
 * bound launch's update allows (tj_bound_update). Borrows both. */
int tj__check_replacement(tj_frame *frame, int32_t index, const tj_arg *arg);

#endif /* TILEJIT_VALIDATE_H_ */
