/*
 * Validation and symbol binding (docs/validation.md, its tables and edge
 * rules): one test per row of the table or rule, each checking the status
 * code (TypeError / ValueError / RuntimeError classes) and the parts of the
 * message a user relies on: the kernel, the argument, what was expected.
 */
#include <math.h>
#include <stdio.h>

#include "builders.h"
#include "validate.h"

/* A two-input bind of vec_add(A, B) -> C with C an output. */
static int bind_ab(tj_kernel *k, tjt_tensor *a, uint32_t a_flags, tjt_tensor *b, uint32_t b_flags,
                   tj_frame *f) {
  tj_arg args[2];
  tjt_arg_tensor(&args[0], a, a_flags);
  tjt_arg_tensor(&args[1], b, b_flags);
  return tj_call_bind(k, args, 2, f);
}

static void set_device(tjt_tensor *tt, int32_t type, int32_t id) {
  tt->t.device.device_type = (DLDeviceType)type;
  tt->t.device.device_id = id;
}

/* k(A: (m, n) float32) with the given strides (NULL: compact), symbols m, n
 * and, when `stride_sym`, s (divisibility s_div) with strides (s, 1). */
static tj_kernel *matrix_kernel(const char *name, int stride_sym, int64_t s_div) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create(name, 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t shape[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  if (stride_sym) {
    CHECK_OK(tj_kernel_add_symbol(k, "s", s_div));
    int32_t strides[2] = {tjt_sym(k, 2), tjt_const(k, 1)};
    tjt_buffer(k, 0, "A", TJT_F32, 2, shape, strides, 0, 0);
  } else {
    tjt_buffer(k, 0, "A", TJT_F32, 2, shape, NULL, 0, 0);
  }
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

/* Binds a single 2-d float32 tensor of `shape` and `strides` to `k`. */
static int bind_matrix(tj_kernel *k, int64_t rows, int64_t cols, const int64_t *strides,
                       tj_frame *f) {
  const int64_t shape[2] = {rows, cols};
  tjt_tensor a;
  tjt_tensor_init(&a, tjt_data, TJT_F32, 2, shape, strides);
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  return tj_call_bind(k, &arg, 1, f);
}

TEST(validate_ok) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 1024);
  tjt_tensor_1d(&b, tjt_data + 4096, TJT_F32, 1024);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  tj_frame f;
  memset(&f, 0xcd, sizeof(f));
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK(f.kernel == k);
  CHECK(f.params[0] == &args[0]);
  CHECK(f.params[1] == &args[1]);
  CHECK(f.params[2] == NULL); /* the output, until set */
  CHECK_EQ_INT(f.symbols[0], 1024);
  CHECK_EQ_INT(f.has_device, 1);
  CHECK_EQ_INT(f.device.device_type, kDLCPU);
  CHECK_EQ_INT(f.device.device_id, 0);
  CHECK_EQ_INT(f.first_tensor, 0);
  CHECK(f.stream == NULL);
  CHECK_EQ_INT(f.out_ndim[0], 1);
  CHECK_EQ_INT(f.out_shape[0][0], 1024);
  CHECK_EQ_INT(f.out_dtype[0].code, kDLFloat);
  CHECK_EQ_INT(f.out_dtype[0].bits, 32);
  CHECK_EQ_INT(f.out_dtype[0].lanes, 1);
  tj_kernel_free(k);
}

TEST(validate_wrong_arg_count) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tj_arg args[3];
  for (int i = 0; i < 3; ++i) tjt_arg_tensor(&args[i], &a, 0);
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("vec_add: ");
  CHECK_ERROR_CONTAINS("expected 2 arguments (A, B), got 3");
  CHECK_STATUS(tj_call_bind(k, args, 1, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("got 1");
  CHECK_STATUS(tj_call_bind(k, args, 0, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("got 0");
  tj_kernel_free(k);
}

TEST(validate_non_tensor) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  tj_frame f;

  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_OTHER;
  args[1].type_name = "str";
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("expected a tensor");
  CHECK_ERROR_CONTAINS("str");

  args[1].type_name = NULL;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("argument 1 'B'");

  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = 3;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("got int");

  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_FLOAT;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("got float");
  tj_kernel_free(k);
}

TEST(validate_none_not_optional) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor b;
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tj_arg args[2];
  tj_arg_init(&args[0]);
  tjt_arg_tensor(&args[1], &b, 0);
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("None");
  CHECK_ERROR_CONTAINS("not optional");
  tj_kernel_free(k);
}

TEST(validate_optional_none) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("opt", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "bias", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OPTIONAL);
  CHECK_OK(tj_kernel_finalize(k));

  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  tj_arg_init(&args[1]);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK(f.params[1] == &args[1]);
  CHECK_EQ_INT(f.symbols[0], 8);

  /* Given a tensor, an optional parameter is validated like any other. */
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 9);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("opt: argument 1 'bias': ");
  tjt_tensor_1d(&b, tjt_data, TJT_F64, 8);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("dtype");
  tj_kernel_free(k);
}

TEST(validate_dtype) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tj_frame f;

  tjt_tensor_1d(&b, tjt_data, TJT_F64, 8);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("expected dtype float32, got float64");

  tjt_tensor_1d(&b, tjt_data, TJT_DTYPE(kDLInt, 32), 8);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("got int32");

  tjt_tensor_1d(&b, tjt_data, ((DLDataType){kDLFloat, 32, 4}), 8);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("got float32x4");

  tjt_tensor_1d(&b, tjt_data, TJT_DTYPE(kDLBfloat, 16), 8);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("got bfloat16");
  tj_kernel_free(k);
}

TEST(validate_ndim) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  const int64_t shape[2] = {2, 4};
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, shape, NULL);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("expected a 1-d tensor, got 2-d");
  CHECK_ERROR_CONTAINS("(2, 4)");

  tjt_tensor_init(&b, tjt_data, TJT_F32, 0, NULL, NULL);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("got 0-d");
  tj_kernel_free(k);
}

TEST(validate_static_dim) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("static", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t shape[2] = {tjt_const(k, 4), tjt_sym(k, 0)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, shape, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tj_frame f;
  CHECK_STATUS(bind_matrix(k, 5, 8, NULL, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("static: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("expected shape[0] == 4, got 5");
  CHECK_OK(bind_matrix(k, 4, 8, NULL, &f));
  CHECK_EQ_INT(f.symbols[0], 8);
  tj_kernel_free(k);
}

TEST(validate_symbol_conflict) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 1024);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 1000);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': expected shape[0] == n (= 1024, bound by argument 0 "
               "'A'), got 1000");
  tj_kernel_free(k);
}

TEST(validate_expression_mismatch) {
  /* expr(B: (n + 1,), A: (n,)): B's expression comes first, so it can only
   * be checked once A has bound n. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("expr", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  int32_t n1 = tjt_binop_const(k, "n + 1", 0, TJ_OP_ADD, 1);
  tjt_buffer(k, 0, "B", TJT_F32, 1, &n1, NULL, 0, 0);
  tjt_buffer(k, 1, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &b, 0, &a, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("expr: argument 0 'B': ");
  CHECK_ERROR_CONTAINS("expected shape[0] == n + 1 (= 9), got 8");
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 9);
  CHECK_OK(bind_ab(k, &b, 0, &a, 0, &f));
  CHECK_EQ_INT(f.symbols[0], 8);
  tj_kernel_free(k);
}

TEST(validate_divisibility) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 16);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 1000);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 1000);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("divisible by 16");
  CHECK_ERROR_CONTAINS("1000");
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 1024);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 1024);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 0); /* 0 is divisible by anything */
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 0);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  tj_kernel_free(k);
}

TEST(validate_non_compact) {
  tj_kernel *k = matrix_kernel("mat", 0, 1);
  tj_frame f;
  const int64_t column_major[2] = {1, 4};
  CHECK_STATUS(bind_matrix(k, 4, 3, column_major, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("mat: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("compact");
  CHECK_ERROR_CONTAINS("(3, 1)"); /* what was expected */
  CHECK_ERROR_CONTAINS("(1, 4)"); /* what was found */
  const int64_t padded[2] = {6, 1};
  CHECK_STATUS(bind_matrix(k, 4, 3, padded, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("compact");
  const int64_t compact[2] = {3, 1};
  CHECK_OK(bind_matrix(k, 4, 3, compact, &f));
  CHECK_EQ_INT(f.symbols[0], 4);
  CHECK_EQ_INT(f.symbols[1], 3);
  tj_kernel_free(k);
}

TEST(validate_stride_mismatch) {
  tj_kernel *k = matrix_kernel("strided", 1, 1);
  tj_frame f;
  const int64_t bad[2] = {5, 2};
  CHECK_STATUS(bind_matrix(k, 4, 3, bad, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("strided: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("expected stride[1] == 1, got 2");
  const int64_t good[2] = {5, 1};
  CHECK_OK(bind_matrix(k, 4, 3, good, &f));
  CHECK_EQ_INT(f.symbols[2], 5);
  tj_kernel_free(k);
}

TEST(validate_symbols_from_strides) {
  /* two(A: (m, n) strides (s, 1), B: (m, n) strides (s, 1), C: (s,)); s has
   * divisibility 4 and is bound by A's stride. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("two", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "s", 4));
  int32_t shape[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  int32_t strides[2] = {tjt_sym(k, 2), tjt_const(k, 1)};
  int32_t s = tjt_sym(k, 2);
  tjt_buffer(k, 0, "A", TJT_F32, 2, shape, strides, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 2, shape, strides, 0, 0);
  tjt_buffer(k, 2, "C", TJT_F32, 1, &s, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));

  const int64_t shape43[2] = {4, 3};
  const int64_t st8[2] = {8, 1}, st12[2] = {12, 1}, st5[2] = {5, 1};
  tjt_tensor a, b, c;
  tj_arg args[3];
  tj_frame f;
  tjt_tensor_init(&a, tjt_data, TJT_F32, 2, shape43, st8);
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, shape43, st8);
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  tjt_arg_tensor(&args[2], &c, 0);
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  CHECK_EQ_INT(f.symbols[0], 4);
  CHECK_EQ_INT(f.symbols[1], 3);
  CHECK_EQ_INT(f.symbols[2], 8);

  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, shape43, st12);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "two: argument 1 'B': expected stride[0] == s (= 8, bound by argument 0 'A'), "
               "got 12");

  /* A stride-bound symbol checks a shape elsewhere. */
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, shape43, st8);
  tjt_arg_tensor(&args[1], &b, 0);
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 9);
  tjt_arg_tensor(&args[2], &c, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("two: argument 2 'C': ");
  CHECK_ERROR_CONTAINS("s (= 8");

  /* Divisibility applies to symbols bound from strides too. */
  tjt_tensor_init(&a, tjt_data, TJT_F32, 2, shape43, st5);
  tjt_arg_tensor(&args[0], &a, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("two: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("divisible by 4");
  tj_kernel_free(k);
}

TEST(validate_misaligned) {
  tj_kernel *k = tjt_vec_add(0, 1);
  tjt_tensor a, b, c;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  tj_arg args[3];
  tj_frame f;
  /* byte_offset is part of the address checked. */
  b.t.byte_offset = 2;
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  tjt_arg_tensor(&args[2], &c, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("aligned to 4 bytes");
  /* A misaligned base made whole by byte_offset is fine... */
  b.t.data = tjt_data + 1;
  b.t.byte_offset = 3;
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  /* ...and the reverse is not. */
  b.t.byte_offset = 0;
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("aligned to 4 bytes");
  tj_kernel_free(k);

  /* align=16 declared */
  CHECK_OK(tj_kernel_create("aligned", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 16, 0);
  CHECK_OK(tj_kernel_finalize(k));
  a.t.byte_offset = 4;
  tjt_arg_tensor(&args[0], &a, 0);
  CHECK_STATUS(tj_call_bind(k, args, 1, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("aligned: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("aligned to 16 bytes");
  a.t.byte_offset = 32;
  tjt_arg_tensor(&args[0], &a, 0);
  CHECK_OK(tj_call_bind(k, args, 1, &f));
  tj_kernel_free(k);
}

TEST(validate_wrong_device_type) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  static const struct {
    int32_t type;
    const char *name;
  } foreign[] = {
      {kDLCUDA, "cuda"},       {kDLROCM, "rocm"},   {kDLOneAPI, "oneapi"},
      {kDLVulkan, "vulkan"},   {kDLMetal, "metal"}, {kDLCUDAManaged, "cuda_managed"},
      {99, "device_type(99)"},
  };
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tj_frame f;
  char want[64];
  for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); ++i) {
    set_device(&a, foreign[i].type, 0);
    CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
    CHECK_ERROR_STARTS_WITH("vec_add: argument 0 'A': ");
    CHECK_ERROR_CONTAINS("cpu");
    snprintf(want, sizeof(want), "%s:0", foreign[i].name);
    CHECK_ERROR_CONTAINS(want);
  }
  /* The second tensor is checked too, not only the first. */
  set_device(&a, kDLCPU, 0);
  set_device(&b, kDLOneAPI, 1);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("oneapi:1");
  tj_kernel_free(k);

  /* And a CUDA kernel rejects host tensors. */
  CHECK_OK(tj_kernel_create("gpu_add", 1, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("gpu_add: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("cuda");
  CHECK_ERROR_CONTAINS("cpu:0");
  set_device(&a, kDLCUDA, 0);
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  CHECK_EQ_INT(f.device.device_type, kDLCUDA);
  tj_kernel_free(k);
}

TEST(validate_different_devices) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  set_device(&b, kDLCPU, 1);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("cpu:0");
  CHECK_ERROR_CONTAINS("argument 0 'A'");
  CHECK_ERROR_CONTAINS("cpu:1");
  /* The same device on both is fine, whatever its id. */
  set_device(&a, kDLCPU, 1);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  CHECK_EQ_INT(f.device.device_id, 1);
  tj_kernel_free(k);

  CHECK_OK(tj_kernel_create("gpu_two", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  set_device(&a, kDLCUDA, 0);
  set_device(&b, kDLCUDA, 1);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("cuda:0");
  CHECK_ERROR_CONTAINS("cuda:1");
  tj_kernel_free(k);
}

static void count_delete(DLManagedTensorVersioned *self) { ++*(int *)self->manager_ctx; }

TEST(validate_read_only) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, TJ_ARG_READ_ONLY, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("read-only");
  CHECK_ERROR_CONTAINS("const");

  /* Through a real versioned import with the READ_ONLY flag. */
  int deletes = 0;
  DLManagedTensorVersioned m;
  memset(&m, 0, sizeof(m));
  m.version.major = 1;
  m.version.minor = 3;
  m.manager_ctx = &deletes;
  m.deleter = count_delete;
  m.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  m.dl_tensor = b.t;
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  CHECK_OK(tj_arg_from_versioned(&args[1], &m, NULL));
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("read-only");
  tj_arg_release(&args[1]);
  CHECK_EQ_INT(deletes, 1);
  tj_kernel_free(k);

  /* const=True accepts it. */
  CHECK_OK(tj_kernel_create("constk", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(bind_ab(k, &a, TJ_ARG_READ_ONLY, &b, 0, &f));
  CHECK_STATUS(bind_ab(k, &a, TJ_ARG_READ_ONLY, &b, TJ_ARG_READ_ONLY, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("constk: argument 1 'B': ");
  tj_kernel_free(k);
}

TEST(validate_negative_stride) {
  const int64_t back = -1;
  tjt_tensor a, b;
  tj_frame f;
  tj_arg arg;

  /* A symbol stride never binds a negative value. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("neg", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "s", 1));
  int32_t n = tjt_sym(k, 0), s = tjt_sym(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, &s, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  const int64_t four = 4;
  tjt_tensor_init(&a, tjt_data + 64, TJT_F32, 1, &four, &back);
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("neg: argument 0 'A': ");
  CHECK_ERROR_CONTAINS("negative");
  tj_kernel_free(k);

  /* Compact never has negative strides. */
  k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 4);
  CHECK_STATUS(bind_ab(k, &b, 0, &a, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 1 'B': ");
  CHECK_ERROR_CONTAINS("compact");
  tj_kernel_free(k);

  /* Declared as a constant, it is accepted, and only it. */
  CHECK_OK(tj_kernel_create("flip", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  n = tjt_sym(k, 0);
  int32_t minus_one = tjt_const(k, -1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, &minus_one, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  CHECK_EQ_INT(f.symbols[0], 4);
  tjt_arg_tensor(&arg, &b, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected stride[0] == -1, got 1");
  tj_kernel_free(k);
}

TEST(validate_null_strides_compact) {
  tj_frame f;
  tj_kernel *k = matrix_kernel("mat", 0, 1);
  CHECK_OK(bind_matrix(k, 4, 3, NULL, &f));
  CHECK_EQ_INT(f.symbols[0], 4);
  CHECK_EQ_INT(f.symbols[1], 3);
  tj_kernel_free(k);

  /* Declared strides read NULL as the compact ones: s binds 3. */
  k = matrix_kernel("strided", 1, 1);
  CHECK_OK(bind_matrix(k, 4, 3, NULL, &f));
  CHECK_EQ_INT(f.symbols[2], 3);
  tj_kernel_free(k);

  /* NULL strides against a non-compact declaration is a mismatch. */
  CHECK_OK(tj_kernel_create("colmajor", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t shape[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  int32_t strides[2] = {tjt_const(k, 1), tjt_sym(k, 0)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, shape, strides, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_STATUS(bind_matrix(k, 4, 3, NULL, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("stride[0]");
  const int64_t cm[2] = {1, 4};
  CHECK_OK(bind_matrix(k, 4, 3, cm, &f));
  tj_kernel_free(k);
}

TEST(validate_size1_strides_ignored) {
  tj_frame f;
  tj_kernel *k = matrix_kernel("mat", 0, 1);
  const int64_t odd_row[2] = {99, 1};
  CHECK_OK(bind_matrix(k, 1, 3, odd_row, &f));
  const int64_t odd_col[2] = {1, 42};
  CHECK_OK(bind_matrix(k, 4, 1, odd_col, &f));
  const int64_t zeros[2] = {0, 0};
  CHECK_OK(bind_matrix(k, 1, 1, zeros, &f));
  /* Only size-1 dims are exempt. */
  CHECK_STATUS(bind_matrix(k, 2, 1, zeros, &f), TJ_EVALUE);
  tj_kernel_free(k);

  k = matrix_kernel("strided", 1, 1);
  /* The constant 1 of a size-1 dim is not enforced... */
  const int64_t st[2] = {5, 7};
  CHECK_OK(bind_matrix(k, 4, 1, st, &f));
  CHECK_EQ_INT(f.symbols[2], 5);
  /* ...and a still-unbound symbol simply takes the value given. */
  const int64_t st9[2] = {9, 1};
  CHECK_OK(bind_matrix(k, 1, 3, st9, &f));
  CHECK_EQ_INT(f.symbols[2], 9);
  tj_kernel_free(k);
}

TEST(validate_zero_size) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  const int64_t zero = 0, weird = -5;
  /* Misaligned pointer and a negative stride: neither matters when there
   * is nothing to address. */
  tjt_tensor_init(&a, tjt_data + 1, TJT_F32, 1, &zero, &weird);
  tjt_tensor_init(&b, NULL, TJT_F32, 1, &zero, NULL);
  b.t.byte_offset = 3;
  tj_frame f;
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  CHECK_EQ_INT(f.symbols[0], 0);
  CHECK_EQ_INT(f.out_shape[0][0], 0);
  /* The shape is still checked. */
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 1);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  tj_kernel_free(k);

  k = matrix_kernel("mat", 0, 1);
  const int64_t st[2] = {1, 7};
  CHECK_OK(bind_matrix(k, 0, 3, st, &f));
  CHECK_OK(bind_matrix(k, 3, 0, st, &f));
  tj_kernel_free(k);

  k = matrix_kernel("strided", 1, 1);
  const int64_t st2[2] = {5, 2};
  CHECK_OK(bind_matrix(k, 0, 3, st2, &f));
  tj_kernel_free(k);
}

/* scal(A: (n,), s: int8, u: uint8, i: int32, w: int64) */
static tj_kernel *scalar_kernel(void) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("scal", 5, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "s", TJT_DTYPE(kDLInt, 8)));
  CHECK_OK(tj_kernel_set_scalar(k, 2, "u", TJT_DTYPE(kDLUInt, 8)));
  CHECK_OK(tj_kernel_set_scalar(k, 3, "i", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_set_scalar(k, 4, "w", TJT_DTYPE(kDLInt, 64)));
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

/* A finalized CPU kernel `name` of `n` scalar parameters, names[i] of
 * dtypes[i], and nothing else. */
static tj_kernel *scalars_only_kernel(const char *name, int32_t n, const char *const *names,
                                      const DLDataType *dtypes) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create(name, n, TJ_TARGET_CPU, &k));
  for (int32_t i = 0; i < n; ++i) CHECK_OK(tj_kernel_set_scalar(k, i, names[i], dtypes[i]));
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

static int bind_ints(tj_kernel *k, int64_t s, int64_t u, int64_t i, int64_t w, uint32_t w_flags) {
  static tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tj_arg args[5];
  tjt_arg_tensor(&args[0], &a, 0);
  const int64_t values[4] = {s, u, i, w};
  for (int j = 0; j < 4; ++j) {
    tj_arg_init(&args[j + 1]);
    args[j + 1].kind = TJ_ARG_INT;
    args[j + 1].value.i = values[j];
  }
  args[4].flags = w_flags;
  tj_frame f;
  return tj_call_bind(k, args, 5, &f);
}

TEST(validate_scalar_int_range) {
  tj_kernel *k = scalar_kernel();
  CHECK_OK(bind_ints(k, 0, 0, 0, 0, 0));
  CHECK_STATUS(bind_ints(k, 300, 0, 0, 0, 0), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("scal: argument 1 's': ");
  CHECK_ERROR_CONTAINS("300");
  CHECK_ERROR_CONTAINS("out of range for int8");
  CHECK_OK(bind_ints(k, 127, 0, 0, 0, 0));
  CHECK_OK(bind_ints(k, -128, 0, 0, 0, 0));
  CHECK_STATUS(bind_ints(k, 128, 0, 0, 0, 0), TJ_EVALUE);
  CHECK_STATUS(bind_ints(k, -129, 0, 0, 0, 0), TJ_EVALUE);

  CHECK_OK(bind_ints(k, 0, 255, 0, 0, 0));
  CHECK_STATUS(bind_ints(k, 0, 256, 0, 0, 0), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("scal: argument 2 'u': ");
  CHECK_ERROR_CONTAINS("uint8");
  CHECK_STATUS(bind_ints(k, 0, -1, 0, 0, 0), TJ_EVALUE);

  CHECK_OK(bind_ints(k, 0, 0, INT32_MAX, 0, 0));
  CHECK_OK(bind_ints(k, 0, 0, INT32_MIN, 0, 0));
  CHECK_STATUS(bind_ints(k, 0, 0, (int64_t)INT32_MAX + 1, 0, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 3 'i'");

  CHECK_OK(bind_ints(k, 0, 0, 0, INT64_MAX, 0));
  CHECK_OK(bind_ints(k, 0, 0, 0, INT64_MIN, 0));
  /* The binding saw a Python int beyond 64 bits. */
  CHECK_STATUS(bind_ints(k, 0, 0, 0, 0, TJ_ARG_OUT_OF_RANGE), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("scal: argument 4 'w': ");
  CHECK_ERROR_CONTAINS("out of range for int64");
  tj_kernel_free(k);
}

TEST(validate_scalar_uint64_beyond_int64) {
  /* wide(u: uint64, i: int64, x: float64): the binding flags a Python int in
   * [2**63, 2**64) TJ_ARG_UNSIGNED and keeps its bits. */
  const char *const names[] = {"u", "i", "x"};
  const DLDataType dtypes[] = {TJT_DTYPE(kDLUInt, 64), TJT_DTYPE(kDLInt, 64), TJT_F64};
  tj_kernel *k = scalars_only_kernel("wide", 3, names, dtypes);
  tj_arg args[3];
  for (int j = 0; j < 3; ++j) {
    tj_arg_init(&args[j]);
    args[j].kind = TJ_ARG_INT;
    args[j].value.i = INT64_MIN; /* the bits of 2**63 */
    args[j].flags = TJ_ARG_UNSIGNED;
  }
  args[1].flags = 0;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  /* An int64 parameter cannot take it, and the message shows the value. */
  args[1].flags = TJ_ARG_UNSIGNED;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("wide: argument 1 'i': ");
  CHECK_ERROR_CONTAINS("value 9223372036854775808 is out of range for int64");
  tj_kernel_free(k);
}

TEST(validate_scalar_float32_range) {
  /* scale(x: float32, y: float64): a finite value that would round to inf as
   * a float32 is refused, naming it; inf, NaN and FLT_MAX's rounding neighbours
   * pass, and float64 takes any double. */
  const char *const names[] = {"x", "y"};
  const DLDataType dtypes[] = {TJT_F32, TJT_F64};
  tj_kernel *k = scalars_only_kernel("scale", 2, names, dtypes);
  tj_arg args[2];
  for (int j = 0; j < 2; ++j) {
    tj_arg_init(&args[j]);
    args[j].kind = TJ_ARG_FLOAT;
    args[j].value.f = 1e300;
  }
  tj_frame f;
  const double fits[] = {
      0x1.fffffep127, 0x1.fffffefffffffp127, -0x1.fffffefffffffp127, INFINITY, -INFINITY, NAN, 0.0,
      -1e38};
  for (size_t i = 0; i < sizeof(fits) / sizeof(fits[0]); ++i) {
    args[0].value.f = fits[i];
    CHECK_OK(tj_call_bind(k, args, 2, &f));
  }
  const double refused[] = {1e300, -1e300, 0x1.ffffffp127, -0x1.ffffffp127, 1e39};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i) {
    args[0].value.f = refused[i];
    CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
    CHECK_ERROR_STARTS_WITH("scale: argument 0 'x': value ");
    CHECK_ERROR_CONTAINS(" is out of range for float32 (it would round to inf)");
  }
  args[0].value.f = -1e300;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("value -1e+300 is out of range for float32");
  args[0].value.f = 3.5e38;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("value 3.5e+38 is out of range");
  tj_kernel_free(k);
}

TEST(validate_scalar_kinds) {
  /* kinds(x: float32, flag: bool, i: int32): no tensors at all */
  const char *const names[] = {"x", "flag", "i"};
  const DLDataType dtypes[] = {TJT_F32, TJT_DTYPE(kDLBool, 8), TJT_DTYPE(kDLInt, 32)};
  tj_kernel *k = scalars_only_kernel("kinds", 3, names, dtypes);
  tj_arg args[3];
  for (int j = 0; j < 3; ++j) tj_arg_init(&args[j]);
  args[0].kind = TJ_ARG_FLOAT;
  args[0].value.f = 1.5;
  args[1].kind = TJ_ARG_BOOL;
  args[1].value.i = 1;
  args[2].kind = TJ_ARG_INT;
  args[2].value.i = 7;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  CHECK_EQ_INT(f.has_device, 0);
  CHECK_EQ_INT(f.first_tensor, -1);
  CHECK_EQ_INT(f.device.device_type, kDLCPU);

  /* A float parameter takes an int... */
  args[0].kind = TJ_ARG_INT;
  args[0].value.i = 3;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  /* ...one beyond 64 bits too, as the double the binding made of it... */
  args[0].flags = TJ_ARG_OUT_OF_RANGE;
  args[0].value.f = 0x1p70;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  /* ...within float32's range... */
  args[0].value.f = -0x1p200;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("value -1.6069380442589903e+60 is out of range for float32");
  /* ...and not one too large for a double. */
  args[0].value.f = INFINITY;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 0 'x': value is an int too large for float32");
  args[0].flags = 0;
  /* ...but not a bool. */
  args[0].kind = TJ_ARG_BOOL;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("kinds: argument 0 'x': ");
  args[0].kind = TJ_ARG_FLOAT;

  /* A bool parameter takes only a bool. */
  args[1].kind = TJ_ARG_INT;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("kinds: argument 1 'flag': ");
  CHECK_ERROR_CONTAINS("bool");
  CHECK_ERROR_CONTAINS("got int");
  args[1].kind = TJ_ARG_FLOAT;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  args[1].kind = TJ_ARG_BOOL;

  /* An int parameter takes neither float, bool, None nor a tensor. */
  args[2].kind = TJ_ARG_FLOAT;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("kinds: argument 2 'i': ");
  CHECK_ERROR_CONTAINS("got float");
  args[2].kind = TJ_ARG_BOOL;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  args[2].kind = TJ_ARG_NONE;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("None");
  tjt_tensor t;
  tjt_tensor_1d(&t, tjt_data, TJT_F32, 1);
  tjt_arg_tensor(&args[2], &t, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("tensor");
  tj_kernel_free(k);
}

TEST(validate_pointer) {
  /* ptr(A: (n,), P: pointer align 16, Q: const pointer) */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("ptr", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_pointer(k, 1, "P", TJT_F32, 16, 0));
  CHECK_OK(tj_kernel_set_pointer(k, 2, "Q", TJT_F32, 0, TJ_BUF_CONST));
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a, t;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tjt_tensor_1d(&t, tjt_data + 256, TJT_F32, 4);
  tj_arg args[3];
  tjt_arg_tensor(&args[0], &a, 0);
  tj_arg_init(&args[1]);
  tj_arg_init(&args[2]);
  tj_frame f;

  args[1].kind = TJ_ARG_ADDRESS;
  args[1].value.p = (void *)(uintptr_t)0x1000;
  CHECK_OK(tj_call_bind(k, args, 3, &f)); /* Q is None */
  args[1].value.p = (void *)(uintptr_t)0x1004;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("ptr: argument 1 'P': ");
  CHECK_ERROR_CONTAINS("aligned to 16 bytes");
  /* A typed address must point to the declared element type, in host memory. */
  args[1].value.p = (void *)(uintptr_t)0x1000;
  args[1].tensor.dtype = TJT_F32;
  args[1].tensor.device.device_type = kDLCPU;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  args[1].tensor.dtype.bits = 16;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected a pointer to float32, got a pointer to float16");
  args[1].tensor.dtype = TJT_F32;
  args[1].tensor.device.device_type = kDLCUDA;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected a pointer to cpu memory, got one to cuda memory");
  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = 0x2000;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  args[1].kind = TJ_ARG_FLOAT;
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("expected a pointer");
  args[1].kind = TJ_ARG_OTHER;
  args[1].type_name = "list";
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_ETYPE);
  CHECK_ERROR_CONTAINS("list");

  /* A tensor: its data pointer, with device, read-only and alignment
   * checked but not its shape. */
  tjt_arg_tensor(&args[1], &t, 0);
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  tjt_arg_tensor(&args[1], &t, TJ_ARG_READ_ONLY);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("read-only");
  tjt_arg_tensor(&args[1], &t, 0);
  tjt_arg_tensor(&args[2], &t, TJ_ARG_READ_ONLY);
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  t.t.byte_offset = 4;
  tjt_arg_tensor(&args[1], &t, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("aligned to 16 bytes");
  t.t.byte_offset = 0;
  set_device(&t, kDLCUDA, 0);
  tjt_arg_tensor(&args[1], &t, 0);
  CHECK_STATUS(tj_call_bind(k, args, 3, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("cuda:0");
  tj_kernel_free(k);
}

TEST(validate_message_format) {
  /* mid(A, O, B) with O an output: caller positions skip outputs, so B is
   * argument 1, and the output is named as such. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("mid", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "O", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  tjt_buffer(k, 2, "B", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F64, 8);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("mid: argument 1 'B': expected dtype float32, got float64");

  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  CHECK(f.params[1] == NULL);
  tjt_tensor o;
  tjt_tensor_1d(&o, tjt_data, TJT_F32, 7);
  tj_arg out;
  tjt_arg_tensor(&out, &o, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("mid: output 'O': ");
  tj_kernel_free(k);
}

/* outs(A: (n,), O1: (n + 1,) float32 out, O2: (ceildiv(n, 4), 3) float64 out) */
static tj_kernel *outs_kernel(void) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("outs", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  int32_t n1 = tjt_binop_const(k, "n + 1", 0, TJ_OP_ADD, 1);
  int32_t o2[2] = {tjt_binop_const(k, "ceildiv(n, 4)", 0, TJ_OP_CEILDIV, 4), tjt_const(k, 3)};
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "O1", TJT_F32, 1, &n1, NULL, 0, TJ_BUF_OUTPUT);
  tjt_buffer(k, 2, "O2", TJT_F64, 2, o2, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

TEST(validate_output_shapes) {
  tj_kernel *k = outs_kernel();
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 10);
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  CHECK_EQ_INT(f.out_ndim[0], 1);
  CHECK_EQ_INT(f.out_shape[0][0], 11);
  CHECK_EQ_INT(f.out_dtype[0].bits, 32);
  CHECK_EQ_INT(f.out_ndim[1], 2);
  CHECK_EQ_INT(f.out_shape[1][0], 3);
  CHECK_EQ_INT(f.out_shape[1][1], 3);
  CHECK_EQ_INT(f.out_dtype[1].code, kDLFloat);
  CHECK_EQ_INT(f.out_dtype[1].bits, 64);

  tjt_tensor_1d(&a, tjt_data, TJT_F32, 12);
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  CHECK_EQ_INT(f.out_shape[0][0], 13);
  CHECK_EQ_INT(f.out_shape[1][0], 3);
  tj_kernel_free(k);

  /* An output of more bytes than 64 bits count is refused before any
   * allocator is asked; an empty one never is. */
  CHECK_OK(tj_kernel_create("big", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t nm[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  int32_t cube[3] = {tjt_sym(k, 0), tjt_sym(k, 0), tjt_sym(k, 1)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, nm, NULL, 0, 0);
  tjt_buffer(k, 1, "O", TJT_F32, 3, cube, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor b;
  const int64_t huge[2] = {(int64_t)1 << 31, 1}, empty[2] = {(int64_t)1 << 40, 0};
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, huge, NULL);
  tjt_arg_tensor(&arg, &b, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "big: output 'O': expected at most 2**63 - 1 bytes, got shape (2147483648, "
               "2147483648, 1) of float32");
  CHECK_EQ_INT(tj_last_error_info()->output, 0);
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, empty, NULL);
  tjt_arg_tensor(&arg, &b, 0);
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  tj_kernel_free(k);
}

TEST(validate_output_eval_error) {
  /* bad(A: (n,), B: (m,), O: (n - 20,) out, P: (ceildiv(n, m),) out) */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("bad", 4, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t n = tjt_sym(k, 0), m = tjt_sym(k, 1);
  int32_t o = tjt_binop_const(k, "n - 20", 0, TJ_OP_SUB, 20);
  const int64_t cd[] = {TJ_OP_SYM, 0, TJ_OP_SYM, 1, TJ_OP_CEILDIV, 0};
  int32_t p = tjt_expr(k, "ceildiv(n, m)", 3, cd);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &m, NULL, 0, 0);
  tjt_buffer(k, 2, "O", TJT_F32, 1, &o, NULL, 0, TJ_BUF_OUTPUT);
  tjt_buffer(k, 3, "P", TJT_F32, 1, &p, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a, b;
  tj_frame f;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 10);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 3);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("bad: output 'O': ");
  CHECK_ERROR_CONTAINS("n - 20");
  CHECK_ERROR_CONTAINS("negative");

  tjt_tensor_1d(&a, tjt_data, TJT_F32, 24);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 0);
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("bad: output 'P': ");
  CHECK_ERROR_CONTAINS("ceildiv(n, m)");
  CHECK_ERROR_CONTAINS("division by zero");

  tjt_tensor_1d(&b, tjt_data, TJT_F32, 5);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  CHECK_EQ_INT(f.out_shape[0][0], 4);
  CHECK_EQ_INT(f.out_shape[1][0], 5);
  tj_kernel_free(k);
}

TEST(validate_set_output) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b, c;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 8);
  tj_frame f;
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  tj_arg out;

  tj_arg_init(&out);
  CHECK_STATUS(tj_call_set_output(&f, 1, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("out of range");
  CHECK_STATUS(tj_call_set_output(&f, -1, &out), TJ_EVALUE);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("vec_add: output 'C': ");

  tjt_tensor_1d(&c, tjt_data, TJT_F32, 7);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: output 'C': ");
  CHECK_ERROR_CONTAINS("shape[0] == n (= 8");
  CHECK_ERROR_CONTAINS("got 7");
  /* The inputs bound n; the output must not be named as binding it. */
  CHECK(strstr(tj_last_error(), "bound by output") == NULL);

  tjt_tensor_1d(&c, tjt_data, TJT_F64, 8);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected dtype float32, got float64");

  tjt_tensor_1d(&c, tjt_data + 2, TJT_F32, 8);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("aligned");

  const int64_t eight = 8, two = 2;
  tjt_tensor_init(&c, tjt_data, TJT_F32, 1, &eight, &two);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("compact");

  /* Allocated on another device than the inputs: the allocator's fault. */
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  c.t.device.device_id = 1;
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("cpu:1");

  /* Failures leave the frame as it was. */
  CHECK(f.params[2] == NULL);
  CHECK_EQ_INT(f.device.device_type, kDLCPU);
  CHECK_EQ_INT(f.device.device_id, 0);
  CHECK_EQ_INT(f.symbols[0], 8);

  /* What an allocator returns, as asked, takes the short way: each way off it
   * still gets the full checks. */
  c.t.device.device_id = 0;
  tjt_arg_tensor(&out, &c, TJ_ARG_READ_ONLY);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("read-only");
  tjt_tensor_1d(&c, NULL, TJT_F32, 8);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK(f.params[2] == NULL);
  const int64_t one = 1;
  tjt_tensor_init(&c, tjt_data, TJT_F32, 1, &eight, &one); /* compact, strides given */
  tjt_arg_tensor(&out, &c, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK(f.params[2] == &out);
  f.params[2] = NULL;
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK(f.params[2] == &out);
  tj_kernel_free(k);
}

/* Outputs with expressions are checked against their values. */
TEST(validate_set_output_expressions) {
  tj_kernel *k = outs_kernel();
  tjt_tensor a, c;
  tj_frame f;
  tj_arg in, out;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 8);
  tjt_arg_tensor(&in, &a, 0);
  CHECK_OK(tj_call_bind(k, &in, 1, &f));
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 8);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("outs: output 'O1': ");
  CHECK_ERROR_CONTAINS("n + 1 (= 9)");
  tjt_tensor_1d(&c, tjt_data, TJT_F32, 9);
  tjt_arg_tensor(&out, &c, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  const int64_t o2[2] = {2, 3};
  tjt_tensor o;
  tjt_tensor_init(&o, tjt_data, TJT_F64, 2, o2, NULL);
  tj_arg out2;
  tjt_arg_tensor(&out2, &o, 0);
  CHECK_OK(tj_call_set_output(&f, 1, &out2));
  tj_kernel_free(k);
}

TEST(validate_output_only_tensor) {
  /* fill(x: float32, O: (4,) output) on CUDA: no input carries a device, so
   * the output's establishes the frame's (where the launch happens). */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("fill", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "x", TJT_F32));
  int32_t four = tjt_const(k, 4);
  tjt_buffer(k, 1, "O", TJT_F32, 1, &four, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  tj_arg x;
  tj_arg_init(&x);
  x.kind = TJ_ARG_FLOAT;
  x.value.f = 1.0;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &x, 1, &f));
  CHECK_EQ_INT(f.has_device, 0);
  CHECK_EQ_INT(f.out_shape[0][0], 4);

  tjt_tensor o;
  tj_arg out;
  /* A failed output leaves no device behind... */
  tjt_tensor_1d(&o, tjt_data, TJT_F32, 5);
  set_device(&o, kDLCUDA, 1);
  tjt_arg_tensor(&out, &o, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("fill: output 'O': ");
  CHECK_EQ_INT(f.has_device, 0);
  /* ...a good one records its own. */
  tjt_tensor_1d(&o, tjt_data, TJT_F32, 4);
  set_device(&o, kDLCUDA, 1);
  tjt_arg_tensor(&out, &o, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK_EQ_INT(f.has_device, 1);
  CHECK_EQ_INT(f.device.device_type, kDLCUDA);
  CHECK_EQ_INT(f.device.device_id, 1);
  tj_kernel_free(k);
}

TEST(validate_not_finalized) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("raw", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "x", TJT_F32));
  tj_arg arg;
  tj_arg_init(&arg);
  arg.kind = TJ_ARG_FLOAT;
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("not finalized");
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  tj_kernel_free(k);
}

TEST(finalize_rejects_unbound_symbol) {
  tj_kernel *k = NULL;
  /* A symbol used only in an output. */
  CHECK_OK(tj_kernel_create("outonly", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t n = tjt_sym(k, 0), m = tjt_sym(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "O", TJT_F32, 1, &m, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("outonly: ");
  CHECK_ERROR_CONTAINS("symbol 'm' is not bound by any input");
  tj_kernel_free(k);

  /* A symbol used only inside an expression. */
  CHECK_OK(tj_kernel_create("expronly", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  n = tjt_binop_const(k, "n + 1", 0, TJ_OP_ADD, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("symbol 'n' is not bound by any input");
  tj_kernel_free(k);

  /* A symbol used only by an optional input, which may be None. */
  CHECK_OK(tj_kernel_create("optonly", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OPTIONAL);
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("symbol 'n' is not bound by any input");
  tj_kernel_free(k);

  /* A stride binds as well as a dimension does. */
  CHECK_OK(tj_kernel_create("strideonly", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "s", 1));
  int32_t four = tjt_const(k, 4), s = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &four, &s, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tj_kernel_free(k);
}

TEST(kernel_construction_errors) {
  tj_kernel *k = NULL;
  CHECK_STATUS(tj_kernel_create("big", TJ_MAX_PARAMS + 1, TJ_TARGET_CPU, &k), TJ_EVALUE);
  CHECK(k == NULL);
  CHECK_STATUS(tj_kernel_create("neg", -1, TJ_TARGET_CPU, &k), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_create("tgt", 1, 7, &k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("unknown target");
  CHECK(k == NULL);

  CHECK_OK(tj_kernel_create("bk", 3, TJ_TARGET_CPU, &k));
  CHECK_STATUS(tj_kernel_add_symbol(k, "n", 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("divisibility");
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  int32_t bogus = 99;
  CHECK_STATUS(tj_kernel_set_buffer(k, 0, "A", TJT_F32, 1, &bogus, NULL, 0, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("unknown expression id 99");
  CHECK_STATUS(tj_kernel_set_buffer(k, 0, "A", TJT_F32, 1, &n, &bogus, 0, 0), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 3, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("power of two");
  CHECK_STATUS(tj_kernel_set_buffer(k, 0, "A", TJT_F32, TJ_MAX_NDIM + 1, &n, NULL, 0, 0),
               TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_buffer(k, 3, "A", TJT_F32, 1, &n, NULL, 0, 0), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("out of range");
  CHECK_STATUS(tj_kernel_set_scalar(k, 1, "h", TJT_DTYPE(kDLFloat, 16)), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("not supported");
  CHECK_STATUS(tj_kernel_set_pointer(k, 1, "p", TJT_F32, 0, TJ_BUF_OUTPUT), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_pointer(k, 1, "p", TJT_F32, 12, 0), TJ_EVALUE);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_STATUS(tj_kernel_set_scalar(k, 0, "x", TJT_F32), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("declared twice");
  /* Parameter 1 and 2 are still missing. */
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("parameter 1 was never declared");
  CHECK_OK(tj_kernel_set_scalar(k, 1, "x", TJT_F32));
  tjt_buffer(k, 2, "O", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT | TJ_BUF_OPTIONAL);
  CHECK_STATUS(tj_kernel_finalize(k), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("cannot be optional");
  tj_kernel_free(k);
  tj_kernel_free(NULL);
}

TEST(kernel_introspection) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("intro", 4, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t shape[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, shape, NULL, 0, 0);
  tjt_buffer(k, 1, "O", TJT_F32, 1, &shape[1], NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_set_scalar(k, 2, "alpha", TJT_F32));
  CHECK_OK(tj_kernel_set_pointer(k, 3, "ws", TJT_DTYPE(kDLUInt, 8), 0, 0));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_EQ_STR(tj_kernel_name(k), "intro");
  CHECK_EQ_INT(tj_kernel_num_params(k), 4);
  CHECK_EQ_INT(tj_kernel_num_symbols(k), 2);
  CHECK_EQ_INT(tj_kernel_num_outputs(k), 1);
  CHECK_EQ_INT(tj_kernel_output_param(k, 0), 1);
  CHECK_EQ_INT(tj_kernel_output_param(k, 1), -1);
  CHECK_EQ_INT(tj_kernel_param_kind(k, 0), TJ_PARAM_BUFFER);
  CHECK_EQ_INT(tj_kernel_param_kind(k, 2), TJ_PARAM_SCALAR);
  CHECK_EQ_INT(tj_kernel_param_kind(k, 3), TJ_PARAM_POINTER);
  CHECK_EQ_INT(tj_kernel_param_kind(k, 4), 0);
  CHECK_EQ_STR(tj_kernel_param_name(k, 2), "alpha");
  CHECK(tj_kernel_param_name(k, -1) == NULL);
  tj_kernel_free(k);
}

/* Issue 12, item 2: a stride symbol bound by a size-1 (or empty) dimension
 * holds a value that carries no information. Where it reappears in a dimension
 * that is stepped over, that occurrence binds it with every check: sign,
 * divisibility, and its own value. */
TEST(validate_loose_stride_symbols) {
  /* two(A: (m, n) strides (s, 1), B: (k, n) strides (s, 1)), s divisible by 4 */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("two", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "s", 4));
  CHECK_OK(tj_kernel_add_symbol(k, "k", 1));
  int32_t a_shape[2] = {tjt_sym(k, 0), tjt_sym(k, 1)};
  int32_t b_shape[2] = {tjt_sym(k, 3), tjt_sym(k, 1)};
  int32_t strides[2] = {tjt_sym(k, 2), tjt_const(k, 1)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, a_shape, strides, 0, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 2, b_shape, strides, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  const int64_t one_row[2] = {1, 2}, rows[2] = {3, 2};
  tjt_tensor a, b;
  tj_arg args[2];
  tj_frame f;
  struct {
    int64_t a_stride, b_stride;
    const char *error; /* NULL: accepted, and s is b_stride */
  } cases[] = {
      {3, 3, "two: argument 1 'B': stride[0] = 3 binds s, which must be divisible by 4"},
      {-4, -4,
       "two: argument 1 'B': stride[0] = -4 is negative, and negative strides are not declared "
       "(symbol s)"},
      {3, 8, NULL}, /* A's row stride was never stepped over: B's binds s */
      {8, 8, NULL},
      {-4, 12, NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    const int64_t sa[2] = {cases[i].a_stride, 1}, sb[2] = {cases[i].b_stride, 1};
    tjt_tensor_init(&a, tjt_data + 1024, TJT_F32, 2, one_row, sa);
    tjt_tensor_init(&b, tjt_data + 1024, TJT_F32, 2, rows, sb);
    tjt_arg_tensor(&args[0], &a, 0);
    tjt_arg_tensor(&args[1], &b, 0);
    if (cases[i].error == NULL) {
      CHECK_OK(tj_call_bind(k, args, 2, &f));
      CHECK_EQ_INT(f.symbols[2], cases[i].b_stride);
    } else {
      CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
      CHECK_EQ_STR(tj_last_error(), cases[i].error);
      CHECK_EQ_INT(tj_last_error_info()->argument, 1);
    }
  }
  /* Bound only loosely, s keeps the value given (nothing steps over it). */
  const int64_t odd[2] = {-3, 1};
  tjt_tensor_init(&a, tjt_data, TJT_F32, 2, one_row, odd);
  tjt_tensor_init(&b, tjt_data, TJT_F32, 2, one_row, odd);
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK_EQ_INT(f.symbols[2], -3);
  tj_kernel_free(k);
}

/* Item 8: a negative extent is reported as one, whatever the declaration. */
TEST(validate_negative_shape) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b;
  const int64_t minus = -2, two = 2;
  tjt_tensor_init(&a, tjt_data, TJT_F32, 1, &minus, NULL);
  tjt_tensor_init(&b, tjt_data, TJT_F32, 1, &two, NULL);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 0 'A': expected shape[0] >= 0, got -2");
  /* Also where the symbol is already bound, or the dimension is a constant. */
  CHECK_STATUS(bind_ab(k, &b, 0, &a, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 1 'B': expected shape[0] >= 0, got -2");
  tj_kernel_free(k);
  k = matrix_kernel("strided", 1, 1);
  const int64_t st[2] = {-4, 1};
  CHECK_STATUS(bind_matrix(k, 3, -1, st, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "strided: argument 0 'A': expected shape[1] >= 0, got -1");
  tj_kernel_free(k);
}

/* Item 3: every product and sum over a producer's shape, strides, data and
 * byte_offset is checked; a tensor no memory can hold is refused, never
 * taken for empty or launched on. */
TEST(validate_size_overflow) {
  tj_frame f;
  tj_kernel *k = matrix_kernel("mat", 1, 1); /* strides (s, 1) */
  tj_kernel *compact = matrix_kernel("mat", 0, 1);
  /* (2**32, 2**32) with zero strides: 2**64 elements wrap to 0. */
  const int64_t zero[2] = {0, 0};
  CHECK_STATUS(bind_matrix(compact, (int64_t)1 << 32, (int64_t)1 << 32, zero, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "mat: argument 0 'A': expected at most 2**63 - 1 elements, got shape (4294967296, "
               "4294967296)");
  /* Empty, but its compact strides (NULL strides) do not fit. */
  tj_kernel *three = NULL;
  CHECK_OK(tj_kernel_create("cube", 1, TJ_TARGET_CPU, &three));
  CHECK_OK(tj_kernel_add_symbol(three, "a", 1));
  CHECK_OK(tj_kernel_add_symbol(three, "b", 1));
  CHECK_OK(tj_kernel_add_symbol(three, "c", 1));
  CHECK_OK(tj_kernel_add_symbol(three, "s", 1));
  int32_t shape3[3] = {tjt_sym(three, 0), tjt_sym(three, 1), tjt_sym(three, 2)};
  int32_t strides3[3] = {tjt_sym(three, 3), tjt_const(three, 1), tjt_const(three, 1)};
  tjt_buffer(three, 0, "A", TJT_F32, 3, shape3, strides3, 0, 0);
  CHECK_OK(tj_kernel_finalize(three));
  const int64_t huge[3] = {0, (int64_t)1 << 40, (int64_t)1 << 40};
  tjt_tensor t;
  tjt_tensor_init(&t, tjt_data, TJT_F32, 3, huge, NULL);
  tj_arg arg;
  tjt_arg_tensor(&arg, &t, 0);
  CHECK_STATUS(tj_call_bind(three, &arg, 1, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "cube: argument 0 'A': expected compact strides that fit in 64 bits, got shape (0, "
               "1099511627776, 1099511627776)");
  tj_kernel_free(three);
  /* Offsets past int64: (n - 1) * stride, and then in bytes. */
  const int64_t big[2] = {(int64_t)1 << 62, 1};
  CHECK_STATUS(bind_matrix(k, 3, 1, big, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH(
      "mat: argument 0 'A': expected elements within the address space, got shape (3, 1) with "
      "strides (4611686018427387904, 1) from address ");
  const int64_t bytes[2] = {(int64_t)1 << 61, 1};
  CHECK_STATUS(bind_matrix(k, 3, 1, bytes, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("within the address space");
  /* Below address 0 with a negative stride (declared by a constant). */
  tj_kernel *neg = NULL;
  CHECK_OK(tj_kernel_create("neg", 1, TJ_TARGET_CPU, &neg));
  CHECK_OK(tj_kernel_add_symbol(neg, "n", 1));
  int32_t n = tjt_sym(neg, 0);
  int32_t minus = tjt_const(neg, -((int64_t)1 << 60));
  tjt_buffer(neg, 0, "A", TJT_F32, 1, &n, &minus, 0, 0);
  CHECK_OK(tj_kernel_finalize(neg));
  const int64_t four = 4, down = -((int64_t)1 << 60);
  tjt_tensor_init(&t, tjt_data, TJT_F32, 1, &four, &down);
  tjt_arg_tensor(&arg, &t, 0);
  CHECK_STATUS(tj_call_bind(neg, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected elements within the address space");
  const int64_t near[1] = {-1};
  tjt_tensor_init(&t, tjt_data + 64, TJT_F32, 1, &four, near);
  tjt_arg_tensor(&arg, &t, 0);
  CHECK_STATUS(tj_call_bind(neg, &arg, 1, &f), TJ_EVALUE); /* a mismatch, not an overflow */
  CHECK_ERROR_CONTAINS("expected stride[0] == -1152921504606846976, got -1");
  tj_kernel_free(neg);
  /* data + byte_offset past the end of the address space. */
  const int64_t ok[2] = {4, 1};
  tjt_tensor_init(&t, tjt_data, TJT_F32, 2, (const int64_t[]){3, 4}, ok);
  t.t.byte_offset = UINT64_MAX - 8;
  tjt_arg_tensor(&arg, &t, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH(
      "mat: argument 0 'A': expected data + byte_offset within the address space, got ");
  /* A valid large offset is fine. */
  t.t.data = NULL;
  t.t.byte_offset = (uint64_t)(uintptr_t)tjt_data;
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE); /* NULL data: item 4 */
  tj_kernel_free(k);
  tj_kernel_free(compact);
}

/* Item 4: a tensor with elements but no data pointer is refused; an empty one
 * may have none. Also for outputs and tensors given to pointer parameters. */
TEST(validate_null_data) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor a, b, c;
  tjt_tensor_1d(&a, NULL, TJT_F32, 4);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 4);
  tj_frame f;
  CHECK_STATUS(bind_ab(k, &b, 0, &a, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': expected a data pointer, got NULL for a tensor of shape "
               "(4,)");
  CHECK_OK(bind_ab(k, &b, 0, &b, 0, &f));
  tjt_tensor_1d(&c, NULL, TJT_F32, 4);
  tj_arg out;
  tjt_arg_tensor(&out, &c, 0);
  CHECK_STATUS(tj_call_set_output(&f, 0, &out), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: output 'C': expected a data pointer, got NULL");
  tjt_tensor_1d(&a, NULL, TJT_F32, 0);
  tjt_tensor_1d(&b, NULL, TJT_F32, 0);
  CHECK_OK(bind_ab(k, &a, 0, &b, 0, &f));
  tj_kernel_free(k);

  /* A shape array is required when there are dimensions. */
  k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 4);
  b.t.shape = NULL;
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 1 'B': expected a shape array, got NULL");
  b.t.ndim = 3; /* and the ndim message does not read it */
  CHECK_STATUS(bind_ab(k, &a, 0, &b, 0, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': expected a 1-d tensor, got 3-d with shape ");
  tj_kernel_free(k);

  /* ptr(P: pointer) given a tensor */
  CHECK_OK(tj_kernel_create("ptr", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_set_pointer(k, 0, "P", TJT_F32, 0, 0));
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor_1d(&a, NULL, TJT_F32, 4);
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "ptr: argument 0 'P': expected a data pointer, got NULL for a tensor that is not "
               "empty");
  tjt_tensor_1d(&a, NULL, TJT_F32, 0);
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  a.t.byte_offset = UINT64_MAX;
  tjt_arg_tensor(&arg, &a, 0);
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("expected data + byte_offset within the address space");
  tj_kernel_free(k);
}

/* The memo re-checks scalars through a range worked out once per parameter
 * (tj__scalar_range_of): for every scalar dtype and every kind of argument,
 * at and around every boundary, the same answer as the full check. */
TEST(scalar_range_answers_as_scalar_fits) {
  static const DLDataType dtypes[] = {
      {kDLBool, 8, 1},  {kDLInt, 8, 1},    {kDLInt, 16, 1},   {kDLInt, 32, 1},
      {kDLInt, 64, 1},  {kDLUInt, 8, 1},   {kDLUInt, 16, 1},  {kDLUInt, 32, 1},
      {kDLUInt, 64, 1}, {kDLFloat, 16, 1}, {kDLFloat, 32, 1}, {kDLFloat, 64, 1},
  };
  static const int64_t ints[] = {
      0,         1,          -1,         127,       128,       -128,      -129,        255,
      256,       32767,      32768,      -32768,    -32769,    65535,     65536,       INT32_MAX,
      INT32_MIN, 4294967295, 4294967296, INT64_MAX, INT64_MIN, 1LL << 53, -(1LL << 53)};
  static const double floats[] = {0.0,
                                  -0.0,
                                  1.5,
                                  -2.25,
                                  3.4028234e38,
                                  3.4028236e38,
                                  0x1.ffffffp127,
                                  0x1.fffffefffp127,
                                  -0x1.ffffffp127,
                                  1e39,
                                  -1e39,
                                  1e308,
                                  INFINITY,
                                  -INFINITY,
                                  NAN};
  static const uint32_t int_flags[] = {0, TJ_ARG_UNSIGNED, TJ_ARG_OUT_OF_RANGE};
  int compared = 0;
  for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); ++d) {
    tj__param p;
    memset(&p, 0, sizeof(p));
    p.kind = TJ_PARAM_SCALAR;
    p.dtype = dtypes[d];
    const tj__scalar_range range = tj__scalar_range_of(&p);
    for (int kind = TJ_ARG_NONE; kind <= TJ_ARG_OTHER; ++kind) {
      for (size_t f = 0; f < 3; ++f) {
        const size_t n = kind == TJ_ARG_FLOAT ? sizeof(floats) / sizeof(floats[0])
                                              : sizeof(ints) / sizeof(ints[0]);
        for (size_t v = 0; v < n; ++v) {
          tj_arg arg;
          tj_arg_init(&arg);
          arg.kind = kind;
          arg.flags = int_flags[f];
          if (kind == TJ_ARG_FLOAT || (arg.flags & TJ_ARG_OUT_OF_RANGE))
            arg.value.f = kind == TJ_ARG_FLOAT ? floats[v] : (v % 2 ? INFINITY : 1e19);
          else
            arg.value.i = ints[v];
          const int want = tj__scalar_fits(&p, &arg), got = tj__scalar_fits_range(&range, &p, &arg);
          if (want != got)
            tjt_fail(__FILE__, __LINE__, "dtype %d/%d, kind %d, flags %u, value %zu: %d, not %d",
                     p.dtype.code, p.dtype.bits, kind, arg.flags, v, got, want);
          ++compared;
        }
      }
    }
  }
  tjt_note("%d arguments compared", compared);
  /* Anything else (a buffer, of any dtype; a dtype no scalar takes) is not worked
   * out, and its shifts are never taken (a 128-bit buffer found by the fuzzer). */
  static const DLDataType others[] = {
      {kDLComplex, 128, 1}, {kDLUInt, 128, 1}, {kDLInt, 0, 1}, {kDLFloat, 8, 1}, {kDLInt, 32, 4}};
  for (size_t d = 0; d < sizeof(others) / sizeof(others[0]); ++d) {
    tj__param p;
    memset(&p, 0, sizeof(p));
    p.kind = TJ_PARAM_SCALAR;
    p.dtype = others[d];
    CHECK(!tj__scalar_range_of(&p).known);
    p.kind = TJ_PARAM_BUFFER;
    p.dtype = TJT_F32;
    CHECK(!tj__scalar_range_of(&p).known);
  }
}
