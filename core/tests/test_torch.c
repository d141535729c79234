/*
 * Torch operators (tilejit/torch.h) in a process without libtorch: every entry
 * point refuses, naming what is missing, and registers nothing. With libtorch
 * loaded they are exercised end to end by tests/test_torch_native.py; the
 * record gate's in-place answers (tj_torch_plain_object) are read here from
 * objects laid out as torch's, and a fixture's thread-local word.
 */
#include <dlfcn.h>
#include <string.h>

#include "builders.h"
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

/* A host object holding its TensorImpl * at byte 16; the TensorImpl's key set
 * at byte 24. */
typedef struct {
  char head[16];
  const char *impl;
} fake_tensor_object;

TEST(torch_plain_object_reads_in_place) {
  char path[4096];
  tjt_fixture_path("tls_word.so", path, sizeof(path));
  void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  CHECK(lib != NULL);
  uint64_t *(*address)(void) = NULL;
  void *found = dlsym(lib, "tjt_tls_word_address");
  memcpy(&address, &found, sizeof(found));
  uint64_t *word = address();
  tj_torch_plain plain = {0, 24, {5, 9}, 2, "tjt_tls_word", NULL, NULL};
  tj_torch_plain_objects context = {16, &plain};
  char impl[32] = {0};
  fake_tensor_object object = {{0}, impl};
  /* The thread: plain while its word is 0. */
  *word = 0;
  CHECK_EQ_INT(tj_torch_plain_object(&context, NULL), 1);
  *word = 1u << 4; /* a key included: a mode, a transform, inference mode */
  CHECK_EQ_INT(tj_torch_plain_object(&context, NULL), 0);
  *word = 0;
  /* An object: plain when its key set is one of the plain ones. */
  uint64_t keyset = 9;
  memcpy(impl + 24, &keyset, sizeof(keyset));
  CHECK_EQ_INT(tj_torch_plain_object(&context, &object), 1);
  keyset = 6; /* a functorch wrapper's, a subclass's */
  memcpy(impl + 24, &keyset, sizeof(keyset));
  CHECK_EQ_INT(tj_torch_plain_object(&context, &object), 0);
  object.impl = NULL;
  CHECK_EQ_INT(tj_torch_plain_object(&context, &object), 0);
  /* Keysets past TJ_TORCH_MAX_KEYSETS are never read. */
  plain.nkeysets = 99;
  object.impl = impl;
  CHECK_EQ_INT(tj_torch_plain_object(&context, &object), 0);
  /* No such word, or no context: not known (0), whatever the objects. */
  plain.tls_symbol = "tj_no_such_thread_local_word";
  CHECK_EQ_INT(tj_torch_plain_object(&context, NULL), 0);
  plain.tls_symbol = "tjt_tls_word"; /* found again after a miss */
  CHECK_EQ_INT(tj_torch_plain_object(&context, NULL), 1);
  CHECK_EQ_INT(tj_torch_plain_object(NULL, NULL), 0);
  context.plain = NULL;
  CHECK_EQ_INT(tj_torch_plain_object(&context, &object), 0);
  dlclose(lib);
}

static void *never_wrap(const void *tensor) {
  (void)tensor;
  CHECK(0); /* nothing is made without libtorch */
  return NULL;
}

TEST(torch_reads_and_makes_nothing_without_libtorch) {
  /* An object whose TensorImpl looks plain: without libtorch's functions it is
   * still left to the public way (1), and no output is made in C. */
  tj_torch_plain plain = {0, 24, {9}, 1, "tjt_tls_word", NULL, NULL};
  char impl[32] = {0};
  const void *vtable = &plain;
  memcpy(impl, &vtable, sizeof(vtable));
  uint64_t keyset = 9;
  memcpy(impl + 24, &keyset, sizeof(keyset));
  fake_tensor_object object = {{0}, impl};
  tj_torch_reader reader = {16, &plain, vtable, ~0ull, never_wrap};
  CHECK_STATUS(tj_torch_init(), TJ_ERUNTIME);
  DLTensor out;
  memset(&out, 0, sizeof(out));
  CHECK_EQ_INT(tj_torch_read_object(&reader, &object, &out), 1);
  CHECK(out.data == NULL && out.ndim == 0); /* nothing written */
  int64_t shape[1] = {2};
  DLTensor proto = {NULL, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  void *made = &out;
  CHECK_EQ_INT(tj_torch_make_object(&reader, &proto, &made), 1);
  CHECK(made == NULL);
}
