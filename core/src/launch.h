/*
 * A launch packed once and run again (launch.c): what a bound launch
 * (tj_bound, call.c) keeps between its calls. A CPU kernel's packed
 * arguments, or a CUDA kernel's evaluated configurations, encoded tensor maps
 * and parameter arrays (cuda.c). tj_call_launch runs the same steps at once.
 */
#ifndef TILEJIT_LAUNCH_H_
#define TILEJIT_LAUNCH_H_

#include "internal.h"
#include "target_cuda.h"

typedef struct {
  tj_value values[TJ_MAX_ABI_ARGS]; /* CPU: the kernel function's arguments */
  tj__cuda_packed *cuda;            /* CUDA: owned, NULL for a CPU kernel */
} tj__packed;

/* Packs frame `f`'s launch into *p (every output set, as tj_call_launch
 * requires); tj__launch_unpack frees what it made, also after a failure. */
int tj__launch_pack(const tj_frame *f, tj__packed *p);
/* Packs again after an argument of the frame changed (tj_bound_update). */
int tj__launch_repack(const tj_frame *f, tj__packed *p);
/* Runs the packed launch: a CPU kernel now (`stream` must be NULL), a CUDA
 * kernel enqueued on `stream`. */
int tj__launch_replay(const tj_frame *f, const tj__packed *p, void *stream);
void tj__launch_unpack(tj__packed *p);

/* Runs a CPU kernel with nothing to allocate on arguments packed without a
 * frame: by the memo (tj__memo_pack), which checked them as tj_call_bind would. */
int tj__launch_values(const tj_kernel *k, const tj_value *values);

#endif /* TILEJIT_LAUNCH_H_ */
