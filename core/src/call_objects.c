/*
 * tj_call_objects: import, bind, allocate, launch in one call, for bindings whose
 * every foreign call is expensive (ctypes). It is the same sequence the Cython
 * wrapper runs step by step, over the same core functions.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The allocator's error callback; formats only when an allocation fails. */
typedef struct {
  const tj_kernel *kernel;
  int32_t param;
} alloc_context;

static void set_alloc_error(void *ctx, const char *kind, const char *message) {
  (void)kind;
  const alloc_context *c = ctx;
  char label[200];
  tj__param_label(c->kernel, c->param, label, sizeof(label));
  tj_set_error(TJ_ERUNTIME, "%s: %s: the producer could not allocate the output: %s",
               c->kernel->name, label, message ? message : "unknown error");
}

int tj_call_allocate_output(tj_frame *frame, int32_t i, const DLPackExchangeAPI *api, tj_arg *out,
                            void **object) {
  const tj_kernel *k = frame->kernel;
  *object = NULL;
  if (i < 0 || i >= k->noutputs)
    return tj_set_error(TJ_EVALUE, "%s: output index %d out of range", k->name, i);
  alloc_context context = {k, k->output_params[i]};
  DLTensor proto;
  memset(&proto, 0, sizeof(proto));
  proto.device = frame->device;
  proto.ndim = frame->out_ndim[i];
  proto.dtype = frame->out_dtype[i];
  proto.shape = frame->out_shape[i];
  DLManagedTensorVersioned *managed = NULL;
  if (api->managed_tensor_allocator(&proto, &managed, &context, set_alloc_error) != 0)
    return TJ_ERUNTIME;
  /* The object owns the tensor from here (to-object steals it, even on failure); the
   * view in `out` stays valid while the caller holds that object. */
  tj_arg_from_dltensor(out, &managed->dl_tensor, 0);
  if (api->managed_tensor_to_py_object_no_sync(managed, object) != 0) {
    *object = NULL;
    tj_arg_init(out);
    return TJ_EPYERR;
  }
  return tj_call_set_output(frame, i, out);
}

static _Thread_local int32_t last_failed;

int32_t tj_call_objects_failed(void) { return last_failed; }

int tj_call_objects(const tj_call_plan *plan, void *const *objects, void **outputs) {
  const tj_kernel *k = plan->kernel;
  const DLPackExchangeAPI *api = plan->api;
  int32_t nargs = k->ninputs;
  tj_arg args[TJ_MAX_PARAMS], outs[TJ_MAX_OUTPUTS];
  tj_frame frame;
  int rc;
  for (int32_t o = 0; o < k->noutputs; ++o) outputs[o] = NULL;
  if (api->dltensor_from_py_object_no_sync == NULL)
    return tj_set_error(TJ_EVALUE, "%s: the producer has no DLTensor view function", k->name);
  for (int32_t i = 0; i < nargs; ++i) tj_arg_init(&args[i]);
  if ((rc = tj_args_from_exchange(api->dltensor_from_py_object_no_sync, objects, args, nargs,
                                  &last_failed)) != TJ_OK)
    return rc;
  if ((rc = tj_call_bind(k, args, nargs, &frame)) != TJ_OK) return rc;

  for (int32_t o = 0; o < k->noutputs; ++o) {
    rc = tj_call_allocate_output(&frame, o, api, &outs[o], &outputs[o]);
    if (rc == TJ_EPYERR) last_failed = -1 - o;
    if (rc != TJ_OK) return rc;
  }

  if (frame.device.device_type != kDLCPU &&
      api->current_work_stream(frame.device.device_type, frame.device.device_id, &frame.stream) !=
          0) {
    last_failed = TJ_FAILED_STREAM;
    return TJ_EPYERR;
  }
  void *token = plan->unlock ? plan->unlock() : NULL;
  rc = tj_call_launch(&frame);
  if (plan->unlock) plan->lock(token);
  return rc;
}
