/* Names of DLPack device types and dtypes, for messages and introspection. */
#include <stdio.h>

#include "internal.h"

const char *tj_device_name(int32_t device_type) {
  switch (device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLOpenCL: return "opencl";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    case kDLVPI: return "vpi";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLExtDev: return "ext_dev";
    case kDLCUDAManaged: return "cuda_managed";
    case kDLOneAPI: return "oneapi";
    case kDLWebGPU: return "webgpu";
    case kDLHexagon: return "hexagon";
    case kDLMAIA: return "maia";
    case kDLTrn: return "trn";
  }
  static _Thread_local char unknown[32];
  snprintf(unknown, sizeof(unknown), "device_type(%d)", (int)device_type);
  return unknown;
}

static const char *code_name(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLOpaqueHandle: return "handle";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    case kDLFloat8_e3m4: return "float8_e3m4";
    case kDLFloat8_e4m3: return "float8_e4m3";
    case kDLFloat8_e4m3b11fnuz: return "float8_e4m3b11fnuz";
    case kDLFloat8_e4m3fn: return "float8_e4m3fn";
    case kDLFloat8_e4m3fnuz: return "float8_e4m3fnuz";
    case kDLFloat8_e5m2: return "float8_e5m2";
    case kDLFloat8_e5m2fnuz: return "float8_e5m2fnuz";
    case kDLFloat8_e8m0fnu: return "float8_e8m0fnu";
    case kDLFloat6_e2m3fn: return "float6_e2m3fn";
    case kDLFloat6_e3m2fn: return "float6_e3m2fn";
    case kDLFloat4_e2m1fn: return "float4_e2m1fn";
  }
  return NULL;
}

void tj_dtype_format(DLDataType dtype, char *buf, int32_t size) {
  const char *name = code_name(dtype.code);
  int n;
  if (name == NULL) {
    n = snprintf(buf, (size_t)size, "dtype(code=%u, bits=%u)", dtype.code, dtype.bits);
  } else if (dtype.code <= kDLComplex && dtype.code != kDLOpaqueHandle) {
    /* Integer, float and complex names carry their width: "float32". */
    n = snprintf(buf, (size_t)size, "%s%u", name, dtype.bits);
  } else {
    n = snprintf(buf, (size_t)size, "%s", name);
  }
  if (dtype.lanes != 1 && n >= 0 && n < size)
    snprintf(buf + n, (size_t)(size - n), "x%u", dtype.lanes);
}

void tj__format_tuple(const int64_t *v, int32_t n, char *buf, int32_t size) {
  int32_t used = snprintf(buf, (size_t)size, "(");
  for (int32_t i = 0; i < n && used < size; ++i)
    used += snprintf(buf + used, (size_t)(size - used), i ? ", %lld" : "%lld", (long long)v[i]);
  if (used < size) snprintf(buf + used, (size_t)(size - used), n == 1 ? ",)" : ")");
}
