/*
 * Builders shared by the tests: expressions, common kernel signatures, and
 * DLTensors that own their shape/strides arrays. All of them CHECK their own
 * tj_ calls, so tests read as the scenario they exercise.
 */
#ifndef TILEJIT_TESTS_BUILDERS_H_
#define TILEJIT_TESTS_BUILDERS_H_

#include "harness.h"

#define TJT_DTYPE(code, bits) ((DLDataType){(uint8_t)(code), (uint8_t)(bits), 1})
#define TJT_F32 TJT_DTYPE(kDLFloat, 32)
#define TJT_F64 TJT_DTYPE(kDLFloat, 64)

/* 64 KiB of zeroed, 64-byte-aligned scratch for tensors validation never
 * reads. */
extern char tjt_data[1 << 16];

/* Registers a one-op expression and returns its id. */
int32_t tjt_const(tj_kernel *k, int64_t value);
int32_t tjt_sym(tj_kernel *k, int32_t symbol);
/* Registers an RPN program of `n` (op, operand) pairs; returns its id. */
int32_t tjt_expr(tj_kernel *k, const char *text, int32_t n, const int64_t *code);
/* Registers `sym op value` (e.g. n + 1, ceildiv(n, 4)); returns its id. */
int32_t tjt_binop_const(tj_kernel *k, const char *text, int32_t symbol, tj_op op, int64_t value);

/* Declares a buffer parameter from expression ids (strides NULL: compact). */
void tjt_buffer(tj_kernel *k, int32_t index, const char *name, DLDataType dtype, int32_t ndim,
                const int32_t *shape, const int32_t *strides, int64_t align, uint32_t flags);

/* vec_add(A: (n,) f32, B: (n,) f32, C: (n,) f32), symbol n (divisibility
 * `div`); C gets `c_flags` (TJ_BUF_OUTPUT makes it an output). Finalized. */
/* The path of the fixture library `name` (tests/fixtures, built by the Makefile):
 * from $TJT_FIXTURE_DIR if set (to run a moved test binary), else the directory
 * the Makefile built it in. */
void tjt_fixture_path(const char *name, char *buf, size_t size);

tj_kernel *tjt_vec_add(uint32_t c_flags, int64_t div);
/* reordered(A, B, C: (n,) float32, C with c_flags), whose function takes
 * (n + 1 as int32, C, `third`, A): B is validated but not passed. Finalized. */
tj_kernel *tjt_reordered(uint32_t c_flags, tj_abi_arg third);

/* A DLTensor together with the arrays it points into. Do not copy it once
 * initialised (t.shape/t.strides point into the struct). */
typedef struct {
  DLTensor t;
  int64_t shape[TJ_MAX_NDIM];
  int64_t strides[TJ_MAX_NDIM];
} tjt_tensor;

/* strides NULL leaves t.strides NULL (compact, as old producers say it). */
void tjt_tensor_init(tjt_tensor *tt, void *data, DLDataType dtype, int32_t ndim,
                     const int64_t *shape, const int64_t *strides);
/* A compact 1-d tensor of `n` elements with explicit strides {1}. */
void tjt_tensor_1d(tjt_tensor *tt, void *data, DLDataType dtype, int64_t n);
/* An argument borrowing tt's tensor. */
void tjt_arg_tensor(tj_arg *arg, tjt_tensor *tt, uint32_t flags);

#endif /* TILEJIT_TESTS_BUILDERS_H_ */
