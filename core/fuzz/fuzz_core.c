/*
 * A libFuzzer target over everything the core takes from outside: kernel
 * signatures (symbols, expressions, parameters, the kernel's argument list,
 * launch configurations), call arguments (DLTensors with any ndim, shape,
 * strides, data, byte_offset, dtype, device and flags; scalars; addresses),
 * managed tensors of any DLPack version, capsules, exchange API tables,
 * producers that fail at any step, expressions, and the layout API.
 *
 *   make -C core fuzz              builds it and runs it (FUZZ_TIME seconds)
 *
 * Built with -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all:
 * any memory error, leak or undefined behaviour is a finding, and so is a
 * broken promise checked here (abort()): a deleter not called exactly once, a
 * failure without a message, a kernel launched on a tensor its signature
 * refuses. Pointers inside a DLTensor are never dereferenced by the core's
 * checks, so data is an arbitrary integer; shape and strides arrays are real.
 *
 * The input is read as a stream of choices (`next_*`); running out of bytes
 * reads zeros, so every prefix of an input is itself an input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/fake_host.h"
#include "internal.h"
#include "tilejit/layout.h"

/* ---- Reading choices ----------------------------------------------------- */

typedef struct {
  const uint8_t *data;
  size_t size;
} input;

static uint8_t next_u8(input *in) {
  if (in->size == 0) return 0;
  --in->size;
  return *in->data++;
}

static uint64_t next_raw64(input *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | next_u8(in);
  return v;
}

/* Values that sit on the edges of the checks. */
static const int64_t interesting[] = {
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    16,
    -1,
    -2,
    -4,
    -8,
    1 << 15,
    (int64_t)1 << 31,
    (int64_t)1 << 32,
    ((int64_t)1 << 32) - 1,
    (int64_t)1 << 40,
    (int64_t)1 << 61,
    (int64_t)1 << 62,
    -((int64_t)1 << 62),
    INT64_MAX,
    INT64_MIN,
    INT64_MAX - 1,
    INT32_MAX,
    INT32_MIN,
    UINT32_MAX,
};
#define N_INTERESTING ((uint8_t)(sizeof(interesting) / sizeof(interesting[0])))

/* Mostly small or interesting numbers, sometimes any 64 bits. */
static int64_t next_i64(input *in) {
  uint8_t how = next_u8(in);
  if (how < 128) return (int64_t)(how % 20);
  if (how < 128 + 2 * N_INTERESTING) return interesting[(how - 128) % N_INTERESTING];
  return (int64_t)next_raw64(in);
}

static int32_t next_small(input *in, int32_t bound) { return (int32_t)(next_u8(in) % bound); }

static const DLDataType dtypes[] = {
    {kDLFloat, 32, 1},    {kDLFloat, 64, 1},        {kDLFloat, 16, 1},        {kDLBfloat, 16, 1},
    {kDLInt, 8, 1},       {kDLInt, 32, 1},          {kDLInt, 64, 1},          {kDLUInt, 8, 1},
    {kDLUInt, 32, 1},     {kDLUInt, 64, 1},         {kDLBool, 8, 1},          {kDLComplex, 64, 1},
    {kDLComplex, 128, 1}, {kDLFloat8_e4m3fn, 8, 1}, {kDLFloat4_e2m1fn, 4, 2}, {kDLFloat, 32, 4},
};
#define N_DTYPES ((int32_t)(sizeof(dtypes) / sizeof(dtypes[0])))

static DLDataType next_dtype(input *in) {
  uint8_t how = next_u8(in);
  if (how < 240) return dtypes[how % N_DTYPES];
  DLDataType t = {next_u8(in), next_u8(in), (uint16_t)(next_u8(in) | next_u8(in) << 8)};
  return t;
}

static void next_name(input *in, char *buf, size_t size) {
  size_t n = (size_t)next_small(in, 6);
  if (n >= size) n = size - 1;
  for (size_t i = 0; i < n; ++i) {
    char c = (char)next_u8(in);
    buf[i] = c ? c : 'x';
  }
  buf[n] = 0;
  if (n == 0) snprintf(buf, size, "k");
}

/* Every failure carries a message; a status is one of the table's. */
static void check_status(int rc) {
  if (rc == TJ_OK) return;
  if (strcmp(tj_status_name(rc), "TJ_EUNKNOWN") == 0) abort();
  const char *message = tj_last_error();
  if (message == NULL || message[0] == 0 || strlen(message) >= 2048) abort();
}

/* ---- Memory the tensors point at ------------------------------------------ */

/* Aligned scratch; data pointers are this, or arbitrary integers. */
static _Alignas(64) char scratch[4096];

static void *next_data(input *in) {
  uint8_t how = next_u8(in);
  if (how < 160) return scratch + (how % 8) * 4;
  if (how < 200) return NULL;
  return (void *)(uintptr_t)next_raw64(in);
}

/* A DLTensor and the arrays it points into, read from the input; `like` (may
 * be NULL) is a parameter the tensor usually matches, so that the checks past
 * dtype and ndim are reached. */
typedef struct {
  DLTensor t;
  int64_t shape[TJ_MAX_NDIM + 4];
  int64_t strides[TJ_MAX_NDIM + 4];
} fuzz_tensor;

static void next_tensor(input *in, fuzz_tensor *ft, const tj__param *like) {
  memset(ft, 0, sizeof(*ft));
  uint8_t how = next_u8(in);
  int match = like != NULL && like->kind == TJ_PARAM_BUFFER && how < 200;
  int32_t ndim = match ? like->ndim : next_small(in, TJ_MAX_NDIM + 4) - 2;
  ft->t.ndim = ndim;
  ft->t.dtype = match && next_u8(in) < 230 ? like->dtype : next_dtype(in);
  int32_t stored = ndim < 0 ? 0 : ndim;
  for (int32_t d = 0; d < stored; ++d) ft->shape[d] = next_i64(in);
  ft->t.shape = next_u8(in) < 250 || ndim == 0 ? ft->shape : NULL;
  uint8_t strided = next_u8(in);
  if (strided < 64) {
    ft->t.strides = NULL;
  } else {
    int64_t compact = 1;
    for (int32_t d = stored - 1; d >= 0; --d) {
      /* Mostly compact, to get past the compactness checks. */
      ft->strides[d] = strided < 160 ? compact : next_i64(in);
      if (__builtin_mul_overflow(compact, ft->shape[d], &compact)) compact = 1;
    }
    ft->t.strides = ft->strides;
  }
  ft->t.data = next_data(in);
  uint8_t offset = next_u8(in);
  ft->t.byte_offset = offset < 200 ? 0 : offset < 240 ? (uint64_t)next_i64(in) : next_raw64(in);
  uint8_t device = next_u8(in);
  ft->t.device.device_type = device < 200 ? kDLCPU : (DLDeviceType)next_small(in, 20);
  ft->t.device.device_id = device < 220 ? 0 : (int32_t)next_i64(in);
}

/* ---- Managed tensors and their deleters ------------------------------------ */

/* Deleter calls owed by the owning imports of the current input, and made. */
static int owed, deleted;

static void delete_versioned(DLManagedTensorVersioned *self) {
  (void)self;
  ++deleted;
}

static void delete_legacy(DLManagedTensor *self) {
  (void)self;
  ++deleted;
}

/* Everything one input imports lives here, so nothing outlives it. */
typedef struct {
  fuzz_tensor tensors[TJ_MAX_PARAMS + TJ_MAX_OUTPUTS];
  DLManagedTensorVersioned versioned[TJ_MAX_PARAMS + TJ_MAX_OUTPUTS];
  DLManagedTensor legacy[TJ_MAX_PARAMS + TJ_MAX_OUTPUTS];
  int32_t used;
} pool;

/* Makes `arg` a tensor from the input: a borrowed view, or an owning import
 * (versioned, of any major version and flags, or legacy). */
static int import_tensor(input *in, pool *pl, tj_arg *arg, const tj__param *like) {
  if (pl->used == TJ_MAX_PARAMS + TJ_MAX_OUTPUTS) {
    tj_arg_init(arg);
    return TJ_OK;
  }
  int32_t slot = pl->used++;
  fuzz_tensor *ft = &pl->tensors[slot];
  next_tensor(in, ft, like);
  uint8_t how = next_u8(in);
  if (how < 150) {
    tj_arg_from_dltensor(arg, &ft->t, next_u8(in) < 200 ? 0 : TJ_ARG_READ_ONLY);
    return TJ_OK;
  }
  if (how < 230) {
    DLManagedTensorVersioned *m = &pl->versioned[slot];
    memset(m, 0, sizeof(*m));
    m->version.major = next_u8(in) < 230 ? TJ_DLPACK_MAJOR : (uint32_t)next_i64(in);
    m->version.minor = (uint32_t)next_i64(in);
    m->flags = next_u8(in) < 200 ? 0 : next_raw64(in);
    m->deleter = next_u8(in) < 250 ? delete_versioned : NULL;
    m->dl_tensor = ft->t;
    if (m->deleter) ++owed;
    int rc = tj_arg_from_versioned(arg, m, next_u8(in) < 128 ? "argument" : NULL);
    check_status(rc);
    if (rc != TJ_OK && (arg->kind != TJ_ARG_NONE || arg->owner != NULL)) abort();
    return rc;
  }
  DLManagedTensor *m = &pl->legacy[slot];
  memset(m, 0, sizeof(*m));
  m->deleter = next_u8(in) < 250 ? delete_legacy : NULL;
  m->dl_tensor = ft->t;
  if (m->deleter) ++owed;
  tj_arg_from_legacy(arg, m);
  return TJ_OK;
}

/* ---- Kernels --------------------------------------------------------------- */

static int launched;

/* The frame being launched by fuzz_steps (NULL under tj_call_run, whose frame
 * is its own): every tensor the signature took is what it declares. */
static const tj_frame *launching;

static int32_t fuzz_entry(const tj_value *args) {
  (void)args;
  ++launched;
  if (launching == NULL) return 0;
  const tj_kernel *k = launching->kernel;
  for (int32_t i = 0; i < k->nparams; ++i) {
    const tj__param *p = &k->params[i];
    const tj_arg *arg = launching->params[i];
    if (p->kind != TJ_PARAM_BUFFER || arg == NULL || arg->kind != TJ_ARG_TENSOR) continue;
    const DLTensor *t = &arg->tensor;
    if (t->ndim != p->ndim || t->dtype.code != p->dtype.code || t->dtype.bits != p->dtype.bits)
      abort();
    int empty = 0;
    for (int32_t d = 0; d < t->ndim; ++d) {
      if (t->shape[d] < 0) abort();
      empty |= t->shape[d] == 0;
    }
    if (!empty && t->data == NULL) abort();
  }
  return 0;
}

static int64_t next_expr_op(input *in, int32_t nsymbols, int64_t *operand) {
  uint8_t how = next_u8(in);
  int64_t op = how < 240 ? 1 + how % TJ_OP_MAX : next_i64(in);
  *operand = op == TJ_OP_SYM && how < 230 ? next_small(in, nsymbols + 1) : next_i64(in);
  return op;
}

/* A signature from the input; NULL when the API refused it (as it must refuse
 * anything inconsistent). */
/* Parameter i of the kernel being built (the index itself sometimes wild):
 * a buffer, a scalar, a pointer, or nothing. */
static void next_param(input *in, tj_kernel *k, int32_t i, int32_t total, int32_t nsymbols) {
  int32_t index = next_u8(in) < 250 ? i : (int32_t)next_i64(in);
  char pname[8];
  next_name(in, pname, sizeof(pname));
  uint8_t kind = next_u8(in);
  if (kind < 150) {
    int32_t ndim = next_u8(in) < 250 ? next_small(in, 4) : (int32_t)next_i64(in);
    int32_t shape[TJ_MAX_NDIM + 4], strides[TJ_MAX_NDIM + 4];
    int32_t stored = ndim < 0 ? 0 : ndim > TJ_MAX_NDIM + 4 ? TJ_MAX_NDIM + 4 : ndim;
    int bad = 0;
    for (int32_t d = 0; d < stored; ++d) {
      shape[d] = next_small(in, total + 1);
      strides[d] = next_small(in, total + 1);
    }
    if (stored != ndim) bad = 1; /* the API must refuse, reading nothing past TJ_MAX_NDIM */
    if (bad && (ndim < 0 || ndim > TJ_MAX_NDIM + 4)) ndim = next_u8(in) % 2 ? -1 : 17;
    /* Flags up to TJ_BUF_WORKSPACE; not TJ_BUF_ZERO, whose memset trusts the
     * allocator's contract (memory of the size asked) that this harness's
     * allocator, handing out arbitrary addresses, does not keep. */
    uint8_t strided = next_u8(in);
    check_status(tj_kernel_set_buffer(k, index, pname, next_dtype(in), ndim, shape,
                                      strided < 128 ? NULL : strides,
                                      next_u8(in) < 200 ? 0 : next_i64(in), next_u8(in) & 15u));
  } else if (kind < 200) {
    check_status(tj_kernel_set_scalar(k, index, pname, next_dtype(in)));
    /* Sometimes an integer scalar that binds a symbol (or a refused binding). */
    if (next_u8(in) > 128)
      check_status(tj_kernel_set_scalar_symbol(k, index, next_small(in, nsymbols + 1)));
  } else if (kind < 250) {
    check_status(tj_kernel_set_pointer(k, index, pname, next_dtype(in),
                                       next_u8(in) < 200 ? 0 : next_i64(in), next_u8(in) & 7u));
  }
}

static tj_kernel *next_kernel(input *in) {
  char name[8];
  next_name(in, name, sizeof(name));
  int32_t nparams = next_u8(in) < 250 ? next_small(in, 8) : (int32_t)next_i64(in);
  int32_t target = next_u8(in) < 240 ? TJ_TARGET_CPU : next_small(in, 4);
  tj_kernel *k = NULL;
  int rc = tj_kernel_create(name, nparams, target, &k);
  check_status(rc);
  if (rc != TJ_OK) {
    if (k != NULL) abort();
    return NULL;
  }
  int32_t nsymbols = next_small(in, 6);
  for (int32_t s = 0; s < nsymbols; ++s) {
    char sname[8];
    next_name(in, sname, sizeof(sname));
    int64_t div = next_u8(in) < 200 ? 1 + next_small(in, 8) : next_i64(in);
    check_status(tj_kernel_add_symbol(k, sname, div));
    if (next_u8(in) > 230) check_status(tj_kernel_set_symbol_dtype(k, s, next_dtype(in)));
  }
  int32_t nsym = tj_kernel_num_symbols(k);
  /* Every symbol alone, then constants and compound expressions. */
  int32_t id;
  for (int32_t s = 0; s < nsym; ++s) {
    int64_t code[2] = {TJ_OP_SYM, s};
    check_status(tj_kernel_add_expr(k, code, 1, "s", &id));
  }
  int32_t nexprs = next_small(in, 8);
  for (int32_t e = 0; e < nexprs; ++e) {
    int64_t code[2 * 8];
    int32_t n = next_small(in, 8) + (next_u8(in) < 250 ? 0 : -1);
    for (int32_t i = 0; i < n; ++i) code[2 * i] = next_expr_op(in, nsym, &code[2 * i + 1]);
    if (n == 1 && next_u8(in) < 128) { /* mostly a constant */
      code[0] = TJ_OP_CONST;
      code[1] = next_i64(in);
    }
    check_status(tj_kernel_add_expr(k, code, n, "e", &id));
  }
  int32_t total = k->nexprs;
  for (int32_t i = 0; i < nparams + 1; ++i) next_param(in, k, i, total, nsymbols);
  if (next_u8(in) > 200) {
    tj_abi_arg abi[8];
    int32_t n = next_small(in, 8);
    for (int32_t a = 0; a < n; ++a) {
      abi[a].source = next_small(in, 4);
      abi[a].index = next_u8(in) < 240 ? next_small(in, 8) : (int32_t)next_i64(in);
      abi[a].dtype = next_u8(in) < 200 ? (DLDataType){kDLInt, 64, 1} : next_dtype(in);
    }
    check_status(tj_kernel_set_abi(k, n, abi));
  }
  if (target == TJ_TARGET_CUDA || next_u8(in) > 250) {
    int32_t grid[3], block[3];
    for (int i = 0; i < 3; ++i) {
      grid[i] = next_small(in, total + 1);
      block[i] = next_small(in, total + 1);
    }
    check_status(tj_kernel_set_launch(k, grid, block, next_small(in, total + 1)));
  }
  rc = tj_kernel_finalize(k);
  check_status(rc);
  if (rc != TJ_OK) {
    tj_kernel_free(k);
    return NULL;
  }
  if (target == TJ_TARGET_CPU) check_status(tj_kernel_set_entry(k, fuzz_entry));
  return k;
}

/* One caller argument for parameter `p` (NULL: past the parameters). */
static int next_arg(input *in, pool *pl, tj_arg *arg, const tj__param *p) {
  tj_arg_init(arg);
  uint8_t how = next_u8(in);
  int wants_tensor = p != NULL && p->kind != TJ_PARAM_SCALAR;
  if ((wants_tensor && how < 200) || (!wants_tensor && how < 40))
    return import_tensor(in, pl, arg, p);
  switch (how % 7) {
    case 0: arg->kind = TJ_ARG_NONE; break;
    case 1:
      arg->kind = TJ_ARG_INT;
      arg->value.i = next_i64(in);
      if (next_u8(in) > 240) arg->flags |= TJ_ARG_OUT_OF_RANGE;
      break;
    case 2:
      arg->kind = TJ_ARG_BOOL;
      arg->value.i = next_u8(in) & 1;
      break;
    case 3:
      arg->kind = TJ_ARG_FLOAT;
      arg->value.f = (double)next_i64(in) / 3.0;
      break;
    case 4:
      arg->kind = TJ_ARG_ADDRESS;
      arg->value.p = (void *)(uintptr_t)next_raw64(in);
      if (next_u8(in) < 128) {
        arg->tensor.dtype = next_dtype(in);
        arg->tensor.device.device_type = (DLDeviceType)next_small(in, 20);
      }
      break;
    case 5:
      arg->kind = TJ_ARG_OTHER;
      arg->type_name = next_u8(in) < 128 ? "list" : NULL;
      break;
    default: arg->kind = (int32_t)next_i64(in); break;
  }
  return TJ_OK;
}

static const tj__param *input_param(const tj_kernel *k, int32_t position) {
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].position == position) return &k->params[i];
  return NULL;
}

/* ---- The step functions: bind, outputs, launch ------------------------------ */

/* Whether two binds of the same arguments bound the same frame. */
static int same_frame(const tj_kernel *k, const tj_frame *a, const tj_frame *b) {
  if (a->has_device != b->has_device || a->first_tensor != b->first_tensor ||
      memcmp(&a->device, &b->device, sizeof(a->device)) != 0 || a->stream != b->stream)
    return 0;
  for (int32_t s = 0; s < k->nsymbols; ++s)
    if (a->symbols[s] != b->symbols[s]) return 0;
  for (int32_t i = 0; i < k->nparams; ++i)
    if (a->params[i] != b->params[i]) return 0;
  for (int32_t o = 0; o < k->noutputs; ++o) {
    if (a->out_ndim[o] != b->out_ndim[o]) return 0;
    for (int32_t d = 0; d < a->out_ndim[o]; ++d)
      if (a->out_shape[o][d] != b->out_shape[o][d]) return 0;
  }
  return 1;
}

static void fuzz_steps(input *in, tj_kernel *k) {
  pool *pl = calloc(1, sizeof(*pl));
  tj_arg args[TJ_MAX_PARAMS + 2];
  int32_t nargs = next_u8(in) < 250 ? k->ninputs : next_small(in, TJ_MAX_PARAMS + 2);
  int rc = TJ_OK;
  for (int32_t i = 0; i < nargs; ++i)
    if (next_arg(in, pl, &args[i], input_param(k, i)) != TJ_OK) rc = TJ_EVALUE;
  tj_frame frame;
  if (rc == TJ_OK) {
    rc = tj_call_bind(k, args, nargs, &frame);
    check_status(rc);
    /* Bound again, the same arguments take the kernel's record of the last call
     * (src/memo.c) where it keeps one: the frame must come out the same. */
    tj_frame again;
    if (rc == TJ_OK &&
        (tj_call_bind(k, args, nargs, &again) != TJ_OK || !same_frame(k, &frame, &again)))
      abort();
  }
  tj_arg outs[TJ_MAX_OUTPUTS];
  int32_t made = 0;
  for (int32_t o = 0; rc == TJ_OK && o < k->noutputs; ++o) {
    if (import_tensor(in, pl, &outs[o], &k->params[k->output_params[o]]) != TJ_OK) {
      rc = TJ_EVALUE;
      break;
    }
    ++made;
    rc = tj_call_set_output(&frame, next_u8(in) < 250 ? o : (int32_t)next_i64(in), &outs[o]);
    check_status(rc);
  }
  if (rc == TJ_OK && k->target == TJ_TARGET_CPU) {
    frame.stream = next_u8(in) < 250 ? NULL : (void *)(uintptr_t)1;
    launching = &frame;
    int before = launched;
    rc = tj_call_launch(&frame);
    launching = NULL; /* the frame goes out of scope */
    check_status(rc);
    if (rc == TJ_OK && launched != before + 1) abort();
  }
  for (int32_t i = 0; i < nargs; ++i) tj_arg_release(&args[i]);
  for (int32_t o = 0; o < made; ++o) tj_arg_release(&outs[o]);
  free(pl);
}

/* ---- The sequencer, with producers that fail at any step --------------------- */

typedef struct {
  input *in;
  pool *pl;
  const tj_kernel *k;
} producer_state;

static int fuzz_import(const tj_producer *self, void *object, tj_arg *arg) {
  producer_state *st = self->context;
  (void)object;
  uint8_t how = next_u8(st->in);
  if (how > 245) return how % 2 ? TJ_EPYERR : tj_set_error(TJ_EVALUE, "refused");
  return import_tensor(st->in, st->pl, arg, NULL);
}

static int fuzz_allocate(const tj_producer *self, const DLTensor *prototype, tj_arg *out,
                         void **object) {
  producer_state *st = self->context;
  uint8_t how = next_u8(st->in);
  *object = how > 250 ? NULL : (void *)st;
  if (how > 240) return how % 2 ? TJ_EPYERR : tj_set_error(TJ_ERUNTIME, "no memory");
  if (st->pl->used == TJ_MAX_PARAMS + TJ_MAX_OUTPUTS) return tj_set_error(TJ_ERUNTIME, "full");
  fuzz_tensor *ft = &st->pl->tensors[st->pl->used++];
  memset(ft, 0, sizeof(*ft));
  ft->t = *prototype;
  for (int32_t d = 0; d < prototype->ndim && d < TJ_MAX_NDIM; ++d)
    ft->shape[d] = prototype->shape[d];
  ft->t.shape = ft->shape;
  ft->t.data = how < 200 ? (void *)scratch : next_data(st->in);
  tj_arg_from_dltensor(out, &ft->t, 0);
  return TJ_OK;
}

static int fuzz_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                       void **stream) {
  producer_state *st = self->context;
  (void)device_type;
  (void)device_id;
  uint8_t how = next_u8(st->in);
  *stream = how < 200 ? NULL : (void *)(uintptr_t)how;
  return how > 250 ? TJ_EPYERR : TJ_OK;
}

/* Lazy views: a view function answering from the input, or the bits read in
 * place from an object laid out as the producer's view_bits say. */
static int fuzz_view(const tj_producer *self, void *object, uint32_t *view) {
  producer_state *st = self->context;
  (void)object;
  uint8_t how = next_u8(st->in);
  *view = how < 200 ? 0u : how & 3u;
  return how > 250 ? TJ_EPYERR : TJ_OK;
}

/* An object whose word at `block_offset` points to a block (or is NULL). */
static _Alignas(8) unsigned char viewed_object[64];
static uint64_t viewed_block[8];

/* `in_place`: the objects are viewed_object, laid out as view_bits says (the
 * binding vouches for the layout of every object of the producer's type). */
static void next_view(input *in, tj_producer *producer, tj_view_bits *bits, int in_place) {
  uint8_t how = next_u8(in);
  if (how < 128) return;
  if (how < 192 || !in_place) {
    producer->view = fuzz_view;
    return;
  }
  bits->block_offset = 8 * next_small(in, 8);
  bits->word_offset = 8 * next_small(in, 8);
  bits->conjugate = next_raw64(in);
  bits->negative = next_raw64(in);
  void *block = next_u8(in) < 240 ? (void *)viewed_block : NULL;
  memset(viewed_object, 0, sizeof(viewed_object));
  memcpy(viewed_object + bits->block_offset, &block, sizeof(block));
  for (int i = 0; i < 8; ++i) viewed_block[i] = next_u8(in) < 200 ? 0 : next_raw64(in);
  producer->view_bits = bits;
}

static void fuzz_call_run(input *in, tj_kernel *k) {
  pool *pl = calloc(1, sizeof(*pl));
  producer_state st = {in, pl, k};
  tj_producer producer;
  memset(&producer, 0, sizeof(producer));
  producer.import = fuzz_import;
  producer.allocate = next_u8(in) < 250 ? fuzz_allocate : NULL;
  producer.current_stream = next_u8(in) < 200 ? fuzz_stream : NULL;
  producer.context = &st;
  tj_view_bits bits;
  next_view(in, &producer, &bits, 1);
  tj_arg args[TJ_MAX_PARAMS + 2];
  int32_t nargs = next_u8(in) < 250 ? k->ninputs : next_small(in, TJ_MAX_PARAMS + 2);
  for (int32_t i = 0; i < nargs; ++i) {
    tj_arg_init(&args[i]);
    if (next_u8(in) < 200) {
      args[i].kind = TJ_ARG_OBJECT;
      args[i].value.p = viewed_object; /* fuzz_import reads the input, not the object */
      args[i].producer = &producer;
    } else {
      next_arg(in, pl, &args[i], input_param(k, i));
    }
  }
  void *outputs[TJ_MAX_OUTPUTS];
  tj_call call = {args, nargs, next_u8(in) > 240, NULL, outputs};
  const tj_call_binding binding = {next_u8(in) < 128 ? &producer : NULL, NULL, 0, 0};
  if (k->target == TJ_TARGET_CPU) check_status(tj_call_run_binding(k, &call, &binding));
  for (int32_t i = 0; i < nargs; ++i) tj_arg_release(&args[i]);
  free(pl);
}

/* ---- The binding layer (tj_host_call), over the fake host ---------------------- */

/* Outputs become host objects with one reference, the caller's. */
static int host_allocate(const tj_producer *self, const DLTensor *prototype, tj_arg *out,
                         void **object) {
  int rc = fuzz_allocate(self, prototype, out, object);
  if (*object != NULL) *object = fh_int(0);
  return rc;
}

static fh_object *int_hook(fh_object *args) {
  (void)args;
  return fh_int(0);
}

/* The producer and the types live as long as the process, as the registry
 * expects; the producer's state is the current input's. */
static tj_producer host_producer;
static const tj_host_type tensor_info = {TJ_HOST_TENSOR, &host_producer, "Tensor"};
static const tj_host_type float_info = {TJ_HOST_FLOAT, NULL, "numpy.float32"};
static const tj_host_type index_info = {TJ_HOST_INDEX, NULL, "numpy.int64"};
static const tj_host_type other_info = {TJ_HOST_OTHER, NULL, "Thing"};
static fh_object tensor_type, float_type, index_type, other_type, undescribed_type;

/* One argument of a host call, of any kind: an object of a registered type
 * (made in `slot`), an int with its overflow state, a float, None or a bool. */
static void *next_item(input *in, fh_object *slot, const tj_host *host) {
  uint8_t how = next_u8(in);
  fh_object *type = how < 150   ? &tensor_type
                    : how < 160 ? &float_type
                    : how < 170 ? &index_type
                    : how < 175 ? &other_type
                    : how < 178 ? &undescribed_type
                                : NULL;
  if (type != NULL) {
    fh_object_init(slot, type);
    slot->i = next_i64(in);
    slot->f = (double)next_i64(in);
    return slot;
  }
  if (how < 200) {
    fh_object *v = fh_int(next_i64(in));
    v->overflow = how % 3 == 0 ? (how % 2 ? 1 : -1) : 0;
    v->fits_u64 = how % 5 == 0;
    v->u = (unsigned long long)next_raw64(in);
    return v;
  }
  if (how < 220) return fh_float((double)next_i64(in));
  void *constant = how < 230 ? &fh_none : how < 240 ? &fh_true : &fh_false;
  host->retain(constant);
  return constant;
}

static void fuzz_host_call(input *in, tj_kernel *k) {
  pool *pl = calloc(1, sizeof(*pl));
  producer_state st = {in, pl, k};
  tj_host host;
  fh_host(&host);
  if (next_u8(in) & 1) host.type_offset = -1;        /* types through object_type */
  if (next_u8(in) & 1) host.float_value_offset = -1; /* floats through double_of */
  fh_object *hooks[4] = {fh_func(fh_describe), fh_func(int_hook), fh_func(int_hook),
                         fh_func(int_hook)};
  host.describe = hooks[0];
  host.stream_handle = hooks[1];
  host.producer_error = hooks[1]; /* an int for an exception: raised all the same */
  fh_type_init(&tensor_type, &tensor_info);
  fh_type_init(&float_type, &float_info);
  fh_type_init(&index_type, &index_info);
  fh_type_init(&other_type, &other_info);
  fh_type_init(&undescribed_type, NULL);
  memset(&host_producer, 0, sizeof(host_producer));
  host_producer.import = fuzz_import;
  host_producer.allocate = host_allocate;
  host_producer.current_stream = fuzz_stream;
  host_producer.context = &st;
  host_producer.host = &host;
  tj_view_bits bits;
  next_view(in, &host_producer, &bits, 0);
  fh_object *name = fh_str("fuzz"), kernel_object;
  fh_object_init(&kernel_object, &other_type);
  int32_t order[TJ_MAX_OUTPUTS];
  for (int32_t o = 0; o < k->noutputs; ++o) order[o] = k->noutputs - 1 - o;
  tj_host_plan plan = {k,
                       &host,
                       next_u8(in) & 1,
                       next_u8(in) < 128 ? order : NULL,
                       &host_producer,
                       name,
                       &kernel_object,
                       hooks[2],
                       hooks[3],
                       next_u8(in) < 64,
                       next_u8(in) < 64,
                       next_u8(in) < 64,
                       NULL,
                       {NULL, NULL},
                       NULL,
                       {NULL, NULL},
                       NULL};
  /* Arguments of every kind; a stream= or another keyword after them. */
  enum { MAX_ITEMS = TJ_MAX_PARAMS + 3 };
  fh_object statics[MAX_ITEMS];
  void *items[MAX_ITEMS];
  size_t n = next_u8(in) < 250 ? (size_t)k->ninputs : (size_t)next_small(in, TJ_MAX_PARAMS + 2);
  for (size_t i = 0; i <= n; ++i) items[i] = next_item(in, &statics[i], &host);
  fh_object *kwnames = NULL;
  uint8_t keyword = next_u8(in);
  if (keyword > 200) {
    kwnames = fh_tuple(1);
    kwnames->items[0] = fh_str(keyword > 230 ? "stream" : "alpha");
  }
  if (k->target == TJ_TARGET_CPU) {
    void *result = tj_host_call(&plan, items, n, kwnames);
    if (result != NULL)
      host.release(result);
    else if (fh_error_type == NULL)
      abort(); /* a failure always raises */
  }
  fh_clear();
  for (size_t i = 0; i <= n; ++i)
    if (items[i] != NULL && ((fh_object *)items[i])->kind != FH_OBJECT)
      host.release(items[i]);
    else if (items[i] != NULL && ((fh_object *)items[i])->refs != 1)
      abort();
  if (kwnames != NULL) host.release(kwnames);
  host.release(name);
  for (int i = 0; i < 4; ++i) host.release(hooks[i]);
  /* Every reference the core took or made is given back. */
  if (fh_alive != 0 || kernel_object.refs != 1) abort();
  free(pl);
}

/* ---- Exchange API tables and capsules --------------------------------------- */

static int stub_allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                          void (*set_error)(void *, const char *, const char *)) {
  (void)prototype;
  (void)out;
  set_error(error_ctx, "MemoryError", "stub");
  return -1;
}
static int stub_from_object(void *object, DLManagedTensorVersioned **out) {
  (void)object;
  (void)out;
  return -1;
}
static int stub_to_object(DLManagedTensorVersioned *tensor, void **out) {
  (void)tensor;
  (void)out;
  return -1;
}
static int stub_view(void *object, DLTensor *out) {
  (void)object;
  (void)out;
  return -1;
}
static int stub_stream(DLDeviceType type, int32_t id, void **out) {
  (void)type;
  (void)id;
  *out = NULL;
  return 0;
}

/* A chain of up to four tables of any versions, linked in any order (cycles
 * included), each missing any function. */
static void fuzz_exchange(input *in) {
  DLPackExchangeAPI tables[4];
  memset(tables, 0, sizeof(tables));
  int32_t n = 1 + next_small(in, 4);
  for (int32_t i = 0; i < n; ++i) {
    DLPackExchangeAPI *t = &tables[i];
    t->header.version.major = next_u8(in) < 128 ? TJ_DLPACK_MAJOR : (uint32_t)next_i64(in);
    t->header.version.minor = (uint32_t)next_i64(in);
    uint8_t link = next_u8(in);
    t->header.prev_api = link < 64 ? NULL : &tables[link % n].header;
    uint8_t fns = next_u8(in);
    t->managed_tensor_allocator = fns & 1 ? stub_allocator : NULL;
    t->managed_tensor_from_py_object_no_sync = fns & 2 ? stub_from_object : NULL;
    t->managed_tensor_to_py_object_no_sync = fns & 4 ? stub_to_object : NULL;
    t->dltensor_from_py_object_no_sync = fns & 8 ? stub_view : NULL;
    t->current_work_stream = fns & 16 ? stub_stream : NULL;
  }
  tj_producer producer;
  int rc = tj_producer_from_exchange(&producer, &tables[0].header, NULL);
  check_status(rc);
  if (rc != TJ_OK) return;
  if (producer.api == NULL || producer.api->header.version.major != TJ_DLPACK_MAJOR) abort();
  tj_arg arg;
  tj_arg_init(&arg);
  if (producer.import(&producer, NULL, &arg) != TJ_EPYERR) abort();
  void *object = NULL;
  DLTensor proto;
  memset(&proto, 0, sizeof(proto));
  if (producer.allocate(&producer, &proto, &arg, &object) == TJ_OK) abort();
  check_status(TJ_ERUNTIME);
}

/* A capsule as the host sees it: a name and a pointer. */
typedef struct {
  char name[32];
  void *pointer;
} fake_capsule;

static int capsule_is_valid(void *capsule, const char *name) {
  return strcmp(((fake_capsule *)capsule)->name, name) == 0;
}
static void *capsule_pointer(void *capsule, const char *name) {
  return capsule_is_valid(capsule, name) ? ((fake_capsule *)capsule)->pointer : NULL;
}
static int capsule_set_name(void *capsule, const char *name) {
  snprintf(((fake_capsule *)capsule)->name, sizeof(((fake_capsule *)capsule)->name), "%s", name);
  return 0;
}

static void fuzz_capsule(input *in) {
  static const char *names[] = {"dltensor_versioned", "dltensor", "used_dltensor", "other"};
  tj_host host;
  memset(&host, 0, sizeof(host));
  host.capsule_is_valid = capsule_is_valid;
  host.capsule_pointer = capsule_pointer;
  host.capsule_set_name = capsule_set_name;
  pool *pl = calloc(1, sizeof(*pl));
  fuzz_tensor *ft = &pl->tensors[0];
  next_tensor(in, ft, NULL);
  fake_capsule capsule = {"", NULL};
  snprintf(capsule.name, sizeof(capsule.name), "%s", names[next_small(in, 4)]);
  if (strcmp(capsule.name, "dltensor_versioned") == 0) {
    DLManagedTensorVersioned *m = &pl->versioned[0];
    m->version.major = next_u8(in) < 200 ? TJ_DLPACK_MAJOR : (uint32_t)next_i64(in);
    m->flags = next_raw64(in);
    m->deleter = delete_versioned;
    m->dl_tensor = ft->t;
    capsule.pointer = m;
    ++owed;
  } else if (strcmp(capsule.name, "dltensor") == 0) {
    DLManagedTensor *m = &pl->legacy[0];
    m->deleter = delete_legacy;
    m->dl_tensor = ft->t;
    capsule.pointer = m;
    ++owed;
  }
  tj_arg arg;
  int rc = tj_arg_from_capsule(&arg, &capsule, &host);
  check_status(rc);
  /* Consumed exactly when imported or refused for its version. */
  if (capsule.pointer != NULL && strncmp(capsule.name, "used_", 5) != 0) abort();
  tj_arg_release(&arg);
  free(pl);
}

/* ---- Layouts and expressions -------------------------------------------------- */

static void fuzz_layout(input *in) {
  int64_t shape[TJ_MAX_NDIM + 4], strides[TJ_MAX_NDIM + 4], order[TJ_MAX_NDIM + 4];
  int32_t ndim = next_u8(in) < 250 ? next_small(in, 6) : next_small(in, TJ_MAX_NDIM + 4) - 2;
  for (int32_t d = 0; d < TJ_MAX_NDIM + 4; ++d) {
    shape[d] = next_u8(in) < 200 ? next_small(in, 9) : next_i64(in);
    strides[d] = next_i64(in);
  }
  tj_layout layout;
  int rc = tj_layout_init(&layout, ndim, shape, next_u8(in) < 100 ? NULL : strides);
  check_status(rc);
  if (rc != TJ_OK) return;
  for (int32_t step = next_small(in, 6); step > 0; --step) {
    tj_layout before = layout;
    int32_t out, orders[TJ_MAX_NDIM];
    switch (next_small(in, 7)) {
      case 0: rc = tj_layout_mark_dynamic(&layout, next_small(in, 4), next_i64(in)); break;
      case 1: {
        int32_t len = next_u8(in) < 200 ? ndim : next_small(in, TJ_MAX_NDIM + 4);
        for (int32_t d = 0; d < TJ_MAX_NDIM + 4; ++d)
          order[d] = next_u8(in) < 220 ? next_small(in, ndim + 1) : next_i64(in);
        rc = tj_layout_mark_compact_shape_dynamic(
            &layout, next_i64(in), next_u8(in) < 100 ? NULL : order, len,
            next_u8(in) < 200 ? 1 + next_small(in, 8) : next_i64(in));
        break;
      }
      case 2: rc = tj_layout_deduce_leading_dim(&layout, next_small(in, 4), &out); break;
      case 3: rc = tj_layout_deduce_stride_order(&layout, orders); break;
      case 4: {
        int32_t size = next_u8(in) < 200 ? TJ_LAYOUT_FORMAT_SIZE : next_small(in, 64) + 1;
        char *buf = malloc((size_t)size); /* exactly: ASan sees one byte too many */
        rc = tj_layout_format(&layout, buf, size);
        if (strlen(buf) >= (size_t)size) abort();
        free(buf);
        break;
      }
      case 5: {
        int64_t align;
        rc = tj_check_assumed_align(next_raw64(in), next_dtype(in), next_i64(in), &align);
        break;
      }
      default: rc = tj_layout_is_static(&layout) ? TJ_OK : TJ_OK; break;
    }
    check_status(rc);
    /* A failing mark leaves the layout as it was. */
    if (rc != TJ_OK && memcmp(&before, &layout, sizeof(layout)) != 0) abort();
  }
}

static void fuzz_names(input *in) {
  char buf[64];
  int32_t size = next_small(in, 64) + 1;
  DLDataType t = next_dtype(in);
  tj_dtype_format(t, buf, size);
  if (strlen(buf) >= (size_t)size) abort();
  tj_element_type_format(t, buf, size);
  if (strlen(buf) >= (size_t)size) abort();
  int32_t device = (int32_t)next_i64(in);
  if (tj_device_name(device) == NULL || tj_memspace_name(device) == NULL) abort();
  if (tj_status_exception((int)next_i64(in)) == NULL) abort();
}

static void fuzz_expr(input *in) {
  int64_t code[2 * (TJ_MAX_EXPR_STACK + 8)], symbols[TJ_MAX_SYMBOLS], out;
  int32_t n = next_small(in, TJ_MAX_EXPR_STACK + 8);
  for (int32_t i = 0; i < n; ++i) {
    code[2 * i] = next_expr_op(in, TJ_MAX_SYMBOLS - 1, &code[2 * i + 1]);
    /* The caller guarantees symbol numbers are in range (tj_kernel_add_expr checks). */
    if (code[2 * i] == TJ_OP_SYM) code[2 * i + 1] = (uint64_t)code[2 * i + 1] % TJ_MAX_SYMBOLS;
  }
  for (int32_t s = 0; s < TJ_MAX_SYMBOLS; ++s) symbols[s] = next_i64(in);
  check_status(tj_expr_eval(code, n, symbols, &out));
}

/* ---- The entry point ------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input in = {data, size};
  owed = deleted = 0;
  switch (next_small(&in, 6)) {
    case 0:
    case 1: {
      tj_kernel *k = next_kernel(&in);
      if (k == NULL) break;
      for (int32_t calls = 1 + next_small(&in, 3); calls > 0; --calls) {
        uint8_t how = next_u8(&in);
        if (how < 160)
          fuzz_steps(&in, k);
        else if (how < 220)
          fuzz_call_run(&in, k);
        else
          fuzz_host_call(&in, k);
      }
      tj_kernel_free(k);
      break;
    }
    case 2: fuzz_layout(&in); break;
    case 3: fuzz_expr(&in); break;
    case 4: fuzz_exchange(&in); break;
    default:
      fuzz_capsule(&in);
      fuzz_names(&in);
      break;
  }
  /* Every owning import's deleter ran, exactly once. */
  if (deleted != owed) abort();
  return 0;
}
