/* Packing bound arguments and running the kernel. */
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

int tj_call_launch(tj_frame *f) {
  TJ__REFUSE_NULL("tj_call_launch", f);
  const tj_kernel *k = f->kernel;
  for (int32_t o = 0; o < k->nallocs; ++o)
    if (f->params[k->output_params[o]] == NULL)
      return tj_set_error(TJ_ERUNTIME, "%s: %s '%s' was not allocated", k->name,
                          o < k->noutputs ? "output" : "workspace",
                          k->params[k->output_params[o]].name);
  if (k->target == TJ_TARGET_CUDA) return tj__cuda_launch(f);
  if (f->stream != NULL)
    return tj_set_error(TJ_EVALUE,
                        "%s: a stream was given to a cpu kernel, which runs synchronously on the "
                        "calling thread (pass stream=None or 0)",
                        k->name);
  if (k->entry == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: no kernel library is loaded", k->name);
  if (k->zero_fill) zero_workspaces(f);
  tj_value values[TJ_MAX_ABI_ARGS];
  pack(f, values);
  int32_t status = k->entry(values);
  if (status != 0)
    return tj_set_error(TJ_ERUNTIME, "%s: the kernel returned status %d (0 is success)", k->name,
                        (int)status);
  return TJ_OK;
}
