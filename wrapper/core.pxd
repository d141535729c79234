# The declarations of core/include/tilejit/core.h, producer.h and host.h that the wrapper
# uses (one block per header), nothing more: a struct lists the fields the wrapper reads or
# writes, in the header's order; an enum the members it names. tests/test_abi_mirrors.py
# compiles every declaration here against the headers and fails on an unused one.
from libc.stdint cimport int32_t, uint32_t

from dlpack cimport DLDataType, DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor


cdef extern from "tilejit/core.h" nogil:
    const char *TJ_VERSION
    int TJ_DLPACK_MAJOR
    int TJ_DLPACK_MINOR
    enum:
        TJ_MAX_NDIM

    enum:
        TJ_OK
        TJ_ETYPE
        TJ_EVALUE
        TJ_ERUNTIME
        TJ_ENOMEM

    const char *tj_last_error()
    const char *tj_status_name(int code)
    const char *tj_status_exception(int code)

    void tj_dtype_format(DLDataType dtype, char *buf, int32_t size)

    uint32_t TJ_ARG_READ_ONLY

    ctypedef struct tj_producer

    ctypedef struct tj_arg:
        uint32_t flags
        DLTensor tensor
        const tj_producer *producer

    void tj_arg_init(tj_arg *arg)
    void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags)
    void tj_arg_release(tj_arg *arg)


cdef extern from "tilejit/producer.h" nogil:
    enum:
        TJ_EPYERR
        TJ_ECLAIMED

    enum:
        TJ_PRODUCER_IMPORT

    enum:
        TJ_HOST_NUM_STATUS  # host.h's, declared here for tj_host

    ctypedef struct tj_host:
        void *exceptions[TJ_HOST_NUM_STATUS]  # the exception class of each status

    ctypedef struct tj_producer:
        int (*import_ "import")(const tj_producer *self, void *object, tj_arg *arg) noexcept
        const DLPackExchangeAPI *api
        void *type
        void *context
        const tj_host *host

    int tj_producer_import_owned(const tj_producer *producer, void *object, tj_arg *arg)


cdef extern from "tilejit/host.h":
    enum:
        TJ_HOST_TENSOR

    ctypedef struct tj_host_type:
        int32_t kind
        const tj_producer *producer

    ctypedef struct tj_host_plan:
        pass

    # Called with the GIL held; NULL (an exception set) on failure.
    object tj_host_call(const tj_host_plan *plan, void *const *args, size_t nargsf,
                        void *kwnames)
    const tj_host_type *tj_host_type_of(const tj_host *host, void *type, int32_t exchange)
