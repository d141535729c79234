/*
 * Kernels as torch operators through torch's stable C ABI (tilejit/torch.h).
 *
 * The dispatcher calls a boxed kernel `void fn(StableIValue *stack, uint64_t
 * nargs, uint64_t nouts)` and gives it no pointer of its own, so each
 * registration takes a slot and its own pair of entry points (the backend
 * kernel and the autograd kernel of slot n: "Slot n's two boxed kernels"
 * below), which run the slot's kernel. Torch's functions are looked up in the
 * process, never linked: the core loads without torch.
 *
 * The stack, as torch's stable ABI lays it out: a Tensor is an
 * AtenTensorHandle the callee owns (deleted here once the call is over); a
 * Tensor? is 0 for None, else a heap StableIValue holding the handle (freed
 * here); a SymInt is its int64; a float its double's bits; a bool its byte.
 * Outputs are new handles, pushed from index 0; torch owns them from there.
 */
#define _GNU_SOURCE
#include "tilejit/torch.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "open.h"
#include "tilejit/producer.h"

typedef void *aten_tensor;
typedef int32_t aoti_error; /* AOTITorchError: 0 is success */
typedef void (*boxed_fn)(uint64_t *stack, uint64_t nargs, uint64_t nouts);
/* c10::SourceLocation, passed by value as C++ passes it. */
typedef struct {
  const char *function, *file;
  uint32_t line;
} c10_source_location;

/* ---- Torch's functions, looked up once ------------------------------------ */

#define TJ__NUM_DTYPES 24

static struct {
  aoti_error (*data_ptr)(aten_tensor, void **);
  aoti_error (*dim)(aten_tensor, int64_t *);
  aoti_error (*sizes)(aten_tensor, int64_t **);
  aoti_error (*strides)(aten_tensor, int64_t **);
  aoti_error (*dtype)(aten_tensor, int32_t *);
  aoti_error (*device_type)(aten_tensor, int32_t *);
  aoti_error (*device_index)(aten_tensor, int32_t *);
  aoti_error (*layout)(aten_tensor, int32_t *);
  aoti_error (*empty_strided)(int64_t, const int64_t *, const int64_t *, int32_t, int32_t, int32_t,
                              aten_tensor *);
  aoti_error (*delete_tensor)(aten_tensor);
  aoti_error (*library_init_impl)(const char *, const char *, const char *, uint32_t, void **);
  aoti_error (*library_init_fragment)(const char *, const char *, uint32_t, void **);
  aoti_error (*library_def)(void *, const char *);
  aoti_error (*library_impl)(void *, const char *, boxed_fn);
  aoti_error (*library_impl_versioned)(void *, const char *, boxed_fn, uint64_t);
  aoti_error (*delete_stable_ivalue)(uint64_t *); /* optional (torch 2.10 on) */
  void (*operator_delete)(void *);                /* what frees it before */
  aoti_error (*cuda_stream)(int32_t, void **);    /* optional: a CUDA build */
  const char *(*exception_what)(void);            /* optional */
  bool (*grad_enabled)(void);                     /* optional */
  aoti_error (*is_defined)(aten_tensor, bool *);  /* optional */
  __attribute__((noreturn)) void (*throw_runtime_error)(const char *);
  __attribute__((noreturn)) void (*throw_invalid_argument)(const char *);
  /* c10::TypeError, thrown through the C++ ABI (optional: see throw_type_error). */
  void *(*allocate_exception)(size_t);
  __attribute__((noreturn)) void (*throw_exception)(void *, void *, void (*)(void *));
  void (*string_new)(void *, const char *, const void *);
  void (*string_delete)(void *);
  void (*type_error_new)(void *, c10_source_location, void *);
  void (*error_new)(void *, c10_source_location, void *); /* c10::Error's, base object */
  void *type_error_info, *type_error_vtable;
  int32_t cpu, cuda, strided;
  int32_t dtype_code[TJ__NUM_DTYPES];
  DLDataType dtype_dl[TJ__NUM_DTYPES];
  int32_t ndtypes;
} T;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status = TJ_ERUNTIME;
static char init_why[256];

/* `name` in the process: already global, else in one of torch's libraries or
 * the C++ runtime (loaded by torch; looked at, never loaded here). */
static void *lookup(const char *name) {
  static const char *const libraries[] = {"libtorch_cpu.so", "libtorch.so", "libtorch_cuda.so",
                                          "libc10.so", "libstdc++.so.6"};
  void *found = dlsym(RTLD_DEFAULT, name);
  for (size_t i = 0; found == NULL && i < sizeof(libraries) / sizeof(*libraries); ++i) {
    void *lib = dlopen(libraries[i], RTLD_LAZY | RTLD_NOLOAD);
    if (lib == NULL) continue;
    found = dlsym(lib, name);
    dlclose(lib); /* still loaded: torch holds it */
  }
  return found;
}

/* `dest`, a function pointer, set to torch's `name` (optional: left NULL when
 * torch lacks it). */
#define TJ__FIND(dest, name)                  \
  do {                                        \
    void *found_ = lookup(name);              \
    memcpy(&(dest), &found_, sizeof(void *)); \
  } while (0)
#define TJ__NEED(dest, name)                                                       \
  do {                                                                             \
    TJ__FIND(dest, name);                                                          \
    if ((dest) == NULL) {                                                          \
      snprintf(init_why, sizeof(init_why), "torch's stable C ABI lacks %s", name); \
      return;                                                                      \
    }                                                                              \
  } while (0)

/* Torch's dtype `function` names is `code`, `bits`, `lanes` in DLPack: the
 * same as torch's own DLPack export (torch.Tensor.__dlpack__) says. */
static void add_dtype(const char *function, uint8_t code, uint8_t bits, uint16_t lanes) {
  int32_t (*get)(void) = NULL;
  TJ__FIND(get, function);
  if (get == NULL || T.ndtypes == TJ__NUM_DTYPES) return; /* a dtype this torch lacks */
  T.dtype_code[T.ndtypes] = get();
  T.dtype_dl[T.ndtypes] = (DLDataType){code, bits, lanes};
  T.ndtypes++;
}

/* Every torch dtype of core.h's TJ_DTYPES that this torch has. */
static void add_dtypes(void) {
  int32_t count = 0;
  const tj_dtype_row *rows = tj_dtype_rows(&count);
  for (int32_t i = 0; i < count; ++i) {
    char function[64];
    if (rows[i].torch == NULL) continue;
    snprintf(function, sizeof(function), "aoti_torch_dtype_%s", rows[i].torch);
    add_dtype(function, rows[i].dtype.code, rows[i].dtype.bits, rows[i].dtype.lanes);
  }
}

static void init(void) {
  if (lookup("aoti_torch_abi_version") == NULL) {
    snprintf(init_why, sizeof(init_why),
             "libtorch is not loaded in this process (no aoti_torch_abi_version)");
    return;
  }
  TJ__NEED(T.data_ptr, "aoti_torch_get_data_ptr");
  TJ__NEED(T.dim, "aoti_torch_get_dim");
  TJ__NEED(T.sizes, "aoti_torch_get_sizes");
  TJ__NEED(T.strides, "aoti_torch_get_strides");
  TJ__NEED(T.dtype, "aoti_torch_get_dtype");
  TJ__NEED(T.device_type, "aoti_torch_get_device_type");
  TJ__NEED(T.device_index, "aoti_torch_get_device_index");
  TJ__NEED(T.layout, "aoti_torch_get_layout");
  TJ__NEED(T.empty_strided, "aoti_torch_empty_strided");
  TJ__NEED(T.delete_tensor, "aoti_torch_delete_tensor_object");
  TJ__NEED(T.library_init_impl, "aoti_torch_library_init_impl");
  TJ__NEED(T.library_init_fragment, "aoti_torch_library_init_fragment");
  TJ__NEED(T.library_def, "aoti_torch_library_def");
  TJ__NEED(T.operator_delete, "_ZdlPv"); /* operator delete(void*) */
  /* libstdc++'s std::__throw_runtime_error and std::__throw_invalid_argument:
   * what its headers' inline code calls to throw, part of its stable ABI. */
  TJ__NEED(T.throw_runtime_error, "_ZSt21__throw_runtime_errorPKc");
  TJ__NEED(T.throw_invalid_argument, "_ZSt24__throw_invalid_argumentPKc");
  TJ__FIND(T.library_impl_versioned, "torch_library_impl");
  if (T.library_impl_versioned == NULL) TJ__NEED(T.library_impl, "aoti_torch_library_impl");
  TJ__FIND(T.delete_stable_ivalue, "torch_delete_stable_ivalue");
  TJ__FIND(T.exception_what, "torch_exception_get_what_without_backtrace");
  TJ__FIND(T.grad_enabled, "aoti_torch_grad_mode_is_enabled");
  TJ__FIND(T.is_defined, "aoti_torch_is_defined");
  int32_t (*cpu)(void) = NULL, (*cuda)(void) = NULL, (*strided)(void) = NULL;
  TJ__NEED(cpu, "aoti_torch_device_type_cpu");
  TJ__NEED(cuda, "aoti_torch_device_type_cuda");
  TJ__NEED(strided, "aoti_torch_layout_strided");
  T.cpu = cpu();
  T.cuda = cuda();
  T.strided = strided();
  add_dtypes();
  /* libc10's c10::TypeError (its constructor from a source location and a
   * std::string, and its type_info) with libstdc++'s std::string and C++
   * runtime: how torch's own operators raise a Python TypeError. All of them
   * or none: without them a TypeError is thrown as a RuntimeError. */
  TJ__FIND(T.allocate_exception, "__cxa_allocate_exception");
  TJ__FIND(T.throw_exception, "__cxa_throw");
  TJ__FIND(T.string_new, "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_");
  TJ__FIND(T.string_delete, "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEED1Ev");
  TJ__FIND(T.type_error_new,
           "_ZN3c109TypeErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_"
           "traitsIcESaIcEEE");
  TJ__FIND(T.error_new,
           "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_"
           "traitsIcESaIcEEE");
  T.type_error_info = lookup("_ZTIN3c109TypeErrorE");
  T.type_error_vtable = lookup("_ZTVN3c109TypeErrorE");
  TJ__FIND(T.cuda_stream, "aoti_torch_get_current_cuda_stream");
  __atomic_store_n(&init_status, TJ_OK, __ATOMIC_RELEASE); /* tj_torch_read_object reads it */
}

int tj_torch_init(void) {
  pthread_once(&init_once, init);
  return init_status == TJ_OK ? TJ_OK : tj_set_error(TJ_ERUNTIME, "tilejit: %s", init_why);
}

/* A failed torch function: its own message when torch keeps one. */
static int torch_failed(const char *what) {
  const char *why = T.exception_what != NULL ? T.exception_what() : NULL;
  return tj_set_error(TJ_ERUNTIME, "%s failed%s%s", what, why != NULL && *why ? ": " : "",
                      why != NULL ? why : "");
}

/* ---- The producer of torch's tensor handles ------------------------------- */

static void release_handle(void *object) { T.delete_tensor(object); }

static const tj_host handle_host = {.release = release_handle, .type_offset = -1};

/* Reads the tensor handle `h` into `t` (shape and strides borrowed from the
 * tensor; byte_offset 0), and its torch dtype code into *dtype: what the op's
 * kernels read of each tensor, and what a direct call reads of a torch.Tensor
 * in place (tj_torch_read_object). TJ_OK, or the refusal. */
static int read_handle(aten_tensor h, DLTensor *t, int32_t *dtype) {
  void *data;
  int64_t ndim, *sizes, *strides;
  int32_t device_type, device_index, layout;
  if (T.layout(h, &layout) || T.data_ptr(h, &data) || T.dim(h, &ndim) || T.sizes(h, &sizes) ||
      T.strides(h, &strides) || T.dtype(h, dtype) || T.device_type(h, &device_type) ||
      T.device_index(h, &device_index))
    return torch_failed("reading the tensor");
  /* Refused as a direct call refuses the tensor (torch's __dlpack__): a
   * ValueError. */
  if (layout != T.strided)
    return tj_set_error(TJ_EVALUE,
                        "a tensor of layout %d (not strided): a kernel takes dense "
                        "tensors; pass tensor.to_dense()",
                        (int)layout);
  DLDataType dl = {0, 0, 0};
  for (int32_t i = 0; i < T.ndtypes && dl.bits == 0; ++i)
    if (T.dtype_code[i] == *dtype) dl = T.dtype_dl[i];
  if (dl.bits == 0)
    return tj_set_error(TJ_EVALUE, "torch dtype %d has no DLPack equivalent", (int)*dtype);
  DLDeviceType device;
  if (device_type == T.cpu) {
    device = kDLCPU;
  } else if (device_type == T.cuda) {
    device = kDLCUDA;
  } else {
    return tj_set_error(TJ_EVALUE,
                        "a tensor on torch device type %d, which tilejit's kernels "
                        "do not run on",
                        (int)device_type);
  }
  t->data = data;
  t->device = (DLDevice){device, device_index};
  t->ndim = (int32_t)ndim;
  t->dtype = dl;
  t->shape = sizes;
  t->strides = strides;
  t->byte_offset = 0;
  return TJ_OK;
}

static int import_handle(const tj_producer *self, void *object, tj_arg *arg) {
  (void)self;
  int32_t dtype;
  int rc = read_handle(object, &arg->tensor, &dtype);
  if (rc != TJ_OK) return rc;
  arg->kind = TJ_ARG_TENSOR;
  arg->flags = 0;
  arg->owner_kind = TJ_OWNER_NONE;
  arg->owner = NULL;
  return TJ_OK;
}

/* The torch dtype code of DLPack dtype `dl` (the op's table), or -1. */
static int32_t torch_dtype(DLDataType dl) {
  for (int32_t i = 0; i < T.ndtypes; ++i)
    if (T.dtype_dl[i].code == dl.code && T.dtype_dl[i].bits == dl.bits &&
        T.dtype_dl[i].lanes == dl.lanes)
      return T.dtype_code[i];
  return -1;
}

/* A new tensor handle in *h: torch dtype `dtype`, `proto`'s device type and
 * shape, compact row-major strides as torch.empty makes them, on device
 * `device_index`. TJ_OK or torch's failure. */
static int empty_like(const DLTensor *proto, int32_t dtype, int32_t device_index, aten_tensor *h) {
  int64_t strides[TJ_MAX_NDIM], step = 1;
  for (int32_t d = proto->ndim - 1; d >= 0; --d) {
    strides[d] = step;
    step *= proto->shape[d] > 1 ? proto->shape[d] : 1;
  }
  int32_t device = proto->device.device_type == kDLCUDA ? T.cuda : T.cpu;
  *h = NULL;
  if (T.empty_strided(proto->ndim, proto->shape, strides, dtype, device, device_index, h))
    return torch_failed("torch's empty_strided");
  return TJ_OK;
}

static int allocate_handle(const tj_producer *self, const DLTensor *proto, tj_arg *out,
                           void **object) {
  int32_t dtype = torch_dtype(proto->dtype);
  if (dtype < 0) return tj_set_error(TJ_ETYPE, "torch has no dtype for it");
  aten_tensor h = NULL;
  int rc = empty_like(proto, dtype, proto->device.device_id, &h);
  if (rc != TJ_OK) return rc;
  *object = h;
  tj_arg_init(out);
  return import_handle(self, h, out);
}

static int current_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                          void **stream) {
  (void)self;
  *stream = NULL;
  if (device_type != kDLCUDA) return TJ_OK;
  if (T.cuda_stream == NULL)
    return tj_set_error(TJ_ERUNTIME,
                        "this torch has no CUDA (no "
                        "aoti_torch_get_current_cuda_stream)");
  if (T.cuda_stream(device_id, stream)) return torch_failed("torch's current CUDA stream");
  return TJ_OK;
}

static const tj_producer handle_producer = {
    .import = import_handle,
    .allocate = allocate_handle,
    .current_stream = current_stream,
    .host = &handle_host,
};

/* ---- Slots: a registered operator each ------------------------------------ */

typedef struct {
  const tj_kernel *kernel;
  char inputs[TJ_MAX_PARAMS + 1];
  int32_t ninputs;
  tj_torch_fallback fallback;
  void *context;
  bool has_plain;
  tj_torch_plain plain;
  char tls_symbol[128];
  int32_t order[TJ_MAX_OUTPUTS]; /* return r is output order[r] */
} torch_slot;

static torch_slot slots[TJ_TORCH_MAX_OPS];
static int32_t nslots; /* under slots_lock */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether input kind `kind` (TJ_TORCH_*) is a tensor, optional or not. */
static bool is_tensor(char kind) {
  return kind == TJ_TORCH_TENSOR || kind == TJ_TORCH_OPTIONAL_TENSOR;
}

static void free_box(uint64_t *box) {
  if (T.delete_stable_ivalue != NULL)
    T.delete_stable_ivalue(box);
  else
    T.operator_delete(box);
}

/* Optional tensors unboxed in place: a handle or 0. */
static void unbox(const torch_slot *s, uint64_t *stack) {
  for (int32_t i = 0; i < s->ninputs; ++i) {
    if (s->inputs[i] != TJ_TORCH_OPTIONAL_TENSOR || stack[i] == 0) continue;
    uint64_t *box = (uint64_t *)(uintptr_t)stack[i];
    stack[i] = *box;
    free_box(box);
  }
}

static void drop_inputs(const torch_slot *s, uint64_t *stack) {
  for (int32_t i = 0; i < s->ninputs; ++i)
    if (is_tensor(s->inputs[i]) && stack[i]) T.delete_tensor((aten_tensor)(uintptr_t)stack[i]);
}

/* The calling thread's copy of the thread-local word `symbol` (dlsym answers
 * with the calling thread's address of a thread-local symbol). */
static const uint64_t *tls_word(const char *symbol) { return (const uint64_t *)lookup(symbol); }

int tj_torch_tls_word(const char *symbol, uint64_t *out) {
  TJ__REFUSE_NULL("tj_torch_tls_word", symbol);
  TJ__REFUSE_NULL("tj_torch_tls_word", out);
  const uint64_t *word = tls_word(symbol);
  if (word == NULL) return tj_set_error(TJ_ERUNTIME, "tilejit: no thread-local %s", symbol);
  *out = *word;
  return TJ_OK;
}

/* Whether a tensor with an autograd record may still make a plain call: grad
 * mode is off (asked once per call: *grad is -1 until asked) and it carries no
 * tangent (tj_torch_plain.fw_grad). */
static bool untangled_without_grad(const tj_torch_plain *p, const void *meta, const void *handle,
                                   int *grad) {
  if (p->fw_grad == NULL || p->undefined == NULL || T.grad_enabled == NULL) return false;
  if (*grad < 0) *grad = T.grad_enabled();
  if (*grad) return false;
  const void *tangent = p->fw_grad(meta, 0, handle); /* a const at::Tensor & */
  return *(const void *const *)tangent == p->undefined;
}

/* The calling thread's copy of the word `symbol` names, found once per thread
 * and symbol (every slot of tilejit's Python, and its record gate, name the
 * same one: found at the thread's first call); NULL where there is none. */
static const uint64_t *thread_word(const char *symbol) {
  static __thread const uint64_t *word;
  static __thread char word_for[128];
  if (word == NULL || strcmp(word_for, symbol) != 0) {
    size_t size = strlen(symbol) + 1;
    if (size > sizeof(word_for) || (word = tls_word(symbol)) == NULL) return NULL;
    memcpy(word_for, symbol, size);
  }
  return word;
}

/* Whether the thread includes no dispatch key beyond torch's defaults. */
static bool plain_thread(const tj_torch_plain *p) {
  const uint64_t *included = thread_word(p->tls_symbol);
  return included != NULL && *included == 0;
}

/* Whether a TensorImpl's dispatch key set is a plain dense tensor's. */
static bool plain_keyset(const tj_torch_plain *p, const char *impl) {
  uint64_t keyset;
  memcpy(&keyset, impl + p->keyset_offset, sizeof(keyset));
  for (int32_t k = 0; k < p->nkeysets && k < TJ_TORCH_MAX_KEYSETS; ++k)
    if (keyset == p->keysets[k]) return true;
  return false;
}

/* Whether the autograd kernel may run the call at once (tj_torch_plain). */
static bool plain_call(const torch_slot *s, const uint64_t *stack) {
  if (!s->has_plain) return false;
  const tj_torch_plain *p = &s->plain;
  if (!plain_thread(p)) return false;
  int grad = -1;
  for (int32_t i = 0; i < s->ninputs; ++i) {
    if (!is_tensor(s->inputs[i]) || stack[i] == 0) continue;
    const void *handle = (const void *)(uintptr_t)stack[i];
    const char *impl = *(char *const *)handle; /* at::Tensor's TensorImpl * */
    const void *meta = *(void *const *)(impl + p->meta_offset);
    if (meta != NULL && !untangled_without_grad(p, meta, handle, &grad)) return false;
    if (!plain_keyset(p, impl)) return false;
  }
  return true;
}

int tj_torch_plain_object(const void *context, const void *object) {
  const tj_torch_plain_objects *c = context;
  if (c == NULL || c->plain == NULL || c->plain->tls_symbol == NULL) return 0;
  if (object == NULL) return plain_thread(c->plain);
  const char *impl = *(char *const *)((const char *)object + c->impl_offset);
  return impl != NULL && plain_keyset(c->plain, impl);
}

/* ---- torch.Tensor objects read in place, for direct calls ------------------ */

int tj_torch_read_object(const void *context, void *object, DLTensor *out) {
  const tj_torch_reader *r = context;
  if (__atomic_load_n(&init_status, __ATOMIC_ACQUIRE) != TJ_OK) return 1;
  const char *impl = *(char *const *)((const char *)object + r->impl_offset);
  /* A c10::TensorImpl itself (no subclass: its virtual table) of a plain dense
   * tensor's key set: one whose sizes, strides and data torch's getters read
   * without throwing. */
  if (impl == NULL || *(const void *const *)impl != r->impl_vtable || !plain_keyset(r->plain, impl))
    return 1;
  /* An at::Tensor is one word, its TensorImpl's address (the plain-call probe
   * checks handles so): `&impl` is a handle that borrows the tensor. */
  int32_t dtype;
  if (read_handle((aten_tensor)&impl, out, &dtype) != TJ_OK || dtype < 0 || dtype > 63 ||
      !(r->dtypes >> dtype & 1))
    return 1;
  if (out->device.device_type == kDLCPU) out->device.device_id = 0; /* as DLPack says */
  return 0;
}

int tj_torch_make_object(const void *context, const DLTensor *prototype, void **object) {
  const tj_torch_reader *r = context;
  *object = NULL;
  if (__atomic_load_n(&init_status, __ATOMIC_ACQUIRE) != TJ_OK || r->wrap == NULL) return 1;
  int32_t dtype = torch_dtype(prototype->dtype);
  int32_t type = prototype->device.device_type;
  if (dtype < 0 || dtype > 63 || !(r->dtypes >> dtype & 1) || (type != kDLCPU && type != kDLCUDA))
    return 1;
  aten_tensor h = NULL;
  /* A failure (out of memory) is left to the public way, which says it in
   * torch's words. The CPU has no device index in torch (-1). */
  if (empty_like(prototype, dtype, type == kDLCPU ? -1 : prototype->device.device_id, &h) != TJ_OK)
    return 1;
  *object = r->wrap(h); /* its own reference to the tensor; the handle's is dropped */
  T.delete_tensor(h);
  return *object != NULL ? TJ_OK : TJ_EPYERR;
}

/* Whether `t` is a defined tensor (where torch cannot tell: taken as one). */
static int defined(aten_tensor t) {
  bool answer = true;
  return T.is_defined == NULL || T.is_defined(t, &answer) != 0 || answer;
}

/* Runs the slot's kernel on the stack; TJ_OK with the outputs pushed, or the
 * core's status with its message in `message`. */
static int run_kernel(const torch_slot *s, uint64_t *stack, uint64_t nouts, char *message,
                      size_t size) {
  const tj_kernel *k = s->kernel;
  tj_arg args[TJ_MAX_PARAMS];
  void *outputs[TJ_MAX_OUTPUTS] = {NULL};
  for (int32_t i = 0; i < s->ninputs; ++i) {
    tj_arg *arg = &args[i];
    tj_arg_init(arg);
    switch (s->inputs[i]) {
      case TJ_TORCH_TENSOR:
      case TJ_TORCH_OPTIONAL_TENSOR:
        /* None for a Tensor reaches a kernel as an undefined tensor: left as None,
         * which the core refuses for a required buffer as a direct call does. */
        if (stack[i] != 0 && defined((aten_tensor)(uintptr_t)stack[i]))
          tj_arg_object(arg, (void *)(uintptr_t)stack[i], &handle_producer);
        break;
      case TJ_TORCH_INT:
        arg->kind = TJ_ARG_INT;
        arg->value.i = (int64_t)stack[i];
        break;
      case TJ_TORCH_FLOAT:
        arg->kind = TJ_ARG_FLOAT;
        memcpy(&arg->value.f, &stack[i], sizeof(double));
        break;
      default: /* TJ_TORCH_BOOL */
        arg->kind = TJ_ARG_BOOL;
        arg->value.i = (stack[i] & 0xff) != 0;
        break;
    }
  }
  tj_call call = {args, s->ninputs, 0, NULL, outputs};
  const tj_call_binding binding = {NULL, NULL, 1, 0};
  int rc = tj_call_run_binding(k, &call, &binding);
  if (rc == TJ_OK && nouts != (uint64_t)tj_kernel_num_outputs(k))
    rc = tj_set_error(TJ_ERUNTIME, "%s: torch asks for %llu outputs, the kernel makes %d",
                      tj_kernel_name(k), (unsigned long long)nouts, tj_kernel_num_outputs(k));
  if (rc != TJ_OK) {
    snprintf(message, size, "%s", tj_last_error());
    for (int32_t o = 0; o < tj_kernel_num_outputs(k); ++o)
      if (outputs[o] != NULL) T.delete_tensor(outputs[o]);
  }
  drop_inputs(s, stack);
  if (rc == TJ_OK)
    for (uint64_t r = 0; r < nouts; ++r) stack[r] = (uint64_t)(uintptr_t)outputs[s->order[r]];
  return rc;
}

/* An exception's destructor, as the C++ ABI calls it: the complete-object
 * destructor, the first entry of the object's virtual table (std::exception's
 * virtual destructor is its first virtual function). */
static void destroy_exception(void *object) {
  void (*const *vtable)(void *) = *(void (*const *const *)(void *))object;
  vtable[0](object);
}

/* c10::TypeError(message), thrown: what torch's bindings raise as a Python
 * TypeError. Its object is given room beyond any c10::Error's size (about
 * 150 bytes); the constructor copies the message out of the std::string,
 * which is destroyed before the throw. Returns when libc10 lacks it.
 * test_torch_op.py checks the exception class on every torch it runs on. */
static void throw_type_error(const char *message) {
  const bool inherited = T.type_error_new == NULL;
  if (T.allocate_exception == NULL || T.throw_exception == NULL || T.string_new == NULL ||
      T.string_delete == NULL || T.type_error_info == NULL ||
      (inherited && (T.error_new == NULL || T.type_error_vtable == NULL)))
    return;
  _Alignas(16) unsigned char text[64]; /* a std::string: 32 bytes */
  const unsigned char allocator = 0;   /* std::allocator<char>: empty */
  const c10_source_location where = {"tilejit", __FILE__, __LINE__};
  T.string_new(text, message, &allocator);
  void *error = T.allocate_exception(1024);
  if (!inherited) {
    T.type_error_new(error, where, text);
  } else {
    /* What c10::TypeError's inherited constructor does where libc10 does not
     * export it (torch 2.9): c10::Error's, then TypeError's virtual table
     * (its address point: past the offset to top and the type_info). */
    T.error_new(error, where, text);
    void *vtable = (char *)T.type_error_vtable + 2 * sizeof(void *);
    memcpy(error, &vtable, sizeof(vtable));
  }
  T.string_delete(text);
  T.throw_exception(error, T.type_error_info, destroy_exception);
}

/* A failure with the core's status `rc`, thrown as the C++ exception that
 * torch's Python bindings raise as the class the core's status table names,
 * as a direct call raises it: std::invalid_argument for TJ_EVALUE (a
 * ValueError), c10::TypeError for TJ_ETYPE (a TypeError), std::runtime_error
 * for the rest (a RuntimeError). Nothing is held when it is thrown. */
__attribute__((noreturn)) static void fail(int rc, const char *message) {
  if (rc == TJ_EVALUE) T.throw_invalid_argument(message);
  if (rc == TJ_ETYPE) throw_type_error(message);
  T.throw_runtime_error(message);
}

/* The boxed kernels, slot n's: they run with the slot number as a fourth
 * argument, which the stubs below add. */
void tj__torch_run_backend(uint64_t *stack, uint64_t nargs, uint64_t nouts, uint32_t n);
void tj__torch_run_autograd(uint64_t *stack, uint64_t nargs, uint64_t nouts, uint32_t n);

void tj__torch_run_backend(uint64_t *stack, uint64_t nargs, uint64_t nouts, uint32_t n) {
  (void)nargs; /* torch checks it against the schema */
  const torch_slot *s = &slots[n];
  char message[2048];
  unbox(s, stack);
  int rc = run_kernel(s, stack, nouts, message, sizeof(message));
  if (rc != TJ_OK) fail(rc, message);
}

void tj__torch_run_autograd(uint64_t *stack, uint64_t nargs, uint64_t nouts, uint32_t n) {
  const torch_slot *s = &slots[n];
  char message[2048];
  unbox(s, stack);
  if (plain_call(s, stack)) {
    int rc = run_kernel(s, stack, nouts, message, sizeof(message));
    if (rc != TJ_OK) fail(rc, message);
    return;
  }
  message[0] = '\0';
  int rc = s->fallback(s->context, stack, nargs, nouts, message, sizeof(message));
  /* The fallback's status: a core status, or 2 and 1 as before (ValueError, other). */
  if (rc != 0)
    fail(rc == 2 ? TJ_EVALUE : rc, message[0] ? message : "tilejit: the autograd fallback failed");
}

/* Slot n's two boxed kernels. The dispatcher passes a boxed kernel no pointer
 * of its own, so each slot has its own pair of entry points. On x86-64 and
 * AArch64 they are stubs of a few instructions, TJ__STUB bytes apart, that
 * put n in the fourth argument register and jump to the run function (which
 * then returns to torch directly: no stub is ever on the stack, so unwinding
 * never meets one); elsewhere, C functions, fewer of them. */
#if defined(TJ_TORCH_C_ENTRIES)
/* (the portable entries forced, for tests) */
#elif defined(__x86_64__) && defined(__ELF__)
#define TJ__STUB 16
#define TJ__STUB_CODE(run)                         \
  "  .balign 16\n"                                 \
  "  .byte 0xf3, 0x0f, 0x1e, 0xfa\n" /* endbr64 */ \
  "  movl $tj__i, %ecx\n"                          \
  "  jmp " run                                     \
  "\n"                                             \
  "  .set tj__i, tj__i + 1\n"
#elif defined(__aarch64__) && defined(__ELF__)
#define TJ__STUB 16
#define TJ__STUB_CODE(run)   \
  "  .balign 16\n"           \
  "  hint #34\n" /* bti c */ \
  "  mov w3, #tj__i\n"       \
  "  b " run                 \
  "\n"                       \
  "  .set tj__i, tj__i + 1\n"
#endif

#ifdef TJ__STUB
#define TJ__STR(x) #x
#define TJ__XSTR(x) TJ__STR(x)
#define TJ__STUBS(table, run) \
  __asm__(".pushsection .text\n"                                            \
          "  .balign 16\n"                                                  \
          "  .type " table ", %function\n"                                  \
          table ":\n"                                                       \
          "  .set tj__i, 0\n"                                               \
          "  .rept " TJ__XSTR(TJ_TORCH_MAX_OPS) "\n" TJ__STUB_CODE(run)     \
          "  .endr\n"                                                       \
          "  .size " table ", . - " table "\n"                              \
          ".popsection\n");
TJ__STUBS("tj__torch_backends", "tj__torch_run_backend")
TJ__STUBS("tj__torch_autograds", "tj__torch_run_autograd")
extern const unsigned char tj__torch_backends[], tj__torch_autograds[];
#define TJ__SLOTS TJ_TORCH_MAX_OPS

static boxed_fn stub(const unsigned char *table, int32_t n) {
  const void *address = table + (size_t)n * TJ__STUB;
  boxed_fn fn;
  memcpy(&fn, &address, sizeof(fn));
  return fn;
}
#define TJ__BACKEND(n) stub(tj__torch_backends, n)
#define TJ__AUTOGRAD(n) stub(tj__torch_autograds, n)
#else
#define TJ__SLOTS 64
#define TJ__KERNELS(n)                                                \
  static void backend_##n(uint64_t *stack, uint64_t a, uint64_t o) {  \
    tj__torch_run_backend(stack, a, o, n);                            \
  }                                                                   \
  static void autograd_##n(uint64_t *stack, uint64_t a, uint64_t o) { \
    tj__torch_run_autograd(stack, a, o, n);                           \
  }
/* clang-format off */
#define TJ__O8(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7)
#define TJ__O64(M) \
  TJ__O8(M, 00) TJ__O8(M, 01) TJ__O8(M, 02) TJ__O8(M, 03) \
  TJ__O8(M, 04) TJ__O8(M, 05) TJ__O8(M, 06) TJ__O8(M, 07)
/* clang-format on */
TJ__O64(TJ__KERNELS)
#define TJ__NAME_BACKEND(n) backend_##n,
#define TJ__NAME_AUTOGRAD(n) autograd_##n,
static const boxed_fn backends[TJ__SLOTS] = {TJ__O64(TJ__NAME_BACKEND)};
static const boxed_fn autograds[TJ__SLOTS] = {TJ__O64(TJ__NAME_AUTOGRAD)};
#define TJ__BACKEND(n) backends[n]
#define TJ__AUTOGRAD(n) autograds[n]
#endif

/* ---- Registration --------------------------------------------------------- */

/* The torch version this file's stack layout is that of (2.10), for
 * torch_library_impl: TORCH_VERSION_2_10_0 of torch/csrc/stable/version.h. */
#define TJ__TORCH_ABI_2_10 ((2ull << 56) | (10ull << 48))

static int impl_for(const char *ns, const char *key, const char *name, boxed_fn fn) {
  void *library = NULL; /* kept: an operator's kernels live as long as the process */
  if (T.library_init_impl(ns, key, __FILE__, __LINE__, &library))
    return torch_failed("torch's Library(IMPL)");
  aoti_error failed = T.library_impl_versioned != NULL
                          ? T.library_impl_versioned(library, name, fn, TJ__TORCH_ABI_2_10)
                          : T.library_impl(library, name, fn);
  return failed ? torch_failed("torch's Library.impl") : TJ_OK;
}

int tj_torch_define(const char *ns, const char *schema) {
  TJ__REFUSE_NULL("tj_torch_define", ns);
  TJ__REFUSE_NULL("tj_torch_define", schema);
  int rc = tj_torch_init();
  if (rc != TJ_OK) return rc;
  void *library = NULL;
  if (T.library_init_fragment(ns, __FILE__, __LINE__, &library))
    return torch_failed("torch's Library(FRAGMENT)");
  if (T.library_def(library, schema)) return torch_failed("defining the operator");
  return TJ_OK;
}

/* tj_torch_impl; *taken is set once a slot holds the kernel (torch may then
 * call it, even when a later registration fails). */
static int impl(const tj_kernel *kernel, const tj_torch_op *op, bool *taken) {
  *taken = false;
  TJ__REFUSE_NULL("tj_torch_impl", kernel);
  TJ__REFUSE_NULL("tj_torch_impl", op);
  TJ__REFUSE_NULL("tj_torch_impl", op->ns);
  TJ__REFUSE_NULL("tj_torch_impl", op->name);
  TJ__REFUSE_NULL("tj_torch_impl", op->inputs);
  int rc = tj_torch_init();
  if (rc != TJ_OK) return rc;
  size_t ninputs = strlen(op->inputs);
  if (ninputs > TJ_MAX_PARAMS || strspn(op->inputs, "Ttifb") != ninputs)
    return tj_set_error(TJ_EVALUE,
                        "tj_torch_impl: inputs '%s': expected one of T, t, i, f, b "
                        "per input, at most %d",
                        op->inputs, TJ_MAX_PARAMS);
  int32_t noutputs = tj_kernel_num_outputs(kernel);
  int32_t order[TJ_MAX_OUTPUTS];
  for (int32_t r = 0; r < noutputs; ++r) {
    order[r] = op->output_order != NULL ? op->output_order[r] : r;
    bool repeated = false;
    for (int32_t q = 0; q < r; ++q) repeated = repeated || order[q] == order[r];
    if (order[r] < 0 || order[r] >= noutputs || repeated)
      return tj_set_error(TJ_EVALUE,
                          "tj_torch_impl: output_order is not a permutation of "
                          "the kernel's %d outputs",
                          noutputs);
  }
  pthread_mutex_lock(&slots_lock);
  int32_t n = nslots < TJ__SLOTS ? nslots++ : -1;
  pthread_mutex_unlock(&slots_lock);
  if (n < 0)
    return tj_set_error(TJ_ERUNTIME, "%s: all %d operator slots of this process are in use",
                        tj_kernel_name(kernel), TJ__SLOTS);
  torch_slot *s = &slots[n];
  *taken = true;
  memcpy(s->order, order, sizeof(order));
  s->kernel = kernel;
  memcpy(s->inputs, op->inputs, ninputs + 1);
  s->ninputs = (int32_t)ninputs;
  s->fallback = op->fallback;
  s->context = op->context;
  s->has_plain = op->plain != NULL && op->plain->tls_symbol != NULL &&
                 strlen(op->plain->tls_symbol) < sizeof(s->tls_symbol) && op->plain->nkeysets > 0 &&
                 op->plain->nkeysets <= TJ_TORCH_MAX_KEYSETS && op->plain->meta_offset >= 0 &&
                 op->plain->keyset_offset >= 0;
  if (s->has_plain) {
    s->plain = *op->plain;
    strcpy(s->tls_symbol, op->plain->tls_symbol);
    s->plain.tls_symbol = s->tls_symbol;
  }
  if ((rc = impl_for(op->ns, "CPU", op->name, TJ__BACKEND(n))) != TJ_OK ||
      (rc = impl_for(op->ns, "CUDA", op->name, TJ__BACKEND(n))) != TJ_OK)
    return rc;
  if (op->fallback != NULL) rc = impl_for(op->ns, "Autograd", op->name, TJ__AUTOGRAD(n));
  return rc;
}

int tj_torch_impl(const tj_kernel *kernel, const tj_torch_op *op) {
  bool taken;
  return impl(kernel, op, &taken);
}

/* ---- Exports -------------------------------------------------------------- */

/* One line of torch_op.txt (tilejit/torch.h), split as open.c splits the
 * export's other text files, into the fields it sets. */
typedef struct {
  char ns[256], schema[4096], inputs[TJ_MAX_PARAMS + 1];
  int32_t order[TJ_MAX_OUTPUTS], norder;
  bool have_order;
} torch_op_text;

static int torch_op_line(const char *dir, int number, tj__line_tokens *t, torch_op_text *op) {
  int64_t v;
  if (number == 1) {
    if (t->n != 2 || strcmp(t->tok[0], "tilejit-torch-op") != 0 ||
        !tj__parse_int(t->tok[1], 1, 1, &v))
      return tj_set_error(TJ_EVALUE,
                          "tilejit export %s: torch_op.txt: line 1: expected "
                          "'tilejit-torch-op 1'",
                          dir);
    return TJ_OK;
  }
  if (t->n == 0 || t->tok[0][0] == '#') return TJ_OK;
  const char *key = t->tok[0];
  if (strcmp(key, "namespace") == 0 && t->n == 2) {
    snprintf(op->ns, sizeof(op->ns), "%.*s", (int)sizeof(op->ns) - 1, t->tok[1]);
  } else if (strcmp(key, "schema") == 0 && t->n >= 2) {
    snprintf(op->schema, sizeof(op->schema), "%.*s", (int)sizeof(op->schema) - 1, t->rest[1]);
  } else if (strcmp(key, "inputs") == 0 && t->n == 2) {
    snprintf(op->inputs, sizeof(op->inputs), "%.*s", (int)sizeof(op->inputs) - 1,
             strcmp(t->tok[1], "-") == 0 ? "" : t->tok[1]);
  } else if (strcmp(key, "order") == 0 && t->n - 1 <= TJ_MAX_OUTPUTS) {
    op->have_order = true;
    for (int32_t i = 1; i < t->n; ++i) {
      if (!tj__parse_int(t->tok[i], 0, TJ_MAX_OUTPUTS - 1, &v))
        return tj_set_error(TJ_EVALUE,
                            "tilejit export %s: torch_op.txt: line %d: expected output "
                            "numbers",
                            dir, number);
      op->order[op->norder++] = (int32_t)v;
    }
  } else {
    return tj_set_error(TJ_EVALUE,
                        "tilejit export %s: torch_op.txt: line %d: unknown entry '%.40s'", dir,
                        number, t->rest[0]);
  }
  return TJ_OK;
}

/* Reads torch_op.txt (`text`, the bytes the core checked) and registers `k` as
 * its operator; *taken as impl's. */
static int register_export(const char *dir, const tj_kernel *k, const char *text, int64_t size,
                           bool *taken) {
  *taken = false;
  int nul = tj__nul_line(text, size);
  if (nul)
    return tj_set_error(TJ_EVALUE, "tilejit export %s: torch_op.txt: line %d: a NUL byte", dir,
                        nul);
  torch_op_text *op = calloc(1, sizeof(*op));
  tj__line_tokens *t = malloc(sizeof(*t));
  char *copy = malloc((size_t)size + 1), *whole = malloc((size_t)size + 1);
  int rc = op && t && copy && whole
               ? TJ_OK
               : tj_set_error(TJ_ENOMEM, "tilejit export %s: out of memory", dir);
  if (rc == TJ_OK) {
    memcpy(copy, text, (size_t)size);
    copy[size] = '\0';
    char *cursor = copy, *line;
    for (int number = 1; rc == TJ_OK && (line = tj__next_line(&cursor)) != NULL; ++number) {
      strcpy(whole, line);
      tj__split(line, whole, t);
      rc = torch_op_line(dir, number, t, op);
    }
  }
  const char *name_end = rc == TJ_OK ? strchr(op->schema, '(') : NULL;
  if (rc == TJ_OK && (op->ns[0] == '\0' || name_end == NULL || name_end == op->schema ||
                      !op->have_order || op->norder != tj_kernel_num_outputs(k)))
    rc = tj_set_error(TJ_EVALUE,
                      "tilejit export %s: torch_op.txt: expected a namespace, a "
                      "schema, the inputs and the order of the kernel's %d "
                      "outputs",
                      dir, tj_kernel_num_outputs(k));
  if (rc == TJ_OK) {
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(name_end - op->schema), op->schema);
    if ((rc = tj_torch_define(op->ns, op->schema)) == TJ_OK) {
      tj_torch_op spec = {op->ns, name, op->inputs, NULL, NULL, NULL, op->order};
      rc = impl(k, &spec, taken);
    }
  }
  free(op);
  free(t);
  free(copy);
  free(whole);
  return rc;
}

int tj_torch_open_export(const char *dir, tj_kernel **out) {
  TJ__REFUSE_NULL("tj_torch_open_export", dir);
  if (out != NULL) *out = NULL;
  int rc = tj_torch_init();
  if (rc != TJ_OK) return rc;
  tj_kernel *k = NULL;
  if ((rc = tj_kernel_open(dir, &k)) != TJ_OK) return rc;
  const char *file = NULL;
  const void *data = NULL;
  int64_t size = 0;
  for (int32_t i = 0; i < tj_kernel_export_num_files(k) && data == NULL; ++i)
    if (tj_kernel_export_file(k, i, &file, &data, &size, NULL) != TJ_OK ||
        strcmp(file, "torch_op.txt") != 0)
      data = NULL;
  bool taken = false;
  if (data == NULL)
    rc = tj_set_error(TJ_EVALUE,
                      "tilejit export %s: no torch_op.txt: the kernel of this export "
                      "cannot be a torch op (export it again with a tilejit that "
                      "writes one)",
                      dir);
  else
    rc = register_export(dir, k, data, size, &taken);
  if (rc != TJ_OK) {
    if (!taken) tj_kernel_free(k); /* else torch may call it: kept, as on success */
    return rc;
  }
  if (out != NULL) *out = k;
  return TJ_OK;
}
