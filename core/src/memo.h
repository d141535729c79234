/*
 * The memo of the last calls that bound (memo.c), and binding a call with it:
 * a call whose arguments look like a recorded one (kinds, dtypes, devices,
 * shapes, strides, flags) is bound from the record after the checks that
 * depend on addresses and values alone; any other takes validate.c's full
 * checks, and is recorded when they pass. Thread-safe.
 */
#ifndef TILEJIT_MEMO_H_
#define TILEJIT_MEMO_H_

#include "internal.h"
#include "launch.h"

/* Makes k->memo at finalize; kernels it cannot serve keep NULL. */
int tj__memo_create(tj_kernel *k);
void tj__memo_free(tj_kernel *k);
/* 1 and a bound frame when the arguments match a record; 0 otherwise. */
int tj__memo_bind(const tj_kernel *k, tj_arg *args, tj_frame *frame);
/* A kernel with nothing to allocate (a CUDA kernel: one launch, no tensor
 * map): 1 and its launch packed into *hit when the arguments match the record
 * that matched last, the checks passed that tj_call_bind would make; 0
 * otherwise (bind them). */
int tj__memo_pack(const tj_kernel *k, tj_arg *args, tj__hit *hit);
/* Records a call the full checks accepted (and bound into `frame`). */
void tj__memo_store(const tj_kernel *k, const tj_arg *args, const tj_frame *frame);

/* The full checks (tj__bind_checked), recorded in the memo when they pass. */
int tj__bind_recorded(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame);

/* tj_call_bind, inline for the sequencer: a call the memo matches is bound
 * from it, any other takes the full checks. */
static inline int tj__bind(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  if (k->memo != NULL && nargs == k->ninputs && tj__memo_bind(k, args, frame)) return TJ_OK;
  return tj__bind_recorded(k, args, nargs, frame);
}

#endif /* TILEJIT_MEMO_H_ */
