# The declarations of core/include/dlpack/dlpack.h (DLPack's own header, 1.3, as tilejit
# vendors it) that the wrapper uses, nothing more (tests/test_abi_mirrors.py compiles them
# against the header).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "dlpack/dlpack.h" nogil:
    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor

    ctypedef enum DLDeviceType:
        kDLCPU

    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id

    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor:
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(DLManagedTensor *self)

    uint64_t DLPACK_FLAG_BITMASK_READ_ONLY

    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void *manager_ctx
        void (*deleter)(DLManagedTensorVersioned *self)
        uint64_t flags
        DLTensor dl_tensor

    ctypedef int (*DLPackManagedTensorAllocator)(
        DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
        void (*SetError)(void *error_ctx, const char *kind, const char *message) noexcept)
    ctypedef int (*DLPackManagedTensorFromPyObjectNoSync)(
        void *py_object, DLManagedTensorVersioned **out)
    ctypedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out)
    ctypedef int (*DLPackCurrentWorkStream)(
        DLDeviceType device_type, int32_t device_id, void **out_current_stream)
    ctypedef int (*DLPackManagedTensorToPyObjectNoSync)(
        DLManagedTensorVersioned *tensor, void **out_py_object)

    ctypedef struct DLPackExchangeAPIHeader:
        DLPackVersion version
        DLPackExchangeAPIHeader *prev_api

    ctypedef struct DLPackExchangeAPI:
        DLPackExchangeAPIHeader header
        DLPackManagedTensorAllocator managed_tensor_allocator
        DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync
        DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync
        DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync
        DLPackCurrentWorkStream current_work_stream
