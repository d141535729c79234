/*
 * Helpers over a kernel's parameters and argument list and over a bound
 * frame, shared by the steps that validate (validate.c), launch on the CPU
 * (launch.c) and launch on CUDA (cuda.c).
 */
#include "frame.h"

#include <stdio.h>

void tj__param_label(const tj_kernel *k, int32_t index, char *buf, int32_t size) {
  const tj__param *p = &k->params[index];
  if (p->flags & TJ_BUF_WORKSPACE)
    snprintf(buf, (size_t)size, "workspace '%s'", p->name);
  else if (p->output >= 0)
    snprintf(buf, (size_t)size, "output '%s'", p->name);
  else
    snprintf(buf, (size_t)size, "argument %d '%s'", p->position, p->name);
}

int64_t tj__abi_bytes(const tj_kernel *k, const tj_abi_arg *a) {
  if (a->source == TJ_ABI_TENSORMAP) return TJ_TENSORMAP_BYTES;
  if (a->source == TJ_ABI_SYMBOL) return k->symbol_dtype[a->index].bits / 8;
  if (a->source == TJ_ABI_EXPR) return a->dtype.bits / 8;
  const tj__param *p = &k->params[a->index];
  return p->kind == TJ_PARAM_SCALAR ? tj__dtype_bytes(p->dtype) : (int64_t)sizeof(void *);
}

int tj__abi_integer(const tj_frame *f, const tj_abi_arg *a, int64_t *out) {
  if (a->source == TJ_ABI_SYMBOL) {
    *out = f->symbols[a->index];
    return TJ_OK;
  }
  const tj__expr *e = &f->kernel->exprs[a->index];
  if (e->sym >= 0) {
    *out = f->symbols[e->sym];
    return TJ_OK;
  }
  if (e->is_const) {
    *out = e->cval;
    return TJ_OK;
  }
  return tj_expr_eval(e->code, e->n, f->symbols, out);
}

void *tj__workspace_to_zero(const tj_frame *f, int32_t o, int64_t *bytes) {
  const int32_t i = f->kernel->output_params[o];
  if (!(f->kernel->params[i].flags & TJ_BUF_ZERO)) return NULL;
  /* tj_call_bind checked the size fits int64. */
  *bytes = tj__dtype_bytes(f->out_dtype[o]);
  for (int32_t d = 0; d < f->out_ndim[o]; ++d) *bytes *= f->out_shape[o][d];
  return *bytes > 0 ? tj__tensor_address(f->params[i]) : NULL;
}
