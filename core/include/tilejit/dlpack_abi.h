/*
 * The DLPack 1.3 ABI, declared from the published layout: field order, enum
 * values, flag bits and the C exchange-API tables. tilejit owns this header so
 * that building the core needs no third-party include; core/tests/test_abi.c
 * compares sizeof/offsetof with an installed dlpack.h when one is present.
 *
 * Nothing here is tilejit policy: these are the producer's structures, and the
 * ownership rules below are DLPack's.
 */
#ifndef TILEJIT_DLPACK_ABI_H_
#define TILEJIT_DLPACK_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The newest DLPack version this consumer understands. A producer whose major
 * version differs must not be read past the version and flags fields. */
#define TJ_DLPACK_MAJOR 1
#define TJ_DLPACK_MINOR 3

/* Version of a DLManagedTensorVersioned or of an exchange-API table. */
typedef struct {
  uint32_t major; /* incompatible ABI changes bump this */
  uint32_t minor; /* compatible additions bump this */
} DLPackVersion;

/* Where the memory lives. Values are fixed by the DLPack specification;
 * gaps (5, 6) are historical and must never be reused. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3, /* pinned host memory, CPU-addressable */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11, /* pinned host memory, CPU-addressable */
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* ordinal within the device type */
} DLDevice;

/* Element type codes. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

/* An element type: code (a DLDataTypeCode), bits per lane, lanes (1 for
 * scalars). bool is {kDLBool, 8, 1}. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A strided view of memory. The producer owns data, shape and strides; they
 * stay valid as long as the owning managed tensor is not deleted.
 * - data + byte_offset is the address of the first element.
 * - strides are in elements, not bytes; NULL means compact row-major.
 * - shape and strides have ndim entries. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

/* Legacy (pre-1.0) owning wrapper, in capsules named "dltensor". The consumer
 * that took it calls deleter(self) exactly once when done (deleter may be NULL). */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* Flag bits of DLManagedTensorVersioned.flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* Versioned (>= 1.0) owning wrapper, in capsules named "dltensor_versioned".
 * version and manager_ctx/deleter come first so that a consumer can reject an
 * unknown major version and still delete the tensor. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- The C exchange API (a table a producer type publishes) ---------------- */

/* Allocates a new tensor like `prototype` (dtype, ndim, shape, device used).
 * Returns 0 and a new owning tensor in *out, or -1 after calling
 * SetError(error_ctx, kind, message) exactly once. */
typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                            void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind,
                                                             const char *message));

/* Exports a Python object (PyObject*) to a new owning tensor, with no stream
 * synchronisation. 0 on success; -1 with a Python exception set. */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                     DLManagedTensorVersioned **out);

/* Fills a caller-provided DLTensor, non-owning: the view is valid only until
 * control returns to the producer (i.e. while the object is kept alive and
 * untouched). 0 on success; -1 with a Python exception set. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);

/* Writes the producer's current work stream for a device (NULL for CPU).
 * 0 on success; -1 with a Python exception set. */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void **out_current_stream);

/* Wraps an owning tensor (ownership is stolen) into a new Python object
 * (PyObject*, a new reference). 0 on success; -1 with a Python exception set. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor,
                                                   void **out_py_object);

/* Stable across versions: check version.major first; walk prev_api for an
 * older table when the major version is not one the consumer supports. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

/* The table itself, alive for the whole process. Every member but
 * dltensor_from_py_object_no_sync is non-NULL. */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_DLPACK_ABI_H_ */
