/*
 * The CUDA target against the fake driver (tests/fake_cuda, built by the
 * Makefile into TJT_FIXTURE_DIR and loaded through TILEJIT_LIBCUDA): what
 * reaches cuLaunchKernel (grid, block and shared memory from the symbols,
 * stream, every argument's bytes), modules per context, contexts, dynamic
 * shared memory, driver errors, and no driver at all. Module images are PTX
 * text, which the fake reads parameter sizes from as the driver does.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "builders.h"
#include "internal.h"
#include "target_cuda.h"

/* ---- The fake driver ---------------------------------------------------------- */

static struct {
  void *handle;
  char path[1024];
  void (*reset)(void);
  void (*fail)(const char *fn, int code, int count);
  void (*set_capability)(int major, int minor);
  void (*set_current)(int device);
  int (*count)(const char *fn);
  const char *(*json)(void);
} fake;

/* Opens the fake (kept open: the core's dlopen of the same path shares it),
 * points TILEJIT_LIBCUDA at it and starts from a driver the core has not
 * loaded yet, with no records and no current context. */
static void use_fake(void) {
  if (fake.handle == NULL) {
    tjt_fixture_path("libfake_cuda.so", fake.path, sizeof(fake.path));
    fake.handle = dlopen(fake.path, RTLD_NOW | RTLD_LOCAL);
    if (fake.handle == NULL)
      tjt_fail(__FILE__, __LINE__, "cannot load the fake driver: %s", dlerror());
    *(void **)&fake.reset = dlsym(fake.handle, "fake_cuda_reset");
    *(void **)&fake.fail = dlsym(fake.handle, "fake_cuda_fail");
    *(void **)&fake.set_capability = dlsym(fake.handle, "fake_cuda_set_capability");
    *(void **)&fake.set_current = dlsym(fake.handle, "fake_cuda_set_current");
    *(void **)&fake.count = dlsym(fake.handle, "fake_cuda_count");
    *(void **)&fake.json = dlsym(fake.handle, "fake_cuda_json");
    CHECK(fake.reset && fake.fail && fake.set_capability && fake.set_current && fake.count &&
          fake.json);
  }
  tj__cuda_unload_driver();
  CHECK_EQ_INT(setenv("TILEJIT_LIBCUDA", fake.path, 1), 0);
  fake.reset();
  fake.set_current(-1);
}

/* The records contain `needle`; prints them when not. */
#define CHECK_RECORDED(needle)                                                                 \
  do {                                                                                         \
    const char *tjt_all_ = fake.json(), *tjt_needle_ = (needle);                               \
    if (strstr(tjt_all_, tjt_needle_) == NULL)                                                 \
      tjt_fail(__FILE__, __LINE__, "not recorded: %s\n  records:\n%s", tjt_needle_, tjt_all_); \
  } while (0)

/* ---- Kernels ------------------------------------------------------------------- */

/* scale(A: (n,) f32 const, C: (n,) f32 output) launched on grid
 * (ceildiv(n, 128),), block (128,), shared memory `smem` bytes (a constant,
 * or n * 4 when smem < 0). */
static const char SCALE_PTX[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry scale(\n"
    "  .param .u64 .ptr .align 4 scale_param_0,\n"
    "  .param .u64 scale_param_1,\n"
    "  .param .u64 scale_param_2\n"
    ")\n{\n  ret;\n}\n";

static tj_kernel *scale_kernel_flags(int64_t smem, uint32_t c_flags) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("scale", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, c_flags);
  int32_t grid[3] = {tjt_binop_const(k, "ceildiv(n, 128)", 0, TJ_OP_CEILDIV, 128), one, one};
  int32_t block[3] = {tjt_const(k, 128), one, one};
  int32_t shared = smem < 0 ? tjt_binop_const(k, "n * 4", 0, TJ_OP_MUL, 4) : tjt_const(k, smem);
  CHECK_OK(tj_kernel_set_launch(k, grid, block, shared));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "scale"));
  return k;
}

static tj_kernel *scale_kernel(int64_t smem) { return scale_kernel_flags(smem, TJ_BUF_OUTPUT); }

#define DEVICE_PTR(a) ((void *)(uintptr_t)(a))

/* A 1-d float32 tensor of n elements on CUDA device `device` at a fake
 * device address (never dereferenced). */
static void cuda_tensor(tjt_tensor *t, uintptr_t address, int64_t n, int32_t device) {
  tjt_tensor_1d(t, DEVICE_PTR(address), TJT_F32, n);
  t->t.device.device_type = kDLCUDA;
  t->t.device.device_id = device;
}

/* Binds scale(A) with A and C on `device` and launches it on `stream`. */
static int launch_scale(tj_kernel *k, int64_t n, int32_t device, void *stream) {
  tjt_tensor a, c;
  cuda_tensor(&a, 0x10000000, n, device);
  cuda_tensor(&c, 0x20000000, n, device);
  tj_arg arg, out;
  tjt_arg_tensor(&arg, &a, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  tjt_arg_tensor(&out, &c, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  f.stream = stream;
  return tj_call_launch(&f);
}

/* Little-endian hex of the low `bytes` bytes of v, as the fake prints them. */
static const char *hex(uint64_t v, int bytes, char *buf) {
  for (int i = 0; i < bytes; ++i)
    snprintf(buf + 2 * i, 3, "%02x", (unsigned)((v >> (8 * i)) & 0xff));
  return buf;
}

/* ---- Tests -------------------------------------------------------------------------- */

TEST(cuda_no_driver) {
  tj__cuda_unload_driver();
  const char *path = "/nonexistent/tilejit-test/libcuda.so.1";
  CHECK_EQ_INT(setenv("TILEJIT_LIBCUDA", path, 1), 0);
  tj_kernel *k = scale_kernel(0);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "scale: no CUDA driver: cannot load /nonexistent/tilejit-test/libcuda.so.1");
  CHECK_ERROR_CONTAINS("TILEJIT_LIBCUDA");
  int32_t major = -1, minor = -1;
  CHECK_STATUS(tj_cuda_device_capability(0, &major, &minor), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("no CUDA driver");
  CHECK_EQ_INT(major, -1);
  /* The failure is not remembered: once there is a driver, the same kernel
   * launches. */
  use_fake();
  CHECK_OK(launch_scale(k, 1000, 0, NULL));
  tj_kernel_free(k);
  unsetenv("TILEJIT_LIBCUDA");
}

TEST(cuda_init_failure_is_retried) {
  use_fake();
  fake.fail("cuInit", 100, 1); /* CUDA_ERROR_NO_DEVICE, once */
  tj_kernel *k = scale_kernel(0);
  CHECK_STATUS(launch_scale(k, 10, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS(
      "scale: cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  CHECK_OK(launch_scale(k, 10, 0, NULL));
  CHECK_EQ_INT(fake.count("cuInit"), 2);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 1);
  tj_kernel_free(k);
}

TEST(cuda_outputs_need_a_producer) {
  /* The core allocates host outputs only: a CUDA kernel's output with no producer to
   * allocate it is refused by name, saying what to pass, before anything launches. */
  use_fake();
  tj_kernel *k = scale_kernel(0);
  tjt_tensor a;
  cuda_tensor(&a, 0x10000000, 10, 0);
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  void *outputs[1] = {(void *)1};
  tj_call call = {&arg, 1, 0, NULL, outputs};
  const char *expected =
      "scale: output 'C': no producer to allocate it on the device (the core allocates a CPU "
      "kernel's outputs only): pass one that allocates (a tensor argument's, or "
      "tj_call_binding.fallback), or allocate it yourself (tj_call_bind, then "
      "tj_call_set_output)";
  CHECK_STATUS(tj_call_run(k, &call), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(), expected);
  CHECK_EQ_INT(tj_last_error_info()->output, 0);
  CHECK(outputs[0] == NULL);
  tjt_arg_tensor(&arg, &a, 0);
  tj_bound *bound = (tj_bound *)1;
  CHECK_STATUS(tj_bound_create(k, &call, &bound), TJ_ETYPE);
  CHECK_EQ_STR(tj_last_error(), expected);
  CHECK(bound == NULL);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  tj_kernel_free(k);
}

/* Every parameter kind, byte_offset on every tensor, symbols, grid and
 * shared memory from expressions, and the stream, as cuLaunchKernel sees
 * them. */
static const char PACK_PTX[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry pack(\n"
    "  .param .u64 pack_param_0, .param .u32 pack_param_1, .param .f64 pack_param_2,\n"
    "  .param .f32 pack_param_3, .param .u8 pack_param_4, .param .u8 pack_param_5,\n"
    "  .param .u16 pack_param_6, .param .u64 pack_param_7, .param .u64 pack_param_8,\n"
    "  .param .u64 pack_param_9, .param .u64 pack_param_10, .param .u64 pack_param_11,\n"
    "  .param .u64 pack_param_12\n"
    ")\n{\n  ret;\n}\n";

/* pack(A: (n,) f32, s: int32, x: float64, y: float32, flag: bool, c: int8,
 *      h: uint16, P: pointer, bias: (n,) optional, B: (m, n), O: (n,)
 *      output) -> 11 parameters, then n, m; grid (ceildiv(n, 128), m),
 *      block (128, 2), shared memory n * 4. */
static tj_kernel *pack_kernel(void) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("pack", 11, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_add_symbol(k, "m", 1));
  int32_t n = tjt_sym(k, 0), m = tjt_sym(k, 1), mn[2] = {m, n}, one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, 0);
  CHECK_OK(tj_kernel_set_scalar(k, 1, "s", TJT_DTYPE(kDLInt, 32)));
  CHECK_OK(tj_kernel_set_scalar(k, 2, "x", TJT_F64));
  CHECK_OK(tj_kernel_set_scalar(k, 3, "y", TJT_F32));
  CHECK_OK(tj_kernel_set_scalar(k, 4, "flag", TJT_DTYPE(kDLBool, 8)));
  CHECK_OK(tj_kernel_set_scalar(k, 5, "c", TJT_DTYPE(kDLInt, 8)));
  CHECK_OK(tj_kernel_set_scalar(k, 6, "h", TJT_DTYPE(kDLUInt, 16)));
  CHECK_OK(tj_kernel_set_pointer(k, 7, "P", TJT_F32, 0, 0));
  tjt_buffer(k, 8, "bias", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OPTIONAL);
  tjt_buffer(k, 9, "B", TJT_F32, 2, mn, NULL, 0, 0);
  tjt_buffer(k, 10, "O", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  int32_t grid[3] = {tjt_binop_const(k, "ceildiv(n, 128)", 0, TJ_OP_CEILDIV, 128), m, one};
  int32_t block[3] = {tjt_const(k, 128), tjt_const(k, 2), one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_binop_const(k, "n * 4", 0, TJ_OP_MUL, 4)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, PACK_PTX, (int64_t)sizeof(PACK_PTX) - 1, "pack"));
  return k;
}

/* The module pack_kernel loaded: the image, with the NUL that terminates PTX. */
static void check_pack_module(void) {
  char image[2 * sizeof(PACK_PTX) + 64];
  int used =
      snprintf(image, sizeof(image),
               "\"module\": 1, \"kind\": \"ptx\", \"size\": %zu, \"image\": \"", sizeof(PACK_PTX));
  for (size_t i = 0; i < sizeof(PACK_PTX); ++i)
    used +=
        snprintf(image + used, sizeof(image) - (size_t)used, "%02x", (unsigned char)PACK_PTX[i]);
  CHECK_RECORDED(image);
}

TEST(cuda_launch_records_everything) {
  use_fake();
  tj_kernel *k = pack_kernel();
  tjt_tensor ta, tb, to;
  cuda_tensor(&ta, 0x7f0000000000, 1000, 0);
  ta.t.byte_offset = 64;
  const int64_t shape_b[2] = {3, 1000};
  tjt_tensor_init(&tb, DEVICE_PTR(0x7f1000000000), TJT_F32, 2, shape_b, NULL);
  tb.t.device.device_type = kDLCUDAManaged;
  tb.t.byte_offset = 8;
  cuda_tensor(&to, 0x7f2000000000, 1000, 0);
  to.t.device.device_type = kDLCUDAManaged;
  to.t.byte_offset = 4;
  ta.t.device.device_type = kDLCUDAManaged; /* managed memory is launched on like device memory */

  tj_arg args[10], out;
  for (int i = 0; i < 10; ++i) tj_arg_init(&args[i]);
  tjt_arg_tensor(&args[0], &ta, 0);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = -7;
  args[2].kind = TJ_ARG_INT; /* an int for a float64 parameter */
  args[2].value.i = 3;
  args[3].kind = TJ_ARG_FLOAT;
  args[3].value.f = 2.5;
  args[4].kind = TJ_ARG_BOOL;
  args[4].value.i = 1;
  args[5].kind = TJ_ARG_INT;
  args[5].value.i = -2;
  args[6].kind = TJ_ARG_INT;
  args[6].value.i = 65535;
  args[7].kind = TJ_ARG_ADDRESS;
  args[7].value.p = DEVICE_PTR(0x1000);
  /* args[8] (bias) stays None */
  tjt_arg_tensor(&args[9], &tb, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args, 10, &f));
  tjt_arg_tensor(&out, &to, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &out));
  f.stream = DEVICE_PTR(0x1234);
  CHECK_OK(tj_call_launch(&f));

  char h[13][20], want[1024];
  snprintf(want, sizeof(want),
           "\"function\": \"pack\", \"module\": %s, \"grid\": [8, 3, 1], \"block\": [128, 2, 1], "
           "\"shared_mem\": 4000, \"stream\": 4660, \"args\": [\"%s\", \"%s\", \"%s\", \"%s\", "
           "\"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\"]",
           "1", hex(0x7f0000000040, 8, h[0]), hex((uint32_t)-7, 4, h[1]),
           hex(0x4008000000000000, 8, h[2]) /* 3.0 */, hex(0x40200000, 4, h[3]) /* 2.5f */,
           hex(1, 1, h[4]), hex(0xfe, 1, h[5]), hex(0xffff, 2, h[6]), hex(0x1000, 8, h[7]),
           hex(0, 8, h[8]), hex(0x7f1000000008, 8, h[9]), hex(0x7f2000000004, 8, h[10]),
           hex(1000, 8, h[11]), hex(3, 8, h[12]));
  CHECK_RECORDED(want);
  check_pack_module();
  CHECK_RECORDED(
      "\"fn\": \"cuModuleGetFunction\", \"result\": 0, \"context\": 0, \"module\": 1, "
      "\"name\": \"pack\", \"param_sizes\": [8, 4, 8, 4, 1, 1, 2, 8, 8, 8, 8, 8, 8]");
  /* No context was current: device 0's primary context, made current and
   * left so, never pushed. */
  CHECK_RECORDED(
      "\"fn\": \"cuDevicePrimaryCtxRetain\", \"result\": 0, \"context\": -1, \"device\": 0");
  CHECK_RECORDED("\"fn\": \"cuCtxSetCurrent\", \"result\": 0, \"context\": 0, \"set\": 0");
  CHECK_EQ_INT(fake.count("cuCtxPushCurrent_v2"), 0);
  CHECK_EQ_INT(fake.count("cuCtxPopCurrent_v2"), 0);
  CHECK_EQ_INT(fake.count("cuFuncSetAttribute"), 0); /* 4000 bytes need no opt-in */
  tj_kernel_free(k);
  CHECK_RECORDED("\"fn\": \"cuModuleUnload\", \"result\": 0, \"context\": 0, \"module\": 1");
}

TEST(cuda_module_once_per_context) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  for (int i = 0; i < 3; ++i) CHECK_OK(launch_scale(k, 1000 + i, 0, NULL));
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 1);
  CHECK_EQ_INT(fake.count("cuModuleGetFunction"), 1);
  CHECK_EQ_INT(fake.count("cuDevicePrimaryCtxRetain"), 1);
  /* Tensors on device 1: that device's primary context gets its own module. */
  CHECK_OK(launch_scale(k, 1000, 1, NULL));
  CHECK_OK(launch_scale(k, 1000, 1, NULL));
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 2);
  CHECK_RECORDED("\"fn\": \"cuModuleLoadData\", \"result\": 0, \"context\": 1, \"module\": 2");
  CHECK_RECORDED(
      "\"fn\": \"cuLaunchKernel\", \"result\": 0, \"context\": 1, \"function\": "
      "\"scale\", \"module\": 2, \"grid\": [8, 1, 1]");
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 5);
  /* Device 0's primary context was made current by the first launch; device
   * 1's is pushed around each of its launches, leaving device 0's current. */
  CHECK_EQ_INT(fake.count("cuCtxSetCurrent"), 1);
  CHECK_EQ_INT(fake.count("cuCtxPushCurrent_v2"), 2);
  CHECK_EQ_INT(fake.count("cuCtxPopCurrent_v2"), 2);
  /* A device the driver does not have. */
  CHECK_STATUS(launch_scale(k, 1000, 5, NULL), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS(
      "scale: cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)");
  tj_kernel_free(k);
  CHECK_EQ_INT(fake.count("cuModuleUnload"), 2);
}

TEST(cuda_current_context_used) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  /* The thread's current context is on the tensors' device (as torch leaves
   * it): used as it is, nothing pushed. */
  fake.set_current(0);
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_EQ_INT(fake.count("cuCtxPushCurrent_v2"), 0);
  CHECK_EQ_INT(fake.count("cuDevicePrimaryCtxRetain"), 0);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 2);
  /* Current on another device: the tensors' device wins. */
  fake.set_current(1);
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_EQ_INT(fake.count("cuCtxPushCurrent_v2"), 1);
  CHECK_RECORDED("\"fn\": \"cuLaunchKernel\", \"result\": 0, \"context\": 0");
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 1);
  fake.set_current(-1);
  tj_kernel_free(k);
}

/* The names of the calls recorded since the last reset, space-separated. */
static const char *recorded_calls(char *buf, size_t size) {
  const char *all = fake.json(), *p = all;
  size_t used = 0;
  buf[0] = 0;
  while ((p = strstr(p, "{\"fn\": \"")) != NULL) {
    p += 8;
    const char *end = strchr(p, '"');
    int n = snprintf(buf + used, size - used, "%s%.*s", used ? " " : "", (int)(end - p), p);
    if (n < 0 || (size_t)n >= size - used) break;
    used += (size_t)n;
    p = end;
  }
  return buf;
}

TEST(cuda_steady_state_driver_calls) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  char calls[2048];
  /* No current context: the first launch retains the primary context and
   * makes it current; every later one is one query and the launch. */
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_EQ_INT(fake.count("cuCtxSetCurrent"), 1);
  fake.reset();
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_EQ_STR(recorded_calls(calls, sizeof(calls)),
               "cuCtxGetCurrent cuLaunchKernel cuCtxGetCurrent cuLaunchKernel");
  /* The thread's own current context on the device (torch's): the same two. */
  fake.set_current(0);
  fake.reset();
  CHECK_OK(launch_scale(k, 100, 0, NULL));
  CHECK_EQ_STR(recorded_calls(calls, sizeof(calls)), "cuCtxGetCurrent cuLaunchKernel");
  fake.set_current(-1);
  tj_kernel_free(k);
}

/* The fake's stream capture (cuStreamBeginCapture / cuStreamEndCapture). */
static void capture(uintptr_t stream, int begin) {
  void *fn = dlsym(fake.handle, begin ? "cuStreamBeginCapture_v2" : "cuStreamEndCapture");
  CHECK(fn != NULL);
  if (begin) {
    CHECK_EQ_INT(((int (*)(void *, int))fn)(DEVICE_PTR(stream), 0), 0);
  } else {
    void *graph = NULL;
    CHECK_EQ_INT(((int (*)(void *, void **))fn)(DEVICE_PTR(stream), &graph), 0);
  }
}

/* The fake's records from the last launch on: what one launch did. */
static void last_launch(char *buf, size_t size) {
  const char *all = fake.json(), *at = strstr(all, "\"fn\": \"cuLaunchKernel\"");
  snprintf(buf, size, "%s", at ? at : "(no launch)");
}

TEST(cuda_bound_launch) {
  use_fake();
  tj_kernel *k = scale_kernel_flags(0, 0);
  tjt_tensor a, c;
  cuda_tensor(&a, 0x10000000, 1000, 0);
  cuda_tensor(&c, 0x20000000, 1000, 0);
  tj_arg args[2];
  tjt_arg_tensor(&args[0], &a, 0);
  tjt_arg_tensor(&args[1], &c, 0);
  tj_call call = {args, 2, 0, NULL, NULL};
  tj_bound *bound = NULL;
  CHECK_OK(tj_bound_create(k, &call, &bound));
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0); /* bound, packed, nothing launched */
  /* The first launch loads the module; then a launch is one query and the
   * launch, recorded as the direct call records it. */
  CHECK_OK(tj_bound_launch(bound, 1, DEVICE_PTR(0x55)));
  char calls[2048], bound_launch[2048], direct[2048];
  fake.reset();
  CHECK_OK(tj_bound_launch(bound, 1, DEVICE_PTR(0x55)));
  CHECK_EQ_STR(recorded_calls(calls, sizeof(calls)), "cuCtxGetCurrent cuLaunchKernel");
  last_launch(bound_launch, sizeof(bound_launch));
  fake.reset();
  tj_arg args2[2];
  tjt_arg_tensor(&args2[0], &a, 0);
  tjt_arg_tensor(&args2[1], &c, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, args2, 2, &f));
  f.stream = DEVICE_PTR(0x55);
  CHECK_OK(tj_call_launch(&f));
  last_launch(direct, sizeof(direct));
  CHECK_EQ_STR(bound_launch, direct);
  CHECK_RECORDED("\"grid\": [8, 1, 1], \"block\": [128, 1, 1], \"shared_mem\": 0, \"stream\": 85");
  /* The stream is each launch's. */
  CHECK_OK(tj_bound_launch(bound, 1, DEVICE_PTR(0x66)));
  CHECK_RECORDED("\"stream\": 102");
  /* A new tensor of the same shape: the next launch passes its address. */
  tjt_tensor c2;
  cuda_tensor(&c2, 0x30000000, 1000, 0);
  tj_arg fresh;
  tjt_arg_tensor(&fresh, &c2, 0);
  CHECK_OK(tj_bound_update(bound, 1, &fresh));
  char h[20], want[200];
  fake.reset();
  CHECK_OK(tj_bound_launch(bound, 1, DEVICE_PTR(0x55)));
  snprintf(want, sizeof(want), "\"%s\"", hex(0x30000000, 8, h));
  CHECK_RECORDED(want);
  /* Another device: refused, naming the argument. */
  cuda_tensor(&c2, 0x30000000, 1000, 1);
  tjt_arg_tensor(&fresh, &c2, 0);
  CHECK_STATUS(tj_bound_update(bound, 1, &fresh), TJ_EVALUE);
  CHECK_EQ_STR(
      tj_last_error(),
      "scale: argument 1 'C': expected device cuda:0 (that of argument 0 'A'), got cuda:1");
  /* Kept across a capture: the launch is captured, nothing forbidden. */
  fake.reset();
  capture(0x55, 1);
  CHECK_OK(tj_bound_launch(bound, 1, DEVICE_PTR(0x55)));
  capture(0x55, 0);
  CHECK_RECORDED("\"stream\": 85, \"args\"");
  CHECK_RECORDED("\"captured\": 1");
  CHECK_EQ_INT(((int (*)(void))dlsym(fake.handle, "fake_cuda_forbidden"))(), 0);
  tj_bound_free(bound);
  tj_kernel_free(k);
}

TEST(cuda_capture_loads_no_module) {
  use_fake();
  int (*forbidden)(void) = (int (*)(void))dlsym(fake.handle, "fake_cuda_forbidden");
  /* A kernel whose module is not loaded, first called while its stream is
   * captured: refused, saying why, and nothing forbidden reached the driver. */
  tj_kernel *k = scale_kernel(0);
  CHECK_OK(launch_scale(k, 10, 1, NULL)); /* device 1 only */
  capture(0x77, 1);
  CHECK_STATUS(launch_scale(k, 10, 0, DEVICE_PTR(0x77)), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "scale: the kernel's module is not loaded on cuda:0, and stream 0x77 is being captured "
      "into a CUDA graph, where no module may be loaded: call kernel.warmup()");
  capture(0x77, 0);
  CHECK_EQ_INT(forbidden(), 0);
  /* Loaded ahead (tj_kernel_warmup), the first launch in a capture runs. */
  CHECK_OK(tj_kernel_warmup(k, 0));
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 2);
  capture(0x77, 1);
  CHECK_OK(launch_scale(k, 10, 0, DEVICE_PTR(0x77)));
  capture(0x77, 0);
  CHECK_EQ_INT(forbidden(), 0);
  CHECK_RECORDED("\"captured\": 1");
  tj_kernel_free(k);
  /* Warm-up with -1: the thread's current context, if any; a CPU kernel has
   * nothing to load. */
  k = scale_kernel(0);
  int before = fake.count("cuModuleLoadData");
  fake.set_current(-1);
  CHECK_OK(tj_kernel_warmup(k, -1));
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), before);
  fake.set_current(1);
  CHECK_OK(tj_kernel_warmup(k, -1));
  CHECK_OK(tj_kernel_warmup(k, -1));
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), before + 1);
  CHECK_RECORDED("\"fn\": \"cuModuleLoadData\", \"result\": 0, \"context\": 1");
  fake.set_current(-1);
  tj_kernel_free(k);
  tj_kernel *cpu = tjt_vec_add(0, 1);
  CHECK_OK(tj_kernel_warmup(cpu, 0));
  tj_kernel_free(cpu);
}

TEST(cuda_dynamic_shared_memory) {
  use_fake();
  /* n * 4 bytes: 40000 fits the default 48 KiB, 100000 needs the opt-in,
   * set once, and again only for a larger amount. */
  tj_kernel *k = scale_kernel(-1);
  CHECK_OK(launch_scale(k, 10000, 0, NULL));
  CHECK_EQ_INT(fake.count("cuFuncSetAttribute"), 0);
  CHECK_OK(launch_scale(k, 25000, 0, NULL));
  CHECK_RECORDED(
      "\"fn\": \"cuFuncSetAttribute\", \"result\": 0, \"context\": 0, \"function\": "
      "\"scale\", \"attribute\": 8, \"value\": 100000");
  CHECK_OK(launch_scale(k, 25000, 0, NULL));
  CHECK_OK(launch_scale(k, 20000, 0, NULL));
  CHECK_EQ_INT(fake.count("cuFuncSetAttribute"), 1);
  CHECK_OK(launch_scale(k, 30000, 0, NULL));
  CHECK_EQ_INT(fake.count("cuFuncSetAttribute"), 2);
  CHECK_RECORDED("\"shared_mem\": 120000");
  /* More than the device has: the driver refuses, and the message says the
   * device's limit. */
  CHECK_STATUS(launch_scale(k, 60000, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS(
      "scale: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, 240000) failed: "
      "CUDA_ERROR_INVALID_VALUE (invalid argument); the device allows at most 232448 bytes of "
      "shared memory per block");
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 5);
  tj_kernel_free(k);
}

TEST(cuda_launch_error_message) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  fake.fail("cuLaunchKernel", 701, 1);
  CHECK_STATUS(launch_scale(k, 1000, 0, DEVICE_PTR(0x99)), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "scale: cuLaunchKernel(grid (8, 1, 1), block (128, 1, 1), shared memory 0 bytes, stream "
      "0x99) failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (too many resources requested for "
      "launch)");
  /* A context pushed for a launch is popped on the error path too. */
  fake.set_current(1);
  fake.fail("cuLaunchKernel", 701, 1);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_ERUNTIME);
  CHECK_EQ_INT(fake.count("cuCtxPushCurrent_v2"), 1);
  CHECK_EQ_INT(fake.count("cuCtxPopCurrent_v2"), 1);
  fake.set_current(-1);
  CHECK_OK(launch_scale(k, 1000, 0, NULL));
  /* An error code the driver cannot name. */
  fake.fail("cuLaunchKernel", 12345, 1);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("failed: CUDA driver error 12345");
  tj_kernel_free(k);
}

TEST(cuda_missing_function) {
  use_fake();
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("other", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1), ones[3] = {one, one, one};
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_set_launch(k, ones, ones, tjt_const(k, 0)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "other"));
  CHECK_STATUS(launch_scale(k, 10, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "other: cuModuleGetFunction(\"other\") failed: CUDA_ERROR_NOT_FOUND (named symbol not "
      "found); the module image has no extern \"C\" __global__ function of that name");
  /* The module loaded for the lookup was unloaded again. */
  CHECK_EQ_INT(fake.count("cuModuleUnload"), 1);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  /* A bad image. */
  tj_kernel_free(k);
  CHECK_OK(tj_kernel_create("bad", 1, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_set_scalar(k, 0, "x", TJT_F32));
  one = tjt_const(k, 1);
  int32_t ones2[3] = {one, one, one};
  CHECK_OK(tj_kernel_set_launch(k, ones2, ones2, tjt_const(k, 0)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, "not an image", 12, "bad"));
  tj_arg x;
  tj_arg_init(&x);
  x.kind = TJ_ARG_FLOAT;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &x, 1, &f));
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "bad: cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)");
  tj_kernel_free(k);
}

TEST(cuda_empty_grid_no_launch) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  CHECK_OK(launch_scale(k, 0, 0, NULL)); /* ceildiv(0, 128) == 0 */
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 0);
  tj_kernel_free(k);
}

TEST(cuda_bad_launch_configuration) {
  use_fake();
  /* grid (n - 5,), block (n // 2,), shared memory n - 100. */
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("cfg", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  int32_t grid[3] = {tjt_binop_const(k, "n - 5", 0, TJ_OP_SUB, 5), one, one};
  int32_t block[3] = {tjt_binop_const(k, "n // 2", 0, TJ_OP_FLOORDIV, 2), one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_binop_const(k, "n - 100", 0, TJ_OP_SUB, 100)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "scale"));
  CHECK_STATUS(launch_scale(k, 3, 0, NULL), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("cfg: grid[0] = n - 5 evaluates to -2, expected 0 to 4294967295");
  CHECK_STATUS(launch_scale(k, 6, 0, NULL), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("cfg: shared_mem = n - 100 evaluates to -94, expected 0 to 4294967295");
  CHECK_STATUS(launch_scale(k, 5, 0, NULL), TJ_EVALUE); /* grid 0 is fine; block 2 */
  CHECK_ERROR_STARTS_WITH("cfg: shared_mem = n - 100");
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  tj_kernel_free(k);

  /* block (n // 2,) with n == 1: a block of no threads. */
  CHECK_OK(tj_kernel_create("cfg", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  n = tjt_sym(k, 0);
  one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  int32_t grid1[3] = {one, one, one};
  int32_t block1[3] = {tjt_binop_const(k, "n // 2", 0, TJ_OP_FLOORDIV, 2), one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid1, block1, tjt_const(k, 0)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "scale"));
  CHECK_STATUS(launch_scale(k, 1, 0, NULL), TJ_EVALUE);
  CHECK_ERROR_STARTS_WITH("cfg: block[0] = n // 2 evaluates to 0, expected 1 to 4294967295");
  tj_kernel_free(k);
}

TEST(cuda_kernel_setup_errors) {
  tj_kernel *k = NULL;
  int32_t ids[3] = {0, 0, 0};
  /* Launch configuration and images are for CUDA kernels only. */
  CHECK_OK(tj_kernel_create("host", 1, TJ_TARGET_CPU, &k));
  int32_t c = tjt_const(k, 1);
  CHECK_STATUS(tj_kernel_set_launch(k, ids, ids, c), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("host: a launch configuration is only for cuda kernels");
  CHECK_STATUS(tj_kernel_set_image(k, "x", 1, "host"), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("only for cuda kernels");
  tj_kernel_free(k);

  CHECK_OK(tj_kernel_create("dev", 1, TJ_TARGET_CUDA, &k));
  c = tjt_const(k, 1);
  int32_t bad[3] = {c, 7, c};
  CHECK_STATUS(tj_kernel_set_launch(k, bad, ids, c), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("dev: launch configuration: unknown expression id 7");
  CHECK_STATUS(tj_kernel_set_image(k, "x", 0, "dev"), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("the module image is empty");
  CHECK_STATUS(tj_kernel_set_image(k, "x", 1, ""), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("no kernel function name");
  CHECK_OK(tj_kernel_set_scalar(k, 0, "x", TJT_F32));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_STATUS(tj_kernel_set_launch(k, ids, ids, c), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("finalized");
  /* Without a launch configuration, or without an image. */
  tj_arg x;
  tj_arg_init(&x);
  x.kind = TJ_ARG_FLOAT;
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &x, 1, &f));
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("dev: no CUDA module image is loaded");
  CHECK_OK(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "scale"));
  CHECK_STATUS(tj_kernel_set_image(k, SCALE_PTX, (int64_t)sizeof(SCALE_PTX) - 1, "scale"),
               TJ_EVALUE);
  CHECK_ERROR_CONTAINS("already loaded");
  CHECK_STATUS(tj_call_launch(&f), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("dev: no launch configuration (grid, block) is set");
  tj_kernel_free(k);
}

TEST(cuda_image_file) {
  use_fake();
  char path[] = "/tmp/tilejit-test-image-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_EQ_INT(write(fd, SCALE_PTX, sizeof(SCALE_PTX) - 1), (long long)sizeof(SCALE_PTX) - 1);
  close(fd);
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("scale", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1), ones[3] = {one, one, one};
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  CHECK_OK(tj_kernel_set_launch(k, ones, ones, tjt_const(k, 0)));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_STATUS(tj_kernel_load(k, "/nonexistent/tilejit-test/kernel.cubin", "scale"), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "scale: cannot open CUDA module image /nonexistent/tilejit-test/kernel.cubin: ");
  CHECK_OK(tj_kernel_load(k, path, "scale"));
  unlink(path);
  CHECK_OK(launch_scale(k, 10, 0, NULL));
  char size[64];
  snprintf(size, sizeof(size), "\"kind\": \"ptx\", \"size\": %zu", sizeof(SCALE_PTX));
  CHECK_RECORDED(size);
  tj_kernel_free(k);
}

TEST(cuda_device_capability) {
  use_fake();
  fake.set_capability(9, 0);
  int32_t major = 0, minor = -1;
  CHECK_OK(tj_cuda_device_capability(1, &major, &minor));
  CHECK_EQ_INT(major, 9);
  CHECK_EQ_INT(minor, 0);
  CHECK_RECORDED(
      "\"fn\": \"cuDeviceGetAttribute\", \"result\": 0, \"context\": -1, "
      "\"attribute\": 75, \"device\": 1");
  /* -1: the current context's device, else device 0. */
  fake.set_capability(8, 6);
  CHECK_OK(tj_cuda_device_capability(-1, &major, &minor));
  CHECK_EQ_INT(major * 10 + minor, 86);
  CHECK_RECORDED("\"attribute\": 76, \"device\": 0");
  fake.set_current(1);
  fake.reset();
  CHECK_OK(tj_cuda_device_capability(-1, &major, &minor));
  CHECK_RECORDED("\"attribute\": 75, \"device\": 1");
  fake.set_current(-1);
  CHECK_STATUS(tj_cuda_device_capability(7, &major, &minor), TJ_ERUNTIME);
  CHECK_ERROR_CONTAINS("tilejit: cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE");
}

/* ---- Many threads, one kernel ------------------------------------------------ */

enum { THREADS = 4, LAUNCHES = 200 };

typedef struct {
  tj_kernel *kernel;
  int failures;
  char first_failure[512];
} worker;

static void *worker_main(void *opaque) {
  worker *w = opaque;
  for (int i = 0; i < LAUNCHES; ++i) {
    tjt_tensor a, c;
    cuda_tensor(&a, 0x10000000, 1 + i, 0);
    cuda_tensor(&c, 0x20000000, 1 + i, 0);
    tj_arg arg, out;
    tj_arg_from_dltensor(&arg, &a.t, 0);
    tj_frame f;
    int rc = tj_call_bind(w->kernel, &arg, 1, &f);
    if (!rc) {
      tj_arg_from_dltensor(&out, &c.t, 0);
      rc = tj_call_set_output(&f, 0, &out);
    }
    if (!rc) rc = tj_call_launch(&f);
    if (rc && w->failures++ == 0)
      snprintf(w->first_failure, sizeof(w->first_failure), "launch %d: %s", i, tj_last_error());
  }
  return NULL;
}

TEST(cuda_threads) {
  use_fake();
  tj_kernel *k = scale_kernel(0);
  pthread_t threads[THREADS];
  worker workers[THREADS];
  for (int t = 0; t < THREADS; ++t) {
    memset(&workers[t], 0, sizeof(workers[t]));
    workers[t].kernel = k;
    CHECK_EQ_INT(pthread_create(&threads[t], NULL, worker_main, &workers[t]), 0);
  }
  int failures = 0;
  for (int t = 0; t < THREADS; ++t) {
    CHECK_EQ_INT(pthread_join(threads[t], NULL), 0);
    if (workers[t].failures) printf("  %s\n", workers[t].first_failure);
    failures += workers[t].failures;
  }
  CHECK_EQ_INT(failures, 0);
  /* One module for the one context, however the threads raced to it. */
  CHECK_EQ_INT(fake.count("cuModuleLoadData"), 1);
  CHECK_EQ_INT(fake.count("cuDevicePrimaryCtxRetain"), 1);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), THREADS * LAUNCHES);
  tj_kernel_free(k);
}

/* scale(A, C, n) declared, with n an int32 symbol passed first: the image's
 * parameters (u32, u64, u64) match; SCALE_PTX's (u64 x3) do not. */
static const char SCALE32_PTX[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry scale(\n"
    "  .param .u32 scale_param_0, .param .u64 scale_param_1, .param .u64 scale_param_2\n"
    ")\n{\n  ret;\n}\n";

static tj_kernel *scale32_kernel(const char *ptx, size_t size, int32_t nabi) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("scale", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_set_symbol_dtype(k, 0, TJT_DTYPE(kDLInt, 32)));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  int32_t grid[3] = {one, one, one}, block[3] = {one, one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_const(k, 0)));
  const tj_abi_arg abi[3] = {
      {TJ_ABI_SYMBOL, 0, {0, 0, 0}}, {TJ_ABI_PARAM, 0, {0, 0, 0}}, {TJ_ABI_PARAM, 1, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, nabi, abi));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, ptx, (int64_t)size - 1, "scale"));
  return k;
}

TEST(cuda_abi_order_and_widths) {
  use_fake();
  tj_kernel *k = scale32_kernel(SCALE32_PTX, sizeof(SCALE32_PTX), 3);
  CHECK_OK(launch_scale(k, 1000, 0, NULL));
  char h[3][20], want[300];
  snprintf(want, sizeof(want), "\"args\": [\"%s\", \"%s\", \"%s\"]", hex(1000, 4, h[0]),
           hex(0x10000000, 8, h[1]), hex(0x20000000, 8, h[2]));
  CHECK_RECORDED(want);
  /* 2^31 does not fit the int32 symbol: refused before anything launches. */
  tjt_tensor a;
  cuda_tensor(&a, 0x10000000, (int64_t)1 << 31, 0);
  tj_arg arg;
  tjt_arg_tensor(&arg, &a, 0);
  tj_frame f;
  CHECK_STATUS(tj_call_bind(k, &arg, 1, &f), TJ_EVALUE);
  CHECK_ERROR_CONTAINS(
      "scale: argument 0 'A': symbol 'n' = 2147483648 does not fit its type int32");
  tj_kernel_free(k);
}

/* axpy(alpha: f32, k: int32, n: int32 symbol, 2n: int64, A, C): a scalar of
 * each width, a symbol and an expression, then the buffers. */
static const char AXPY_PTX[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry axpy(\n"
    "  .param .f32 axpy_param_0, .param .u32 axpy_param_1, .param .u32 axpy_param_2,\n"
    "  .param .u64 axpy_param_3, .param .u64 axpy_param_4, .param .u64 axpy_param_5\n"
    ")\n{\n  ret;\n}\n";

/* Calls axpy through tj_call_run (the direct call's path) on `stream`, C at `c`. */
static int call_axpy(tj_kernel *k, double alpha, int64_t scalar, uintptr_t c, void *stream) {
  tjt_tensor a, ct;
  cuda_tensor(&a, 0x10000000, 1000, 0);
  cuda_tensor(&ct, c, 1000, 0);
  tj_arg args[4];
  tj_arg_init(&args[0]);
  args[0].kind = TJ_ARG_FLOAT;
  args[0].value.f = alpha;
  tj_arg_init(&args[1]);
  args[1].kind = TJ_ARG_INT;
  args[1].value.i = scalar;
  tjt_arg_tensor(&args[2], &a, 0);
  tjt_arg_tensor(&args[3], &ct, 0);
  tj_call call = {args, 4, stream != NULL, stream, NULL};
  return tj_call_run(k, &call);
}

/* A repeated direct call is checked and packed by the memo, with no frame: it
 * launches what the first call launched, with each call's own scalars,
 * addresses and stream, in one query and the launch, also while captured. */
TEST(cuda_repeated_calls_launch_as_the_first) {
  use_fake();
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("axpy", 4, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_set_symbol_dtype(k, 0, TJT_DTYPE(kDLInt, 32)));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  int32_t twice = tjt_binop_const(k, "n * 2", 0, TJ_OP_MUL, 2);
  CHECK_OK(tj_kernel_set_scalar(k, 0, "alpha", TJT_F32));
  CHECK_OK(tj_kernel_set_scalar(k, 1, "k", TJT_DTYPE(kDLInt, 32)));
  tjt_buffer(k, 2, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 3, "C", TJT_F32, 1, &n, NULL, 0, 0);
  int32_t grid[3] = {tjt_binop_const(k, "ceildiv(n, 128)", 0, TJ_OP_CEILDIV, 128), one, one};
  int32_t block[3] = {tjt_const(k, 128), one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_binop_const(k, "n * 4", 0, TJ_OP_MUL, 4)));
  const tj_abi_arg abi[6] = {
      {TJ_ABI_PARAM, 0, {0, 0, 0}},  {TJ_ABI_PARAM, 1, {0, 0, 0}},
      {TJ_ABI_SYMBOL, 0, {0, 0, 0}}, {TJ_ABI_EXPR, twice, TJT_DTYPE(kDLInt, 64)},
      {TJ_ABI_PARAM, 2, {0, 0, 0}},  {TJ_ABI_PARAM, 3, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, 6, abi));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, AXPY_PTX, (int64_t)sizeof(AXPY_PTX) - 1, "axpy"));
  CHECK(k->memo != NULL);
  char first[2048], again[2048], calls[2048], h[6][20], want[400];
  CHECK_OK(call_axpy(k, 1.5, -3, 0x20000000, DEVICE_PTR(0x55))); /* bound in full */
  last_launch(first, sizeof(first));
  snprintf(want, sizeof(want), "\"args\": [\"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\"]",
           hex(0x3fc00000, 4, h[0]), hex((uint32_t)-3, 4, h[1]), hex(1000, 4, h[2]),
           hex(2000, 8, h[3]), hex(0x10000000, 8, h[4]), hex(0x20000000, 8, h[5]));
  CHECK_RECORDED(want);
  CHECK_RECORDED("\"grid\": [8, 1, 1], \"block\": [128, 1, 1], \"shared_mem\": 4000");
  for (int round = 0; round < 2; ++round) { /* from the memo */
    fake.reset();
    CHECK_OK(call_axpy(k, 1.5, -3, 0x20000000, DEVICE_PTR(0x55)));
    CHECK_EQ_STR(recorded_calls(calls, sizeof(calls)), "cuCtxGetCurrent cuLaunchKernel");
    last_launch(again, sizeof(again));
    CHECK_EQ_STR(again, first);
  }
  /* Each call's own scalars, address and stream. */
  fake.reset();
  CHECK_OK(call_axpy(k, -0.25, 7, 0x30000000, DEVICE_PTR(0x66)));
  snprintf(want, sizeof(want), "\"args\": [\"%s\", \"%s\", \"%s\", \"%s\", \"%s\", \"%s\"]",
           hex(0xbe800000, 4, h[0]), hex(7, 4, h[1]), hex(1000, 4, h[2]), hex(2000, 8, h[3]),
           hex(0x10000000, 8, h[4]), hex(0x30000000, 8, h[5]));
  CHECK_RECORDED(want);
  CHECK_RECORDED("\"stream\": 102");
  /* What the full checks refuse, a hit refuses alike: k beyond int32, C misaligned. */
  CHECK_STATUS(call_axpy(k, 1.5, (int64_t)1 << 40, 0x20000000, DEVICE_PTR(0x55)), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("axpy: argument 1 'k'");
  CHECK_STATUS(call_axpy(k, 1.5, -3, 0x20000002, DEVICE_PTR(0x55)), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("axpy: argument 3 'C'");
  /* Captured: the launch alone, nothing forbidden. */
  fake.reset();
  capture(0x55, 1);
  CHECK_OK(call_axpy(k, 1.5, -3, 0x20000000, DEVICE_PTR(0x55)));
  capture(0x55, 0);
  CHECK_RECORDED("\"captured\": 1");
  CHECK_EQ_INT(((int (*)(void))dlsym(fake.handle, "fake_cuda_forbidden"))(), 0);
  tj_kernel_free(k);
}

TEST(cuda_param_info_checked) {
  use_fake();
  /* The image takes n as 8 bytes; the signature declares int32. */
  tj_kernel *k = scale32_kernel(SCALE_PTX, sizeof(SCALE_PTX), 3);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS(
      "scale: parameter 0 ('n') of the loaded function 'scale' is 8 bytes, the signature "
      "declares 4 bytes");
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  tj_kernel_free(k);
  /* Fewer parameters declared than the image has. */
  k = scale32_kernel(SCALE32_PTX, sizeof(SCALE32_PTX), 2);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("takes more than the 2 parameters the signature declares");
  tj_kernel_free(k);
}

/* A program of two kernel functions: copy(A_desc: tensor map of A, C, n)
 * launched with a (2, 1, 1) cluster and programmatic dependent launch, then
 * finish(C, n) launched cooperatively, both on the call's stream. */
static const char TWO_PTX[] =
    ".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".visible .entry copy(\n"
    "  .param .align 64 .b8 copy_param_0[128],\n"
    "  .param .u64 copy_param_1,\n"
    "  .param .u32 copy_param_2\n"
    ")\n{\n  ret;\n}\n"
    ".visible .entry finish(\n"
    "  .param .u64 finish_param_0,\n"
    "  .param .u32 finish_param_1\n"
    ")\n{\n  ret;\n}\n";

static tj_kernel *two_kernel(int64_t box0) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("two", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  CHECK_OK(tj_kernel_set_symbol_dtype(k, 0, (DLDataType){kDLInt, 32, 1}));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  tjt_buffer(k, 0, "A", TJT_F32, 1, &n, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "C", TJT_F32, 1, &n, NULL, 0, TJ_BUF_OUTPUT);
  tj_tensormap map = {.name = "A_desc", .param = 0, .data_type = 7 /* FLOAT32 */, .rank = 1};
  map.dims[0] = n;
  map.box[0] = tjt_const(k, box0);
  map.element_strides[0] = one;
  map.swizzle = 0;
  map.l2_promotion = 2;
  int32_t map_id = -1;
  CHECK_OK(tj_kernel_add_tensormap(k, &map, &map_id));
  int32_t grid[3] = {tjt_binop_const(k, "ceildiv(n, 128)", 0, TJ_OP_CEILDIV, 128), one, one};
  int32_t block[3] = {tjt_const(k, 256), one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_const(k, 0)));
  tj_abi_arg copy_args[3] = {{TJ_ABI_TENSORMAP, map_id, {0, 0, 0}},
                             {TJ_ABI_PARAM, 1, {0, 0, 0}},
                             {TJ_ABI_SYMBOL, 0, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, 3, copy_args));
  int32_t cluster[3] = {tjt_const(k, 2), one, one};
  CHECK_OK(tj_kernel_set_launch_attrs(k, 0, cluster, TJ_LAUNCH_PDL));
  tj_abi_arg finish_args[2] = {{TJ_ABI_PARAM, 1, {0, 0, 0}}, {TJ_ABI_SYMBOL, 0, {0, 0, 0}}};
  int32_t grid2[3] = {tjt_const(k, 4), one, one}, block2[3] = {tjt_const(k, 32), one, one};
  int32_t index = -1;
  CHECK_OK(
      tj_kernel_add_launch(k, "finish", grid2, block2, tjt_const(k, 0), 2, finish_args, &index));
  CHECK_EQ_INT(index, 1);
  CHECK_OK(tj_kernel_set_launch_attrs(k, 1, NULL, TJ_LAUNCH_COOPERATIVE));
  /* A cooperative launch cannot also be a cluster launch. */
  CHECK_STATUS(tj_kernel_set_launch_attrs(k, 1, cluster, TJ_LAUNCH_COOPERATIVE), TJ_EVALUE);
  CHECK_STATUS(tj_kernel_set_launch_attrs(k, 2, NULL, 0), TJ_EVALUE);
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, TWO_PTX, (int64_t)sizeof(TWO_PTX) - 1, "copy"));
  return k;
}

TEST(cuda_launches_tensor_maps_and_attributes) {
  use_fake();
  fake.set_capability(9, 0);
  tj_kernel *k = two_kernel(32);
  CHECK_OK(launch_scale(k, 1000, 0, (void *)(uintptr_t)0x5eed));
  /* The map is encoded from A's address and the bound n, once per call. */
  CHECK_EQ_INT(fake.count("cuTensorMapEncodeTiled"), 1);
  CHECK_RECORDED(
      "\"data_type\": 7, \"rank\": 1, \"address\": 268435456, \"dims\": [1000], \"strides\": [], "
      "\"box\": [32], \"element_strides\": [1], \"interleave\": 0, \"swizzle\": 0, "
      "\"l2_promotion\": 2, \"oob_fill\": 0");
  /* Both through cuLaunchKernelEx, in order, with their attributes; the map
   * reaches copy as its 128 bytes (the fake writes the address first). */
  CHECK_EQ_INT(fake.count("cuLaunchKernelEx"), 2);
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 0);
  const char *all = fake.json();
  const char *copy = strstr(all, "\"function\": \"copy\"");
  const char *finish = strstr(all, "\"function\": \"finish\"");
  CHECK(copy != NULL && finish != NULL && copy < finish);
  char h[2][20], want[400];
  snprintf(want, sizeof(want),
           "\"grid\": [8, 1, 1], \"block\": [256, 1, 1], \"shared_mem\": 0, \"stream\": %d, "
           "\"args\": [\"%s",
           0x5eed, hex(0x10000000, 8, h[0]));
  CHECK_RECORDED(want);
  CHECK_RECORDED(
      "\"attrs\": [{\"id\": 4, \"cluster\": [2, 1, 1]}, {\"id\": 6, "
      "\"programmatic_stream_serialization\": 1}]");
  snprintf(want, sizeof(want),
           "\"grid\": [4, 1, 1], \"block\": [32, 1, 1], \"shared_mem\": 0, \"stream\": %d, "
           "\"args\": [\"%s\", \"%s\"], \"attrs\": [{\"id\": 2, \"cooperative\": 1}]",
           0x5eed, hex(0x20000000, 8, h[0]), hex(1000, 4, h[1]));
  CHECK_RECORDED(want);
  /* The cluster launch allowed non-portable sizes on its function. */
  CHECK_RECORDED("\"function\": \"copy\", \"attribute\": 14, \"value\": 1");
  tj_kernel_free(k);
}

/* What the builder calls declared reads back as declared: launches with their
 * attributes and arguments, the tensor map, a narrow symbol. */
TEST(cuda_signature_reads_back) {
  use_fake();
  tj_kernel *k = two_kernel(32);
  CHECK_EQ_INT(tj_kernel_target(k), TJ_TARGET_CUDA);
  CHECK_EQ_INT(tj_kernel_num_launches(k), 2);
  CHECK_EQ_INT(tj_kernel_num_tensormaps(k), 1);
  tj_symbol_info sym;
  CHECK_OK(tj_kernel_symbol_info(k, 0, &sym));
  CHECK_EQ_STR(sym.name, "n");
  CHECK(sym.divisibility == 1 && sym.dtype.code == kDLInt && sym.dtype.bits == 32);
  tj_launch_info first, second;
  CHECK_OK(tj_kernel_launch_info(k, 0, &first));
  CHECK_OK(tj_kernel_launch_info(k, 1, &second));
  CHECK_EQ_STR(first.symbol, "copy");
  CHECK_EQ_STR(second.symbol, "finish");
  tj_expr_info grid;
  CHECK_OK(tj_kernel_expr_info(k, first.grid[0], &grid));
  CHECK_EQ_STR(grid.text, "ceildiv(n, 128)");
  CHECK(grid.n == 3 && grid.code[2] == TJ_OP_CONST && grid.code[3] == 128);
  CHECK(first.cluster != NULL && first.flags == TJ_LAUNCH_PDL && first.nargs == 3);
  CHECK(first.args[0].source == TJ_ABI_TENSORMAP && first.args[2].source == TJ_ABI_SYMBOL);
  CHECK(second.cluster == NULL && second.flags == TJ_LAUNCH_COOPERATIVE && second.nargs == 2);
  int32_t nabi;
  const tj_abi_arg *abi;
  CHECK_OK(tj_kernel_abi_info(k, &nabi, &abi));
  CHECK(nabi == 3 && abi == first.args);
  const tj_tensormap *map;
  CHECK_OK(tj_kernel_tensormap_info(k, 0, &map));
  CHECK_EQ_STR(map->name, "A_desc");
  CHECK(map->param == 0 && map->rank == 1 && map->l2_promotion == 2);
  tj_param_info a;
  CHECK_OK(tj_kernel_param_info(k, 0, &a));
  CHECK(a.kind == TJ_PARAM_BUFFER && a.ndim == 1 && a.strides == NULL && a.align == 0);
  CHECK(a.flags == TJ_BUF_CONST && a.symbol == -1);
  tj_expr_info extent;
  CHECK_OK(tj_kernel_expr_info(k, a.shape[0], &extent));
  CHECK(extent.n == 1 && extent.code[0] == TJ_OP_SYM && extent.code[1] == 0);
  CHECK_STATUS(tj_kernel_launch_info(k, 2, &first), TJ_EVALUE);
  CHECK_ERROR_CONTAINS("two: launch 2 out of range [0, 2)");
  CHECK_STATUS(tj_kernel_tensormap_info(k, -1, &map), TJ_EVALUE);
  tj_kernel_free(k);
}

TEST(cuda_tensor_map_encode_error_names_the_map) {
  use_fake();
  fake.set_capability(9, 0);
  /* A box of 3 float32 is 12 bytes: not a multiple of 16, refused by the driver. */
  tj_kernel *k = two_kernel(3);
  CHECK_STATUS(launch_scale(k, 1000, 0, NULL), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH(
      "two: tensor map 'A_desc' (of 'A'): cuTensorMapEncodeTiled(data type 7, rank 1, address");
  CHECK_ERROR_CONTAINS("dims (1000,), strides (), box (3,), element strides (1,)");
  CHECK_ERROR_CONTAINS("CUDA_ERROR_INVALID_VALUE");
  CHECK_EQ_INT(fake.count("cuLaunchKernelEx"), 0);
  tj_kernel_free(k);
}

/* conv(X: (n, 8, 16) f32, an im2col map of X, W: a zero-filled workspace of n
 * floats): the map's pixel box corners, channels and pixels are constants;
 * `channels` and `lower` vary to cross the driver's limits. */
static const char CONV_PTX[] =
    ".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".visible .entry conv(\n"
    "  .param .align 64 .b8 conv_param_0[128],\n"
    "  .param .u64 conv_param_1\n"
    ")\n{\n  ret;\n}\n";

static tj_kernel *conv_kernel(int64_t channels, int64_t lower) {
  tj_kernel *k = NULL;
  CHECK_OK(tj_kernel_create("conv", 2, TJ_TARGET_CUDA, &k));
  CHECK_OK(tj_kernel_add_symbol(k, "n", 1));
  int32_t n = tjt_sym(k, 0), one = tjt_const(k, 1);
  int32_t shape[3] = {n, tjt_const(k, 8), tjt_const(k, 16)};
  tjt_buffer(k, 0, "X", TJT_F32, 3, shape, NULL, 0, TJ_BUF_CONST);
  tjt_buffer(k, 1, "W", TJT_F32, 1, &n, NULL, 0, TJ_BUF_WORKSPACE | TJ_BUF_ZERO);
  tj_tensormap map = {.name = "X_desc", .param = 0, .data_type = 7, .rank = 3, .im2col = 1};
  map.dims[0] = shape[2], map.dims[1] = shape[1], map.dims[2] = n;
  map.strides[0] = tjt_const(k, 64), map.strides[1] = tjt_const(k, 512);
  for (int i = 0; i < 3; ++i) map.element_strides[i] = one;
  map.lower_corner[0] = tjt_const(k, lower);
  map.upper_corner[0] = tjt_const(k, -1);
  map.channels_per_pixel = tjt_const(k, channels);
  map.pixels_per_column = tjt_const(k, 32);
  int32_t map_id = -1;
  CHECK_OK(tj_kernel_add_tensormap(k, &map, &map_id));
  int32_t grid[3] = {tjt_const(k, 4), one, one}, block[3] = {tjt_const(k, 128), one, one};
  CHECK_OK(tj_kernel_set_launch(k, grid, block, tjt_const(k, 0)));
  tj_abi_arg args[2] = {{TJ_ABI_TENSORMAP, map_id, {0, 0, 0}}, {TJ_ABI_PARAM, 1, {0, 0, 0}}};
  CHECK_OK(tj_kernel_set_abi(k, 2, args));
  CHECK_OK(tj_kernel_finalize(k));
  CHECK_OK(tj_kernel_set_image(k, CONV_PTX, (int64_t)sizeof(CONV_PTX) - 1, "conv"));
  return k;
}

/* Binds conv(X) with X of n pixels rows at 0x10000000 and the workspace at
 * 0x30000000 (what an allocator would hand back), and launches on `stream`. */
static int launch_conv(tj_kernel *k, int64_t n, void *stream) {
  tjt_tensor x, w;
  int64_t shape[3] = {n, 8, 16};
  tjt_tensor_init(&x, DEVICE_PTR(0x10000000), TJT_F32, 3, shape, NULL);
  x.t.device.device_type = kDLCUDA;
  cuda_tensor(&w, 0x30000000, n, 0);
  tj_arg arg, ws;
  tjt_arg_tensor(&arg, &x, 0);
  tj_frame f;
  CHECK_OK(tj_call_bind(k, &arg, 1, &f));
  CHECK_EQ_INT(f.out_shape[0][0], n); /* the workspace's shape, after the (no) outputs */
  tjt_arg_tensor(&ws, &w, 0);
  CHECK_OK(tj_call_set_output(&f, 0, &ws));
  f.stream = stream;
  return tj_call_launch(&f);
}

TEST(cuda_im2col_map_and_zeroed_workspace) {
  use_fake();
  fake.set_capability(9, 0);
  tj_kernel *k = conv_kernel(16, -1);
  CHECK_OK(launch_conv(k, 4, (void *)(uintptr_t)0x5eed));
  /* The workspace is zeroed on the launch stream, before the map and the kernel. */
  CHECK_RECORDED(
      "\"fn\": \"cuMemsetD8Async\", \"result\": 0, \"context\": 0, \"address\": "
      "805306368, \"value\": 0, \"count\": 16, \"stream\": 24301");
  CHECK_RECORDED(
      "\"fn\": \"cuTensorMapEncodeIm2col\", \"result\": 0, \"context\": 0, \"data_type\": 7, "
      "\"rank\": 3, \"address\": 268435456, \"dims\": [16, 8, 4], \"strides\": [64, 512], "
      "\"element_strides\": [1, 1, 1], \"lower_corner\": [-1], \"upper_corner\": [-1], "
      "\"channels_per_pixel\": 16, \"pixels_per_column\": 32, \"interleave\": 0, \"swizzle\": 0, "
      "\"l2_promotion\": 0, \"oob_fill\": 0");
  const char *all = fake.json();
  const char *memset_at = strstr(all, "cuMemsetD8Async"), *launch_at = strstr(all, "cuLaunch");
  CHECK(memset_at != NULL && launch_at != NULL && memset_at < launch_at);
  char h[20], want[200];
  snprintf(want, sizeof(want), "\"function\": \"conv\"");
  CHECK_RECORDED(want);
  CHECK_RECORDED(hex(0x30000000, 8, h)); /* the workspace reaches the kernel */
  /* A memset the driver refuses names the kernel, the workspace and the call. */
  fake.fail("cuMemsetD8Async", 1, 1); /* CUDA_ERROR_INVALID_VALUE, once */
  CHECK_STATUS(launch_conv(k, 4, (void *)(uintptr_t)0x5eed), TJ_ERUNTIME);
  CHECK_ERROR_STARTS_WITH("conv: workspace 'W': cuMemsetD8Async(");
  tj_kernel_free(k);
  /* The driver's limits, checked first and named: channels per pixel, corners by rank. */
  k = conv_kernel(300, -1);
  CHECK_STATUS(launch_conv(k, 4, NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "conv: tensor map 'X_desc' (of 'X'): channels_per_pixel = 300, expected 1 to 256");
  tj_kernel_free(k);
  k = conv_kernel(16, -40000);
  CHECK_STATUS(launch_conv(k, 4, NULL), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "conv: tensor map 'X_desc' (of 'X'): lower_corner[0] = -40000; a rank-3 im2col "
               "map's pixel box corners must be within [-32768, 32767]");
  CHECK_EQ_INT(fake.count("cuLaunchKernel"), 1);
  tj_kernel_free(k);
  /* An im2col map has rank 3 to 5. */
  CHECK_OK(tj_kernel_create("bad", 1, TJ_TARGET_CUDA, &k));
  int32_t one = tjt_const(k, 1);
  tjt_buffer(k, 0, "X", TJT_F32, 1, &one, NULL, 0, 0);
  tj_tensormap map = {.name = "X_desc", .param = 0, .data_type = 7, .rank = 2, .im2col = 1};
  int32_t id;
  CHECK_STATUS(tj_kernel_add_tensormap(k, &map, &id), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(),
               "bad: tensor map 'X_desc': an im2col tensor map has rank 3, 4 or "
               "5 (NWC, NHWC, NDHWC), got 2");
  tj_kernel_free(k);
}
