# Mirrors core/include/tilejit/core.h, producer.h and host.h (one block per header, the
# host table first). Keep them in step: a declaration added there is added here, in order.
from libc.stdint cimport int32_t, int64_t, intptr_t, uint32_t, uint64_t, uintptr_t

from dlpack cimport (DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned,
                     DLPackExchangeAPI, DLPackExchangeAPIHeader, DLTensor)


cdef extern from "<stdbool.h>":
    ctypedef bint c_bool "bool"  # what the C++ functions of tj_claim return


# The host table first: the producer and the call (core.h) point to it.
cdef extern from "tilejit/host.h" nogil:
    enum:
        TJ_HOST_NUM_STATUS

    ctypedef struct tj_host:
        int (*capsule_is_valid)(void *capsule, const char *name) noexcept
        void *(*capsule_pointer)(void *capsule, const char *name) noexcept
        int (*capsule_set_name)(void *capsule, const char *name) noexcept
        void *(*object_type)(void *object) noexcept
        void (*release)(void *object) noexcept
        intptr_t type_offset
        intptr_t (*sequence_size)(void *sequence) noexcept
        void *(*sequence_item)(void *sequence, intptr_t i) noexcept
        void *(*tuple_new)(intptr_t n) noexcept
        int (*tuple_set)(void *tuple, intptr_t i, void *item) noexcept
        void (*retain)(void *object) noexcept
        void *(*list_new)(intptr_t n) noexcept
        int (*list_set)(void *list, intptr_t i, void *item) noexcept
        long long (*int64_of)(void *object, int *overflow) noexcept
        unsigned long long (*uint64_of)(void *object) noexcept
        double (*double_of)(void *object) noexcept
        void *(*index_of)(void *object) noexcept
        int (*truth)(void *object) noexcept
        void *(*int_new)(long long value) noexcept
        void *(*string_new)(const char *text) noexcept
        int (*string_compare)(void *string, const char *ascii) noexcept
        void *(*attribute)(void *object, const char *name) noexcept
        void *(*call)(void *callable, void *args) noexcept
        void *(*error_pending)() noexcept
        void (*error_clear)() noexcept
        void (*error_fetch)(void **type, void **value, void **traceback) noexcept
        void (*error_normalize)(void **type, void **value, void **traceback) noexcept
        void (*error_set)(void *type, const char *message) noexcept
        void (*error_set_object)(void *type, void *value) noexcept
        void (*exception_set_cause)(void *exception, void *cause) noexcept
        void (*error_restore)(void *type, void *value, void *traceback) noexcept
        void *(*dict_item)(void *dict, void *key) noexcept
        void *(*unlock)() noexcept
        void (*lock)(void *token) noexcept
        void *(*interpreter)() noexcept
        void *(*thread_head)(void *interpreter) noexcept
        void *(*thread_next)(void *thread) noexcept
        void *none
        void *true_object
        void *int_type
        void *float_type
        void *bool_type
        void *exceptions[TJ_HOST_NUM_STATUS]
        void *describe
        void *dlpack_capsule
        void *allocate
        void *framework_stream
        void *stream_handle
        void *lazy_view
        void *producer_error
        void *claims


cdef extern from "tilejit/core.h" nogil:
    const char *TJ_VERSION
    int TJ_DLPACK_MAJOR
    int TJ_DLPACK_MINOR
    enum:
        TJ_MAX_PARAMS
        TJ_MAX_SYMBOLS
        TJ_MAX_NDIM
        TJ_MAX_OUTPUTS
        TJ_MAX_ABI_ARGS

    ctypedef enum tj_status:
        TJ_OK
        TJ_ETYPE
        TJ_EVALUE
        TJ_ERUNTIME
        TJ_ENOMEM

    const char *tj_last_error()
    int tj_set_error(int code, const char *fmt, ...)
    const char *tj_status_name(int code)
    const char *tj_status_exception(int code)

    ctypedef struct tj_error_info:
        int32_t code
        int32_t argument
        int32_t output
        int32_t producer

    const tj_error_info *tj_last_error_info()
    int tj_error_at(int code, int32_t argument, int32_t output, int32_t producer)

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
    uint32_t TJ_ARG_UNSIGNED

    ctypedef enum tj_owner_kind:
        TJ_OWNER_NONE
        TJ_OWNER_LEGACY
        TJ_OWNER_VERSIONED

    ctypedef union tj_arg_value:
        int64_t i
        double f
        void *p

    ctypedef struct tj_producer

    ctypedef struct tj_arg:
        int32_t kind
        uint32_t flags
        DLTensor tensor
        tj_arg_value value
        const char *type_name
        int32_t owner_kind
        void *owner
        const tj_producer *producer

    void tj_arg_init(tj_arg *arg)
    void tj_arg_from_legacy(tj_arg *arg, DLManagedTensor *managed)
    int tj_arg_from_versioned(tj_arg *arg, DLManagedTensorVersioned *managed, const char *what)
    void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags)
    void tj_arg_release(tj_arg *arg)

    ctypedef enum tj_param_kind:
        TJ_PARAM_BUFFER
        TJ_PARAM_SCALAR
        TJ_PARAM_POINTER

    uint32_t TJ_BUF_OPTIONAL
    uint32_t TJ_BUF_CONST
    uint32_t TJ_BUF_OUTPUT
    uint32_t TJ_BUF_WORKSPACE
    uint32_t TJ_BUF_ZERO

    ctypedef enum tj_abi_source:
        TJ_ABI_PARAM
        TJ_ABI_SYMBOL
        TJ_ABI_EXPR
        TJ_ABI_TENSORMAP

    ctypedef struct tj_abi_arg:
        int32_t source
        int32_t index
        DLDataType dtype

    ctypedef enum tj_target:
        TJ_TARGET_CPU
        TJ_TARGET_CUDA

    ctypedef struct tj_kernel:
        pass

    int tj_kernel_create(const char *name, int32_t nparams, int32_t target, tj_kernel **out)
    void tj_kernel_free(tj_kernel *kernel)
    int tj_kernel_add_symbol(tj_kernel *kernel, const char *name, int64_t divisibility)
    int tj_kernel_set_symbol_dtype(tj_kernel *kernel, int32_t symbol, DLDataType dtype)
    int tj_kernel_add_expr(tj_kernel *kernel, const int64_t *code, int32_t n, const char *text,
                           int32_t *out_id)
    int tj_kernel_set_buffer(tj_kernel *kernel, int32_t index, const char *name,
                             DLDataType dtype, int32_t ndim, const int32_t *shape_ids,
                             const int32_t *stride_ids, int64_t align, uint32_t flags)
    int tj_kernel_set_scalar(tj_kernel *kernel, int32_t index, const char *name,
                             DLDataType dtype)
    int tj_kernel_set_scalar_symbol(tj_kernel *kernel, int32_t index, int32_t symbol)
    int tj_kernel_set_pointer(tj_kernel *kernel, int32_t index, const char *name,
                              DLDataType dtype, int64_t align, uint32_t flags)
    int tj_kernel_set_abi(tj_kernel *kernel, int32_t n, const tj_abi_arg *args)
    int tj_kernel_finalize(tj_kernel *kernel)

    ctypedef union tj_value:
        void *p
        int64_t i
        double f
    ctypedef int32_t (*tj_cpu_entry)(const tj_value *args)

    int tj_kernel_load(tj_kernel *kernel, const char *path, const char *symbol)
    int tj_kernel_load_prebuilt(tj_kernel *kernel, const char *glue, const char *entry,
                                const char *library, const char *symbol)
    int tj_kernel_open(const char *dir, tj_kernel **out)
    int tj_kernel_set_image(tj_kernel *kernel, const void *image, int64_t size,
                            const char *symbol)
    int tj_kernel_set_launch(tj_kernel *kernel, const int32_t *grid_ids, const int32_t *block_ids,
                             int32_t shared_mem_id)
    int tj_kernel_add_launch(tj_kernel *kernel, const char *symbol, const int32_t *grid_ids,
                             const int32_t *block_ids, int32_t shared_mem_id, int32_t nargs,
                             const tj_abi_arg *args, int32_t *out_index)
    int tj_kernel_set_launch_attrs(tj_kernel *kernel, int32_t index, const int32_t *cluster_ids,
                                   uint32_t flags)

    ctypedef struct tj_tensormap:
        const char *name
        int32_t param
        int32_t data_type
        int32_t rank
        int32_t dims[5]
        int32_t strides[4]
        int32_t box[5]
        int32_t element_strides[5]
        int32_t interleave
        int32_t swizzle
        int32_t l2_promotion
        int32_t oob_fill
        int32_t im2col
        int32_t lower_corner[3]
        int32_t upper_corner[3]
        int32_t channels_per_pixel
        int32_t pixels_per_column

    int tj_kernel_add_tensormap(tj_kernel *kernel, const tj_tensormap *map, int32_t *out_id)
    int tj_kernel_set_entry(tj_kernel *kernel, tj_cpu_entry entry)

    const char *tj_kernel_name(const tj_kernel *kernel)
    int32_t tj_kernel_num_params(const tj_kernel *kernel)
    int32_t tj_kernel_num_symbols(const tj_kernel *kernel)
    int32_t tj_kernel_num_outputs(const tj_kernel *kernel)
    int32_t tj_kernel_num_workspaces(const tj_kernel *kernel)
    int32_t tj_kernel_output_param(const tj_kernel *kernel, int32_t i)
    int32_t tj_kernel_param_kind(const tj_kernel *kernel, int32_t index)
    const char *tj_kernel_param_name(const tj_kernel *kernel, int32_t index)

    ctypedef struct tj_frame:
        const tj_kernel *kernel
        tj_arg *params[TJ_MAX_PARAMS]
        int64_t symbols[TJ_MAX_SYMBOLS]
        DLDevice device
        int32_t has_device
        int32_t first_tensor
        int32_t out_ndim[TJ_MAX_OUTPUTS]
        int64_t out_shape[TJ_MAX_OUTPUTS][TJ_MAX_NDIM]
        DLDataType out_dtype[TJ_MAX_OUTPUTS]
        void *stream

    int tj_call_bind(const tj_kernel *kernel, tj_arg *args, int32_t nargs, tj_frame *frame)
    int tj_call_set_output(tj_frame *frame, int32_t i, tj_arg *arg)
    int tj_call_launch(tj_frame *frame)

    int tj_cuda_device_capability(int32_t device_id, int32_t *major, int32_t *minor)

    ctypedef struct tj_call:
        tj_arg *args
        int32_t nargs
        int32_t has_stream
        void *stream
        void **outputs

    int tj_call_run(const tj_kernel *kernel, tj_call *call)


cdef extern from "tilejit/producer.h" nogil:
    ctypedef enum tj_binding_status:
        TJ_EPYERR
        TJ_ECLAIMED

    ctypedef enum tj_producer_step:
        TJ_PRODUCER_NONE
        TJ_PRODUCER_IMPORT
        TJ_PRODUCER_ALLOCATE
        TJ_PRODUCER_STREAM
        TJ_PRODUCER_CONVERT

    enum:
        TJ_ARG_OBJECT

    uint32_t TJ_VIEW_CONJUGATE
    uint32_t TJ_VIEW_NEGATIVE

    ctypedef struct tj_view_bits:
        int64_t block_offset
        int64_t word_offset
        uint64_t conjugate
        uint64_t negative

    ctypedef enum tj_claim_kind:
        TJ_CLAIM_NONE
        TJ_CLAIM_VALIDATED
        TJ_CLAIM_NOW

    ctypedef struct tj_claim:
        int32_t always
        int32_t offset
        c_bool (*requires_grad)(const void *state) noexcept
        c_bool (*grad_enabled)() noexcept
        int (*ask)(const tj_claim *self, void *object, int32_t failed) noexcept
        int (*active)(const tj_claim *self) noexcept
        void *context
        int32_t meta_offset

    void tj_arg_object(tj_arg *arg, void *object, const tj_producer *producer) noexcept

    ctypedef struct tj_producer:
        int (*import_ "import")(const tj_producer *self, void *object, tj_arg *arg) noexcept
        int (*allocate)(const tj_producer *self, const DLTensor *prototype, tj_arg *out,
                        void **object) noexcept
        int (*current_stream)(const tj_producer *self, int32_t device_type, int32_t device_id,
                              void **stream) noexcept
        const DLPackExchangeAPI *api
        void *type
        void *context
        const tj_host *host
        int (*view)(const tj_producer *self, void *object, uint32_t *view) noexcept
        const tj_view_bits *view_bits
        const tj_claim *claim

    int tj_producer_check_view(const tj_producer *producer, void *object)

    int tj_producer_from_exchange(tj_producer *producer, const DLPackExchangeAPIHeader *header,
                                  void *type)
    int tj_arg_from_capsule(tj_arg *arg, void *capsule, const tj_host *host)

    ctypedef struct tj_call_binding:
        const tj_producer *fallback
        const tj_host *host
        int32_t unclaimed

    int tj_call_run_binding(const tj_kernel *kernel, tj_call *call,
                            const tj_call_binding *binding)


cdef extern from "tilejit/host.h":
    ctypedef enum tj_host_kind:
        TJ_HOST_TENSOR
        TJ_HOST_POINTER
        TJ_HOST_BOOL
        TJ_HOST_INDEX
        TJ_HOST_FLOAT
        TJ_HOST_OTHER

    ctypedef struct tj_host_type:
        int32_t kind
        const tj_producer *producer
        const char *name

    ctypedef struct tj_host_plan:
        const tj_kernel *kernel
        const tj_host *host
        int32_t exchange
        const int32_t *out_order
        const tj_producer *fallback
        void *name
        void *kernel_object
        void *keywords
        void *claimed
        int32_t unclaimed
        int32_t stream_is_input

    void tj_host_dlpack_producer(tj_producer *producer, const tj_host *host, void *type)
    void tj_host_ask_view(tj_producer *producer)

    ctypedef struct tj_host_claim_mode:
        const tj_host *host
        void *scope
        void *key
        void *idle
    int tj_host_claim_ask(const tj_claim *claim, void *object, int32_t failed)
    int tj_host_claim_active(const tj_claim *claim)

    # Called with the GIL held; NULL (an exception set) on failure.
    object tj_host_call(const tj_host_plan *plan, void **args, size_t nargsf, void *kwnames)
    const char *TJ_HOST_PLAN_CAPSULE
    void tj_host_method_install(const tj_host *host)
    void *tj_host_method(void *self, void **args, intptr_t nargs, void *kwnames)
    const tj_host_type *tj_host_type_of(const tj_host *host, void *type, int32_t exchange)
