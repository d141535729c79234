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

/* A call with nothing to allocate, checked and packed without a frame by the
 * memo (tj__memo_pack) as tj_call_bind and the launch would have: what its
 * launch needs. */
typedef struct {
  tj_value values[TJ_MAX_ABI_ARGS]; /* the kernel function's arguments (CUDA: launch 0's) */
  /* CUDA alone: */
  DLDevice device; /* the tensors' (has_device), as tj_frame.device */
  int32_t has_device;
  int32_t first_tensor; /* the caller argument whose producer gives the stream; -1: none */
  int64_t cfg[10];      /* the launch's grid, block, shared memory and cluster */
} tj__hit;

/* Runs a packed call: a CPU kernel now (`stream` must be NULL), a CUDA kernel
 * enqueued on `stream`. */
int tj__launch_values(const tj_kernel *k, const tj__hit *hit, void *stream);

/* Runs a call the memo packed (tj__memo_pack, or tj__memo_take for each input
 * and tj__memo_close) on the stream tj_call_run would choose (the call's
 * stream=, else the producer's current one), the host's lock dropped as for
 * any launch (call.c). */
int tj__call_hit(const tj_kernel *k, const tj_call *call, const tj_call_binding *b,
                 const tj__hit *hit);

#endif /* TILEJIT_LAUNCH_H_ */
