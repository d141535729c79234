/*
 * The XLA FFI handler (tilejit/xla.h) driven as XLA drives it: call frames
 * laid out by hand, an API table whose error_create records the message.
 * tests/test_jax.py runs it under real JAX.
 */
#include <stdio.h>
#include <string.h>

#include "builders.h"
#include "harness.h"
#include "tilejit/xla.h"

static char made_message[512];
static int32_t made_code;
static int made_errors;

static void *record_error(tj_xla_error_create_args *args) {
  snprintf(made_message, sizeof(made_message), "%s", args->message);
  made_code = args->errc;
  made_errors++;
  return &made_errors; /* any non-NULL pointer is an error to XLA */
}

static tj_xla_api api = {
    sizeof(tj_xla_api), NULL, {0}, NULL, record_error, NULL, NULL, NULL, NULL, {NULL}, NULL};

/* A frame calling the kernel registered under `key` with inputs `layout`:
 * buffers in `args`, results in `rets`, string attributes and one scalar. */
typedef struct {
  tj_xla_call_frame frame;
  int32_t arg_types[4], ret_types[4], attr_types[4];
  void *args[4], *rets[4], *attrs[4];
  tj_xla_byte_span names[4], *name_of[4], values[4];
  tj_xla_scalar scalar;
} xla_frame;

static void frame_init(xla_frame *f, const char *key, const char *layout, tj_xla_buffer **args,
                       int nargs, tj_xla_buffer **rets, int nrets, const tj_xla_scalar *scalar) {
  memset(f, 0, sizeof(*f));
  f->frame.struct_size = sizeof(f->frame);
  f->frame.api = &api;
  f->frame.stage = 3;
  for (int i = 0; i < nargs; ++i) f->arg_types[i] = 1, f->args[i] = args[i];
  for (int i = 0; i < nrets; ++i) f->ret_types[i] = 1, f->rets[i] = rets[i];
  f->frame.args = (tj_xla_list){sizeof(tj_xla_list), NULL, nargs, f->arg_types, f->args};
  f->frame.rets = (tj_xla_list){sizeof(tj_xla_list), NULL, nrets, f->ret_types, f->rets};
  /* Sorted by name, as XLA sorts them. */
  const char *names[3] = {"tilejit", "tilejit_inputs", "tj_2"};
  const char *values[2] = {key, layout};
  int n = scalar != NULL ? 3 : 2;
  for (int i = 0; i < n; ++i) {
    f->names[i] = (tj_xla_byte_span){names[i], strlen(names[i])};
    f->name_of[i] = &f->names[i];
    if (i < 2) {
      f->values[i] = (tj_xla_byte_span){values[i], strlen(values[i])};
      f->attr_types[i] = 4, f->attrs[i] = &f->values[i];
    } else {
      f->scalar = *scalar;
      f->attr_types[i] = 3, f->attrs[i] = &f->scalar;
    }
  }
  f->frame.attrs =
      (tj_xla_attrs){sizeof(tj_xla_attrs), NULL, n, f->attr_types, f->name_of, f->attrs};
}

static tj_kernel *loaded_vec_add(void) {
  char path[1024];
  tjt_fixture_path("vec_add.so", path, sizeof(path));
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  CHECK_OK(tj_kernel_load(k, path, "tilejit_packed_entry"));
  return k;
}

TEST(xla_handler_runs_a_registered_kernel) {
  tj_kernel *k = loaded_vec_add();
  CHECK_OK(tj_xla_register("tj_test_vec_add", k, kDLCPU));
  float a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, c[5] = {0};
  int64_t dims[1] = {5};
  tj_xla_buffer A = {sizeof(A), NULL, 11, a, 1, dims}, B = A, C = A;
  B.data = b, C.data = c;
  tj_xla_buffer *args[2] = {&A, &B}, *rets[1] = {&C};
  xla_frame f;
  frame_init(&f, "tj_test_vec_add", "bb", args, 2, rets, 1, NULL);
  made_errors = 0;
  CHECK(tj_xla_handler(&f.frame) == NULL);
  for (int i = 0; i < 5; ++i) CHECK(c[i] == a[i] + b[i]);
  /* The stages before execution do nothing. */
  memset(c, 0, sizeof(c));
  f.frame.stage = 0;
  CHECK(tj_xla_handler(&f.frame) == NULL);
  CHECK(c[0] == 0);
  f.frame.stage = 3;

  /* What tj_xla_bind gives a tracer: the output's shape and type. */
  DLDevice cpu = {kDLCPU, 0}, cuda = {kDLCUDA, 0};
  int32_t ndim[TJ_MAX_OUTPUTS];
  int64_t shape[TJ_MAX_OUTPUTS * TJ_MAX_NDIM];
  DLDataType dtype[TJ_MAX_OUTPUTS];
  CHECK_OK(tj_xla_bind(&f.frame, cpu, ndim, shape, dtype));
  CHECK_EQ_INT(ndim[0], 1);
  CHECK_EQ_INT(shape[0], 5);
  CHECK(dtype[0].code == kDLFloat && dtype[0].bits == 32);
  /* A program placed on another device than the kernel's: the direct call's refusal. */
  CHECK_STATUS(tj_xla_bind(&f.frame, cuda, ndim, shape, dtype), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("vec_add: argument 0 'A': expected a cpu tensor");

  /* Refusals come back as XLA errors carrying the core's message. */
  int64_t four[1] = {4};
  C.dims = four;
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK_EQ_INT(made_code, 3); /* INVALID_ARGUMENT */
  CHECK(strstr(made_message, "vec_add: output 'C'") != NULL);
  C.dims = dims;
  B.dtype = 12; /* float64 */
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK_EQ_INT(made_code, 3);
  CHECK(strncmp(made_message, "vec_add: argument 1 'B': ", 25) == 0);
  CHECK_STATUS(tj_xla_bind(&f.frame, cpu, ndim, shape, dtype), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), made_message);
  B.dtype = 11;
  /* A wrong count, as a direct call words it. */
  frame_init(&f, "tj_test_vec_add", "b", args, 1, rets, 1, NULL);
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK(strstr(made_message, "vec_add: expected 2 arguments") == made_message);
  /* A key nothing is registered under, and a frame without the attributes. */
  frame_init(&f, "tj_test_nothing", "bb", args, 2, rets, 1, NULL);
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK_EQ_INT(made_code, 13); /* INTERNAL */
  CHECK(strstr(made_message, "no kernel is registered under 'tj_test_nothing'") != NULL);
  f.frame.attrs.size = 0;
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK(strstr(made_message, "without the attributes") != NULL);
  /* A scalar where a buffer goes: the core's words for it. */
  float one = 1;
  tj_xla_scalar scalar = {11, &one};
  frame_init(&f, "tj_test_vec_add", "bba", args, 2, rets, 1, &scalar);
  CHECK(tj_xla_handler(&f.frame) != NULL);
  CHECK(strstr(made_message, "vec_add: expected 2 arguments") == made_message);
  tj_kernel_free(k);
  /* Registering again replaces; a key too long is refused. */
  tj_kernel *again = loaded_vec_add();
  CHECK_OK(tj_xla_register("tj_test_vec_add", again, kDLCPU));
  char longest[200];
  memset(longest, 'k', sizeof(longest) - 1);
  longest[sizeof(longest) - 1] = '\0';
  CHECK_STATUS(tj_xla_register(longest, again, kDLCPU), TJ_EVALUE);
  CHECK_STATUS(tj_xla_register(NULL, again, kDLCPU), TJ_EVALUE);
  CHECK_STATUS(tj_xla_bind(NULL, cpu, NULL, NULL, NULL), TJ_EVALUE);
  tj_kernel_free(again);
}

TEST(xla_handler_answers_the_metadata_query) {
  tj_xla_metadata metadata = {sizeof(metadata), {sizeof(tj_xla_api_version), NULL, 0, 0}, 0, 0};
  tj_xla_metadata_extension extension = {{sizeof(extension), 1, NULL}, &metadata};
  tj_xla_call_frame frame = {0};
  frame.struct_size = sizeof(frame);
  frame.extension_start = &extension.extension_base;
  CHECK(tj_xla_handler(&frame) == NULL);
  CHECK_EQ_INT(metadata.api_version.major_version, TJ_XLA_API_MAJOR);
  CHECK_EQ_INT(metadata.api_version.minor_version, TJ_XLA_API_MINOR);
  CHECK_EQ_INT(metadata.traits, TJ_XLA_COMMAND_BUFFER_COMPATIBLE);
  CHECK(tj_xla_handler(NULL) == NULL);
}
