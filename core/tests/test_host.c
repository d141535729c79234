/*
 * The binding layer (tj_host_call and its helpers, core/src/host.c) over the
 * fake host of fake_host.h: classification of every argument kind, the type
 * registry, stream=, inputs by name, claimed calls, results and their order,
 * exceptions, the builtin entry; every reference the core takes or makes is
 * given back (fh_alive returns to 0, static objects to their counts).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builders.h"
#include "fake_host.h"
#include "memo.h"

/* ---- Tensors: objects holding a tjt_tensor, and their producer ----------------- */

static int imports, allocations, fail_import;
static float out_data[4][8];
static tjt_tensor out_tensors[4];
static fh_object tensor_type, outputs[4];

static int tensor_import(const tj_producer *self, void *object, tj_arg *arg) {
  (void)self;
  imports++;
  if (fail_import) {
    fh_raise(&fh_exception_types[6], "the producer refused"); /* a host error */
    return TJ_EPYERR;
  }
  tj_arg_from_dltensor(arg, &((tjt_tensor *)((fh_object *)object)->pointer)->t, 0);
  return TJ_OK;
}

static int tensor_allocate(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                           void **object) {
  (void)self;
  int i = allocations++ % 4;
  tjt_tensor_1d(&out_tensors[i], out_data[i], proto->dtype, proto->shape[0]);
  fh_object_init(&outputs[i], &tensor_type);
  outputs[i].pointer = &out_tensors[i];
  *object = &outputs[i];
  tj_arg_from_dltensor(out, &out_tensors[i].t, 0);
  return TJ_OK;
}

static tj_producer tensor_producer = {.import = tensor_import, .allocate = tensor_allocate};
static const tj_host_type tensor_info = {TJ_HOST_TENSOR, &tensor_producer, "Tensor"};

static void tensor_object(fh_object *o, tjt_tensor *t, float *data, int64_t n) {
  tjt_tensor_1d(t, data, TJT_F32, n);
  fh_object_init(o, &tensor_type);
  o->pointer = t;
}

/* ---- The kernel: mix(A, alpha: f64, k: i64, flag: bool) -> C = A * alpha + k + flag */

static int32_t mix_outputs; /* of the kernel mix_kernel made last */

/* Arguments: A, alpha, k, flag, the outputs, then n. */
static int32_t mix_entry(const tj_value *args) {
  const float *a = args[0].p;
  int64_t n = args[4 + mix_outputs].i;
  for (int32_t o = 0; o < mix_outputs; ++o) {
    float *c = args[4 + o].p;
    for (int64_t i = 0; i < n; ++i)
      c[i] = (float)(a[i] * args[1].f + (double)args[2].i + (double)args[3].i);
  }
  return 0;
}

static tj_kernel *mix_kernel(int32_t noutputs) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("mix", 4 + noutputs, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "alpha", TJT_F64));
  CHECK_OK(tj_kernel_set_scalar(k, 2, "k", TJT_DTYPE(kDLInt, 64)));
  CHECK_OK(tj_kernel_set_scalar(k, 3, "flag", TJT_DTYPE(kDLBool, 8)));
  for (int32_t o = 0; o < noutputs; ++o)
    tjt_buffer(k, 4 + o, o ? "D" : "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_set_entry(k, mix_entry));
  mix_outputs = noutputs;
  CHECK_OK(tj_kernel_finalize(k));
  return k;
}

/* ---- The host functions tilejit would give (tilejit.runtime.binding) ------------- */

static int describes, stream_asks, keyword_calls, claimed_calls, producer_errors;

static fh_object *describe_fn(fh_object *args) {
  describes++;
  return fh_describe(args);
}

static fh_object *stream_handle_fn(fh_object *args) {
  stream_asks++;
  fh_object *stream = args->items[0];
  CHECK_EQ_STR(((fh_object *)args->items[1])->s, "mix"); /* the kernel's name */
  if (stream->kind != FH_INT) {
    fh_raise(&fh_exception_types[1], "mix: stream must be a stream handle");
    return NULL;
  }
  return fh_int(stream->i);
}

static fh_object *keywords_fn(fh_object *args) {
  keyword_calls++;
  CHECK_EQ_INT(args->n, 3); /* (kernel, items, kwnames) */
  return fh_int(args->items[1]->n * 100 + args->items[2]->n);
}

static fh_object *claimed_fn(fh_object *args) {
  claimed_calls++;
  CHECK(args->items[2] == &fh_none); /* no stream= */
  return fh_int(args->items[1]->n);
}

static int64_t producer_error_step = TJ_PRODUCER_IMPORT;

static fh_object *producer_error_fn(fh_object *args) {
  producer_errors++;
  /* (prefix, step, exception, object): a new exception saying where. */
  CHECK_EQ_INT(args->items[1]->i, producer_error_step);
  if (producer_error_step == TJ_PRODUCER_IMPORT)
    CHECK_EQ_STR(args->items[2]->s, "the producer refused");
  fh_object *e = fh_str(args->items[0]->s);
  e->type = &fh_exception_types[2];
  return e;
}

static float a_data[4] = {1, 2, 3, 4};

typedef struct {
  tj_host host;
  tj_host_plan plan;
  fh_object *hooks[5];
  fh_object *name;
  fh_object kernel_object;
  /* The usual call: mix(a, alpha=1.0, k=0, flag=False), its arguments in args. */
  fh_object a;
  tjt_tensor ta;
  fh_object *alpha, *kk;
  void *args[4];
} setup;

static void setup_init(setup *s, const tj_kernel *k) {
  memset(s, 0, sizeof(*s));
  fh_host(&s->host);
  s->hooks[0] = fh_func(describe_fn);
  s->hooks[1] = fh_func(stream_handle_fn);
  s->hooks[2] = fh_func(keywords_fn);
  s->hooks[3] = fh_func(claimed_fn);
  s->hooks[4] = fh_func(producer_error_fn);
  s->host.describe = s->hooks[0];
  s->host.stream_handle = s->hooks[1];
  s->host.producer_error = s->hooks[4];
  s->name = fh_str("mix");
  fh_object_init(&s->kernel_object, &tensor_type);
  s->plan = (tj_host_plan){k,
                           &s->host,
                           1,
                           NULL,
                           &tensor_producer,
                           s->name,
                           &s->kernel_object,
                           s->hooks[2],
                           s->hooks[3],
                           0,
                           0,
                           0,
                           NULL,
                           {NULL, NULL},
                           NULL,
                           {NULL, NULL},
                           NULL,
                           NULL,
                           NULL};
  fh_type_init(&tensor_type, &tensor_info);
  tensor_producer.host = &s->host;
  tensor_producer.claim = NULL;
  tensor_producer.read = NULL;
  tensor_producer.read_context = NULL;
  imports = allocations = fail_import = describes = stream_asks = 0;
  keyword_calls = claimed_calls = producer_errors = 0;
  tensor_object(&s->a, &s->ta, a_data, 4);
  s->alpha = fh_float(1.0);
  s->kk = fh_int(0);
  s->args[0] = &s->a, s->args[1] = s->alpha, s->args[2] = s->kk, s->args[3] = &fh_false;
}

static void setup_free(setup *s, tj_kernel *k) {
  for (int i = 0; i < 5; ++i) s->host.release(s->hooks[i]);
  s->host.release(s->name);
  s->host.release(s->alpha);
  s->host.release(s->kk);
  tj_kernel_free(k);
  CHECK(fh_error_type == NULL);
  CHECK_EQ_INT(fh_alive, 0); /* every reference given back */
}

/* Calls the plan with `n` positional arguments and no keywords. */
static void *call_n(setup *s, void **args, size_t n) {
  return tj_host_call(&s->plan, args, n, NULL);
}

/* ---- Tests ---------------------------------------------------------------------- */

TEST(host_call_classifies_builtin_scalars) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  fh_object *alpha = fh_float(2.0), *kk = fh_int(3);
  void *args[4] = {&s.a, alpha, kk, &fh_true};
  /* The vectorcall offset bit is not an argument. */
  void *result = call_n(&s, args, 4 | ((size_t)1 << (8 * sizeof(size_t) - 1)));
  CHECK(result == &outputs[0]);
  CHECK(out_data[0][3] == 4.0f * 2.0f + 3.0f + 1.0f);
  CHECK_EQ_INT(outputs[0].refs, 1); /* the caller's */
  CHECK_EQ_INT(describes, 1);       /* the tensor type, once */
  CHECK_EQ_INT(s.a.refs, 1);

  /* An int where the float parameter is: its value as a float; ints beyond 64 bits
   * for the int parameter: refused, naming the argument. */
  fh_object *two = fh_int(2), *huge = fh_int(0);
  huge->overflow = 1;
  void *args2[4] = {&s.a, two, huge, &fh_false};
  CHECK(call_n(&s, args2, 4) == NULL);
  CHECK(fh_error_type == &fh_exception_types[-TJ_EVALUE]);
  CHECK(strstr(fh_error_value->s, "mix: argument 2 'k'") != NULL);
  fh_clear();
  /* A uint64 of 2**63 or more: its bits, refused by int64 with its value. */
  huge->fits_u64 = 1;
  huge->u = 1ull << 63;
  CHECK(call_n(&s, args2, 4) == NULL);
  CHECK(strstr(fh_error_value->s, "9223372036854775808") != NULL);
  fh_clear();
  s.host.release(two);
  s.host.release(huge);
  s.host.release(alpha);
  s.host.release(kk);
  setup_free(&s, k);
}

static int64_t k_seen;

static int32_t k_entry(const tj_value *args) {
  k_seen = args[0].i;
  return 0;
}

/* Exact ints read in place where the host states their layout, each as
 * int64_of reads it: one digit in place, more through int64_of, for either
 * layout and for none. */
TEST(host_call_reads_exact_ints_in_place) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("takes_k", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "k", TJT_DTYPE(kDLInt, 64)));
  CHECK_OK(tj_kernel_set_entry(k, k_entry));
  CHECK_OK(tj_kernel_finalize(k));
  setup s;
  setup_init(&s, k);
  static const long long values[] = {0,
                                     1,
                                     -1,
                                     2,
                                     1000,
                                     -1000,
                                     (1 << 30) - 1,
                                     -((1 << 30) - 1),
                                     1 << 30,
                                     -(1 << 30),
                                     123456789012LL,
                                     INT64_MAX,
                                     INT64_MIN};
  const struct {
    intptr_t layout;
    size_t head;
  } layouts[3] = {{-1, 0},
                  {TJ_HOST_INT_SIZE, offsetof(fh_object, size_head)},
                  {TJ_HOST_INT_TAG, offsetof(fh_object, tag_head)}};
  for (int l = 0; l < 3; ++l) {
    s.host.int_layout = layouts[l].layout;
    if (layouts[l].layout > 0) s.host.int_head_offset = (intptr_t)layouts[l].head;
    for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); ++v) {
      fh_object *value = fh_int(values[v]);
      value->i = values[v];
      /* A value int64_of would give otherwise: only the layout can read the right one. */
      if (layouts[l].layout > 0 && values[v] > -(1 << 30) && values[v] < (1 << 30))
        value->i = values[v] + 17;
      void *args[1] = {value};
      k_seen = -42;
      CHECK(call_n(&s, args, 1) == &fh_none);
      if (k_seen != values[v])
        tjt_fail(__FILE__, __LINE__, "layout %d: %lld read as %lld", l, values[v],
                 (long long)k_seen);
      s.host.release(value);
      s.host.release(&fh_none);
    }
  }
  setup_free(&s, k);
}

TEST(host_call_described_kinds) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  s.host.type_offset = -1;        /* types through object_type and release: as many of each */
  s.host.float_value_offset = -1; /* floats through double_of */
  /* NumPy-style scalars: a float through __float__, an integer through __index__,
   * a bool by truth; and something else, refused with its name. */
  static const tj_host_type f32_info = {TJ_HOST_FLOAT, NULL, "numpy.float32"};
  static const tj_host_type i64_info = {TJ_HOST_INDEX, NULL, "numpy.int64"};
  static const tj_host_type b_info = {TJ_HOST_BOOL, NULL, "numpy.bool"};
  static const tj_host_type other_info = {TJ_HOST_OTHER, NULL, "Thing"};
  /* Types live as long as the process, as the registry expects. */
  static fh_object f32_type, i64_type, b_type, other_type, nameless_type;
  fh_object f, i, b, other;
  fh_type_init(&f32_type, &f32_info);
  fh_type_init(&i64_type, &i64_info);
  fh_type_init(&b_type, &b_info);
  fh_type_init(&other_type, &other_info);
  fh_object_init(&f, &f32_type);
  fh_object_init(&i, &i64_type);
  fh_object_init(&b, &b_type);
  fh_object_init(&other, &other_type);
  f.f = 0.5;
  i.i = 10;
  b.i = 1;
  void *args[4] = {&s.a, &f, &i, &b};
  CHECK(call_n(&s, args, 4) == &outputs[0]);
  CHECK(out_data[0][1] == 2.0f * 0.5f + 10.0f + 1.0f);
  CHECK_EQ_INT(describes, 3); /* the tensor type is known from the test before */

  void *bad[4] = {&s.a, &other, &i, &b};
  CHECK(call_n(&s, bad, 4) == NULL);
  CHECK(fh_error_type == &fh_exception_types[-TJ_ETYPE]);
  CHECK(strstr(fh_error_value->s, "mix: argument 1 'alpha'") != NULL);
  CHECK_ERROR_CONTAINS("got Thing");
  fh_clear();
  /* A float type where the int parameter is: refused, named by its type. */
  void *bad2[4] = {&s.a, &f, &f, &b};
  CHECK(call_n(&s, bad2, 4) == NULL);
  CHECK_ERROR_CONTAINS("got numpy.float32");
  fh_clear();
  CHECK_EQ_INT(describes, 4); /* each type described once */

  /* A scalar whose conversion raises: the host's error becomes the cause of one
   * that names the kernel, the argument and the type. */
  fh_object broken;
  fh_object_init(&broken, &f32_type);
  broken.kind = FH_NONE; /* double_of refuses it */
  void *bad4[4] = {&s.a, &broken, &i, &b};
  producer_error_step = TJ_PRODUCER_CONVERT;
  producer_errors = 0;
  CHECK(call_n(&s, bad4, 4) == NULL);
  CHECK_EQ_INT(producer_errors, 1);
  CHECK_EQ_STR(fh_error_value->s, "mix: argument 1 'alpha': cannot convert the numpy.float32");
  producer_error_step = TJ_PRODUCER_IMPORT;
  fh_clear();

  /* A type the binding cannot describe: its error, as it is. */
  fh_object nameless;
  fh_type_init(&nameless_type, NULL);
  fh_object_init(&nameless, &nameless_type);
  void *bad3[4] = {&s.a, &nameless, &i, &b};
  CHECK(call_n(&s, bad3, 4) == NULL);
  CHECK_EQ_STR(fh_error_value->s, "no description");
  fh_clear();
  setup_free(&s, k);
}

TEST(host_registry_grows) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  static const tj_host_type info = {TJ_HOST_FLOAT, NULL, "many"};
  enum { N = 300 };
  static fh_object types[N];
  for (int t = 0; t < N; ++t) fh_type_init(&types[t], &info);
  for (int round = 0; round < 2; ++round)
    for (int t = 0; t < N; ++t)
      for (int32_t mode = 0; mode < 2; ++mode)
        CHECK(tj_host_type_of(&s.host, &types[t], mode) == &info);
  CHECK_EQ_INT(describes, 2 * N); /* once per type and mode */
  setup_free(&s, k);
}

TEST(host_call_stream_and_keywords) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  fh_object *alpha = s.alpha, *kk = s.kk, *handle = fh_int(0x99);
  fh_object *stream_name = fh_tuple(1), *alpha_name = fh_tuple(1);
  stream_name->items[0] = fh_str("stream");
  alpha_name->items[0] = fh_str("alpha");

  /* stream=: the handle reaches the core (a CPU kernel refuses a non-zero one). */
  void *args[5] = {&s.a, alpha, kk, &fh_true, handle};
  CHECK(tj_host_call(&s.plan, args, 4, stream_name) == NULL);
  CHECK_EQ_INT(stream_asks, 0); /* a non-negative int is a handle as it is */
  CHECK(strstr(fh_error_value->s, "a stream was given to a cpu kernel") != NULL);
  fh_clear();
  /* stream=None: none at all. */
  args[4] = &fh_none;
  fh_object *out = tj_host_call(&s.plan, args, 4, stream_name);
  CHECK(out != NULL && out->type == &tensor_type);
  CHECK_EQ_INT(stream_asks, 0);
  /* A stream the binding refuses: its error. */
  args[4] = alpha;
  CHECK(tj_host_call(&s.plan, args, 4, stream_name) == NULL);
  CHECK_EQ_STR(fh_error_value->s, "mix: stream must be a stream handle");
  CHECK_EQ_INT(stream_asks, 1); /* anything else: the binding reads it */
  fh_clear();

  /* Inputs by name: the kernel object maps them (items: 3 positional + 1 keyword). */
  void *named[4] = {&s.a, kk, &fh_true, alpha};
  fh_object *r = tj_host_call(&s.plan, named, 3, alpha_name);
  CHECK(r != NULL && r->i == 401);
  CHECK_EQ_INT(keyword_calls, 1);
  CHECK_EQ_INT(imports, 2); /* nothing imported for the mapped call */
  s.host.release(r);
  s.host.release(stream_name);
  s.host.release(alpha_name);
  s.host.release(handle);
  setup_free(&s, k);
}

TEST(host_call_results_in_order) {
  tj_kernel *k = mix_kernel(2);
  setup s;
  setup_init(&s, k);
  /* Two outputs: a list in declaration order... */
  fh_object *list = call_n(&s, s.args, 4);
  CHECK(list != NULL && list->kind == FH_LIST && list->n == 2);
  CHECK(list->items[0] == &outputs[0] && list->items[1] == &outputs[1]);
  s.host.release(list);
  CHECK_EQ_INT(outputs[0].refs, 0);
  /* ...or in the plan's. */
  int32_t order[2] = {1, 0};
  s.plan.out_order = order;
  list = call_n(&s, s.args, 4);
  CHECK(list->items[0] == &outputs[3] && list->items[1] == &outputs[2]);
  s.host.release(list);

  /* A failing call gives back the outputs made: none are left referenced. */
  void *short_args[2] = {&s.a, s.alpha};
  CHECK(call_n(&s, short_args, 2) == NULL);
  CHECK(fh_error_type == &fh_exception_types[-TJ_ETYPE]);
  CHECK_EQ_STR(fh_error_value->s, "mix: expected 4 arguments (A, alpha, k, flag), got 2");
  fh_clear();
  setup_free(&s, k);

  /* No outputs: None, retained. */
  tj_kernel *k0 = mix_kernel(0);
  setup_init(&s, k0);
  int none_refs = fh_none.refs;
  CHECK(call_n(&s, s.args, 4) == &fh_none);
  CHECK_EQ_INT(fh_none.refs, none_refs + 1);
  fh_none.refs--;
  setup_free(&s, k0);
}

/* ---- Reading in place (tj_producer.read, tj_producer.make) ------------------------ */

static int reads, makes, refuse_read, make_answer;
static const char read_marker[] = "reader";

/* A tensor object read in place: its tjt_tensor's DLTensor, unless refused. */
static int read_in_place(const void *context, void *object, DLTensor *out) {
  CHECK(context == read_marker);
  if (refuse_read) return 1;
  reads++;
  *out = ((tjt_tensor *)((fh_object *)object)->pointer)->t;
  return 0;
}

/* An output made with no call into the host: outputs[], as tensor_allocate makes them. */
static int make_in_place(const void *context, const DLTensor *proto, void **object) {
  CHECK(context == read_marker);
  makes++;
  *object = NULL;
  if (make_answer != TJ_OK) return make_answer;
  int i = allocations++ % 4;
  tjt_tensor_1d(&out_tensors[i], out_data[i], proto->dtype, proto->shape[0]);
  fh_object_init(&outputs[i], &tensor_type);
  outputs[i].pointer = &out_tensors[i];
  *object = &outputs[i];
  return TJ_OK;
}

/* The host's allocator (tj_host.allocate): (context, shape, dtype, device). */
static fh_object *host_allocate_fn(fh_object *args) {
  CHECK_EQ_INT(args->n, 4);
  DLDataType dtype = {(uint8_t)args->items[2]->items[0]->i, (uint8_t)args->items[2]->items[1]->i,
                      (uint16_t)args->items[2]->items[2]->i};
  int i = allocations++ % 4;
  tjt_tensor_1d(&out_tensors[i], out_data[i], dtype, args->items[1]->items[0]->i);
  fh_object_init(&outputs[i], &tensor_type);
  outputs[i].pointer = &out_tensors[i];
  return &outputs[i];
}

TEST(host_call_reads_in_place_before_importing) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  tensor_producer.read = read_in_place;
  tensor_producer.read_context = read_marker;
  reads = refuse_read = 0;
  /* Read in place: the producer's import is never asked. */
  fh_object *c = call_n(&s, s.args, 4);
  CHECK(c == &outputs[0]);
  CHECK_EQ_INT(reads, 1);
  CHECK_EQ_INT(imports, 0);
  CHECK(out_data[0][3] == 4.0f);
  s.host.release(c);
  /* An object it does not read: imported the producer's way, the same result. */
  refuse_read = 1;
  c = call_n(&s, s.args, 4);
  CHECK(c == &outputs[1]);
  CHECK_EQ_INT(reads, 1);
  CHECK_EQ_INT(imports, 1);
  CHECK(out_data[1][3] == 4.0f);
  s.host.release(c);
  /* An owning import never reads in place: its tensor must outlive the object's view. */
  refuse_read = 0;
  tj_arg arg;
  tj_arg_init(&arg);
  CHECK_OK(tj_producer_import_owned(&tensor_producer, &s.a, &arg));
  CHECK_EQ_INT(reads, 1);
  CHECK_EQ_INT(imports, 2);
  tj_arg_release(&arg);
  setup_free(&s, k);
}

TEST(host_dlpack_producer_makes_outputs_in_place) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  fh_object *allocate = fh_func(host_allocate_fn);
  s.host.allocate = allocate;
  tj_producer p;
  tj_host_dlpack_producer(&p, &s.host, &tensor_type);
  p.read = read_in_place;
  p.read_context = read_marker;
  p.make = make_in_place;
  reads = makes = refuse_read = 0;
  make_answer = TJ_OK;
  int64_t shape[1] = {3};
  DLTensor proto = {NULL, {kDLCPU, 0}, 1, TJT_F32, shape, NULL, 0};
  tj_arg out;
  void *object = NULL;
  /* Made in place, then read back in place: no call into the host. */
  CHECK_OK(p.allocate(&p, &proto, &out, &object));
  CHECK(object == &outputs[0] && out.kind == TJ_ARG_TENSOR && out.tensor.shape[0] == 3);
  CHECK_EQ_INT(makes, 1);
  CHECK_EQ_INT(reads, 1);
  s.host.release(object);
  /* Not made in place (1): the host's allocator makes it, read back in place. */
  make_answer = 1;
  CHECK_OK(p.allocate(&p, &proto, &out, &object));
  CHECK(object == &outputs[1] && out.kind == TJ_ARG_TENSOR && out.tensor.shape[0] == 3);
  CHECK_EQ_INT(makes, 2);
  CHECK_EQ_INT(reads, 2);
  s.host.release(object);
  /* A failure of its own: that status, nothing made, the host's allocator not asked. */
  make_answer = TJ_EPYERR;
  CHECK_STATUS(p.allocate(&p, &proto, &out, &object), TJ_EPYERR);
  CHECK(object == NULL);
  CHECK_EQ_INT(allocations, 2);
  s.host.release(allocate);
  setup_free(&s, k);
}

static bool always(const void *state) {
  (void)state;
  return true;
}

TEST(host_call_producer_errors_and_claims) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  /* The producer's own error becomes the cause of one saying where. */
  fail_import = 1;
  CHECK(call_n(&s, s.args, 4) == NULL);
  CHECK_EQ_INT(producer_errors, 1);
  CHECK(fh_error_type == &fh_exception_types[2]);
  CHECK_EQ_STR(fh_error_value->s, "mix: argument 0 'A': cannot import the tensor through DLPack");
  fh_clear();
  fail_import = 0;

  /* A framework claims the call: handed to the kernel object with the arguments. */
  tj_claim claim = {1, 0, always, NULL, NULL, NULL, NULL, -1};
  tensor_producer.claim = &claim;
  fh_object *r = call_n(&s, s.args, 4);
  CHECK(r != NULL && r->i == 4);
  CHECK_EQ_INT(claimed_calls, 1);
  CHECK_EQ_INT(allocations, 0);
  s.host.release(r);
  tensor_producer.claim = NULL;
  setup_free(&s, k);
}

/* The host's claims hook: claims(object, failed) -> a tj_claim_kind. */
static int64_t claims_answer, claims_failed_answer;
static int claims_asks;

static fh_object *claims_fn(fh_object *args) {
  claims_asks++;
  return fh_int(args->items[1]->i ? claims_failed_answer : claims_answer);
}

TEST(host_claims_asked_of_the_host) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  fh_object *hook = fh_func(claims_fn);
  s.host.claims = hook;
  tj_host_claim_mode mode = {&s.host, NULL, NULL, NULL};
  tj_claim claim = {0, 0, NULL, NULL, tj_host_claim_ask, NULL, &mode, -1};
  tensor_producer.claim = &claim;
  /* Asked per tensor: no claim, the call runs. */
  claims_answer = TJ_CLAIM_NONE, claims_asks = 0;
  CHECK(call_n(&s, s.args, 4) == &outputs[0]);
  CHECK_EQ_INT(claims_asks, 1);
  /* Claimed once validated: imported, nothing allocated, handed over. */
  claims_answer = TJ_CLAIM_VALIDATED, imports = allocations = 0;
  fh_object *r = call_n(&s, s.args, 4);
  CHECK(r != NULL && r->i == 4);
  CHECK_EQ_INT(imports, 1);
  CHECK_EQ_INT(allocations, 0);
  CHECK_EQ_INT(claimed_calls, 1);
  s.host.release(r);
  /* ... but never by the plan of the framework's own implementation. */
  s.plan.unclaimed = 1;
  CHECK(call_n(&s, s.args, 4) == &outputs[0]); /* run: its output, the first allocation */
  CHECK_EQ_INT(claimed_calls, 1);
  s.plan.unclaimed = 0;
  /* An import that fails: asked again with `failed`; a claim drops the import's error. */
  claims_answer = TJ_CLAIM_NONE, claims_failed_answer = TJ_CLAIM_NOW, fail_import = 1;
  r = call_n(&s, s.args, 4);
  CHECK(r != NULL && r->i == 4);
  CHECK(fh_error_type == NULL);
  s.host.release(r);
  /* No claim: the import's own error, as without a claim. */
  claims_failed_answer = TJ_CLAIM_NONE, producer_errors = 0;
  CHECK(call_n(&s, s.args, 4) == NULL);
  CHECK_EQ_INT(producer_errors, 1);
  CHECK_EQ_STR(fh_error_value->s, "mix: argument 0 'A': cannot import the tensor through DLPack");
  fh_clear();
  fail_import = 0;
  tensor_producer.claim = NULL;
  s.host.release(hook);
  setup_free(&s, k);
}

/* plan->record's hooks: each counts its calls; record answers its argument count. */
static int records, record_asks;
static fh_object *record_answer; /* what record_off and record_wrapped answer */

static fh_object *record_fn(fh_object *args) {
  records++;
  CHECK(args->items[2] == &fh_none);
  if (mix_outputs == 1) return fh_int(args->n);
  fh_object *both = fh_tuple(2);
  both->items[0] = fh_int(args->n), both->items[1] = fh_int(7);
  return both;
}

static fh_object *record_ask_fn(fh_object *args) {
  (void)args;
  record_asks++;
  if (record_answer == NULL) fh_raise(&fh_exception_types[1], "cannot tell");
  if (record_answer != NULL) record_answer->refs++;
  return record_answer;
}

/* plan->record_plain: counts its calls, answers plain_answer. */
static int plain_asks, plain_answer;

static int plain_fn(const void *context, const void *object) {
  CHECK(context == &plain_answer);
  (void)object;
  plain_asks++;
  return plain_answer;
}

/* A quicker answer (record_plain) takes the place of the asks it answers (the
 * thread's, and each object's); where it cannot tell, they are asked. */
static void check_record_plain(setup *s, void **args) {
  s->plan.record_plain = plain_fn, s->plan.record_plain_context = &plain_answer;
  for (plain_answer = 1; plain_answer >= 0; --plain_answer) {
    records = record_asks = plain_asks = 0;
    fh_object *r = call_n(s, args, 4);
    CHECK(r != NULL);
    s->host.release(r);
    CHECK_EQ_INT(records, 1);
    CHECK_EQ_INT(plain_asks, 3); /* the thread, A and alpha */
    CHECK_EQ_INT(record_asks, plain_answer ? 0 : 3);
  }
  record_answer = &fh_true; /* a quick 0 never hides the function's answer */
  records = 0;
  fh_object *other = call_n(s, args, 4);
  CHECK(other != NULL);
  s->host.release(other);
  CHECK_EQ_INT(records, 0);
  record_answer = &fh_false;
  s->plan.record_plain = NULL, s->plan.record_plain_context = NULL;
}

TEST(host_calls_claimed_at_once_go_to_record) {
  for (int32_t outputs = 1; outputs <= 2; ++outputs) {
    tj_kernel *k = mix_kernel(outputs);
    setup s;
    setup_init(&s, k);
    fh_object *hook = fh_func(claims_fn), *record = fh_func(record_fn);
    fh_object *ask = fh_func(record_ask_fn);
    s.host.claims = hook;
    tj_host_claim_mode mode = {&s.host, NULL, NULL, NULL};
    tj_claim claim = {0, 0, NULL, NULL, tj_host_claim_ask, NULL, &mode, -1};
    tensor_producer.claim = &claim;
    claims_answer = TJ_CLAIM_VALIDATED;
    s.plan.claim_at_once = 1;
    s.plan.record = record;
    s.plan.record_types[0] = &tensor_type, s.plan.record_types[1] = &fh_float_type;
    s.plan.record_wrapped = s.plan.record_off[1] = ask;
    record_answer = &fh_false;
    void *args[4] = {&s.a, s.alpha, &fh_none, &fh_none};
    /* Every argument None or of the two types, none wrapped, no mode on: recorded,
     * nothing imported; several outputs as a list. */
    records = record_asks = imports = 0;
    fh_object *r = call_n(&s, args, 4);
    CHECK(r != NULL);
    if (outputs == 1) {
      CHECK_EQ_INT(r->i, 4);
    } else {
      CHECK(r->kind == FH_LIST && r->n == 2 && r->items[0]->i == 4 && r->items[1]->i == 7);
    }
    s.host.release(r);
    CHECK_EQ_INT(records, 1);
    CHECK_EQ_INT(record_asks, 3); /* record_off[1] once, record_wrapped for A and alpha */
    CHECK_EQ_INT(imports, 0);
    CHECK_EQ_INT(claimed_calls, 0);
    check_record_plain(&s, args);
#define CLAIMED_NOT_RECORDED(argv)        \
  do {                                    \
    records = claimed_calls = 0;          \
    fh_object *got = call_n(&s, argv, 4); \
    CHECK(got != NULL && got->i == 4);    \
    s.host.release(got);                  \
    CHECK_EQ_INT(records, 0);             \
    CHECK_EQ_INT(claimed_calls, 1);       \
    CHECK(fh_error_type == NULL);         \
  } while (0)
    /* An argument of another type (an int): handed to `claimed`. */
    void *with_int[4] = {&s.a, s.alpha, s.kk, &fh_none};
    CLAIMED_NOT_RECORDED(with_int);
    /* A mode on, a wrapped tensor, or a hook that cannot answer: the same. */
    record_answer = &fh_true;
    CLAIMED_NOT_RECORDED(args);
    record_answer = NULL; /* raises: cleared, handed over */
    CLAIMED_NOT_RECORDED(args);
    record_answer = &fh_false;
    mode.idle = &fh_true; /* the scope holds no item: not idle */
    s.plan.record_mode = &mode;
    CLAIMED_NOT_RECORDED(args);
    mode.idle = NULL;
    /* Without claim_at_once the call is validated first and goes to `claimed`. */
    s.plan.claim_at_once = 0;
    void *valid[4] = {&s.a, s.alpha, s.kk, &fh_false};
    imports = 0;
    CLAIMED_NOT_RECORDED(valid);
    CHECK_EQ_INT(imports, 1);
#undef CLAIMED_NOT_RECORDED
    tensor_producer.claim = NULL;
    s.host.release(hook);
    s.host.release(record);
    s.host.release(ask);
    setup_free(&s, k);
  }
}

TEST(host_method_entry) {
  tj_kernel *k = mix_kernel(1);
  setup s;
  setup_init(&s, k);
  tj_host_method_install(&s.host);
  fh_object capsule;
  fh_object_init(&capsule, &tensor_type);
  capsule.kind = FH_CAPSULE;
  strcpy(capsule.s, TJ_HOST_PLAN_CAPSULE);
  capsule.pointer = &s.plan;
  CHECK(tj_host_method(&capsule, s.args, 4, NULL) == &outputs[0]);
  /* With no argument at all, the core's count refusal. */
  CHECK(tj_host_method(&capsule, s.args, 0, NULL) == NULL);
  CHECK(strstr(fh_error_value->s, "mix: expected") == fh_error_value->s);
  fh_clear();
  /* Another object as self: the capsule's error, nothing done. */
  fh_object not_a_capsule;
  fh_object_init(&not_a_capsule, &tensor_type);
  int before = imports;
  CHECK(tj_host_method(&not_a_capsule, s.args, 4, NULL) == NULL);
  CHECK_EQ_INT(imports, before);
  fh_clear();
  tj_host_method_install(NULL);
  setup_free(&s, k);
}

/* ---- A repeated call, read and checked in one pass ------------------------------- */

/* rep(x: (n,) f32 const, y: (n,) f32 aligned to 16, a: f32, b: int32): nothing
 * to allocate, so a call repeating the last one is read, checked and packed in
 * one pass (host.c, repeat_call) when its tensors come through an exchange
 * API's view. The entry logs what it was given. */
typedef struct {
  int calls;
  const float *x;
  float *y;
  float a;
  int32_t b;
  int64_t n;
} rep_launch;

static rep_launch rep_seen;

static int32_t rep_entry(const tj_value *args) {
  rep_seen.calls++;
  rep_seen.x = args[0].p;
  rep_seen.y = args[1].p;
  rep_seen.a = (float)args[2].f;
  rep_seen.b = (int32_t)args[3].i;
  rep_seen.n = args[4].i;
  return 0;
}

static tj_kernel *rep_kernel(int keep_memo) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("rep", 4, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "x", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "y", TJT_F32, 1, &n, NULL, 16, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 2, "a", TJT_F32));
  CHECK_OK(tj_kernel_set_scalar(k, 3, "b", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_set_entry(k, rep_entry));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK(k->memo != NULL);
  if (!keep_memo) tj__memo_free(k); /* every call takes the full checks */
  return k;
}

/* An exchange API whose view reads the tjt_tensor an object holds. */
static int view_imports, view_fails;
static int xv_view(void *object, DLTensor *out) {
  view_imports++;
  if (view_fails) {
    fh_raise(&fh_exception_types[6], "the producer refused");
    return -1;
  }
  *out = ((tjt_tensor *)((fh_object *)object)->pointer)->t;
  return 0;
}
static int xv_alloc(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                    void (*set_error)(void *, const char *, const char *)) {
  (void)proto, (void)out, (void)ctx, (void)set_error;
  return -1;
}
static int xv_export(void *object, DLManagedTensorVersioned **out) {
  (void)object, (void)out;
  return -1;
}
static int xv_to_object(DLManagedTensorVersioned *m, void **out) {
  (void)m, (void)out;
  return -1;
}
static int xv_stream(DLDeviceType type, int32_t id, void **out) {
  (void)type, (void)id;
  *out = NULL;
  return 0;
}

static uint64_t next_u64(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One step's arguments: x, y and the scalars, changed a little at each step. */
/* What a tensor object of the walk points to (as a torch.Tensor points to its
 * TensorImpl), for producers whose claim and lazy-view bits read it: its key
 * word (bit 1: conjugate, bit 2: negative), its autograd record and whether
 * that record requires grad. */
typedef struct {
  uint64_t keys;
  const void *meta;
  int requires;
} rep_block;

static bool rep_requires_grad(const void *block) { return ((const rep_block *)block)->requires; }
static bool rep_grad_enabled(void) { return true; }

typedef struct {
  float data[2][40];
  tjt_tensor tx, ty;
  rep_block bx, by;
  fh_object x, y;
  fh_object *a, *b;
} rep_args;

/* Each tensor object holds its tensor, and its block at items[0] and items[1]. */
static void rep_args_reset(rep_args *r, fh_object *tensor_type_) {
  tjt_tensor_1d(&r->tx, &r->data[0][0], TJT_F32, 8);
  tjt_tensor_1d(&r->ty, &r->data[1][0], TJT_F32, 8);
  memset(&r->bx, 0, sizeof(r->bx));
  memset(&r->by, 0, sizeof(r->by));
  fh_object_init(&r->x, tensor_type_);
  fh_object_init(&r->y, tensor_type_);
  r->x.pointer = &r->tx;
  r->y.pointer = &r->ty;
  r->x.items[0] = r->x.items[1] = (fh_object *)&r->bx;
  r->y.items[0] = r->y.items[1] = (fh_object *)&r->by;
}

/* The twins' answers to one call: the result, the error, what the entry saw. */
typedef struct {
  void *result;
  fh_object *error_type;
  char message[256];
  rep_launch seen;
} rep_answer;

static fh_object rep_claimed;

static rep_answer rep_call(setup *s, tj_kernel *k, rep_args *r) {
  rep_answer out;
  memset(&out, 0, sizeof(out));
  memset(&rep_seen, 0, sizeof(rep_seen));
  s->plan.kernel = k;
  void *args[4] = {&r->x, &r->y, r->a, r->b};
  out.result = call_n(s, args, 4);
  out.error_type = fh_error_type;
  if (fh_error_value != NULL) snprintf(out.message, sizeof(out.message), "%s", fh_error_value->s);
  fh_clear();
  /* A claimed call's result is a new object each time: what the walk compares
   * is that there was one (rep_claimed stands for it once released). */
  if (out.result != NULL) s->host.release(out.result);
  if (out.result != NULL && out.result != &fh_none) out.result = &rep_claimed;
  out.seen = rep_seen;
  return out;
}

/* A long random walk of arguments, mostly repeats, through the host's call of
 * two twin kernels: one whose memo lets repeated calls take the one pass, one
 * whose every call takes the full checks. Both give the same result, the same
 * error and the same arguments to the kernel, step after step. Tensors are
 * objects of `type` (an exchange-API producer's); the walk also sets their
 * blocks' conjugate and negative bits and autograd records, which producers
 * with a claim and view bits read. */
static void rep_walk(setup *s, tj_kernel *fast, tj_kernel *full, fh_object *type, uint64_t state) {
  rep_args r;
  rep_args_reset(&r, type);
  r.a = fh_float(1.5);
  r.b = fh_int(7);
  static const int meta_word = 1;
  int steps = 3000, oks = 0, refusals = 0;
  for (int step = 0; step < steps; ++step) {
    uint64_t z = next_u64(&state);
    if (z % 2 == 0) { /* back to the usual call, changed below or not */
      s->host.release(r.a);
      s->host.release(r.b);
      rep_args_reset(&r, type);
      r.a = fh_float(1.5);
      r.b = fh_int(7);
      s->plan.unclaimed = 0;
    }
    switch ((z >> 8) % 56) {
      case 0: tjt_tensor_1d(&r.tx, &r.data[0][0], TJT_F32, 4 + (int64_t)(z >> 16) % 3); break;
      case 1: r.ty.t.data = (char *)r.ty.t.data + 4 * ((z >> 16) % 4); break; /* alignment */
      case 2: r.tx.t.data = NULL; break;
      case 3: r.tx.t.dtype = TJT_F64; break;
      case 4: r.tx.strides[0] = 2; break;
      case 5: r.ty.t.device.device_type = kDLCUDA; break;
      case 6: r.tx.t.byte_offset = 4; break;
      case 7: r.tx.t.shape = NULL; break;
      case 8: r.ty.t.strides = NULL; break;
      case 9: {
        static const double values[] = {0.0, -2.25, 1e39, -1e39, 3.4028235e38, 1.0 / 0.0};
        s->host.release(r.a);
        r.a = fh_float(values[(z >> 16) % 6]);
        break;
      }
      case 10: {
        static const long long values[] = {0, -1, 1 << 20, 1LL << 31, -(1LL << 31), 1LL << 40};
        s->host.release(r.b);
        r.b = fh_int(values[(z >> 16) % 6]);
        break;
      }
      case 11: s->host.release(r.a), r.a = fh_int(3); break;     /* an int for the float */
      case 12: s->host.release(r.b), r.b = fh_float(3.0); break; /* a float for the int */
      case 13: s->host.release(r.b), r.b = &fh_true, s->host.retain(&fh_true); break;
      case 14: s->host.release(r.a), r.a = &fh_none, s->host.retain(&fh_none); break;
      case 15: r.x.type = &tensor_type; break; /* another producer: no exchange view */
      case 16:
      case 17: { /* another shape for both */
        const int64_t n = 3 + (int64_t)((z >> 16) % 3) * 2;
        tjt_tensor_1d(&r.tx, &r.data[0][0], TJT_F32, n);
        tjt_tensor_1d(&r.ty, &r.data[1][0], TJT_F32, n);
        break;
      }
      case 18: r.bx.keys = 1 + (z >> 16) % 3; break;             /* conjugate, negative or both */
      case 19: r.by.keys = 4; break;                             /* another key: not a lazy view */
      case 20: r.bx.meta = &meta_word; break;                    /* an autograd record, no grad */
      case 21: r.by.meta = &meta_word, r.by.requires = 1; break; /* requires grad */
      case 22: r.x.items[0] = r.x.items[1] = NULL; break;        /* no block */
      case 23: s->plan.unclaimed = 1; break; /* the framework's own call: no claim */
      default: break;                        /* a repeat */
    }
    rep_answer a = rep_call(s, fast, &r), b = rep_call(s, full, &r);
    if (a.result != b.result || a.error_type != b.error_type || strcmp(a.message, b.message) != 0 ||
        a.seen.calls != b.seen.calls || a.seen.x != b.seen.x || a.seen.y != b.seen.y ||
        a.seen.a != b.seen.a || a.seen.b != b.seen.b || a.seen.n != b.seen.n)
      tjt_fail(__FILE__, __LINE__, "step %d: one pass %s (%s), full checks %s (%s)", step,
               a.result ? "ran" : "refused", a.message, b.result ? "ran" : "refused", b.message);
    oks += a.result != NULL && a.seen.calls == 1;
    refusals += a.result == NULL;
  }
  tjt_note("%d steps: %d ran, %d refused", steps, oks, refusals);
  CHECK(oks > steps / 3 && refusals > steps / 8);
  s->host.release(r.a);
  s->host.release(r.b);
  s->plan.unclaimed = 0;
}

/* An exchange-API producer of XTensors for the walk: `claim` and `bits` given
 * or NULL. */
static void rep_producer(const DLPackExchangeAPI *api, fh_object *type, tj_producer *producer,
                         tj_host_type *info, const tj_claim *claim, const tj_view_bits *bits) {
  info->kind = TJ_HOST_TENSOR;
  info->producer = producer;
  info->name = "XTensor";
  CHECK_OK(tj_producer_from_exchange(producer, &api->header, type));
  producer->claim = claim;
  producer->view_bits = bits;
  fh_type_init(type, info);
}

/* Three producers over one exchange API (each of its own type: a producer is
 * not changed once its type is registered): none with a claim or view bits;
 * one whose claim and view bits read one block (as torch's do: one read serves
 * both checks); one whose read the same block through two pointers. Returns
 * their three types. */
static fh_object *rep_producers(void) {
  static DLPackExchangeAPI api;
  memset(&api, 0, sizeof(api));
  api.header.version.major = TJ_DLPACK_MAJOR;
  api.managed_tensor_allocator = xv_alloc;
  api.managed_tensor_from_py_object_no_sync = xv_export;
  api.managed_tensor_to_py_object_no_sync = xv_to_object;
  api.dltensor_from_py_object_no_sync = xv_view;
  api.current_work_stream = xv_stream;
  static fh_object types[3];
  static tj_producer producers[3];
  static tj_host_type infos[3];
  const int32_t first = (int32_t)offsetof(fh_object, items), second = first + sizeof(void *);
  static tj_claim claims[2];
  static tj_view_bits bits[2];
  for (int i = 0; i < 2; ++i) {
    const int32_t block = i == 0 ? first : second;
    claims[i] = (tj_claim){0,
                           first,
                           rep_requires_grad,
                           rep_grad_enabled,
                           NULL,
                           NULL,
                           NULL,
                           (int32_t)offsetof(rep_block, meta)};
    bits[i] = (tj_view_bits){block, (int64_t)offsetof(rep_block, keys), 1, 2};
  }
  rep_producer(&api, &types[0], &producers[0], &infos[0], NULL, NULL);
  rep_producer(&api, &types[1], &producers[1], &infos[1], &claims[0], &bits[0]);
  rep_producer(&api, &types[2], &producers[2], &infos[2], &claims[1], &bits[1]);
  return types;
}

TEST(host_call_repeats_in_one_pass_as_the_full_checks) {
  tj_kernel *fast = rep_kernel(1), *full = rep_kernel(0);
  setup s;
  setup_init(&s, fast);
  s.host.int_layout = TJ_HOST_INT_TAG; /* ints of one digit read in place */
  fh_object *types = rep_producers();
  rep_args r;
  rep_args_reset(&r, &types[0]);
  r.a = fh_float(1.5);
  r.b = fh_int(7);
  view_imports = view_fails = 0;

  /* Repeats: the first call records, each after it reads each tensor once. */
  for (int i = 0; i < 3; ++i) {
    rep_answer got = rep_call(&s, fast, &r);
    CHECK(got.result == &fh_none && got.seen.calls == 1 && got.seen.n == 8 && got.seen.b == 7 &&
          got.seen.a == 1.5f);
  }
  CHECK_EQ_INT(view_imports, 6);
  /* A failed view in the one pass is read again by the full path, which reports
   * it as any first call would. */
  view_fails = 1;
  view_imports = 0;
  rep_answer failed = rep_call(&s, fast, &r);
  CHECK(failed.result == NULL && failed.seen.calls == 0);
  CHECK_EQ_INT(view_imports, 2); /* the one pass's, then the full path's */
  CHECK(strstr(failed.message, "rep: argument 0 'x'") != NULL);
  view_imports = 0;
  rep_answer twin = rep_call(&s, full, &r);
  CHECK_EQ_INT(view_imports, 1);
  CHECK(twin.error_type == failed.error_type);
  CHECK_EQ_STR(twin.message, failed.message);
  view_fails = 0;
  /* Shapes in turn: each recorded by its first call, after which every call reads
   * each tensor once (the one pass moves to the record that matches). */
  view_imports = 0;
  for (int i = 0; i < 12; ++i) {
    const int64_t n = i % 3 == 0 ? 3 : i % 3 == 1 ? 5 : 8;
    tjt_tensor_1d(&r.tx, &r.data[0][0], TJT_F32, n);
    tjt_tensor_1d(&r.ty, &r.data[1][0], TJT_F32, n);
    rep_answer got = rep_call(&s, fast, &r);
    CHECK(got.result == &fh_none && got.seen.n == n);
  }
  CHECK_EQ_INT(view_imports, 3 + 3 + 2 * 10); /* 3 and 5 new: one pass, then the full path */
  s.host.release(r.a);
  s.host.release(r.b);
  /* With a claim and view bits read in one block, repeated calls still take the
   * one pass: each tensor read once. */
  rep_args_reset(&r, &types[1]);
  r.a = fh_float(1.5);
  r.b = fh_int(7);
  for (int i = 0; i < 2; ++i) rep_call(&s, fast, &r);
  view_imports = 0;
  rep_answer again = rep_call(&s, fast, &r);
  CHECK(again.result == &fh_none && again.seen.calls == 1);
  CHECK_EQ_INT(view_imports, 2);
  s.host.release(r.a);
  s.host.release(r.b);

  for (int i = 0; i < 3; ++i) rep_walk(&s, fast, full, &types[i], 42 + (uint64_t)i);
  s.plan.kernel = fast;
  tj_kernel_free(full);
  setup_free(&s, fast);
}
