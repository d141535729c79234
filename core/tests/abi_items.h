/*
 * The DLPack ABI facts the tests compare: one list, expanded twice, once in
 * test_abi.c against the vendored dlpack/dlpack.h and once in
 * test_abi_reference.c against an installed dlpack.h (torch's). The two
 * headers declare the same names under the same include guard, so they can
 * never share a translation unit; each side exports its numbers in
 * list order and test_abi.c compares them by position.
 *
 * Include this after the DLPack header of the translation unit, which must
 * also define TJT_ABI_MAJOR to its DLPack major version.
 */
#ifndef TILEJIT_TESTS_ABI_ITEMS_H_
#define TILEJIT_TESTS_ABI_ITEMS_H_

#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *what; /* the expression, as text */
  int64_t value;
} tjt_abi_item;

#define TJT_FIELD_SIZE(type, field) sizeof(((type *)0)->field)

/* offsetof and size of a struct member. */
#define TJT_ABI_FIELD(X, type, field) X(offsetof(type, field)) X(TJT_FIELD_SIZE(type, field))

#define TJT_ABI_ITEMS(X)                                                     \
  X(TJT_ABI_MAJOR)                                                           \
  X(sizeof(DLPackVersion))                                                   \
  TJT_ABI_FIELD(X, DLPackVersion, major)                                     \
  TJT_ABI_FIELD(X, DLPackVersion, minor)                                     \
  X(sizeof(DLDeviceType))                                                    \
  X(sizeof(DLDevice))                                                        \
  TJT_ABI_FIELD(X, DLDevice, device_type)                                    \
  TJT_ABI_FIELD(X, DLDevice, device_id)                                      \
  X(sizeof(DLDataType))                                                      \
  TJT_ABI_FIELD(X, DLDataType, code)                                         \
  TJT_ABI_FIELD(X, DLDataType, bits)                                         \
  TJT_ABI_FIELD(X, DLDataType, lanes)                                        \
  X(sizeof(DLTensor))                                                        \
  TJT_ABI_FIELD(X, DLTensor, data)                                           \
  TJT_ABI_FIELD(X, DLTensor, device)                                         \
  TJT_ABI_FIELD(X, DLTensor, ndim)                                           \
  TJT_ABI_FIELD(X, DLTensor, dtype)                                          \
  TJT_ABI_FIELD(X, DLTensor, shape)                                          \
  TJT_ABI_FIELD(X, DLTensor, strides)                                        \
  TJT_ABI_FIELD(X, DLTensor, byte_offset)                                    \
  X(sizeof(DLManagedTensor))                                                 \
  TJT_ABI_FIELD(X, DLManagedTensor, dl_tensor)                               \
  TJT_ABI_FIELD(X, DLManagedTensor, manager_ctx)                             \
  TJT_ABI_FIELD(X, DLManagedTensor, deleter)                                 \
  X(sizeof(DLManagedTensorVersioned))                                        \
  TJT_ABI_FIELD(X, DLManagedTensorVersioned, version)                        \
  TJT_ABI_FIELD(X, DLManagedTensorVersioned, manager_ctx)                    \
  TJT_ABI_FIELD(X, DLManagedTensorVersioned, deleter)                        \
  TJT_ABI_FIELD(X, DLManagedTensorVersioned, flags)                          \
  TJT_ABI_FIELD(X, DLManagedTensorVersioned, dl_tensor)                      \
  X(sizeof(DLPackExchangeAPIHeader))                                         \
  TJT_ABI_FIELD(X, DLPackExchangeAPIHeader, version)                         \
  TJT_ABI_FIELD(X, DLPackExchangeAPIHeader, prev_api)                        \
  X(sizeof(DLPackExchangeAPI))                                               \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, header)                                \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, managed_tensor_allocator)              \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, managed_tensor_to_py_object_no_sync)   \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, dltensor_from_py_object_no_sync)       \
  TJT_ABI_FIELD(X, DLPackExchangeAPI, current_work_stream)                   \
  X(kDLCPU)                                                                  \
  X(kDLCUDA)                                                                 \
  X(kDLCUDAHost)                                                             \
  X(kDLOpenCL)                                                               \
  X(kDLVulkan)                                                               \
  X(kDLMetal)                                                                \
  X(kDLVPI)                                                                  \
  X(kDLROCM)                                                                 \
  X(kDLROCMHost)                                                             \
  X(kDLExtDev)                                                               \
  X(kDLCUDAManaged)                                                          \
  X(kDLOneAPI)                                                               \
  X(kDLWebGPU)                                                               \
  X(kDLHexagon)                                                              \
  X(kDLMAIA)                                                                 \
  X(kDLTrn)                                                                  \
  X(kDLInt)                                                                  \
  X(kDLUInt)                                                                 \
  X(kDLFloat)                                                                \
  X(kDLOpaqueHandle)                                                         \
  X(kDLBfloat)                                                               \
  X(kDLComplex)                                                              \
  X(kDLBool)                                                                 \
  X(kDLFloat8_e3m4)                                                          \
  X(kDLFloat8_e4m3)                                                          \
  X(kDLFloat8_e4m3b11fnuz)                                                   \
  X(kDLFloat8_e4m3fn)                                                        \
  X(kDLFloat8_e4m3fnuz)                                                      \
  X(kDLFloat8_e5m2)                                                          \
  X(kDLFloat8_e5m2fnuz)                                                      \
  X(kDLFloat8_e8m0fnu)                                                       \
  X(kDLFloat6_e2m3fn)                                                        \
  X(kDLFloat6_e3m2fn)                                                        \
  X(kDLFloat4_e2m1fn)                                                        \
  X(DLPACK_FLAG_BITMASK_READ_ONLY)                                           \
  X(DLPACK_FLAG_BITMASK_IS_COPIED)                                           \
  X(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)

#define TJT_ABI_ITEM(expr) {#expr, (int64_t)(expr)},

/* Defined by test_abi_reference.c when a reference header was found: the
 * list's numbers under that header, and its path. */
const tjt_abi_item *tjt_reference_abi(int *count);
const char *tjt_reference_abi_path(void);

#endif /* TILEJIT_TESTS_ABI_ITEMS_H_ */
