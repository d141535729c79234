/*
 * The CUDA target's driver side (cuda.c): per-context modules of a kernel and
 * its launches.
 */
#ifndef TILEJIT_TARGET_CUDA_H_
#define TILEJIT_TARGET_CUDA_H_

#include "internal.h"

typedef struct tj__cuda_modules tj__cuda_modules;
/* Makes the kernel's (empty) per-context module cache, k->cuda. */
int tj__cuda_modules_create(tj_kernel *k);
/* Launches a bound CUDA frame (tj_call_launch checked the outputs). */
int tj__cuda_launch(const tj_frame *f);
/* Waits for the work enqueued on the frame's stream (cuStreamSynchronize). */
int tj__cuda_wait(const tj_frame *f);
/* Launches packed once (launch.h): configurations, tensor maps and parameter
 * arrays of frame `f`, made by tj__cuda_pack (*out owned by the caller, also
 * after a failure; free with tj__cuda_packed_free), packed again by
 * tj__cuda_repack after an argument changed, and enqueued on `stream` by
 * tj__cuda_replay, which loads no module while the stream is captured. */
typedef struct tj__cuda_packed tj__cuda_packed;
int tj__cuda_pack(const tj_frame *f, tj__cuda_packed **out);
int tj__cuda_repack(const tj_frame *f, tj__cuda_packed *p);
int tj__cuda_replay(const tj_frame *f, const tj__cuda_packed *p, void *stream);
void tj__cuda_packed_free(tj__cuda_packed *p);
/* A one-launch kernel's launch from arguments packed without a frame (the
 * memo's, tj__memo_pack): tj__cuda_config evaluates its configuration once
 * for the record, tj__cuda_launch_values enqueues it on `stream` in device
 * `device`'s context (-1: no tensor says), as tj__cuda_launch would. */
int tj__cuda_config(const tj_frame *f, int64_t cfg[10]);
int tj__cuda_launch_values(const tj_kernel *k, int32_t device, const int64_t cfg[10],
                           const tj_value *values, void *stream);
/* 1 when `stream` is being captured into a CUDA graph (the driver says so);
 * 0 otherwise, or with no driver loaded. */
int tj__cuda_capturing(const tj_kernel *k, void *stream);
/* Unloads the kernel's modules from their contexts and frees k->cuda. */
void tj__cuda_free(tj_kernel *k);
/* Closes the driver and forgets the retained primary contexts, so that the
 * next CUDA call loads a driver afresh (TILEJIT_LIBCUDA read again). For
 * tests only: no CUDA kernel with loaded modules may be alive. */
void tj__cuda_unload_driver(void);

#endif /* TILEJIT_TARGET_CUDA_H_ */
