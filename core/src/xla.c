/*
 * Kernels as XLA FFI custom calls (tilejit/xla.h): the registry of kernels by
 * key, the handler XLA calls, and the check a framework makes at trace time,
 * which reads a call frame exactly as the handler does (read_inputs).
 */
#include "tilejit/xla.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- The registry ----------------------------------------------------------------- */

typedef struct {
  char key[128];
  size_t length;
  const tj_kernel *kernel; /* replaced atomically: a key registered again */
  int32_t device_type;
} xla_entry;

static xla_entry entries[TJ_XLA_MAX_KERNELS];
static int32_t nentries; /* published with release ordering, once the entry is written */
static pthread_mutex_t entries_lock = PTHREAD_MUTEX_INITIALIZER;

static const xla_entry *find(const char *key, size_t length) {
  int32_t n = __atomic_load_n(&nentries, __ATOMIC_ACQUIRE);
  for (int32_t i = 0; i < n; ++i)
    if (entries[i].length == length && memcmp(entries[i].key, key, length) == 0) return &entries[i];
  return NULL;
}

int tj_xla_register(const char *key, const tj_kernel *kernel, int32_t device_type) {
  TJ__REFUSE_NULL("tj_xla_register", key);
  TJ__REFUSE_NULL("tj_xla_register", kernel);
  size_t length = strlen(key);
  if (length == 0 || length >= sizeof(entries[0].key))
    return tj_set_error(TJ_EVALUE, "tj_xla_register: a key of 1 to %zu bytes, got %zu",
                        sizeof(entries[0].key) - 1, length);
  int rc = TJ_OK;
  pthread_mutex_lock(&entries_lock);
  xla_entry *entry = (xla_entry *)find(key, length);
  if (entry != NULL) {
    entry->device_type = device_type;
    __atomic_store_n(&entry->kernel, kernel, __ATOMIC_RELEASE);
  } else if (nentries == TJ_XLA_MAX_KERNELS) {
    rc = tj_set_error(TJ_ERUNTIME, "tj_xla_register: all %d kernels are registered",
                      TJ_XLA_MAX_KERNELS);
  } else {
    entry = &entries[nentries];
    memcpy(entry->key, key, length + 1);
    entry->length = length;
    entry->kernel = kernel;
    entry->device_type = device_type;
    __atomic_store_n(&nentries, nentries + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&entries_lock);
  return rc;
}

/* ---- Reading a call frame ----------------------------------------------------------- */

enum { ATTR_SCALAR = 3, ATTR_STRING = 4, STAGE_EXECUTE = 3, EXTENSION_METADATA = 1 };

/* XLA's PrimitiveType as DLPack's dtype (core.h's TJ_DTYPES); bits 0: not one
 * a kernel takes. */
static DLDataType dtype_of(int32_t xla) {
  static const struct {
    int32_t xla;
    DLDataType dtype;
  } rows[] = {
#define TJ__XLA_ROW(name, code, bits, lanes, family, cute, tma, xla, torch) \
  {xla, {code, bits, lanes}},
      TJ_DTYPES(TJ__XLA_ROW)
#undef TJ__XLA_ROW
  };
  for (size_t i = 0; xla != 0 && i < sizeof(rows) / sizeof(rows[0]); ++i)
    if (rows[i].xla == xla) return rows[i].dtype;
  return (DLDataType){0, 0, 0};
}

static bool named(const tj_xla_byte_span *name, const char *text, size_t length) {
  return name->len == length && memcmp(name->ptr, text, length) == 0;
}

/* The attribute `text` of the given type, or NULL. */
static void *attribute(const tj_xla_attrs *attrs, const char *text, int32_t type) {
  size_t length = strlen(text);
  for (int64_t i = 0; i < attrs->size; ++i)
    if (attrs->types[i] == type && named(attrs->names[i], text, length)) return attrs->attrs[i];
  return NULL;
}

/* A float16 (`bfloat`: a bfloat16) as the float32 of the same value, exactly. */
static float float_of_16_bits(uint16_t h, bool bfloat) {
  uint32_t bits;
  if (bfloat) {
    bits = (uint32_t)h << 16;
  } else {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) { /* zero or subnormal: mantissa * 2**-24 */
      float magnitude = (float)mantissa * 5.9604644775390625e-08f;
      return sign ? -magnitude : magnitude;
    }
    bits = sign | (exponent == 0x1f ? 0x7f800000u | mantissa << 13
                                    : (exponent + 112) << 23 | mantissa << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* A scalar of XLA type `dtype` at `value` as the core's argument. */
static int read_scalar(int32_t dtype, const void *value, tj_arg *arg) {
  DLDataType d = dtype_of(dtype);
  if (d.bits == 0 || d.code == kDLComplex)
    return tj_set_error(TJ_ETYPE, "a scalar of XLA element type %d", (int)dtype);
  if (d.code == kDLBool) {
    arg->kind = TJ_ARG_BOOL;
    arg->value.i = *(const uint8_t *)value != 0;
  } else if (d.code == kDLFloat || d.code == kDLBfloat) {
    arg->kind = TJ_ARG_FLOAT;
    if (d.bits == 64) {
      memcpy(&arg->value.f, value, 8);
    } else if (d.bits == 32) {
      float f;
      memcpy(&f, value, 4);
      arg->value.f = f;
    } else { /* float16 or bfloat16: as a NumPy float16 scalar is taken */
      uint16_t h;
      memcpy(&h, value, 2);
      arg->value.f = float_of_16_bits(h, d.code == kDLBfloat);
    }
  } else {
    arg->kind = TJ_ARG_INT;
    int64_t v = 0;
    if (d.code == kDLInt) {
      if (d.bits == 8) v = *(const int8_t *)value;
      if (d.bits == 16) v = *(const int16_t *)value;
      if (d.bits == 32) v = *(const int32_t *)value;
      if (d.bits == 64) memcpy(&v, value, 8);
    } else {
      uint64_t u = 0;
      if (d.bits == 8) u = *(const uint8_t *)value;
      if (d.bits == 16) u = *(const uint16_t *)value;
      if (d.bits == 32) u = *(const uint32_t *)value;
      if (d.bits == 64) memcpy(&u, value, 8);
      if (u > (uint64_t)INT64_MAX) arg->flags |= TJ_ARG_UNSIGNED;
      memcpy(&v, &u, 8);
    }
    arg->value.i = v;
  }
  return TJ_OK;
}

/* One XLA buffer as a tensor on `device`. */
static int read_buffer(const tj_xla_buffer *buffer, DLDevice device, DLTensor *tensor,
                       tj_arg *arg) {
  DLDataType d = dtype_of(buffer->dtype);
  if (d.bits == 0)
    return tj_set_error(TJ_ETYPE, "XLA element type %d has no DLPack type", (int)buffer->dtype);
  if (buffer->rank < 0 || buffer->rank > TJ_MAX_NDIM)
    return tj_set_error(TJ_EVALUE, "rank %lld (at most %d)", (long long)buffer->rank, TJ_MAX_NDIM);
  *tensor = (DLTensor){buffer->data, device, (int32_t)buffer->rank, d, buffer->dims, NULL, 0};
  tj_arg_from_dltensor(arg, tensor, 0);
  return TJ_OK;
}

/* What a call frame holds, read once for the handler and for tj_xla_bind. */
typedef struct {
  const xla_entry *entry;
  const tj_kernel *kernel;
  int32_t ninputs;
  tj_arg args[TJ_MAX_PARAMS];
  DLTensor tensors[TJ_MAX_PARAMS];
  int32_t written[TJ_MAX_PARAMS]; /* the inputs the kernel writes ('w'), in order */
  /* What the 'o' inputs are, as the framework described them ("str", "a tensor of
   * shape (3,) and dtype float32"), one after the other, each cut to what is left. */
  char others[1024];
  size_t others_used;
  int32_t nwritten;
} xla_call;

static const char *input_name(const tj_kernel *k, int32_t position) {
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].output < 0 && k->params[i].position == position) return k->params[i].name;
  return "?";
}

/* The attribute "tj_<i>" of the given type, or NULL (names compared without
 * formatting one: this runs for every call). */
static void *input_attribute(const tj_xla_attrs *attrs, int32_t i, int32_t type) {
  for (int64_t a = 0; a < attrs->size; ++a) {
    const tj_xla_byte_span *name = attrs->names[a];
    if (attrs->types[a] != type || name->len < 4 || memcmp(name->ptr, "tj_", 3) != 0) continue;
    int64_t value = 0;
    size_t d = 3;
    for (; d < name->len && d < 12 && name->ptr[d] >= '0' && name->ptr[d] <= '9'; ++d)
      value = value * 10 + (name->ptr[d] - '0');
    if (d == name->len && value == i) return attrs->attrs[a];
  }
  return NULL;
}

/* Input i of kind `kind` (tilejit/xla.h) into call->args[i]; a message without
 * the argument's name, which the caller puts before it. */
static int read_input(const tj_xla_call_frame *frame, DLDevice device, xla_call *call, int32_t i,
                      char kind, int64_t *operand) {
  const tj_xla_attrs *attrs = &frame->attrs;
  tj_arg *arg = &call->args[i];
  if (kind == 'n') return TJ_OK;
  if (kind == 'a') {
    const tj_xla_scalar *scalar = input_attribute(attrs, i, ATTR_SCALAR);
    if (scalar == NULL) return tj_set_error(TJ_EVALUE, "no attribute tj_%d", i);
    return read_scalar(scalar->dtype, scalar->value, arg);
  }
  if (kind == 'o') { /* refused by the core, naming the type (trace time only) */
    const tj_xla_byte_span *type = input_attribute(attrs, i, ATTR_STRING);
    char *text = call->others + call->others_used;
    size_t left = sizeof(call->others) - call->others_used;
    size_t length = type != NULL ? type->len : 0;
    if (left == 0) return tj_set_error(TJ_EVALUE, "too many unsupported objects");
    if (length >= left) length = left - 1;
    if (length > 0) memcpy(text, type->ptr, length);
    text[length] = '\0';
    call->others_used += length + 1;
    arg->kind = TJ_ARG_OTHER;
    arg->type_name = text;
    return TJ_OK;
  }
  if (*operand >= frame->args.size || frame->args.types[*operand] != 1)
    return tj_set_error(TJ_EVALUE, "the call has %lld buffer operands",
                        (long long)frame->args.size);
  const tj_xla_buffer *buffer = frame->args.items[(*operand)++];
  if (kind == 's') {
    if (buffer->rank != 0)
      return tj_set_error(TJ_EVALUE, "a scalar's operand must have rank 0, got %lld",
                          (long long)buffer->rank);
    if (device.device_type != kDLCPU)
      return tj_set_error(TJ_EVALUE,
                          "a scalar traced on %s cannot be read by the host; give "
                          "a Python number",
                          tj_device_name(device.device_type));
    return read_scalar(buffer->dtype, buffer->data, arg);
  }
  if (kind == 'w') call->written[call->nwritten++] = i;
  if (kind == 'b' || kind == 'w') return read_buffer(buffer, device, &call->tensors[i], arg);
  return tj_set_error(TJ_EVALUE, "unknown input kind '%c'", kind);
}

static int read_inputs(const tj_xla_call_frame *frame, DLDevice device, xla_call *call) {
  const tj_xla_attrs *attrs = &frame->attrs;
  const tj_xla_byte_span *key = attribute(attrs, "tilejit", ATTR_STRING);
  const tj_xla_byte_span *layout = attribute(attrs, "tilejit_inputs", ATTR_STRING);
  if (key == NULL || layout == NULL)
    return tj_set_error(TJ_EVALUE,
                        "tilejit: an XLA custom call without the attributes "
                        "'tilejit' and 'tilejit_inputs'");
  call->entry = find(key->ptr, key->len);
  if (call->entry == NULL)
    return tj_set_error(TJ_ERUNTIME,
                        "tilejit: no kernel is registered under '%.*s' in this "
                        "process (tilejit.load the export that defines it first)",
                        (int)(key->len < 128 ? key->len : 128), key->ptr);
  const tj_kernel *k = __atomic_load_n(&call->entry->kernel, __ATOMIC_ACQUIRE);
  call->kernel = k;
  call->nwritten = 0;
  call->others_used = 0;
  /* As many arguments as the call gave: the core says what a wrong count is. */
  int32_t given = layout->len < TJ_MAX_PARAMS ? (int32_t)layout->len : TJ_MAX_PARAMS;
  call->ninputs = given >= k->nrequired && given < k->ninputs ? k->ninputs : given;
  for (int32_t i = 0; i < call->ninputs; ++i) tj_arg_init(&call->args[i]);
  int64_t operand = 0;
  for (int32_t i = 0; i < given && i < k->ninputs; ++i) {
    int rc = read_input(frame, device, call, i, layout->ptr[i], &operand);
    if (rc != TJ_OK) {
      tj__prefix_error(rc, "%s: argument %d '%s': ", k->name, i, input_name(k, i));
      return tj_error_at(rc, i, -1, TJ_PRODUCER_NONE);
    }
  }
  return TJ_OK;
}

/* The device a call runs on. */
static DLDevice device_of(const tj_xla_call_frame *frame, int32_t device_type) {
  DLDevice device = {(DLDeviceType)device_type, 0};
  const tj_xla_api *api = frame->api;
  if (device_type != kDLCPU && api != NULL &&
      api->struct_size >= offsetof(tj_xla_api, device_ordinal_get) + sizeof(void *) &&
      api->device_ordinal_get != NULL) {
    tj_xla_device_ordinal_get_args args = {sizeof(args), NULL, frame->ctx, 0};
    if (api->device_ordinal_get(&args) == NULL) device.device_id = args.device_ordinal;
  }
  return device;
}

int tj_xla_bind(const tj_xla_call_frame *frame, DLDevice device, int32_t *out_ndim,
                int64_t *out_shape, DLDataType *out_dtype) {
  TJ__REFUSE_NULL("tj_xla_bind", frame);
  xla_call call;
  int rc = read_inputs(frame, device, &call);
  if (rc != TJ_OK) return rc;
  tj_frame bound;
  rc = tj_call_bind(call.kernel, call.args, call.ninputs, &bound);
  if (rc != TJ_OK) return rc;
  int32_t n = call.kernel->noutputs + call.kernel->nworkspaces;
  for (int32_t o = 0; o < n; ++o) {
    if (out_ndim != NULL) out_ndim[o] = bound.out_ndim[o];
    if (out_shape != NULL)
      memcpy(out_shape + (size_t)o * TJ_MAX_NDIM, bound.out_shape[o],
             sizeof(int64_t) * (size_t)bound.out_ndim[o]);
    if (out_dtype != NULL) out_dtype[o] = bound.out_dtype[o];
  }
  return TJ_OK;
}

/* ---- The handler -------------------------------------------------------------------- */

static void *xla_error(const tj_xla_call_frame *frame, int rc) {
  const char *exception = tj_status_exception(rc);
  bool invalid = strcmp(exception, "TypeError") == 0 || strcmp(exception, "ValueError") == 0;
  tj_xla_error_create_args args = {sizeof(args), NULL, tj_last_error(), invalid ? 3 : 13};
  return frame->api->error_create(&args);
}

/* The metadata query XLA makes once, at registration. */
static void *answer_metadata(tj_xla_extension *extension) {
  for (; extension != NULL; extension = extension->next) {
    if (extension->type != EXTENSION_METADATA) continue;
    tj_xla_metadata *metadata = ((tj_xla_metadata_extension *)extension)->metadata;
    metadata->api_version.major_version = TJ_XLA_API_MAJOR;
    metadata->api_version.minor_version = TJ_XLA_API_MINOR;
    /* Every kernel's launch is capture-safe: the same launches for the same
     * attributes and shapes, nothing synchronous on the stream. */
    metadata->traits = TJ_XLA_COMMAND_BUFFER_COMPATIBLE;
  }
  return NULL;
}

static int run(tj_xla_call_frame *frame, xla_call *call) {
  const tj_xla_attrs *attrs = &frame->attrs;
  const tj_xla_byte_span *key = attribute(attrs, "tilejit", ATTR_STRING);
  const xla_entry *entry = key != NULL ? find(key->ptr, key->len) : NULL;
  DLDevice device = device_of(frame, entry != NULL ? entry->device_type : kDLCPU);
  int rc = read_inputs(frame, device, call);
  if (rc != TJ_OK) return rc;
  const tj_kernel *k = call->kernel;
  int32_t nresults = k->noutputs + k->nworkspaces;
  if (frame->rets.size != nresults + call->nwritten)
    return tj_set_error(TJ_EVALUE, "%s: the call has %lld results, the kernel makes %d", k->name,
                        (long long)frame->rets.size, nresults + call->nwritten);
  /* A written input runs on its result, which XLA aliased to it. */
  for (int32_t w = 0; w < call->nwritten; ++w) {
    int32_t i = call->written[w];
    call->tensors[i].data = ((const tj_xla_buffer *)frame->rets.items[nresults + w])->data;
    tj_arg_from_dltensor(&call->args[i], &call->tensors[i], 0);
  }
  tj_frame bound;
  rc = tj_call_bind(k, call->args, call->ninputs, &bound);
  if (rc != TJ_OK) return rc;
  tj_arg outputs[TJ_MAX_OUTPUTS];
  DLTensor tensors[TJ_MAX_OUTPUTS];
  for (int32_t o = 0; o < nresults; ++o) {
    rc = read_buffer(frame->rets.items[o], device, &tensors[o], &outputs[o]);
    if (rc != TJ_OK) return tj__prefix_error(rc, "%s: result %d: ", k->name, o);
    rc = tj_call_set_output(&bound, o, &outputs[o]);
    if (rc != TJ_OK) return rc;
  }
  if (device.device_type != kDLCPU) {
    tj_xla_stream_get_args args = {sizeof(args), NULL, frame->ctx, NULL};
    void *error = frame->api->stream_get(&args);
    if (error != NULL) {
      struct {
        size_t struct_size;
        tj_xla_extension *extension_start;
        void *error;
      } destroy = {sizeof(destroy), NULL, error};
      frame->api->error_destroy(&destroy);
      return tj_set_error(TJ_ERUNTIME, "%s: XLA gave no stream", k->name);
    }
    bound.stream = args.stream;
  }
  return tj_call_launch(&bound);
}

void *tj_xla_handler(tj_xla_call_frame *frame) {
  if (frame == NULL) return NULL;
  if (frame->extension_start != NULL) return answer_metadata(frame->extension_start);
  if (frame->stage != STAGE_EXECUTE) return NULL;
  xla_call call;
  int rc = run(frame, &call);
  return rc == TJ_OK ? NULL : xla_error(frame, rc);
}
