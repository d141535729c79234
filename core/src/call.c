/*
 * The call sequencer: every backend's kernel call runs through tj_call_run, so
 * the order of import, validation, stream choice, output allocation, launch
 * and release is written once.
 */
#include <string.h>

#include "internal.h"
#include "memo.h"
#include "target_cuda.h"

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
  tj_set_error(TJ_ECLAIMED, "%s: argument %d '%s': %s", k->name, i, p ? p->name : "?", why);
  return tj_error_at(TJ_ECLAIMED, i, -1, TJ_PRODUCER_NONE);
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
    /* No autograd record: neither grad nor a tangent, nothing to ask. */
    if (impl != NULL && claim->meta_offset >= 0 &&
        *(void *const *)((const char *)impl + claim->meta_offset) == NULL)
      return TJ_CLAIM_NONE;
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

/* Imports the OBJECT arguments; each names its producer. Sets *owned to 0
 * when it saw every argument and none owes a deleter call, and *claimed to the
 * first argument for which the framework claims the call once it is validated
 * (-1: none). `unclaimed`: claims are not asked (tj_call_binding.unclaimed). */
static int import_args(const tj_kernel *k, tj_arg *args, int32_t nargs, int32_t unclaimed,
                       int32_t *owned, int32_t *claimed) {
  claim_state state = {-1, -1};
  int32_t any = 0;
  *owned = 1;
  *claimed = -1;
  for (int32_t i = 0; i < nargs; ++i) {
    tj_arg *arg = &args[i];
    if (arg->kind != TJ_ARG_OBJECT) {
      any |= arg->owner_kind;
      continue;
    }
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
    if (claim != NULL) {
      int kind = claim_of(claim, object, &state);
      if (kind == TJ_CLAIM_NOW) return claimed_by(k, i, "a tensor the framework traces");
      if (kind < 0) {
        tj_set_error(kind, "%s: argument %d: the framework's claim", k->name, i);
        return tj_error_at(kind, i, -1, TJ_PRODUCER_NONE);
      }
      if (kind == TJ_CLAIM_VALIDATED && *claimed < 0) *claimed = i;
    }
    arg->kind = TJ_ARG_NONE;
    arg->producer = NULL;
    /* Lazy views: the common case (bits read in place, none set) inline. */
    const tj_view_bits *bits = producer->view_bits;
    int rc;
    if ((bits != NULL ? (tj__view_word(bits, object) & (bits->conjugate | bits->negative)) != 0
                      : producer->view != NULL) &&
        (rc = tj_producer_check_view(producer, object)) != TJ_OK)
      return view_refused(k, i, rc);
    rc = producer->import == tj__exchange_import ? tj__exchange_import_inline(producer, object, arg)
                                                 : producer->import(producer, object, arg);
    if (arg->producer == NULL) arg->producer = producer;
    if (rc != TJ_OK) {
      /* A tensor DLPack cannot describe may still be one the framework runs. */
      if (claim != NULL && claim->ask != NULL && claim->ask(claim, object, 1) > 0)
        return claimed_by(k, i, "a tensor only the framework can read");
      return import_failed(k, i, rc);
    }
    any |= arg->owner_kind;
  }
  *owned = any;
  return TJ_OK;
}

static int choose_stream(const tj_kernel *k, const tj_call *call, const tj_producer *like,
                         tj_frame *frame) {
  if (call->has_stream) {
    frame->stream = call->stream;
    return TJ_OK;
  }
  if (frame->device.device_type == kDLCPU || like == NULL || like->current_stream == NULL)
    return TJ_OK;
  int rc = like->current_stream(like, frame->device.device_type, frame->device.device_id,
                                &frame->stream);
  if (rc == TJ_EPYERR) {
    tj_set_error(rc, "%s: the producer's current stream", k->name);
    return tj_error_at(rc, -1, -1, TJ_PRODUCER_STREAM);
  }
  return rc;
}

/* Allocates the outputs (objects into call->outputs) and the workspaces
 * (objects into `kept`, released by tj_call_run after the launch). */
static int allocate_outputs(const tj_kernel *k, const tj_call *call, const tj_producer *like,
                            tj_frame *frame, tj_arg *outs, void **kept) {
  for (int32_t o = 0; o < k->nallocs; ++o) {
    const char *name = k->params[k->output_params[o]].name;
    const char *what = o < k->noutputs ? "output" : "workspace";
    if (like == NULL || like->allocate == NULL)
      return tj_error_at(tj_set_error(TJ_ETYPE,
                                      "%s: %s '%s': no tensor argument to allocate it like, "
                                      "and no default allocator",
                                      k->name, what, name),
                         -1, o, TJ_PRODUCER_NONE);
    DLTensor proto;
    memset(&proto, 0, sizeof(proto));
    proto.device = frame->device;
    proto.ndim = frame->out_ndim[o];
    proto.dtype = frame->out_dtype[o];
    proto.shape = frame->out_shape[o];
    int rc = like->allocate(like, &proto, &outs[o],
                            o < k->noutputs ? &call->outputs[o] : &kept[o - k->noutputs]);
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
  *wait = rc != TJ_OK || current != frame->stream;
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

/* Releases the workspaces' objects with the host's release (the binding's,
 * else the producer's). */
static void release_kept(const tj_kernel *k, const tj_host *host, const tj_producer *like,
                         void **kept) {
  if (host == NULL && like != NULL) host = like->host;
  for (int32_t w = 0; w < k->nworkspaces; ++w)
    if (kept[w] != NULL && host != NULL && host->release != NULL) host->release(kept[w]);
}

int tj_call_run(const tj_kernel *k, tj_call *call) { return tj_call_run_binding(k, call, NULL); }

int tj_call_run_binding(const tj_kernel *k, tj_call *call, const tj_call_binding *binding) {
  static const tj_call_binding none = {NULL, NULL, 0};
  TJ__REFUSE_NULL("tj_call_run", k);
  TJ__REFUSE_NULL("tj_call_run", call);
  if (call->nargs > 0) TJ__REFUSE_NULL("tj_call_run", call->args);
  const tj_call_binding *b = binding != NULL ? binding : &none;
  tj_arg outs[TJ_MAX_OUTPUTS];
  void *kept[TJ_MAX_OUTPUTS];
  const tj_producer *like = NULL;
  tj_frame frame;
  int32_t owned = 1, claimed = -1, nargs = call->nargs;
  int rc;
  for (int32_t o = 0; o < k->nallocs; ++o) {
    if (o < k->noutputs)
      call->outputs[o] = NULL;
    else
      kept[o - k->noutputs] = NULL;
    tj_arg_init(&outs[o]);
  }
  if (nargs < k->ninputs && nargs >= k->nrequired) { /* trailing optional buffers left out */
    for (int32_t i = nargs; i < k->ninputs; ++i) tj_arg_init(&call->args[i]);
    nargs = k->ninputs;
  }
  if (nargs != k->ninputs) {
    rc = tj__bind(k, NULL, nargs, &frame); /* reports the count */
  } else if ((rc = import_args(k, call->args, nargs, b->unclaimed, &owned, &claimed)) == TJ_OK &&
             (rc = tj__bind(k, call->args, nargs, &frame)) == TJ_OK) {
    if (claimed >= 0) { /* validated; the framework runs it */
      rc = claimed_by(k, claimed, "requires grad");
      goto release;
    }
    like = frame.first_tensor >= 0 ? call->args[frame.first_tensor].producer : b->fallback;
    if ((rc = choose_stream(k, call, like, &frame)) == TJ_OK &&
        (rc = allocate_outputs(k, call, like, &frame, outs, kept)) == TJ_OK)
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
  if (k->nworkspaces > 0) release_kept(k, b->host, like, kept);
  return rc;
}
