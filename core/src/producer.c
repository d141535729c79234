/*
 * Producers the core implements itself: the adapter over a DLPack C exchange
 * API table, and the import of a __dlpack__ capsule. Both reach host objects
 * only through function pointers (the table's, the tj_host's).
 */
#include <string.h>

#include "internal.h"

int tj__exchange_import(const tj_producer *self, void *object, tj_arg *arg) {
  return tj__exchange_import_inline(self, object, arg);
}

/* The allocator's error callback: keeps the first line of the producer's
 * message (torch's C++ errors append a backtrace) for the caller to prefix
 * with the output's label, as bindings do with a framework's own errors.
 * `context` counts the reports, so that a failure the allocator does not
 * explain gets a message of its own; a success formats none. */
static void allocator_error(void *context, const char *kind, const char *message) {
  (void)kind; /* an exception class name ("MemoryError"); the message says enough */
  ++*(int *)context;
  const char *text = message && message[0] ? message : "unknown error";
  tj_set_error(TJ_ERUNTIME, "%.*s", (int)strcspn(text, "\n"), text);
}

static int exchange_allocate(const tj_producer *self, const DLTensor *prototype, tj_arg *out,
                             void **object) {
  const DLPackExchangeAPI *api = self->api;
  DLTensor proto = *prototype;
  DLManagedTensorVersioned *managed = NULL;
  int reported = 0;
  *object = NULL;
  int failed = api->managed_tensor_allocator(&proto, &managed, &reported, allocator_error) != 0;
  if (failed || managed == NULL) {
    if (reported) return TJ_ERUNTIME;
    return tj_set_error(TJ_ERUNTIME, failed ? "the allocator failed without saying why"
                                            : "the allocator returned no tensor");
  }
  /* To-object takes the tensor over, also when it fails; the view in `out`
   * stays valid while the caller holds the object. */
  tj_arg_from_dltensor(out, &managed->dl_tensor, 0);
  if (api->managed_tensor_to_py_object_no_sync(managed, object) != 0) {
    *object = NULL;
    tj_arg_init(out);
    return TJ_EPYERR;
  }
  return TJ_OK;
}

static int exchange_stream(const tj_producer *self, int32_t device_type, int32_t device_id,
                           void **stream) {
  return self->api->current_work_stream(device_type, device_id, stream) != 0 ? TJ_EPYERR : TJ_OK;
}

int tj_producer_from_exchange(tj_producer *producer, const DLPackExchangeAPIHeader *header,
                              void *type) {
  memset(producer, 0, sizeof(*producer));
  /* A chain is one table per DLPack major version a producer still serves: a
   * few. The walk is bounded, so a chain that loops back on itself (a broken
   * producer) is refused rather than walked forever. */
  const DLPackExchangeAPIHeader *h = header;
  for (int32_t steps = 0; h != NULL && h->version.major != TJ_DLPACK_MAJOR; ++steps)
    h = steps < TJ_MAX_EXCHANGE_CHAIN ? h->prev_api : NULL;
  if (h == NULL)
    return tj_set_error(TJ_EVALUE,
                        "the DLPack exchange API table offers no version %d.x (within %d tables "
                        "of its prev_api chain)",
                        TJ_DLPACK_MAJOR, TJ_MAX_EXCHANGE_CHAIN);
  const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
  if (api->managed_tensor_allocator == NULL || api->managed_tensor_from_py_object_no_sync == NULL ||
      api->managed_tensor_to_py_object_no_sync == NULL || api->current_work_stream == NULL)
    return tj_set_error(TJ_EVALUE,
                        "the DLPack exchange API table lacks a function the API requires "
                        "(allocator, owning export, to-object, current work stream)");
  producer->import = tj__exchange_import;
  producer->allocate = exchange_allocate;
  producer->current_stream = exchange_stream;
  producer->api = api;
  producer->type = type;
  return TJ_OK;
}

int tj_arg_from_capsule(tj_arg *arg, void *capsule, const tj_host *host) {
  tj_arg_init(arg);
  if (host->capsule_is_valid(capsule, "dltensor_versioned")) {
    void *managed = host->capsule_pointer(capsule, "dltensor_versioned");
    host->capsule_set_name(capsule, "used_dltensor_versioned");
    return tj_arg_from_versioned(arg, managed, NULL);
  }
  if (host->capsule_is_valid(capsule, "dltensor")) {
    void *managed = host->capsule_pointer(capsule, "dltensor");
    host->capsule_set_name(capsule, "used_dltensor");
    tj_arg_from_legacy(arg, managed);
    return TJ_OK;
  }
  return tj_set_error(TJ_ETYPE, "__dlpack__ returned an object that is not a DLPack capsule");
}

int tj_producer_check_view(const tj_producer *producer, void *object) {
  uint32_t view = 0;
  int rc = TJ_OK;
  const tj_view_bits *bits = producer->view_bits;
  if (bits != NULL) {
    uint64_t word = tj__view_word(bits, object);
    view = ((word & bits->conjugate) ? TJ_VIEW_CONJUGATE : 0u) |
           ((word & bits->negative) ? TJ_VIEW_NEGATIVE : 0u);
  } else if (producer->view != NULL) {
    rc = producer->view(producer, object, &view);
  }
  if (rc != TJ_OK || view == 0) return rc;
  int conjugate = (view & TJ_VIEW_CONJUGATE) != 0, negative = (view & TJ_VIEW_NEGATIVE) != 0;
  return tj_set_error(TJ_EVALUE,
                      "expected a tensor that holds its values in memory, got a %s view (its "
                      "%s bit%s set); materialise it with %s%s",
                      conjugate && negative ? "conjugate and negative"
                      : conjugate           ? "conjugate"
                                            : "negative",
                      conjugate && negative ? "conjugate and negative"
                      : conjugate           ? "conjugate"
                                            : "negative",
                      conjugate && negative ? "s are" : " is", conjugate ? ".resolve_conj()" : "",
                      negative ? ".resolve_neg()" : "");
}

static int owned_import(const tj_producer *producer, void *object, tj_arg *arg) {
  int rc = tj_producer_check_view(producer, object);
  if (rc != TJ_OK) return rc;
  if (producer->api == NULL) return producer->import(producer, object, arg);
  DLManagedTensorVersioned *managed = NULL;
  if (producer->api->managed_tensor_from_py_object_no_sync(object, &managed) != 0) {
    return TJ_EPYERR;
  }
  return tj_arg_from_versioned(arg, managed, NULL);
}

int tj_producer_import_owned(const tj_producer *producer, void *object, tj_arg *arg) {
  int rc = owned_import(producer, object, arg);
  if (rc != TJ_EPYERR) return rc;
  tj_set_error(rc, "cannot import the tensor through DLPack");
  return tj_error_at(rc, -1, -1, TJ_PRODUCER_IMPORT);
}
