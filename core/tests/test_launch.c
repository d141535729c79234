/*
 * Launch: loading a real kernel library (tests/fixtures/vec_add.c, built by
 * the Makefile into TJT_FIXTURE_DIR), the packed argument order, loader
 * errors, and many threads sharing one finalized kernel.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "builders.h"

#define ENTRY "tilejit_packed_entry"

static tj_kernel *load_vec_add(void) {
  char path[1024];
  tjt_fixture_path("vec_add.so", path, sizeof(path));
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  CHECK_OK(tj_kernel_load(k, path, ENTRY));
  return k;
}

TEST(launch_fixture_vec_add) {
  tj_kernel *k = load_vec_add();
  enum { N = 13, PAD = 8 };
  float a[N + PAD], b[N + PAD], c[N + PAD];
  for (int i = 0; i < N + PAD; ++i) {
    a[i] = (float)i;
    b[i] = (float)(100 * i);
    c[i] = -1.0f;
  }
  /* Every tensor starts at an offset into its storage: byte_offset must be
   * applied to each pointer the kernel receives. */
  const int64_t n = N, one = 1;
  tjt_tensor ta, tb, tc;
  tjt_tensor_init(&ta, a, TJT_F32, 1, &n, &one);
  tjt_tensor_init(&tb, b, TJT_F32, 1, &n, NULL);
  tjt_tensor_init(&tc, c, TJT_F32, 1, &n, &one);
  ta.t.byte_offset = 3 * sizeof(float);
  tb.t.byte_offset = 1 * sizeof(float);
  tc.t.byte_offset = 5 * sizeof(float);
  tj_arg args[2], out;
  tjt_arg_tensor(&args[0], &ta, 0);
  tjt_arg_tensor(&args[1], &tb, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK_EQ_INT(f.out_shape[0][0], N);
  tjt_arg_tensor(&out, &tc, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK_OK(tj_call_launch(&f));
  for (int i = 0; i < N + PAD; ++i) {
    if (i < 5 || i >= 5 + N)
      CHECK(c[i] == -1.0f); /* outside the output: untouched */
    else
      CHECK(c[i] == a[i - 5 + 3] + b[i - 5 + 1]);
  }
  CHECK(c[5] == 3.0f + 100.0f);
  /* The frame can be launched again. */
  for (int i = 0; i < N + PAD; ++i) c[i] = 0.0f;
  CHECK_OK(tj_call_launch(&f));
  CHECK(c[5 + N - 1] == (float)(N - 1 + 3) + 100.0f * (float)(N - 1 + 1));
  tj_kernel_free(k);
}

/* What the last launch of capture_entry received. */
enum { CAPTURE_MAX = 32 };
static tj_value captured[CAPTURE_MAX];
static int captured_count, capture_calls;

static int32_t capture_entry(const tj_value *args) {
  memcpy(captured, args, (size_t)captured_count * sizeof(tj_value));
  ++capture_calls;
  return 0;
}

TEST(launch_packing) {
  /* pack(A: (n,) f32, s: int32, x: float64, y: float32, flag: bool,
   *      P: pointer, bias: (n,) optional, B: (m, n), O: (n + 1,) output,
   *      Q: pointer, R: pointer) -> args: 11 parameters, then n, m. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("pack", 11, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t n = tjt_sym(k, 0), mn[2] = {tjt_sym(k, 1), n};
  int32_t n1 = tjt_binop_const(k, "n + 1", 0, TJ_OP_ADD, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "s", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_set_scalar(k, 2, "x", TJT_F64));
  CHECK_OK(tj_kernel_set_scalar(k, 3, "y", TJT_F32));
  CHECK_OK(tj_kernel_set_scalar(k, 4, "flag", TJT_DTYPE(kDLBool, 8)));
  CHECK_OK(tj_kernel_set_pointer(k, 5, "P", TJT_F32, 0, 0));
  tjt_buffer(k, 6, "bias", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OPTIONAL);
  tjt_buffer(k, 7, "B", TJT_F32, 2, mn, NULL, 0, 0);
  tjt_buffer(k, 8, "O", TJT_F32, 1, &n1, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_set_pointer(k, 9, "Q", TJT_F32, 0, 0));
  CHECK_OK(tj_kernel_set_pointer(k, 10, "R", TJT_F32, 0, 0));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, capture_entry));

  tjt_tensor ta, tb, to, tq;
  tjt_tensor_1d(&ta, tjt_data, TJT_F32, 6);
  ta.t.byte_offset = 64;
  const int64_t shape_b[2] = {2, 6};
  tjt_tensor_init(&tb, tjt_data + 1024, TJT_F32, 2, shape_b, NULL);
  tb.t.byte_offset = 8;
  tjt_tensor_1d(&to, tjt_data + 2048, TJT_F32, 7);
  to.t.byte_offset = 4;
  tjt_tensor_1d(&tq, tjt_data + 4096, TJT_F32, 100);
  tq.t.byte_offset = 12;

  tj_arg args[10], out;
  for (int i = 0; i < 10; ++i) tj_arg_init(&args[i]);
  tjt_arg_tensor(&args[0], &ta, 0);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = -7;
  args[2].kind = TJ_ARG_INT; /* an int for a float parameter arrives as a double */
  args[2].value.i = 3;
  args[3].kind = TJ_ARG_FLOAT;
  args[3].value.f = 2.5;
  args[4].kind = TJ_ARG_BOOL;
  args[4].value.i = 1;
  args[5].kind = TJ_ARG_ADDRESS;
  args[5].value.p = (void *)(uintptr_t)0x1000;
  /* args[6] (bias) stays None */
  tjt_arg_tensor(&args[7], &tb, 0);
  tjt_arg_tensor(&args[8], &tq, 0); /* Q */
  /* args[9] (R) stays None */

  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 10, &f));
  CHECK_EQ_INT(f.out_shape[0][0], 7);
  tjt_arg_tensor(&out, &to, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  captured_count = 13;
  capture_calls = 0;
  memset(captured, 0xee, sizeof(captured));
  CHECK_OK(tj_call_launch(&f));
  CHECK_EQ_INT(capture_calls, 1);
  CHECK(captured[0].p == tjt_data + 64);
  CHECK_EQ_INT(captured[1].i, -7);
  CHECK(captured[2].f == 3.0);
  CHECK(captured[3].f == 2.5);
  CHECK_EQ_INT(captured[4].i, 1);
  CHECK(captured[5].p == (void *)(uintptr_t)0x1000);
  CHECK(captured[6].p == NULL);
  CHECK(captured[7].p == tjt_data + 1024 + 8);
  CHECK(captured[8].p == tjt_data + 2048 + 4);
  CHECK(captured[9].p == tjt_data + 4096 + 12);
  CHECK(captured[10].p == NULL);
  CHECK_EQ_INT(captured[11].i, 6); /* n */
  CHECK_EQ_INT(captured[12].i, 2); /* m */
  tj_kernel_free(k);
}

TEST(launch_missing_library) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  const char *path = "/nonexistent/tilejit-test/libno_such_kernel.so";
  CHECK_STATUS(tj_kernel_load(k, path, ENTRY), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("vec_add: ");
  CHECK_ERROR_CONTAINS(path);
  /* Nothing was loaded: a launch still reports the missing library. */
  tjt_tensor a, c;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tjt_tensor_1d(&c, tjt_data + 64, TJT_F32, 4);
  tj_arg args[2], out;
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  tjt_arg_tensor(&out, &c, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("no kernel library");
  tj_kernel_free(k);
}

TEST(launch_missing_symbol) {
  char path[1024];
  tjt_fixture_path("vec_add.so", path, sizeof(path));
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  CHECK_STATUS(tj_kernel_load(k, path, "no_such_entry"), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("vec_add: ");
  CHECK_ERROR_CONTAINS(path);
  CHECK_ERROR_CONTAINS("no_such_entry");
  /* The failed load kept nothing open: loading the right symbol works. */
  CHECK_OK(tj_kernel_load(k, path, ENTRY));
  tj_kernel_free(k);
}

TEST(launch_load_twice) {
  char path[1024];
  tjt_fixture_path("vec_add.so", path, sizeof(path));
  tj_kernel *k = load_vec_add();
  CHECK_STATUS(tj_kernel_load(k, path, ENTRY), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("already loaded");
  tj_kernel_free(k);
}

TEST(launch_output_not_set) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  CHECK_OK(tj_kernel_set_entry(k, capture_entry));
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  captured_count = 0;
  capture_calls = 0;
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("vec_add: ");
  CHECK_ERROR_CONTAINS("output 'C'");
  CHECK_EQ_INT(capture_calls, 0);
  tj_kernel_free(k);
}

TEST(launch_no_entry) {
  tj_kernel *k = tjt_vec_add(0, 1);
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  tj_arg args[3];
  for (int i = 0; i < 3; ++i) tjt_arg_tensor(&args[i], &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("vec_add: ");
  CHECK_ERROR_CONTAINS("no kernel library");
  tj_kernel_free(k);
}

TEST(launch_cuda_skips_cpu_entry) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("gpu", 1, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_entry(k, capture_entry));
  tjt_tensor a;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 4);
  a.t.device.device_type = kDLCUDA;
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  capture_calls = 0;
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("gpu: ");
  CHECK_EQ_INT(capture_calls, 0); /* never handed device pointers to a CPU entry */
  tj_kernel_free(k);
}

/* ---- Many threads, one kernel --------------------------------------------- */

enum { THREADS = 4, ITERATIONS = 10000, MAX_N = 64 };

typedef struct {
  const tj_kernel *kernel;
  int id;
  int failures;
  char first_failure[512];
} worker;

static void worker_fail(worker *w, int iteration, const char *what) {
  if (w->failures++ == 0)
    snprintf(w->first_failure, sizeof(w->first_failure), "thread %d, iteration %d: %s (%s)", w->id,
             iteration, what, tj_last_error());
}

/* Binds, sets the output and launches with this thread's own frame, args and
 * arrays; every 97th iteration also makes a bind fail on purpose and checks
 * that the thread sees its own error message. */
static void *worker_main(void *opaque) {
  worker *w = opaque;
  float a[MAX_N], b[MAX_N], c[MAX_N];
  char want[64], want_got[64];
  for (int it = 0; it < ITERATIONS; ++it) {
    int64_t n = 1 + (it * 7 + w->id) % MAX_N;
    for (int64_t i = 0; i < n; ++i) {
      a[i] = (float)(w->id * 1000 + i);
      b[i] = (float)it;
      c[i] = -1.0f;
    }
    tjt_tensor ta, tb, tc;
    const int64_t one = 1;
    tjt_tensor_init(&ta, a, TJT_F32, 1, &n, &one);
    tjt_tensor_init(&tb, b, TJT_F32, 1, &n, NULL);
    tjt_tensor_init(&tc, c, TJT_F32, 1, &n, &one);
    tj_arg args[2], out;
    tj_arg_from_dltensor(&args[0], &ta.t, 0);
    tj_arg_from_dltensor(&args[1], &tb.t, 0);
    tj_frame f;
    if (it % 97 == 0) {
      /* B one longer than A: the message carries this thread's numbers. */
      int64_t bad = n + 1 + w->id;
      tjt_tensor tbad;
      tjt_tensor_init(&tbad, b, TJT_F32, 1, &bad, NULL);
      tj_arg_from_dltensor(&args[1], &tbad.t, 0);
      snprintf(want, sizeof(want), "(= %lld,", (long long)n);
      snprintf(want_got, sizeof(want_got), "got %lld", (long long)bad);
      if (tj_call_bind(w->kernel, args, 2, &f) != TJ_EVALUE)
        worker_fail(w, it, "bad bind did not fail");
      else if (strstr(tj_last_error(), want) == NULL || strstr(tj_last_error(), want_got) == NULL)
        worker_fail(w, it, "error message of another thread");
      tj_arg_from_dltensor(&args[1], &tb.t, 0);
    }
    if (tj_call_bind(w->kernel, args, 2, &f) != TJ_OK) {
      worker_fail(w, it, "bind");
      continue;
    }
    tj_arg_from_dltensor(&out, &tc.t, 0);
    if (tj_call_set_output(&f, 0, &out) != TJ_OK) {
      worker_fail(w, it, "set_output");
      continue;
    }
    if (tj_call_launch(&f) != TJ_OK) {
      worker_fail(w, it, "launch");
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (c[i] != a[i] + b[i]) {
        worker_fail(w, it, "wrong result");
        break;
      }
    }
  }
  return NULL;
}

TEST(launch_threads) {
  tj_kernel *k = load_vec_add();
  pthread_t threads[THREADS];
  worker workers[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    memset(&workers[t], 0, sizeof(workers[t]));
    workers[t].kernel = k;
    workers[t].id = t;
    CHECK_EQ_INT(pthread_create(&threads[t], NULL, worker_main, &workers[t]), 0);
  }
  int failures = 0;
  for (int t = 0; t < THREADS; ++t) {
    CHECK_EQ_INT(pthread_join(threads[t], NULL), 0);
    if (workers[t].failures) printf("  %s\n", workers[t].first_failure);
    failures += workers[t].failures;
  }
  CHECK_EQ_INT(failures, 0);
  tj_kernel_free(k);
}

/* ---- tj_call_run over an exchange-API table ----------------------------------
 * Objects are tjt_tensor*; the producer's allocator mallocs a managed tensor with
 * its own storage, and "to object" hands back that managed tensor as the object. */
typedef struct {
  DLManagedTensorVersioned managed;
  int64_t shape[4];
  float data[64];
} fake_output;

static int fake_fail_view, fake_fail_alloc, fake_unlocks, fake_locks;

static int fake_view(void *object, DLTensor *out) {
  if (fake_fail_view) return -1;
  *out = ((tjt_tensor *)object)->t;
  return 0;
}

static void fake_delete(DLManagedTensorVersioned *self) { free(self); }

static int fake_alloc(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                      void (*set_error)(void *, const char *, const char *)) {
  if (fake_fail_alloc) {
    set_error(ctx, "RuntimeError", "no memory today");
    return -1;
  }
  fake_output *o = calloc(1, sizeof(*o));
  o->managed.version.major = 1;
  o->managed.deleter = fake_delete;
  o->managed.dl_tensor = *proto;
  memcpy(o->shape, proto->shape, (size_t)proto->ndim * sizeof(int64_t));
  o->managed.dl_tensor.shape = o->shape;
  o->managed.dl_tensor.data = o->data;
  *out = &o->managed;
  return 0;
}

static int fake_to_object(DLManagedTensorVersioned *managed, void **out) {
  *out = managed; /* the "object" is the tensor itself */
  return 0;
}

static int fake_export(void *object, DLManagedTensorVersioned **out) {
  (void)object;
  (void)out;
  return -1; /* required by the API; the view is used instead */
}

static int fake_stream(DLDeviceType type, int32_t id, void **out) {
  (void)type;
  (void)id;
  *out = NULL;
  return 0;
}

static void *fake_unlock(void) {
  ++fake_unlocks;
  return &fake_unlocks;
}

static void fake_lock(void *token) {
  CHECK(token == &fake_unlocks);
  ++fake_locks;
}

/* An interpreter with fake_threads threads, listed as 1, 2, ... */
static int fake_threads, fake_interp;
static intptr_t thread_ids[4] = {1, 2, 3, 4};
static void *fake_interpreter(void) { return &fake_interp; }
static void *fake_thread_head(void *interp) {
  CHECK(interp == &fake_interp);
  return fake_threads > 0 ? &thread_ids[0] : NULL;
}
static void *fake_thread_next(void *thread) {
  intptr_t *t = thread;
  return *t < fake_threads ? t + 1 : NULL;
}

/* The objects of one call: both arguments imported by the producer. */
static int run_objects(const tj_kernel *k, const tj_producer *producer, const tj_host *host,
                       void **objects, void **outputs) {
  tj_arg args[2];
  for (int i = 0; i < 2; ++i) {
    tj_arg_init(&args[i]);
    args[i].kind = TJ_ARG_OBJECT;
    args[i].value.p = objects[i];
    args[i].producer = producer;
  }
  tj_call call = {args, 2, 0, NULL, outputs};
  const tj_call_binding binding = {NULL, host, 0, 0};
  return tj_call_run_binding(k, &call, &binding);
}

TEST(call_run_exchange_vec_add) {
  tj_kernel *k = load_vec_add();
  DLPackExchangeAPI api = {{{1, 3}, NULL}, fake_alloc, fake_export,
                           fake_to_object, fake_view,  fake_stream};
  tj_producer producer;
  CHECK_OK(tj_producer_from_exchange(&producer, &api.header, NULL));
  tj_host host;
  memset(&host, 0, sizeof(host));
  host.unlock = fake_unlock;
  host.lock = fake_lock;
  float a[8], b[8];
  for (int i = 0; i < 8; ++i) {
    a[i] = (float)i;
    b[i] = 10.0f * (float)i;
  }
  const int64_t n = 8, m = 7;
  tjt_tensor ta, tb;
  tjt_tensor_init(&ta, a, TJT_F32, 1, &n, NULL);
  tjt_tensor_init(&tb, b, TJT_F32, 1, &n, NULL);
  void *objects[2] = {&ta, &tb};
  void *outputs[1] = {NULL};
  fake_unlocks = fake_locks = 0;
  CHECK_OK(run_objects(k, &producer, &host, objects, outputs));
  fake_output *c = outputs[0];
  CHECK(c != NULL);
  CHECK_EQ_INT(c->managed.dl_tensor.shape[0], 8);
  for (int i = 0; i < 8; ++i) CHECK(c->data[i] == 11.0f * (float)i);
  CHECK_EQ_INT(fake_unlocks, 1); /* the kernel ran with the lock dropped */
  CHECK_EQ_INT(fake_locks, 1);
  free(c);

  /* Validation is the usual one, with the usual message. */
  tjt_tensor_init(&tb, b, TJT_F32, 1, &m, NULL);
  CHECK_STATUS(run_objects(k, &producer, &host, objects, outputs), TJ_EVALUE);
  CHECK_ERROR_CONTAINS(
      "vec_add: argument 1 'B': expected shape[0] == n (= 8, bound by "
      "argument 0 'A'), got 7");
  CHECK(outputs[0] == NULL);
  tjt_tensor_init(&tb, b, TJT_F32, 1, &n, NULL);

  /* A producer refusing a view: its error, and which argument. */
  fake_fail_view = 1;
  CHECK_STATUS(run_objects(k, &producer, &host, objects, outputs), TJ_EPYERR);
  CHECK_EQ_INT(tj_last_error_info()->argument, 0);
  CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_IMPORT);
  fake_fail_view = 0;

  /* An allocator failing: a runtime error naming the output. */
  fake_fail_alloc = 1;
  CHECK_STATUS(run_objects(k, &producer, &host, objects, outputs), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS(
      "vec_add: output 'C': cannot allocate the output: "
      "no memory today");
  fake_fail_alloc = 0;

  /* Without an unlock hook the lock is simply kept. */
  fake_unlocks = 0;
  CHECK_OK(run_objects(k, &producer, NULL, objects, outputs));
  CHECK_EQ_INT(fake_unlocks, 0);
  free(outputs[0]);

  /* A host that lists its threads keeps the lock while there is one, and drops it
   * when there are more. */
  host.interpreter = fake_interpreter;
  host.thread_head = fake_thread_head;
  host.thread_next = fake_thread_next;
  fake_threads = 1, fake_unlocks = fake_locks = 0;
  CHECK_OK(run_objects(k, &producer, &host, objects, outputs));
  free(outputs[0]);
  CHECK_EQ_INT(fake_unlocks, 0);
  fake_threads = 2;
  CHECK_OK(run_objects(k, &producer, &host, objects, outputs));
  free(outputs[0]);
  CHECK_EQ_INT(fake_unlocks, 1);
  CHECK_EQ_INT(fake_locks, 1);
  tj_kernel_free(k);
}

TEST(launch_abi_order) {
  /* vec_add(A, B, C: output) received as (n + 1 as int32, C, n, A); B is
   * validated and binds nothing new but is not passed. */
  tj_kernel *k = tjt_reordered(TJ_BUF_OUTPUT, (tj_abi_arg){TJ_ABI_SYMBOL, 0, {0, 0, 0}});
  CHECK_OK(tj_kernel_set_entry(k, capture_entry));
  tjt_tensor ta, tb, tc;
  tjt_tensor_1d(&ta, tjt_data, TJT_F32, 6);
  tjt_tensor_1d(&tb, tjt_data + 256, TJT_F32, 6);
  tjt_tensor_1d(&tc, tjt_data + 512, TJT_F32, 6);
  tj_arg args[2], out;
  tjt_arg_tensor(&args[0], &ta, 0);
  tjt_arg_tensor(&args[1], &tb, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  tjt_arg_tensor(&out, &tc, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  captured_count = 4;
  CHECK_OK(tj_call_launch(&f));
  CHECK_EQ_INT(captured[0].i, 7);
  CHECK(captured[1].p == tjt_data + 512);
  CHECK_EQ_INT(captured[2].i, 6);
  CHECK(captured[3].p == tjt_data);
  tj_kernel_free(k);

  /* set_abi refuses what cannot be an argument. */
  CHECK_OK(tj_kernel_create("bad_abi", 1, TJ_TARGET_CPU, &k));
  const tj_abi_arg out_of_range = {TJ_ABI_PARAM, 1, {0, 0, 0}};
  CHECK_STATUS(tj_kernel_set_abi(k, 1, &out_of_range), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("bad_abi: kernel argument 0: index 1 out of range (1)");
  const tj_abi_arg float_expr = {TJ_ABI_EXPR, 0, TJT_F32};
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  (void)tjt_sym(k, 0);
  CHECK_STATUS(tj_kernel_set_abi(k, 1, &float_expr), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_symbol_dtype(k, 0, TJT_F32), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("symbol 'n': dtype must be int32, int64, uint32 or uint64");
  tj_kernel_free(k);
}

static int32_t failing_entry(const tj_value *args) {
  (void)args;
  return 42;
}

TEST(launch_status_returned) {
  tj_kernel *k = tjt_vec_add(0, 1);
  CHECK_OK(tj_kernel_set_entry(k, failing_entry));
  tjt_tensor t[3];
  tj_arg args[3];
  for (int i = 0; i < 3; ++i) {
    tjt_tensor_1d(&t[i], tjt_data + 256 * i, TJT_F32, 4);
    tjt_arg_tensor(&args[i], &t[i], 0);
  }
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("vec_add: the kernel returned status 42 (0 is success)");
  tj_kernel_free(k);
}

TEST(launch_prebuilt_library) {
  /* axpy(x, y, alpha, n) from a library built elsewhere, through its glue;
   * kernel arguments (n as int32, x, y, alpha). */
  char glue[1024], library[1024];
  tjt_fixture_path("plain_axpy_glue.so", glue, sizeof(glue));
  tjt_fixture_path("plain_axpy.so", library, sizeof(library));
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("axpy", 3, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_set_symbol_dtype(k, 0, TJT_DTYPE(kDLInt, 32)));
  int32_t n = tjt_sym(k, 0);
  tjt_buffer(k, 0, "x", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "y", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 2, "alpha", TJT_F32));
  const tj_abi_arg abi[4] = {{TJ_ABI_SYMBOL, 0, {0, 0, 0}},
                             {TJ_ABI_PARAM, 0, {0, 0, 0}},
                             {TJ_ABI_PARAM, 1, {0, 0, 0}},
                             {TJ_ABI_PARAM, 2, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, 4, abi));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_STATUS(tj_kernel_load_prebuilt(k, glue, ENTRY, library, "no_such_function"), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("has no function 'no_such_function'");
  CHECK_OK(tj_kernel_load_prebuilt(k, glue, ENTRY, library, "axpy"));
  float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
  tjt_tensor tx, ty;
  tjt_tensor_1d(&tx, x, TJT_F32, 4);
  tjt_tensor_1d(&ty, y, TJT_F32, 4);
  tj_arg args[3];
  tjt_arg_tensor(&args[0], &tx, 0);
  tjt_arg_tensor(&args[1], &ty, 0);
  tj_arg_init(&args[2]);
  args[2].kind = TJ_ARG_FLOAT;
  args[2].value.f = 0.5;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 3, &f));
  CHECK_OK(tj_call_launch(&f));
  CHECK(y[0] == 10.5f && y[3] == 42.0f);
  tj_kernel_free(k);
}
