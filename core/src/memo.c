/*
 * The memo of the last calls that bound.
 *
 * A kernel is mostly called again and again with tensors of the same dtypes,
 * devices, shapes and strides, and what tj_call_bind concludes from those
 * (the symbols, the device, the output shapes) is then the same. The memo
 * keeps that conclusion with a fingerprint of the arguments it came from; a
 * call whose arguments match the fingerprint re-checks only what can differ
 * between such calls: each tensor's address (data present, its span within
 * the address space, alignment) and each scalar's value. Anything else, a
 * miss included, takes the full checks, which then refresh the memo.
 *
 * A kernel called with a few shapes in turn (two layers of different widths,
 * say) keeps a record for each: MEMO_RECORDS of them, tried from the one that
 * matched last, so a kernel called with one shape tries one. A miss on them
 * all overwrites the oldest.
 *
 * Kernels are shared between threads, so each record is a sequence lock: a
 * reader only loads, and retries nothing (a torn read is a miss); a writer
 * takes it with one compare-and-swap, and a call that finds it taken is just
 * not remembered.
 *
 * Served: kernels whose parameters are buffers and scalars. A pointer
 * parameter takes many kinds of argument, so such kernels keep no memo.
 */
#include "memo.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "internal.h"
#include "target_cuda.h"
#include "validate.h"

/* One argument of the kernel's function, as hits pack it (PACK_*, `at`). */
typedef struct {
  int32_t how;
  int32_t at;
} pack_step;

/* How hits pack the kernel function's arguments, and the integers a record
 * keeps for them; -1 when they cannot: outputs or workspaces to allocate
 * first, a CUDA kernel of several launches or with tensor maps. A CUDA
 * kernel's integers narrower than 64 bits are read from the start of their
 * word, which holds them there on a little-endian machine alone. */
static int32_t pack_steps(const tj_kernel *k, pack_step *steps) {
  const int cuda = k->target == TJ_TARGET_CUDA;
  if (k->nallocs != 0 || (cuda && (k->nlaunches != 1 || k->ntensormaps != 0 ||
                                   __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)))
    return -1;
  int32_t words = 0;
  for (int32_t a = 0; a < k->nabi; ++a) {
    const tj_abi_arg *entry = &k->abi[a];
    if (entry->source == TJ_ABI_SYMBOL || entry->source == TJ_ABI_EXPR) {
      steps[a] = (pack_step){PACK_WORD, words++};
      continue;
    }
    if (entry->source != TJ_ABI_PARAM) return -1;
    const tj__param *p = &k->params[entry->index];
    if (p->kind == TJ_PARAM_BUFFER)
      steps[a] = (pack_step){PACK_ADDRESS, p->position};
    else if (p->kind == TJ_PARAM_SCALAR)
      steps[a] = (pack_step){p->dtype.code != kDLFloat     ? PACK_INT
                             : cuda && p->dtype.bits == 32 ? PACK_FLOAT32
                                                           : PACK_FLOAT,
                             p->position};
    else
      return -1;
  }
  return words;
}

/* Hands each step of `steps` to what performs it on a hit: an input's value to
 * the input (its slot, -1 until then), a packed integer to word_slots. 0 when an input would
 * pack into two arguments: hits then pack nothing. */
static int assign_slots(const tj_kernel *k, const pack_step *steps, memo_input *inputs, int32_t n,
                        int32_t *word_slots) {
  for (int32_t a = 0; a < k->nabi; ++a) {
    if (steps[a].how == PACK_WORD) {
      word_slots[steps[a].at] = a;
      continue;
    }
    int32_t j = 0;
    while (j < n && inputs[j].position != steps[a].at) ++j;
    if (j == n || inputs[j].slot >= 0) return 0;
    inputs[j].slot = a;
    inputs[j].how = steps[a].how;
  }
  return 1;
}

int tj__memo_create(tj_kernel *k) {
  memo_input inputs[TJ_MAX_PARAMS];
  pack_step steps[TJ_MAX_ABI_ARGS];
  int32_t words = 0, n = 0;
  for (int32_t i = 0; i < k->nparams; ++i) {
    const tj__param *p = &k->params[i];
    if (p->kind == TJ_PARAM_POINTER) return TJ_OK;
    if (p->output >= 0) continue;
    int buffer = p->kind == TJ_PARAM_BUFFER, binds = p->binds >= 0;
    inputs[n++] = (memo_input){p,
                               i,
                               p->position,
                               buffer || binds ? words : -1,
                               binds ? -1 : p->ndim,
                               -1,
                               PACK_ADDRESS,
                               (uint64_t)p->align - 1,
                               tj__scalar_range_of(p)};
    if (buffer) words += RECORD_WORDS(p->ndim);
    if (binds) words += SCALAR_WORDS;
  }
  int32_t frame = words;
  words += 2 + k->nsymbols;
  for (int32_t o = 0; o < k->nallocs; ++o) words += k->params[k->output_params[o]].ndim;
  int32_t word_slots[TJ_MAX_ABI_ARGS];
  int32_t packed = pack_steps(k, steps);
  if (packed >= 0 && !assign_slots(k, steps, inputs, n, word_slots)) packed = -1;
  const int32_t integers = packed >= 0 ? words : -1;
  if (packed >= 0) words += packed;
  const int32_t config = packed >= 0 && k->target == TJ_TARGET_CUDA ? words : -1;
  if (config >= 0) words += CONFIG_WORDS;
  const int32_t stride = 1 + words;
  tj__memo *m = calloc(1, sizeof(*m) + (size_t)MEMO_RECORDS * (size_t)stride * sizeof(uint64_t));
  if (m == NULL) return tj_set_error(TJ_ENOMEM, "%s: out of memory", k->name);
  memcpy(m->inputs, inputs, (size_t)n * sizeof(inputs[0]));
  m->ninputs = n;
  m->frame = frame;
  m->packed = integers;
  m->npacked = packed >= 0 ? packed : 0;
  m->config = config;
  if (packed > 0) memcpy(m->word_slots, word_slots, (size_t)packed * sizeof(word_slots[0]));
  m->stride = stride;
  m->last = m->words;
  k->memo = m;
  return TJ_OK;
}

void tj__memo_free(tj_kernel *k) {
  free(k->memo);
  k->memo = NULL;
}

/* Whether the arguments match a record's words and pass what a match leaves
 * to check, each bound into the frame as it passes. */
__attribute__((always_inline)) static inline int inputs_match(const tj__memo *m, tj_arg *args,
                                                              const uint64_t *words,
                                                              tj_frame *frame) {
  for (int32_t j = 0; j < m->ninputs; ++j) {
    const memo_input *in = &m->inputs[j];
    tj_arg *arg = &args[in->position];
    if (!memo_input_matches(in, arg, words, NULL)) return 0;
    frame->params[in->index] = arg;
  }
  return 1;
}

/* Binds from one record: 1 when the arguments match it, read whole. */
__attribute__((always_inline)) static inline int record_bind(const tj_kernel *k, const tj__memo *m,
                                                             const uint64_t *record, tj_arg *args,
                                                             tj_frame *frame) {
  const uint64_t seq = memo_record_sequence(record);
  if (seq == 0) return 0;
  const uint64_t *words = record + 1;
  if (!inputs_match(m, args, words, frame)) return 0;
  const uint64_t *f = &words[m->frame];
  memo_read_device(f, &frame->device, &frame->has_device, &frame->first_tensor);
  const uint64_t *symbols = f + 2, *shapes = symbols + k->nsymbols;
  for (int32_t s = 0; s < k->nsymbols; ++s) frame->symbols[s] = (int64_t)MEMO_LOAD(symbols[s]);
  for (int32_t o = 0; o < k->nallocs; ++o) {
    const tj__param *p = &k->params[k->output_params[o]];
    frame->params[k->output_params[o]] = NULL;
    frame->out_ndim[o] = p->ndim;
    frame->out_dtype[o] = p->dtype;
    for (int32_t d = 0; d < p->ndim; ++d) frame->out_shape[o][d] = (int64_t)MEMO_LOAD(*shapes++);
  }
  frame->kernel = k;
  frame->stream = NULL;
  return memo_record_unchanged(record, seq);
}

static inline const uint64_t *record_at(const tj__memo *m, uint32_t r) {
  return &m->words[(size_t)r * (size_t)m->stride];
}

/* The record `t` places after `record`, in the order records are tried. */
static inline const uint64_t *record_after(const tj__memo *m, const uint64_t *record, uint32_t t) {
  const uint32_t r = (uint32_t)((record - m->words) / m->stride);
  return record_at(m, (r + t) & (MEMO_RECORDS - 1));
}

/* The records after the one that matched last, in turn; the one that
 * matches becomes the first tried. */
__attribute__((noinline)) static int other_record_bind(const tj_kernel *k, tj__memo *m,
                                                       const uint64_t *record, tj_arg *args,
                                                       tj_frame *frame) {
  for (uint32_t t = 1; t < MEMO_RECORDS; ++t) {
    const uint64_t *other = record_after(m, record, t);
    if (record_bind(k, m, other, args, frame)) {
      MEMO_STORE(m->last, other);
      return 1;
    }
  }
  return 0;
}

int tj__memo_bind(const tj_kernel *k, tj_arg *args, tj_frame *frame) {
  tj__memo *m = k->memo;
  const uint64_t *last = MEMO_LOAD(m->last);
  return record_bind(k, m, last, args, frame) || other_record_bind(k, m, last, args, frame);
}

int tj__memo_switch(const tj_kernel *k, tj__memo_reader *rd, const tj_arg *args, int32_t upto,
                    tj__hit *hit) {
  tj__memo *m = k->memo;
  for (uint32_t t = 1; t < MEMO_RECORDS; ++t) {
    const uint64_t *record = record_after(m, rd->record, t);
    tj__memo_reader other = {record, memo_record_sequence(record)};
    if (other.seq == 0) continue;
    int32_t j = 0;
    while (j <= upto && tj__memo_take(m, &other, j, &args[m->inputs[j].position], hit)) ++j;
    if (j > upto) {
      *rd = other;
      MEMO_STORE(m->last, record);
      return 1;
    }
  }
  return 0;
}

int tj__memo_pack(const tj_kernel *k, tj_arg *args, tj__hit *hit) {
  const tj__memo *m = k->memo;
  tj__memo_reader rd;
  if (!tj__memo_open(m, &rd)) return 0;
  for (int32_t j = 0; j < m->ninputs; ++j)
    if (!tj__memo_take(m, &rd, j, &args[m->inputs[j].position], hit) &&
        !tj__memo_switch(k, &rd, args, j, hit))
      return 0;
  return tj__memo_close(m, &rd, hit);
}

void tj__memo_store(const tj_kernel *k, const tj_arg *args, const tj_frame *frame) {
  tj__memo *m = k->memo;
  int64_t cfg[CONFIG_WORDS];
  /* A configuration that does not evaluate is not recorded: the launch then
   * reports it, call after call. */
  if (m->config >= 0 && tj__cuda_config(frame, cfg) != TJ_OK) return;
  /* The oldest record: records are written in turn. */
  const uint32_t r = __atomic_fetch_add(&m->stores, 1, __ATOMIC_RELAXED) & (MEMO_RECORDS - 1);
  uint64_t *record = (uint64_t *)record_at(m, r), *words = record + 1;
  uint64_t seq = __atomic_load_n(&record[0], __ATOMIC_RELAXED);
  if ((seq & 1) || !__atomic_compare_exchange_n(&record[0], &seq, seq + 1, 0, __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED))
    return;
  __atomic_thread_fence(__ATOMIC_RELEASE);
  for (int32_t j = 0; j < m->ninputs; ++j) {
    const memo_input *in = &m->inputs[j];
    if (in->record < 0) continue;
    uint64_t *r = &words[in->record], key[KEY_WORDS];
    const tj_arg *arg = &args[in->position];
    if (in->ndim < 0) {
      MEMO_STORE(r[0], memo_arg_head(arg));
      MEMO_STORE(r[1], (uint64_t)arg->value.i);
      continue;
    }
    memo_buffer_key(arg, key);
    for (int32_t w = 0; w < KEY_WORDS; ++w) MEMO_STORE(r[w], key[w]);
    if (arg->kind != TJ_ARG_TENSOR) continue;
    const DLTensor *t = &arg->tensor;
    const int32_t n = in->ndim;
    uint64_t *shape = r + KEY_WORDS, *strides = shape + n, *span = strides + n;
    int empty = 0;
    for (int32_t d = 0; d < n; ++d) {
      MEMO_STORE(shape[d], (uint64_t)t->shape[d]);
      MEMO_STORE(strides[d], t->strides != NULL ? (uint64_t)t->strides[d] : 0);
      empty |= t->shape[d] == 0;
    }
    /* tj_call_bind accepted it: a non-empty tensor's span fits. */
    uint64_t below = 0, above = 0;
    if (!empty) tj__buffer_span(in->param, t, &below, &above);
    MEMO_STORE(span[0], below);
    MEMO_STORE(span[1], above);
    MEMO_STORE(span[2], (uint64_t)!empty);
  }
  uint64_t *f = &words[m->frame], device;
  memcpy(&device, &frame->device, sizeof(device));
  MEMO_STORE(f[0], device);
  MEMO_STORE(f[1], (uint32_t)frame->has_device | (uint64_t)(uint32_t)frame->first_tensor << 32);
  uint64_t *symbols = f + 2, *shapes = symbols + k->nsymbols;
  for (int32_t s = 0; s < k->nsymbols; ++s) MEMO_STORE(symbols[s], (uint64_t)frame->symbols[s]);
  for (int32_t o = 0; o < k->nallocs; ++o)
    for (int32_t d = 0; d < frame->out_ndim[o]; ++d)
      MEMO_STORE(*shapes++, (uint64_t)frame->out_shape[o][d]);
  for (int32_t w = 0; w < m->npacked; ++w) {
    int64_t value = 0; /* tj_call_bind evaluated every expression: none fails */
    tj__abi_integer(frame, &k->abi[m->word_slots[w]], &value);
    MEMO_STORE(words[m->packed + w], (uint64_t)value);
  }
  if (m->config >= 0)
    for (int32_t c = 0; c < CONFIG_WORDS; ++c) MEMO_STORE(words[m->config + c], (uint64_t)cfg[c]);
  __atomic_store_n(&record[0], seq + 2, __ATOMIC_RELEASE);
  MEMO_STORE(m->last, (const uint64_t *)record);
}

int tj__bind_recorded(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  int rc = tj__bind_checked(k, args, nargs, frame);
  if (rc == TJ_OK && k->memo != NULL) tj__memo_store(k, args, frame);
  return rc;
}

int tj_call_bind(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  TJ__REFUSE_NULL("tj_call_bind", k);
  TJ__REFUSE_NULL("tj_call_bind", frame);
  if (nargs > 0) TJ__REFUSE_NULL("tj_call_bind", args);
  return tj__bind(k, args, nargs, frame);
}
