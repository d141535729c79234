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

#include "internal.h"

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
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_mem, CUstream stream,
                             void **params, void **extra);
  /* Optional (CUDA 12.4+): NULL when the driver lacks it. */
  CUresult (*cuFuncGetParamInfo)(CUfunction function, size_t index, size_t *offset, size_t *size);
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

/* One context a kernel is loaded in. */
typedef struct {
  CUcontext ctx;
  CUdevice device;
  CUmodule module;
  CUfunction function;
  _Atomic int64_t smem_allowed; /* dynamic shared memory opted in so far */
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
  const char *env = getenv("TILEJIT_LIBCUDA");
  const char *path = env && *env ? env : "libcuda.so.1";
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
  *(void **)&d->cuFuncGetParamInfo = dlsym(d->handle, "cuFuncGetParamInfo");
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

/* Loads the module into `ctx`, which is current, and finds the function. */
/* "parameter 2 ('n', symbol)" for messages about kernel ABI argument `a`. */
static void abi_label(const tj_kernel *k, int32_t a, char *buf, size_t size) {
  const tj_abi_arg *e = &k->abi[a];
  const char *name = e->source == TJ_ABI_PARAM    ? k->params[e->index].name
                     : e->source == TJ_ABI_SYMBOL ? k->symbol_names[e->index]
                                                  : k->exprs[e->index].text;
  snprintf(buf, size, "parameter %d ('%s')", a, name);
}

/* Where the driver can tell (cuFuncGetParamInfo), the loaded function must
 * take as many parameters as the signature declares, each of the declared
 * size: a prebuilt image is checked before its first launch. */
static int check_params(const driver *d, const tj_kernel *k, CUfunction function) {
  if (d->cuFuncGetParamInfo == NULL) return TJ_OK;
  size_t offset, size;
  char label[200];
  for (int32_t a = 0; a < k->nabi; ++a) {
    if (d->cuFuncGetParamInfo(function, (size_t)a, &offset, &size) != 0)
      return tj_set_error(TJ_EVALUE,
                          "%s: the loaded function '%s' takes %d parameters, the signature "
                          "declares %d",
                          k->name, k->image_symbol, a, k->nabi);
    int64_t want = tj__abi_bytes(k, &k->abi[a]);
    if ((int64_t)size != want) {
      abi_label(k, a, label, sizeof(label));
      return tj_set_error(TJ_EVALUE,
                          "%s: %s of the loaded function '%s' is %zu bytes, the signature "
                          "declares %lld bytes",
                          k->name, label, k->image_symbol, size, (long long)want);
    }
  }
  if (d->cuFuncGetParamInfo(function, (size_t)k->nabi, &offset, &size) == 0)
    return tj_set_error(TJ_EVALUE,
                        "%s: the loaded function '%s' takes more than the %d parameters the "
                        "signature declares",
                        k->name, k->image_symbol, k->nabi);
  return TJ_OK;
}

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
    CUfunction function = NULL;
    CUresult rc = d->cuModuleLoadData(&module, k->image);
    if (rc != 0) {
      status = driver_error(d, k->name, "cuModuleLoadData", rc);
    } else if ((rc = d->cuModuleGetFunction(&function, module, k->image_symbol)) != 0) {
      char call[300];
      snprintf(call, sizeof(call), "cuModuleGetFunction(\"%s\")", k->image_symbol);
      driver_error(d, k->name, call, rc);
      char msg[600];
      snprintf(msg, sizeof(msg),
               "%s; the module image has no extern \"C\" __global__ function of that name",
               tj_last_error());
      status = tj_set_error(TJ_ERUNTIME, "%s", msg);
      d->cuModuleUnload(module);
    } else if ((status = check_params(d, k, function)) != TJ_OK) {
      d->cuModuleUnload(module);
    } else {
      e = &m->entries[n];
      e->ctx = ctx;
      e->device = device;
      e->module = module;
      e->function = function;
      atomic_store(&e->smem_allowed, DEFAULT_DYNAMIC_SMEM);
      atomic_store_explicit(&m->count, n + 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&m->lock);
  *out = e;
  return status;
}

/* Opts the function in to `smem` bytes of dynamic shared memory, once per
 * larger amount. */
static int allow_smem(const driver *d, const tj_kernel *k, ctx_entry *e, int64_t smem) {
  if (smem <= atomic_load(&e->smem_allowed)) return TJ_OK;
  int status = TJ_OK;
  pthread_mutex_lock(&k->cuda->lock);
  if (smem > atomic_load(&e->smem_allowed)) {
    CUresult rc = d->cuFuncSetAttribute(e->function,
                                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    if (rc == 0) {
      atomic_store(&e->smem_allowed, smem);
    } else {
      char call[160];
      snprintf(call, sizeof(call), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, %lld)",
               (long long)smem);
      driver_error(d, k->name, call, rc);
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

/* Evaluates the launch configuration: grid, block, shared memory. */
static int eval_launch(const tj_frame *f, int64_t out[7]) {
  static const char *const what[7] = {"grid[0]",  "grid[1]",  "grid[2]",   "block[0]",
                                      "block[1]", "block[2]", "shared_mem"};
  const tj_kernel *k = f->kernel;
  for (int i = 0; i < 7; ++i) {
    const tj__expr *e = &k->exprs[k->launch[i]];
    if (tj_expr_eval(e->code, e->n, f->symbols, &out[i]) != TJ_OK) {
      char why[400];
      snprintf(why, sizeof(why), "%s", tj_last_error());
      return tj_set_error(TJ_EVALUE, "%s: cannot evaluate %s = %s: %s", k->name, what[i], e->text,
                          why);
    }
    int64_t low = (i >= 3 && i < 6) ? 1 : 0;
    if (out[i] < low || out[i] > (int64_t)UINT32_MAX)
      return tj_set_error(TJ_EVALUE, "%s: %s = %s evaluates to %lld, expected %s", k->name, what[i],
                          e->text, (long long)out[i], low ? "1 to 4294967295" : "0 to 4294967295");
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

static void pack(const tj_frame *f, slot *slots, void **params) {
  const tj_kernel *k = f->kernel;
  for (int32_t a = 0; a < k->nabi; ++a) {
    const tj_abi_arg *entry = &k->abi[a];
    slot *s = &slots[a];
    memset(s, 0, sizeof(*s));
    params[a] = s;
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
      double v = arg->kind == TJ_ARG_INT ? (double)arg->value.i : arg->value.f;
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
    } else if (p->kind == TJ_PARAM_POINTER && arg->kind != TJ_ARG_TENSOR) {
      s->p = arg->kind == TJ_ARG_NONE ? NULL : arg->value.p;
    } else {
      s->p = tj__tensor_address(arg);
    }
  }
}

int tj__cuda_launch(const tj_frame *f) {
  const tj_kernel *k = f->kernel;
  if (k->cuda == NULL)
    return tj_set_error(TJ_ERUNTIME, "%s: no CUDA module image is loaded", k->name);
  if (!k->has_launch)
    return tj_set_error(TJ_ERUNTIME, "%s: no launch configuration (grid, block) is set", k->name);
  int64_t cfg[7];
  int status = eval_launch(f, cfg);
  if (status) return status;
  const driver *d = get_driver(k->name);
  if (d == NULL) return TJ_ERUNTIME;
  /* An empty grid (say, ceildiv(n, 256) with n == 0) has nothing to run. */
  if (cfg[0] == 0 || cfg[1] == 0 || cfg[2] == 0) return TJ_OK;

  /* The context: the calling thread's current one when it is on the tensors'
   * device (as with torch, which makes the primary context current), else
   * that device's primary context, pushed for this launch only. With no
   * tensor argument, any current context goes, else device 0. DLPack device
   * ids are device ordinals, which CUdevice handles equal. */
  int32_t want = f->has_device ? f->device.device_id : -1;
  CUcontext ctx = NULL, popped;
  CUdevice device = 0;
  ctx_entry *e = NULL;
  int pushed = 0;
  CUresult rc = d->cuCtxGetCurrent(&ctx);
  if (rc != 0) return driver_error(d, k->name, "cuCtxGetCurrent", rc);
  if (ctx != NULL) {
    e = find_entry(k->cuda, ctx);
    if (e != NULL) {
      device = e->device;
    } else if ((rc = d->cuCtxGetDevice(&device)) != 0) {
      return driver_error(d, k->name, "cuCtxGetDevice", rc);
    }
    if (want >= 0 && device != want) {
      ctx = NULL;
      e = NULL;
    }
  }
  if (ctx == NULL) {
    device = want < 0 ? 0 : want;
    if ((status = primary_context(d, k->name, device, &ctx))) return status;
    if ((rc = d->cuCtxPushCurrent(ctx)) != 0)
      return driver_error(d, k->name, "cuCtxPushCurrent", rc);
    pushed = 1;
    e = find_entry(k->cuda, ctx);
  }
  if (e == NULL) status = load_entry(d, k, ctx, device, &e);
  if (!status && cfg[6] > DEFAULT_DYNAMIC_SMEM) status = allow_smem(d, k, e, cfg[6]);
  if (!status) {
    slot slots[TJ_MAX_ABI_ARGS];
    void *params[TJ_MAX_ABI_ARGS];
    pack(f, slots, params);
    rc = d->cuLaunchKernel(e->function, (unsigned)cfg[0], (unsigned)cfg[1], (unsigned)cfg[2],
                           (unsigned)cfg[3], (unsigned)cfg[4], (unsigned)cfg[5], (unsigned)cfg[6],
                           (CUstream)f->stream, params, NULL);
    if (rc != 0) {
      char call[300];
      snprintf(call, sizeof(call),
               "cuLaunchKernel(grid (%lld, %lld, %lld), block (%lld, %lld, %lld), shared memory "
               "%lld bytes, stream %p)",
               (long long)cfg[0], (long long)cfg[1], (long long)cfg[2], (long long)cfg[3],
               (long long)cfg[4], (long long)cfg[5], (long long)cfg[6], f->stream);
      status = driver_error(d, k->name, call, rc);
    }
  }
  if (pushed) d->cuCtxPopCurrent(&popped);
  return status;
}
