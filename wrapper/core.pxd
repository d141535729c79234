# Mirrors core/include/tilejit/tilejit.h. Keep the two in step: a declaration
# added there is added here, in the same order.
from libc.stdint cimport int32_t, int64_t, uint32_t

from dlpack_abi cimport (DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned,
                         DLPackDLTensorFromPyObjectNoSync, DLPackExchangeAPI, DLTensor)


cdef extern from "tilejit/tilejit.h" nogil:
    const char *TJ_VERSION
    int TJ_MAX_PARAMS
    int TJ_MAX_SYMBOLS
    int TJ_MAX_NDIM
    int TJ_MAX_OUTPUTS

    ctypedef enum tj_status:
        TJ_OK
        TJ_ETYPE
        TJ_EVALUE
        TJ_ERUNTIME
        TJ_ENOMEM
        TJ_EPYERR

    const char *tj_last_error()
    int tj_set_error(int code, const char *fmt, ...)
    const char *tj_status_name(int code)
    const char *tj_status_exception(int code)

    ctypedef enum tj_op:
        TJ_OP_CONST
        TJ_OP_SYM
        TJ_OP_ADD
        TJ_OP_SUB
        TJ_OP_MUL
        TJ_OP_FLOORDIV
        TJ_OP_MOD
        TJ_OP_CEILDIV
        TJ_OP_NEG
        TJ_OP_MIN
        TJ_OP_MAX

    int tj_expr_eval(const int64_t *code, int32_t n, const int64_t *symbols, int64_t *out)

    const char *tj_device_name(int32_t device_type)
    void tj_dtype_format(DLDataType dtype, char *buf, int32_t size)

    ctypedef enum tj_arg_kind:
        TJ_ARG_NONE
        TJ_ARG_TENSOR
        TJ_ARG_INT
        TJ_ARG_BOOL
        TJ_ARG_FLOAT
        TJ_ARG_ADDRESS
        TJ_ARG_OTHER

    uint32_t TJ_ARG_READ_ONLY
    uint32_t TJ_ARG_OUT_OF_RANGE

    ctypedef enum tj_owner_kind:
        TJ_OWNER_NONE
        TJ_OWNER_LEGACY
        TJ_OWNER_VERSIONED

    ctypedef union tj_arg_value:
        int64_t i
        double f
        void *p

    ctypedef struct tj_arg:
        int32_t kind
        uint32_t flags
        DLTensor tensor
        tj_arg_value value
        const char *type_name
        int32_t owner_kind
        void *owner

    void tj_arg_init(tj_arg *arg)
    void tj_arg_from_legacy(tj_arg *arg, DLManagedTensor *managed)
    int tj_arg_from_versioned(tj_arg *arg, DLManagedTensorVersioned *managed, const char *what)
    void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags)
    void tj_arg_release(tj_arg *arg)
    int tj_args_from_exchange(DLPackDLTensorFromPyObjectNoSync fill, void *const *objects,
                              tj_arg *args, int32_t n, int32_t *failed)

    ctypedef enum tj_param_kind:
        TJ_PARAM_BUFFER
        TJ_PARAM_SCALAR
        TJ_PARAM_POINTER

    uint32_t TJ_BUF_OPTIONAL
    uint32_t TJ_BUF_CONST
    uint32_t TJ_BUF_OUTPUT

    ctypedef enum tj_target:
        TJ_TARGET_CPU
        TJ_TARGET_CUDA

    ctypedef struct tj_kernel:
        pass

    int tj_kernel_create(const char *name, int32_t nparams, int32_t target, tj_kernel **out)
    void tj_kernel_free(tj_kernel *kernel)
    int tj_kernel_add_symbol(tj_kernel *kernel, const char *name, int64_t divisibility)
    int tj_kernel_add_expr(tj_kernel *kernel, const int64_t *code, int32_t n, const char *text,
                           int32_t *out_id)
    int tj_kernel_set_buffer(tj_kernel *kernel, int32_t index, const char *name,
                             DLDataType dtype, int32_t ndim, const int32_t *shape_ids,
                             const int32_t *stride_ids, int64_t align, uint32_t flags)
    int tj_kernel_set_scalar(tj_kernel *kernel, int32_t index, const char *name,
                             DLDataType dtype)
    int tj_kernel_set_pointer(tj_kernel *kernel, int32_t index, const char *name,
                              DLDataType dtype, int64_t align, uint32_t flags)
    int tj_kernel_finalize(tj_kernel *kernel)

    ctypedef union tj_value:
        void *p
        int64_t i
        double f
    ctypedef void (*tj_cpu_entry)(const tj_value *args)

    int tj_kernel_load(tj_kernel *kernel, const char *path, const char *symbol)
    int tj_kernel_set_image(tj_kernel *kernel, const void *image, int64_t size,
                            const char *symbol)
    int tj_kernel_set_launch(tj_kernel *kernel, const int32_t *grid_ids, const int32_t *block_ids,
                             int32_t shared_mem_id)
    int tj_kernel_set_entry(tj_kernel *kernel, tj_cpu_entry entry)

    const char *tj_kernel_name(const tj_kernel *kernel)
    int32_t tj_kernel_num_params(const tj_kernel *kernel)
    int32_t tj_kernel_num_symbols(const tj_kernel *kernel)
    int32_t tj_kernel_num_outputs(const tj_kernel *kernel)
    int32_t tj_kernel_output_param(const tj_kernel *kernel, int32_t i)
    int32_t tj_kernel_param_kind(const tj_kernel *kernel, int32_t index)
    const char *tj_kernel_param_name(const tj_kernel *kernel, int32_t index)

    # Sized by TJ_MAX_* in C; Cython only needs the names.
    ctypedef struct tj_frame:
        const tj_kernel *kernel
        tj_arg *params[64]
        int64_t symbols[64]
        DLDevice device
        int32_t has_device
        int32_t first_tensor
        int32_t out_ndim[16]
        int64_t out_shape[16][16]
        DLDataType out_dtype[16]
        void *stream

    int tj_call_bind(const tj_kernel *kernel, tj_arg *args, int32_t nargs, tj_frame *frame)
    int tj_call_set_output(tj_frame *frame, int32_t i, tj_arg *arg)
    int tj_call_launch(tj_frame *frame)
    int tj_call_allocate_output(tj_frame *frame, int32_t i, const DLPackExchangeAPI *api,
                                tj_arg *out, void **object)

    int tj_cuda_device_capability(int32_t device_id, int32_t *major, int32_t *minor)
