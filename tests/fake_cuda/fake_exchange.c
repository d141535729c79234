/*
 * The hot half of FakeCudaTensor's DLPack C exchange API, in C as torch's is:
 * dltensor_from_py_object_no_sync and current_work_stream. Written in Python
 * (ctypes callbacks) they cost microseconds a call, and a benchmark on the
 * fake driver would time the fake rather than the consumer.
 *
 * Every FakeCudaTensor fills a DLTensor once, at construction, and keeps its
 * address in the attribute `_dl_address`; the view is a copy of it. The
 * Python C API is looked up in the process (dlsym): this library is only ever
 * loaded into a Python process, and is called with the GIL held.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "../../core/include/dlpack/dlpack.h"

typedef void *(*get_attr_fn)(void *object, const char *name);
typedef void *(*as_pointer_fn)(void *object);
typedef void (*decref_fn)(void *object);
typedef void *(*error_occurred_fn)(void);

static get_attr_fn get_attr;
static as_pointer_fn as_pointer;
static decref_fn decref;
static error_occurred_fn error_occurred;

static uint64_t stream_calls;
static void *sentinel_stream;

/* Looks the Python C API up once; 0 on success. */
int fake_exchange_init(uintptr_t stream) {
  get_attr = (get_attr_fn)dlsym(RTLD_DEFAULT, "PyObject_GetAttrString");
  as_pointer = (as_pointer_fn)dlsym(RTLD_DEFAULT, "PyLong_AsVoidPtr");
  decref = (decref_fn)dlsym(RTLD_DEFAULT, "Py_DecRef");
  error_occurred = (error_occurred_fn)dlsym(RTLD_DEFAULT, "PyErr_Occurred");
  sentinel_stream = (void *)stream;
  return get_attr && as_pointer && decref && error_occurred ? 0 : -1;
}

int fake_exchange_dltensor(void *object, DLTensor *out) {
  void *address = get_attr(object, "_dl_address");
  if (address == NULL) return -1; /* AttributeError pending */
  const DLTensor *tensor = as_pointer(address);
  decref(address);
  if (tensor == NULL && error_occurred() != NULL) return -1;
  memcpy(out, tensor, sizeof(*out));
  return 0;
}

int fake_exchange_current_work_stream(int32_t device_type, int32_t device_id, void **out) {
  (void)device_id;
  ++stream_calls;
  *out = device_type == kDLCUDA ? sentinel_stream : NULL;
  return 0;
}

uint64_t fake_exchange_stream_calls(void) { return stream_calls; }
