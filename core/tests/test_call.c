/*
 * The call sequencer (tj_call_run) over producers written
 * here in C: objects are tjt_object records, "types" are addresses of type
 * markers, and every producer call is counted so the order and the release
 * of owned imports can be asserted. Also the exchange-API adapter and the
 * capsule import, against tables and a host built here.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "builders.h"

/* ---- A fake host and its objects ------------------------------------------ */

static char type_tensor; /* addresses stand for types */

typedef struct {
  void *type;
  tjt_tensor tensor; /* what the object holds */
  int refs;          /* references the core handed out (allocations) */
  int fail_import;   /* import returns this status when non-zero */
  const bool *grad;  /* what a claim reads: "requires grad" (NULL: no autograd state) */
} tjt_object;

typedef struct {
  int imports, allocations, streams, deletes;
  int fail_allocate; /* allocate returns this status when non-zero */
  int epyerr_allocate;
  int own;      /* imports are owning (a versioned managed tensor) */
  void *stream; /* what current_stream reports */
  float out_data[4][64];
  tjt_object outs[4];
} tjt_record;

static tjt_record rec;

static void object_tensor(tjt_object *o, float *data, int64_t n) {
  memset(o, 0, sizeof(*o));
  o->type = &type_tensor;
  tjt_tensor_1d(&o->tensor, data, TJT_F32, n);
}

static void managed_deleter(DLManagedTensorVersioned *m) {
  rec.deletes++;
  free(m);
}

static int fake_import(const tj_producer *self, void *object, tj_arg *arg) {
  (void)self;
  tjt_object *o = object;
  rec.imports++;
  if (o->fail_import) {
    if (o->fail_import == TJ_EPYERR) return TJ_EPYERR;
    return tj_set_error(o->fail_import, "refused");
  }
  if (!rec.own) {
    tj_arg_from_dltensor(arg, &o->tensor.t, 0);
    return TJ_OK;
  }
  DLManagedTensorVersioned *m = calloc(1, sizeof(*m));
  m->version.major = TJ_DLPACK_MAJOR;
  m->dl_tensor = o->tensor.t;
  m->deleter = managed_deleter;
  return tj_arg_from_versioned(arg, m, NULL);
}

static int fake_allocate(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                         void **object) {
  (void)self;
  int i = rec.allocations++;
  if (rec.epyerr_allocate) return TJ_EPYERR;
  if (rec.fail_allocate) return tj_set_error(rec.fail_allocate, "out of fake memory");
  tjt_object *o = &rec.outs[i];
  object_tensor(o, rec.out_data[i], proto->shape[0]);
  o->tensor.t.dtype = proto->dtype;
  o->refs = 1;
  *object = o;
  tj_arg_from_dltensor(out, &o->tensor.t, 0);
  return TJ_OK;
}

static int fake_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                       void **stream) {
  (void)self, (void)device_type, (void)device_id;
  rec.streams++;
  *stream = rec.stream;
  return TJ_OK;
}

static tj_producer fake_producer = {.import = fake_import,
                                    .allocate = fake_allocate,
                                    .current_stream = fake_stream,
                                    .type = &type_tensor};

/* A kernel entry adding A and B into C (C is argument 2, n argument 3). */
static int32_t add_entry(const tj_value *args) {
  const float *a = args[0].p, *b = args[1].p;
  float *c = args[2].p;
  for (int64_t i = 0; i < args[3].i; ++i) c[i] = a[i] + b[i];
  return 0;
}

static tj_kernel *adder(uint32_t c_flags) {
  tj_kernel *k = tjt_vec_add(c_flags, 1);
  CHECK_OK(tj_kernel_set_entry(k, add_entry));
  return k;
}

static void object_arg(tj_arg *arg, tjt_object *o) {
  tj_arg_init(arg);
  arg->kind = TJ_ARG_OBJECT;
  arg->value.p = o;
  arg->producer = &fake_producer;
}

static float a_data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b_data[8] = {10, 20, 30, 40, 50, 60, 70, 80};

/* ---- tj_call_run ------------------------------------------------------------ */

TEST(call_run_imports_binds_allocates) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1] = {(void *)1};
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_OK(tj_call_run(k, &call));
  CHECK_EQ_INT(rec.imports, 2);
  CHECK_EQ_INT(rec.allocations, 1);
  CHECK_EQ_INT(rec.streams, 0); /* a CPU call asks no producer for a stream */
  CHECK(outputs[0] == &rec.outs[0]);
  CHECK(rec.out_data[0][7] == 88.0f);
  CHECK_EQ_INT(args[0].kind, TJ_ARG_TENSOR);
  CHECK(args[0].producer == &fake_producer);
  tj_kernel_free(k);
}

TEST(call_run_count_first) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a;
  object_tensor(&a, a_data, 8);
  tj_arg args[3];
  for (int i = 0; i < 3; ++i) object_arg(&args[i], &a);
  void *outputs[1];
  tj_call call = {args, 3, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: expected 2 arguments (A, B), got 3");
  CHECK_EQ_INT(rec.imports, 0); /* nothing is imported before the count is right */
  CHECK(outputs[0] == NULL);
  tj_kernel_free(k);
}

/* An entry that records the pointer it got for C (argument 2). */
static const void *seen_c = (const void *)1;
static int32_t record_c_entry(const tj_value *args) {
  seen_c = args[2].p;
  return 0;
}

TEST(call_run_optional_left_out) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = tjt_vec_add(TJ_BUF_OPTIONAL, 1); /* vec_add(A, B, C=None) */
  CHECK_OK(tj_kernel_set_entry(k, record_c_entry));
  tjt_object a;
  object_tensor(&a, a_data, 8);
  tj_arg args[3];
  memset(args, 0xff, sizeof(args)); /* the record left out is the core's to set */
  object_arg(&args[0], &a);
  object_arg(&args[1], &a);
  tj_call call = {args, 2, 0, NULL, NULL};
  CHECK_OK(tj_call_run(k, &call));
  CHECK(seen_c == NULL);
  CHECK_EQ_INT(args[2].kind, TJ_ARG_NONE);
  CHECK_EQ_INT(rec.imports, 2);
  /* Fewer than the required ones: the count, with what may be left out. */
  call.nargs = 1;
  CHECK_STATUS(tj_call_run(k, &call), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: expected 2 to 3 arguments (A, B, C=None), got 1");
  CHECK_EQ_INT(rec.imports, 2);
  /* Given, it is used. */
  object_arg(&args[0], &a);
  object_arg(&args[1], &a);
  object_arg(&args[2], &a);
  call.nargs = 3;
  CHECK_OK(tj_call_run(k, &call));
  CHECK(seen_c == a_data);
  tj_kernel_free(k);
}

TEST(call_run_import_failure) {
  memset(&rec, 0, sizeof(rec));
  rec.own = 1;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  b.fail_import = TJ_EVALUE;
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': cannot import the tensor through DLPack: refused");
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  CHECK_EQ_INT(tj_last_error_info()->output, -1);
  CHECK_EQ_INT(rec.deletes, 1); /* A's owned import was released */
  CHECK_EQ_INT(rec.allocations, 0);
  tj_kernel_free(k);
}

/* Issue 12, item 1: lazy views are refused before their import, with the
 * argument's label. The bits are read in place (tj_producer.view_bits) from a
 * block the object points to, as torch keeps them in its TensorImpl. */
typedef struct {
  char header[16];
  uint64_t *block; /* at byte 16, like a torch.Tensor's TensorImpl pointer */
  tjt_object inner;
} tjt_viewed;

static int viewed_import(const tj_producer *self, void *object, tj_arg *arg) {
  return fake_import(self, &((tjt_viewed *)object)->inner, arg);
}

TEST(call_run_refuses_lazy_views) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  uint64_t block[4] = {0, 0, 0, 0};
  const tj_view_bits bits = {16, 2 * sizeof(uint64_t), (uint64_t)1 << 31, (uint64_t)1 << 32};
  tj_producer viewed = fake_producer;
  viewed.import = viewed_import;
  viewed.view_bits = &bits;
  tjt_object a;
  object_tensor(&a, a_data, 8);
  tjt_viewed b;
  memset(&b, 0, sizeof(b));
  b.block = block;
  object_tensor(&b.inner, b_data, 8);
  struct {
    uint64_t word;
    const char *error; /* NULL: accepted */
  } cases[] = {
      {0, NULL},
      {(uint64_t)1 << 5, NULL}, /* other bits of the word say nothing of views */
      {(uint64_t)1 << 31,
       "vec_add: argument 1 'B': expected a tensor that holds its values in memory, got a "
       "conjugate view (its conjugate bit is set); materialise it with .resolve_conj()"},
      {(uint64_t)1 << 32,
       "vec_add: argument 1 'B': expected a tensor that holds its values in memory, got a "
       "negative view (its negative bit is set); materialise it with .resolve_neg()"},
      {3ull << 31,
       "vec_add: argument 1 'B': expected a tensor that holds its values in memory, got a "
       "conjugate and negative view (its conjugate and negative bits are set); materialise it "
       "with .resolve_conj().resolve_neg()"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    tj_arg args[2];
    object_arg(&args[0], &a);
    object_arg(&args[1], &b.inner);
    args[1].value.p = &b;
    args[1].producer = &viewed;
    block[2] = cases[i].word;
    void *outputs[1];
    tj_call call = {args, 2, 0, NULL, outputs};
    int imports = rec.imports;
    if (cases[i].error == NULL) {
      CHECK_OK(tj_call_run(k, &call));
      CHECK_EQ_INT(rec.imports, imports + 2);
      continue;
    }
    CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
    CHECK_EQ_STR(tj_last_error(), cases[i].error);
    CHECK_EQ_INT(tj_last_error_info()->argument, 1);
    CHECK_EQ_INT(rec.imports, imports + 1); /* B was never imported */
  }
  /* No block (NULL where its address goes): nothing to read, no view. */
  block[2] = (uint64_t)1 << 31;
  b.block = NULL;
  CHECK_OK(tj_producer_check_view(&viewed, &b));
  CHECK_OK(tj_producer_check_view(&fake_producer, &a)); /* no view function: never */
  tj_kernel_free(k);
}

TEST(call_run_validation_failure) {
  memset(&rec, 0, sizeof(rec));
  rec.own = 1;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 7);
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': expected shape[0] == n (= 8, bound by "
               "argument 0 'A'), got 7");
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_NONE);
  CHECK_EQ_INT(rec.deletes, 2);
  tj_kernel_free(k);
}

TEST(call_run_allocation_failure) {
  memset(&rec, 0, sizeof(rec));
  rec.fail_allocate = TJ_ERUNTIME;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_ERUNTIME);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: output 'C': cannot allocate the output: out of fake memory");
  CHECK_EQ_INT(tj_last_error_info()->output, 0);
  CHECK_EQ_INT(tj_last_error_info()->argument, -1);
  tj_kernel_free(k);
}

TEST(call_run_producer_error_pending) {
  /* TJ_EPYERR: the producer's own error is pending; the core gives the prefix and says
   * which step, for the binding to join them. */
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  a.fail_import = TJ_EPYERR;
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  CHECK_STATUS(tj_call_run(k, &call), TJ_EPYERR);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 0 'A': cannot import the tensor through DLPack");
  CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_IMPORT);
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);

  a.fail_import = 0;
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  rec.epyerr_allocate = 1;
  CHECK_STATUS(tj_call_run(k, &call), TJ_EPYERR);
  CHECK_EQ_STR(tj_last_error(), "vec_add: output 'C': cannot allocate the output");
  CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_ALLOCATE);
  CHECK_EQ_INT(tj_last_error_info()->output, 0);
  tj_kernel_free(k);
}

TEST(call_run_streams) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(0);
  tjt_object a, b, c;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  object_tensor(&c, rec.out_data[0], 8);
  tj_arg args[3];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  object_arg(&args[2], &c);
  tj_call call = {args, 3, 1, (void *)0x1234, NULL};
  /* An explicit stream wins, and a CPU kernel refuses a non-zero one. */
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("a stream was given to a cpu kernel");
  for (int i = 0; i < 3; ++i) object_arg(&args[i], i == 0 ? &a : i == 1 ? &b : &c);
  call.stream = NULL; /* stream=0 */
  CHECK_OK(tj_call_run(k, &call));
  CHECK_EQ_INT(rec.streams, 0);
  tj_kernel_free(k);
}

static int32_t failing_entry(const tj_value *args) {
  (void)args;
  return 3;
}

/* A repeated CPU call with nothing to allocate is checked and packed by the
 * memo without a frame: the kernel gets the same arguments, a changed address
 * or shape reaches it, and what the full path refuses is refused alike. */
TEST(call_run_packs_repeated_cpu_calls) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(0);
  static float c1[8], c2[8], small[4];
  tjt_object a, b, c, other, four;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  object_tensor(&c, c1, 8);
  object_tensor(&other, c2, 8);
  object_tensor(&four, small, 4);
  tjt_object *outs[5] = {&c, &c, &c, &other, &four};
  for (int i = 0; i < 5; ++i) {
    tj_arg args[3];
    object_arg(&args[0], i == 4 ? &four : &a);
    object_arg(&args[1], i == 4 ? &four : &b);
    object_arg(&args[2], outs[i]);
    tj_call call = {args, 3, 0, NULL, NULL};
    CHECK_OK(tj_call_run(k, &call));
  }
  CHECK(c1[7] == 88.0f && c2[0] == 11.0f && c2[7] == 88.0f && small[3] == 0.0f);
  tj_arg args[3];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  object_arg(&args[2], &c);
  tj_call call = {args, 3, 1, (void *)0x1234, NULL}; /* a stream: the full path refuses it */
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("vec_add: a stream was given to a cpu kernel");
  /* The kernel's status, from a packed call as from the first. */
  CHECK_OK(tj_kernel_set_entry(k, failing_entry));
  for (int i = 0; i < 2; ++i) {
    object_arg(&args[0], &a);
    object_arg(&args[1], &b);
    object_arg(&args[2], &c);
    call.has_stream = 0;
    CHECK_STATUS(tj_call_run(k, &call), TJ_ERUNTIME);
    CHECK_EQ_STR(tj_last_error(), "vec_add: the kernel returned status 3 (0 is success)");
  }
  tj_kernel_free(k);
}

static tj_value seen[4];

static int32_t seen_entry(const tj_value *args) {
  memcpy(seen, args, sizeof(seen));
  return 0;
}

/* Repeated calls hand the kernel function what the first call handed it, in
 * the order of its arguments: reordered, one buffer validated but not passed,
 * an expression, and (second kernel) one buffer passed twice. */
TEST(call_run_packs_in_the_functions_order) {
  static float c_data[2][8];
  for (int twice = 0; twice < 2; ++twice) {
    tj_kernel *k = tjt_reordered(0, twice ? (tj_abi_arg){TJ_ABI_PARAM, 2, {0, 0, 0}}
                                          : (tj_abi_arg){TJ_ABI_SYMBOL, 0, {0, 0, 0}});
    CHECK_OK(tj_kernel_set_entry(k, seen_entry));
    tjt_object a, b, c[2];
    object_tensor(&a, a_data, 8);
    object_tensor(&b, b_data, 8);
    object_tensor(&c[0], c_data[0], 8);
    object_tensor(&c[1], c_data[1], 8);
    for (int round = 0; round < 4; ++round) { /* C alternates: each call's own address */
      const int which = round % 2;
      const float *c_now = c_data[which];
      memset(seen, 0, sizeof(seen));
      tj_arg args[3];
      object_arg(&args[0], &a);
      object_arg(&args[1], &b);
      object_arg(&args[2], &c[which]);
      tj_call call = {args, 3, 0, NULL, NULL};
      CHECK_OK(tj_call_run(k, &call));
      CHECK_EQ_INT(seen[0].i, 9);
      CHECK(seen[1].p == c_now);
      if (twice)
        CHECK(seen[2].p == c_now);
      else
        CHECK_EQ_INT(seen[2].i, 8);
      CHECK(seen[3].p == a_data);
    }
    tj_kernel_free(k);
  }
}

TEST(call_run_releases_owned_imports) {
  memset(&rec, 0, sizeof(rec));
  rec.own = 1;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  tj_arg args[2];
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  for (int round = 0; round < 3; ++round) {
    object_arg(&args[0], &a);
    object_arg(&args[1], &b);
    CHECK_OK(tj_call_run(k, &call));
    CHECK_EQ_INT(args[0].owner_kind, TJ_OWNER_NONE);
    rec.allocations = 0;
  }
  CHECK_EQ_INT(rec.deletes, 6); /* each owned import deleted exactly once */
  tj_kernel_free(k);
}

/* fill(out: (2, n) float32 output, value: float32, n: int64 binding symbol n): every
 * element of out is value; with n == 3 the kernel fails after writing. */
static int32_t fill_value_entry(const tj_value *args) {
  float *out = args[0].p;
  int64_t n = args[2].i;
  for (int64_t i = 0; i < 2 * n; ++i) out[i] = (float)args[1].f;
  return n == 3 ? 1 : 0;
}

static tj_kernel *fill_kernel(int64_t align, uint32_t flags) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("fill", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t shape[2] = {tjt_const(k, 2), tjt_sym(k, 0)};
  tjt_buffer(k, 0, "out", TJT_F32, 2, shape, NULL, align, flags);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "value", TJT_F32));
  CHECK_OK(tj_kernel_set_scalar(k, 2, "n", TJT_DTYPE(kDLInt, 64)));
  CHECK_OK(tj_kernel_set_scalar_symbol(k, 2, 0));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, fill_value_entry));
  return k;
}

static void fill_args(tj_arg *args, double value, int64_t n) {
  tj_arg_init(&args[0]);
  args[0].kind = TJ_ARG_FLOAT;
  args[0].value.f = value;
  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = n;
}

/* A host output the core allocated: a compact (2, n) float32 DLManagedTensor on the
 * CPU, aligned to `align` bytes, every element `value`. */
static void check_host_output(void *object, int64_t n, float value, uintptr_t align) {
  DLManagedTensor *m = object;
  CHECK(m != NULL && m->deleter != NULL);
  DLTensor *t = &m->dl_tensor;
  CHECK_EQ_INT(t->device.device_type, kDLCPU);
  CHECK_EQ_INT(t->ndim, 2);
  CHECK_EQ_INT(t->shape[0], 2);
  CHECK_EQ_INT(t->shape[1], n);
  CHECK(t->strides == NULL);
  CHECK_EQ_INT(t->byte_offset, 0);
  CHECK_EQ_INT(t->dtype.code, kDLFloat);
  CHECK_EQ_INT(t->dtype.bits, 32);
  CHECK_EQ_INT(t->dtype.lanes, 1);
  CHECK(t->data != NULL);
  CHECK_EQ_INT((uintptr_t)t->data % align, 0);
  for (int64_t i = 0; i < 2 * n; ++i) CHECK(((float *)t->data)[i] == value);
}

TEST(call_run_core_allocates_host_outputs) {
  /* A CPU kernel's outputs with no producer to allocate them (a call from C through
   * tj_call_run, no tensor argument) come from the core: DLManagedTensors the caller
   * owns, also when the call fails, and deletes with their deleter. */
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = fill_kernel(0, TJ_BUF_OUTPUT);
  tj_arg args[2];
  void *outputs[1] = {(void *)1};
  tj_call call = {args, 2, 0, NULL, outputs};
  for (int64_t n = 0; n < 3; ++n) { /* n == 0: an empty output still has data */
    fill_args(args, 2.5, n);
    CHECK_OK(tj_call_run(k, &call));
    check_host_output(outputs[0], n, 2.5f, 64);
    ((DLManagedTensor *)outputs[0])->deleter(outputs[0]);
  }
  /* A failed launch still hands the output over. */
  fill_args(args, 1.0, 3);
  CHECK_STATUS(tj_call_run(k, &call), TJ_ERUNTIME);
  check_host_output(outputs[0], 3, 1.0f, 64);
  ((DLManagedTensor *)outputs[0])->deleter(outputs[0]);
  /* A refused call allocates nothing. */
  fill_args(args, 1.0, -1);
  outputs[0] = (void *)1;
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK(outputs[0] == NULL);
  tj_kernel_free(k);
  /* A declared alignment above 64 bytes is kept. */
  k = fill_kernel(256, TJ_BUF_OUTPUT);
  fill_args(args, 4.0, 5);
  CHECK_OK(tj_call_run(k, &call));
  check_host_output(outputs[0], 5, 4.0f, 256);
  ((DLManagedTensor *)outputs[0])->deleter(outputs[0]);
  tj_kernel_free(k);
  /* Tensor arguments no producer stands behind (tj_arg_from_dltensor) allocate the same. */
  tj_kernel *add = adder(TJ_BUF_OUTPUT);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, a_data, TJT_F32, 8);
  tjt_tensor_1d(&b, b_data, TJT_F32, 8);
  tj_arg targs[2];
  tjt_arg_tensor(&targs[0], &a, 0);
  tjt_arg_tensor(&targs[1], &b, 0);
  tj_call tcall = {targs, 2, 0, NULL, outputs};
  CHECK_OK(tj_call_run(add, &tcall));
  DLManagedTensor *c = outputs[0];
  CHECK_EQ_INT(c->dl_tensor.ndim, 1);
  CHECK_EQ_INT(c->dl_tensor.shape[0], 8);
  CHECK(((float *)c->dl_tensor.data)[7] == 88.0f);
  c->deleter(c);
  CHECK_EQ_INT(rec.allocations, 0); /* no producer was asked */
  tj_kernel_free(add);
  /* A call through a binding (tj_call_run_binding: here one with a host and no
   * fallback) gets no core allocation: its outputs would have to be the host's objects. */
  k = fill_kernel(0, TJ_BUF_OUTPUT);
  tj_host host;
  memset(&host, 0, sizeof(host));
  const tj_call_binding binding = {NULL, &host, 0, 0};
  fill_args(args, 1.0, 2);
  CHECK_STATUS(tj_call_run_binding(k, &call, &binding), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(),
               "fill: output 'out': no tensor argument to allocate it like, and "
               "no default allocator");
  CHECK(outputs[0] == NULL);
  tj_kernel_free(k);
}

static int32_t workspace_sum_entry(const tj_value *args) {
  const float *a = args[0].p;
  float *w = args[1].p, *out = args[2].p;
  for (int64_t i = 0; i < args[3].i; ++i) {
    if (w[i] != 0.0f) return 1; /* zero-filled */
    w[i] = a[i] * 2;
    out[i] = w[i] + 1;
  }
  return 0;
}

TEST(call_run_core_allocates_host_workspaces) {
  /* ws(A: (n,) f32, W: (n,) f32 zero-filled workspace, out: (n,) f32 output): the
   * core allocates both, hands the output over and deletes the workspace. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("ws", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "W", TJT_F32, 1, &n, NULL, 0, TJ_BUF_WORKSPACE | TJ_BUF_ZERO);
  tjt_buffer(k, 2, "out", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, workspace_sum_entry));
  tjt_tensor a;
  tjt_tensor_1d(&a, a_data, TJT_F32, 8);
  tj_arg args[1];
  void *outputs[1];
  tj_call call = {args, 1, 0, NULL, outputs};
  for (int round = 0; round < 2; ++round) {
    tjt_arg_tensor(&args[0], &a, 0);
    CHECK_OK(tj_call_run(k, &call));
    DLManagedTensor *out = outputs[0];
    CHECK(((float *)out->dl_tensor.data)[7] == 17.0f);
    out->deleter(out);
  }
  /* Bound: the workspace lives as long as the bound launch. */
  tjt_arg_tensor(&args[0], &a, 0);
  tj_bound *bound = NULL;
  CHECK_OK(tj_bound_create(k, &call, &bound));
  CHECK_OK(tj_bound_launch(bound, 0, NULL)); /* zero-filled at every launch */
  CHECK_OK(tj_bound_launch(bound, 0, NULL));
  CHECK(((float *)((DLManagedTensor *)outputs[0])->dl_tensor.data)[0] == 3.0f);
  tj_bound_free(bound);
  tj_kernel_free(k);
}

/* ---- Bound launches (tj_bound) --------------------------------------------------- */

TEST(bound_launch_binds_once_and_replays) {
  memset(&rec, 0, sizeof(rec));
  rec.own = 1;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1] = {NULL};
  tj_call call = {args, 2, 0, NULL, outputs};
  tj_bound *bound = NULL;
  CHECK_OK(tj_bound_create(k, &call, &bound));
  /* Imported, validated and allocated once; the records moved in. */
  CHECK_EQ_INT(rec.imports, 2);
  CHECK_EQ_INT(rec.allocations, 1);
  CHECK(outputs[0] == &rec.outs[0]);
  CHECK_EQ_INT(args[0].kind, TJ_ARG_NONE);
  CHECK(rec.out_data[0][7] == 0.0f); /* nothing ran yet */
  CHECK_EQ_INT(tj_bound_frame(bound)->symbols[0], 8);
  for (int i = 0; i < 3; ++i) CHECK_OK(tj_bound_launch(bound, 0, NULL));
  CHECK(rec.out_data[0][7] == 88.0f);
  CHECK_EQ_INT(rec.imports, 2);
  CHECK_EQ_INT(rec.allocations, 1);
  CHECK_EQ_INT(rec.deletes, 0); /* the imports are kept */
  /* A CPU kernel takes no stream. */
  CHECK_STATUS(tj_bound_launch(bound, 1, (void *)0x1234), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("vec_add: a stream was given to a cpu kernel");
  CHECK_OK(tj_bound_launch(bound, 1, NULL));
  tj_bound_free(bound);
  CHECK_EQ_INT(rec.deletes, 2);
  tj_bound_free(NULL);
  tj_kernel_free(k);
}

TEST(bound_launch_core_allocates_host_outputs) {
  /* A bound launch from C with no producer owns the core's host outputs: borrowed by
   * the caller, launched into again and again, deleted by tj_bound_free. */
  tj_kernel *k = fill_kernel(0, TJ_BUF_OUTPUT);
  tj_arg args[2];
  fill_args(args, 1.5, 4);
  void *outputs[1] = {NULL};
  tj_call call = {args, 2, 0, NULL, outputs};
  tj_bound *bound = NULL;
  CHECK_OK(tj_bound_create(k, &call, &bound));
  DLManagedTensor *out = outputs[0]; /* allocated, not yet written */
  CHECK_OK(tj_bound_launch(bound, 0, NULL));
  check_host_output(out, 4, 1.5f, 64);
  ((float *)out->dl_tensor.data)[0] = 0;
  CHECK_OK(tj_bound_launch(bound, 0, NULL));
  check_host_output(out, 4, 1.5f, 64);
  CHECK(tj_bound_frame(bound)->params[0]->tensor.data == out->dl_tensor.data);
  tj_bound_free(bound); /* deletes the output: ASan reports a leak or a double free */
  /* A refused bind leaves nothing behind; a launch that fails keeps the handle's
   * output for tj_bound_free. */
  fill_args(args, 1.0, -2);
  CHECK_STATUS(tj_bound_create(k, &call, &bound), TJ_EVALUE);
  CHECK(bound == NULL && outputs[0] == NULL);
  fill_args(args, 1.0, 3);
  CHECK_OK(tj_bound_create(k, &call, &bound));
  CHECK_STATUS(tj_bound_launch(bound, 0, NULL), TJ_ERUNTIME);
  tj_bound_free(bound);
  tj_kernel_free(k);
}

TEST(bound_launch_update) {
  memset(&rec, 0, sizeof(rec));
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  static float other[8] = {100, 100, 100, 100, 100, 100, 100, 100}, wide[9];
  tjt_object a, b, c, d;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, b_data, 8);
  tj_arg args[2], fresh;
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1];
  tj_call call = {args, 2, 0, NULL, outputs};
  tj_bound *bound = NULL;
  CHECK_OK(tj_bound_create(k, &call, &bound));
  object_tensor(&c, other, 8);
  object_arg(&fresh, &c);
  CHECK_OK(tj_bound_update(bound, 1, &fresh));
  CHECK_OK(tj_bound_launch(bound, 0, NULL));
  CHECK(rec.out_data[0][0] == 101.0f && rec.out_data[0][7] == 108.0f);
  /* Another shape, dtype or alignment: refused naming the argument; the
   * launch is unchanged. */
  object_tensor(&d, wide, 9);
  object_arg(&fresh, &d);
  CHECK_STATUS(tj_bound_update(bound, 1, &fresh), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 1 'B': expected shape[0] == n (= 8, bound by the inputs), got 9");
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  object_tensor(&d, other, 8);
  d.tensor.t.dtype = TJT_F64;
  object_arg(&fresh, &d);
  CHECK_STATUS(tj_bound_update(bound, 0, &fresh), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 0 'A': expected dtype float32, got float64");
  object_tensor(&d, other, 8);
  d.tensor.t.byte_offset = 2;
  object_arg(&fresh, &d);
  CHECK_STATUS(tj_bound_update(bound, 0, &fresh), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("vec_add: argument 0 'A': expected the data pointer aligned to 4 bytes");
  object_tensor(&d, other, 8);
  d.tensor.t.device.device_type = kDLCUDA;
  object_arg(&fresh, &d);
  CHECK_STATUS(tj_bound_update(bound, 0, &fresh), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH(
      "vec_add: argument 0 'A': expected a cpu tensor, got a tensor on device "
      "cuda:0");
  tj_arg_init(&fresh);
  fresh.kind = TJ_ARG_FLOAT;
  CHECK_STATUS(tj_bound_update(bound, 0, &fresh), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(),
               "vec_add: argument 0 'A': expected a tensor to replace the bound one, got float");
  tj_arg_init(&fresh);
  CHECK_STATUS(tj_bound_update(bound, 2, &fresh), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "vec_add: no argument 2 to update (the kernel takes 2)");
  CHECK_OK(tj_bound_launch(bound, 0, NULL));
  CHECK(rec.out_data[0][7] == 108.0f);
  tj_bound_free(bound);
  tj_kernel_free(k);
}

TEST(bound_launch_failures_own_the_records) {
  memset(&rec, 0, sizeof(rec));
  rec.own = 1;
  tj_kernel *k = adder(TJ_BUF_OUTPUT);
  static float short_b[7];
  tjt_object a, b;
  object_tensor(&a, a_data, 8);
  object_tensor(&b, short_b, 7);
  tj_arg args[2];
  object_arg(&args[0], &a);
  object_arg(&args[1], &b);
  void *outputs[1] = {(void *)1};
  tj_call call = {args, 2, 0, NULL, outputs};
  tj_bound *bound = (tj_bound *)1;
  CHECK_STATUS(tj_bound_create(k, &call, &bound), TJ_EVALUE);
  CHECK(bound == NULL && outputs[0] == NULL);
  CHECK_ERROR_STARTS_WITH(
      "vec_add: argument 1 'B': expected shape[0] == n (= 8, bound by argument 0 "
      "'A'), got 7");
  CHECK_EQ_INT(rec.deletes, 2);
  /* The count is checked first, as a call's. */
  object_arg(&args[0], &a);
  call.nargs = 1;
  CHECK_STATUS(tj_bound_create(k, &call, &bound), TJ_ETYPE);
  CHECK_ERROR_STARTS_WITH("vec_add: expected 2 arguments (A, B), got 1");
  CHECK_EQ_INT(rec.deletes, 2); /* nothing was imported */
  tj_kernel_free(k);
}

/* ---- A framework's claim (tj_claim) ------------------------------------------ */

static int grad_mode, grad_asks;

static bool fake_requires_grad(const void *state) { return *(const bool *)state; }
static bool fake_grad_enabled(void) {
  grad_asks++;
  return grad_mode;
}

/* vec_add's A + B -> C called with two objects through a producer that carries
 * `claim`: every claim test's setup, and its one way to run the call. */
typedef struct {
  tj_producer producer;
  tj_kernel *k;
  tjt_object a, b;
  tj_arg args[2];
  void *outputs[1];
  tj_call call;
  tj_call_binding binding;
} claim_fixture;

static void claim_fixture_init(claim_fixture *f, const tj_claim *claim) {
  memset(&rec, 0, sizeof(rec));
  f->producer = fake_producer;
  f->producer.claim = claim;
  f->k = adder(TJ_BUF_OUTPUT);
  object_tensor(&f->a, a_data, 8);
  object_tensor(&f->b, b_data, 8);
  tj_call call = {f->args, 2, 0, NULL, f->outputs};
  f->call = call;
  memset(&f->binding, 0, sizeof(f->binding));
}

/* Imports A and B afresh through the claiming producer and runs the call. */
static int claim_run(claim_fixture *f) {
  object_arg(&f->args[0], &f->a);
  object_arg(&f->args[1], &f->b);
  f->args[0].producer = f->args[1].producer = &f->producer;
  return tj_call_run_binding(f->k, &f->call, &f->binding);
}

/* A claim on the fake objects' requires-grad flag and grad mode. */
static tj_claim grad_claim(void) {
  return (tj_claim){0,
                    (int32_t)offsetof(tjt_object, grad),
                    fake_requires_grad,
                    fake_grad_enabled,
                    NULL,
                    NULL,
                    NULL,
                    -1};
}

#define RUN_CLAIMED(grad_a, grad_b, expect)   \
  do {                                        \
    f.a.grad = (grad_a), f.b.grad = (grad_b); \
    CHECK_STATUS(claim_run(&f), expect);      \
  } while (0)

TEST(call_run_claims) {
  tj_claim claim = grad_claim();
  claim_fixture f;
  claim_fixture_init(&f, &claim);
  bool yes = true, no = false;

  /* Nothing requires grad: no claim, grad mode never asked. */
  grad_mode = 1, grad_asks = 0;
  RUN_CLAIMED(NULL, &no, TJ_OK);
  CHECK_EQ_INT(grad_asks, 0);
  CHECK_EQ_INT(rec.imports, 2);

  /* B requires grad with grad mode on: claimed once the call is validated
   * (both imported), nothing made. */
  memset(&rec, 0, sizeof(rec));
  RUN_CLAIMED(&no, &yes, TJ_ECLAIMED);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 1 'B': requires grad");
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  CHECK_EQ_INT(rec.imports, 2);
  CHECK_EQ_INT(rec.allocations, 0);
  CHECK(f.outputs[0] == NULL);

  /* A call refused by validation is refused as it would be without the claim. */
  memset(&rec, 0, sizeof(rec));
  f.call.nargs = 1;
  RUN_CLAIMED(&yes, &yes, TJ_ETYPE);
  f.call.nargs = 2;

  /* The framework's own implementation of the call is never claimed. */
  memset(&rec, 0, sizeof(rec));
  f.binding.unclaimed = 1;
  RUN_CLAIMED(&yes, &yes, TJ_OK);
  CHECK(rec.out_data[0][0] == 11.0f);
  f.binding.unclaimed = 0;

  /* Both require grad with grad mode off: grad mode asked once, the call runs. */
  memset(&rec, 0, sizeof(rec));
  grad_mode = 0, grad_asks = 0;
  RUN_CLAIMED(&yes, &yes, TJ_OK);
  CHECK_EQ_INT(grad_asks, 1);
  CHECK(rec.out_data[0][0] == 11.0f);

  /* Tensors the framework traces are always claimed, whatever their state. */
  claim.always = 1;
  RUN_CLAIMED(NULL, NULL, TJ_ECLAIMED);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 0 'A': a tensor the framework traces");
  tj_kernel_free(f.k);
}

/* Claimed at once: at the first argument that requires grad, the rest neither
 * imported nor validated (a call of the wrong count is still refused for its
 * count, which is read before any import). */
TEST(call_run_claims_at_once) {
  tj_claim claim = grad_claim();
  claim_fixture f;
  claim_fixture_init(&f, &claim);
  bool yes = true, no = false;
  grad_mode = 1;
  f.binding.claim_at_once = 1;
  memset(&rec, 0, sizeof(rec));
  RUN_CLAIMED(&yes, &yes, TJ_ECLAIMED);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 0 'A': requires grad");
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);
  CHECK_EQ_INT(rec.imports, 0);
  memset(&rec, 0, sizeof(rec));
  RUN_CLAIMED(&no, &yes, TJ_ECLAIMED);
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  CHECK_EQ_INT(rec.imports, 1);
  CHECK_EQ_INT(rec.allocations, 0);
  memset(&rec, 0, sizeof(rec));
  RUN_CLAIMED(&no, &no, TJ_OK); /* nothing claimed: the call runs as any */
  CHECK(rec.out_data[0][0] == 11.0f);
  f.call.nargs = 1;
  RUN_CLAIMED(&yes, &yes, TJ_ETYPE);
  f.call.nargs = 2;
  tj_kernel_free(f.k);
}
#undef RUN_CLAIMED

/* A framework's autograd record (tj_claim.meta_offset): NULL, nothing is asked. */
typedef struct {
  const void *meta;
  bool grad;
} fake_impl;

static int record_asks;

static bool impl_requires_grad(const void *state) {
  record_asks++;
  return ((const fake_impl *)state)->grad;
}

TEST(call_run_claims_skip_objects_without_a_record) {
  tj_claim claim = {
      0,    (int32_t)offsetof(tjt_object, grad), impl_requires_grad, fake_grad_enabled, NULL, NULL,
      NULL, (int32_t)offsetof(fake_impl, meta)};
  claim_fixture f;
  claim_fixture_init(&f, &claim);
  static const int record = 1;
  fake_impl plain = {NULL, false}, recorded = {&record, true};
  grad_mode = 1;
  /* No record on either: run, requires_grad never called. */
  record_asks = 0;
  f.a.grad = f.b.grad = (const bool *)&plain;
  CHECK_OK(claim_run(&f));
  CHECK_EQ_INT(record_asks, 0);
  /* A record that requires grad: asked, claimed once validated. */
  f.b.grad = (const bool *)&recorded;
  CHECK_STATUS(claim_run(&f), TJ_ECLAIMED);
  CHECK_EQ_INT(record_asks, 1);
  CHECK_EQ_INT(tj_last_error_info()->argument, 1);
  tj_kernel_free(f.k);
}

/* A claim asked of the framework itself (tj_claim.ask): per object, and again
 * after an import fails. */
static int ask_answer, ask_failed_answer, asks, failed_asks;

static int fake_ask(const tj_claim *self, void *object, int32_t failed) {
  (void)self, (void)object;
  if (failed) {
    failed_asks++;
    return ask_failed_answer;
  }
  asks++;
  return ask_answer;
}

static int active_mode, active_asks;

static int fake_active(const tj_claim *self) {
  (void)self;
  active_asks++;
  return active_mode;
}

TEST(call_run_claims_asked) {
  tj_claim claim = {0, 0, NULL, NULL, fake_ask, NULL, NULL, -1};
  claim_fixture f;
  claim_fixture_init(&f, &claim);
#define RUN_ASKED(answer, expect)                  \
  do {                                             \
    memset(&rec, 0, sizeof(rec));                  \
    ask_answer = (answer), asks = failed_asks = 0; \
    CHECK_STATUS(claim_run(&f), expect);           \
  } while (0)
  RUN_ASKED(TJ_CLAIM_NONE, TJ_OK);
  CHECK_EQ_INT(asks, 2);
  /* Outside the framework's mode nothing is asked; the mode, once per call. */
  claim.active = fake_active;
  active_mode = 0, active_asks = 0;
  RUN_ASKED(TJ_CLAIM_NOW, TJ_OK);
  CHECK_EQ_INT(asks, 0);
  CHECK_EQ_INT(active_asks, 1);
  active_mode = 1;
  RUN_ASKED(TJ_CLAIM_VALIDATED, TJ_ECLAIMED);
  CHECK_EQ_INT(asks, 2);
  CHECK_EQ_INT(active_asks, 2);
  claim.active = NULL;
  RUN_ASKED(TJ_CLAIM_VALIDATED, TJ_ECLAIMED);
  CHECK_EQ_INT(rec.imports, 2);
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);
  RUN_ASKED(TJ_CLAIM_NOW, TJ_ECLAIMED);
  CHECK_EQ_INT(rec.imports, 0);
  RUN_ASKED(TJ_EPYERR, TJ_EPYERR);
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);
  /* An import that fails: the framework is asked again; it claims or not. */
  f.b.fail_import = TJ_EVALUE;
  ask_failed_answer = TJ_CLAIM_NOW;
  RUN_ASKED(TJ_CLAIM_NONE, TJ_ECLAIMED);
  CHECK_EQ_INT(failed_asks, 1);
  CHECK_EQ_STR(tj_last_error(), "vec_add: argument 1 'B': a tensor only the framework can read");
  ask_failed_answer = TJ_CLAIM_NONE;
  RUN_ASKED(TJ_CLAIM_NONE, TJ_EVALUE);
  CHECK_EQ_INT(failed_asks, 1);
#undef RUN_ASKED
  tj_kernel_free(f.k);
}

/* ---- The exchange-API adapter ------------------------------------------------- */

static int x_alloc(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                   void (*set_error)(void *, const char *, const char *)) {
  (void)proto, (void)out;
  /* A C++ framework's error text: its first line, then a backtrace. */
  set_error(ctx, "MemoryError", "the table's allocator refuses\nframe #0: alloc() + 0x9d");
  return -1;
}
/* Allocators that fail without a word, and that succeed with nothing. */
static int x_alloc_silent(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                          void (*set_error)(void *, const char *, const char *)) {
  (void)proto, (void)out, (void)ctx, (void)set_error;
  return -1;
}
static int x_alloc_nothing(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                           void (*set_error)(void *, const char *, const char *)) {
  (void)proto, (void)ctx, (void)set_error;
  *out = NULL;
  return 0;
}
static int x_export(void *obj, DLManagedTensorVersioned **out) {
  tjt_object *o = obj;
  DLManagedTensorVersioned *m = calloc(1, sizeof(*m));
  m->version.major = TJ_DLPACK_MAJOR;
  m->dl_tensor = o->tensor.t;
  m->deleter = managed_deleter;
  *out = m;
  return 0;
}
static int x_to_object(DLManagedTensorVersioned *m, void **out) {
  (void)m, (void)out;
  return -1;
}
static int x_view(void *obj, DLTensor *out) {
  *out = ((tjt_object *)obj)->tensor.t;
  return 0;
}
static int x_stream(DLDeviceType type, int32_t id, void **out) {
  (void)type, (void)id;
  *out = (void *)0x5;
  return 0;
}

TEST(producer_from_exchange_versions) {
  DLPackExchangeAPI v1;
  memset(&v1, 0, sizeof(v1));
  v1.header.version.major = TJ_DLPACK_MAJOR;
  v1.managed_tensor_allocator = x_alloc;
  v1.managed_tensor_from_py_object_no_sync = x_export;
  v1.managed_tensor_to_py_object_no_sync = x_to_object;
  v1.current_work_stream = x_stream;
  DLPackExchangeAPI v2 = v1;
  v2.header.version.major = TJ_DLPACK_MAJOR + 1;
  v2.header.prev_api = &v1.header; /* a newer table chains to the one we speak */
  tj_producer p;
  CHECK_OK(tj_producer_from_exchange(&p, &v2.header, &type_tensor));
  CHECK(p.api == &v1);
  CHECK(p.type == &type_tensor);
  void *stream = NULL;
  CHECK_OK(p.current_stream(&p, kDLCUDA, 0, &stream));
  CHECK(stream == (void *)0x5);

  v2.header.prev_api = NULL;
  CHECK_STATUS(tj_producer_from_exchange(&p, &v2.header, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("offers no version 1.x");
  v1.current_work_stream = NULL; /* the API requires it */
  CHECK_STATUS(tj_producer_from_exchange(&p, &v1.header, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("lacks a function the API requires");
}

/* A table with every function the API requires (the owning export, no view). */
static void exchange_table(DLPackExchangeAPI *api) {
  memset(api, 0, sizeof(*api));
  api->header.version.major = TJ_DLPACK_MAJOR;
  api->managed_tensor_allocator = x_alloc;
  api->managed_tensor_from_py_object_no_sync = x_export;
  api->managed_tensor_to_py_object_no_sync = x_to_object;
  api->current_work_stream = x_stream;
}

TEST(producer_exchange_view_or_export) {
  memset(&rec, 0, sizeof(rec));
  DLPackExchangeAPI api;
  exchange_table(&api);
  tj_producer p;
  CHECK_OK(tj_producer_from_exchange(&p, &api.header, NULL));
  tjt_object a;
  object_tensor(&a, a_data, 8);
  tj_arg arg;
  tj_arg_init(&arg);
  CHECK_OK(p.import(&p, &a, &arg)); /* no view function: the owning export */
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_VERSIONED);
  tj_arg_release(&arg);
  CHECK_EQ_INT(rec.deletes, 1);
  api.dltensor_from_py_object_no_sync = x_view;
  CHECK_OK(tj_producer_from_exchange(&p, &api.header, NULL));
  tj_arg_init(&arg);
  CHECK_OK(p.import(&p, &a, &arg)); /* the view: nothing to release */
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);
  CHECK(arg.tensor.data == a_data);

  /* The allocator's refusal keeps its message for the caller's prefix: the
   * first line only. */
  DLTensor proto;
  memset(&proto, 0, sizeof(proto));
  void *object = (void *)1;
  CHECK_STATUS(p.allocate(&p, &proto, &arg, &object), TJ_ERUNTIME);
  CHECK_EQ_STR(tj_last_error(), "the table's allocator refuses");
  CHECK(object == NULL);
  /* A failure it does not explain, or no tensor, still says what happened. */
  api.managed_tensor_allocator = x_alloc_silent;
  CHECK_STATUS(p.allocate(&p, &proto, &arg, &object), TJ_ERUNTIME);
  CHECK_EQ_STR(tj_last_error(), "the allocator failed without saying why");
  api.managed_tensor_allocator = x_alloc_nothing;
  CHECK_STATUS(p.allocate(&p, &proto, &arg, &object), TJ_ERUNTIME);
  CHECK_EQ_STR(tj_last_error(), "the allocator returned no tensor");
}

static int x_export_fails(void *obj, DLManagedTensorVersioned **out) {
  (void)obj, (void)out;
  return -1;
}
static int conjugate_view(const tj_producer *self, void *object, uint32_t *view) {
  (void)self, (void)object;
  *view = TJ_VIEW_CONJUGATE;
  return TJ_OK;
}
static int owned_import_calls;
static int own_import(const tj_producer *self, void *object, tj_arg *arg) {
  (void)self;
  ++owned_import_calls;
  arg->kind = TJ_ARG_TENSOR;
  arg->tensor = ((tjt_object *)object)->tensor.t;
  return TJ_OK;
}

/* An import that outlives the call (a layout view's): the exchange API's owning
 * export even where the producer imports calls' arguments as views, the
 * producer's own import otherwise, and the lazy-view check before either. */
TEST(producer_import_owned) {
  memset(&rec, 0, sizeof(rec));
  DLPackExchangeAPI api;
  exchange_table(&api);
  api.dltensor_from_py_object_no_sync = x_view;
  tj_producer p;
  CHECK_OK(tj_producer_from_exchange(&p, &api.header, NULL));
  tjt_object a;
  object_tensor(&a, a_data, 8);
  tj_arg arg;
  tj_arg_init(&arg);
  CHECK_OK(tj_producer_import_owned(&p, &a, &arg));
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_VERSIONED);
  CHECK(arg.tensor.data == a_data);
  tj_arg_release(&arg);
  CHECK_EQ_INT(rec.deletes, 1);

  api.managed_tensor_from_py_object_no_sync = x_export_fails;
  tj_arg_init(&arg);
  CHECK_STATUS(tj_producer_import_owned(&p, &a, &arg), TJ_EPYERR);
  CHECK_EQ_STR(tj_last_error(), "cannot import the tensor through DLPack");
  CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_IMPORT);
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_NONE);

  p.view = conjugate_view; /* refused before anything is exported */
  CHECK_STATUS(tj_producer_import_owned(&p, &a, &arg), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("got a conjugate view");

  tj_producer own;
  memset(&own, 0, sizeof(own));
  own.import = own_import;
  owned_import_calls = 0;
  tj_arg_init(&arg);
  CHECK_OK(tj_producer_import_owned(&own, &a, &arg));
  CHECK_EQ_INT(owned_import_calls, 1);
  CHECK(arg.tensor.data == a_data);
}

/* ---- Capsules ----------------------------------------------------------------- */

typedef struct {
  const char *name;
  void *pointer;
} tjt_capsule;

static int cap_valid(void *c, const char *name) {
  return strcmp(((tjt_capsule *)c)->name, name) == 0;
}
static void *cap_pointer(void *c, const char *name) {
  (void)name;
  return ((tjt_capsule *)c)->pointer;
}
static int cap_rename(void *c, const char *name) {
  ((tjt_capsule *)c)->name = name;
  return 0;
}

TEST(arg_from_capsule) {
  memset(&rec, 0, sizeof(rec));
  tj_host host;
  memset(&host, 0, sizeof(host));
  host.capsule_is_valid = cap_valid;
  host.capsule_pointer = cap_pointer;
  host.capsule_set_name = cap_rename;
  tjt_object a;
  object_tensor(&a, a_data, 8);
  DLManagedTensorVersioned *m = NULL;
  CHECK(x_export(&a, &m) == 0);
  tjt_capsule capsule = {"dltensor_versioned", m};
  tj_arg arg;
  CHECK_OK(tj_arg_from_capsule(&arg, &capsule, &host));
  CHECK_EQ_STR(capsule.name, "used_dltensor_versioned"); /* consumed exactly once */
  CHECK_EQ_INT(arg.owner_kind, TJ_OWNER_VERSIONED);
  tj_arg_release(&arg);
  CHECK_EQ_INT(rec.deletes, 1);

  tjt_capsule used = {"used_dltensor_versioned", m};
  CHECK_STATUS(tj_arg_from_capsule(&arg, &used, &host), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(), "__dlpack__ returned an object that is not a DLPack capsule");
  CHECK_EQ_INT(rec.deletes, 1);
}

/* ---- Integer scalars that bind symbols; global workspaces ------------------- */

static int64_t seen_n;
static float *seen_w;
static int32_t fill_entry(const tj_value *args) {
  seen_n = args[0].i;
  float *c = args[1].p;
  for (int64_t i = 0; i < 2 * args[0].i; ++i) c[i] = (float)i;
  return 0;
}

static int64_t scalar_value(tj_arg *arg, int64_t v) {
  tj_arg_init(arg);
  arg->kind = TJ_ARG_INT;
  arg->value.i = v;
  return v;
}

TEST(call_run_scalar_binds_symbols) {
  memset(&rec, 0, sizeof(rec));
  /* fill(n: int32, C: output of shape (n * 2,)): the output's shape comes from n. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("fill", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t twice = tjt_binop_const(k, "n * 2", 0, TJ_OP_MUL, 2);
  const tj_call_binding fallback = {&fake_producer, NULL, 0, 0};
  CHECK_OK(tj_kernel_set_scalar(k, 0, "n", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_set_scalar_symbol(k, 0, 0));
  tjt_buffer(k, 1, "C", TJT_F32, 1, &twice, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, fill_entry));
  /* Each value shapes its own output: the memo keys on the value. */
  const int64_t values[] = {3, 4, 3, 0, 4};
  for (int i = 0; i < 5; ++i) {
    rec.allocations = 0; /* each call's output in the first slot */
    tj_arg args[1];
    scalar_value(&args[0], values[i]);
    void *outputs[1];
    tj_call call = {args, 1, 0, NULL, outputs};
    CHECK_OK(tj_call_run_binding(k, &call, &fallback));
    CHECK_EQ_INT(seen_n, values[i]);
    CHECK_EQ_INT(((tjt_object *)outputs[0])->tensor.t.shape[0], 2 * values[i]);
  }
  tj_arg args[1];
  scalar_value(&args[0], -1);
  void *outputs[1];
  tj_call call = {args, 1, 0, NULL, outputs};
  rec.allocations = 0;
  CHECK_STATUS(tj_call_run_binding(k, &call, &fallback), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "fill: output 'C': shape[0] == n * 2 evaluates to -2, which is negative");
  scalar_value(&args[0], (int64_t)1 << 40); /* the scalar's own range first */
  CHECK_STATUS(tj_call_run_binding(k, &call, &fallback), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "fill: argument 0 'n': value 1099511627776 is out of range for "
               "int32");
  tj_kernel_free(k);
}

TEST(call_run_scalar_symbol_agreement) {
  /* f(A: (m,) float32, m: uint64) with m a multiple of 4. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("f", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 4));
  int32_t m = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &m, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "m", TJT_DTYPE(kDLUInt, 64)));
  CHECK_STATUS(tj_kernel_set_scalar_symbol(k, 1, 1), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "f: scalar parameter 'm': symbol 1 out of range [0, 1)");
  CHECK_STATUS(tj_kernel_set_scalar_symbol(k, 0, 0), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "f: parameter 0 is not a declared scalar");
  CHECK_OK(tj_kernel_set_scalar_symbol(k, 1, 0));
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor a;
  float data[8] = {0};
  tjt_tensor_1d(&a, data, TJT_F32, 8);
  tj_arg args[2];
  tj_frame frame;
  tjt_arg_tensor(&args[0], &a, 0);
  scalar_value(&args[1], 8);
  CHECK_OK(tj_call_bind(k, args, 2, &frame));
  CHECK_EQ_INT(frame.symbols[0], 8);
  scalar_value(&args[1], 5);
  CHECK_STATUS(tj_call_bind(k, args, 2, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "f: argument 1 'm': expected m == 8 (bound by argument 0 'A'), "
               "got 5");
  tjt_tensor_1d(&a, data, TJT_F32, 6);
  scalar_value(&args[1], 6);
  CHECK_STATUS(tj_call_bind(k, args, 2, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "f: argument 0 'A': shape[0] = 6 binds m, which must be "
               "divisible by 4");
  tj_kernel_free(k);
  /* The scalar first: it binds, and the tensor must agree; a uint64 beyond int64 is
   * refused by name. */
  CHECK_OK(tj_kernel_create("g", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  m = tjt_sym(k, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 0, "m", TJT_DTYPE(kDLUInt, 64)));
  CHECK_OK(tj_kernel_set_scalar_symbol(k, 0, 0));
  tjt_buffer(k, 1, "A", TJT_F32, 1, &m, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  tjt_tensor_1d(&a, data, TJT_F32, 8);
  scalar_value(&args[0], 7);
  tjt_arg_tensor(&args[1], &a, 0);
  CHECK_STATUS(tj_call_bind(k, args, 2, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "g: argument 1 'A': expected shape[0] == m (= 7, bound by "
               "argument 0 'm'), got 8");
  scalar_value(&args[0], -1);
  args[0].flags = TJ_ARG_UNSIGNED;
  CHECK_STATUS(tj_call_bind(k, args, 2, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "g: argument 0 'm': value 18446744073709551615 binds m, which is "
               "evaluated as an int64: expected at most 2**63 - 1");
  tj_kernel_free(k);
  /* Only integer scalars bind. */
  CHECK_OK(tj_kernel_create("h", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "x", 1));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "x", TJT_F32));
  CHECK_STATUS(tj_kernel_set_scalar_symbol(k, 0, 0), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "h: scalar parameter 'x' is float32; only integer scalars bind "
               "symbols");
  tj_kernel_free(k);
}

static int released;
static void count_release(void *object) {
  ((tjt_object *)object)->refs--;
  released++;
}

static int32_t workspace_entry(const tj_value *args) {
  seen_w = args[1].p;
  for (int i = 0; i < 8; ++i)
    if (seen_w[i] != 0.0f) return 1; /* zero-filled before the kernel runs */
  for (int i = 0; i < 8; ++i) seen_w[i] = 7.0f;
  return 0;
}

TEST(call_run_workspaces) {
  memset(&rec, 0, sizeof(rec));
  for (int i = 0; i < 64; ++i) rec.out_data[0][i] = rec.out_data[1][i] = 5.0f; /* stale */
  /* ws(A: (n,) float32) with a zero-filled workspace W of shape (n,). */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("ws", 2, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  tjt_buffer(k, 1, "W", TJT_F32, 1, &n, NULL, 0, TJ_BUF_WORKSPACE | TJ_BUF_ZERO);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, workspace_entry));
  CHECK_EQ_INT(tj_kernel_num_outputs(k), 0);
  CHECK_EQ_INT(tj_kernel_num_workspaces(k), 1);
  CHECK_EQ_INT(tj_kernel_output_param(k, 0), 1);
  CHECK_EQ_INT(tj_kernel_output_param(k, 1), -1);
  tj_host host;
  memset(&host, 0, sizeof(host));
  host.release = count_release;
  const tj_call_binding binding = {NULL, &host, 0, 0};
  released = 0;
  for (int call_number = 0; call_number < 2; ++call_number) {
    tjt_object a;
    object_tensor(&a, a_data, 8);
    tj_arg args[1];
    object_arg(&args[0], &a);
    tj_call call = {args, 1, 0, NULL, NULL};
    CHECK_OK(tj_call_run_binding(k, &call, &binding));
    CHECK(seen_w == rec.out_data[call_number]);
    CHECK_EQ_INT(seen_w[0], 7); /* the kernel wrote it */
    CHECK_EQ_INT(released, call_number + 1);
    CHECK_EQ_INT(rec.outs[call_number].refs, 0); /* released after the launch */
  }
  /* A workspace no allocator can make is refused by name. */
  tjt_tensor t;
  tjt_tensor_1d(&t, a_data, TJT_F32, 8);
  tj_arg args[1];
  tjt_arg_tensor(&args[0], &t, 0);
  tj_call call = {args, 1, 0, NULL, NULL};
  CHECK_STATUS(tj_call_run_binding(k, &call, &binding), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(),
               "ws: workspace 'W': no tensor argument to allocate it like, and "
               "no default allocator");
  tj_kernel_free(k);
  /* Flags that make no sense together are refused when declared. */
  CHECK_OK(tj_kernel_create("bad", 1, TJ_TARGET_CPU, &k));
  int32_t one = tjt_const(k, 1);
  CHECK_STATUS(tj_kernel_set_buffer(k, 0, "Z", TJT_F32, 1, &one, NULL, 0, TJ_BUF_ZERO), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "bad: parameter 'Z': only a workspace is zero-filled");
  CHECK_STATUS(tj_kernel_set_pointer(k, 0, "P", TJT_F32, 0, TJ_BUF_WORKSPACE), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "bad: pointer parameter 'P' cannot be an output or a workspace");
  tj_kernel_free(k);
}

/* NULL pointers through the public API are refused with a status and a
 * message naming the function and the parameter, never dereferenced. */
TEST(call_refuses_null_pointers) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  tj_frame frame;
  CHECK_STATUS(tj_call_bind(k, NULL, 2, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "tj_call_bind: args is NULL");
  CHECK_STATUS(tj_call_bind(NULL, NULL, 0, &frame), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "tj_call_bind: k is NULL");
  tj_arg args[2];
  CHECK_STATUS(tj_call_bind(k, args, 2, NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "tj_call_bind: frame is NULL");
  CHECK_STATUS(tj_call_set_output(NULL, 0, args), TJ_EVALUE);
  CHECK_STATUS(tj_call_launch(NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "tj_call_launch: f is NULL");
  CHECK_STATUS(tj_call_run(k, NULL), TJ_EVALUE);
  tj_call call = {NULL, 2, 0, NULL, NULL};
  CHECK_STATUS(tj_call_run(k, &call), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "tj_call_run: call->args is NULL");
  CHECK_STATUS(tj_call_run(NULL, &call), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_add_symbol(NULL, "n", 1), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_scalar(NULL, 0, "x", TJT_F32), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_entry(NULL, NULL), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_load(k, NULL, "f"), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_create("k", 0, TJ_TARGET_CPU, NULL), TJ_EVALUE);
  CHECK_EQ_INT(tj_kernel_num_params(NULL), -1);
  CHECK(tj_kernel_param_name(NULL, 0) == NULL);
  CHECK_STATUS(tj_expr_eval(NULL, 1, NULL, NULL), TJ_EVALUE);
  CHECK_STATUS(tj_layout_init(NULL, 1, NULL, NULL), TJ_EVALUE);
  CHECK_STATUS(tj_arg_from_versioned(args, NULL, "A"), TJ_EVALUE);
  tj_kernel_free(k);
}
