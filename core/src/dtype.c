/* Names of DLPack device types and dtypes, for messages and introspection; the
 * rows of the element-type table (core.h's TJ_DTYPES) and their lookups. */
#include <stdio.h>
#include <string.h>

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

static const tj_dtype_row rows[] = {
#define TJ__DTYPE_ROW(name, code, bits, lanes, family, cute, tma, xla, torch) \
  {name, {code, bits, lanes}, family, cute, tma, xla, torch},
    TJ_DTYPES(TJ__DTYPE_ROW)
#undef TJ__DTYPE_ROW
};
enum { NROWS = (int32_t)(sizeof(rows) / sizeof(rows[0])) };

const tj_dtype_row *tj_dtype_rows(int32_t *count) {
  *count = NROWS;
  return rows;
}

const tj_dtype_row *tj__dtype_row_of_code(uint8_t code) {
  for (int32_t i = 0; i < NROWS; ++i)
    if (rows[i].dtype.code == code) return &rows[i];
  return NULL;
}

const tj_dtype_row *tj__dtype_row_of(DLDataType dtype) {
  for (int32_t i = 0; i < NROWS; ++i)
    if (rows[i].dtype.code == dtype.code && rows[i].dtype.bits == dtype.bits &&
        rows[i].dtype.lanes == dtype.lanes)
      return &rows[i];
  return NULL;
}

int tj__dtype_family_sized(const tj_dtype_row *row) { return strcmp(row->name, row->family) != 0; }

int64_t tj_tensormap_element_bytes(int32_t data_type) {
  static const int64_t bytes[] = TJ_TENSORMAP_ELEMENT_BYTES;
  return data_type >= 0 && data_type < (int32_t)(sizeof(bytes) / sizeof(bytes[0]))
             ? bytes[data_type]
             : 0;
}

void tj_dtype_format(DLDataType dtype, char *buf, int32_t size) {
  const tj_dtype_row *row = tj__dtype_row_of_code(dtype.code);
  int n;
  if (row == NULL) {
    n = snprintf(buf, (size_t)size, "dtype(code=%u, bits=%u)", dtype.code, dtype.bits);
  } else if (tj__dtype_family_sized(row)) {
    /* Integer, float and complex names carry their width: "float32". */
    n = snprintf(buf, (size_t)size, "%s%u", row->family, dtype.bits);
  } else {
    n = snprintf(buf, (size_t)size, "%s", row->family);
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
