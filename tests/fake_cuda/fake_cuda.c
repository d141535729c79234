/*
 * A fake CUDA driver (libcuda) for tests on machines without a GPU.
 *
 * It implements the driver entry points the tilejit core uses, over no
 * device, behaving as the real driver does where tilejit depends on it
 * (contexts per thread, modules per context, a function's parameters read
 * from the module image, dynamic shared memory above 48 KiB only after
 * cuFuncSetAttribute), and records every call (but the two error-naming
 * entry points and cuFuncGetParamInfo, which only describe).
 *
 *   cc -shared -fPIC -o libfake_cuda.so fake_cuda.c -pthread \
 *      [-DFAKE_CUDA_REAL_HEADER -I$CUDA_HOME/include]
 *
 * With FAKE_CUDA_REAL_HEADER the prototypes and constants come from the real
 * cuda.h, so building the fake checks them against the driver's ABI; a core
 * that used a wrong constant would see the fake refuse it, as the driver
 * would.
 *
 * Module images are parsed as the driver does: a cubin (ELF) gives each
 * kernel's parameter sizes in its .nv.info.<name> section, a fatbin holds
 * cubins (uncompressed: nvcc --no-compress), PTX declares them in the .entry
 * line. cuLaunchKernel and cuLaunchKernelEx record exactly as many bytes per
 * argument as the kernel's parameter has (a CUtensorMap: 128);
 * cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col record their arguments and
 * write a map whose bytes name them; cuMemsetD8Async and cuStreamSynchronize
 * record theirs. Stream capture (cuStreamBeginCapture, cuStreamIsCapturing,
 * cuStreamEndCapture) is modelled as the driver's default global mode: a launch
 * on a captured stream is recorded with "captured": 1, and a call the driver
 * refuses during a capture fails, is counted and breaks the capture.
 *
 * Control, for tests (dlsym / ctypes on the same library path the core
 * loads, which is the same loaded copy):
 *   fake_cuda_reset()                 forget the records and injected failures
 *   fake_cuda_fail(fn, code, count)   the next `count` calls of entry point fn
 *                                     return `code` (count < 0: every call)
 *   fake_cuda_set_capability(major, minor), fake_cuda_set_devices(n)
 *   fake_cuda_set_device_capability(device, major, minor)   one device's own
 *   fake_cuda_set_current(device)     make a device's primary context current
 *                                     on the calling thread (-1: none)
 *   fake_cuda_count(fn)               recorded calls of fn ("" or NULL: all)
 *   fake_cuda_forbidden()             calls made while a stream was captured
 *                                     that the driver refuses then (module
 *                                     load or unload, cuMemAlloc,
 *                                     cuStreamSynchronize): each fails with
 *                                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *                                     is recorded with "forbidden_in_capture"
 *                                     and invalidates the captures
 *   fake_cuda_json()                  every record, as a JSON array; the
 *                                     string lives until the next call
 *   fake_cuda_quiet(on)               on: successful cuCtxGetCurrent and
 *                                     cuLaunchKernel calls are checked but
 *                                     not recorded, so that they cost what a
 *                                     driver's host side does (a benchmark's
 *                                     mode; fake_cuda_reset keeps it)
 * FAKE_CUDA_LOG=path also appends each record to that file as a JSON line.
 *
 * Records: {"fn": name, "result": code, ...call fields}; contexts appear as
 * their device ordinal (-1: none), modules as 1, 2, ... in load order,
 * functions by name, streams and pointers as integers, arguments as hex
 * strings of their bytes, the module image as hex.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FAKE_CUDA_REAL_HEADER
#include <cuda.h>
typedef CUdevice_attribute fake_device_attribute;
typedef CUfunction_attribute fake_function_attribute;
#else
#define CUDAAPI
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef int fake_device_attribute;
typedef int fake_function_attribute;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED 14
#define CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2
#define CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef unsigned int cuuint32_t;
typedef unsigned long long cuuint64_t;
typedef int CUlaunchAttributeID;
typedef union {
  char pad[64];
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int cooperative;
  int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef struct {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;
typedef struct {
  _Alignas(64) cuuint64_t opaque[16];
} CUtensorMap;
typedef int CUtensorMapDataType;
typedef int CUtensorMapInterleave;
typedef int CUtensorMapSwizzle;
typedef int CUtensorMapL2promotion;
typedef int CUtensorMapFloatOOBfill;
typedef unsigned long long CUdeviceptr;
typedef int CUstreamCaptureMode;
typedef int CUstreamCaptureStatus;
typedef struct CUgraph_st *CUgraph;
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
#define CU_STREAM_CAPTURE_STATUS_NONE 0
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CU_STREAM_CAPTURE_STATUS_INVALIDATED 2
#endif

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 8
#define MAX_PARAMS 256
#define MAX_STACK 16
#define SMEM_DEFAULT (48 * 1024)
#define SMEM_OPTIN (227 * 1024)

/* ---- State ------------------------------------------------------------------ */

typedef struct fake_function {
  struct fake_function *next;
  struct fake_module *module;
  char name[256];
  int nparams;
  int sizes[MAX_PARAMS];
  int smem_allowed;
  int non_portable; /* NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
} fake_function;

typedef struct fake_module {
  struct fake_module *next;
  int id;
  int device; /* of the context it was loaded in */
  int unloaded;
  unsigned char *image;
  size_t size;
  fake_function *functions;
} fake_module;

typedef struct record {
  struct record *next;
  char *json;
  char fn[40];
} record;

typedef struct failure {
  char fn[40];
  int code;
  int remaining; /* < 0: forever */
} failure;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_devices = 2;
static int g_major = 8, g_minor = 0;
/* A device's own capability (a machine of mixed GPUs); -1: g_major.g_minor. */
static int g_dev_major[MAX_DEVICES], g_dev_minor[MAX_DEVICES];
static int g_dev_set[MAX_DEVICES];
/* A context is the address of its device's slot: one primary context each. */
static char g_contexts[MAX_DEVICES];
static int g_retained[MAX_DEVICES];
static fake_module *g_modules;
static int g_next_module = 1;
static record *g_records, **g_records_tail = &g_records;
static failure g_failures[16];
static int g_nfailures;
static char *g_json;
static int g_quiet; /* fake_cuda_quiet */

/* Streams being captured (cuStreamBeginCapture), each until its
 * cuStreamEndCapture; a capture a forbidden call broke is invalidated. */
#define MAX_CAPTURES 8
static struct {
  CUstream stream;
  int invalidated;
} g_captures[MAX_CAPTURES];
static int g_ncaptures;
static int g_forbidden; /* forbidden calls made while a stream was captured */

static _Thread_local CUcontext t_stack[MAX_STACK];
static _Thread_local int t_depth;

static int context_device(CUcontext ctx) {
  if (ctx == NULL) return -1;
  return (int)((char *)ctx - g_contexts);
}

static CUcontext current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

/* ---- Records ------------------------------------------------------------------ */

typedef struct {
  char *buf;
  size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (t->buf && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap : 256;
    while (cap <= t->len + (size_t)n) cap *= 2;
    char *grown = realloc(t->buf, cap);
    if (grown == NULL) abort();
    t->buf = grown;
    t->cap = cap;
  }
}

static void put_hex(text *t, const void *data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *p = data;
  put(t, "\"");
  for (size_t i = 0; i < n; ++i) put(t, "%c%c", digits[p[i] >> 4], digits[p[i] & 15]);
  put(t, "\"");
}

static void put_string(text *t, const char *s) {
  put(t, "\"");
  for (; s && *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      put(t, "\\%c", c);
    else if (c < 0x20)
      put(t, "\\u%04x", c);
    else
      put(t, "%c", c);
  }
  put(t, "\"");
}

/* Starts a record: {"fn": fn, "result": result, "context": current */
static text begin(const char *fn, CUresult result) {
  text t = {0};
  put(&t, "{\"fn\": \"%s\", \"result\": %d, \"context\": %d", fn, (int)result,
      context_device(current()));
  return t;
}

/* Ends a record and stores it (and logs it). Called with g_lock held. */
static CUresult finish(text *t, const char *fn, CUresult result) {
  put(t, "}");
  record *r = calloc(1, sizeof(*r));
  if (r == NULL) abort();
  r->json = t->buf;
  snprintf(r->fn, sizeof(r->fn), "%s", fn);
  *g_records_tail = r;
  g_records_tail = &r->next;
  const char *log = getenv("FAKE_CUDA_LOG");
  if (log && *log) {
    FILE *f = fopen(log, "a");
    if (f) {
      fprintf(f, "%s\n", r->json);
      fclose(f);
    }
  }
  return result;
}

/* An injected failure for `fn`, or CUDA_SUCCESS. Called with g_lock held. */
static CUresult injected(const char *fn) {
  for (int i = 0; i < g_nfailures; ++i) {
    failure *f = &g_failures[i];
    if (strcmp(f->fn, fn) != 0 || f->remaining == 0) continue;
    if (f->remaining > 0) --f->remaining;
    return (CUresult)f->code;
  }
  return CUDA_SUCCESS;
}

/* Records a call that ends without fields beyond fn/result/context. */
static CUresult simple(const char *fn, CUresult result) {
  text t = begin(fn, result);
  return finish(&t, fn, result);
}

/* The capture of `stream`, or -1. */
static int capture_of(CUstream stream) {
  for (int i = 0; i < g_ncaptures; ++i)
    if (g_captures[i].stream == stream) return i;
  return -1;
}

/* A call the driver refuses while any stream is captured (in the default,
 * global capture mode: loading a module, allocating memory, synchronizing):
 * recorded with "forbidden_in_capture", counted, and the captures broken. */
static CUresult forbidden_in_capture(const char *fn) {
  if (g_ncaptures == 0) return CUDA_SUCCESS;
  ++g_forbidden;
  for (int i = 0; i < g_ncaptures; ++i) g_captures[i].invalidated = 1;
  text t = begin(fn, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  put(&t, ", \"forbidden_in_capture\": 1");
  return finish(&t, fn, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

#define REFUSE_IN_CAPTURE(fn)                          \
  do {                                                 \
    CUresult forbidden_ = forbidden_in_capture(fn);    \
    if (forbidden_ != CUDA_SUCCESS) LEAVE(forbidden_); \
  } while (0)

/* ---- Images ------------------------------------------------------------------- */

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16;
}
static uint64_t rd64(const unsigned char *p) {
  return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int is_elf(const unsigned char *p) {
  return p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && p[4] == 2; /* ELF64 */
}
static int is_fatbin(const unsigned char *p) { return rd32(p) == 0xBA55ED50u; }

/* The size of an image, as the driver finds it from its headers. */
static size_t image_size(const unsigned char *p) {
  if (is_elf(p)) {
    uint64_t sh = rd64(p + 0x28) + (uint64_t)rd16(p + 0x3A) * rd16(p + 0x3C);
    uint64_t ph = rd64(p + 0x20) + (uint64_t)rd16(p + 0x36) * rd16(p + 0x38);
    return (size_t)(sh > ph ? sh : ph);
  }
  if (is_fatbin(p)) return (size_t)(rd16(p + 6) + rd64(p + 8));
  return strlen((const char *)p) + 1; /* PTX text and its NUL */
}

/* Finds `name`'s parameters in a cubin: 1 and sizes if it defines the kernel,
 * 0 if not. */
static int elf_params(const unsigned char *p, size_t size, const char *name, fake_function *fn) {
  uint64_t shoff = rd64(p + 0x28);
  unsigned shentsize = rd16(p + 0x3A), shnum = rd16(p + 0x3C), shstrndx = rd16(p + 0x3E);
  if (shoff + (uint64_t)shnum * shentsize > size || shstrndx >= shnum) return 0;
  const unsigned char *strtab = p + rd64(p + shoff + (uint64_t)shstrndx * shentsize + 0x18);
  char info_name[300], text_name[300];
  snprintf(info_name, sizeof(info_name), ".nv.info.%s", name);
  snprintf(text_name, sizeof(text_name), ".text.%s", name);
  int has_text = 0;
  fn->nparams = 0;
  for (unsigned i = 0; i < shnum; ++i) {
    const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
    const char *sname = (const char *)strtab + rd32(sh);
    uint64_t off = rd64(sh + 0x18), len = rd64(sh + 0x20);
    if (strcmp(sname, text_name) == 0) has_text = 1;
    if (strcmp(sname, info_name) != 0 || off + len > size) continue;
    /* Attributes: format byte, attribute byte, then by format nothing (1),
     * one byte (2), two bytes (3) or a 16-bit size and that many bytes (4).
     * EIATTR_KPARAM_INFO (0x17): u32 index, u16 ordinal, u16 offset, u32
     * flags whose bits 18..31 are the parameter's size. */
    const unsigned char *a = p + off, *end = p + off + len;
    while (a + 2 <= end) {
      unsigned format = a[0], attribute = a[1];
      const unsigned char *data = a + 2;
      size_t n = format == 1 ? 0 : format == 2 ? 1 : format == 3 ? 2 : 0;
      if (format == 4) {
        n = rd16(a + 2);
        data = a + 4;
      }
      if (attribute == 0x17 && format == 4 && n >= 12) {
        unsigned ordinal = rd16(data + 4);
        if (ordinal < MAX_PARAMS) {
          fn->sizes[ordinal] = (int)((rd32(data + 8) >> 18) & 0x3fff);
          if ((int)ordinal + 1 > fn->nparams) fn->nparams = (int)ordinal + 1;
        }
      }
      a = data + n;
    }
  }
  return has_text;
}

static const char *skip_space(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') ++s;
  return s;
}

/* Finds `name`'s parameters in PTX text: `.entry name(.param .u64 a, ...)`. */
static int ptx_params(const char *ptx, const char *name, fake_function *fn) {
  size_t nlen = strlen(name);
  for (const char *s = strstr(ptx, ".entry"); s; s = strstr(s + 1, ".entry")) {
    const char *q = skip_space(s + 6);
    if (strncmp(q, name, nlen) != 0) continue;
    q = skip_space(q + nlen);
    if (*q != '(') continue;
    fn->nparams = 0;
    for (++q;;) {
      q = skip_space(q);
      if (*q == ')' || *q == 0) return 1;
      if (strncmp(q, ".param", 6) != 0) return 0;
      q += 6;
      int align_skip = 0, size = 0;
      for (;;) { /* .align N, then the type */
        q = skip_space(q);
        if (strncmp(q, ".align", 6) == 0) {
          q = skip_space(q + 6);
          while (*q >= '0' && *q <= '9') ++q;
          align_skip = 1;
          continue;
        }
        if (*q == '.') {
          size = atoi(q + 2) / 8; /* .u64, .b32, .f16, .s8 ... */
          while (*q && *q != ' ' && *q != '\t') ++q;
        }
        break;
      }
      (void)align_skip;
      q = skip_space(q);
      while (*q && *q != ',' && *q != ')' && *q != '[') ++q; /* the name */
      if (*q == '[') {
        size *= atoi(q + 1);
        while (*q && *q != ']') ++q;
        if (*q) ++q;
      }
      if (fn->nparams < MAX_PARAMS) fn->sizes[fn->nparams++] = size;
      q = skip_space(q);
      if (*q == ',') ++q;
    }
  }
  return 0;
}

/* Finds `name` in any image kind; 1 if found. */
static int find_function(const unsigned char *image, size_t size, const char *name,
                         fake_function *fn) {
  if (is_elf(image)) return elf_params(image, size, name, fn);
  if (is_fatbin(image)) {
    size_t off = rd16(image + 6), end = size;
    while (off + 16 <= end) {
      const unsigned char *entry = image + off;
      unsigned kind = rd16(entry), header = rd32(entry + 4);
      uint64_t payload = rd64(entry + 8);
      if (header == 0 || off + header + payload > end) break;
      const unsigned char *data = entry + header;
      if (kind == 2 && is_elf(data) && elf_params(data, payload, name, fn)) return 1;
      off += header + payload;
    }
    return 0;
  }
  return ptx_params((const char *)image, name, fn);
}

/* ---- Driver entry points ---------------------------------------------------- */

#define ENTER(fn)                                         \
  pthread_mutex_lock(&g_lock);                            \
  CUresult injected_ = injected(fn);                      \
  if (injected_ != CUDA_SUCCESS) {                        \
    CUresult r_ = simple(fn, injected_);                  \
    pthread_mutex_unlock(&g_lock);                        \
    return r_;                                            \
  }                                                       \
  if (!g_initialized && strcmp(fn, "cuInit") != 0) {      \
    CUresult r_ = simple(fn, CUDA_ERROR_NOT_INITIALIZED); \
    pthread_mutex_unlock(&g_lock);                        \
    return r_;                                            \
  }

#define LEAVE(result)              \
  do {                             \
    CUresult r_ = (result);        \
    pthread_mutex_unlock(&g_lock); \
    return r_;                     \
  } while (0)

EXPORT CUresult CUDAAPI cuInit(unsigned int flags) {
  ENTER("cuInit");
  CUresult rc = flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) g_initialized = 1;
  text t = begin("cuInit", rc);
  put(&t, ", \"flags\": %u", flags);
  LEAVE(finish(&t, "cuInit", rc));
}

static const struct {
  int code;
  const char *name, *text;
} g_errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
};

/* Not recorded: they describe errors, and work without cuInit. */
EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name) {
  for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
    if (g_errors[i].code == (int)error) {
      *name = g_errors[i].name;
      return CUDA_SUCCESS;
    }
  *name = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text_out) {
  for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]); ++i)
    if (g_errors[i].code == (int)error) {
      *text_out = g_errors[i].text;
      return CUDA_SUCCESS;
    }
  *text_out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER("cuDeviceGet");
  CUresult rc = ordinal >= 0 && ordinal < g_devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  if (rc == CUDA_SUCCESS) *device = ordinal;
  text t = begin("cuDeviceGet", rc);
  put(&t, ", \"ordinal\": %d", ordinal);
  LEAVE(finish(&t, "cuDeviceGet", rc));
}

EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *value, fake_device_attribute attribute,
                                             CUdevice device) {
  ENTER("cuDeviceGetAttribute");
  CUresult rc = CUDA_SUCCESS;
  if (device < 0 || device >= g_devices)
    rc = CUDA_ERROR_INVALID_DEVICE;
  else if (attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    *value = g_dev_set[device] ? g_dev_major[device] : g_major;
  else if (attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    *value = g_dev_set[device] ? g_dev_minor[device] : g_minor;
  else if (attribute == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    *value = SMEM_OPTIN;
  else
    rc = CUDA_ERROR_INVALID_VALUE; /* the fake knows no other attribute */
  text t = begin("cuDeviceGetAttribute", rc);
  put(&t, ", \"attribute\": %d, \"device\": %d", (int)attribute, device);
  LEAVE(finish(&t, "cuDeviceGetAttribute", rc));
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
  ENTER("cuDevicePrimaryCtxRetain");
  CUresult rc = device >= 0 && device < g_devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  if (rc == CUDA_SUCCESS) {
    *ctx = (CUcontext)(void *)&g_contexts[device];
    ++g_retained[device];
  }
  text t = begin("cuDevicePrimaryCtxRetain", rc);
  put(&t, ", \"device\": %d", device);
  LEAVE(finish(&t, "cuDevicePrimaryCtxRetain", rc));
}

EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *ctx) {
  ENTER("cuCtxGetCurrent");
  *ctx = current();
  if (g_quiet) LEAVE(CUDA_SUCCESS);
  LEAVE(simple("cuCtxGetCurrent", CUDA_SUCCESS));
}

EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
  ENTER("cuCtxGetDevice");
  CUresult rc = current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS) *device = context_device(current());
  LEAVE(simple("cuCtxGetDevice", rc));
}

EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  ENTER("cuCtxPushCurrent_v2");
  int device = context_device(ctx);
  CUresult rc = device >= 0 && device < MAX_DEVICES && t_depth < MAX_STACK
                    ? CUDA_SUCCESS
                    : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS) t_stack[t_depth++] = ctx;
  text t = begin("cuCtxPushCurrent_v2", rc);
  put(&t, ", \"pushed\": %d", device);
  LEAVE(finish(&t, "cuCtxPushCurrent_v2", rc));
}

EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *ctx) {
  ENTER("cuCtxPopCurrent_v2");
  CUresult rc = t_depth > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  CUcontext popped = rc == CUDA_SUCCESS ? t_stack[--t_depth] : NULL;
  if (ctx) *ctx = popped;
  text t = begin("cuCtxPopCurrent_v2", rc);
  put(&t, ", \"popped\": %d", context_device(popped));
  LEAVE(finish(&t, "cuCtxPopCurrent_v2", rc));
}

/* Replaces the top of the thread's context stack (pushes onto an empty one);
 * NULL pops it, as the driver documents. */
EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  ENTER("cuCtxSetCurrent");
  int device = context_device(ctx);
  CUresult rc = ctx == NULL || (device >= 0 && device < MAX_DEVICES) ? CUDA_SUCCESS
                                                                     : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS && ctx == NULL && t_depth > 0) {
    --t_depth;
  } else if (rc == CUDA_SUCCESS && ctx != NULL) {
    if (t_depth == 0) t_depth = 1;
    t_stack[t_depth - 1] = ctx;
  }
  text t = begin("cuCtxSetCurrent", rc);
  put(&t, ", \"set\": %d", device);
  LEAVE(finish(&t, "cuCtxSetCurrent", rc));
}

EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
  ENTER("cuModuleLoadData");
  REFUSE_IN_CAPTURE("cuModuleLoadData");
  CUresult rc = current() == NULL ? CUDA_ERROR_INVALID_CONTEXT
                : image == NULL   ? CUDA_ERROR_INVALID_VALUE
                                  : CUDA_SUCCESS;
  const unsigned char *p = image;
  size_t size = 0;
  const char *kind = "none";
  if (rc == CUDA_SUCCESS) {
    size = image_size(p);
    kind = is_elf(p) ? "cubin" : is_fatbin(p) ? "fatbin" : "ptx";
    if (!is_elf(p) && !is_fatbin(p) && strstr((const char *)p, ".entry") == NULL)
      rc = CUDA_ERROR_INVALID_IMAGE;
  }
  fake_module *m = NULL;
  if (rc == CUDA_SUCCESS) {
    m = calloc(1, sizeof(*m));
    if (m == NULL || (m->image = malloc(size)) == NULL) abort();
    memcpy(m->image, p, size);
    m->size = size;
    m->id = g_next_module++;
    m->device = context_device(current());
    m->next = g_modules;
    g_modules = m;
    *module = (CUmodule)(void *)m;
  }
  text t = begin("cuModuleLoadData", rc);
  put(&t, ", \"module\": %d, \"kind\": \"%s\", \"size\": %zu, \"image\": ", m ? m->id : 0, kind,
      size);
  put_hex(&t, p, size);
  LEAVE(finish(&t, "cuModuleLoadData", rc));
}

EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  ENTER("cuModuleUnload");
  REFUSE_IN_CAPTURE("cuModuleUnload");
  fake_module *m = (fake_module *)(void *)module;
  CUresult rc = m && !m->unloaded ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  /* Kept (marked) rather than freed, so a stale handle is reported, not
   * dereferenced after free; reachable, so no leak is reported either. */
  if (rc == CUDA_SUCCESS) m->unloaded = 1;
  text t = begin("cuModuleUnload", rc);
  put(&t, ", \"module\": %d", m ? m->id : 0);
  LEAVE(finish(&t, "cuModuleUnload", rc));
}

EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule module,
                                            const char *name) {
  ENTER("cuModuleGetFunction");
  fake_module *m = (fake_module *)(void *)module;
  CUresult rc = m == NULL || m->unloaded ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
  fake_function *fn = NULL;
  if (rc == CUDA_SUCCESS) {
    for (fn = m->functions; fn && strcmp(fn->name, name) != 0; fn = fn->next) {
    }
    if (fn == NULL) {
      fn = calloc(1, sizeof(*fn));
      if (fn == NULL) abort();
      snprintf(fn->name, sizeof(fn->name), "%s", name);
      if (find_function(m->image, m->size, name, fn)) {
        fn->module = m;
        fn->smem_allowed = SMEM_DEFAULT;
        fn->next = m->functions;
        m->functions = fn;
      } else {
        free(fn);
        fn = NULL;
        rc = CUDA_ERROR_NOT_FOUND;
      }
    }
    if (fn) *function = (CUfunction)(void *)fn;
  }
  text t = begin("cuModuleGetFunction", rc);
  put(&t, ", \"module\": %d, \"name\": ", m ? m->id : 0);
  put_string(&t, name);
  if (fn) {
    put(&t, ", \"param_sizes\": [");
    for (int i = 0; i < fn->nparams; ++i) put(&t, "%s%d", i ? ", " : "", fn->sizes[i]);
    put(&t, "]");
  }
  LEAVE(finish(&t, "cuModuleGetFunction", rc));
}

/* Not recorded: it describes a function, as cuGetErrorName describes an error.
 * Offsets follow the parameter buffer's layout (each aligned to its size). */
EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction function, size_t index, size_t *offset,
                                           size_t *size) {
  fake_function *fn = (fake_function *)(void *)function;
  if (fn == NULL || fn->module->unloaded) return CUDA_ERROR_INVALID_HANDLE;
  if (offset == NULL || size == NULL || index >= (size_t)fn->nparams)
    return CUDA_ERROR_INVALID_VALUE;
  size_t at = 0;
  for (size_t i = 0; i <= index; ++i) {
    size_t s = (size_t)fn->sizes[i], align = s >= 8 ? 8 : s == 0 ? 1 : s;
    at = (at + align - 1) / align * align;
    if (i < index) at += s;
  }
  *offset = at;
  *size = (size_t)fn->sizes[index];
  return CUDA_SUCCESS;
}

EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, fake_function_attribute attribute,
                                           int value) {
  ENTER("cuFuncSetAttribute");
  fake_function *fn = (fake_function *)(void *)function;
  CUresult rc = fn == NULL || fn->module->unloaded ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
  if (rc == CUDA_SUCCESS) {
    if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value >= 0 &&
        value <= SMEM_OPTIN)
      fn->smem_allowed = value > SMEM_DEFAULT ? value : SMEM_DEFAULT;
    else if (attribute == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED && g_major >= 9 &&
             (value == 0 || value == 1))
      fn->non_portable = value;
    else
      rc = CUDA_ERROR_INVALID_VALUE;
  }
  text t = begin("cuFuncSetAttribute", rc);
  put(&t, ", \"function\": ");
  put_string(&t, fn ? fn->name : "");
  put(&t, ", \"attribute\": %d, \"value\": %d", (int)attribute, value);
  LEAVE(finish(&t, "cuFuncSetAttribute", rc));
}

/* What cuLaunchKernel and cuLaunchKernelEx share: the checks the driver
 * makes, and the record's launch fields (without the closing brace). */
static CUresult check_launch(fake_function *fn, unsigned grid[3], unsigned block[3],
                             unsigned shared_mem, void **params, void **extra) {
  if (fn == NULL || fn->module->unloaded || current() == NULL ||
      context_device(current()) != fn->module->device)
    return CUDA_ERROR_INVALID_HANDLE; /* a function of another context */
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 ||
      block[2] == 0 || (uint64_t)block[0] * block[1] * block[2] > 1024 || extra != NULL ||
      (params == NULL && fn->nparams > 0))
    return CUDA_ERROR_INVALID_VALUE;
  if ((int64_t)shared_mem > fn->smem_allowed) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

static void put_launch(text *t, CUresult rc, fake_function *fn, unsigned grid[3], unsigned block[3],
                       unsigned shared_mem, CUstream stream, void **params) {
  put(t, ", \"function\": ");
  put_string(t, fn ? fn->name : "");
  put(t,
      ", \"module\": %d, \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared_mem\": %u, "
      "\"stream\": %llu, \"args\": [",
      fn ? fn->module->id : 0, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem,
      (unsigned long long)(uintptr_t)stream);
  for (int i = 0; rc == CUDA_SUCCESS && i < fn->nparams; ++i) {
    if (i) put(t, ", ");
    put_hex(t, params[i], (size_t)fn->sizes[i]);
  }
  put(t, "]");
  if (capture_of(stream) >= 0) put(t, ", \"captured\": 1");
}

EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction function, unsigned int grid_x,
                                       unsigned int grid_y, unsigned int grid_z,
                                       unsigned int block_x, unsigned int block_y,
                                       unsigned int block_z, unsigned int shared_mem,
                                       CUstream stream, void **params, void **extra) {
  ENTER("cuLaunchKernel");
  fake_function *fn = (fake_function *)(void *)function;
  unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};
  CUresult rc = check_launch(fn, grid, block, shared_mem, params, extra);
  if (g_quiet && rc == CUDA_SUCCESS && capture_of(stream) < 0) LEAVE(rc);
  text t = begin("cuLaunchKernel", rc);
  put_launch(&t, rc, fn, grid, block, shared_mem, stream, params);
  LEAVE(finish(&t, "cuLaunchKernel", rc));
}

/* Records the attributes too: {"id": 4, "cluster": [2, 1, 1]}, {"id": 2,
 * "cooperative": 1}, {"id": 6, "programmatic_stream_serialization": 1}. A
 * cluster must divide the grid and hold at most 8 blocks unless the function
 * allows more (NON_PORTABLE_CLUSTER_SIZE_ALLOWED), 16 at most. */
EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction function,
                                         void **params, void **extra) {
  ENTER("cuLaunchKernelEx");
  fake_function *fn = (fake_function *)(void *)function;
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared_mem = 0, nattrs = 0;
  CUstream stream = NULL;
  const CUlaunchAttribute *attrs = NULL;
  if (config != NULL && (config->numAttrs == 0 || config->attrs != NULL)) {
    grid[0] = config->gridDimX, grid[1] = config->gridDimY, grid[2] = config->gridDimZ;
    block[0] = config->blockDimX, block[1] = config->blockDimY, block[2] = config->blockDimZ;
    shared_mem = config->sharedMemBytes;
    stream = config->hStream;
    attrs = config->attrs;
    nattrs = config->numAttrs;
    rc = check_launch(fn, grid, block, shared_mem, params, extra);
  }
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < nattrs; ++i) {
    const CUlaunchAttribute *a = &attrs[i];
    if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      unsigned c[3] = {a->value.clusterDim.x, a->value.clusterDim.y, a->value.clusterDim.z};
      uint64_t size = (uint64_t)c[0] * c[1] * c[2];
      if (size == 0 || grid[0] % c[0] || grid[1] % c[1] || grid[2] % c[2] || size > 16 ||
          (size > 8 && !fn->non_portable))
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (a->id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE &&
               a->id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      rc = CUDA_ERROR_INVALID_VALUE; /* the fake knows no other attribute */
    }
  }
  text t = begin("cuLaunchKernelEx", rc);
  put_launch(&t, rc, fn, grid, block, shared_mem, stream, params);
  put(&t, ", \"attrs\": [");
  for (unsigned i = 0; i < nattrs; ++i) {
    const CUlaunchAttribute *a = &attrs[i];
    put(&t, "%s{\"id\": %d", i ? ", " : "", (int)a->id);
    if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      put(&t, ", \"cluster\": [%u, %u, %u]", a->value.clusterDim.x, a->value.clusterDim.y,
          a->value.clusterDim.z);
    else if (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
      put(&t, ", \"cooperative\": %d", a->value.cooperative);
    else if (a->id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      put(&t, ", \"programmatic_stream_serialization\": %d",
          a->value.programmaticStreamSerializationAllowed);
    put(&t, "}");
  }
  put(&t, "]");
  LEAVE(finish(&t, "cuLaunchKernelEx", rc));
}

/* Bytes per element of each CUtensorMapDataType (uint8 .. tfloat32_ftz). */
static const int element_bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

/* What tiled and im2col maps share: dims 1..2^32, strides multiples of 16 below
 * 2^40, element strides 1..8. */
static CUresult check_global(cuuint32_t rank, const cuuint64_t *dims, const cuuint64_t *strides,
                             const cuuint32_t *element_strides) {
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32) || element_strides[i] == 0 || element_strides[i] > 8)
      return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 || strides[i] >= (1ull << 40)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* The part of an encoded map both kinds write: the address, the dims (words
 * 1..5) and the strides (words 6..9); words 11.. are the kind's own. */
static void write_map(CUtensorMap *map, void *address, cuuint32_t rank, const cuuint64_t *dims,
                      const cuuint64_t *strides) {
  memset(map, 0, sizeof(*map));
  map->opaque[0] = (cuuint64_t)(uintptr_t)address;
  for (cuuint32_t i = 0; i < rank; ++i) {
    map->opaque[1 + i] = dims[i];
    if (i + 1 < rank) map->opaque[6 + i] = strides[i];
  }
}

static long long u64_at(const void *v, cuuint32_t i) {
  return (long long)((const cuuint64_t *)v)[i];
}
static long long u32_at(const void *v, cuuint32_t i) {
  return (long long)((const cuuint32_t *)v)[i];
}
static long long int_at(const void *v, cuuint32_t i) { return (long long)((const int *)v)[i]; }

/* Records `, "name": [...]`: the first `n` (at most 5) values read by `at`, none
 * when `values` is NULL. */
static void put_values(text *t, const char *name, const void *values, cuuint32_t n,
                       long long (*at)(const void *, cuuint32_t)) {
  put(t, ", \"%s\": [", name);
  for (cuuint32_t i = 0; values != NULL && i < n && i < 5; ++i)
    put(t, "%s%lld", i ? ", " : "", at(values, i));
  put(t, "]");
}

/* Records a map encode's common head: data type, rank, address, dims, strides. */
static void put_map_head(text *t, int type, cuuint32_t rank, void *address, const cuuint64_t *dims,
                         const cuuint64_t *strides) {
  put(t, ", \"data_type\": %d, \"rank\": %u, \"address\": %llu", type, rank,
      (unsigned long long)(uintptr_t)address);
  put_values(t, "dims", dims, rank, u64_at);
  put_values(t, "strides", strides, rank > 0 ? rank - 1 : 0, u64_at);
}

/* Checks the arguments as the driver documents (rank 1..5, address 16-byte
 * aligned, dims 1..2^32, strides multiples of 16 below 2^40, box 1..256 and
 * its inner dimension 16-byte multiple without interleave, element strides
 * 1..8) and writes a map whose bytes say what it encodes: address, then the
 * dims, strides and box. Recorded with every argument. */
EXPORT CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap *map, CUtensorMapDataType data_type, cuuint32_t rank, void *address,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  ENTER("cuTensorMapEncodeTiled");
  CUresult rc = CUDA_SUCCESS;
  int type = (int)data_type;
  if (map == NULL || ((uintptr_t)map & 63) || rank < 1 || rank > 5 || address == NULL ||
      ((uintptr_t)address & 15) || type < 0 || type > 12 || dims == NULL || box == NULL ||
      element_strides == NULL || (rank > 1 && strides == NULL))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) rc = check_global(rank, dims, strides, element_strides);
  for (cuuint32_t i = 0; rc == CUDA_SUCCESS && i < rank; ++i)
    if (box[i] == 0 || box[i] > 256) rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && interleave == 0 && (box[0] * element_bytes[type]) % 16)
    rc = CUDA_ERROR_INVALID_VALUE;
  /* A 32, 64 or 128-byte swizzle bounds the box's inner dimension (an H200's driver
   * refuses a 128-byte inner box with a 64-byte swizzle). */
  if (rc == CUDA_SUCCESS && interleave == 0 && swizzle >= 1 && swizzle <= 3 &&
      box[0] * element_bytes[type] > (16u << swizzle))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    write_map(map, address, rank, dims, strides);
    for (cuuint32_t i = 0; i < rank; ++i) map->opaque[11 + i] = box[i];
  }
  text t = begin("cuTensorMapEncodeTiled", rc);
  put_map_head(&t, type, rank, address, dims, strides);
  put_values(&t, "box", box, rank, u32_at);
  put_values(&t, "element_strides", element_strides, rank, u32_at);
  put(&t, ", \"interleave\": %d, \"swizzle\": %d, \"l2_promotion\": %d, \"oob_fill\": %d",
      (int)interleave, (int)swizzle, (int)l2_promotion, (int)oob_fill);
  LEAVE(finish(&t, "cuTensorMapEncodeTiled", rc));
}

/* cuTensorMapEncodeIm2col: the driver's documented limits (rank 3 to 5, aligned
 * address, dims, strides, pixel box corners by rank, channels per pixel within 256
 * and the swizzle, pixels per column within 1024, element strides 1 to 8); records
 * every field and writes a map naming the address, dims, strides, channels per
 * pixel and pixels per column. */
EXPORT CUresult CUDAAPI cuTensorMapEncodeIm2col(
    CUtensorMap *map, CUtensorMapDataType data_type, cuuint32_t rank, void *address,
    const cuuint64_t *dims, const cuuint64_t *strides, const int *lower, const int *upper,
    cuuint32_t channels, cuuint32_t pixels, const cuuint32_t *element_strides,
    CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  ENTER("cuTensorMapEncodeIm2col");
  CUresult rc = CUDA_SUCCESS;
  int type = (int)data_type;
  if (map == NULL || ((uintptr_t)map & 63) || rank < 3 || rank > 5 || address == NULL ||
      ((uintptr_t)address & 15) || type < 0 || type > 12 || dims == NULL || strides == NULL ||
      element_strides == NULL || lower == NULL || upper == NULL)
    rc = CUDA_ERROR_INVALID_VALUE;
  const int bound = rank == 3 ? 1 << 15 : rank == 4 ? 1 << 7 : 1 << 4;
  if (rc == CUDA_SUCCESS) rc = check_global(rank, dims, strides, element_strides);
  for (cuuint32_t i = 0; rc == CUDA_SUCCESS && i + 2 < rank; ++i)
    if (lower[i] < -bound || lower[i] >= bound || upper[i] < -bound || upper[i] >= bound)
      rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && (channels == 0 || channels > 256 || pixels == 0 || pixels > 1024))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS && interleave == 0 && swizzle >= 1 && swizzle <= 3 &&
      channels * (cuuint32_t)element_bytes[type] > (16u << swizzle))
    rc = CUDA_ERROR_INVALID_VALUE;
  if (rc == CUDA_SUCCESS) {
    write_map(map, address, rank, dims, strides);
    map->opaque[11] = channels;
    map->opaque[12] = pixels;
  }
  const cuuint32_t corners = rank > 2 ? rank - 2 : 0;
  text t = begin("cuTensorMapEncodeIm2col", rc);
  put_map_head(&t, type, rank, address, dims, strides);
  put_values(&t, "element_strides", element_strides, rank, u32_at);
  put_values(&t, "lower_corner", lower, corners, int_at);
  put_values(&t, "upper_corner", upper, corners, int_at);
  put(&t,
      ", \"channels_per_pixel\": %u, \"pixels_per_column\": %u, \"interleave\": %d, "
      "\"swizzle\": %d, \"l2_promotion\": %d, \"oob_fill\": %d",
      channels, pixels, (int)interleave, (int)swizzle, (int)l2_promotion, (int)oob_fill);
  LEAVE(finish(&t, "cuTensorMapEncodeIm2col", rc));
}

/* cuMemsetD8Async: records the address, value, byte count and stream (the memory is
 * the test's, so nothing is written). */
EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr address, unsigned char value, size_t count,
                                        CUstream stream) {
  ENTER("cuMemsetD8Async");
  CUresult rc = address == 0 && count > 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (rc == CUDA_SUCCESS && current() == NULL) rc = CUDA_ERROR_INVALID_CONTEXT;
  text t = begin("cuMemsetD8Async", rc);
  put(&t, ", \"address\": %llu, \"value\": %u, \"count\": %zu, \"stream\": %llu",
      (unsigned long long)address, (unsigned)value, count, (unsigned long long)(uintptr_t)stream);
  LEAVE(finish(&t, "cuMemsetD8Async", rc));
}

/* cuStreamSynchronize: records the stream. */
EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  ENTER("cuStreamSynchronize");
  REFUSE_IN_CAPTURE("cuStreamSynchronize");
  text t = begin("cuStreamSynchronize", CUDA_SUCCESS);
  put(&t, ", \"stream\": %llu", (unsigned long long)(uintptr_t)stream);
  LEAVE(finish(&t, "cuStreamSynchronize", CUDA_SUCCESS));
}

/* cuMemAlloc: hands out addresses 1 MiB apart (nothing is allocated); refused
 * while a stream is captured. */
EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *address, size_t bytes) {
  static CUdeviceptr next = 0x7e0000000000ull;
  ENTER("cuMemAlloc_v2");
  REFUSE_IN_CAPTURE("cuMemAlloc_v2");
  CUresult rc = address == NULL || bytes == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  if (rc == CUDA_SUCCESS) {
    *address = next;
    next += 1 << 20;
  }
  text t = begin("cuMemAlloc_v2", rc);
  put(&t, ", \"bytes\": %zu", bytes);
  LEAVE(finish(&t, "cuMemAlloc_v2", rc));
}

/* Stream capture: what torch.cuda.graph does around the work it records. The
 * fake keeps no graph; launches on a captured stream are recorded with
 * "captured": 1 (and run nothing, as every launch here). */
EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  ENTER("cuStreamBeginCapture_v2");
  CUresult rc = capture_of(stream) >= 0 || g_ncaptures == MAX_CAPTURES ? CUDA_ERROR_INVALID_VALUE
                                                                       : CUDA_SUCCESS;
  if (rc == CUDA_SUCCESS) {
    g_captures[g_ncaptures].stream = stream;
    g_captures[g_ncaptures++].invalidated = 0;
  }
  text t = begin("cuStreamBeginCapture_v2", rc);
  put(&t, ", \"stream\": %llu, \"mode\": %d", (unsigned long long)(uintptr_t)stream, (int)mode);
  LEAVE(finish(&t, "cuStreamBeginCapture_v2", rc));
}

EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  ENTER("cuStreamEndCapture");
  int i = capture_of(stream);
  CUresult rc = i < 0                       ? CUDA_ERROR_INVALID_VALUE
                : g_captures[i].invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                            : CUDA_SUCCESS;
  if (i >= 0) g_captures[i] = g_captures[--g_ncaptures];
  if (graph != NULL) *graph = NULL;
  text t = begin("cuStreamEndCapture", rc);
  put(&t, ", \"stream\": %llu", (unsigned long long)(uintptr_t)stream);
  LEAVE(finish(&t, "cuStreamEndCapture", rc));
}

EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
  ENTER("cuStreamIsCapturing");
  int i = capture_of(stream);
  *status = i < 0                       ? CU_STREAM_CAPTURE_STATUS_NONE
            : g_captures[i].invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                        : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  text t = begin("cuStreamIsCapturing", CUDA_SUCCESS);
  put(&t, ", \"stream\": %llu, \"status\": %d", (unsigned long long)(uintptr_t)stream,
      (int)*status);
  LEAVE(finish(&t, "cuStreamIsCapturing", CUDA_SUCCESS));
}

/* ---- Control ---------------------------------------------------------------- */

EXPORT void fake_cuda_quiet(int on) {
  pthread_mutex_lock(&g_lock);
  g_quiet = on;
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_reset(void) {
  pthread_mutex_lock(&g_lock);
  while (g_records) {
    record *r = g_records;
    g_records = r->next;
    free(r->json);
    free(r);
  }
  g_records_tail = &g_records;
  g_nfailures = 0;
  g_next_module = 1; /* ids label modules in records; loaded ones stay valid */
  g_ncaptures = 0;
  g_forbidden = 0;
  g_devices = 2;
  g_major = 8;
  g_minor = 0;
  memset(g_dev_set, 0, sizeof(g_dev_set));
  free(g_json);
  g_json = NULL;
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_fail(const char *fn, int code, int count) {
  pthread_mutex_lock(&g_lock);
  if (g_nfailures < (int)(sizeof(g_failures) / sizeof(g_failures[0]))) {
    failure *f = &g_failures[g_nfailures++];
    snprintf(f->fn, sizeof(f->fn), "%s", fn);
    f->code = code;
    f->remaining = count;
  }
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_set_capability(int major, int minor) {
  pthread_mutex_lock(&g_lock);
  g_major = major;
  g_minor = minor;
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_set_device_capability(int device, int major, int minor) {
  pthread_mutex_lock(&g_lock);
  if (device >= 0 && device < MAX_DEVICES) {
    g_dev_set[device] = 1;
    g_dev_major[device] = major;
    g_dev_minor[device] = minor;
  }
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_set_devices(int n) {
  pthread_mutex_lock(&g_lock);
  g_devices = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
  pthread_mutex_unlock(&g_lock);
}

EXPORT void fake_cuda_set_current(int device) {
  t_depth = 0;
  if (device >= 0 && device < MAX_DEVICES)
    t_stack[t_depth++] = (CUcontext)(void *)&g_contexts[device];
}

EXPORT int fake_cuda_count(const char *fn) {
  int n = 0;
  pthread_mutex_lock(&g_lock);
  for (record *r = g_records; r; r = r->next) n += fn == NULL || !*fn || strcmp(r->fn, fn) == 0;
  pthread_mutex_unlock(&g_lock);
  return n;
}

EXPORT int fake_cuda_forbidden(void) {
  pthread_mutex_lock(&g_lock);
  int n = g_forbidden;
  pthread_mutex_unlock(&g_lock);
  return n;
}

EXPORT const char *fake_cuda_json(void) {
  pthread_mutex_lock(&g_lock);
  text t = {0};
  put(&t, "[");
  for (record *r = g_records; r; r = r->next) put(&t, "%s%s", r == g_records ? "" : ",\n", r->json);
  put(&t, "]");
  free(g_json);
  g_json = t.buf;
  pthread_mutex_unlock(&g_lock);
  return g_json;
}
