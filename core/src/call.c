/*
 * The call sequencer: every backend's kernel call runs through tj_call_run, so
 * the order of import, validation, stream choice, output allocation, launch
 * and release is written once. A bound launch (tj_bound) runs the same steps
 * up to the launch once, packs the launch, and replays it.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "launch.h"
#include "memo.h"
#include "target_cuda.h"
#include "validate.h"

/* The label of caller argument `position` ("argument 1 'B'"). */
static const tj__param *input_param(const tj_kernel *k, int32_t position) {
  for (int32_t i = 0; i < k->nparams; ++i)
    if (k->params[i].position == position) return &k->params[i];
  return NULL;
}

static int import_failed(const tj_kernel *k, int32_t position, int rc) {
  const tj__param *p = input_param(k, position);
  const char *name = p ? p->name : "?";
  if (rc == TJ_EPYERR) {
    tj_set_error(rc, "%s: argument %d '%s': cannot import the tensor through DLPack", k->name,
                 position, name);
    return tj_error_at(rc, position, -1, TJ_PRODUCER_IMPORT);
  }
  tj__prefix_error(rc, "%s: argument %d '%s': cannot import the tensor through DLPack: ", k->name,
                   position, name);
  return tj_error_at(rc, position, -1, TJ_PRODUCER_NONE);
}

/* One wording for every producer, whether its error is the core's (an
 * exchange API allocator) or pending on the host (a framework's allocator). */
/* A lazy view: refused with the argument's label, before any import. */
static int view_refused(const tj_kernel *k, int32_t position, int rc) {
  if (rc == TJ_EPYERR) return import_failed(k, position, rc);
  const tj__param *p = input_param(k, position);
  tj__prefix_error(rc, "%s: argument %d '%s': ", k->name, position, p ? p->name : "?");
  return tj_error_at(rc, position, -1, TJ_PRODUCER_NONE);
}

static int output_failed(const tj_kernel *k, int32_t o, int rc) {
  const char *name = k->params[k->output_params[o]].name;
  const char *what = o < k->noutputs ? "output" : "workspace";
  if (rc == TJ_EPYERR) {
    tj_set_error(rc, "%s: %s '%s': cannot allocate the %s", k->name, what, name, what);
    return tj_error_at(rc, -1, o, TJ_PRODUCER_ALLOCATE);
  }
  tj__prefix_error(rc, "%s: %s '%s': cannot allocate the %s: ", k->name, what, name, what);
  return tj_error_at(rc, -1, o, TJ_PRODUCER_NONE);
}

/* The call handed back to the framework for argument `i` (tj_claim). */
static int claimed_by(const tj_kernel *k, int32_t i, const char *why) {
  const tj__param *p = input_param(k, i);
  return tj__set_argument_error(TJ_ECLAIMED, k->name, i, p ? p->name : "?", why);
}

/* The framework's answers for one call, each asked at most once (-1: not yet). */
typedef struct {
  int grad_enabled;
  int active;
} claim_state;

/* How the producer's framework claims the call for `object` (tj_claim_kind),
 * or TJ_EPYERR. */
static int claim_of(const tj_claim *claim, void *object, claim_state *state) {
  if (claim->always) return TJ_CLAIM_NOW;
  if (claim->requires_grad != NULL) {
    const void *impl = *(void *const *)((const char *)object + claim->offset);
    if (impl != NULL && claim->requires_grad(impl)) {
      if (state->grad_enabled < 0) state->grad_enabled = claim->grad_enabled();
      if (state->grad_enabled) return TJ_CLAIM_VALIDATED;
    }
  }
  if (claim->ask == NULL) return TJ_CLAIM_NONE;
  if (claim->active != NULL) {
    if (state->active < 0) state->active = claim->active(claim) != 0;
    if (!state->active) return TJ_CLAIM_NONE;
  }
  return claim->ask(claim, object, 0);
}

/* Imports one OBJECT argument, caller argument `i`; *claimed set to `i` when
 * the framework claims the call once it is validated (`at_once`: claimed here,
 * tj_call_binding.claim_at_once). Inline: every tensor of every call passes
 * here. */
static inline __attribute__((always_inline)) int import_one(const tj_kernel *k, tj_arg *arg,
                                                            int32_t i, int32_t unclaimed,
                                                            int32_t at_once, claim_state *state,
                                                            int32_t *claimed) {
  /* The binding made the record with tj_arg_object: only what names the
   * object is cleared, and the import fills the rest. */
  const tj_producer *producer = arg->producer;
  void *object = arg->value.p;
  if (producer == NULL || producer->import == NULL) {
    arg->kind = TJ_ARG_NONE;
    arg->producer = NULL;
    return import_failed(k, i,
                         tj_set_error(TJ_ETYPE, "the binding gave no producer for the object"));
  }
  const tj_claim *claim = unclaimed ? NULL : producer->claim;
  if (claim != NULL && !tj__no_autograd_record(claim, object)) {
    int kind = claim_of(claim, object, state);
    if (kind == TJ_CLAIM_NOW) return claimed_by(k, i, "a tensor the framework traces");
    if (kind < 0) {
      tj_set_error(kind, "%s: argument %d: the framework's claim", k->name, i);
      return tj_error_at(kind, i, -1, TJ_PRODUCER_NONE);
    }
    if (kind == TJ_CLAIM_VALIDATED && *claimed < 0) {
      if (at_once) return claimed_by(k, i, "requires grad");
      *claimed = i;
    }
  }
  arg->kind = TJ_ARG_NONE;
  arg->producer = NULL;
  /* Lazy views: the common case (bits read in place, none set) inline. */
  int rc;
  if (tj__may_be_view(producer, object) && (rc = tj_producer_check_view(producer, object)) != TJ_OK)
    return view_refused(k, i, rc);
  if (producer->import == tj__exchange_import) {
    rc = tj__exchange_import_inline(producer, object, arg);
  } else if (producer->read != NULL &&
             producer->read(producer->read_context, object, &arg->tensor) == 0) {
    arg->kind = TJ_ARG_TENSOR; /* read in place: a view, nothing owed */
    rc = TJ_OK;
  } else {
    rc = producer->import(producer, object, arg);
  }
  if (arg->producer == NULL) arg->producer = producer;
  if (rc != TJ_OK) {
    /* A tensor DLPack cannot describe may still be one the framework runs. */
    if (claim != NULL && claim->ask != NULL && claim->ask(claim, object, 1) > 0)
      return claimed_by(k, i, "a tensor only the framework can read");
    return import_failed(k, i, rc);
  }
  return TJ_OK;
}

/* Imports the OBJECT arguments; each names its producer. Sets *owned to 0
 * when it saw every argument and none owes a deleter call, and *claimed to the
 * first argument for which the framework claims the call once it is validated
 * (-1: none). `unclaimed`: claims are not asked (tj_call_binding.unclaimed);
 * `at_once`: such a claim stops the imports there (claim_at_once). */
/* Inline: the direct call's hot path (a bound launch's bind shares it). */
static inline __attribute__((always_inline)) int import_args(const tj_kernel *k, tj_arg *args,
                                                             int32_t nargs, int32_t unclaimed,
                                                             int32_t at_once, int32_t *owned,
                                                             int32_t *claimed) {
  claim_state state = {-1, -1};
  int32_t any = 0;
  *owned = 1;
  *claimed = -1;
  for (int32_t i = 0; i < nargs; ++i) {
    tj_arg *arg = &args[i];
    if (arg->kind == TJ_ARG_OBJECT) {
      int rc = import_one(k, arg, i, unclaimed, at_once, &state, claimed);
      if (rc != TJ_OK) return rc;
    }
    any |= arg->owner_kind;
  }
  *owned = any;
  return TJ_OK;
}

/* The stream a launch on `device` runs on: the call's, else the producer's
 * current one (asked at every launch, never kept); *stream is left as it is
 * when neither says (a CPU kernel). */
static int choose_stream(const tj_kernel *k, const tj_call *call, const tj_producer *like,
                         DLDevice device, void **stream) {
  if (call->has_stream) {
    *stream = call->stream;
    return TJ_OK;
  }
  if (device.device_type == kDLCPU || like == NULL || like->current_stream == NULL) return TJ_OK;
  int rc = like->current_stream(like, device.device_type, device.device_id, stream);
  if (rc == TJ_EPYERR) {
    tj_set_error(rc, "%s: the producer's current stream", k->name);
    return tj_error_at(rc, -1, -1, TJ_PRODUCER_STREAM);
  }
  return rc;
}

/* ---- The core's allocator of host outputs ------------------------------------ */

/* A call made from C with no producer to allocate with (tj_call_run,
 * tj_bound_create: no tensor argument made by one; core_allocates) gets the
 * outputs and workspaces of a CPU kernel from here: each a DLManagedTensor in
 * host memory, compact row-major, its data aligned to the parameter's `align`
 * and at least HOST_ALIGN bytes, deleted by its own deleter. They are owned
 * and released as a producer's objects are, through host_outputs.release. */
#define HOST_ALIGN 64

typedef struct {
  DLManagedTensor managed; /* first: the object handed out is its address */
  int64_t shape[TJ_MAX_NDIM];
} host_tensor;

static void host_tensor_delete(DLManagedTensor *managed) {
  if (managed == NULL) return;
  free(managed->dl_tensor.data);
  free(managed);
}

static void host_tensor_release(void *object) {
  DLManagedTensor *managed = object;
  managed->deleter(managed);
}

static const tj_host host_outputs = {.release = host_tensor_release, .type_offset = -1};

/* The bytes of a compact tensor of `ndim` dims `shape` and `dtype`, or -1 when
 * they do not fit in a size_t. */
static int64_t host_bytes(int32_t ndim, const int64_t *shape, DLDataType dtype) {
  uint64_t bits = (uint64_t)dtype.bits * (dtype.lanes ? dtype.lanes : 1);
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] < 0) return -1;
    if (shape[d] == 0) return 0;
    if (__builtin_mul_overflow(bits, (uint64_t)shape[d], &bits)) return -1;
  }
  uint64_t bytes = bits / 8 + (bits % 8 != 0);
  return bytes > (uint64_t)INT64_MAX || bytes > (uint64_t)SIZE_MAX ? -1 : (int64_t)bytes;
}

/* Allocates output or workspace `o` of `k` as the frame shapes it. */
static int host_allocate(const tj_kernel *k, int32_t o, const tj_frame *frame, tj_arg *out,
                         void **object) {
  int64_t bytes = host_bytes(frame->out_ndim[o], frame->out_shape[o], frame->out_dtype[o]);
  if (bytes < 0) return tj_set_error(TJ_EVALUE, "its size does not fit in memory");
  int64_t align = k->params[k->output_params[o]].align;
  if (align < HOST_ALIGN) align = HOST_ALIGN;
  host_tensor *t = calloc(1, sizeof(*t));
  void *data = NULL;
  /* Rounded up to the alignment, and never 0 bytes, so that data is not NULL. */
  size_t size = ((size_t)bytes + (size_t)align - 1) & ~((size_t)align - 1);
  if (t == NULL || size < (size_t)bytes ||
      posix_memalign(&data, (size_t)align, size ? size : (size_t)align) != 0) {
    free(t);
    return tj_set_error(TJ_ENOMEM, "out of memory for %lld bytes", (long long)bytes);
  }
  DLTensor *dl = &t->managed.dl_tensor;
  for (int32_t d = 0; d < frame->out_ndim[o]; ++d) t->shape[d] = frame->out_shape[o][d];
  dl->data = data;
  dl->device.device_type = kDLCPU;
  dl->device.device_id = 0;
  dl->ndim = frame->out_ndim[o];
  dl->dtype = frame->out_dtype[o];
  dl->shape = t->shape;
  dl->strides = NULL;
  dl->byte_offset = 0;
  t->managed.manager_ctx = NULL;
  t->managed.deleter = host_tensor_delete;
  *object = &t->managed;
  tj_arg_from_dltensor(out, dl, 0);
  return TJ_OK;
}

/* Whether a call's outputs come from host_allocate: a call through the
 * embedding API (tj_call_run, tj_bound_create: no binding, whose outputs would
 * have to be its host's or its framework's objects) with no producer to
 * allocate them. */
static int core_allocates(const tj_producer *like, const tj_call_binding *binding) {
  return binding == NULL && (like == NULL || like->allocate == NULL);
}

/* Allocates the outputs and the workspaces: objects[o] the host object made
 * for each (outputs, then workspaces; NULL where none was made), the caller's
 * to release also on failure; with `core` (core_allocates), by host_allocate. */
static int allocate_outputs(const tj_kernel *k, const tj_producer *like, int core, tj_frame *frame,
                            tj_arg *outs, void **objects) {
  for (int32_t o = 0; o < k->nallocs; ++o) {
    const char *name = k->params[k->output_params[o]].name;
    const char *what = o < k->noutputs ? "output" : "workspace";
    if (core && k->target != TJ_TARGET_CPU)
      return tj_error_at(tj_set_error(TJ_ETYPE,
                                      "%s: %s '%s': no producer to allocate it on the device "
                                      "(the core allocates a CPU kernel's outputs only): pass one "
                                      "that allocates (a tensor argument's, or "
                                      "tj_call_binding.fallback), or allocate it yourself "
                                      "(tj_call_bind, then tj_call_set_output)",
                                      k->name, what, name),
                         -1, o, TJ_PRODUCER_NONE);
    if (!core && (like == NULL || like->allocate == NULL))
      return tj_error_at(tj_set_error(TJ_ETYPE,
                                      "%s: %s '%s': no tensor argument to allocate it like, "
                                      "and no default allocator",
                                      k->name, what, name),
                         -1, o, TJ_PRODUCER_NONE);
    int rc;
    if (core) {
      rc = host_allocate(k, o, frame, &outs[o], &objects[o]);
    } else {
      DLTensor proto;
      memset(&proto, 0, sizeof(proto));
      proto.device = frame->device;
      proto.ndim = frame->out_ndim[o];
      proto.dtype = frame->out_dtype[o];
      proto.shape = frame->out_shape[o];
      rc = like->allocate(like, &proto, &outs[o], &objects[o]);
    }
    if (rc != TJ_OK) return output_failed(k, o, rc);
    if ((rc = tj_call_set_output(frame, o, &outs[o])) != TJ_OK) return rc;
  }
  return TJ_OK;
}

/* Whether the host's lock is dropped around the kernel: not when the host
 * says the interpreter has one thread (tj_host.thread_head). */
static void *unlock(const tj_host *host) {
  if (host == NULL || host->unlock == NULL) return NULL;
  if (host->thread_head != NULL) {
    void *head = host->thread_head(host->interpreter());
    if (head != NULL && host->thread_next(head) == NULL) return NULL;
  }
  return host->unlock();
}

static int launch(const tj_host *host, tj_frame *frame) {
  void *token = unlock(host);
  int rc = tj_call_launch(frame);
  if (token != NULL) host->lock(token);
  return rc;
}

/* A call the memo packed (launch.h), on the stream the frame's steps below
 * would choose: no output or workspace to allocate. */
int tj__call_hit(const tj_kernel *k, const tj_call *call, const tj_call_binding *b,
                 const tj__hit *hit) {
  void *stream = call->has_stream ? call->stream : NULL;
  int rc;
  if (k->target == TJ_TARGET_CUDA) { /* a CPU kernel has no stream to ask for */
    const tj_producer *like =
        hit->first_tensor >= 0 ? call->args[hit->first_tensor].producer : b->fallback;
    if ((rc = choose_stream(k, call, like, hit->device, &stream)) != TJ_OK) return rc;
  }
  void *token = unlock(b->host);
  rc = tj__launch_values(k, hit, stream);
  if (token != NULL) b->host->lock(token);
  return rc;
}

/* With workspaces and an explicit stream that is not the producer's current
 * one, *wait is set: the allocator orders its memory on its current stream,
 * so workspaces released right after the launch could be handed to other work
 * before the kernel ran; tj_call_run then waits for the kernel first. */
static int workspaces_wait(const tj_kernel *k, const tj_call *call, const tj_producer *like,
                           const tj_frame *frame, int *wait) {
  if (!call->has_stream || frame->device.device_type == kDLCPU || like == NULL ||
      like->current_stream == NULL)
    return TJ_OK;
  void *current = NULL;
  int rc = like->current_stream(like, frame->device.device_type, frame->device.device_id, &current);
  if (rc == TJ_EPYERR) {
    tj_set_error(rc, "%s: the producer's current stream", k->name);
    return tj_error_at(rc, -1, -1, TJ_PRODUCER_STREAM);
  }
  /* A stream being captured runs nothing now, and synchronizing it would
   * break the capture: the graph's allocator keeps its memory for the graph. */
  *wait = (rc != TJ_OK || current != frame->stream) && !tj__cuda_capturing(k, frame->stream);
  return TJ_OK;
}

/* Launches a kernel with workspaces: when they were allocated in another stream's
 * order than the launch's (workspaces_wait), the call waits for the kernel, so
 * that releasing them hands out no memory it still uses. */
static int launch_with_workspaces(const tj_kernel *k, const tj_call *call, const tj_host *host,
                                  const tj_producer *like, tj_frame *frame) {
  int wait = 0, rc = workspaces_wait(k, call, like, frame, &wait);
  if (rc == TJ_OK) rc = launch(host, frame);
  if (rc == TJ_OK && wait) rc = tj__cuda_wait(frame);
  return rc;
}

/* Releases objects[from, to) with the host's release (the binding's, else
 * the producer's). */
static void release_objects(const tj_host *host, const tj_producer *like, void **objects,
                            int32_t from, int32_t to) {
  if (host == NULL && like != NULL) host = like->host;
  for (int32_t o = from; o < to; ++o)
    if (objects[o] != NULL && host != NULL && host->release != NULL) host->release(objects[o]);
}

int tj_call_run(const tj_kernel *k, tj_call *call) { return tj_call_run_binding(k, call, NULL); }

int tj_call_run_binding(const tj_kernel *k, tj_call *call, const tj_call_binding *binding) {
  static const tj_call_binding none = {NULL, NULL, 0, 0};
  TJ__REFUSE_NULL("tj_call_run", k);
  TJ__REFUSE_NULL("tj_call_run", call);
  if (call->nargs > 0) TJ__REFUSE_NULL("tj_call_run", call->args);
  const tj_call_binding *b = binding != NULL ? binding : &none;
  tj_arg outs[TJ_MAX_OUTPUTS];
  void *objects[TJ_MAX_OUTPUTS];
  const tj_producer *like = NULL;
  tj_frame frame;
  int32_t owned = 1, claimed = -1, nargs = call->nargs;
  int rc, core = 0;
  for (int32_t o = 0; o < k->nallocs; ++o) {
    objects[o] = NULL;
    tj_arg_init(&outs[o]);
  }
  if (nargs < k->ninputs && nargs >= k->nrequired) { /* trailing optional buffers left out */
    for (int32_t i = nargs; i < k->ninputs; ++i) tj_arg_init(&call->args[i]);
    nargs = k->ninputs;
  }
  tj__hit hit;
  if (nargs != k->ninputs) {
    rc = tj__bind(k, NULL, nargs, &frame); /* reports the count */
  } else if ((rc = import_args(k, call->args, nargs, b->unclaimed, b->claim_at_once, &owned,
                               &claimed)) != TJ_OK) {
    /* reported */
  } else if (claimed < 0 && k->memo != NULL && tj__memo_pack(k, call->args, &hit)) {
    /* A repeated call with nothing to allocate: checked and packed by the
     * memo in one pass, no frame (what the steps below do for it). */
    rc = tj__call_hit(k, call, b, &hit);
  } else if ((rc = tj__bind(k, call->args, nargs, &frame)) == TJ_OK) {
    if (claimed >= 0) { /* validated; the framework runs it */
      rc = claimed_by(k, claimed, "requires grad");
      goto release;
    }
    like = frame.first_tensor >= 0 ? call->args[frame.first_tensor].producer : b->fallback;
    core = core_allocates(like, binding);
    if ((rc = choose_stream(k, call, like, frame.device, &frame.stream)) == TJ_OK &&
        (rc = allocate_outputs(k, like, core, &frame, outs, objects)) == TJ_OK)
      rc = k->nworkspaces == 0 ? launch(b->host, &frame)
                               : launch_with_workspaces(k, call, b->host, like, &frame);
  }
release:
  /* Only owning imports owe a deleter call; views and scalars have none. */
  if (owned && nargs == k->ninputs)
    for (int32_t i = 0; i < nargs; ++i)
      if (call->args[i].owner_kind != TJ_OWNER_NONE) tj_arg_release(&call->args[i]);
  for (int32_t o = 0; o < k->nallocs; ++o)
    if (outs[o].owner_kind != TJ_OWNER_NONE) tj_arg_release(&outs[o]);
  for (int32_t o = 0; o < k->noutputs; ++o) call->outputs[o] = objects[o];
  if (k->nworkspaces > 0)
    release_objects(core ? &host_outputs : b->host, like, objects, k->noutputs, k->nallocs);
  return rc;
}

/* ---- Bound launches -------------------------------------------------------------- */

/* A call bound once: its arguments imported, validated and bound, its outputs
 * and workspaces allocated and kept, its launch packed. Never moves: the
 * frame points into `args` and `outs`, the packed launch into itself. */
struct tj_bound {
  const tj_kernel *kernel;
  tj_call_binding binding;
  int32_t nargs;
  const tj_producer *like; /* the first tensor's producer: stream and outputs */
  int32_t core;            /* 1: the outputs are the core's own (host_allocate) */
  tj_arg args[TJ_MAX_PARAMS];
  tj_arg outs[TJ_MAX_OUTPUTS];
  void *objects[TJ_MAX_OUTPUTS]; /* outputs, then workspaces: host objects, owned */
  tj_frame frame;
  tj__packed packed;
};

static const tj_call_binding no_binding = {NULL, NULL, 0, 0};

int tj_bound_create(const tj_kernel *k, tj_call *call, tj_bound **out) {
  return tj_bound_create_binding(k, call, NULL, out);
}

int tj_bound_create_binding(const tj_kernel *k, tj_call *call, const tj_call_binding *binding,
                            tj_bound **out) {
  TJ__REFUSE_NULL("tj_bound_create", k);
  TJ__REFUSE_NULL("tj_bound_create", call);
  TJ__REFUSE_NULL("tj_bound_create", out);
  if (call->nargs > 0) TJ__REFUSE_NULL("tj_bound_create", call->args);
  *out = NULL;
  for (int32_t o = 0; o < k->noutputs; ++o) call->outputs[o] = NULL;
  tj_bound *b = calloc(1, sizeof(*b));
  if (b == NULL) return tj_set_error(TJ_ENOMEM, "%s: out of memory for a bound launch", k->name);
  b->kernel = k;
  b->binding = binding != NULL ? *binding : no_binding;
  int32_t nargs = call->nargs;
  /* The records move into the bound launch, which owns their imports from here. */
  for (int32_t i = 0; i < TJ_MAX_PARAMS; ++i) tj_arg_init(&b->args[i]);
  for (int32_t o = 0; o < TJ_MAX_OUTPUTS; ++o) tj_arg_init(&b->outs[o]);
  for (int32_t i = 0; nargs <= k->ninputs && i < nargs; ++i) { /* else only counted */
    b->args[i] = call->args[i];
    tj_arg_init(&call->args[i]);
  }
  if (nargs < k->ninputs && nargs >= k->nrequired) nargs = k->ninputs; /* left out: None */
  b->nargs = nargs;
  int32_t owned = 1, claimed = -1;
  int rc;
  if (nargs != k->ninputs) {
    rc = tj__bind(k, NULL, nargs, &b->frame); /* reports the count */
  } else if ((rc = import_args(k, b->args, nargs, b->binding.unclaimed, 0, &owned, &claimed)) ==
                 TJ_OK &&
             (rc = tj__bind(k, b->args, nargs, &b->frame)) == TJ_OK) {
    if (claimed >= 0) {
      const tj__param *p = input_param(k, claimed);
      rc = tj_set_error(TJ_ETYPE,
                        "%s: argument %d '%s': a bound launch cannot take a tensor that "
                        "requires grad (the framework must record the call): call the kernel "
                        "instead, or bind a detached tensor",
                        k->name, claimed, p ? p->name : "?");
      tj_error_at(rc, claimed, -1, TJ_PRODUCER_NONE);
    } else {
      b->like = b->frame.first_tensor >= 0 ? b->args[b->frame.first_tensor].producer
                                           : b->binding.fallback;
      b->core = core_allocates(b->like, binding);
      if ((rc = allocate_outputs(k, b->like, b->core, &b->frame, b->outs, b->objects)) == TJ_OK)
        rc = tj__launch_pack(&b->frame, &b->packed);
    }
  }
  if (rc != TJ_OK) {
    tj_bound_free(b);
    return rc;
  }
  for (int32_t o = 0; o < k->noutputs; ++o) call->outputs[o] = b->objects[o];
  *out = b;
  return TJ_OK;
}

int tj_bound_launch(tj_bound *b, int32_t has_stream, void *stream) {
  TJ__REFUSE_NULL("tj_bound_launch", b);
  const tj_kernel *k = b->kernel;
  tj_call call = {NULL, 0, has_stream, stream, NULL};
  /* The stream is chosen at every launch, as a call chooses it: the
   * producer's current one is asked again each time, never kept. */
  b->frame.stream = NULL;
  int rc = choose_stream(k, &call, b->like, b->frame.device, &b->frame.stream);
  if (rc != TJ_OK) return rc;
  int wait = 0;
  if (k->nworkspaces > 0 && (rc = workspaces_wait(k, &call, b->like, &b->frame, &wait))) return rc;
  void *token = unlock(b->binding.host);
  rc = tj__launch_replay(&b->frame, &b->packed, b->frame.stream);
  if (token != NULL) b->binding.host->lock(token);
  if (rc == TJ_OK && wait) rc = tj__cuda_wait(&b->frame);
  return rc;
}

int tj_bound_update(tj_bound *b, int32_t position, tj_arg *arg) {
  TJ__REFUSE_NULL("tj_bound_update", b);
  TJ__REFUSE_NULL("tj_bound_update", arg);
  const tj_kernel *k = b->kernel;
  const tj__param *p = input_param(k, position);
  if (position < 0 || position >= b->nargs || p == NULL) {
    tj_arg_release(arg);
    return tj_set_error(TJ_EVALUE, "%s: no argument %d to update (the kernel takes %d)", k->name,
                        position, k->ninputs);
  }
  int32_t index = (int32_t)(p - k->params);
  if (p->kind != TJ_PARAM_BUFFER || b->args[position].kind != TJ_ARG_TENSOR) {
    tj_arg_release(arg);
    tj_set_error(TJ_ETYPE,
                 "%s: argument %d '%s': update swaps a tensor argument for another; "
                 "'%s' is %s",
                 k->name, position, p->name, p->name,
                 p->kind != TJ_PARAM_BUFFER ? "not a buffer" : "bound to None");
    return tj_error_at(TJ_ETYPE, position, -1, TJ_PRODUCER_NONE);
  }
  tj_arg fresh = *arg;
  tj_arg_init(arg); /* ownership moves to the bound launch */
  claim_state state = {-1, -1};
  int32_t claimed = -1;
  int rc = fresh.kind == TJ_ARG_OBJECT
               ? import_one(k, &fresh, position, b->binding.unclaimed, 0, &state, &claimed)
               : TJ_OK;
  if (rc == TJ_OK && claimed >= 0)
    rc = tj_set_error(TJ_ETYPE,
                      "%s: argument %d '%s': a bound launch cannot take a tensor that "
                      "requires grad",
                      k->name, position, p->name);
  if (rc == TJ_OK) rc = tj__check_replacement(&b->frame, index, &fresh);
  if (rc != TJ_OK) {
    if (rc == TJ_ETYPE || rc == TJ_EVALUE) tj_error_at(rc, position, -1, TJ_PRODUCER_NONE);
    tj_arg_release(&fresh);
    return rc;
  }
  tj_arg old = b->args[position];
  b->args[position] = fresh;
  if ((rc = tj__launch_repack(&b->frame, &b->packed)) != TJ_OK) {
    b->args[position] = old; /* the launch stays as it was */
    tj__launch_repack(&b->frame, &b->packed);
    tj_arg_release(&fresh);
    return rc;
  }
  tj_arg_release(&old);
  return TJ_OK;
}

const tj_frame *tj_bound_frame(const tj_bound *b) { return b != NULL ? &b->frame : NULL; }

void tj_bound_free(tj_bound *b) {
  if (b == NULL) return;
  const tj_kernel *k = b->kernel;
  tj__launch_unpack(&b->packed);
  for (int32_t i = 0; i < TJ_MAX_PARAMS; ++i) tj_arg_release(&b->args[i]);
  for (int32_t o = 0; o < k->nallocs; ++o) tj_arg_release(&b->outs[o]);
  release_objects(b->core ? &host_outputs : b->binding.host, b->like, b->objects, 0, k->nallocs);
  free(b);
}
