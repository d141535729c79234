/*
 * The binding layer (tilejit/host.h): host objects in, one tj_call_run, a host
 * result or exception out. Every backend's call of a kernel passes through
 * tj_host_call, so the classification of arguments, the registry of the
 * producer of each host type, the stream= keyword, the result and the
 * exception are written once. Host objects are reached only through the
 * tj_host table.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "launch.h"
#include "memo.h"

/* ---- Calls into the host ------------------------------------------------------- */

/* A new host tuple of `n` items given as new references (stolen, also on
 * failure; a NULL item, a failed allocation, fails: NULL). */
static void *tuple_stealing(const tj_host *h, intptr_t n, void **items) {
  void *tuple = h->tuple_new(n);
  int ok = tuple != NULL;
  for (intptr_t i = 0; i < n; ++i) {
    if (ok && items[i] != NULL) {
      ok = h->tuple_set(tuple, i, items[i]) == 0;
    } else {
      if (items[i] != NULL) h->release(items[i]);
      ok = 0;
    }
  }
  if (!ok && tuple != NULL) {
    h->release(tuple);
    tuple = NULL;
  }
  return tuple;
}

/* host->call(fn, (items...)), the items stolen as tuple_stealing does. */
static void *call_with(const tj_host *h, void *fn, intptr_t n, void **items) {
  void *args = tuple_stealing(h, n, items);
  if (args == NULL) return NULL;
  void *result = h->call(fn, args);
  h->release(args);
  return result;
}

/* call_with for a function answering a non-negative int: its value. */
static int call_for_u64(const tj_host *h, void *fn, intptr_t n, void **items,
                        unsigned long long *out) {
  void *answer = call_with(h, fn, n, items);
  if (answer == NULL) return TJ_EPYERR;
  *out = h->uint64_of(answer);
  h->release(answer);
  return *out == (unsigned long long)-1 && h->error_pending() != NULL ? TJ_EPYERR : TJ_OK;
}

static void *retained(const tj_host *h, void *object) {
  h->retain(object);
  return object;
}

/* ---- The registry: how the objects of each host type are read ------------- */

/* An open-addressing table per mode (exchange API first, or __dlpack__ only),
 * keyed by the type's address. Entries are never removed: the binding keeps
 * every described type and its tj_host_type alive for the process, so an
 * address is never reused for another type. Touched only under the host lock. */
typedef struct {
  void *type;
  const tj_host_type *info;
} registry_slot;

/* How the one-pass call (read_plain) reads the objects of a type, worked out
 * from its producer when the type becomes the registry's memo: `view` is the
 * exchange API's view, else `read` the producer's in-place read (tj_producer.read,
 * given `read_context`; both NULL: its objects take the full path: not tensors,
 * read only through a call into the host, or lazy views the host must be asked
 * about); `claim` and `bits` what is checked before it. When the claim's
 * autograd record and the lazy-view bits are read through the same block
 * (torch: the TensorImpl), `block` is its offset and one read serves both
 * checks; -1 otherwise (each read as tj__no_autograd_record and
 * tj__may_be_view read it). */
typedef struct {
  int (*view)(void *object, DLTensor *out);
  int (*read)(const void *context, void *object, DLTensor *out);
  const void *read_context;
  const tj_producer *producer;
  const tj_claim *claim; /* checked unless the plan is unclaimed; NULL: none */
  int64_t block, meta, word;
  uint64_t lazy;
} plain_type;

typedef struct {
  registry_slot *slots;
  size_t capacity; /* a power of two, or 0 */
  size_t count;
  void *memo_type; /* the last type asked for: a call's tensors share one */
  const tj_host_type *memo_info;
  plain_type memo_plain; /* how read_plain reads memo_type's objects */
} registry;

static registry registries[2];

static size_t slot_of(const registry *r, void *type) {
  uint64_t h = (uint64_t)(uintptr_t)type * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 32) & (r->capacity - 1);
}

static const tj_host_type *registry_find(const registry *r, void *type) {
  if (r->capacity == 0) return NULL;
  for (size_t i = slot_of(r, type);; i = (i + 1) & (r->capacity - 1)) {
    if (r->slots[i].type == type) return r->slots[i].info;
    if (r->slots[i].type == NULL) return NULL;
  }
}

static int registry_add(registry *r, void *type, const tj_host_type *info) {
  if (2 * (r->count + 1) > r->capacity) {
    size_t capacity = r->capacity ? 2 * r->capacity : 64;
    registry_slot *slots = calloc(capacity, sizeof(*slots));
    if (slots == NULL) return tj_set_error(TJ_ENOMEM, "out of memory for the type registry");
    registry grown = {slots, capacity, 0, NULL, NULL, {0}};
    for (size_t i = 0; i < r->capacity; ++i)
      if (r->slots[i].type != NULL) registry_add(&grown, r->slots[i].type, r->slots[i].info);
    free(r->slots);
    r->slots = grown.slots;
    r->capacity = capacity;
  }
  size_t i = slot_of(r, type);
  while (r->slots[i].type != NULL) i = (i + 1) & (r->capacity - 1);
  r->slots[i].type = type;
  r->slots[i].info = info;
  r->count++;
  return TJ_OK;
}

/* Asks the binding how objects of `type` are read (tj_host.describe). */
static const tj_host_type *describe(const tj_host *h, void *type, int32_t exchange) {
  h->retain(type);
  void *items[2] = {type, h->int_new(exchange)};
  unsigned long long address = 0;
  if (call_for_u64(h, h->describe, 2, items, &address) != TJ_OK) return NULL;
  return (const tj_host_type *)(uintptr_t)address;
}

static void plain_of(const tj_host_type *info, plain_type *p) {
  memset(p, 0, sizeof(*p));
  p->block = -1;
  const tj_producer *producer = info->kind == TJ_HOST_TENSOR ? info->producer : NULL;
  if (producer == NULL || (producer->import != tj__exchange_import && producer->read == NULL) ||
      (producer->view_bits == NULL && producer->view != NULL))
    return;
  if (producer->import == tj__exchange_import) {
    p->view = producer->api->dltensor_from_py_object_no_sync;
  } else {
    p->read = producer->read;
    p->read_context = producer->read_context;
  }
  p->producer = producer;
  p->claim = producer->claim;
  const tj_claim *c = producer->claim;
  const tj_view_bits *bits = producer->view_bits;
  if (c != NULL && bits != NULL && tj__claim_reads_record(c) && c->offset == bits->block_offset) {
    p->block = bits->block_offset;
    p->meta = c->meta_offset;
    p->word = bits->word_offset;
    p->lazy = bits->conjugate | bits->negative;
  }
}

const tj_host_type *tj_host_type_of(const tj_host *h, void *type, int32_t exchange) {
  registry *r = &registries[exchange != 0];
  if (type == r->memo_type) return r->memo_info;
  const tj_host_type *info = registry_find(r, type);
  if (info == NULL) {
    if ((info = describe(h, type, exchange)) == NULL) return NULL;
    if (registry_add(r, type, info) != TJ_OK) {
      h->error_set(h->exceptions[-TJ_ENOMEM], tj_last_error());
      return NULL;
    }
  }
  r->memo_type = type;
  r->memo_info = info;
  plain_of(info, &r->memo_plain);
  return info;
}

/* ---- Classification: one host object into one tj_arg -------------------------- */

/* The object's exact type, borrowed (the object keeps it alive). */
static inline void *type_of(const tj_host *h, void *object) {
  if (h->type_offset >= 0) {
    void *type;
    memcpy(&type, (const char *)object + h->type_offset, sizeof(type));
    return type;
  }
  void *type = h->object_type(object);
  h->release(type);
  return type;
}

/* An int: int64, else the bits of a uint64, else (only a float parameter takes
 * it) its value as a double, ±inf beyond a double's range. */
static int read_int(const tj_host *h, void *object, tj_arg *arg) {
  int overflow = 0;
  long long value = h->int64_of(object, &overflow);
  if (value == -1 && !overflow && h->error_pending() != NULL) return TJ_EPYERR;
  arg->kind = TJ_ARG_INT;
  if (!overflow) {
    arg->value.i = value;
    return TJ_OK;
  }
  if (overflow > 0) {
    unsigned long long bits = h->uint64_of(object);
    if (bits != (unsigned long long)-1 || h->error_pending() == NULL) {
      arg->value.i = (int64_t)bits;
      arg->flags |= TJ_ARG_UNSIGNED;
      return TJ_OK;
    }
    h->error_clear();
  }
  double as_double = h->double_of(object);
  if (as_double == -1.0 && h->error_pending() != NULL) {
    h->error_clear(); /* OverflowError: beyond a double */
    as_double = overflow > 0 ? INFINITY : -INFINITY;
  }
  arg->flags |= TJ_ARG_OUT_OF_RANGE;
  arg->value.f = as_double;
  return TJ_OK;
}

/* A float that read as ±inf: flags it out of range when the object itself is
 * finite, a value beyond a double's range (numpy.longdouble's 1e4000), which
 * no float parameter can take; asked as `object == float("±inf")`, which is
 * false then. An object that cannot say is taken as the infinity it read as. */
TJ__COLD static int flag_finite_beyond_double(const tj_host *h, void *object, tj_arg *arg) {
  void *text = h->string_new(arg->value.f > 0 ? "inf" : "-inf");
  void *args = text != NULL ? h->tuple_new(1) : NULL;
  if (args == NULL || h->tuple_set(args, 0, text) != 0) {
    if (args == NULL && text != NULL) h->release(text);
    if (args != NULL) h->release(args);
    return TJ_EPYERR;
  }
  void *infinity = h->call(h->float_type, args); /* float("inf") */
  h->release(args);
  void *equal = infinity != NULL ? h->attribute(object, "__eq__") : NULL;
  void *compared = NULL;
  if (equal != NULL && (args = h->tuple_new(1)) != NULL) {
    h->retain(infinity);
    if (h->tuple_set(args, 0, infinity) == 0) compared = h->call(equal, args);
    h->release(args);
  }
  int truth = compared == NULL ? 1 : h->truth(compared);
  if (compared != NULL) h->release(compared);
  if (equal != NULL) h->release(equal);
  if (infinity != NULL) h->release(infinity);
  if (truth < 0 || h->error_pending() != NULL) {
    if (infinity == NULL) return TJ_EPYERR;
    h->error_clear(); /* no answer: the infinity it read as */
    return TJ_OK;
  }
  if (!truth) arg->flags |= TJ_ARG_OUT_OF_RANGE;
  return TJ_OK;
}

/* An integer attribute of `object` (a tilejit.Pointer's fields). */
static int int_attribute(const tj_host *h, void *object, const char *name, long long *out) {
  void *value = h->attribute(object, name);
  if (value == NULL) return TJ_EPYERR;
  int overflow = 0;
  *out = h->int64_of(value, &overflow);
  if (overflow) *out = (long long)h->uint64_of(value); /* an address of 2**63 or more */
  h->release(value);
  return h->error_pending() != NULL ? TJ_EPYERR : TJ_OK;
}

/* tilejit.Pointer: an address that knows what it points to. */
static int read_pointer(const tj_host *h, void *object, tj_arg *arg) {
  long long address = 0, device_type = 0, parts[3] = {0, 0, 0};
  int rc = int_attribute(h, object, "address", &address);
  if (rc == TJ_OK) rc = int_attribute(h, object, "dlpack_device_type", &device_type);
  void *dtype = rc == TJ_OK ? h->attribute(object, "dlpack_dtype") : NULL;
  if (dtype == NULL) return TJ_EPYERR;
  for (intptr_t i = 0; i < 3 && rc == TJ_OK; ++i) {
    void *item = h->sequence_item(dtype, i);
    int overflow = 0;
    if (item == NULL)
      rc = TJ_EPYERR;
    else
      parts[i] = h->int64_of(item, &overflow);
  }
  h->release(dtype);
  if (rc != TJ_OK || h->error_pending() != NULL) return TJ_EPYERR;
  arg->kind = TJ_ARG_ADDRESS;
  arg->value.p = (void *)(uintptr_t)address;
  arg->tensor.dtype.code = (uint8_t)parts[0];
  arg->tensor.dtype.bits = (uint8_t)parts[1];
  arg->tensor.dtype.lanes = (uint16_t)parts[2];
  arg->tensor.device.device_type = (DLDeviceType)device_type;
  return TJ_OK;
}

/* A type described as something other than a tensor. */
static int read_described(const tj_host *h, const tj_host_type *info, void *object, tj_arg *arg) {
  int rc = TJ_OK;
  switch (info->kind) {
    case TJ_HOST_POINTER: return read_pointer(h, object, arg);
    case TJ_HOST_BOOL: {
      int truth = h->truth(object);
      if (truth < 0) return TJ_EPYERR;
      arg->kind = TJ_ARG_BOOL;
      arg->value.i = truth;
      break;
    }
    case TJ_HOST_INDEX: {
      void *index = h->index_of(object);
      if (index == NULL) return TJ_EPYERR;
      rc = read_int(h, index, arg);
      h->release(index);
      break;
    }
    case TJ_HOST_FLOAT:
      arg->kind = TJ_ARG_FLOAT;
      arg->value.f = h->double_of(object);
      if (arg->value.f == -1.0 && h->error_pending() != NULL) return TJ_EPYERR;
      if (isinf(arg->value.f)) rc = flag_finite_beyond_double(h, object, arg);
      break;
    default: arg->kind = TJ_ARG_OTHER;
  }
  arg->type_name = info->name; /* messages name numpy.float32, not float */
  return rc;
}

/* An exact int of one digit, read in place where the host states its layout
 * (tj_host.int_layout): 1 and its value; 0 for any other (ask int64_of). */
static inline int compact_int(const tj_host *h, const void *object, int64_t *value) {
  if (h->int_layout != TJ_HOST_INT_SIZE && h->int_layout != TJ_HOST_INT_TAG) return 0;
  uintptr_t head;
  uint32_t digit;
  memcpy(&head, (const char *)object + h->int_head_offset, sizeof(head));
  if (h->int_layout == TJ_HOST_INT_SIZE ? head + 1 > 2 : head >= (2u << 3)) return 0;
  const int64_t sign =
      h->int_layout == TJ_HOST_INT_SIZE ? (int64_t)(intptr_t)head : 1 - (int64_t)(head & 3);
  *value = 0;
  if (sign == 0) return 1; /* zero: no digit need be there */
  memcpy(&digit, (const char *)object + h->int_digit_offset, sizeof(digit));
  *value = sign * (int64_t)digit;
  return 1;
}

/* One argument. Tensors are left as objects for tj_call_run to import. */
/* Inline: every argument of every call passes here (a bound launch's bind
 * shares it, which would otherwise make the compiler call it out of line). */
static inline __attribute__((always_inline)) int classify(const tj_host_plan *plan, void *object,
                                                          tj_arg *arg) {
  const tj_host *h = plan->host;
  void *type = type_of(h, object);
  const registry *r = &registries[plan->exchange != 0];
  if (type == r->memo_type && r->memo_info->kind == TJ_HOST_TENSOR) {
    tj_arg_object(arg, object, r->memo_info->producer);
    return TJ_OK;
  }
  memset(arg, 0, sizeof(*arg)); /* tj_arg_init, inline: every scalar passes here */
  if (object == h->none) return TJ_OK;
  if (type == h->bool_type) {
    arg->kind = TJ_ARG_BOOL;
    arg->value.i = object == h->true_object;
    return TJ_OK;
  }
  if (type == h->int_type) {
    if (compact_int(h, object, &arg->value.i)) {
      arg->kind = TJ_ARG_INT;
      return TJ_OK;
    }
    return read_int(h, object, arg);
  }
  if (type == h->float_type) {
    arg->kind = TJ_ARG_FLOAT;
    if (h->float_value_offset >= 0)
      memcpy(&arg->value.f, (const char *)object + h->float_value_offset, sizeof(double));
    else
      arg->value.f = h->double_of(object);
    return TJ_OK;
  }
  const tj_host_type *info = tj_host_type_of(h, type, plan->exchange);
  if (info == NULL) return TJ_EPYERR;
  if (info->kind == TJ_HOST_TENSOR) {
    tj_arg_object(arg, object, info->producer);
    return TJ_OK;
  }
  return read_described(h, info, object, arg);
}

/* ---- The repeated call: read, checked and packed in one pass ------------------- */

/* Reads one argument for the one-pass call (repeat_call): a tensor whose
 * producer imports it through the exchange API's view, or reads it in place
 * (tj_producer.read), with nothing to ask first (no claim, no lazy-view bit),
 * or an exact bool, int or float; 0 for anything else, which the full path
 * reads (an import's error is cleared: the full path imports again and
 * reports it). */
static inline __attribute__((always_inline)) int read_plain(const tj_host_plan *plan, void *object,
                                                            int buffer, tj_arg *arg) {
  const tj_host *h = plan->host;
  void *type = type_of(h, object);
  if (buffer) {
    const registry *r = &registries[plan->exchange != 0];
    plain_type other;
    const plain_type *p = &r->memo_plain;
    if (type != r->memo_type) { /* a call with tensors of several types */
      const tj_host_type *info = registry_find(r, type);
      if (info == NULL) return 0;
      plain_of(info, &other);
      p = &other;
    }
    if (p->view == NULL && p->read == NULL) return 0;
    if (p->block >= 0) { /* the autograd record and the lazy-view bits, one block */
      const char *block;
      memcpy(&block, (const char *)object + p->block, sizeof(block));
      uint64_t word;
      const void *meta;
      if (block == NULL) return 0;
      memcpy(&word, block + p->word, sizeof(word));
      memcpy(&meta, block + p->meta, sizeof(meta));
      if ((word & p->lazy) != 0 || (!plan->unclaimed && meta != NULL)) return 0;
    } else if ((!plan->unclaimed && p->claim != NULL &&
                !tj__no_autograd_record(p->claim, object)) ||
               tj__may_be_view(p->producer, object)) {
      return 0;
    }
    if (p->view == NULL) {
      if (p->read(p->read_context, object, &arg->tensor) != 0) return 0;
    } else if (p->view(object, &arg->tensor) != 0) {
      h->error_clear();
      return 0;
    }
    arg->kind = TJ_ARG_TENSOR;
    arg->flags = 0;
    arg->producer = p->producer;
    return 1;
  }
  arg->flags = 0;
  if (type == h->float_type && h->float_value_offset >= 0) {
    arg->kind = TJ_ARG_FLOAT;
    memcpy(&arg->value.f, (const char *)object + h->float_value_offset, sizeof(double));
    return 1;
  }
  if (type == h->int_type) {
    arg->kind = TJ_ARG_INT;
    return compact_int(h, object, &arg->value.i);
  }
  if (type == h->bool_type) {
    arg->kind = TJ_ARG_BOOL;
    arg->value.i = object == h->true_object;
    return 1;
  }
  return 0;
}

/* A kernel's repeated call with nothing to allocate, every argument read
 * plainly (read_plain): each read, checked against the memo's record and
 * packed as it comes, then launched. 1 and *rc when it ran (or its launch
 * failed); 0 when the call is not such a call, which the full path then runs
 * from the start. What tj_call_run does for it, in one pass. */
static inline __attribute__((always_inline)) int repeat_call(const tj_host_plan *plan,
                                                             void *const *args, tj_call *call,
                                                             const tj_call_binding *b, int *rc) {
  const tj_kernel *k = plan->kernel;
  const tj__memo *m = k->memo;
  tj__memo_reader rd;
  if (m == NULL || call->nargs != k->ninputs || !tj__memo_open(m, &rd)) return 0;
  tj__hit hit;
  for (int32_t j = 0; j < m->ninputs; ++j) {
    const memo_input *in = &m->inputs[j];
    tj_arg *arg = &call->args[in->position];
    if (!read_plain(plan, args[in->position], in->record >= 0 && in->ndim >= 0, arg) ||
        (!tj__memo_take(m, &rd, j, arg, &hit) && !tj__memo_switch(k, &rd, call->args, j, &hit)))
      return 0;
  }
  if (!tj__memo_close(m, &rd, &hit)) return 0;
  *rc = tj__call_hit(k, call, b, &hit);
  return 1;
}

/* ---- The __dlpack__ producer: tilejit's host functions over a host type ------- */

static int dlpack_import(const tj_producer *self, void *object, tj_arg *arg) {
  const tj_host *h = self->host;
  void *items[1] = {retained(h, object)};
  void *capsule = call_with(h, h->dlpack_capsule, 1, items);
  if (capsule == NULL) return TJ_EPYERR;
  int rc = tj_arg_from_capsule(arg, capsule, h);
  h->release(capsule);
  return rc;
}

static void *int_tuple(const tj_host *h, const int64_t *values, intptr_t n) {
  void *items[TJ_MAX_NDIM];
  for (intptr_t i = 0; i < n; ++i) items[i] = h->int_new(values[i]);
  return tuple_stealing(h, n, items);
}

/* An output the producer made, read as any argument is: in place where the
 * producer can, a view the caller's reference keeps valid. */
static int read_back(const tj_producer *self, void *tensor, tj_arg *out) {
  tj_arg_init(out);
  if (self->read != NULL && self->read(self->read_context, tensor, &out->tensor) == 0) {
    out->kind = TJ_ARG_TENSOR;
    return TJ_OK;
  }
  return dlpack_import(self, tensor, out);
}

/* An output allocated by the host (tj_host.allocate, the framework's allocator). */
static int framework_allocate(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                              void **object) {
  const tj_host *h = self->host;
  int64_t dtype[3] = {proto->dtype.code, proto->dtype.bits, proto->dtype.lanes};
  int64_t device[2] = {proto->device.device_type, proto->device.device_id};
  void *items[4] = {retained(h, self->context), int_tuple(h, proto->shape, proto->ndim),
                    int_tuple(h, dtype, 3), int_tuple(h, device, 2)};
  void *tensor = call_with(h, h->allocate, 4, items);
  *object = tensor; /* the caller owns it from here, whatever happens next */
  if (tensor == NULL) return TJ_EPYERR;
  return read_back(self, tensor, out);
}

/* The producer's allocate: made in place where the producer can (tj_producer.make),
 * else by the host's allocator. */
static int dlpack_allocate(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                           void **object) {
  int rc = self->make != NULL ? self->make(self->read_context, proto, object) : 1;
  if (rc == 1) return framework_allocate(self, proto, out, object);
  if (rc != TJ_OK) return rc;
  return read_back(self, *object, out);
}

static int dlpack_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                         void **stream) {
  const tj_host *h = self->host;
  void *items[3] = {retained(h, self->context), h->int_new(device_type), h->int_new(device_id)};
  unsigned long long handle = 0;
  int rc = call_for_u64(h, h->framework_stream, 3, items, &handle);
  *stream = (void *)(uintptr_t)handle;
  return rc;
}

/* The view bits asked of the framework (slow: a call into the host per tensor),
 * for a framework whose bits cannot be read in place. */
static int ask_view(const tj_producer *self, void *object, uint32_t *view) {
  const tj_host *h = self->host;
  void *items[1] = {retained(h, object)};
  unsigned long long bits = 0;
  int rc = call_for_u64(h, h->lazy_view, 1, items, &bits);
  *view = (uint32_t)bits;
  return rc;
}

void tj_host_dlpack_producer(tj_producer *producer, const tj_host *host, void *type) {
  memset(producer, 0, sizeof(*producer));
  producer->import = dlpack_import;
  producer->allocate = dlpack_allocate;
  producer->current_stream = dlpack_stream;
  producer->type = type;
  producer->context = type;
  producer->host = host;
}

void tj_host_ask_view(tj_producer *producer) { producer->view = ask_view; }

/* ---- Claims asked through the host ---------------------------------------------- */

/* Whether `mode`'s scope holds its idle object at its key (no answer: not). */
static int mode_idle(const tj_host_claim_mode *mode) {
  const tj_host *h = mode->host;
  void *value = h->dict_item(mode->scope, mode->key);
  if (value == NULL && h->error_pending() != NULL) h->error_clear();
  return value == mode->idle;
}

int tj_host_claim_active(const tj_claim *claim) {
  return !mode_idle(claim->context); /* no answer: ask */
}

int tj_host_claim_ask(const tj_claim *claim, void *object, int32_t failed) {
  const tj_host_claim_mode *mode = claim->context;
  const tj_host *h = mode->host;
  /* After a failed import its error is pending: kept unless the call is claimed. */
  void *type = NULL, *value = NULL, *traceback = NULL;
  if (failed) h->error_fetch(&type, &value, &traceback);
  void *items[2] = {retained(h, object), h->int_new(failed)};
  unsigned long long kind = 0;
  int rc = call_for_u64(h, h->claims, 2, items, &kind);
  if (!failed) return rc != TJ_OK ? rc : (int)kind;
  if (rc != TJ_OK) h->error_clear(); /* the import's own error says more */
  if (rc == TJ_OK && kind != TJ_CLAIM_NONE) {
    if (type != NULL) h->release(type);
    if (value != NULL) h->release(value);
    if (traceback != NULL) h->release(traceback);
    return (int)kind;
  }
  if (type != NULL) h->error_restore(type, value, traceback);
  return TJ_CLAIM_NONE;
}

/* ---- The result or the exception ---------------------------------------------- */

/* Raises the exception of a failed call and returns NULL. */
static void *raise_failure(const tj_host_plan *plan, int rc, void *const *args, intptr_t nargs) {
  const tj_host *h = plan->host;
  const tj_error_info *info = tj_last_error_info();
  if (rc != TJ_EPYERR) {
    int index = -rc;
    void *cls = index > 0 && index < TJ_HOST_NUM_STATUS ? h->exceptions[index] : NULL;
    h->error_set(cls != NULL ? cls : h->exceptions[-TJ_ERUNTIME], tj_last_error());
    return NULL;
  }
  if (info->producer == TJ_PRODUCER_NONE) return NULL; /* the host's error as it is */
  /* A producer failed: its exception becomes the cause of one that says where. */
  int32_t step = info->producer, argument = info->argument;
  void *type = NULL, *value = NULL, *traceback = NULL;
  h->error_fetch(&type, &value, &traceback);
  h->error_normalize(&type, &value, &traceback);
  if (value == NULL) { /* nothing was pending after all: the core's message alone */
    h->error_set(h->exceptions[-TJ_ERUNTIME], tj_last_error());
    return NULL;
  }
  void *object = argument >= 0 && argument < nargs ? args[argument] : h->none;
  void *items[4] = {h->string_new(tj_last_error()), h->int_new(step), retained(h, value),
                    retained(h, object)};
  void *exception = call_with(h, h->producer_error, 4, items);
  if (exception != NULL) {
    void *cls = h->object_type(exception);
    h->exception_set_cause(exception, value); /* steals value */
    value = NULL;
    h->error_set_object(cls, exception);
    h->release(cls);
    h->release(exception);
  }
  if (type != NULL) h->release(type);
  if (value != NULL) h->release(value);
  if (traceback != NULL) h->release(traceback);
  return NULL;
}

/* The outputs as one new reference: None, the output, or a list in the plan's
 * order. Takes the references in `made`. */
static void *result_of(const tj_host_plan *plan, void **made) {
  const tj_host *h = plan->host;
  int32_t n = plan->kernel->noutputs;
  if (n == 0) return retained(h, h->none);
  if (n == 1) return made[0];
  void *list = h->list_new(n);
  for (int32_t j = 0; j < n; ++j) {
    int32_t o = plan->out_order != NULL ? plan->out_order[j] : j;
    if (list != NULL && h->list_set(list, j, made[o]) == 0) made[o] = NULL;
  }
  for (int32_t o = 0; o < n; ++o)
    if (made[o] != NULL) h->release(made[o]);
  return list;
}

/* A host tuple of `n` borrowed objects (new). */
static void *tuple_of(const tj_host *h, void *const *items, intptr_t n) {
  void *tuple = h->tuple_new(n);
  for (intptr_t i = 0; tuple != NULL && i < n; ++i) {
    h->retain(items[i]);
    h->tuple_set(tuple, i, items[i]);
  }
  return tuple;
}

/* Hands the call to one of the kernel object's functions (plan->keywords or
 * plan->claimed): fn(kernel, a, b). */
static void *hand_over(const tj_host_plan *plan, void *fn, void *a, void *b) {
  const tj_host *h = plan->host;
  void *items[3] = {retained(h, plan->kernel_object), a, b};
  return call_with(h, fn, 3, items);
}

/* 1 when the host answers `fn(item)` (or `fn()`, item NULL) with a true object;
 * 0 when false; -1 (its exception cleared) when it cannot answer. */
static int asks_true(const tj_host *h, void *fn, void *item) {
  void *items[1] = {item != NULL ? retained(h, item) : NULL};
  void *answer = call_with(h, fn, item != NULL ? 1 : 0, items);
  int truth = answer != NULL ? h->truth(answer) : -1;
  if (answer != NULL) h->release(answer);
  if (truth < 0) h->error_clear();
  return truth;
}

/* Whether plan->record takes a call claimed at once (tj_host_plan.record). */
static int recordable(const tj_host_plan *plan, void *const *args, intptr_t n) {
  const tj_host *h = plan->host;
  int (*plain)(const void *, const void *) = plan->record_plain;
  const void *context = plan->record_plain_context;
  if (plan->record == NULL || n != plan->kernel->ninputs) return 0;
  if (plain == NULL || plain(context, NULL) != 1)
    for (int i = 0; i < 2; ++i)
      if (plan->record_off[i] != NULL && asks_true(h, plan->record_off[i], NULL) != 0) return 0;
  if (plan->record_mode != NULL && !mode_idle(plan->record_mode)) return 0;
  for (intptr_t i = 0; i < n; ++i) {
    if (args[i] == h->none) continue;
    void *type = type_of(h, args[i]);
    if (type == NULL || (type != plan->record_types[0] && type != plan->record_types[1])) return 0;
    if (plan->record_wrapped != NULL && (plain == NULL || plain(context, args[i]) != 1) &&
        asks_true(h, plan->record_wrapped, args[i]) != 0)
      return 0;
  }
  return 1;
}

/* A call claimed at once, recorded by plan->record: its result, a tuple (of
 * several outputs) as a list. */
static void *record_call(const tj_host_plan *plan, void *const *args, intptr_t n) {
  const tj_host *h = plan->host;
  void *items[TJ_MAX_PARAMS];
  for (intptr_t i = 0; i < n; ++i) items[i] = retained(h, args[i]);
  void *result = call_with(h, plan->record, n, items);
  if (result == NULL || plan->kernel->noutputs < 2) return result;
  intptr_t count = h->sequence_size(result);
  void *list = count >= 0 ? h->list_new(count) : NULL;
  for (intptr_t j = 0; list != NULL && j < count; ++j) {
    void *item = h->sequence_item(result, j); /* borrowed */
    if (item == NULL || h->list_set(list, j, retained(h, item)) != 0) {
      h->release(list);
      list = NULL;
    }
  }
  h->release(result);
  return list;
}

/* ---- The call ------------------------------------------------------------------- */

/* 1 and the handle when `stream` is a non-negative int, which needs no asking. */
static int plain_stream(const tj_host *h, void *stream, void **out) {
  if (type_of(h, stream) != h->int_type) return 0;
  int overflow = 0;
  long long value = h->int64_of(stream, &overflow);
  if (overflow || value < 0) return 0; /* asked of the host, refused with the kernel's name */
  *out = (void *)(uintptr_t)value;
  return 1;
}

/* The handle of a stream= value: a non-negative int as it is; anything else as
 * tj_host.stream_handle reads it (or refuses it, naming the kernel). */
static int stream_handle(const tj_host_plan *plan, void *stream, void **out) {
  const tj_host *h = plan->host;
  if (plain_stream(h, stream, out)) return TJ_OK;
  void *items[2] = {retained(h, stream), retained(h, plan->name)};
  unsigned long long handle = 0;
  int rc = call_for_u64(h, h->stream_handle, 2, items, &handle);
  *out = (void *)(uintptr_t)handle;
  return rc;
}

/* A scalar whose conversion raised: the host's exception, with the kernel and
 * the argument, its cause the original (raise_failure). */
static void *conversion_failed(const tj_host_plan *plan, void *const *args, int32_t position) {
  const tj_kernel *k = plan->kernel;
  const char *name = "?";
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].output < 0 && k->params[i].position == position) name = k->params[i].name;
  const tj_host_type *info =
      registry_find(&registries[plan->exchange != 0], type_of(plan->host, args[position]));
  if (info == NULL) return NULL; /* the type could not be described: that error as it is */
  tj_set_error(TJ_EPYERR, "%s: argument %d '%s': cannot convert the %s", k->name, position, name,
               info->name != NULL ? info->name : "object");
  tj_error_at(TJ_EPYERR, position, -1, TJ_PRODUCER_CONVERT);
  return raise_failure(plan, TJ_EPYERR, args, position + 1);
}

#define VECTORCALL_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))

/* The host of tj_host_method and the bound launches' entries
 * (tj_host_method_install). */
static const tj_host *method_host;

void *tj_host_call(const tj_host_plan *plan, void *const *args, size_t nargsf, void *kwnames) {
  const tj_host *h = plan->host;
  size_t count = nargsf & ~VECTORCALL_OFFSET;
  void *stream = NULL;
  if (kwnames != NULL) {
    intptr_t nk = h->sequence_size(kwnames);
    if (nk == 1 && !plan->stream_is_input &&
        h->string_compare(h->sequence_item(kwnames, 0), "stream") == 0) {
      stream = args[count];
    } else if (nk > 0) { /* inputs by name: the kernel object maps them */
      return hand_over(plan, plan->keywords, tuple_of(h, args, (intptr_t)count + nk),
                       retained(h, kwnames));
    }
  }
  tj_arg argv[TJ_MAX_PARAMS];
  void *made[TJ_MAX_OUTPUTS];
  tj_call call = {argv, count < 0x7fffffff ? (int32_t)count : 0x7fffffff, 0, NULL, made};
  const tj_kernel *k = plan->kernel;
  if (stream == h->none) stream = NULL;
  const tj_call_binding binding = {plan->fallback, h, plan->unclaimed,
                                   plan->claim_at_once && stream == NULL};
  if (stream != NULL) call.has_stream = plain_stream(h, stream, &call.stream);
  int rc;
  if ((stream == NULL || call.has_stream) && repeat_call(plan, args, &call, &binding, &rc)) {
    if (rc == TJ_OK) return retained(h, h->none); /* it allocated nothing: no outputs */
    return raise_failure(plan, rc, args, (intptr_t)count);
  }
  if (count <= (size_t)k->ninputs) { /* else the core reports the count, reading none */
    for (int32_t i = 0; i < call.nargs; ++i)
      if (classify(plan, args[i], &argv[i]) != TJ_OK) return conversion_failed(plan, args, i);
  }
  if (stream != NULL && !call.has_stream) {
    if (stream_handle(plan, stream, &call.stream) != TJ_OK) return NULL;
    call.has_stream = 1;
  }
  rc = tj_call_run_binding(k, &call, &binding);
  if (rc == TJ_OK) return result_of(plan, made);
  for (int32_t o = 0; o < k->noutputs; ++o)
    if (made[o] != NULL) h->release(made[o]);
  if (rc == TJ_ECLAIMED) { /* the framework runs it */
    if (binding.claim_at_once && recordable(plan, args, (intptr_t)count))
      return record_call(plan, args, (intptr_t)count);
    return hand_over(plan, plan->claimed, tuple_of(h, args, (intptr_t)count),
                     retained(h, stream != NULL ? stream : h->none));
  }
  return raise_failure(plan, rc, args, (intptr_t)count);
}

void tj_host_method_install(const tj_host *host) {
  __atomic_store_n(&method_host, host, __ATOMIC_RELEASE);
}

void *tj_host_method(void *self, void *const *args, intptr_t nargs, void *kwnames) {
  const tj_host *host = __atomic_load_n(&method_host, __ATOMIC_ACQUIRE);
  const tj_host_plan *plan = host->capsule_pointer(self, TJ_HOST_PLAN_CAPSULE);
  if (plan == NULL) return NULL; /* the capsule's error is pending */
  return tj_host_call(plan, args, (size_t)nargs, kwnames);
}

/* ---- Bound launches --------------------------------------------------------------- */

/* A bound launch as the host holds it: the plan it was bound through, the
 * core's bound launch, and the objects it reads (retained: imported views
 * borrow their tensors' shapes), its outputs (borrowed from the bound launch)
 * and the kernel object (retained: it owns the plan). */
typedef struct {
  const tj_host_plan *plan;
  tj_bound *bound;
  int32_t nargs;
  void *held[TJ_MAX_PARAMS];
  void *outputs[TJ_MAX_OUTPUTS];
} host_bound;

static void host_bound_free(host_bound *hb) {
  const tj_host *h = hb->plan->host;
  tj_bound_free(hb->bound);
  for (int32_t i = 0; i < hb->nargs; ++i)
    if (hb->held[i] != NULL) h->release(hb->held[i]);
  h->release(hb->plan->kernel_object);
  free(hb);
}

/* The bound launch's result: its outputs as a call returns them (new). */
static void *bound_result(const host_bound *hb) {
  const tj_host *h = hb->plan->host;
  void *made[TJ_MAX_OUTPUTS];
  for (int32_t o = 0; o < hb->plan->kernel->noutputs; ++o) made[o] = retained(h, hb->outputs[o]);
  return result_of(hb->plan, made);
}

void *tj_host_bind_method(void *self, void *const *args, intptr_t nargs, void *kwnames) {
  const tj_host *host = __atomic_load_n(&method_host, __ATOMIC_ACQUIRE);
  const tj_host_plan *plan = host->capsule_pointer(self, TJ_HOST_PLAN_CAPSULE);
  if (plan == NULL) return NULL;
  const tj_host *h = plan->host;
  const tj_kernel *k = plan->kernel;
  if (kwnames != NULL && h->sequence_size(kwnames) > 0) {
    h->error_set(h->exceptions[-TJ_ETYPE], "bind takes the arguments by position");
    return NULL;
  }
  tj_arg argv[TJ_MAX_PARAMS];
  void *made[TJ_MAX_OUTPUTS];
  int32_t count = nargs < 0x7fffffff ? (int32_t)nargs : 0x7fffffff;
  tj_call call = {argv, count, 0, NULL, made};
  if (count <= k->ninputs) {
    for (int32_t i = 0; i < count; ++i)
      if (classify(plan, args[i], &argv[i]) != TJ_OK) return conversion_failed(plan, args, i);
  } else {
    call.nargs = count; /* the core reports the count, reading none */
  }
  const tj_call_binding binding = {plan->fallback, h, plan->unclaimed, 0};
  host_bound *hb = calloc(1, sizeof(*hb));
  if (hb == NULL) {
    h->error_set(h->exceptions[-TJ_ENOMEM], "out of memory for a bound launch");
    return NULL;
  }
  int rc = tj_bound_create_binding(k, &call, &binding, &hb->bound);
  if (rc != TJ_OK) {
    free(hb);
    return raise_failure(plan, rc, args, nargs);
  }
  hb->plan = plan;
  h->retain(plan->kernel_object);
  /* Trailing optional buffers left out are held as None: update() names them. */
  hb->nargs = k->ninputs;
  for (int32_t i = 0; i < k->ninputs; ++i) hb->held[i] = retained(h, i < count ? args[i] : h->none);
  for (int32_t o = 0; o < k->noutputs; ++o) hb->outputs[o] = made[o];
  void *result = bound_result(hb);
  void *items[2] = {h->int_new((long long)(uintptr_t)hb), result};
  void *answer = tuple_stealing(h, 2, items);
  if (answer == NULL) host_bound_free(hb);
  return answer;
}

/* ---- Bound launch objects ------------------------------------------------ */

/* Where an object of the binding's bound launch type keeps its fields
 * (tj_host_bound_layout): the size of the host's object header. */
static intptr_t bound_header = -1;

void tj_host_bound_layout(intptr_t header) {
  __atomic_store_n(&bound_header, header, __ATOMIC_RELEASE);
}

static tj_host_bound_fields *fields_of(void *object) {
  return (tj_host_bound_fields *)(void *)((char *)object + bound_header);
}

int tj_host_bound_attach(void *object, intptr_t address, void *kernel, void *outputs,
                         void *inputs) {
  const tj_host *host = __atomic_load_n(&method_host, __ATOMIC_ACQUIRE);
  if (host == NULL || bound_header < 0 || object == NULL || address == 0) return TJ_EVALUE;
  tj_host_bound_fields *f = fields_of(object);
  if (f->bound != NULL) return TJ_EVALUE; /* attached once */
  f->kernel = retained(host, kernel);
  f->outputs = retained(host, outputs);
  f->inputs = retained(host, inputs);
  f->bound = (void *)address;
  f->vectorcall = (void *)tj_host_bound_vectorcall;
  return TJ_OK;
}

void tj_host_bound_finalize(void *object) {
  const tj_host *host = __atomic_load_n(&method_host, __ATOMIC_ACQUIRE);
  if (host == NULL) return; /* nothing was ever attached */
  tj_host_bound_fields *f = fields_of(object);
  void *held[3] = {f->kernel, f->outputs, f->inputs};
  host_bound *hb = f->bound;
  f->vectorcall = NULL, f->bound = NULL, f->kernel = NULL, f->outputs = NULL, f->inputs = NULL;
  if (hb == NULL && held[0] == NULL && held[1] == NULL && held[2] == NULL) return;
  /* Releasing runs a producer's host code, which must neither see nor clear an
   * exception that is propagating (a frame holding the handle unwinds). */
  void *type = NULL, *value = NULL, *traceback = NULL;
  host->error_fetch(&type, &value, &traceback);
  if (hb != NULL) host_bound_free(hb);
  for (int i = 0; i < 3; ++i)
    if (held[i] != NULL) host->release(held[i]);
  host->error_restore(type, value, traceback);
}

int tj_host_bound_traverse(void *object, int (*visit)(void *, void *), void *arg) {
  tj_host_bound_fields *f = fields_of(object);
  void *held[3] = {f->kernel, f->outputs, f->inputs};
  for (int i = 0; i < 3; ++i) {
    int rc = held[i] != NULL ? visit(held[i], arg) : 0;
    if (rc) return rc;
  }
  return 0;
}

/* The bound launch of a bound launch object; NULL with TypeError raised when
 * it has none (made by the type, never bound, or finalized). */
static host_bound *bound_of(void *self) {
  host_bound *hb = self != NULL && bound_header >= 0 ? fields_of(self)->bound : NULL;
  if (hb == NULL) {
    const tj_host *host = __atomic_load_n(&method_host, __ATOMIC_ACQUIRE);
    host->error_set(host->exceptions[-TJ_ETYPE],
                    "this bound launch holds no launch (it was "
                    "released, or never bound: use kernel.bind)");
  }
  return hb;
}

void *tj_host_bound_vectorcall(void *self, void *const *args, size_t nargsf, void *kwnames) {
  host_bound *hb = bound_of(self);
  if (hb == NULL) return NULL;
  const tj_host_plan *plan = hb->plan;
  const tj_host *h = plan->host;
  size_t nargs = nargsf & ~VECTORCALL_OFFSET;
  intptr_t nk = kwnames != NULL ? h->sequence_size(kwnames) : 0;
  void *stream = NULL;
  int32_t has_stream = 0;
  if (nk == 0 && nargs == 0) {
    int rc = tj_bound_launch(hb->bound, 0, NULL);
    if (rc != TJ_OK) return raise_failure(plan, rc, hb->held, hb->nargs);
    return bound_result(hb);
  }
  if (nargs != 0 || nk > 1 ||
      (nk == 1 && h->string_compare(h->sequence_item(kwnames, 0), "stream") != 0)) {
    tj_set_error(TJ_ETYPE,
                 "%s: a bound launch takes only stream= (its arguments were bound; update() "
                 "swaps a tensor)",
                 plan->kernel->name);
    h->error_set(h->exceptions[-TJ_ETYPE], tj_last_error());
    return NULL;
  }
  if (args[0] != h->none) {
    if (stream_handle(plan, args[0], &stream) != TJ_OK) return NULL;
    has_stream = 1;
  }
  int rc = tj_bound_launch(hb->bound, has_stream, stream);
  if (rc != TJ_OK) return raise_failure(plan, rc, hb->held, hb->nargs);
  return bound_result(hb);
}

void *tj_host_bound_update_method(void *self, void *const *args, intptr_t nargs, void *kwnames) {
  host_bound *hb = bound_of(self);
  if (hb == NULL) return NULL;
  const tj_host_plan *plan = hb->plan;
  const tj_host *h = plan->host;
  int overflow = 0;
  long long position = nargs == 2 && kwnames == NULL ? h->int64_of(args[0], &overflow) : -1;
  if (position == -1 && h->error_pending() != NULL) return NULL;
  if (position < 0 || position >= hb->nargs || overflow) {
    tj_set_error(TJ_EVALUE, "%s: no argument %lld to update (the kernel takes %d)",
                 plan->kernel->name, position, hb->nargs);
    h->error_set(h->exceptions[-TJ_EVALUE], tj_last_error());
    return NULL;
  }
  void *object = args[1];
  void *seen[TJ_MAX_PARAMS];
  for (int32_t i = 0; i < hb->nargs; ++i) seen[i] = hb->held[i];
  seen[position] = object;
  tj_arg arg;
  if (classify(plan, object, &arg) != TJ_OK)
    return conversion_failed(plan, seen, (int32_t)position);
  int rc = tj_bound_update(hb->bound, (int32_t)position, &arg);
  if (rc != TJ_OK) return raise_failure(plan, rc, seen, hb->nargs);
  h->release(hb->held[position]);
  hb->held[position] = retained(h, object);
  return retained(h, h->none);
}
