/*
 * The validated-call memo (src/memo.c): a call bound from the memo must end
 * exactly as the full checks end it, status, message and frame alike. Checked
 * differentially: two twin kernels, one keeping no memo, get the same long
 * random walk of arguments (mostly repeats, so the memo hits, with every kind
 * of change in between); and under threads that bind different shapes at once.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "builders.h"
#include "internal.h"
#include "launch.h"
#include "memo.h"

static int32_t no_op_entry(const tj_value *args) {
  (void)args;
  return 0;
}

/* k(A: (m, n) f32 with strides (s, 1), B: (n,) f32 const, C: (m + 1,) f32
 * optional, alpha: int8, beta: float64, D: (m, n) f32 output). Without
 * `output` no D, and the kernel function also takes m, m + 1, n and s: a
 * kernel whose repeated calls the memo packs (tj__memo_pack). */
static tj_kernel *walk_kernel_of(int keep_memo, int output) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("walk", output ? 6 : 5, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "s", 2));
  int32_t m = tjt_sym(k, 0), n = tjt_sym(k, 1), s = tjt_sym(k, 2);
  int32_t a_shape[2] = {m, n}, a_strides[2] = {s, tjt_const(k, 1)};
  tjt_buffer(k, 0, "A", TJT_F32, 2, a_shape, a_strides, 16, 0);
  tjt_buffer(k, 1, "B", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  int32_t m1 = tjt_binop_const(k, "m + 1", 0, TJ_OP_ADD, 1);
  tjt_buffer(k, 2, "C", TJT_F32, 1, &m1, NULL, 0, TJ_BUF_OPTIONAL);
  CHECK_OK(tj_kernel_set_scalar(k, 3, "alpha", TJT_DTYPE(kDLInt, 8)));
  CHECK_OK(tj_kernel_set_scalar(k, 4, "beta", TJT_F64));
  if (output) {
    tjt_buffer(k, 5, "D", TJT_F32, 2, a_shape, NULL, 0, TJ_BUF_OUTPUT);
  } else {
    tj_abi_arg abi[9];
    for (int32_t i = 0; i < 5; ++i) abi[i] = (tj_abi_arg){TJ_ABI_PARAM, i, {0, 0, 0}};
    abi[5] = (tj_abi_arg){TJ_ABI_SYMBOL, 0, {0, 0, 0}};
    abi[6] = (tj_abi_arg){TJ_ABI_EXPR, m1, TJT_DTYPE(kDLInt, 64)};
    abi[7] = (tj_abi_arg){TJ_ABI_SYMBOL, 1, {0, 0, 0}};
    abi[8] = (tj_abi_arg){TJ_ABI_SYMBOL, 2, {0, 0, 0}};
    CHECK_OK(tj_kernel_set_abi(k, 9, abi));
    CHECK_OK(tj_kernel_set_entry(k, no_op_entry));
  }
  CHECK_OK(tj_kernel_finalize(k));
  CHECK(k->memo != NULL);
  if (!keep_memo) tj__memo_free(k);
  return k;
}

static tj_kernel *walk_kernel(int keep_memo) { return walk_kernel_of(keep_memo, 1); }

static uint64_t next(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* One call's arguments, changed a little at each step of the walk. */
typedef struct {
  tjt_tensor a, b, c;
  tj_arg args[5];
  int c_none;
  uint32_t a_flags, b_flags;
  int64_t alpha;
  int alpha_kind, beta_kind;
} walk_args;

static void walk_reset(walk_args *w) {
  const int64_t a_shape[2] = {4, 6}, a_strides[2] = {8, 1}, b_shape[1] = {6}, c_shape[1] = {5};
  memset(w, 0, sizeof(*w));
  tjt_tensor_init(&w->a, tjt_data, TJT_F32, 2, a_shape, a_strides);
  tjt_tensor_init(&w->b, tjt_data + 1024, TJT_F32, 1, b_shape, NULL);
  tjt_tensor_init(&w->c, tjt_data + 2048, TJT_F32, 1, c_shape, NULL);
  w->alpha = 3;
  w->alpha_kind = TJ_ARG_INT;
  w->beta_kind = TJ_ARG_FLOAT;
}

/* One random change; most steps change nothing, so the memo gets hits. */
static void walk_step(walk_args *w, uint64_t *rng) {
  uint64_t r = next(rng);
  tjt_tensor *pick[3] = {&w->a, &w->b, &w->c};
  tjt_tensor *t = pick[(r >> 8) % 3];
  int64_t v = (int64_t)((r >> 16) % 4) * 2; /* 0, 2, 4, 6 */
  if ((r >> 40) % 6 == 0) {                 /* back to a valid call now and then */
    walk_reset(w);
    return;
  }
  switch (r % 24) {
    case 0: walk_reset(w); break;
    case 1: t->shape[0] = v; break;
    case 2: t->t.ndim > 1 ? (void)(t->shape[1] = v + 1) : (void)(t->shape[0] = v + 1); break;
    case 3: t->t.strides = t->t.strides ? NULL : t->strides; break;
    case 4: t->strides[0] = v + 8; break;
    case 5: t->strides[t->t.ndim - 1] = (int64_t)((r >> 20) % 3); break;
    case 6: t->t.data = (char *)tjt_data + ((r >> 20) % 3) * 4; break;
    case 7: t->t.data = NULL; break;
    case 8: t->t.byte_offset = (r >> 20) % 2 ? UINT64_MAX - 8 : 16 * ((r >> 21) % 3); break;
    case 9: t->t.dtype = (r >> 20) % 2 ? TJT_F64 : TJT_F32; break;
    case 10: t->t.device.device_type = (r >> 20) % 3 ? kDLCPU : kDLCUDA; break;
    case 11: t->t.device.device_type = (r >> 20) % 2 ? kDLCPU : kDLCUDAHost; break;
    case 12: t->t.ndim = (r >> 20) % 3 ? (t == &w->a ? 2 : 1) : 3; break;
    case 13: w->c_none = !w->c_none; break;
    case 14: w->a_flags = w->a_flags ? 0 : TJ_ARG_READ_ONLY; break;
    case 15: w->b_flags = w->b_flags ? 0 : TJ_ARG_READ_ONLY; break;
    case 16: w->alpha = (int64_t)((r >> 20) % 300) - 150; break;
    case 17: w->alpha_kind = (r >> 20) % 4 ? TJ_ARG_INT : TJ_ARG_FLOAT; break;
    case 18:
      w->beta_kind = (r >> 20) % 3 ? TJ_ARG_FLOAT : (r >> 22) % 2 ? TJ_ARG_INT : TJ_ARG_BOOL;
      break;
    default: break; /* the same call again */
  }
}

static void walk_fill(walk_args *w) {
  tjt_arg_tensor(&w->args[0], &w->a, w->a_flags);
  tjt_arg_tensor(&w->args[1], &w->b, w->b_flags);
  if (w->c_none)
    tj_arg_init(&w->args[2]);
  else
    tjt_arg_tensor(&w->args[2], &w->c, 0);
  tj_arg_init(&w->args[3]);
  w->args[3].kind = w->alpha_kind;
  w->args[3].value.i = w->alpha;
  if (w->alpha_kind == TJ_ARG_FLOAT) w->args[3].value.f = 1.5;
  tj_arg_init(&w->args[4]);
  w->args[4].kind = w->beta_kind;
  w->args[4].value.f = 0.25;
  if (w->beta_kind != TJ_ARG_FLOAT) w->args[4].value.i = (w->beta_kind == TJ_ARG_BOOL) ? 1 : 7;
  if (w->beta_kind == TJ_ARG_INT && w->alpha == 149) w->args[4].flags = TJ_ARG_OUT_OF_RANGE;
}

/* The walk's next call, in two copies: one for each twin. */
static void walk_next(walk_args *w, uint64_t *rng, tj_arg a1[5], tj_arg a2[5]) {
  walk_step(w, rng);
  walk_fill(w);
  memcpy(a1, w->args, sizeof(w->args));
  memcpy(a2, w->args, sizeof(w->args));
}

static void check_same_frame(const tj_kernel *k, const tj_frame *x, const tj_frame *y,
                             const tj_arg *xa, const tj_arg *ya) {
  CHECK(x->kernel != NULL && y->kernel != NULL);
  CHECK_EQ_INT(x->has_device, y->has_device);
  CHECK_EQ_INT(x->device.device_type, y->device.device_type);
  CHECK_EQ_INT(x->device.device_id, y->device.device_id);
  CHECK_EQ_INT(x->first_tensor, y->first_tensor);
  CHECK(x->stream == NULL && y->stream == NULL);
  for (int32_t s = 0; s < k->nsymbols; ++s) CHECK_EQ_INT(x->symbols[s], y->symbols[s]);
  for (int32_t i = 0; i < k->nparams; ++i)
    CHECK_EQ_INT(x->params[i] ? x->params[i] - xa : -1, y->params[i] ? y->params[i] - ya : -1);
  for (int32_t o = 0; o < k->noutputs; ++o) {
    CHECK_EQ_INT(x->out_ndim[o], y->out_ndim[o]);
    CHECK(memcmp(&x->out_dtype[o], &y->out_dtype[o], sizeof(DLDataType)) == 0);
    for (int32_t d = 0; d < x->out_ndim[o]; ++d)
      CHECK_EQ_INT(x->out_shape[o][d], y->out_shape[o][d]);
  }
}

TEST(memo_matches_full_checks) {
  tj_kernel *with = walk_kernel(1), *without = walk_kernel(0);
  uint64_t rng = 42;
  walk_args w;
  walk_reset(&w);
  int32_t hits = 0, oks = 0, steps = 20000;
  for (int32_t step = 0; step < steps; ++step) {
    tj_arg a1[5], a2[5];
    walk_next(&w, &rng, a1, a2);
    tj_frame f1, f2;
    uint32_t before = __atomic_load_n((uint32_t *)with->memo, __ATOMIC_RELAXED);
    int rc1 = tj_call_bind(with, a1, 5, &f1);
    char e1[1024];
    snprintf(e1, sizeof(e1), "%s", tj_last_error());
    int rc2 = tj_call_bind(without, a2, 5, &f2);
    if (rc1 != rc2)
      tjt_fail(__FILE__, __LINE__, "step %d: memo %s (%s), full checks %s (%s)", step,
               tj_status_name(rc1), e1, tj_status_name(rc2), tj_last_error());
    if (rc1 != TJ_OK) {
      CHECK_EQ_STR(e1, tj_last_error());
      continue;
    }
    ++oks;
    hits += __atomic_load_n((uint32_t *)with->memo, __ATOMIC_RELAXED) == before;
    check_same_frame(with, &f1, &f2, a1, a2);
  }
  tjt_note("%d steps: %d bound, %d of them from the memo", steps, oks, hits);
  CHECK(oks > steps / 5 && hits > oks / 2 && oks - hits > 100);
  tj_kernel_free(with);
  tj_kernel_free(without);
}

/* The memo's packed launch (tj__memo_pack) against the full checks and the
 * packing of their frame: a hit must be a call the full checks accept, packed
 * to the same values; anything else must be no hit. */
TEST(memo_pack_matches_full_checks) {
  tj_kernel *with = walk_kernel_of(1, 0), *without = walk_kernel_of(0, 0);
  tj_kernel *outputs = walk_kernel(1); /* a kernel that allocates: never packed */
  uint64_t rng = 7;
  walk_args w;
  walk_reset(&w);
  int32_t hits = 0, oks = 0, steps = 20000;
  for (int32_t step = 0; step < steps; ++step) {
    tj_arg a1[5], a2[5];
    walk_next(&w, &rng, a1, a2);
    tj__hit hit, never;
    tj_frame f1, f2;
    int packed = tj__memo_pack(with, a1, &hit);
    CHECK(!tj__memo_pack(outputs, a1, &never));
    if (!packed) (void)tj_call_bind(with, a1, 5, &f1); /* recorded when it binds */
    int rc = tj_call_bind(without, a2, 5, &f2);
    oks += rc == TJ_OK;
    if (!packed) continue;
    if (rc != TJ_OK)
      tjt_fail(__FILE__, __LINE__, "step %d: packed by the memo, refused by the full checks: %s",
               step, tj_last_error());
    ++hits;
    tj__packed p;
    CHECK_OK(tj__launch_pack(&f2, &p));
    for (int32_t a = 0; a < without->nabi; ++a)
      if (memcmp(&hit.values[a], &p.values[a], sizeof(tj_value)) != 0)
        tjt_fail(__FILE__, __LINE__, "step %d: argument %d of the kernel function differs", step,
                 a);
    tj__launch_unpack(&p);
  }
  tjt_note("%d steps: %d bound, %d of them packed by the memo", steps, oks, hits);
  CHECK(oks > steps / 5 && hits > oks / 2 && oks - hits > 100);
  tj_kernel_free(with);
  tj_kernel_free(without);
  tj_kernel_free(outputs);
}

TEST(memo_hit_rechecks_addresses) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  CHECK(k->memo != NULL);
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, 64);
  tjt_tensor_1d(&b, tjt_data + 4096, TJT_F32, 64);
  tj_arg args[2];
  tj_frame f;
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK_OK(tj_call_bind(k, args, 2, &f)); /* from the memo */
  CHECK_EQ_INT(f.symbols[0], 64);
  CHECK_EQ_INT(f.out_shape[0][0], 64);
  args[1].tensor.data = NULL;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 1 'B': expected a data pointer, got NULL");
  args[1].tensor.data = tjt_data + 4096;
  args[1].tensor.byte_offset = UINT64_MAX - 16;
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 1 'B': expected data + byte_offset within the address space");
  args[1].tensor.byte_offset = 0;
  args[1].tensor.data = (void *)(UINTPTR_MAX - 64);
  CHECK_STATUS(tj_call_bind(k, args, 2, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("argument 1 'B': expected elements within the address space");
  tj_kernel_free(k);
}

/* A kernel called with a few shapes in turn binds each from its own record;
 * one shape more than there are records replaces the oldest. */
static uint32_t memo_stores(const tj_kernel *k) {
  return __atomic_load_n((const uint32_t *)k->memo, __ATOMIC_RELAXED);
}

static int bind_n(tj_kernel *k, int64_t n) {
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, n);
  tjt_tensor_1d(&b, tjt_data + 4096, TJT_F32, n);
  tj_arg args[2];
  tj_frame f;
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &b, 0);
  CHECK_OK(tj_call_bind(k, args, 2, &f));
  CHECK_EQ_INT(f.symbols[0], n);
  return (int)f.out_shape[0][0];
}

TEST(memo_keeps_a_few_shapes) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  for (int32_t round = 0; round < 3; ++round)
    for (int64_t n = 16; n <= 64; n += 16) CHECK_EQ_INT(bind_n(k, n), n);
  CHECK_EQ_INT(memo_stores(k), 4); /* the first round wrote them, the others hit */
  CHECK_EQ_INT(bind_n(k, 80), 80);
  CHECK_EQ_INT(memo_stores(k), 5);
  CHECK_EQ_INT(bind_n(k, 32), 32); /* still kept */
  CHECK_EQ_INT(bind_n(k, 80), 80);
  CHECK_EQ_INT(memo_stores(k), 5);
  CHECK_EQ_INT(bind_n(k, 16), 16); /* the oldest: replaced by 80 */
  CHECK_EQ_INT(memo_stores(k), 6);
  tj_kernel_free(k);
}

TEST(memo_not_kept_for_pointers) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("ptr", 1, TJ_TARGET_CPU, &k));
  CHECK_OK(tj_kernel_set_pointer(k, 0, "p", TJT_F32, 0, 0));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK(k->memo == NULL);
  tj_kernel_free(k);
}

/* Threads binding different shapes to one kernel at once: each must always
 * get its own symbols back, whether from the memo or from the checks. */
typedef struct {
  tj_kernel *k;
  int64_t n;
  int32_t wrong;
} shape_worker;

static void *bind_repeatedly(void *p) {
  shape_worker *w = p;
  tjt_tensor a, b;
  tjt_tensor_1d(&a, tjt_data, TJT_F32, w->n);
  tjt_tensor_1d(&b, tjt_data + 8192, TJT_F32, w->n);
  for (int32_t i = 0; i < 20000; ++i) {
    tj_arg args[2];
    tj_frame f;
    tjt_arg_tensor(&args[0], &a, 0);
    tjt_arg_tensor(&args[1], &b, 0);
    if (tj_call_bind(w->k, args, 2, &f) != TJ_OK || f.symbols[0] != w->n ||
        f.out_shape[0][0] != w->n)
      ++w->wrong;
  }
  return NULL;
}

TEST(memo_threads) {
  tj_kernel *k = tjt_vec_add(TJ_BUF_OUTPUT, 1);
  shape_worker workers[4];
  pthread_t threads[4];
  for (int32_t t = 0; t < 4; ++t) {
    workers[t] = (shape_worker){k, 16 * (t + 1), 0};
    CHECK(pthread_create(&threads[t], NULL, bind_repeatedly, &workers[t]) == 0);
  }
  for (int32_t t = 0; t < 4; ++t) {
    CHECK(pthread_join(threads[t], NULL) == 0);
    CHECK_EQ_INT(workers[t].wrong, 0);
  }
  tj_kernel_free(k);
}
