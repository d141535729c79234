/* Packing bound arguments and running the kernel: at once (tj_call_launch), or
 * packed once and run again (tj__launch_pack, for bound launches). */
#include "launch.h"

#include "frame.h"
#include "internal.h"
#include "target_cuda.h"

/* Writes the kernel function's argument list (the kernel's ABI entries):
 * pointers, scalars, and symbols or expressions as integers. tj_call_bind
 * evaluated every expression once, so none fails here. */
static void pack(const tj_frame *f, tj_value *values) {
  const tj_kernel *k = f->kernel;
  for (int32_t a = 0; a < k->nabi; ++a) {
    const tj_abi_arg *entry = &k->abi[a];
    if (entry->source != TJ_ABI_PARAM) {
      tj__abi_integer(f, entry, &values[a].i);
      continue;
    }
    const int32_t i = entry->index;
    const tj__param *p = &k->params[i];
    const tj_arg *arg = f->params[i];
    if (p->kind == TJ_PARAM_SCALAR) {
      if (p->dtype.code == kDLFloat)
        values[a].f = tj__float_value(arg);
      else
        values[a].i = arg->value.i;
    } else if (p->kind == TJ_PARAM_POINTER && arg->kind != TJ_ARG_TENSOR) {
      values[a].p = arg->kind == TJ_ARG_NONE ? NULL : arg->value.p;
    } else {
      values[a].p = tj__tensor_address(arg);
    }
  }
}

/* Zero-fills the workspaces that ask for it: the kernel runs right here, on
 * this thread, so a memset is in order. */
static void zero_workspaces(const tj_frame *f) {
  const tj_kernel *k = f->kernel;
  for (int32_t o = k->noutputs; o < k->nallocs; ++o) {
    int64_t bytes;
    void *address = tj__workspace_to_zero(f, o, &bytes);
    if (address != NULL) memset(address, 0, (size_t)bytes);
  }
}

/* Every output and workspace was set (tj_call_set_output). */
static int check_allocated(const tj_frame *f) {
  const tj_kernel *k = f->kernel;
  for (int32_t o = 0; o < k->nallocs; ++o)
    if (f->params[k->output_params[o]] == NULL)
      return tj_set_error(TJ_ERUNTIME, "%s: %s '%s' was not allocated", k->name,
                          o < k->noutputs ? "output" : "workspace",
                          k->params[k->output_params[o]].name);
  return TJ_OK;
}

/* A CPU kernel runs on the calling thread, with no stream. */
static int cpu_ready(const tj_kernel *k, const void *stream) {
  if (stream != NULL)
    return tj_set_error(TJ_EVALUE,
                        "%s: a stream was given to a cpu kernel, which runs synchronously on the "
                        "calling thread (pass stream=None or 0)",
                        k->name);
  if (k->entry == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: no kernel library is loaded", k->name);
  return TJ_OK;
}

/* Calls a CPU kernel's function on its packed arguments. */
static int cpu_enter(const tj_kernel *k, const tj_value *values) {
  int32_t status = k->entry(values);
  if (status != 0)
    return tj_set_error(TJ_ERUNTIME, "%s: the kernel returned status %d (0 is success)", k->name,
                        (int)status);
  return TJ_OK;
}

/* Runs a CPU kernel on its packed arguments. */
static int cpu_run(const tj_frame *f, const tj_value *values) {
  if (f->kernel->zero_fill) zero_workspaces(f);
  return cpu_enter(f->kernel, values);
}

int tj_call_launch(tj_frame *f) {
  TJ__REFUSE_NULL("tj_call_launch", f);
  const tj_kernel *k = f->kernel;
  int rc = check_allocated(f);
  if (rc) return rc;
  if (k->target == TJ_TARGET_CUDA) return tj__cuda_launch(f);
  if ((rc = cpu_ready(k, f->stream))) return rc;
  tj_value values[TJ_MAX_ABI_ARGS];
  pack(f, values);
  return cpu_run(f, values);
}

int tj__launch_values(const tj_kernel *k, const tj__hit *hit, void *stream) {
  if (k->target == TJ_TARGET_CUDA)
    return tj__cuda_launch_values(k, hit->has_device ? hit->device.device_id : -1, hit->cfg,
                                  hit->values, stream);
  int rc = cpu_ready(k, stream);
  return rc ? rc : cpu_enter(k, hit->values);
}

int tj__launch_pack(const tj_frame *f, tj__packed *p) {
  const tj_kernel *k = f->kernel;
  p->cuda = NULL;
  int rc = check_allocated(f);
  if (rc) return rc;
  if (k->target == TJ_TARGET_CUDA) return tj__cuda_pack(f, &p->cuda);
  if ((rc = cpu_ready(k, NULL))) return rc;
  pack(f, p->values);
  return TJ_OK;
}

int tj__launch_repack(const tj_frame *f, tj__packed *p) {
  if (f->kernel->target == TJ_TARGET_CUDA) return tj__cuda_repack(f, p->cuda);
  pack(f, p->values);
  return TJ_OK;
}

int tj__launch_replay(const tj_frame *f, const tj__packed *p, void *stream) {
  if (f->kernel->target == TJ_TARGET_CUDA) return tj__cuda_replay(f, p->cuda, stream);
  int rc = cpu_ready(f->kernel, stream);
  return rc ? rc : cpu_run(f, p->values);
}

void tj__launch_unpack(tj__packed *p) {
  tj__cuda_packed_free(p->cuda);
  p->cuda = NULL;
}
