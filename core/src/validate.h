/*
 * Argument validation and symbol binding (validate.c): the full checks of a
 * call, and the pieces of them the memo (memo.c) re-runs on a call it
 * recognises.
 */
#ifndef TILEJIT_VALIDATE_H_
#define TILEJIT_VALIDATE_H_

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

/* 1 when a scalar argument is of a kind the parameter takes, within range. */
int tj__scalar_fits(const tj__param *p, const tj_arg *arg);

/* Checks tensor `arg` in place of input buffer parameter `index` of a bound
 * frame, every symbol keeping its value and the device the frame's: what a
 * bound launch's update allows (tj_bound_update). Borrows both. */
int tj__check_replacement(tj_frame *frame, int32_t index, const tj_arg *arg);

#endif /* TILEJIT_VALIDATE_H_ */
