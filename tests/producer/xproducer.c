/*
 * A CPU tensor type that publishes the DLPack C exchange API, for testing tilejit's
 * consumer side of it (tests/test_exchange.py). Built by the tests as an extension
 * module named `xproducer`.
 *
 * Three types share one implementation and differ only in how they publish the table:
 *   XTensor       `__dlpack_c_exchange_api__` capsule, table at major version 1;
 *   XTensorOld    the earlier int-valued `__c_dlpack_exchange_api__`, on a table
 *                 without dltensor_from_py_object_no_sync (owning exports only);
 *   XTensorChain  a capsule whose table has major 2, reaching the major-1 table
 *                 through prev_api (a consumer speaking 1.x must walk to it).
 * Module-level switches make the table misbehave, and counters record each entry
 * point's calls and every managed tensor's deletion.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack/dlpack.h"

typedef struct {
  PyObject_HEAD float *data;
  int32_t ndim;
  int64_t shape[4];
  int64_t strides[4];
  int read_only;
} XTensor;

static struct {
  int fail_view, fail_export, fail_alloc, fail_to_py;
} modes;
static struct {
  long views, exports, allocs, to_py, deletes, streams;
} counts;

static PyTypeObject XTensorType, XTensorOldType, XTensorChainType;

static XTensor *new_tensor(PyTypeObject *type, int32_t ndim, const int64_t *shape) {
  XTensor *t = PyObject_New(XTensor, type);
  if (t == NULL) return NULL;
  int64_t n = 1;
  t->ndim = ndim;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    t->shape[d] = shape[d];
    t->strides[d] = n;
    n *= shape[d];
  }
  t->data = calloc((size_t)(n ? n : 1), sizeof(float));
  t->read_only = 0;
  if (t->data == NULL) {
    Py_DECREF(t);
    return (XTensor *)PyErr_NoMemory();
  }
  return t;
}

static void fill_view(XTensor *t, DLTensor *out) {
  memset(out, 0, sizeof(*out));
  out->data = t->data;
  out->device.device_type = kDLCPU;
  out->ndim = t->ndim;
  out->dtype.code = kDLFloat;
  out->dtype.bits = 32;
  out->dtype.lanes = 1;
  out->shape = t->shape;
  out->strides = t->strides;
}

/* An exported tensor keeps its XTensor alive until deleted. */
static void delete_managed(DLManagedTensorVersioned *self) {
  PyGILState_STATE state = PyGILState_Ensure();
  counts.deletes++;
  Py_DECREF((PyObject *)self->manager_ctx);
  PyGILState_Release(state);
  free(self);
}

static DLManagedTensorVersioned *export(XTensor *t) {
  DLManagedTensorVersioned *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->version.major = 1;
  m->version.minor = 3;
  Py_INCREF(t);
  m->manager_ctx = t;
  m->deleter = delete_managed;
  m->flags = t->read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  fill_view(t, &m->dl_tensor);
  return m;
}

static int api_view(void *obj, DLTensor *out) {
  counts.views++;
  if (modes.fail_view) {
    PyErr_SetString(PyExc_RuntimeError, "xproducer: view refused");
    return -1;
  }
  fill_view((XTensor *)obj, out);
  return 0;
}

/* Counters count managed tensors handed out, so a refused request counts nothing. */
static int api_export(void *obj, DLManagedTensorVersioned **out) {
  if (modes.fail_export) {
    PyErr_SetString(PyExc_RuntimeError, "xproducer: export refused");
    return -1;
  }
  *out = export((XTensor *)obj);
  if (*out == NULL) return (PyErr_NoMemory(), -1);
  counts.exports++;
  return 0;
}

static int api_alloc(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                     void (*set_error)(void *, const char *, const char *)) {
  if (modes.fail_alloc || proto->ndim > 4 || proto->dtype.code != kDLFloat ||
      proto->dtype.bits != 32) {
    set_error(ctx, "RuntimeError", "xproducer: allocation refused");
    return -1;
  }
  XTensor *t = new_tensor(&XTensorType, proto->ndim, proto->shape);
  if (t == NULL) {
    PyErr_Clear();
    set_error(ctx, "MemoryError", "xproducer: out of memory");
    return -1;
  }
  *out = export(t);
  Py_DECREF(t); /* the managed tensor holds it now */
  if (*out == NULL) {
    set_error(ctx, "MemoryError", "xproducer: out of memory");
    return -1;
  }
  counts.allocs++;
  return 0;
}

static int api_to_py(DLManagedTensorVersioned *m, void **out) {
  counts.to_py++;
  if (modes.fail_to_py) {
    m->deleter(m); /* ownership was stolen: a failure still disposes of it */
    PyErr_SetString(PyExc_RuntimeError, "xproducer: to_py refused");
    return -1;
  }
  PyObject *t = (PyObject *)m->manager_ctx;
  Py_INCREF(t);
  *out = t;
  m->deleter(m);
  return 0;
}

static int api_stream(DLDeviceType type, int32_t id, void **out) {
  (void)type;
  (void)id;
  counts.streams++;
  *out = NULL;
  return 0;
}

static DLPackExchangeAPI api_v1 = {
    {{1, 3}, NULL}, api_alloc, api_export, api_to_py, api_view, api_stream,
};
static DLPackExchangeAPI api_v1_no_view = {
    {{1, 3}, NULL}, api_alloc, api_export, api_to_py, NULL, api_stream,
};
/* A future major version: only its header may be read; prev_api leads to 1.x. */
static DLPackExchangeAPIHeader api_v2 = {{2, 0}, NULL};

static PyObject *XTensor_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  (void)kw;
  PyObject *shape;
  if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &shape)) return NULL;
  int64_t dims[4];
  Py_ssize_t n = PyTuple_GET_SIZE(shape);
  if (n > 4) return PyErr_Format(PyExc_ValueError, "at most 4 dims");
  for (Py_ssize_t i = 0; i < n; ++i) dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
  if (PyErr_Occurred()) return NULL;
  return (PyObject *)new_tensor(type, (int32_t)n, dims);
}

static void XTensor_dealloc(XTensor *t) {
  free(t->data);
  PyObject_Free(t);
}

static PyObject *XTensor_tolist(XTensor *t, PyObject *unused) {
  (void)unused;
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
  PyObject *list = PyList_New(n);
  for (int64_t i = 0; list && i < n; ++i) PyList_SET_ITEM(list, i, PyFloat_FromDouble(t->data[i]));
  return list;
}

static PyObject *XTensor_fill(XTensor *t, PyObject *value) {
  double v = PyFloat_AsDouble(value);
  if (PyErr_Occurred()) return NULL;
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->shape[d];
  for (int64_t i = 0; i < n; ++i) t->data[i] = (float)v;
  Py_RETURN_NONE;
}

static PyObject *XTensor_shape(XTensor *t, void *unused) {
  (void)unused;
  PyObject *shape = PyTuple_New(t->ndim);
  for (int32_t d = 0; shape && d < t->ndim; ++d)
    PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
  return shape;
}

static PyMethodDef XTensor_methods[] = {
    {"tolist", (PyCFunction)XTensor_tolist, METH_NOARGS, NULL},
    {"fill", (PyCFunction)XTensor_fill, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
static PyGetSetDef XTensor_getset[] = {
    {"shape", (getter)XTensor_shape, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *set_modes(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *names[] = {"fail_view", "fail_export", "fail_alloc", "fail_to_py", NULL};
  memset(&modes, 0, sizeof(modes));
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|pppp", names, &modes.fail_view, &modes.fail_export,
                                   &modes.fail_alloc, &modes.fail_to_py))
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *get_counts(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_BuildValue("{sl,sl,sl,sl,sl,sl}", "views", counts.views, "exports", counts.exports,
                       "allocs", counts.allocs, "to_py", counts.to_py, "deletes", counts.deletes,
                       "streams", counts.streams);
}

static PyObject *reset_counts(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  memset(&counts, 0, sizeof(counts));
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_modes", (PyCFunction)(void (*)(void))set_modes, METH_VARARGS | METH_KEYWORDS, NULL},
    {"counts", get_counts, METH_NOARGS, NULL},
    {"reset_counts", reset_counts, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "xproducer", NULL, -1,
                                        module_methods};

static int init_type(PyObject *module, PyTypeObject *type, const char *name,
                     const char *qualified) {
  type->tp_name = qualified;
  type->tp_basicsize = sizeof(XTensor);
  type->tp_flags = Py_TPFLAGS_DEFAULT;
  type->tp_new = XTensor_new;
  type->tp_dealloc = (destructor)XTensor_dealloc;
  type->tp_methods = XTensor_methods;
  type->tp_getset = XTensor_getset;
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  return PyModule_AddObject(module, name, (PyObject *)type);
}

PyMODINIT_FUNC PyInit_xproducer(void) {
  api_v2.prev_api = &api_v1.header;
  PyObject *m = PyModule_Create(&module_def);
  if (m == NULL) return NULL;
  if (init_type(m, &XTensorType, "XTensor", "xproducer.XTensor") < 0 ||
      init_type(m, &XTensorOldType, "XTensorOld", "xproducer.XTensorOld") < 0 ||
      init_type(m, &XTensorChainType, "XTensorChain", "xproducer.XTensorChain") < 0)
    return NULL;
  PyObject *cap = PyCapsule_New(&api_v1, "dlpack_exchange_api", NULL);
  PyObject *chain = PyCapsule_New(&api_v2, "dlpack_exchange_api", NULL);
  PyObject *old = PyLong_FromVoidPtr(&api_v1_no_view);
  if (!cap || !chain || !old ||
      PyDict_SetItemString(XTensorType.tp_dict, "__dlpack_c_exchange_api__", cap) < 0 ||
      PyDict_SetItemString(XTensorChainType.tp_dict, "__dlpack_c_exchange_api__", chain) < 0 ||
      PyDict_SetItemString(XTensorOldType.tp_dict, "__c_dlpack_exchange_api__", old) < 0)
    return NULL;
  PyType_Modified(&XTensorType);
  PyType_Modified(&XTensorChainType);
  PyType_Modified(&XTensorOldType);
  Py_DECREF(cap);
  Py_DECREF(chain);
  Py_DECREF(old);
  return m;
}
