/*
 * tilejit's host ABI: what a binding for a host language (CPython, for the
 * bindings shipped with tilejit) hands the core so that the core can read the
 * host's objects, and the entries such a binding calls. An embedder calling
 * kernels from C needs none of this (tilejit/core.h).
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

/* The host's object operations, filled by the binding (for CPython: the
 * functions named beside each). Caller-owned; borrowed by the core. */
struct tj_host {
  /* PyCapsule_IsValid / PyCapsule_GetPointer / PyCapsule_SetName. */
  int (*capsule_is_valid)(void *capsule, const char *name);
  void *(*capsule_pointer)(void *capsule, const char *name);
  int (*capsule_set_name)(void *capsule, const char *name);
  /* PyObject_Type: a new reference to the object's exact type; Py_DecRef. */
  void *(*object_type)(void *object);
  void (*release)(void *object);
  /* PyTuple_Size / PyTuple_GetItem (a borrowed reference). */
  intptr_t (*sequence_size)(void *sequence);
  void *(*sequence_item)(void *sequence, intptr_t i);
  /* Py_IncRef; PyList_New(0) (a new reference, NULL on failure); PyList_Append
   * (adds its own reference to `item`; 0 on success). */
  void (*retain)(void *object);
  void *(*list_new)(void);
  int (*list_append)(void *list, void *item);
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
  /* PyErr_Occurred: the pending error, or NULL (needed by tj_call_method). */
  void *(*error_pending)(void);
};

/* A prepared call for bindings where every foreign call is dear (ctypes): the
 * kernel, the host, and the producers whose objects it recognises by exact
 * type. Caller-owned; borrowed by tj_call_sequence. `producers` may grow
 * between calls (set the new pointer first, then the count). */
typedef struct tj_call_plan {
  const tj_kernel *kernel;
  const tj_host *host;
  const tj_producer *fallback;
  const tj_producer *const *producers;
  int32_t nproducers;
  void *none;   /* the host's "no value" object (Py_None), returned for no outputs */
  void *failed; /* a host object that stands for "no result" (a sentinel) */
} tj_call_plan;

/* Runs a call whose arguments are the items of `sequence` (a host tuple, read
 * with host->sequence_size/sequence_item) and returns its result as one new
 * host reference: `none` for a kernel without outputs, the output itself for
 * one, a host list of them in declaration order for several. Every item must be
 * an object of the exact type of one of the plan's producers; each is imported
 * with it and the call goes on as tj_call_run.
 *
 * `failed` (retained; never NULL, which a ctypes binding cannot take back as
 * an object) on failure, with the record (tj_last_error_info) saying why: TJ_EDECLINED
 * when some item is of no plan producer's type (nothing was done: the binding
 * classifies the arguments itself and calls tj_call_run), else the call's
 * status and message. Two entries, so that the common call passes two
 * arguments: tj_call_sequence_on adds the explicit stream's handle. */
TJ_API void *tj_call_sequence(const tj_call_plan *plan, void *sequence);
TJ_API void *tj_call_sequence_on(const tj_call_plan *plan, void *sequence, uintptr_t stream);

/* The same call as a function CPython calls directly: tj_call_method has the
 * shape of a METH_O builtin, for bindings with no compiler of their own (the
 * ctypes backend). Such a binding makes one builtin per kernel with
 * PyCFunction_NewEx, its `self` a capsule named TJ_CALL_PLAN_CAPSULE holding
 * the plan; calling it with the argument tuple then costs one C call, with no
 * foreign-function conversion on the way in or out. It returns what
 * tj_call_sequence returns, except that a failure with a host error pending
 * (a producer's exception) returns NULL, leaving the error to propagate.
 * The capsule is read with the host given to tj_call_method_host, once per
 * process, before any such builtin is made (the interpreter's C API; the
 * plan's own host runs the call). */
#define TJ_CALL_PLAN_CAPSULE "tilejit.call_plan"
TJ_API void tj_call_method_host(const tj_host *host);
TJ_API void *tj_call_method(void *self, void *sequence);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_HOST_H_ */
