/* Packing bound arguments and running the kernel. */
#include "internal.h"

static void *tensor_address(const tj_arg *arg) {
  if (arg == NULL || arg->kind != TJ_ARG_TENSOR) return NULL;
  return (char *)arg->tensor.data + arg->tensor.byte_offset;
}

/* Writes the kernel ABI's argument list: parameters in declaration order,
 * then every symbol as int64. */
static void pack(const tj_frame *f, tj_value *values) {
  const tj_kernel *k = f->kernel;
  for (int32_t i = 0; i < k->nparams; ++i) {
    const tj__param *p = &k->params[i];
    const tj_arg *arg = f->params[i];
    if (p->kind == TJ_PARAM_SCALAR) {
      if (p->dtype.code == kDLFloat)
        values[i].f = arg->kind == TJ_ARG_INT ? (double)arg->value.i : arg->value.f;
      else
        values[i].i = arg->value.i;
    } else if (p->kind == TJ_PARAM_POINTER && arg->kind != TJ_ARG_TENSOR) {
      values[i].p = arg->kind == TJ_ARG_NONE ? NULL : arg->value.p;
    } else {
      values[i].p = tensor_address(arg);
    }
  }
  for (int32_t s = 0; s < k->nsymbols; ++s) values[k->nparams + s].i = f->symbols[s];
}

int tj_call_launch(tj_frame *f) {
  const tj_kernel *k = f->kernel;
  for (int32_t o = 0; o < k->noutputs; ++o)
    if (f->params[k->output_params[o]] == NULL)
      return tj_set_error(TJ_ERUNTIME, "%s: output '%s' was not allocated", k->name,
                          k->params[k->output_params[o]].name);
  if (k->target == TJ_TARGET_CUDA) return tj__cuda_launch(f);
  if (f->stream != NULL)
    return tj_set_error(TJ_EVALUE,
                        "%s: a stream was given to a cpu kernel, which runs synchronously on the "
                        "calling thread (pass stream=None or 0)",
                        k->name);
  if (k->entry == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: no kernel library is loaded", k->name);
  tj_value values[TJ_MAX_PARAMS + TJ_MAX_SYMBOLS];
  pack(f, values);
  k->entry(values);
  return TJ_OK;
}
