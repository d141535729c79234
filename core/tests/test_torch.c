/*
 * Torch operators (tilejit/torch.h) in a process without libtorch: every entry
 * point refuses, naming what is missing, and registers nothing. With libtorch
 * loaded they are exercised end to end by tests/test_torch_native.py.
 */
#include "harness.h"
#include "tilejit/torch.h"

TEST(torch_without_libtorch) {
  CHECK_STATUS(tj_torch_init(), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("libtorch is not loaded in this process");
  CHECK_STATUS(tj_torch_init(), TJ_ERUNTIME); /* decided once, said every time */
  CHECK_ERROR_CONTAINS("libtorch is not loaded");
  CHECK_STATUS(tj_torch_define("tilejit", "nothing() -> ()"), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("libtorch is not loaded");
  CHECK_STATUS(tj_torch_open_export("/nonexistent", NULL), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("libtorch is not loaded");
  uint64_t word = 7;
  CHECK_STATUS(tj_torch_tls_word("tj_no_such_thread_local_word", &word), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("no thread-local tj_no_such_thread_local_word");
  CHECK_EQ_INT(word, 7);
}

TEST(torch_refuses_null_arguments) {
  tj_torch_op op = {"tilejit", "nothing", "", NULL, NULL, NULL, NULL};
  CHECK_STATUS(tj_torch_impl(NULL, &op), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("tj_torch_impl: kernel is NULL");
  CHECK_STATUS(tj_torch_define(NULL, "nothing() -> ()"), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("tj_torch_define: ns is NULL");
  CHECK_STATUS(tj_torch_open_export(NULL, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("tj_torch_open_export: dir is NULL");
  CHECK_STATUS(tj_torch_tls_word(NULL, NULL), TJ_EVALUE);
}
