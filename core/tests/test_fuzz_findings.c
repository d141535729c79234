/*
 * Regression tests for what the fuzz target (core/fuzz/fuzz_core.c) found: one
 * test per finding, each the smallest input that showed it, restated in C.
 */
#include <stdio.h>

#include "builders.h"

/* Finding 1: an exchange API table whose prev_api chain loops back without
 * ever reaching major version 1 was walked forever (a hang). */
TEST(fuzz_exchange_chain_cycle) {
  DLPackExchangeAPI a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.header.version.major = TJ_DLPACK_MAJOR + 1;
  b.header.version.major = TJ_DLPACK_MAJOR + 2;
  a.header.prev_api = &b.header;
  b.header.prev_api = &a.header;
  tj_producer p;
  CHECK_STATUS(tj_producer_from_exchange(&p, &a.header, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("offers no version 1.x (within 16 tables of its prev_api chain)");
  a.header.prev_api = &a.header; /* a table that is its own predecessor */
  CHECK_STATUS(tj_producer_from_exchange(&p, &a.header, NULL), TJ_EVALUE);
}

/* Finding 2: an OBJECT argument without a producer (a binding's mistake, or a
 * kind read from garbage) was imported through a NULL pointer. */
TEST(fuzz_object_without_producer) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tjt_tensor b;
  tjt_tensor_1d(&b, tjt_data, TJT_F32, 4);
  tj_arg args[2];
  tj_arg_init(&args[0]);
  args[0].kind = TJ_ARG_OBJECT;
  args[0].value.p = &b;
  tjt_arg_tensor(&args[1], &b, 0);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 0 'A': cannot import the tensor through DLPack: the binding gave "
               "no producer for the object");
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);
  tj_producer none;
  memset(&none, 0, sizeof(none)); /* a producer without an import function */
  args[0].kind = TJ_ARG_OBJECT;
  args[0].producer = &none;
  CHECK_STATUS(tj_call_run(k, &call), TJ_ETYPE);
  tj_kernel_free(k);
}

/* Finding 3: a CUDA kernel with no launch configuration (and no expression),
 * bound, had its configuration evaluated for the memo's record, through a NULL
 * expression table. It is refused at the launch, call after call. */
TEST(fuzz_cuda_record_without_launch) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("no_launch", 1, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "n", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_finalize(k));
  for (int round = 0; round < 2; ++round) {
    tj_arg arg;
    tj_arg_init(&arg);
    arg.kind = TJ_ARG_INT;
    arg.value.i = 3;
    tj_call call = {&arg, 1, 1, NULL, NULL};
    CHECK_STATUS(tj_call_run(k, &call), TJ_ERUNTIME);
    CHECK_ERROR_CONTAINS("no_launch: no");
  }
  tj_kernel_free(k);
}
