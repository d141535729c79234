/*
 * tilejit's producer interface: how the core reads host objects it cannot see
 * into (a framework's tensors), through tables of function pointers over
 * opaque handles, like the DLPack C exchange API. For bindings and for
 * programs that hand the core objects rather than tensors; an embedder passing
 * DLTensors needs only tilejit/core.h. Conventions (statuses, ownership words)
 * are those of tilejit/core.h.
 */
#ifndef TILEJIT_PRODUCER_H_
#define TILEJIT_PRODUCER_H_

#include <stdbool.h>
#include <stdint.h>

#include "dlpack/dlpack.h"
#include "tilejit/core.h"
#include "tilejit/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How one kind of host object becomes a tensor (below), and the host's object
 * operations (tilejit/host.h). */
typedef struct tj_producer tj_producer;
typedef struct tj_host tj_host;

/* ---- Statuses and errors of producers and bindings ------------------------- */

/* The statuses only producers and bindings return, beside core.h's
 * TJ_STATUS_MAP (same columns; the codes of the two tables never overlap).
 * tj_status_name and tj_status_exception cover both tables: neither raises an
 * exception class of its own. */
#define TJ_BINDING_STATUS_MAP(X)                                      \
  X(TJ_EPYERR, -5, "")   /* a producer's (Python) error is pending */ \
  X(TJ_ECLAIMED, -7, "") /* a framework takes the call over (tj_claim) */

typedef enum {
#define TJ__BINDING_STATUS_ENUM(name, value, exc) name = value,
  TJ_BINDING_STATUS_MAP(TJ__BINDING_STATUS_ENUM)
#undef TJ__BINDING_STATUS_ENUM
} tj_binding_status;

/* Which step of a producer failed with TJ_EPYERR (tj_error_info.producer). With
 * TJ_EPYERR the message is the prefix ("vec_add: argument 1 'B': cannot import
 * the tensor through DLPack") that the binding joins to the producer's own
 * error. */
typedef enum {
  TJ_PRODUCER_NONE = 0,
  TJ_PRODUCER_IMPORT = 1,   /* turning an argument into a tensor */
  TJ_PRODUCER_ALLOCATE = 2, /* making an output (allocator or to-object) */
  TJ_PRODUCER_STREAM = 3,   /* asking for the current work stream */
  TJ_PRODUCER_CONVERT = 4,  /* reading a scalar argument (the host's conversion) */
} tj_producer_step;

/* A host object in tj_arg.value.p that tj_arg.producer imports (tj_arg_object);
 * tj_call_run_binding makes it a TJ_ARG_TENSOR. A tj_arg_kind beside core.h's. */
#define TJ_ARG_OBJECT 7

/* ---- Producers: how the core reads objects it cannot see into -------------- */

/* The core never looks inside a host object (a Python object, for the bindings
 * shipped with tilejit): it holds opaque handles and calls function pointers
 * over them, as the DLPack C exchange API does. A tj_host gives the few object
 * operations of the host language the core needs; a tj_producer how one kind of
 * object becomes a tensor, how outputs like it are made, and its stream.
 *
 * Producer functions return TJ_OK or a status. TJ_EPYERR means the producer's
 * own error is pending on the host side (a Python exception); the core adds
 * where it happened to the error record (tj_last_error_info) and the binding
 * raises it. Every function is called with the host's lock (the GIL) held. */

/* Lazy views: tensors whose values are not what their memory holds, such as
 * torch's conjugate views (x.conj() of a complex tensor: the values are the
 * conjugates of the memory's) and negative views (x.conj().imag,
 * torch._neg_view(x): the negatives). No DLPack tensor can say so, and a
 * kernel reading the memory would compute with the wrong values, so the core
 * refuses them before import, as the producer reports them
 * (tj_producer.view). */
#define TJ_VIEW_CONJUGATE 1u
#define TJ_VIEW_NEGATIVE 2u

/* Where a host keeps the lazy-view bits of its objects, for reading them with
 * no call into the host: the 64-bit word at byte `word_offset` of the block
 * whose address is stored at byte `block_offset` of the object (for torch: the
 * dispatch key set of the TensorImpl a torch.Tensor points to), with the masks
 * of the two bits in it. The binding finds and verifies the offsets and vouches
 * for them for every object of the producer's type; the core only reads.
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_view_bits {
  int64_t block_offset;
  int64_t word_offset;
  uint64_t conjugate;
  uint64_t negative;
} tj_view_bits;

/* A framework's claim on calls with its objects: such a call is not run by the
 * core but handed back to the binding, which runs it through the framework
 * (torch: the kernel's custom op, so that autograd records it and traced
 * tensors reach its fake implementation). Before importing an object whose
 * producer has a claim, the core asks, cheapest first: - `always` 1: every call
 * is claimed, before anything is imported (tensors a framework traces, which
 * hold no data); - requires_grad (optional, a fast path): the object requires
 * grad when requires_grad(state) is true, `state` being the pointer the object
 * holds at byte `offset` (NULL: it does not); the call is then claimed if
 * grad_enabled() (asked at most once per call) says the framework records
 * gradients now. With `meta_offset` >= 0, a state whose pointer at that byte is
 * NULL has no autograd record at all (torch: TensorImpl's autograd_meta_):
 * nothing is asked for it, it is not claimed; - ask (optional): the framework's
 * own answer for the object, a tj_claim_kind or TJ_EPYERR; when `active` is
 * set, only while active() says the framework is in a mode in which it may
 * claim a call the fast path did not (asked at most once per call). It is also
 * asked, with `failed` 1, when the import of an object fails: a framework may
 * still run the call on tensors DLPack cannot describe (torch's functorch
 * wrappers). A call claimed for an object whose data can be read
 * (TJ_CLAIM_VALIDATED: autograd's calls) is first imported and validated like
 * any call, so that it is refused with the same messages; it then fails with
 * TJ_ECLAIMED before anything is allocated or launched, and the record names
 * the argument.  For torch the fast path reads a tensor's TensorImpl pointer
 * from its Python object and asks libc10's exported
 * c10::TensorImpl::requires_grad() const and c10::GradMode::is_enabled(): a few
 * nanoseconds, where the public answers (Tensor.requires_grad,
 * torch.is_grad_enabled()) cost a call into Python each; tilejit's torch
 * adapter checks all three against torch's own answers before use, and asks
 * the public way (ask alone) when they do not match or TILEJIT_FAST_PATHS=0.
 * Caller-owned; borrowed by the producers that point to it, for as long as
 * they live.
 * tj_claim's compatibility: append-only (fields are added at the end only,
 * never reordered, resized or removed). */
typedef enum {
  TJ_CLAIM_NONE = 0,      /* the core runs the call */
  TJ_CLAIM_VALIDATED = 1, /* claimed once the call is validated */
  TJ_CLAIM_NOW = 2,       /* claimed before any import */
} tj_claim_kind;

typedef struct tj_claim {
  int32_t always;
  int32_t offset;
  bool (*requires_grad)(const void *state);
  bool (*grad_enabled)(void);
  int (*ask)(const struct tj_claim *self, void *object, int32_t failed);
  int (*active)(const struct tj_claim *self);
  void *context; /* the asker's own */
  int32_t meta_offset;
} tj_claim;

/* Makes `arg` an object the call imports through `producer` (TJ_ARG_OBJECT):
 * sets every field the import does not write, so the record needs no
 * tj_arg_init first. Inline: bindings run it for every tensor of every call. */
static inline void tj_arg_object(tj_arg *arg, void *object, const tj_producer *producer);
static inline void tj_arg_object(tj_arg *arg, void *object, const tj_producer *producer) {
  arg->kind = TJ_ARG_OBJECT;
  arg->flags = 0;
  arg->value.p = object;
  arg->type_name = NULL;
  arg->owner_kind = TJ_OWNER_NONE;
  arg->owner = NULL;
  arg->producer = producer;
}

/* A producer: made by the binding (or tj_producer_from_exchange,
 * tj_host_dlpack_producer), alive as long as any argument or type points to it.
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
struct tj_producer {
  /* Makes `arg` (initialised by the caller) a TENSOR from `object`: a borrowed
   * view valid while the object lives (nothing to release) or an owning import
   * (tj_arg_release deletes it). May set arg->producer to the producer that
   * allocates outputs like this tensor (a layout view names its source's);
   * the core sets it to this producer otherwise. */
  int (*import)(const tj_producer *self, void *object, tj_arg *arg);
  /* Allocates a tensor like `prototype` (device, dtype, ndim, shape; compact
   * row-major) and hands it over as a host object: *object receives a new
   * reference the caller owns (also on failure; NULL when none was made) and
   * `out` a TENSOR view or import of it, valid while that object lives.
   * TJ_ERUNTIME with the producer's message when it cannot allocate. */
  int (*allocate)(const tj_producer *self, const DLTensor *prototype, tj_arg *out, void **object);
  /* Writes the producer's current work stream on a device (NULL: none) to
   * *stream. NULL function: the producer has no streams. */
  int (*current_stream)(const tj_producer *self, int32_t device_type, int32_t device_id,
                        void **stream);
  const DLPackExchangeAPI *api; /* tj_producer_from_exchange: the table used */
  void *type;                   /* the exact object type served (opaque), or NULL */
  void *context;                /* the binding's own; the core never reads it */
  const tj_host *host;          /* the host operations it may use, or NULL */
  /* Optional, for producers whose objects can be lazy views, asked before
   * every import: a function that writes the TJ_VIEW_* bits of `object` to
   * *view (0: it holds its values; TJ_EPYERR when the host failed), or, taking
   * precedence, where the bits are (borrowed), read in place with no call into
   * the host. Both NULL: the producer's objects are never lazy views. */
  int (*view)(const tj_producer *self, void *object, uint32_t *view);
  const tj_view_bits *view_bits;
  const tj_claim *claim; /* the framework's claim on calls, or NULL: none */
  /* Optional, a fast path the binding vouches for (torch releases without the
   * exchange API: tj_torch_read_object): reads `object` in place into `out`,
   * every field written (shape and strides borrowed from the object: valid
   * while it lives and keeps its shape; nothing to release), with no call into
   * the host, and returns 0; or returns nonzero, with nothing set or pending,
   * for an object it does not read, which `import` then imports the public
   * way. A call's import (and the producer's allocate, reading back an output
   * it made) tries it first; an owning import (tj_producer_import_owned)
   * never does. `read_context` is handed to it as it is (borrowed). */
  int (*read)(const void *context, void *object, DLTensor *out);
  const void *read_context;
  /* Optional, the same fast path for outputs: makes a host object like
   * `prototype` (dtype, device, shape; compact row-major) with no call into
   * the host's code, a new reference in *object, and returns TJ_OK; returns 1
   * (nothing made) where it does not, and the producer's `allocate` makes it
   * the public way; or a failure status (TJ_EPYERR: the host's error
   * pending). Given `read_context`. The core's __dlpack__ producer
   * (tj_host_dlpack_producer) tries it in its `allocate`. */
  int (*make)(const void *context, const DLTensor *prototype, void **object);
};

/* TJ_OK when `object` holds its values in memory (or its producer knows no lazy
 * views); TJ_EVALUE when it is a lazy view, the message saying which and how
 * to materialise it ("a conjugate view (its conjugate bit is set); materialise
 * it with .resolve_conj()"); TJ_EPYERR from the producer. Borrows both. */
TJ_API int tj_producer_check_view(const tj_producer *producer, void *object);

/* Makes `arg` (initialised by the caller) a TENSOR from `object` that owns what
 * it describes, so that it may outlive the call (a layout view keeps it): the
 * lazy-view check first (tj_producer_check_view), then the exchange API's
 * owning export when the producer has one, else the producer's own import
 * (the core's __dlpack__ producer: the capsule's tensor, owned). The same
 * producer, checks and messages as a call's import. Returns TJ_OK, the view
 * check's status, the import's, or TJ_EPYERR (the producer's error pending;
 * the record says "cannot import the tensor through DLPack", step
 * TJ_PRODUCER_IMPORT). Borrows `object`. */
TJ_API int tj_producer_import_owned(const tj_producer *producer, void *object, tj_arg *arg);

/* How many tables of a prev_api chain tj_producer_from_exchange looks at. */
#define TJ_MAX_EXCHANGE_CHAIN 16

/* Makes `producer` the core's adapter over a DLPack exchange API table, given
 * by the header a type publishes: walks prev_api (at most TJ_MAX_EXCHANGE_CHAIN
 * tables: a chain that loops is refused) to major TJ_DLPACK_MAJOR and
 * requires every function the API says must not be NULL (allocator, owning
 * export, to-object, current work stream); the view function is used when
 * present, else the owning export. `type` is stored (the exact type served).
 * Returns TJ_OK, or TJ_EVALUE (message says why) when the table offers no
 * usable version: the binding then reads such objects through __dlpack__. */
TJ_API int tj_producer_from_exchange(tj_producer *producer, const DLPackExchangeAPIHeader *header,
                                     void *type);

/* Imports a DLPack capsule as __dlpack__ returns it ("dltensor_versioned" or
 * legacy "dltensor"): `arg` takes ownership of the managed tensor and the
 * capsule is renamed "used_*" so that its destructor leaves the tensor alone.
 * Borrows the capsule. TJ_ETYPE when it is no such capsule, TJ_EVALUE for an
 * unsupported DLPack major version (the tensor is deleted at once). */
TJ_API int tj_arg_from_capsule(tj_arg *arg, void *capsule, const tj_host *host);

/* ---- Calls through producers ---------------------------------------------- */

/* What a binding adds to a call (tj_call_run_binding): the producer of outputs
 * when no argument is a tensor, the host whose lock is dropped around the
 * kernel, and whether frameworks may claim it. Caller-owned, usually on the
 * stack; everything in it is borrowed. Compatibility: append-only (fields are
 * added at the end only, never reordered, resized or removed). */
typedef struct tj_call_binding {
  /* Allocates outputs when no argument is a tensor; NULL: such a kernel's
   * outputs cannot be allocated (TJ_ETYPE). (Only tj_call_run and
   * tj_bound_create, with no binding, allocate a CPU kernel's outputs in the
   * core: a binding's outputs are its host's objects.) */
  const tj_producer *fallback;
  const tj_host *host; /* its unlock/lock run around the kernel; may be NULL */
  /* 1: no framework claims the call (tj_claim): it is the framework's own
   * implementation of the call it handed back. */
  int32_t unclaimed;
  /* 1: a call claimed once validated (TJ_CLAIM_VALIDATED) is claimed at the
   * first argument the framework claims it for, before the other arguments are
   * imported or any is validated: for a framework that validates the call
   * itself, or runs it on again without claim_at_once, so that it is refused
   * with the same messages. Bound launches ignore it. */
  int32_t claim_at_once;
} tj_call_binding;

/* tj_call_run (tilejit/core.h) with host objects: `call`'s arguments may also
 * be TJ_ARG_OBJECT entries (made by tj_arg_object), imported by the core
 * through their producer; the rest are used as they are. The steps:
 *   1. the argument count;
 *   2. imports each TJ_ARG_OBJECT argument with its producer, unless the
 *      producer's framework claims the call at once (tj_claim: TJ_ECLAIMED);
 *   3. validates every argument and binds the symbols (tj_call_bind); a call
 *      claimed after validation stops here with TJ_ECLAIMED (with
 *      binding->claim_at_once, at step 2);
 *   4. the stream: explicit > the current work stream of the first tensor's
 *      producer (devices other than the CPU) > none;
 *   5. allocates each output with the first tensor's producer (or
 *      binding->fallback) and validates it (tj_call_set_output);
 *   6. launches (tj_call_launch) with binding->host's lock dropped;
 *   7. releases every owning import, inputs and outputs, success or not.
 * `binding` NULL is tj_call_run. */
TJ_API int tj_call_run_binding(const tj_kernel *kernel, tj_call *call,
                               const tj_call_binding *binding);

/* tj_bound_create (tilejit/core.h) with host objects, as tj_call_run_binding
 * runs a call: TJ_ARG_OBJECT arguments are imported through their producers
 * and kept imported for the bound launch's life; outputs and workspaces come
 * from the first tensor's producer (or binding->fallback) and are released
 * by tj_bound_free with binding->host's release (else the producer's host's);
 * each tj_bound_launch asks the producer for its current stream when none is
 * given, and drops binding->host's lock around the launch. A call a framework
 * claims (a tensor that requires grad) cannot be bound: TJ_ETYPE naming the
 * argument. `binding` is copied; NULL is tj_bound_create. */
TJ_API int tj_bound_create_binding(const tj_kernel *kernel, tj_call *call,
                                   const tj_call_binding *binding, tj_bound **out);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_PRODUCER_H_ */
