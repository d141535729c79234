/*
 * The CUDA target's driver side: loading the driver, retaining contexts,
 * loading a kernel's module image into each context, and launches through the
 * CUDA driver API. The image and launch configuration are set where the rest
 * of the kernel is built (kernel.c).
 *
 * The driver is opened with dlopen at the first CUDA use (TILEJIT_LIBCUDA,
 * else libcuda.so.1), never at load time: a process that only runs CPU
 * kernels, or has no NVIDIA driver at all, never touches it. A failed attempt
 * is reported to that call and retried at the next one.
 *
 * A kernel's module image (cubin, fatbin or PTX) is kept in memory and loaded
 * into the driver once per CUDA context, at the first launch there. The
 * (context, module, function) entries of a kernel are append-only: a launch
 * finds its entry without a lock, and only a miss takes the kernel's mutex.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "internal.h"
#include "target_cuda.h"

/* The driver API types and constants used here, with the values cuda.h gives
 * them (stable since CUDA 4). Declared here so that the core builds without
 * the CUDA toolkit; tests/fake_cuda checks them against cuda.h. */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED 14
#define CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6

/* cuLaunchKernelEx's configuration, laid out as cuda.h lays it out. */
typedef struct {
  int id; /* CUlaunchAttributeID */
  char pad[8 - sizeof(int)];
  union {
    char pad[64];
    struct {
      unsigned int x, y, z;
    } cluster_dim;
    int cooperative;
    int programmatic_stream_serialization_allowed;
  } value;
} CUlaunchAttribute;

typedef struct {
  unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem;
  CUstream stream;
  CUlaunchAttribute *attrs;
  unsigned int num_attrs;
} CUlaunchConfig;

/* A CUtensorMap: 128 opaque bytes the driver encodes, 64-byte aligned. */
typedef struct {
  _Alignas(128) uint64_t opaque[TJ_TENSORMAP_BYTES / 8];
} CUtensorMap;

/* Dynamic shared memory a launch may use without opting in per function. */
#define DEFAULT_DYNAMIC_SMEM (48 * 1024)
/* Contexts one kernel can be loaded in, and devices whose primary context is
 * retained; both far above any real machine. */
#define MAX_CONTEXTS 32
#define MAX_DEVICES 64

typedef struct {
  void *handle;
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuGetErrorName)(CUresult error, const char **name);
  CUresult (*cuGetErrorString)(CUresult error, const char **text);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
  CUresult (*cuCtxGetDevice)(CUdevice *device);
  CUresult (*cuCtxPushCurrent)(CUcontext ctx);
  CUresult (*cuCtxPopCurrent)(CUcontext *ctx);
  /* Optional: without it a launch on a thread with no current context pushes
   * and pops the primary context around each launch. */
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_mem, CUstream stream,
                             void **params, void **extra);
  /* Optional: NULL when the driver lacks them (cuFuncGetParamInfo before
   * CUDA 12.4, the others before 12.0); a kernel that needs one says so. */
  CUresult (*cuFuncGetParamInfo)(CUfunction function, size_t index, size_t *offset, size_t *size);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction function, void **params,
                               void **extra);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap *map, int data_type, uint32_t rank, void *address,
                                     const uint64_t *dims, const uint64_t *strides,
                                     const uint32_t *box, const uint32_t *element_strides,
                                     int interleave, int swizzle, int l2_promotion, int oob_fill);
  CUresult (*cuTensorMapEncodeIm2col)(CUtensorMap *map, int data_type, uint32_t rank, void *address,
                                      const uint64_t *dims, const uint64_t *strides,
                                      const int *lower_corner, const int *upper_corner,
                                      uint32_t channels_per_pixel, uint32_t pixels_per_column,
                                      const uint32_t *element_strides, int interleave, int swizzle,
                                      int l2_promotion, int oob_fill);
  CUresult (*cuMemsetD8Async)(unsigned long long address, unsigned char value, size_t count,
                              CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  /* Optional: whether a stream is being captured (CUstreamCaptureStatus). */
  CUresult (*cuStreamIsCapturing)(CUstream stream, int *status);
} driver;

/* The exported names: cuda.h maps several entry points to their _v2 symbols,
 * and those are what a program compiled against cuda.h calls. */
#define DRIVER_ENTRY(field, symbol) {#symbol, offsetof(driver, field)}
static const struct {
  const char *symbol;
  size_t offset;
} driver_entries[] = {
    DRIVER_ENTRY(cuInit, cuInit),
    DRIVER_ENTRY(cuGetErrorName, cuGetErrorName),
    DRIVER_ENTRY(cuGetErrorString, cuGetErrorString),
    DRIVER_ENTRY(cuDeviceGet, cuDeviceGet),
    DRIVER_ENTRY(cuDeviceGetAttribute, cuDeviceGetAttribute),
    DRIVER_ENTRY(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain),
    DRIVER_ENTRY(cuCtxGetCurrent, cuCtxGetCurrent),
    DRIVER_ENTRY(cuCtxGetDevice, cuCtxGetDevice),
    DRIVER_ENTRY(cuCtxPushCurrent, cuCtxPushCurrent_v2),
    DRIVER_ENTRY(cuCtxPopCurrent, cuCtxPopCurrent_v2),
    DRIVER_ENTRY(cuModuleLoadData, cuModuleLoadData),
    DRIVER_ENTRY(cuModuleUnload, cuModuleUnload),
    DRIVER_ENTRY(cuModuleGetFunction, cuModuleGetFunction),
    DRIVER_ENTRY(cuFuncSetAttribute, cuFuncSetAttribute),
    DRIVER_ENTRY(cuLaunchKernel, cuLaunchKernel),
};
#undef DRIVER_ENTRY

/* The loaded driver, published once complete; g_lock serialises loading and
 * retaining primary contexts. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static driver g_driver_storage;
static _Atomic(const driver *) g_driver;
/* Primary context per device ordinal, retained at first use and kept for the
 * life of the process (as the CUDA runtime does). */
static _Atomic(CUcontext) g_primary[MAX_DEVICES];

/* One context a kernel is loaded in, with each launch's function. */
typedef struct {
  CUcontext ctx;
  CUdevice device;
  CUmodule module;
  CUfunction functions[TJ_MAX_LAUNCHES];
  _Atomic int64_t smem_allowed[TJ_MAX_LAUNCHES]; /* dynamic shared memory opted in so far */
} ctx_entry;

/* The kernel's module image loaded in each context it ran in. */
struct tj__cuda_modules {
  pthread_mutex_t lock;
  _Atomic int32_t count; /* entries[0, count) are complete */
  ctx_entry entries[MAX_CONTEXTS];
};

/* ---- Driver ---------------------------------------------------------------- */

/* Sets a TJ_ERUNTIME naming the failed call and the driver's error name and
 * text: "vec_add: cuLaunchKernel failed: CUDA_ERROR_... (text)". */
static int driver_error(const driver *d, const char *who, const char *call, CUresult rc) {
  const char *name = NULL, *text = NULL;
  if (d->cuGetErrorName(rc, &name) != 0) name = NULL;
  if (d->cuGetErrorString(rc, &text) != 0) text = NULL;
  if (name == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: %s failed: CUDA driver error %d", who, call, rc);
  return tj_set_error(TJ_ERUNTIME, "%s: %s failed: %s (%s)", who, call, name,
                      text ? text : "no description");
}

/* Opens and initialises the driver into *d; on failure closes what it opened. */
static int open_driver(const char *who, driver *d) {
  const char *path = tj__env_libcuda();
  memset(d, 0, sizeof(*d));
  d->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (d->handle == NULL) {
    const char *why = dlerror();
    return tj_set_error(TJ_ERUNTIME,
                        "%s: no CUDA driver: cannot load %s (%s). CUDA kernels need the NVIDIA "
                        "driver; set TILEJIT_LIBCUDA to its libcuda.so.1 if it is installed "
                        "where the loader does not look",
                        who, path, why ? why : "unknown error");
  }
  for (size_t i = 0; i < sizeof(driver_entries) / sizeof(driver_entries[0]); ++i) {
    void *fn = dlsym(d->handle, driver_entries[i].symbol);
    if (fn == NULL) {
      tj_set_error(TJ_ERUNTIME, "%s: the CUDA driver %s has no entry point %s (too old?)", who,
                   path, driver_entries[i].symbol);
      dlclose(d->handle);
      d->handle = NULL;
      return TJ_ERUNTIME;
    }
    memcpy((char *)d + driver_entries[i].offset, &fn, sizeof(fn));
  }
  *(void **)&d->cuCtxSetCurrent = dlsym(d->handle, "cuCtxSetCurrent");
  *(void **)&d->cuFuncGetParamInfo = dlsym(d->handle, "cuFuncGetParamInfo");
  *(void **)&d->cuLaunchKernelEx = dlsym(d->handle, "cuLaunchKernelEx");
  *(void **)&d->cuTensorMapEncodeTiled = dlsym(d->handle, "cuTensorMapEncodeTiled");
  *(void **)&d->cuTensorMapEncodeIm2col = dlsym(d->handle, "cuTensorMapEncodeIm2col");
  *(void **)&d->cuMemsetD8Async = dlsym(d->handle, "cuMemsetD8Async");
  *(void **)&d->cuStreamSynchronize = dlsym(d->handle, "cuStreamSynchronize");
  *(void **)&d->cuStreamIsCapturing = dlsym(d->handle, "cuStreamIsCapturing");
  CUresult rc = d->cuInit(0);
  if (rc != 0) {
    driver_error(d, who, "cuInit", rc);
    dlclose(d->handle);
    d->handle = NULL;
    return TJ_ERUNTIME;
  }
  return TJ_OK;
}

/* The driver, loading it on first use. NULL with the thread's error set when
 * there is none; the next call tries again. */
static const driver *get_driver(const char *who) {
  const driver *d = atomic_load_explicit(&g_driver, memory_order_acquire);
  if (d != NULL) return d;
  pthread_mutex_lock(&g_lock);
  d = atomic_load_explicit(&g_driver, memory_order_relaxed);
  if (d == NULL && open_driver(who, &g_driver_storage) == TJ_OK) {
    d = &g_driver_storage;
    atomic_store_explicit(&g_driver, d, memory_order_release);
  }
  pthread_mutex_unlock(&g_lock);
  return d;
}

void tj__cuda_unload_driver(void) {
  pthread_mutex_lock(&g_lock);
  const driver *d = atomic_load_explicit(&g_driver, memory_order_relaxed);
  if (d != NULL) dlclose(d->handle);
  atomic_store_explicit(&g_driver, NULL, memory_order_release);
  for (int i = 0; i < MAX_DEVICES; ++i) atomic_store(&g_primary[i], NULL);
  pthread_mutex_unlock(&g_lock);
}

/* The primary context of device ordinal `device`, retained once. */
static int primary_context(const driver *d, const char *who, int32_t device, CUcontext *out) {
  if (device < 0 || device >= MAX_DEVICES)
    return tj_set_error(TJ_EVALUE, "%s: CUDA device %d is out of range [0, %d)", who, device,
                        MAX_DEVICES);
  *out = atomic_load(&g_primary[device]);
  if (*out != NULL) return TJ_OK;
  int status = TJ_OK;
  pthread_mutex_lock(&g_lock);
  *out = atomic_load(&g_primary[device]);
  if (*out == NULL) {
    CUdevice dev;
    CUcontext ctx = NULL;
    CUresult rc = d->cuDeviceGet(&dev, device);
    if (rc != 0)
      status = driver_error(d, who, "cuDeviceGet", rc);
    else if ((rc = d->cuDevicePrimaryCtxRetain(&ctx, dev)) != 0)
      status = driver_error(d, who, "cuDevicePrimaryCtxRetain", rc);
    else
      atomic_store(&g_primary[device], ctx);
    *out = ctx;
  }
  pthread_mutex_unlock(&g_lock);
  return status;
}

int tj_cuda_device_capability(int32_t device_id, int32_t *major, int32_t *minor) {
  TJ__REFUSE_NULL("tj_cuda_device_capability", major);
  TJ__REFUSE_NULL("tj_cuda_device_capability", minor);
  const char *who = "tilejit";
  const driver *d = get_driver(who);
  if (d == NULL) return TJ_ERUNTIME;
  CUresult rc;
  CUdevice dev;
  if (device_id < 0) {
    CUcontext cur = NULL;
    if ((rc = d->cuCtxGetCurrent(&cur)) != 0) return driver_error(d, who, "cuCtxGetCurrent", rc);
    if (cur != NULL) {
      if ((rc = d->cuCtxGetDevice(&dev)) != 0) return driver_error(d, who, "cuCtxGetDevice", rc);
    } else if ((rc = d->cuDeviceGet(&dev, 0)) != 0) {
      return driver_error(d, who, "cuDeviceGet", rc);
    }
  } else if ((rc = d->cuDeviceGet(&dev, device_id)) != 0) {
    return driver_error(d, who, "cuDeviceGet", rc);
  }
  int v[2];
  if ((rc = d->cuDeviceGetAttribute(&v[0], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ||
      (rc = d->cuDeviceGetAttribute(&v[1], CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))
    return driver_error(d, who, "cuDeviceGetAttribute", rc);
  *major = v[0];
  *minor = v[1];
  return TJ_OK;
}

/* ---- Module cache ---------------------------------------------------------- */

int tj__cuda_modules_create(tj_kernel *k) {
  tj__cuda_modules *m = calloc(1, sizeof(*m));
  if (m == NULL) return tj_set_error(TJ_ENOMEM, "out of memory");
  pthread_mutex_init(&m->lock, NULL);
  k->cuda = m;
  return TJ_OK;
}

void tj__cuda_free(tj_kernel *k) {
  tj__cuda_modules *m = k->cuda;
  if (m == NULL) return;
  const driver *d = atomic_load_explicit(&g_driver, memory_order_acquire);
  int32_t n = atomic_load(&m->count);
  /* Modules live in their context; errors (a context already destroyed at
   * process exit) leave nothing to do. */
  for (int32_t i = 0; d != NULL && i < n; ++i) {
    CUcontext popped;
    if (d->cuCtxPushCurrent(m->entries[i].ctx) != 0) continue;
    d->cuModuleUnload(m->entries[i].module);
    d->cuCtxPopCurrent(&popped);
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
  k->cuda = NULL;
}

/* ---- Launch ------------------------------------------------------------------ */

static ctx_entry *find_entry(tj__cuda_modules *m, CUcontext ctx) {
  int32_t n = atomic_load_explicit(&m->count, memory_order_acquire);
  for (int32_t i = 0; i < n; ++i)
    if (m->entries[i].ctx == ctx) return &m->entries[i];
  return NULL;
}

/* "main" for a program of one kernel function, "main: main_kernel_1" for
 * launch 1 of several: the start of messages about one launch. */
static void launch_label(const tj_kernel *k, int32_t l, char *buf, size_t size) {
  if (k->nlaunches > 1)
    snprintf(buf, size, "%s: %s", k->name, k->launches[l].symbol);
  else
    snprintf(buf, size, "%s", k->name);
}

/* "parameter 2 ('n')" for messages about argument `a` of launch `l`. */
static void abi_label(const tj_kernel *k, const tj_abi_arg *e, int32_t a, char *buf, size_t size) {
  const char *name = e->source == TJ_ABI_PARAM       ? k->params[e->index].name
                     : e->source == TJ_ABI_SYMBOL    ? k->symbol_names[e->index]
                     : e->source == TJ_ABI_TENSORMAP ? k->tensormaps[e->index].name
                                                     : k->exprs[e->index].text;
  snprintf(buf, size, "parameter %d ('%s')", a, name);
}

/* Where the driver can tell (cuFuncGetParamInfo), the loaded function must
 * take as many parameters as the signature declares, each of the declared
 * size: a prebuilt image is checked before its first launch. */
static int check_params(const driver *d, const tj_kernel *k, int32_t l, CUfunction function) {
  if (d->cuFuncGetParamInfo == NULL) return TJ_OK;
  const tj__launch *launch = &k->launches[l];
  size_t offset, size;
  char who[300], label[200];
  launch_label(k, l, who, sizeof(who));
  for (int32_t a = 0; a < launch->nabi; ++a) {
    if (d->cuFuncGetParamInfo(function, (size_t)a, &offset, &size) != 0)
      return tj_set_error(TJ_EVALUE,
                          "%s: the loaded function '%s' takes %d parameters, the signature "
                          "declares %d",
                          who, launch->symbol, a, launch->nabi);
    int64_t want = tj__abi_bytes(k, &launch->abi[a]);
    if ((int64_t)size != want) {
      abi_label(k, &launch->abi[a], a, label, sizeof(label));
      return tj_set_error(TJ_EVALUE,
                          "%s: %s of the loaded function '%s' is %zu bytes, the signature "
                          "declares %lld bytes",
                          who, label, launch->symbol, size, (long long)want);
    }
  }
  if (d->cuFuncGetParamInfo(function, (size_t)launch->nabi, &offset, &size) == 0)
    return tj_set_error(TJ_EVALUE,
                        "%s: the loaded function '%s' takes more than the %d parameters the "
                        "signature declares",
                        who, launch->symbol, launch->nabi);
  return TJ_OK;
}

/* Finds launch `l`'s function in `module` and prepares it. */
static int find_function(const driver *d, const tj_kernel *k, int32_t l, CUmodule module,
                         CUfunction *out) {
  const tj__launch *launch = &k->launches[l];
  CUresult rc = d->cuModuleGetFunction(out, module, launch->symbol);
  if (rc != 0) {
    char call[300];
    snprintf(call, sizeof(call), "cuModuleGetFunction(\"%s\")", launch->symbol);
    driver_error(d, k->name, call, rc);
    char msg[600];
    snprintf(msg, sizeof(msg),
             "%s; the module image has no extern \"C\" __global__ function of that name",
             tj_last_error());
    return tj_set_error(TJ_ERUNTIME, "%s", msg);
  }
  int status = check_params(d, k, l, *out);
  if (status == TJ_OK && launch->has_cluster) {
    /* Clusters beyond the portable 8 blocks are the device's to refuse. */
    rc = d->cuFuncSetAttribute(*out, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    if (rc != 0) {
      char who[300];
      launch_label(k, l, who, sizeof(who));
      status = driver_error(d, who, "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)", rc);
    }
  }
  return status;
}

/* Loads the module into `ctx`, which is current, and finds the functions. */
static int load_entry(const driver *d, const tj_kernel *k, CUcontext ctx, CUdevice device,
                      ctx_entry **out) {
  tj__cuda_modules *m = k->cuda;
  int status = TJ_OK;
  pthread_mutex_lock(&m->lock);
  ctx_entry *e = find_entry(m, ctx);
  int32_t n = atomic_load_explicit(&m->count, memory_order_relaxed);
  if (e == NULL && n == MAX_CONTEXTS) {
    status = tj_set_error(TJ_ERUNTIME, "%s: loaded in more than %d CUDA contexts", k->name,
                          MAX_CONTEXTS);
  } else if (e == NULL) {
    CUmodule module = NULL;
    CUfunction functions[TJ_MAX_LAUNCHES] = {0};
    CUresult rc = d->cuModuleLoadData(&module, k->image);
    if (rc != 0) status = driver_error(d, k->name, "cuModuleLoadData", rc);
    for (int32_t l = 0; status == TJ_OK && l < k->nlaunches; ++l)
      status = find_function(d, k, l, module, &functions[l]);
    if (status != TJ_OK && module != NULL) {
      d->cuModuleUnload(module);
    } else if (status == TJ_OK) {
      e = &m->entries[n];
      e->ctx = ctx;
      e->device = device;
      e->module = module;
      for (int32_t l = 0; l < k->nlaunches; ++l) {
        e->functions[l] = functions[l];
        atomic_store(&e->smem_allowed[l], DEFAULT_DYNAMIC_SMEM);
      }
      atomic_store_explicit(&m->count, n + 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&m->lock);
  *out = e;
  return status;
}

/* Opts launch `l`'s function in to `smem` bytes of dynamic shared memory,
 * once per larger amount. */
static int allow_smem(const driver *d, const tj_kernel *k, ctx_entry *e, int32_t l, int64_t smem) {
  if (smem <= atomic_load(&e->smem_allowed[l])) return TJ_OK;
  int status = TJ_OK;
  char who[300];
  launch_label(k, l, who, sizeof(who));
  pthread_mutex_lock(&k->cuda->lock);
  if (smem > atomic_load(&e->smem_allowed[l])) {
    CUresult rc = d->cuFuncSetAttribute(e->functions[l],
                                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    if (rc == 0) {
      atomic_store(&e->smem_allowed[l], smem);
    } else {
      char call[160];
      snprintf(call, sizeof(call), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, %lld)",
               (long long)smem);
      driver_error(d, who, call, rc);
      int limit = 0;
      if (d->cuDeviceGetAttribute(&limit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                  e->device) == 0 &&
          limit > 0) {
        char msg[600];
        snprintf(msg, sizeof(msg),
                 "%s; the device allows at most %d bytes of shared memory per block",
                 tj_last_error(), limit);
        tj_set_error(TJ_ERUNTIME, "%s", msg);
      }
      status = TJ_ERUNTIME;
    }
  }
  pthread_mutex_unlock(&k->cuda->lock);
  return status;
}

/* Expression `id` over the bound symbols into *out: 1 when it evaluates within
 * [low, high]; else 0, and *evaluated says whether it evaluated at all. */
static int eval_within(const tj_frame *f, int32_t id, int64_t low, int64_t high, int64_t *out,
                       int *evaluated) {
  const tj__expr *e = &f->kernel->exprs[id];
  *out = 0; /* what a failed evaluation leaves */
  *evaluated = tj_expr_eval(e->code, e->n, f->symbols, out) == TJ_OK;
  return *evaluated && *out >= low && *out <= high;
}

/* The error of value `what` (expression `id`) of `who`, which eval_within refused. */
static int eval_refused(const tj_frame *f, const char *who, const char *what, int32_t id,
                        int evaluated, int64_t value, int64_t low, int64_t high) {
  const tj__expr *e = &f->kernel->exprs[id];
  if (!evaluated) {
    char why[400];
    snprintf(why, sizeof(why), "%s", tj_last_error());
    return tj_set_error(TJ_EVALUE, "%s: cannot evaluate %s = %s: %s", who, what, e->text, why);
  }
  return tj_set_error(TJ_EVALUE, "%s: %s = %s evaluates to %lld, expected %lld to %lld", who, what,
                      e->text, (long long)value, (long long)low, (long long)high);
}

/* Launch `l`'s configuration: grid, block, shared memory, cluster (1 1 1
 * without one). The launch is named only in a message: one that evaluates
 * writes no text. */
static int eval_launch(const tj_frame *f, int32_t l, int64_t out[10]) {
  static const char *const what[10] = {"grid[0]",    "grid[1]",   "grid[2]",    "block[0]",
                                       "block[1]",   "block[2]",  "shared_mem", "cluster[0]",
                                       "cluster[1]", "cluster[2]"};
  const tj__launch *launch = &f->kernel->launches[l];
  for (int i = 0; i < 10; ++i) {
    if (i >= 7 && !launch->has_cluster) {
      out[i] = 1;
      continue;
    }
    int32_t id = i < 7 ? launch->config[i] : launch->cluster[i - 7];
    int64_t low = (i >= 3 && i != 6) ? 1 : 0;
    int evaluated;
    if (!eval_within(f, id, low, UINT32_MAX, &out[i], &evaluated)) {
      char who[300];
      launch_label(f->kernel, l, who, sizeof(who));
      return eval_refused(f, who, what[i], id, evaluated, out[i], low, UINT32_MAX);
    }
  }
  return TJ_OK;
}

/* One kernel argument, stored in its C type at offset 0: cuLaunchKernel
 * copies as many bytes from each pointer as the kernel's parameter has. */
typedef union {
  void *p;
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  float f32;
  double f64;
} slot;

/* The address a buffer or pointer argument stands for: a tensor's data +
 * byte_offset, a raw address, or NULL for None. Validation allowed only what
 * the parameter accepts. */
static void *arg_address(const tj_arg *arg) {
  if (arg == NULL || arg->kind == TJ_ARG_NONE) return NULL;
  if (arg->kind == TJ_ARG_TENSOR) return tj__tensor_address(arg);
  return arg->value.p;
}

/* The driver's documented limits on an im2col map's own fields
 * (cuTensorMapEncodeIm2col), checked before it is called, so that a refusal
 * says which field and why: pixel box corners (rank - 2 of them) within
 * [-2**15, 2**15) for rank 3, [-2**7, 2**7) for rank 4, [-2**4, 2**4) for
 * rank 5; 1 to 256 channels per pixel, spanning no more than the swizzle;
 * 1 to 1024 pixels per column; element strides 1 to 8. */
static int check_im2col(const char *who, const tj_tensormap *t, const int64_t *lower,
                        const int64_t *upper, int64_t channels, int64_t pixels,
                        const int64_t *element_strides) {
  const int64_t bound = t->rank == 3 ? 1 << 15 : t->rank == 4 ? 1 << 7 : 1 << 4;
  for (int32_t i = 0; i < t->rank - 2; ++i)
    for (int side = 0; side < 2; ++side) {
      const int64_t v = side ? upper[i] : lower[i];
      if (v < -bound || v >= bound)
        return tj_set_error(TJ_EVALUE,
                            "%s: %s_corner[%d] = %lld; a rank-%d im2col map's pixel box corners "
                            "must be within [%lld, %lld]",
                            who, side ? "upper" : "lower", i, (long long)v, t->rank,
                            (long long)-bound, (long long)bound - 1);
    }
  if (channels < 1 || channels > 256)
    return tj_set_error(TJ_EVALUE, "%s: channels_per_pixel = %lld, expected 1 to 256", who,
                        (long long)channels);
  int64_t element_bytes = tj_tensormap_element_bytes(t->data_type);
  if (t->interleave == 0 && t->swizzle >= 1 && t->swizzle <= 3 && element_bytes > 0 &&
      channels * element_bytes > (16 << t->swizzle))
    return tj_set_error(TJ_EVALUE,
                        "%s: channels_per_pixel = %lld elements of %lld bytes span %lld bytes, "
                        "more than the %d-byte swizzle (swizzle=%d) allows",
                        who, (long long)channels, (long long)element_bytes,
                        (long long)(channels * element_bytes), 16 << t->swizzle, t->swizzle);
  if (pixels < 1 || pixels > 1024)
    return tj_set_error(TJ_EVALUE, "%s: pixels_per_column = %lld, expected 1 to 1024", who,
                        (long long)pixels);
  for (int32_t i = 0; i < t->rank; ++i)
    if (element_strides[i] > 8)
      return tj_set_error(TJ_EVALUE, "%s: element_strides[%d] = %lld, expected 1 to 8", who, i,
                          (long long)element_strides[i]);
  return TJ_OK;
}

/* Evaluates `n` expression ids of a tensor map's field `name` into out, each
 * within [low, high] (eval_within). */
static int eval_fields(const tj_frame *f, const char *who, const char *name, const int32_t *ids,
                       int32_t n, int64_t low, int64_t high, int64_t *out) {
  for (int32_t i = 0; i < n; ++i) {
    int evaluated;
    if (!eval_within(f, ids[i], low, high, &out[i], &evaluated)) {
      char what[64];
      snprintf(what, sizeof(what), "%s[%d]", name, i);
      return eval_refused(f, who, what, ids[i], evaluated, out[i], low, high);
    }
  }
  return TJ_OK;
}

/* A tensor map's fields evaluated for one call (tiled: box; im2col: the pixel
 * box corners, channels per pixel and pixels per column in pixel[0..1]). */
typedef struct {
  int64_t dims[TJ_MAX_TENSORMAP_RANK], strides[TJ_MAX_TENSORMAP_RANK];
  int64_t box[TJ_MAX_TENSORMAP_RANK], elements[TJ_MAX_TENSORMAP_RANK];
  int64_t lower[3], upper[3], pixel[2];
} map_values;

/* Evaluates the fields of tensor map `t` over the bound symbols, each within
 * the driver's range, and checks an im2col map's limits. */
static int eval_tensormap(const tj_frame *f, const char *who, const tj_tensormap *t,
                          map_values *v) {
  const int32_t r = t->rank;
  int rc;
  if ((rc = eval_fields(f, who, "dims", t->dims, r, 1, UINT32_MAX, v->dims)) ||
      (rc = eval_fields(f, who, "strides", t->strides, r - 1, 1, INT64_MAX, v->strides)) ||
      (rc = eval_fields(f, who, "element_strides", t->element_strides, r, 1, UINT32_MAX,
                        v->elements)))
    return rc;
  if (!t->im2col) return eval_fields(f, who, "box", t->box, r, 1, UINT32_MAX, v->box);
  if ((rc = eval_fields(f, who, "lower_corner", t->lower_corner, r - 2, INT32_MIN, INT32_MAX,
                        v->lower)) ||
      (rc = eval_fields(f, who, "upper_corner", t->upper_corner, r - 2, INT32_MIN, INT32_MAX,
                        v->upper)) ||
      (rc = eval_fields(f, who, "channels_per_pixel", &t->channels_per_pixel, 1, 1, UINT32_MAX,
                        &v->pixel[0])) ||
      (rc = eval_fields(f, who, "pixels_per_column", &t->pixels_per_column, 1, 1, UINT32_MAX,
                        &v->pixel[1])))
    return rc;
  return check_im2col(who, t, v->lower, v->upper, v->pixel[0], v->pixel[1], v->elements);
}

/* A failed encoding: the driver's error with the call as it was made. */
static int encode_failed(const driver *d, const char *who, const char *encoder,
                         const tj_tensormap *t, const void *address, const map_values *v,
                         CUresult result) {
  const int32_t r = t->rank;
  char a[120], b[120], c[300], e[120], call[1200];
  tj__format_tuple(v->dims, r, a, sizeof(a));
  tj__format_tuple(v->strides, r - 1, b, sizeof(b));
  tj__format_tuple(v->elements, r, e, sizeof(e));
  if (t->im2col) {
    char lo[60], up[60];
    tj__format_tuple(v->lower, r - 2, lo, sizeof(lo));
    tj__format_tuple(v->upper, r - 2, up, sizeof(up));
    snprintf(c, sizeof(c),
             "pixel box lower corner %s, upper corner %s, channels per pixel %lld, pixels per "
             "column %lld",
             lo, up, (long long)v->pixel[0], (long long)v->pixel[1]);
  } else {
    char bx[120];
    tj__format_tuple(v->box, r, bx, sizeof(bx));
    snprintf(c, sizeof(c), "box %s", bx);
  }
  snprintf(call, sizeof(call),
           "%s(data type %d, rank %d, address %p, dims %s, strides %s, %s, element strides %s, "
           "interleave %d, swizzle %d, L2 promotion %d, OOB fill %d)",
           encoder, t->data_type, r, address, a, b, c, e, t->interleave, t->swizzle,
           t->l2_promotion, t->oob_fill);
  return driver_error(d, who, call, result);
}

/* Encodes tensor map `m` for this call into *out. */
static int encode_tensormap(const driver *d, const tj_frame *f, int32_t m, CUtensorMap *out) {
  const tj_kernel *k = f->kernel;
  const tj_tensormap *t = &k->tensormaps[m];
  const char *param = k->params[t->param].name;
  const char *encoder = t->im2col ? "cuTensorMapEncodeIm2col" : "cuTensorMapEncodeTiled";
  char who[400];
  snprintf(who, sizeof(who), "%s: tensor map '%s' (of '%s')", k->name, t->name, param);
  if (t->im2col ? d->cuTensorMapEncodeIm2col == NULL : d->cuTensorMapEncodeTiled == NULL)
    return tj_set_error(TJ_ERUNTIME,
                        "%s: the CUDA driver has no %s (TMA needs CUDA 12 and a Hopper or newer "
                        "GPU)",
                        who, encoder);
  void *address = arg_address(f->params[t->param]);
  if (address == NULL)
    return tj_set_error(TJ_EVALUE, "%s: '%s' is None; a tensor map needs its tensor", who, param);
  const int32_t r = t->rank;
  map_values v;
  int rc = eval_tensormap(f, who, t, &v);
  if (rc) return rc;
  uint64_t udims[TJ_MAX_TENSORMAP_RANK], ustrides[TJ_MAX_TENSORMAP_RANK];
  uint32_t ubox[TJ_MAX_TENSORMAP_RANK], uelements[TJ_MAX_TENSORMAP_RANK];
  int ilower[3], iupper[3];
  for (int32_t i = 0; i < r; ++i) {
    udims[i] = (uint64_t)v.dims[i];
    uelements[i] = (uint32_t)v.elements[i];
    if (!t->im2col) ubox[i] = (uint32_t)v.box[i];
    if (i + 1 < r) ustrides[i] = (uint64_t)v.strides[i];
    if (t->im2col && i < r - 2) {
      ilower[i] = (int)v.lower[i];
      iupper[i] = (int)v.upper[i];
    }
  }
  CUresult result = t->im2col
                        ? d->cuTensorMapEncodeIm2col(out, t->data_type, (uint32_t)r, address, udims,
                                                     ustrides, ilower, iupper, (uint32_t)v.pixel[0],
                                                     (uint32_t)v.pixel[1], uelements, t->interleave,
                                                     t->swizzle, t->l2_promotion, t->oob_fill)
                        : d->cuTensorMapEncodeTiled(out, t->data_type, (uint32_t)r, address, udims,
                                                    ustrides, ubox, uelements, t->interleave,
                                                    t->swizzle, t->l2_promotion, t->oob_fill);
  if (result == 0) return TJ_OK;
  return encode_failed(d, who, encoder, t, address, &v, result);
}

/* Zero-fills the workspaces that ask for it (TJ_BUF_ZERO), on the launch
 * stream, before any kernel of the call runs there. */
static int zero_workspaces(const driver *d, const tj_frame *f, void *stream) {
  const tj_kernel *k = f->kernel;
  for (int32_t o = k->noutputs; o < k->nallocs; ++o) {
    int64_t bytes;
    void *address = tj__workspace_to_zero(f, o, &bytes);
    if (address == NULL) continue;
    const char *name = k->params[k->output_params[o]].name;
    if (d->cuMemsetD8Async == NULL)
      return tj_set_error(TJ_ERUNTIME, "%s: workspace '%s': the CUDA driver has no cuMemsetD8Async",
                          k->name, name);
    CUresult rc = d->cuMemsetD8Async((unsigned long long)(uintptr_t)address, 0, (size_t)bytes,
                                     (CUstream)stream);
    if (rc != 0) { /* the workspace is named in a message alone */
      char who[300], call[200];
      snprintf(who, sizeof(who), "%s: workspace '%s'", k->name, name);
      snprintf(call, sizeof(call), "cuMemsetD8Async(%p, 0, %lld bytes, stream %p)", address,
               (long long)bytes, stream);
      return driver_error(d, who, call, rc);
    }
  }
  return TJ_OK;
}

int tj__cuda_wait(const tj_frame *f) {
  const driver *d = get_driver(f->kernel->name);
  if (d == NULL) return TJ_ERUNTIME;
  if (d->cuStreamSynchronize == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: the CUDA driver has no cuStreamSynchronize",
                        f->kernel->name);
  CUresult rc = d->cuStreamSynchronize((CUstream)f->stream);
  if (rc == 0) return TJ_OK;
  char call[100];
  snprintf(call, sizeof(call), "cuStreamSynchronize(%p)", f->stream);
  return driver_error(d, f->kernel->name, call, rc);
}

static void pack(const tj_frame *f, const tj__launch *launch, const CUtensorMap *maps, slot *slots,
                 void **params) {
  const tj_kernel *k = f->kernel;
  for (int32_t a = 0; a < launch->nabi; ++a) {
    const tj_abi_arg *entry = &launch->abi[a];
    slot *s = &slots[a];
    memset(s, 0, sizeof(*s));
    params[a] = s;
    if (entry->source == TJ_ABI_TENSORMAP) {
      params[a] = (void *)&maps[entry->index];
      continue;
    }
    if (entry->source != TJ_ABI_PARAM) {
      /* A symbol or expression, in the width the kernel declares (bind
       * checked the value fits). */
      int64_t v = 0;
      tj__abi_integer(f, entry, &v);
      if (tj__abi_bytes(k, entry) == 4)
        s->i32 = (int32_t)v;
      else
        s->i64 = v;
      continue;
    }
    const tj__param *p = &k->params[entry->index];
    const tj_arg *arg = f->params[entry->index];
    if (p->kind == TJ_PARAM_SCALAR && p->dtype.code == kDLFloat) {
      double v = tj__float_value(arg);
      if (p->dtype.bits == 32)
        s->f32 = (float)v;
      else
        s->f64 = v;
    } else if (p->kind == TJ_PARAM_SCALAR) {
      /* Integers and bool, truncated to their width (validation checked the
       * range); unsigned values have the same bytes as their signed twins. */
      int64_t v = arg->value.i;
      switch (p->dtype.bits) {
        case 8: s->i8 = (int8_t)v; break;
        case 16: s->i16 = (int16_t)v; break;
        case 32: s->i32 = (int32_t)v; break;
        default: s->i64 = v; break;
      }
    } else {
      s->p = arg_address(arg);
    }
  }
}

/* Launches launch `l` with configuration `cfg` (eval_launch): through
 * cuLaunchKernelEx when it has attributes, else cuLaunchKernel. */
static int launch_one(const driver *d, const tj_kernel *k, int32_t l, CUfunction function,
                      const int64_t cfg[10], void **params, void *stream) {
  const tj__launch *launch = &k->launches[l];
  CUresult rc;
  const char *via = "cuLaunchKernel";
  if (launch->has_cluster || launch->flags) {
    via = "cuLaunchKernelEx";
    if (d->cuLaunchKernelEx == NULL) {
      char who[300];
      launch_label(k, l, who, sizeof(who));
      return tj_set_error(TJ_ERUNTIME,
                          "%s: the CUDA driver has no cuLaunchKernelEx, needed for cluster, "
                          "cooperative and programmatic dependent launches (CUDA 12 or newer)",
                          who);
    }
    CUlaunchAttribute attrs[3];
    unsigned n = 0;
    memset(attrs, 0, sizeof(attrs));
    if (launch->has_cluster) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.cluster_dim.x = (unsigned)cfg[7];
      attrs[n].value.cluster_dim.y = (unsigned)cfg[8];
      attrs[n++].value.cluster_dim.z = (unsigned)cfg[9];
    }
    if (launch->flags & TJ_LAUNCH_COOPERATIVE) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n++].value.cooperative = 1;
    }
    if (launch->flags & TJ_LAUNCH_PDL) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n++].value.programmatic_stream_serialization_allowed = 1;
    }
    CUlaunchConfig config = {(unsigned)cfg[0],
                             (unsigned)cfg[1],
                             (unsigned)cfg[2],
                             (unsigned)cfg[3],
                             (unsigned)cfg[4],
                             (unsigned)cfg[5],
                             (unsigned)cfg[6],
                             (CUstream)stream,
                             attrs,
                             n};
    rc = d->cuLaunchKernelEx(&config, function, params, NULL);
  } else {
    rc = d->cuLaunchKernel(function, (unsigned)cfg[0], (unsigned)cfg[1], (unsigned)cfg[2],
                           (unsigned)cfg[3], (unsigned)cfg[4], (unsigned)cfg[5], (unsigned)cfg[6],
                           (CUstream)stream, params, NULL);
  }
  if (rc == 0) return TJ_OK;
  char who[300], call[400];
  launch_label(k, l, who, sizeof(who));
  int used = snprintf(call, sizeof(call),
                      "%s(grid (%lld, %lld, %lld), block (%lld, %lld, %lld), shared memory "
                      "%lld bytes",
                      via, (long long)cfg[0], (long long)cfg[1], (long long)cfg[2],
                      (long long)cfg[3], (long long)cfg[4], (long long)cfg[5], (long long)cfg[6]);
  if (launch->has_cluster && used > 0 && (size_t)used < sizeof(call))
    used += snprintf(call + used, sizeof(call) - (size_t)used, ", cluster (%lld, %lld, %lld)",
                     (long long)cfg[7], (long long)cfg[8], (long long)cfg[9]);
  if (used > 0 && (size_t)used < sizeof(call))
    snprintf(call + used, sizeof(call) - (size_t)used, "%s%s, stream %p)",
             (launch->flags & TJ_LAUNCH_COOPERATIVE) ? ", cooperative" : "",
             (launch->flags & TJ_LAUNCH_PDL) ? ", programmatic dependent launch" : "", stream);
  return driver_error(d, who, call, rc);
}

/* The context a launch runs in, and how it was entered. */
typedef struct {
  CUcontext ctx;
  CUdevice device;
  ctx_entry *entry; /* the kernel's module there; NULL: not loaded yet */
  int pushed;       /* 1: pushed for this launch, popped by leave_context */
} launch_context;

/* Enters the context a launch on device `want` runs in (-1: no tensor says
 * which): the calling thread's current one when it is on that device (as
 * torch leaves it), found with one cuCtxGetCurrent. A thread with no current
 * context gets the device's primary one made current (cuCtxSetCurrent) and
 * left so, as the CUDA runtime does at its first call on a thread: later
 * launches then find it with that one query, and never push or pop. A thread
 * whose current context is another device's keeps it: the primary context is
 * pushed for this launch only. With no tensor argument, any current context
 * goes, else device 0. DLPack device ids are device ordinals, which CUdevice
 * handles equal. */
static int enter_context(const driver *d, const tj_kernel *k, int32_t want, launch_context *c) {
  CUcontext current = NULL;
  c->ctx = NULL;
  c->device = 0;
  c->entry = NULL;
  c->pushed = 0;
  CUresult rc = d->cuCtxGetCurrent(&current);
  if (rc != 0) return driver_error(d, k->name, "cuCtxGetCurrent", rc);
  if (current != NULL) {
    c->entry = find_entry(k->cuda, current);
    if (c->entry != NULL) {
      c->device = c->entry->device;
    } else if ((rc = d->cuCtxGetDevice(&c->device)) != 0) {
      return driver_error(d, k->name, "cuCtxGetDevice", rc);
    }
    if (want < 0 || c->device == want) {
      c->ctx = current;
      return TJ_OK;
    }
    c->entry = NULL;
  }
  c->device = want < 0 ? 0 : want;
  int status = primary_context(d, k->name, c->device, &c->ctx);
  if (status) return status;
  if (current == NULL && d->cuCtxSetCurrent != NULL) {
    if ((rc = d->cuCtxSetCurrent(c->ctx)) != 0)
      return driver_error(d, k->name, "cuCtxSetCurrent", rc);
  } else if ((rc = d->cuCtxPushCurrent(c->ctx)) != 0) {
    return driver_error(d, k->name, "cuCtxPushCurrent", rc);
  } else {
    c->pushed = 1;
  }
  c->entry = find_entry(k->cuda, c->ctx);
  return TJ_OK;
}

/* Leaves the context enter_context entered: pops it if it was pushed. */
static void leave_context(const driver *d, launch_context *c) {
  CUcontext popped;
  if (c->pushed) d->cuCtxPopCurrent(&popped);
  c->pushed = 0;
}

/* A kernel that can launch: an image, and a launch configuration. */
static int launch_ready(const tj_kernel *k) {
  if (k->cuda == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: no CUDA module image is loaded", k->name);
  if (!k->has_launch)
    return tj_set_error(TJ_ERUNTIME, "%s: no launch configuration (grid, block) is set", k->name);
  return TJ_OK;
}

/* Loads the kernel's module into the entered context unless it is there.
 * Never while `stream` is being captured into a CUDA graph, where loading a
 * module is not allowed (and would break the capture): the module must have
 * been loaded ahead, by tj_kernel_warmup or an earlier launch. */
static int ensure_loaded(const driver *d, const tj_kernel *k, launch_context *c, void *stream) {
  if (c->entry != NULL) return TJ_OK;
  int capture = 0;
  if (d->cuStreamIsCapturing != NULL && d->cuStreamIsCapturing((CUstream)stream, &capture) == 0 &&
      capture != 0)
    return tj_set_error(TJ_ERUNTIME,
                        "%s: the kernel's module is not loaded on cuda:%d, and stream %p is being "
                        "captured into a CUDA graph, where no module may be loaded: call "
                        "kernel.warmup() (or the kernel once) on that device before the capture",
                        k->name, (int)c->device, stream);
  return load_entry(d, k, c->ctx, c->device, &c->entry);
}

/* The device a frame's launch runs on: its tensors', or -1 when none says. */
static int32_t frame_device(const tj_frame *f) { return f->has_device ? f->device.device_id : -1; }

int tj__cuda_launch(const tj_frame *f) {
  const tj_kernel *k = f->kernel;
  int status = launch_ready(k);
  if (status) return status;
  /* Every configuration is evaluated before anything launches. */
  int64_t cfg[TJ_MAX_LAUNCHES][10];
  for (int32_t l = 0; l < k->nlaunches; ++l)
    if ((status = eval_launch(f, l, cfg[l]))) return status;
  const driver *d = get_driver(k->name);
  if (d == NULL) return TJ_ERUNTIME;
  /* An empty grid (say, ceildiv(n, 256) with n == 0) has nothing to run. */
  int any = 0;
  for (int32_t l = 0; l < k->nlaunches; ++l) any |= cfg[l][0] && cfg[l][1] && cfg[l][2];
  if (!any) return TJ_OK;

  launch_context c;
  if ((status = enter_context(d, k, frame_device(f), &c))) return status;
  status = ensure_loaded(d, k, &c, f->stream);
  if (!status && k->zero_fill) status = zero_workspaces(d, f, f->stream);
  /* Tensor maps are encoded once per call; launches share them. */
  CUtensorMap maps[TJ_MAX_TENSORMAPS];
  for (int32_t m = 0; !status && m < k->ntensormaps; ++m)
    status = encode_tensormap(d, f, m, &maps[m]);
  for (int32_t l = 0; !status && l < k->nlaunches; ++l) {
    if (!cfg[l][0] || !cfg[l][1] || !cfg[l][2]) continue;
    if (cfg[l][6] > DEFAULT_DYNAMIC_SMEM && (status = allow_smem(d, k, c.entry, l, cfg[l][6])))
      break;
    slot slots[TJ_MAX_ABI_ARGS];
    void *params[TJ_MAX_ABI_ARGS];
    pack(f, &k->launches[l], maps, slots, params);
    status = launch_one(d, k, l, c.entry->functions[l], cfg[l], params, f->stream);
  }
  leave_context(d, &c);
  return status;
}

/* ---- Packed launches (bound launches: tj_bound) ------------------------------- */

/* Everything of a call's launches that does not depend on the stream or the
 * context: configurations, tensor maps, parameter arrays. The arrays point
 * into the structure, which therefore never moves. */
struct tj__cuda_packed {
  CUtensorMap maps[TJ_MAX_TENSORMAPS];
  const driver *d;
  int32_t any; /* some launch has a non-empty grid */
  int64_t cfg[TJ_MAX_LAUNCHES][10];
  slot slots[TJ_MAX_LAUNCHES][TJ_MAX_ABI_ARGS];
  void *params[TJ_MAX_LAUNCHES][TJ_MAX_ABI_ARGS];
};

int tj__cuda_repack(const tj_frame *f, tj__cuda_packed *p) {
  const tj_kernel *k = f->kernel;
  int status;
  for (int32_t m = 0; m < k->ntensormaps; ++m)
    if ((status = encode_tensormap(p->d, f, m, &p->maps[m]))) return status;
  for (int32_t l = 0; l < k->nlaunches; ++l)
    pack(f, &k->launches[l], p->maps, p->slots[l], p->params[l]);
  return TJ_OK;
}

int tj__cuda_pack(const tj_frame *f, tj__cuda_packed **out) {
  const tj_kernel *k = f->kernel;
  *out = NULL;
  int status = launch_ready(k);
  if (status) return status;
  size_t size = (sizeof(tj__cuda_packed) + 127) / 128 * 128;
  tj__cuda_packed *p = aligned_alloc(128, size);
  if (p == NULL) return tj_set_error(TJ_ENOMEM, "%s: out of memory for a bound launch", k->name);
  memset(p, 0, size);
  *out = p;
  for (int32_t l = 0; l < k->nlaunches; ++l) {
    if ((status = eval_launch(f, l, p->cfg[l]))) return status;
    p->any |= p->cfg[l][0] && p->cfg[l][1] && p->cfg[l][2];
  }
  if ((p->d = get_driver(k->name)) == NULL) return TJ_ERUNTIME;
  return tj__cuda_repack(f, p);
}

int tj__cuda_replay(const tj_frame *f, const tj__cuda_packed *p, void *stream) {
  const tj_kernel *k = f->kernel;
  if (!p->any) return TJ_OK;
  const driver *d = p->d;
  launch_context c;
  int status = enter_context(d, k, frame_device(f), &c);
  if (status) return status;
  status = ensure_loaded(d, k, &c, stream);
  if (!status && k->zero_fill) status = zero_workspaces(d, f, stream);
  for (int32_t l = 0; !status && l < k->nlaunches; ++l) {
    const int64_t *cfg = p->cfg[l];
    if (!cfg[0] || !cfg[1] || !cfg[2]) continue;
    if (cfg[6] > DEFAULT_DYNAMIC_SMEM && (status = allow_smem(d, k, c.entry, l, cfg[6]))) break;
    status = launch_one(d, k, l, c.entry->functions[l], cfg, (void **)p->params[l], stream);
  }
  leave_context(d, &c);
  return status;
}

void tj__cuda_packed_free(tj__cuda_packed *p) { free(p); }

/* ---- Launches the memo packed (tj__memo_pack) ---------------------------------- */

int tj__cuda_config(const tj_frame *f, int64_t cfg[10]) {
  int status = launch_ready(f->kernel);
  return status ? status : eval_launch(f, 0, cfg);
}

int tj__cuda_launch_values(const tj_kernel *k, int32_t device, const int64_t cfg[10],
                           const tj_value *values, void *stream) {
  int status = launch_ready(k);
  if (status) return status;
  const driver *d = get_driver(k->name);
  if (d == NULL) return TJ_ERUNTIME;
  if (!cfg[0] || !cfg[1] || !cfg[2]) return TJ_OK; /* an empty grid: nothing to run */
  launch_context c;
  if ((status = enter_context(d, k, device, &c))) return status;
  status = ensure_loaded(d, k, &c, stream);
  if (!status && cfg[6] > DEFAULT_DYNAMIC_SMEM) status = allow_smem(d, k, c.entry, 0, cfg[6]);
  if (!status) {
    /* Each argument at the start of its word: the driver copies the bytes the
     * kernel's parameter has (the memo wrote narrower values there). */
    void *params[TJ_MAX_ABI_ARGS];
    for (int32_t a = 0; a < k->nabi; ++a) params[a] = (void *)&values[a];
    status = launch_one(d, k, 0, c.entry->functions[0], cfg, params, stream);
  }
  leave_context(d, &c);
  return status;
}

/* ---- Loading ahead ------------------------------------------------------------- */

int tj_kernel_warmup(const tj_kernel *k, int32_t device) {
  TJ__REFUSE_NULL("tj_kernel_warmup", k);
  if (k->target != TJ_TARGET_CUDA) return TJ_OK;
  int status = launch_ready(k);
  if (status) return status;
  const driver *d = get_driver(k->name);
  if (d == NULL) return TJ_ERUNTIME;
  if (device >= 0) {
    launch_context c;
    if ((status = enter_context(d, k, device, &c))) return status;
    status = ensure_loaded(d, k, &c, NULL);
    leave_context(d, &c);
    return status;
  }
  /* The device the thread uses: its current context, if it has one. */
  CUcontext current = NULL;
  CUdevice dev = 0;
  CUresult rc = d->cuCtxGetCurrent(&current);
  if (rc != 0) return driver_error(d, k->name, "cuCtxGetCurrent", rc);
  if (current == NULL || find_entry(k->cuda, current) != NULL) return TJ_OK;
  if ((rc = d->cuCtxGetDevice(&dev)) != 0) return driver_error(d, k->name, "cuCtxGetDevice", rc);
  ctx_entry *e = NULL;
  return load_entry(d, k, current, dev, &e);
}

int tj__cuda_capturing(const tj_kernel *k, void *stream) {
  const driver *d = atomic_load_explicit(&g_driver, memory_order_acquire);
  int capture = 0;
  (void)k;
  return d != NULL && d->cuStreamIsCapturing != NULL &&
         d->cuStreamIsCapturing((CUstream)stream, &capture) == 0 && capture != 0;
}
