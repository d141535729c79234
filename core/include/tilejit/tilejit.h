/*
 * tilejit core: kernel signatures, tensor import, validation and symbol
 * binding, expression evaluation, and launch. Pure C, no Python.
 *
 * Conventions (see also STYLE.md):
 * - Every fallible function returns a tj_status: TJ_OK (0) or a negative code.
 *   On failure the message is in thread-local storage, read with
 *   tj_last_error(); the binding maps codes to exception classes in one place.
 * - Public names are tj_ / TJ_, internal non-static names tj__.
 * - "borrows" means the callee keeps no reference past the call unless said;
 *   "takes ownership" means the callee frees or releases it.
 *
 * The per-call flow, each step in one place:
 *   wrapper fills tj_arg[] from Python objects (tj_arg_from_* for tensors)
 *   -> tj_call_bind()      validates every input, binds symbols, evaluates
 *                          output shapes
 *   -> wrapper allocates outputs of those shapes, imports them into the frame
 *   -> tj_call_check_outputs() validates them like inputs
 *   -> tj_call_launch()    packs arguments and runs the kernel (no Python;
 *                          the binding releases the GIL around it)
 *   -> tj_arg_release()    on every imported tensor, success or not.
 */
#ifndef TILEJIT_TILEJIT_H_
#define TILEJIT_TILEJIT_H_

#include <stdint.h>

#include "tilejit/dlpack_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TJ_VERSION "0.1.0"

/* Hard limits, sized so a call frame lives on the stack. */
#define TJ_MAX_PARAMS 64
#define TJ_MAX_SYMBOLS 64
#define TJ_MAX_NDIM 16
#define TJ_MAX_OUTPUTS 16

/* ---- Status codes --------------------------------------------------------- */

/* X(name, value, python exception class) */
#define TJ_STATUS_MAP(X)                                          \
  X(TJ_OK, 0, "")                                                 \
  X(TJ_ETYPE, -1, "TypeError")       /* wrong kind of argument */ \
  X(TJ_EVALUE, -2, "ValueError")     /* right kind, bad value */  \
  X(TJ_ERUNTIME, -3, "RuntimeError") /* loader, driver, launch */ \
  X(TJ_ENOMEM, -4, "MemoryError")                                 \
  X(TJ_EPYERR, -5, "") /* a Python exception is already set */

typedef enum {
#define TJ__STATUS_ENUM(name, value, exc) name = value,
  TJ_STATUS_MAP(TJ__STATUS_ENUM)
#undef TJ__STATUS_ENUM
} tj_status;

/* The message of the last failure on this thread; never NULL ("" if none).
 * Borrowed: valid until the next failing tj_ call on this thread. */
const char *tj_last_error(void);

/* Sets the thread's error message (printf-style) and returns `code`. Used by
 * the core and by bindings that report through the same channel. */
int tj_set_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Name of a status code ("TJ_EVALUE"), and the Python exception class name it
 * maps to ("ValueError"; "" for TJ_OK and TJ_EPYERR). Static strings. */
const char *tj_status_name(int code);
const char *tj_status_exception(int code);

/* ---- Expressions ---------------------------------------------------------- */

/* Expressions over symbols are RPN programs of (op, operand) int64 pairs.
 * Division and modulo follow Python (floor) semantics; ceildiv(a, b) is
 * -((-a) // b). Division by zero is a TJ_EVALUE. */
typedef enum {
  TJ_OP_CONST = 1, /* push operand */
  TJ_OP_SYM = 2,   /* push value of symbol #operand */
  TJ_OP_ADD = 3,
  TJ_OP_SUB = 4,
  TJ_OP_MUL = 5,
  TJ_OP_FLOORDIV = 6,
  TJ_OP_MOD = 7,
  TJ_OP_CEILDIV = 8,
  TJ_OP_NEG = 9,
  TJ_OP_MIN = 10,
  TJ_OP_MAX = 11,
} tj_op;

#define TJ_MAX_EXPR_STACK 32

/* Evaluates `n` (op, operand) pairs (so `code` has 2*n int64) over `symbols`.
 * Writes the result to *out. Borrows everything. */
int tj_expr_eval(const int64_t *code, int32_t n, const int64_t *symbols, int64_t *out);

/* ---- DLPack names --------------------------------------------------------- */

/* "cpu", "cuda", "oneapi", ...; "device_type(99)" style for unknown codes
 * (written to a static per-thread buffer). */
const char *tj_device_name(int32_t device_type);

/* Writes a dtype name ("float32", "bfloat16", "float8_e4m3fn", "bool",
 * "int8x4" for lanes > 1) into buf (NUL-terminated, truncated). */
void tj_dtype_format(DLDataType dtype, char *buf, int32_t size);

/* ---- Call arguments ------------------------------------------------------- */

typedef enum {
  TJ_ARG_NONE = 0,    /* Python None */
  TJ_ARG_TENSOR = 1,  /* tensor, imported: `tensor` is valid */
  TJ_ARG_INT = 2,     /* integer in value.i (Python int, bool excluded) */
  TJ_ARG_BOOL = 3,    /* bool in value.i (0 or 1) */
  TJ_ARG_FLOAT = 4,   /* float in value.f */
  TJ_ARG_ADDRESS = 5, /* raw address in value.p (pointer params only); when
                       * tensor.dtype.bits != 0, tensor.dtype and
                       * tensor.device.device_type say what it points to */
  TJ_ARG_OTHER = 6,   /* anything else; type_name says what, for messages */
} tj_arg_kind;

/* tj_arg.flags */
#define TJ_ARG_READ_ONLY 1u    /* producer marked the tensor read-only */
#define TJ_ARG_OUT_OF_RANGE 2u /* kind INT: the Python int did not fit int64 */

typedef enum {
  TJ_OWNER_NONE = 0,      /* borrowed view (exchange API, or a caller's struct) */
  TJ_OWNER_LEGACY = 1,    /* DLManagedTensor*, deleter owed */
  TJ_OWNER_VERSIONED = 2, /* DLManagedTensorVersioned*, deleter owed */
} tj_owner_kind;

/* One call argument. Caller-owned (usually on the stack); initialise with
 * tj_arg_init, fill with tj_arg_from_* or by setting kind/value, and always
 * finish with tj_arg_release. */
typedef struct tj_arg {
  int32_t kind;    /* tj_arg_kind */
  uint32_t flags;  /* TJ_ARG_* */
  DLTensor tensor; /* kind == TENSOR: borrows shape/strides from the owner */
  union {
    int64_t i;
    double f;
    void *p;
  } value;
  const char *type_name; /* kind == OTHER/any: borrowed, for messages; may be NULL */
  int32_t owner_kind;    /* tj_owner_kind */
  void *owner;           /* the managed tensor whose deleter is owed */
} tj_arg;

/* Sets `arg` to an empty NONE argument. */
void tj_arg_init(tj_arg *arg);

/* Imports a legacy managed tensor: takes ownership of `managed` (its deleter
 * is called exactly once, by tj_arg_release). Never fails. */
void tj_arg_from_legacy(tj_arg *arg, DLManagedTensor *managed);

/* Imports a versioned managed tensor: takes ownership of `managed` in every
 * case. A major version other than TJ_DLPACK_MAJOR deletes it at once and
 * returns TJ_EVALUE (`what` names the argument in the message; may be NULL).
 * Reads the READ_ONLY flag into arg->flags. */
int tj_arg_from_versioned(tj_arg *arg, DLManagedTensorVersioned *managed, const char *what);

/* Uses a DLTensor the caller keeps alive for the whole call (copied by value;
 * shape/strides borrowed). */
void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags);

/* Calls the owed deleter, if any, exactly once; afterwards `arg` is NONE. Safe
 * to call repeatedly. */
void tj_arg_release(tj_arg *arg);

/* Imports many arguments at once through a producer's DLPack exchange API view
 * function: for every i with objects[i] != NULL, fill(objects[i], &args[i].tensor)
 * and args[i] becomes a TENSOR borrowing from that object (nothing to release);
 * other args are left as they are. The objects are opaque handles (PyObject* for
 * Python producers): the caller holds what the producer needs while this runs (the
 * GIL) and keeps the objects alive for the call. Returns TJ_OK, or TJ_EPYERR when
 * the producer failed (its error is set on its side) with the index in *failed.
 * One call for all arguments is what lets a ctypes binding afford the fast path. */
int tj_args_from_exchange(DLPackDLTensorFromPyObjectNoSync fill, void *const *objects, tj_arg *args,
                          int32_t n, int32_t *failed);

/* ---- Kernel signatures ---------------------------------------------------- */

/* Parameter kinds. */
typedef enum {
  TJ_PARAM_BUFFER = 1,
  TJ_PARAM_SCALAR = 2,
  TJ_PARAM_POINTER = 3,
} tj_param_kind;

/* Buffer flags. */
#define TJ_BUF_OPTIONAL 1u /* accepts None (NULL pointer) */
#define TJ_BUF_CONST 2u    /* kernel only reads it: read-only tensors accepted */
#define TJ_BUF_OUTPUT 4u   /* allocated by tilejit (out_idx), not passed */

/* Targets. */
typedef enum {
  TJ_TARGET_CPU = 1,
  TJ_TARGET_CUDA = 2,
} tj_target;

/* A kernel: its signature, and once loaded, its entry point. Opaque. Build it
 * with tj_kernel_create, tj_kernel_add_symbol / tj_kernel_add_expr /
 * tj_kernel_set_*, then tj_kernel_finalize; release with tj_kernel_free.
 * After finalize it is immutable and safe to call from many threads. */
typedef struct tj_kernel tj_kernel;

/* Creates an empty kernel named `name` (copied) with `nparams` parameters for
 * `target`. Returns a new kernel in *out; release with tj_kernel_free. */
int tj_kernel_create(const char *name, int32_t nparams, int32_t target, tj_kernel **out);

/* Frees the kernel, closing its library if tj_kernel_load opened one.
 * NULL is allowed. */
void tj_kernel_free(tj_kernel *kernel);

/* Declares the next symbol (ids are 0, 1, ... in call order; this order is the
 * ABI order of the trailing int64 arguments). `name` is copied;
 * divisibility >= 1. */
int tj_kernel_add_symbol(tj_kernel *kernel, const char *name, int64_t divisibility);

/* Registers an expression: `n` (op, operand) pairs and its source text for
 * messages ("n + 1"); both copied. Writes its id to *out_id. A program that is
 * a single TJ_OP_SYM is a direct occurrence: it binds the symbol. */
int tj_kernel_add_expr(tj_kernel *kernel, const int64_t *code, int32_t n, const char *text,
                       int32_t *out_id);

/* Declares parameter `index` as a buffer. shape_ids/stride_ids are expression
 * ids (ndim each); stride_ids == NULL declares compact row-major. align is the
 * required byte alignment of data + byte_offset (0: element size). flags is
 * TJ_BUF_*. Arrays and name are copied. */
int tj_kernel_set_buffer(tj_kernel *kernel, int32_t index, const char *name, DLDataType dtype,
                         int32_t ndim, const int32_t *shape_ids, const int32_t *stride_ids,
                         int64_t align, uint32_t flags);

/* Declares parameter `index` as a scalar of `dtype` (int, uint, float, bool). */
int tj_kernel_set_scalar(tj_kernel *kernel, int32_t index, const char *name, DLDataType dtype);

/* Declares parameter `index` as a raw pointer (tensor, address or None). */
int tj_kernel_set_pointer(tj_kernel *kernel, int32_t index, const char *name, DLDataType dtype,
                          int64_t align, uint32_t flags);

/* Checks the signature is complete and consistent (every parameter set,
 * every symbol bound by a direct occurrence in an input buffer) and plans
 * binding. After this the kernel is immutable. */
int tj_kernel_finalize(tj_kernel *kernel);

/* Entry point of a loaded CPU kernel: the packed-argument function tilejit
 * generates next to the user's source. args holds nparams values then
 * nsymbols int64 values. */
typedef union tj_value {
  void *p;
  int64_t i;
  double f;
} tj_value;
typedef void (*tj_cpu_entry)(const tj_value *args);

/* CPU kernel: opens the shared library at `path` (dlopen, RTLD_LOCAL) and
 * resolves `symbol` as the packed entry; the kernel keeps the library open
 * until tj_kernel_free.
 * CUDA kernel: reads the module image at `path` (cubin, fatbin or PTX) into
 * memory and takes `symbol` as the name of its extern "C" __global__
 * function, as tj_kernel_set_image does. */
int tj_kernel_load(tj_kernel *kernel, const char *path, const char *symbol);

/* CUDA kernel: uses the module image of `size` bytes at `image` (copied) with
 * `symbol` (copied) as its function. The driver loads it lazily, once per
 * CUDA context, at the first launch in that context; a bad image or a missing
 * function is reported by that launch. */
int tj_kernel_set_image(tj_kernel *kernel, const void *image, int64_t size, const char *symbol);

/* CUDA kernel, before tj_kernel_finalize: how it is launched. grid_ids[3] and
 * block_ids[3] are the dimensions and shared_mem_id the dynamic shared memory
 * in bytes, each an expression id (tj_kernel_add_expr; use the constant 1 for
 * unused dimensions), evaluated over the bound symbols at every launch. An
 * empty grid (a dimension of 0) launches nothing. Arrays are copied. */
int tj_kernel_set_launch(tj_kernel *kernel, const int32_t grid_ids[3], const int32_t block_ids[3],
                         int32_t shared_mem_id);

/* Uses an entry point the caller provides (tests, embedders). Borrowed: it
 * must outlive the kernel. */
int tj_kernel_set_entry(tj_kernel *kernel, tj_cpu_entry entry);

/* Introspection. Borrowed pointers, valid while the kernel lives. */
const char *tj_kernel_name(const tj_kernel *kernel);
int32_t tj_kernel_num_params(const tj_kernel *kernel);
int32_t tj_kernel_num_symbols(const tj_kernel *kernel);
int32_t tj_kernel_num_outputs(const tj_kernel *kernel);
/* Parameter index of the i-th output (declaration order). */
int32_t tj_kernel_output_param(const tj_kernel *kernel, int32_t i);
int32_t tj_kernel_param_kind(const tj_kernel *kernel, int32_t index);
const char *tj_kernel_param_name(const tj_kernel *kernel, int32_t index);

/* ---- Calls ---------------------------------------------------------------- */

/* Per-call state; caller-owned, typically on the stack. Everything in it is
 * borrowed from the kernel and the args; nothing to release. */
typedef struct tj_frame {
  const tj_kernel *kernel;
  tj_arg *params[TJ_MAX_PARAMS]; /* per parameter; outputs NULL until set */
  int64_t symbols[TJ_MAX_SYMBOLS];
  DLDevice device;      /* of the first tensor; CPU if there is none */
  int32_t has_device;   /* 1 once a tensor set `device` */
  int32_t first_tensor; /* index into the caller's args of the first tensor, -1 if none */
  /* Output shapes, computed by tj_call_bind, in output order. */
  int32_t out_ndim[TJ_MAX_OUTPUTS];
  int64_t out_shape[TJ_MAX_OUTPUTS][TJ_MAX_NDIM];
  DLDataType out_dtype[TJ_MAX_OUTPUTS];
  /* The stream to launch on (CUstream for CUDA). tj_call_bind sets it to NULL;
   * the binding then sets it: an explicit stream first, else the producer's
   * current work stream. A CPU kernel given a non-NULL stream is an error. */
  void *stream;
} tj_frame;

/* Validates the `nargs` caller arguments (parameters minus outputs, in
 * declaration order) against the kernel, binds every symbol and computes
 * the output shapes into frame. Borrows args: they must outlive the frame.
 * On error nothing needs undoing beyond tj_arg_release of the args. */
int tj_call_bind(const tj_kernel *kernel, tj_arg *args, int32_t nargs, tj_frame *frame);

/* Sets output `i` (output order) to an imported tensor and validates it like
 * an input (dtype, shape, strides, alignment, device). Borrows `arg`. */
int tj_call_set_output(tj_frame *frame, int32_t i, tj_arg *arg);

/* Packs the arguments and runs the kernel: a CPU kernel synchronously on the
 * calling thread; a CUDA kernel is enqueued on frame->stream with
 * cuLaunchKernel (asynchronous), in the calling thread's current context
 * when it is on the tensors' device, else in that device's primary context.
 * Touches no Python state: bindings release the GIL around it. Every output
 * must be set. */
int tj_call_launch(tj_frame *frame);

/* ---- CUDA driver ---------------------------------------------------------- */

/* The driver (libcuda) is opened at the first CUDA call, never before:
 * $TILEJIT_LIBCUDA if set, else libcuda.so.1. Without one, CUDA calls fail
 * with TJ_ERUNTIME saying so, and the next call tries again; CPU kernels
 * never need it. Driver failures are TJ_ERUNTIME carrying the driver's error
 * name and text. */

/* Writes the compute capability of CUDA device `device_id` (a device
 * ordinal; -1: the device of the calling thread's current context, else 0).
 * Loads the driver if needed. */
int tj_cuda_device_capability(int32_t device_id, int32_t *major, int32_t *minor);

/* Allocates output `i` of a bound frame with a producer's exchange-API allocator
 * and hands it over as one of the producer's objects: *object receives a new
 * reference (owned by the caller even when a later step fails; NULL if none was
 * made), `out` a view of it, valid while that object lives, validated like an input
 * (tj_call_set_output). The caller holds what the producer needs (the GIL).
 * Returns TJ_ERUNTIME when the allocator refuses (its message in tj_last_error),
 * TJ_EPYERR when turning the tensor into an object failed (the producer's error is
 * set on its side), or the validation's code. */
int tj_call_allocate_output(tj_frame *frame, int32_t i, const DLPackExchangeAPI *api, tj_arg *out,
                            void **object);

/* ---- One call from object handles (for bindings where calls are dear) ----- */

/* A prepared call of one kernel on tensors of one producer type, for
 * tj_call_objects: the kernel, that type's exchange-API table (its view,
 * allocator, to-object and stream functions are used), and the lock to drop around
 * the kernel (the GIL: PyEval_SaveThread/RestoreThread). Caller-owned; everything
 * in it is borrowed and must outlive the calls made with it. */
typedef struct tj_call_plan {
  const tj_kernel *kernel;
  const DLPackExchangeAPI *api;
  void *(*unlock)(void); /* NULL: keep the lock while the kernel runs */
  void (*lock)(void *);  /* given unlock's result */
} tj_call_plan;

/* The whole call in one: imports objects[0..ninputs) (handles of objects of the
 * plan's producer type, kept alive by the caller, exactly as many as the kernel
 * takes; every argument must be such a tensor) through the view function, binds,
 * allocates each output with the producer's allocator and turns it into an object
 * (new references into outputs[], in declaration order, which the caller owns even
 * when the call fails; NULL when the kernel has no outputs), takes the stream from
 * the producer for a non-CPU device, and launches with the lock dropped. The lock
 * must be held on entry. Producer failures return TJ_EPYERR (the producer's error
 * is set on its side; tj_call_objects_failed says where); core failures their code
 * and message. */
int tj_call_objects(const tj_call_plan *plan, void *const *objects, void **outputs);

/* Where this thread's last tj_call_objects met a producer failure: the argument
 * index, -1 - i for output i, or TJ_FAILED_STREAM for the stream query. Like
 * tj_last_error, thread-local and kept until the next failure. */
#define TJ_FAILED_STREAM (-1000)
int32_t tj_call_objects_failed(void);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_TILEJIT_H_ */
