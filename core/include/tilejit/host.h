/*
 * tilejit's host ABI: the binding layer between a host language's objects and
 * the core, written once in C (core/src/host.c) for every binding shipped
 * with tilejit. A binding fills one tj_host with the host's object operations
 * (for CPython: the C API functions named beside each field) and the host
 * functions tilejit calls back (tilejit.runtime.binding), makes one
 * tj_host_plan per kernel, and calls tj_host_call. Everything a call does to
 * host objects happens here:
 *   - classifying each argument (None, bool, int, float, tensors of the types
 *     a producer serves, addresses, NumPy-style scalars, anything else);
 *   - the registry of producers and scalar kinds per host type, and its memo;
 *   - the stream= keyword, the result (None, one output, a list in the
 *     kernel's output order) and the exception of a failed call.
 * The core's sequencer (tj_call_run) does the rest. An embedder calling
 * kernels from C needs none of this (tilejit/core.h).
 *
 * Every function here is called with the host's lock (the GIL) held.
 */
#ifndef TILEJIT_HOST_H_
#define TILEJIT_HOST_H_

#include <stdbool.h>
#include <stdint.h>

#include "tilejit/core.h"
#include "tilejit/export.h"
#include "tilejit/producer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The status codes a binding maps to exception classes (tj_host.exceptions
 * is indexed by -code). Fixed, as tj_host is append-only: a status added later
 * raises tj_host.exceptions[-TJ_ERUNTIME]. */
#define TJ_HOST_NUM_STATUS 8

/* The host's object operations and tilejit's host functions. One per process is
 * enough; caller-owned, alive for as long as any plan or producer points to it.
 * "New" results are new references the core releases; NULL results mean a host
 * error is pending. Compatibility: append-only (fields are added at the end
 * only, never reordered, resized or removed); a field added later is optional,
 * NULL or -1 keeping the behaviour before it. */
struct tj_host {
  /* PyCapsule_IsValid / PyCapsule_GetPointer / PyCapsule_SetName. */
  int (*capsule_is_valid)(void *capsule, const char *name);
  void *(*capsule_pointer)(void *capsule, const char *name);
  int (*capsule_set_name)(void *capsule, const char *name);
  /* PyObject_Type: a new reference to the object's exact type; Py_DecRef. */
  void *(*object_type)(void *object);
  void (*release)(void *object);
  /* Optional: the byte offset at which every object keeps a pointer to its
   * exact type (for CPython, offsetof(PyObject, ob_type), as a binding compiled
   * against the interpreter's headers states it), read in place; -1: the core
   * asks object_type and release. */
  intptr_t type_offset;
  /* PyTuple_Size / PyTuple_GetItem (borrowed) / PyTuple_New (new) /
   * PyTuple_SetItem (steals `item`; 0 on success). */
  intptr_t (*sequence_size)(void *sequence);
  void *(*sequence_item)(void *sequence, intptr_t i);
  void *(*tuple_new)(intptr_t n);
  int (*tuple_set)(void *tuple, intptr_t i, void *item);
  /* Py_IncRef; PyList_New (new); PyList_SetItem (steals `item`). */
  void (*retain)(void *object);
  void *(*list_new)(intptr_t n);
  int (*list_set)(void *list, intptr_t i, void *item);
  /* PyLong_AsLongLongAndOverflow; PyLong_AsUnsignedLongLong; PyFloat_AsDouble
   * (any object with __float__); PyNumber_Index (new); PyObject_IsTrue;
   * PyLong_FromLongLong (new); PyUnicode_FromString (new, UTF-8). */
  long long (*int64_of)(void *object, int *overflow);
  unsigned long long (*uint64_of)(void *object);
  double (*double_of)(void *object);
  void *(*index_of)(void *object);
  int (*truth)(void *object);
  void *(*int_new)(long long value);
  void *(*string_new)(const char *text);
  /* PyUnicode_CompareWithASCIIString: 0 when the string equals `ascii`. */
  int (*string_compare)(void *string, const char *ascii);
  /* PyObject_GetAttrString (new); PyObject_CallObject (new; args a tuple). */
  void *(*attribute)(void *object, const char *name);
  void *(*call)(void *callable, void *args);
  /* PyErr_Occurred (borrowed, or NULL); PyErr_Clear; PyErr_Fetch and
   * PyErr_NormalizeException (new references); PyErr_SetString;
   * PyErr_SetObject; PyException_SetCause (steals `cause`). */
  void *(*error_pending)(void);
  void (*error_clear)(void);
  void (*error_fetch)(void **type, void **value, void **traceback);
  void (*error_normalize)(void **type, void **value, void **traceback);
  void (*error_set)(void *type, const char *message);
  void (*error_set_object)(void *type, void *value);
  void (*exception_set_cause)(void *exception, void *cause);
  /* PyErr_Restore (steals all three); PyDict_GetItemWithError (borrowed, or
   * NULL: no such item, or an error pending). */
  void (*error_restore)(void *type, void *value, void *traceback);
  void *(*dict_item)(void *dict, void *key);
  /* Drops the lock around the kernel and takes it back (PyEval_SaveThread /
   * PyEval_RestoreThread). unlock may return NULL to say it kept the lock; lock
   * is then not called. unlock NULL: the kernel runs with the lock held. */
  void *(*unlock)(void);
  void (*lock)(void *token);
  /* Optional: PyInterpreterState_Get / PyInterpreterState_ThreadHead /
   * PyThreadState_Next. When given, the lock is kept while the interpreter has
   * one thread: no thread can be waiting for it, and handing it over and back
   * (a mutex and a condition variable) would cost a fifth of a no-op call. */
  void *(*interpreter)(void);
  void *(*thread_head)(void *interpreter);
  void *(*thread_next)(void *thread);

  /* Objects: None, True, and the exact types int, float and bool. */
  void *none;
  void *true_object;
  void *int_type;
  void *float_type;
  void *bool_type;
  /* The exception class raised for each failing status, by -code (TJ_ETYPE:
   * TypeError, ...; tj_status_exception names them). */
  void *exceptions[TJ_HOST_NUM_STATUS];

  /* tilejit's host functions (tilejit.runtime.binding), each a callable:
   * describe(type, exchange) -> the address of the type's tj_host_type,
   *   asked once per type and mode;
   * dlpack_capsule(obj) -> a DLPack capsule of obj;
   * allocate(type, shape, (code, bits, lanes), (device_type, device_id)) ->
   *   a new tensor made by the framework of objects of `type`;
   * framework_stream(type, device_type, device_id) -> a stream handle (int);
   * stream_handle(stream, kernel_name) -> the handle of a stream= value;
   * lazy_view(obj) -> its TJ_VIEW_* bits;
   * producer_error(prefix, step, exception, obj) -> the exception to raise
   *   for a producer's failure (tj_producer_step);
   * claims(obj, failed) -> how the framework of obj claims a call with it
   *   (tj_claim_kind; tj_host_claim_ask). */
  void *describe;
  void *dlpack_capsule;
  void *allocate;
  void *framework_stream;
  void *stream_handle;
  void *lazy_view;
  void *producer_error;
  void *claims;

  /* Optional: the byte offset at which an exact float (float_type) keeps its
   * double (for CPython, offsetof(PyFloatObject, ob_fval), the field
   * PyFloat_AS_DOUBLE reads, as a binding compiled against the interpreter's
   * headers states it), read in place; -1: the core asks double_of. */
  intptr_t float_value_offset;

  /* Optional, like float_value_offset: where an exact int (int_type) of one
   * digit keeps its value, read in place (for CPython, PyLongObject as a
   * binding compiled against the interpreter's headers states it, after
   * checking it on that interpreter). int_layout TJ_HOST_INT_SIZE: a signed
   * digit count (intptr_t) at int_head_offset, the value's sign (ob_size,
   * CPython 3.11 and older); TJ_HOST_INT_TAG: a tag (uintptr_t) there whose
   * two low bits are the sign (0 positive, 1 zero, 2 negative) and whose bits
   * from the fourth up are the digit count (lv_tag, CPython 3.12 and newer);
   * the first digit, 30 bits in a uint32_t, at int_digit_offset. Any other
   * int_layout (-1): the core asks int64_of. */
  intptr_t int_layout;
  intptr_t int_head_offset;
  intptr_t int_digit_offset;
};

/* tj_host.int_layout. */
enum { TJ_HOST_INT_SIZE = 1, TJ_HOST_INT_TAG = 2 };

/* How arguments of one host type are read (tj_host_type.kind). */
typedef enum {
  TJ_HOST_TENSOR = 1,  /* `producer` imports them */
  TJ_HOST_POINTER = 2, /* tilejit.Pointer: .address, .dlpack_dtype, .dlpack_device_type */
  TJ_HOST_BOOL = 3,    /* a bool by truth (numpy.bool_) */
  TJ_HOST_INDEX = 4,   /* an integer through __index__ (numpy.int32, IntEnum) */
  TJ_HOST_FLOAT = 5,   /* a float through __float__ (numpy.float32) */
  TJ_HOST_OTHER = 6,   /* none of these: refused by any parameter, named */
} tj_host_kind;

/* What tj_host.describe answers for a type: how its objects are read, and the
 * name messages give it ("numpy.float32"). Made by the binding, alive for the
 * process (the registry keeps the address); borrowed by the core.
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_host_type {
  int32_t kind; /* tj_host_kind */
  const tj_producer *producer;
  const char *name;
} tj_host_type;

/* One kernel's call, prepared once by the binding. Caller-owned, alive as long
 * as the kernel object; borrowed by tj_host_call. Compatibility: append-only
 * (fields are added at the end only, never reordered, resized or removed). */
typedef struct tj_host_plan {
  const tj_kernel *kernel;
  const tj_host *host;
  int32_t exchange;            /* 1: producers' DLPack exchange API first; 0: __dlpack__ only */
  const int32_t *out_order;    /* position j returns output out_order[j]; NULL: in order */
  const tj_producer *fallback; /* allocates outputs of calls with no tensor */
  void *name;                  /* the kernel's name, a host string */
  void *kernel_object;         /* the kernel's host object (borrowed: it owns the plan) */
  /* kernel_object's functions for calls the core does not run itself:
   * keywords(kernel, items, kwnames) for inputs given by name (items: the
   * positional arguments, then the keywords' values), and
   * claimed(kernel, args, stream) for calls a framework claims (tj_claim). */
  void *keywords;
  void *claimed;
  /* 1: no framework claims a call of this plan (the framework's own
   * implementation of the kernel, tj_call_binding.unclaimed). */
  int32_t unclaimed;
  /* 1: the kernel has an input named `stream`, which stream= passes; the
   * launch stream is then the framework's current one. 0: stream= is the
   * launch stream. */
  int32_t stream_is_input;
  /* 1: calls without stream= are claimed at once (tj_call_binding
   * .claim_at_once): `claimed` validates them itself, or calls the kernel
   * again through a plan without it. */
  int32_t claim_at_once;
  /* Optional (NULL: every claimed call goes to `claimed`): a call claimed at
   * once with all of the kernel's inputs goes to record(*args) instead, which
   * runs and validates it, when each argument is None or an object whose exact
   * type is one of record_types (NULL entries unused) for which
   * record_wrapped(object) is false, each record_off() that is set is false,
   * and record_mode's scope holds its idle object at its key
   * (tj_host_claim_mode; NULL: not asked). A result that is a tuple (a kernel
   * of several outputs) is returned as a list. An answer that cannot be had
   * (an exception) sends the call to `claimed`. torch: the C apply of the
   * kernel's autograd.Function; torch.Tensor and torch.nn.Parameter; functorch's
   * wrapped-tensor test; inference mode and functorch's transforms;
   * forward-mode AD's level. All borrowed, alive as long as the plan. */
  void *record;
  void *record_types[2];
  void *record_wrapped;
  void *record_off[2];
  const struct tj_host_claim_mode *record_mode;
  /* Optional (NULL: the functions above are asked every time): a quicker
   * answer to two of those questions, never a different one.
   * record_plain(record_plain_context, NULL) is 1 when neither record_off()
   * can be true on this thread, and record_plain(context, object) is 1 when
   * record_wrapped(object) is false; 0 when it cannot tell, and the function
   * is asked. torch: tj_torch_plain_object. */
  int (*record_plain)(const void *context, const void *object);
  const void *record_plain_context;
} tj_host_plan;

/* Makes `producer` the core's producer for objects of host type `type` read
 * through __dlpack__ and tilejit's host functions (tj_host.dlpack_capsule,
 * allocate, framework_stream). */
TJ_API void tj_host_dlpack_producer(tj_producer *producer, const tj_host *host, void *type);

/* Makes `producer` ask tj_host.lazy_view whether an object is a lazy view (for
 * a framework whose view bits cannot be read in place). */
TJ_API void tj_host_ask_view(tj_producer *producer);

/* A framework's claim asked through the host (tj_claim.ask = tj_host_claim_ask,
 * tj_claim.context = a tj_host_claim_mode): the core asks
 * tj_host.claims(object, failed). With tj_claim.active = tj_host_claim_active,
 * it is asked only while the framework is in a mode in which it may claim a
 * call that the claim's fast path did not: while `scope` (a host dict) holds at
 * `key` (a host string) an object other than `idle` (torch: forward-mode AD's
 * current level, the int -1 outside any, one object in CPython). All three
 * alive for the process; scope is unused without tj_host_claim_active.
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_host_claim_mode {
  const tj_host *host;
  void *scope;
  void *key;
  void *idle;
} tj_host_claim_mode;
TJ_API int tj_host_claim_ask(const tj_claim *claim, void *object, int32_t failed);
TJ_API int tj_host_claim_active(const tj_claim *claim);

/* Runs a call of the plan's kernel with CPython's vectorcall convention:
 * `nargsf` positional arguments in `args` (the top bit is the vectorcall
 * offset flag, ignored), followed by the values of the keywords named in
 * `kwnames` (a host tuple of strings, or NULL). Returns a new reference to the
 * result: None for a kernel without outputs, the output for one, a list in
 * the plan's output order for several; or NULL with a host exception set
 * (the core's status as tj_host.exceptions names it, the message naming the
 * kernel and the argument; a producer's own error through producer_error). */
TJ_API void *tj_host_call(const tj_host_plan *plan, void *const *args, size_t nargsf,
                          void *kwnames);

/* The same call as a builtin function CPython calls directly, for bindings
 * with no compiler of their own (the ctypes backend): tj_host_method has the
 * shape of a METH_FASTCALL | METH_KEYWORDS function whose `self` is a capsule
 * named TJ_HOST_PLAN_CAPSULE holding the plan. The capsule is read with the
 * host given to tj_host_method_install, once per process before any such
 * builtin is called. */
#define TJ_HOST_PLAN_CAPSULE "tilejit.host_plan"
TJ_API void tj_host_method_install(const tj_host *host);
TJ_API void *tj_host_method(void *self, void *const *args, intptr_t nargs, void *kwnames);

/* Bound launches (tj_bound, tilejit/core.h) for bindings, as objects of a
 * type the binding makes once (with the host's own type machinery) whose
 * instances keep a tj_host_bound_fields right after the host's object header,
 * of the size given once to tj_host_bound_layout; the type's vectorcall offset
 * is that of `vectorcall`, so that a call of the object reaches
 * tj_host_bound_vectorcall with the arguments in place.
 *
 * tj_host_bind_method, a builtin of tj_host_method's shape whose `self` is a
 * plan capsule (TJ_HOST_PLAN_CAPSULE), binds a call of the plan's kernel with
 * the positional arguments (no keywords: the binding maps inputs given by name
 * first) and returns a new tuple (address, result): `result` the outputs as a
 * call returns them, `address` (an int) that of a new host bound launch, which
 * retains the arguments and the plan's kernel object. On failure: NULL with the
 * exception a call raises. The binding hands the address at once to
 * tj_host_bound_attach, with a new object of its type (fields zeroed), the
 * kernel object, the result and a list of the bound inputs (each retained);
 * the object owns the bound launch from then on, until tj_host_bound_finalize
 * (the type's finalizer) releases it all. tj_host_bound_traverse visits the
 * retained objects (the type's garbage-collector traversal).
 *
 * A call of the object launches again, taking only stream= (None: the
 * producer's current stream, asked at this launch), and returns the outputs as
 * the call did. tj_host_bound_update_method(position, tensor), a method of the
 * type (fast call), swaps the tensor argument at `position` (tj_bound_update)
 * and returns None. */
typedef struct {
  void *vectorcall; /* tj_host_bound_vectorcall once attached, else NULL */
  void *bound;      /* the host bound launch (owned) */
  void *kernel;     /* the kernel object (retained) */
  void *outputs;    /* the outputs, as the bind returned them (retained) */
  void *inputs;     /* the binding's record of the bound inputs (retained) */
} tj_host_bound_fields;
TJ_API void *tj_host_bind_method(void *self, void *const *args, intptr_t nargs, void *kwnames);
TJ_API void tj_host_bound_layout(intptr_t header);
TJ_API int tj_host_bound_attach(void *object, intptr_t address, void *kernel, void *outputs,
                                void *inputs);
TJ_API void tj_host_bound_finalize(void *object);
TJ_API int tj_host_bound_traverse(void *object, int (*visit)(void *, void *), void *arg);
TJ_API void *tj_host_bound_vectorcall(void *self, void *const *args, size_t nargsf, void *kwnames);
TJ_API void *tj_host_bound_update_method(void *self, void *const *args, intptr_t nargs,
                                         void *kwnames);

/* The registry's answer for `type` in a mode (asking tj_host.describe on the
 * first sight of the type): borrowed, or NULL with a host error pending. */
TJ_API const tj_host_type *tj_host_type_of(const tj_host *host, void *type, int32_t exchange);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_HOST_H_ */
