/* Builders shared by the tests (see builders.h). */
#include "builders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char tjt_data[1 << 16] __attribute__((aligned(64)));

int32_t tjt_expr(tj_kernel *k, const char *text, int32_t n, const int64_t *code) {
  int32_t id = -1;
  CHECK_OK(tj_kernel_add_expr(k, code, n, text, &id));
  CHECK(id >= 0);
  return id;
}

int32_t tjt_const(tj_kernel *k, int64_t value) {
  const int64_t code[] = {TJ_OP_CONST, value};
  return tjt_expr(k, "const", 1, code);
}

int32_t tjt_sym(tj_kernel *k, int32_t symbol) {
  const int64_t code[] = {TJ_OP_SYM, symbol};
  return tjt_expr(k, "sym", 1, code);
}

int32_t tjt_binop_const(tj_kernel *k, const char *text, int32_t symbol, tj_op op, int64_t value) {
  const int64_t code[] = {TJ_OP_SYM, symbol, TJ_OP_CONST, value, op, 0};
  return tjt_expr(k, text, 3, code);
}

void tjt_buffer(tj_kernel *k, int32_t index, const char *name, DLDataType dtype, int32_t ndim,
                const int32_t *shape, const int32_t *strides, int64_t align, uint32_t flags) {
  CHECK_OK(tj_kernel_set_buffer(k, index, name, dtype, ndim, shape, strides, align, flags));
}

#ifndef TJT_FIXTURE_DIR
#error "build with -DTJT_FIXTURE_DIR='\"/abs/path/to/build/fixtures\"'"
#endif

void tjt_fixture_path(const char *name, char *buf, size_t size) {
  const char *dir = getenv("TJT_FIXTURE_DIR");
  snprintf(buf, size, "%s/%s", dir && *dir ? dir : TJT_FIXTURE_DIR, name);
}

tj_kernel *tjt_vec_add(uint32_t c_flags, int64_t div) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("vec_add", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", div));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 2, "C", TJT_F32, 1, &n, NULL, 0, c_flags);
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

tj_kernel *tjt_reordered(uint32_t c_flags, tj_abi_arg third) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("reordered", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), n1 = tjt_binop_const(k, "n + 1", 0, TJ_OP_ADD, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 2, "C", TJT_F32, 1, &n, NULL, 0, c_flags);
  const tj_abi_arg abi[4] = {{TJ_ABI_EXPR, n1, TJT_DTYPE(kDLInt, 32)},
                             {TJ_ABI_PARAM, 2, {0, 0, 0}},
                             third,
                             {TJ_ABI_PARAM, 0, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, 4, abi));
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

void tjt_tensor_init(tjt_tensor *tt, void *data, DLDataType dtype, int32_t ndim,
                     const int64_t *shape, const int64_t *strides) {
  CHECK(ndim >= 0 && ndim <= TJ_MAX_NDIM);
  memset(tt, 0, sizeof(*tt));
  tt->t.data = data;
  tt->t.device.device_type = kDLCPU;
  tt->t.device.device_id = 0;
  tt->t.ndim = ndim;
  tt->t.dtype = dtype;
  for (int32_t d = 0; d < ndim; ++d) tt->shape[d] = shape[d];
  tt->t.shape = tt->shape;
  if (strides) {
    for (int32_t d = 0; d < ndim; ++d) tt->strides[d] = strides[d];
    tt->t.strides = tt->strides;
  }
  tt->t.byte_offset = 0;
}

void tjt_tensor_1d(tjt_tensor *tt, void *data, DLDataType dtype, int64_t n) {
  const int64_t one = 1;
  tjt_tensor_init(tt, data, dtype, 1, &n, &one);
}

void tjt_arg_tensor(tj_arg *arg, tjt_tensor *tt, uint32_t flags) {
  tj_arg_from_dltensor(arg, &tt->t, flags);
}
