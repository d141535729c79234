/*
 * The memo of the last calls that bound (memo.c), and binding a call with it:
 * a call whose arguments look like a recorded one (kinds, dtypes, devices,
 * shapes, strides, flags) is bound from the record after the checks that
 * depend on addresses and values alone; any other takes validate.c's full
 * checks, and is recorded when they pass. Thread-safe.
 *
 * The records' layout and the checks of one argument against a record are
 * here, inline: the host's call (host.c) reads each argument and checks it in
 * one pass (tj__memo_open, tj__memo_take, tj__memo_close), and the memo's own
 * functions check arguments already read.
 */
#ifndef TILEJIT_MEMO_H_
#define TILEJIT_MEMO_H_

#include <stddef.h>
#include <string.h>

#include "frame.h"
#include "internal.h"
#include "launch.h"
#include "validate.h"

/* ---- Records ------------------------------------------------------------------- */

/* Per input buffer: four key words, the shape and the strides (ndim each),
 * then what the full checks derived: the span around the first element and
 * whether there is one (an empty tensor has none to check). */
enum { KEY_HEAD, KEY_DEVICE, KEY_FORM, KEY_NO_STRIDES, KEY_WORDS };
#define RECORD_WORDS(ndim) (KEY_WORDS + 2 * (ndim) + 3)
/* Per integer scalar that binds a symbol: its kind and flags, and its value,
 * which the symbol and everything computed from it depend on. */
#define SCALAR_WORDS 2

/* How a hit packs one argument of the kernel's function (tj__memo_pack): the
 * address of the tensor, the value of the scalar at caller argument `at` (a
 * CUDA kernel's float32 as a float, what its parameter holds), or a record's
 * word `at` of the packed integers (symbols, expressions). */
enum { PACK_ADDRESS, PACK_INT, PACK_FLOAT, PACK_FLOAT32, PACK_WORD };
/* Words a CUDA kernel's record adds after its packed integers: the launch's
 * configuration (tj__cuda_config). */
enum { CONFIG_WORDS = 10 };

/* What the memo reads of each input parameter, packed: the parameter table
 * itself is wide, and the hit path should touch little memory. */
typedef struct {
  const tj__param *param;
  int32_t index;       /* the parameter's */
  int32_t position;    /* caller argument */
  int32_t record;      /* first word of a buffer's or binding scalar's record; -1: other scalars */
  int32_t ndim;        /* a buffer's; -1: an integer scalar binding a symbol (value recorded) */
  int32_t slot;        /* the kernel function's argument a hit packs it into; -1: none */
  int32_t how;         /* PACK_ADDRESS, PACK_INT, PACK_FLOAT or PACK_FLOAT32, when slot >= 0 */
  uint64_t misaligned; /* align - 1 */
  tj__scalar_range range; /* a scalar's, for its re-check (record -1) */
} memo_input;

enum { MEMO_RECORDS = 4 }; /* a power of two */

/* Record r is words[r * stride ...]: its sequence (even: stable; odd: being
 * written; 0: nothing yet), then its words. */
typedef struct tj__memo {
  uint32_t stores;      /* records written so far: the first field, tests read it */
  const uint64_t *last; /* the record that matched or was written last */
  int32_t ninputs;
  memo_input inputs[TJ_MAX_PARAMS];
  int32_t frame;   /* in a record: device, has_device | first_tensor, symbols, output shapes */
  int32_t packed;  /* in a record: the packed integers; -1: hits pack no launch */
  int32_t npacked; /* how many */
  int32_t config;  /* in a record: a CUDA launch's configuration (CONFIG_WORDS); -1: none */
  int32_t stride;  /* words a record takes, its sequence included */
  int32_t word_slots[TJ_MAX_ABI_ARGS]; /* packed integer w: the argument it packs into */
  uint64_t words[];
} tj__memo;

/* The memo's words are read while another thread may write them: relaxed
 * atomics (plain moves on the machines we run on), checked by the sequence. */
#define MEMO_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define MEMO_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* An argument's kind and flags as one word. */
static inline uint64_t memo_arg_head(const tj_arg *arg) {
  uint64_t head;
  memcpy(&head, &arg->kind, sizeof(head));
  return head;
}

/* The key words of a buffer argument, read as the record keeps them: the
 * argument's kind and flags, its device, its ndim and dtype, and whether it
 * has strides. Any kind of argument: an absent one's tensor is all zero. */
static inline void memo_buffer_key(const tj_arg *arg, uint64_t key[KEY_WORDS]) {
  _Static_assert(offsetof(tj_arg, flags) == offsetof(tj_arg, kind) + 4 &&
                     offsetof(DLTensor, dtype) == offsetof(DLTensor, ndim) + 4 &&
                     sizeof(DLDataType) == 4 && sizeof(DLDevice) == 8,
                 "key words");
  key[KEY_HEAD] = memo_arg_head(arg);
  memcpy(&key[KEY_DEVICE], &arg->tensor.device, sizeof(uint64_t));
  memcpy(&key[KEY_FORM], &arg->tensor.ndim, sizeof(uint64_t));
  key[KEY_NO_STRIDES] = arg->tensor.strides == NULL;
}

/* Whether a buffer argument matches its record, and its address passes.
 * Inlined: the compiler would otherwise call it once per buffer per call. */
__attribute__((always_inline)) static inline int memo_buffer_matches(const memo_input *in,
                                                                     const tj_arg *arg,
                                                                     const uint64_t *r) {
  uint64_t key[KEY_WORDS];
  memo_buffer_key(arg, key);
  if (((key[KEY_HEAD] ^ MEMO_LOAD(r[KEY_HEAD])) | (key[KEY_DEVICE] ^ MEMO_LOAD(r[KEY_DEVICE])) |
       (key[KEY_FORM] ^ MEMO_LOAD(r[KEY_FORM])) |
       (key[KEY_NO_STRIDES] ^ MEMO_LOAD(r[KEY_NO_STRIDES]))) != 0)
    return 0;
  if (arg->kind != TJ_ARG_TENSOR) return 1; /* absent, as recorded */
  /* The key holds ndim: it is the parameter's here. */
  const DLTensor *t = &arg->tensor;
  const int32_t n = in->ndim;
  const uint64_t *shape = r + KEY_WORDS, *strides = shape + n, *span = strides + n;
  if (n > 0 && t->shape == NULL) return 0;
  for (int32_t d = 0; d < n; ++d)
    if ((uint64_t)t->shape[d] != MEMO_LOAD(shape[d])) return 0;
  if (t->strides != NULL)
    for (int32_t d = 0; d < n; ++d)
      if ((uint64_t)t->strides[d] != MEMO_LOAD(strides[d])) return 0;
  if (!MEMO_LOAD(span[2])) return 1; /* empty */
  uintptr_t first;
  return tj__span_fits(t, MEMO_LOAD(span[0]), MEMO_LOAD(span[1]), &first) &&
         (first & in->misaligned) == 0;
}

/* Whether a binding scalar's argument is the one recorded: same kind and
 * flags, same value (which the full checks accepted). */
static inline int memo_scalar_matches(const tj_arg *arg, const uint64_t *r) {
  return memo_arg_head(arg) == MEMO_LOAD(r[0]) && (uint64_t)arg->value.i == MEMO_LOAD(r[1]);
}

/* A record's sequence when it holds a stable record (0: it does not), read
 * before its words; record_unchanged after them tells a torn read. */
static inline uint64_t memo_record_sequence(const uint64_t *record) {
  const uint64_t seq = __atomic_load_n(&record[0], __ATOMIC_ACQUIRE);
  return (seq & 1) ? 0 : seq;
}

static inline int memo_record_unchanged(const uint64_t *record, uint64_t seq) {
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return __atomic_load_n(&record[0], __ATOMIC_RELAXED) == seq;
}

/* The device and `where` words of a record's frame (tj__memo_store): the
 * device, whether the tensors gave it, the first tensor's caller argument. */
static inline void memo_read_device(const uint64_t *f, DLDevice *device, int32_t *has_device,
                                    int32_t *first_tensor) {
  uint64_t word = MEMO_LOAD(f[0]), where = MEMO_LOAD(f[1]);
  memcpy(device, &word, sizeof(word));
  *has_device = (int32_t)(uint32_t)where;
  *first_tensor = (int32_t)(where >> 32);
}

/* A float32 parameter's value at the start of its word (a CUDA parameter). */
static inline void memo_pack_float32(tj_value *v, const tj_arg *arg) {
  const float f = (float)tj__float_value(arg);
  v->i = 0;
  memcpy(v, &f, sizeof(f));
}

/* Whether argument `arg` matches input `in` of a record's words and passes
 * what a match leaves to check; with values, packed into the kernel
 * function's arguments. */
__attribute__((always_inline)) static inline int memo_input_matches(const memo_input *in,
                                                                    const tj_arg *arg,
                                                                    const uint64_t *words,
                                                                    tj_value *values) {
  if (in->record < 0 ? !tj__scalar_fits_range(&in->range, in->param, arg)
      : in->ndim < 0 ? !memo_scalar_matches(arg, &words[in->record])
                     : !memo_buffer_matches(in, arg, &words[in->record]))
    return 0;
  if (values != NULL && in->slot >= 0) {
    tj_value *v = &values[in->slot];
    if (in->how == PACK_ADDRESS)
      v->p = tj__tensor_address(arg);
    else if (in->how == PACK_INT)
      v->i = arg->value.i;
    else if (in->how == PACK_FLOAT)
      v->f = tj__float_value(arg);
    else
      memo_pack_float32(v, arg);
  }
  return 1;
}

/* ---- A repeated call read argument by argument --------------------------------- */

/* For a caller that reads each argument as it checks it: tj__memo_open takes
 * the record that matched last, when the kernel's hits pack its launch (0:
 * they do not, or no record is stable); tj__memo_take checks input j (of
 * m->inputs, at caller argument m->inputs[j].position) against it and packs
 * it into hit->values (tj__memo_switch when it does not); tj__memo_close
 * packs the rest of the hit, 1 when the record did not change meanwhile. A call whose every input
 * was taken and that closes is checked as tj_call_bind would check it. */
typedef struct {
  const uint64_t *record;
  uint64_t seq;
} tj__memo_reader;

static inline int tj__memo_open(const tj__memo *m, tj__memo_reader *rd) {
  if (m->packed < 0) return 0;
  rd->record = MEMO_LOAD(m->last);
  rd->seq = memo_record_sequence(rd->record);
  return rd->seq != 0;
}

__attribute__((always_inline)) static inline int tj__memo_take(const tj__memo *m,
                                                               const tj__memo_reader *rd, int32_t j,
                                                               const tj_arg *arg, tj__hit *hit) {
  return memo_input_matches(&m->inputs[j], arg, rd->record + 1, hit->values);
}

/* When input `upto` does not match the reader's record: 1 when another record
 * matches inputs 0 to `upto` (read into args, by caller argument), which the
 * reader then reads and the memo tries first from then on; 0 when none does.
 * A kernel called with a few shapes in turn keeps the one pass. */
int tj__memo_switch(const tj_kernel *k, tj__memo_reader *rd, const tj_arg *args, int32_t upto,
                    tj__hit *hit);

static inline int tj__memo_close(const tj__memo *m, const tj__memo_reader *rd, tj__hit *hit) {
  const uint64_t *words = rd->record + 1, *integers = &words[m->packed];
  for (int32_t w = 0; w < m->npacked; ++w)
    hit->values[m->word_slots[w]].i = (int64_t)MEMO_LOAD(integers[w]);
  if (m->config >= 0) { /* CUDA: the device, the stream's producer, the launch */
    memo_read_device(&words[m->frame], &hit->device, &hit->has_device, &hit->first_tensor);
    for (int32_t c = 0; c < CONFIG_WORDS; ++c)
      hit->cfg[c] = (int64_t)MEMO_LOAD(words[m->config + c]);
  }
  return memo_record_unchanged(rd->record, rd->seq);
}

/* ---- The memo's functions ----------------------------------------------------- */

/* Makes k->memo at finalize; kernels it cannot serve keep NULL. */
int tj__memo_create(tj_kernel *k);
void tj__memo_free(tj_kernel *k);
/* 1 and a bound frame when the arguments match a record; 0 otherwise. */
int tj__memo_bind(const tj_kernel *k, tj_arg *args, tj_frame *frame);
/* A kernel with nothing to allocate (a CUDA kernel: one launch, no tensor
 * map): 1 and its launch packed into *hit when the arguments match the record
 * that matched last, the checks passed that tj_call_bind would make; 0
 * otherwise (bind them). */
int tj__memo_pack(const tj_kernel *k, tj_arg *args, tj__hit *hit);
/* Records a call the full checks accepted (and bound into `frame`). */
void tj__memo_store(const tj_kernel *k, const tj_arg *args, const tj_frame *frame);

/* The full checks (tj__bind_checked), recorded in the memo when they pass. */
int tj__bind_recorded(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame);

/* tj_call_bind, inline for the sequencer: a call the memo matches is bound
 * from it, any other takes the full checks. */
static inline int tj__bind(const tj_kernel *k, tj_arg *args, int32_t nargs, tj_frame *frame) {
  if (k->memo != NULL && nargs == k->ninputs && tj__memo_bind(k, args, frame)) return TJ_OK;
  return tj__bind_recorded(k, args, nargs, frame);
}

#endif /* TILEJIT_MEMO_H_ */
