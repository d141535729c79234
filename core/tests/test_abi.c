/*
 * The DLPack ABI the core is built with (the vendored dlpack/dlpack.h): it is
 * the version the core speaks, with the published layout and enum values,
 * and it agrees with the dlpack.h torch was built with (torch being the
 * producer the core talks to most) when the build found one. Also the names
 * the core prints for statuses, devices and dtypes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "internal.h"

#define TJT_ABI_MAJOR TJ_DLPACK_MAJOR
#include "abi_items.h"

static const tjt_abi_item own_items[] = {TJT_ABI_ITEMS(TJT_ABI_ITEM)};
#define NOWN ((int)(sizeof(own_items) / sizeof(own_items[0])))

/* The published LP64 layout (DLPack 1.3, dlpack.h), written out by hand so
 * the check holds even where no reference header is installed. */
static void check_published_layout(void) {
  if (sizeof(void *) != 8) {
    tjt_note("not an LP64 target: published pointer-size offsets not checked");
    return;
  }
  CHECK_EQ_INT(sizeof(DLPackVersion), 8);
  CHECK_EQ_INT(offsetof(DLPackVersion, major), 0);
  CHECK_EQ_INT(offsetof(DLPackVersion, minor), 4);

  CHECK_EQ_INT(sizeof(DLDevice), 8);
  CHECK_EQ_INT(offsetof(DLDevice, device_type), 0);
  CHECK_EQ_INT(offsetof(DLDevice, device_id), 4);

  CHECK_EQ_INT(sizeof(DLDataType), 4);
  CHECK_EQ_INT(offsetof(DLDataType, code), 0);
  CHECK_EQ_INT(offsetof(DLDataType, bits), 1);
  CHECK_EQ_INT(offsetof(DLDataType, lanes), 2);

  CHECK_EQ_INT(sizeof(DLTensor), 48);
  CHECK_EQ_INT(offsetof(DLTensor, data), 0);
  CHECK_EQ_INT(offsetof(DLTensor, device), 8);
  CHECK_EQ_INT(offsetof(DLTensor, ndim), 16);
  CHECK_EQ_INT(offsetof(DLTensor, dtype), 20);
  CHECK_EQ_INT(offsetof(DLTensor, shape), 24);
  CHECK_EQ_INT(offsetof(DLTensor, strides), 32);
  CHECK_EQ_INT(offsetof(DLTensor, byte_offset), 40);

  CHECK_EQ_INT(sizeof(DLManagedTensor), 64);
  CHECK_EQ_INT(offsetof(DLManagedTensor, dl_tensor), 0);
  CHECK_EQ_INT(offsetof(DLManagedTensor, manager_ctx), 48);
  CHECK_EQ_INT(offsetof(DLManagedTensor, deleter), 56);

  CHECK_EQ_INT(sizeof(DLManagedTensorVersioned), 80);
  CHECK_EQ_INT(offsetof(DLManagedTensorVersioned, version), 0);
  CHECK_EQ_INT(offsetof(DLManagedTensorVersioned, manager_ctx), 8);
  CHECK_EQ_INT(offsetof(DLManagedTensorVersioned, deleter), 16);
  CHECK_EQ_INT(offsetof(DLManagedTensorVersioned, flags), 24);
  CHECK_EQ_INT(offsetof(DLManagedTensorVersioned, dl_tensor), 32);

  CHECK_EQ_INT(sizeof(DLPackExchangeAPIHeader), 16);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPIHeader, version), 0);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPIHeader, prev_api), 8);

  CHECK_EQ_INT(sizeof(DLPackExchangeAPI), 56);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, header), 0);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, managed_tensor_allocator), 16);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync), 24);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync), 32);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, dltensor_from_py_object_no_sync), 40);
  CHECK_EQ_INT(offsetof(DLPackExchangeAPI, current_work_stream), 48);
}

TEST(abi_published_layout) { check_published_layout(); }

static void check_published_enums(void) {
  CHECK_EQ_INT(TJ_DLPACK_MAJOR, 1);
  CHECK_EQ_INT(TJ_DLPACK_MINOR, 3);
  CHECK_EQ_INT(DLPACK_MAJOR_VERSION, TJ_DLPACK_MAJOR);
  CHECK(DLPACK_MINOR_VERSION >= TJ_DLPACK_MINOR);
  CHECK_EQ_INT(sizeof(DLDeviceType), 4);

  CHECK_EQ_INT(kDLCPU, 1);
  CHECK_EQ_INT(kDLCUDA, 2);
  CHECK_EQ_INT(kDLCUDAHost, 3);
  CHECK_EQ_INT(kDLOpenCL, 4);
  CHECK_EQ_INT(kDLVulkan, 7);
  CHECK_EQ_INT(kDLMetal, 8);
  CHECK_EQ_INT(kDLVPI, 9);
  CHECK_EQ_INT(kDLROCM, 10);
  CHECK_EQ_INT(kDLROCMHost, 11);
  CHECK_EQ_INT(kDLExtDev, 12);
  CHECK_EQ_INT(kDLCUDAManaged, 13);
  CHECK_EQ_INT(kDLOneAPI, 14);
  CHECK_EQ_INT(kDLWebGPU, 15);
  CHECK_EQ_INT(kDLHexagon, 16);
  CHECK_EQ_INT(kDLMAIA, 17);
  CHECK_EQ_INT(kDLTrn, 18);

  CHECK_EQ_INT(kDLInt, 0);
  CHECK_EQ_INT(kDLUInt, 1);
  CHECK_EQ_INT(kDLFloat, 2);
  CHECK_EQ_INT(kDLOpaqueHandle, 3);
  CHECK_EQ_INT(kDLBfloat, 4);
  CHECK_EQ_INT(kDLComplex, 5);
  CHECK_EQ_INT(kDLBool, 6);
  CHECK_EQ_INT(kDLFloat8_e3m4, 7);
  CHECK_EQ_INT(kDLFloat8_e4m3, 8);
  CHECK_EQ_INT(kDLFloat8_e4m3b11fnuz, 9);
  CHECK_EQ_INT(kDLFloat8_e4m3fn, 10);
  CHECK_EQ_INT(kDLFloat8_e4m3fnuz, 11);
  CHECK_EQ_INT(kDLFloat8_e5m2, 12);
  CHECK_EQ_INT(kDLFloat8_e5m2fnuz, 13);
  CHECK_EQ_INT(kDLFloat8_e8m0fnu, 14);
  CHECK_EQ_INT(kDLFloat6_e2m3fn, 15);
  CHECK_EQ_INT(kDLFloat6_e3m2fn, 16);
  CHECK_EQ_INT(kDLFloat4_e2m1fn, 17);

  CHECK_EQ_INT(DLPACK_FLAG_BITMASK_READ_ONLY, 1);
  CHECK_EQ_INT(DLPACK_FLAG_BITMASK_IS_COPIED, 2);
  CHECK_EQ_INT(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4);
}

TEST(abi_enum_values) { check_published_enums(); }

TEST(abi_reference) {
#ifdef TJ_HAVE_REFERENCE_DLPACK
  int count = 0;
  const tjt_abi_item *ref = tjt_reference_abi(&count);
  CHECK_EQ_INT(count, NOWN);
  int mismatches = 0;
  for (int i = 0; i < NOWN; ++i) {
    CHECK_EQ_STR(ref[i].what, own_items[i].what);
    if (ref[i].value != own_items[i].value) {
      printf("  %s: tilejit %lld, reference %lld\n", own_items[i].what,
             (long long)own_items[i].value, (long long)ref[i].value);
      ++mismatches;
    }
  }
  CHECK_EQ_INT(mismatches, 0);
  tjt_note("%d ABI facts match %s", NOWN, tjt_reference_abi_path());
#else
  tjt_note("torch's dlpack.h not found, checked the vendored header only");
  check_published_layout();
  check_published_enums();
  /* The table the reference would be compared with is still well formed. */
  CHECK_EQ_STR(own_items[0].what, "TJT_ABI_MAJOR");
  CHECK_EQ_INT(own_items[0].value, TJ_DLPACK_MAJOR);
  CHECK(NOWN > 100);
#endif
}

TEST(version) {
  /* One version: the number, the string and the header's parts agree. */
  char parts[32];
  snprintf(parts, sizeof(parts), "%d.%d.%d", TJ_VERSION_MAJOR, TJ_VERSION_MINOR, TJ_VERSION_PATCH);
  CHECK_EQ_STR(tj_version_string(), TJ_VERSION);
  CHECK_EQ_STR(parts, TJ_VERSION);
  CHECK_EQ_INT(tj_version(), TJ_VERSION_MAJOR * 10000 + TJ_VERSION_MINOR * 100 + TJ_VERSION_PATCH);
  CHECK(TJ_VERSION_MINOR < 100 && TJ_VERSION_PATCH < 100);
}

TEST(names_status) {
  CHECK_EQ_STR(tj_status_name(TJ_OK), "TJ_OK");
  CHECK_EQ_STR(tj_status_name(TJ_ETYPE), "TJ_ETYPE");
  CHECK_EQ_STR(tj_status_name(TJ_EVALUE), "TJ_EVALUE");
  CHECK_EQ_STR(tj_status_name(TJ_ERUNTIME), "TJ_ERUNTIME");
  CHECK_EQ_STR(tj_status_name(TJ_ENOMEM), "TJ_ENOMEM");
  CHECK_EQ_STR(tj_status_name(TJ_EPYERR), "TJ_EPYERR");
  CHECK_EQ_STR(tj_status_name(TJ_ECLAIMED), "TJ_ECLAIMED");
  CHECK_EQ_STR(tj_status_name(-99), "TJ_EUNKNOWN");
  CHECK_EQ_STR(tj_status_exception(TJ_OK), "");
  CHECK_EQ_STR(tj_status_exception(TJ_ETYPE), "TypeError");
  CHECK_EQ_STR(tj_status_exception(TJ_EVALUE), "ValueError");
  CHECK_EQ_STR(tj_status_exception(TJ_ERUNTIME), "RuntimeError");
  CHECK_EQ_STR(tj_status_exception(TJ_ENOMEM), "MemoryError");
  CHECK_EQ_STR(tj_status_exception(TJ_EPYERR), "");
  CHECK_EQ_STR(tj_status_exception(TJ_ECLAIMED), "");
  CHECK_EQ_STR(tj_status_exception(-99), "RuntimeError");

  /* tj_set_error returns its code and formats into the thread's message. */
  CHECK_STATUS(tj_set_error(TJ_EVALUE, "%s: %d", "k", 7), TJ_EVALUE);
  CHECK_EQ_STR(tj_last_error(), "k: 7");
}

/* tj__set_argument_error writes what tj_set_error's printf would, truncated
 * the same, and records the argument. */
TEST(error_argument_message_as_printf) {
  char *longest = calloc(3000, 1); /* past the message's 2048 bytes */
  CHECK(longest != NULL);
  memset(longest, 'k', 2999);
  static const int32_t numbers[] = {0, 7, 10, 123456, -1, INT32_MAX, INT32_MIN};
  static char expected[2048];
  for (size_t n = 0; n < sizeof(numbers) / sizeof(*numbers); ++n) {
    for (int big = 0; big < 2; ++big) {
      const char *kernel = big ? longest : "vec_add";
      snprintf(expected, sizeof(expected), "%s: argument %d '%s': %s", kernel, numbers[n], "B",
               "requires grad");
      CHECK_STATUS(tj__set_argument_error(TJ_ECLAIMED, kernel, numbers[n], "B", "requires grad"),
                   TJ_ECLAIMED);
      CHECK_EQ_STR(tj_last_error(), expected);
      CHECK_EQ_INT(tj_last_error_info()->argument, numbers[n]);
      CHECK_EQ_INT(tj_last_error_info()->output, -1);
      CHECK_EQ_INT(tj_last_error_info()->producer, TJ_PRODUCER_NONE);
    }
  }
  free(longest);
}

TEST(names_device) {
  static const struct {
    int32_t type;
    const char *name;
  } devices[] = {
      {kDLCPU, "cpu"},
      {kDLCUDA, "cuda"},
      {kDLCUDAHost, "cuda_host"},
      {kDLOpenCL, "opencl"},
      {kDLVulkan, "vulkan"},
      {kDLMetal, "metal"},
      {kDLVPI, "vpi"},
      {kDLROCM, "rocm"},
      {kDLROCMHost, "rocm_host"},
      {kDLExtDev, "ext_dev"},
      {kDLCUDAManaged, "cuda_managed"},
      {kDLOneAPI, "oneapi"},
      {kDLWebGPU, "webgpu"},
      {kDLHexagon, "hexagon"},
      {kDLMAIA, "maia"},
      {kDLTrn, "trn"},
  };
  for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); ++i)
    CHECK_EQ_STR(tj_device_name(devices[i].type), devices[i].name);
  CHECK_EQ_STR(tj_device_name(5), "device_type(5)");
  CHECK_EQ_STR(tj_device_name(99), "device_type(99)");
}

TEST(names_dtype) {
  static const struct {
    DLDataType dtype;
    const char *name;
  } dtypes[] = {
      {{kDLFloat, 32, 1}, "float32"},
      {{kDLFloat, 16, 1}, "float16"},
      {{kDLBfloat, 16, 1}, "bfloat16"},
      {{kDLInt, 8, 1}, "int8"},
      {{kDLUInt, 64, 1}, "uint64"},
      {{kDLComplex, 64, 1}, "complex64"},
      {{kDLBool, 8, 1}, "bool"},
      {{kDLFloat8_e4m3fn, 8, 1}, "float8_e4m3fn"},
      {{kDLFloat8_e5m2, 8, 1}, "float8_e5m2"},
      {{kDLFloat4_e2m1fn, 4, 1}, "float4_e2m1fn"},
      {{kDLOpaqueHandle, 64, 1}, "handle"},
      {{kDLInt, 8, 4}, "int8x4"},
      {{99, 8, 1}, "dtype(code=99, bits=8)"},
  };
  char buf[64];
  for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); ++i) {
    tj_dtype_format(dtypes[i].dtype, buf, (int32_t)sizeof(buf));
    CHECK_EQ_STR(buf, dtypes[i].name);
  }
  /* Truncates, always NUL-terminated. */
  char small[5];
  tj_dtype_format((DLDataType){kDLFloat, 32, 1}, small, (int32_t)sizeof(small));
  CHECK_EQ_STR(small, "floa");
}
