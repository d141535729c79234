/*
 * tilejit's embedding API: what a program needs to declare a kernel and call
 * it from C. Kernel signatures, call arguments, validation and symbol binding,
 * expression evaluation, launch, and the call itself. Pure C, no Python, and
 * nothing of the language bindings: an embedder includes this header alone.
 * tilejit/tilejit.h includes it with the rest: the producer interface
 * (tilejit/producer.h, for programs that hand the core objects rather than
 * tensors), the host ABI of language bindings (tilejit/host.h) and the layout
 * algebra (tilejit/layout.h).
 *
 * Conventions:
 * - Every fallible function returns a tj_status: TJ_OK (0) or a negative code.
 *   On failure the message is in thread-local storage, read with
 *   tj_last_error(); tj_status_exception maps codes to exception classes in
 *   one place.
 * - Public names are tj_ / TJ_, internal non-static names tj__. Public
 *   functions are marked TJ_API (tilejit/export.h): the only names the core's
 *   shared library exports.
 * - "borrows" means the callee keeps no reference past the call unless said;
 *   "takes ownership" means the callee frees or releases it.
 * - Structs shared across the library's boundary by pointer say how they may
 *   change ("Compatibility"): append-only ones only ever gain fields at their
 *   end, so that the fields a caller knows keep their offsets.
 *
 * The per-call flow lives in one function, tj_call_run ("The call" below):
 * the caller makes a tj_arg of each argument (a tensor, a scalar, an address,
 * None) and hands the call over; the core validates and binds (tj_call_bind),
 * picks the stream, allocates and checks outputs (tj_call_set_output),
 * launches (tj_call_launch) and releases. The step functions stay public for
 * embedders and tests.
 */
#ifndef TILEJIT_CORE_H_
#define TILEJIT_CORE_H_

#include <stdbool.h>
#include <stdint.h>

#include "dlpack/dlpack.h"
#include "tilejit/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of these headers, as a string and in parts; tj_version and
 * tj_version_string give the library's. */
#define TJ_VERSION "0.1.0"
#define TJ_VERSION_MAJOR 0
#define TJ_VERSION_MINOR 1
#define TJ_VERSION_PATCH 0

/* The DLPack version the core speaks, in the tensors and tables it reads and
 * makes. A producer whose major version differs is not read past the version
 * and flags fields. The DLPack declarations are DLPack's own header
 * (dlpack/dlpack.h, shipped beside this one), or any copy of the same or a
 * newer minor version included before it. */
#define TJ_DLPACK_MAJOR 1
#define TJ_DLPACK_MINOR 3
#if DLPACK_MAJOR_VERSION != TJ_DLPACK_MAJOR || DLPACK_MINOR_VERSION < TJ_DLPACK_MINOR
#error "tilejit needs dlpack/dlpack.h of DLPack 1.3 or a later 1.x"
#endif

/* Hard limits, sized so a call frame lives on the stack. */
#define TJ_MAX_PARAMS 64
#define TJ_MAX_SYMBOLS 64
#define TJ_MAX_NDIM 16
#define TJ_MAX_OUTPUTS 16
/* Arguments the kernel function itself receives (tj_kernel_set_abi). */
#define TJ_MAX_ABI_ARGS 128
/* CUDA: kernel functions launched per call, and tensor maps encoded per call. */
#define TJ_MAX_LAUNCHES 16
#define TJ_MAX_TENSORMAPS 16
#define TJ_MAX_TENSORMAP_RANK 5
/* Bytes of a CUtensorMap (passed by value as a __grid_constant__ parameter). */
#define TJ_TENSORMAP_BYTES 128

/* ---- Version -------------------------------------------------------------- */

/* The version of the core library the program runs with, which may differ from
 * the headers it was built with: MAJOR * 10000 + MINOR * 100 + PATCH (0.1.0 is
 * 100; compare with TJ_VERSION_MAJOR, ...), and as a string ("0.1.0", static,
 * TJ_VERSION of the library's build). Never fail. */
TJ_API int32_t tj_version(void);
TJ_API const char *tj_version_string(void);

/* ---- Status codes --------------------------------------------------------- */

/* X(name, value, python exception class). The statuses of producers and
 * language bindings (-5, -7) are tilejit/producer.h's, in a table of their own
 * (TJ_BINDING_STATUS_MAP) that tj_status_name and tj_status_exception cover
 * too. -6 is retired (it never comes back as another code). */
#define TJ_STATUS_MAP(X)                                          \
  X(TJ_OK, 0, "")                                                 \
  X(TJ_ETYPE, -1, "TypeError")       /* wrong kind of argument */ \
  X(TJ_EVALUE, -2, "ValueError")     /* right kind, bad value */  \
  X(TJ_ERUNTIME, -3, "RuntimeError") /* loader, driver, launch */ \
  X(TJ_ENOMEM, -4, "MemoryError")

typedef enum {
#define TJ__STATUS_ENUM(name, value, exc) name = value,
  TJ_STATUS_MAP(TJ__STATUS_ENUM)
#undef TJ__STATUS_ENUM
} tj_status;

/* The message of the last failure on this thread; never NULL ("" if none).
 * Borrowed: valid until the next failing tj_ call on this thread. */
TJ_API const char *tj_last_error(void);

/* Sets the thread's error message (printf-style) and returns `code`. Used by
 * the core and by bindings that report through the same channel. */
TJ_API int tj_set_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Name of a status code ("TJ_EVALUE"), and the Python exception class name it
 * maps to ("ValueError"; "" for codes that raise nothing of their own, such as
 * TJ_OK). Static strings. The one map from codes to exception classes, over
 * every status table: bindings raise what this names. */
TJ_API const char *tj_status_name(int code);
TJ_API const char *tj_status_exception(int code);

/* Where the last failure on this thread happened, beside its message.
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_error_info {
  int32_t code;     /* the status returned */
  int32_t argument; /* the caller argument at fault, or -1 */
  int32_t output;   /* the output at fault (output order), or -1 */
  int32_t producer; /* the failed producer step (tilejit/producer.h), else 0 */
} tj_error_info;

/* This thread's record of its last failure (thread-local, like the message;
 * every tj_set_error resets it to "no argument"). Borrowed. */
TJ_API const tj_error_info *tj_last_error_info(void);

/* Marks the last failure as caused by caller argument `argument` and/or output
 * `output` (-1: keep); `producer` is 0 outside producers (tilejit/producer.h).
 * Returns the code unchanged. */
TJ_API int tj_error_at(int code, int32_t argument, int32_t output, int32_t producer);

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
TJ_API int tj_expr_eval(const int64_t *code, int32_t n, const int64_t *symbols, int64_t *out);

/* ---- DLPack names --------------------------------------------------------- */

/* "cpu", "cuda", "oneapi", ...; "device_type(99)" style for unknown codes
 * (written to a static per-thread buffer). */
TJ_API const char *tj_device_name(int32_t device_type);

/* Writes a dtype name ("float32", "bfloat16", "float8_e4m3fn", "bool",
 * "int8x4" for lanes > 1) into buf (NUL-terminated, truncated). */
TJ_API void tj_dtype_format(DLDataType dtype, char *buf, int32_t size);

/* ---- Element types -------------------------------------------------------- */

/* The one table of element types in C; tilejit/language/dtypes.py is the one in
 * Python, and tests/test_dtype_tables.py holds the two row by row (through
 * tj_dtype_rows). Every other C table of element types expands this list:
 * names in messages (dtype.c), CuTe's names (layout.c), XLA's numbers (xla.c),
 * torch's dtypes (torch.c). A row:
 *
 *   X(name, code, bits, lanes, family, cute, tma, xla, torch)
 *
 * name    the element type as tilejit names it
 * family  the name of its DLPack code in messages: a row named by its family
 *         and width ("int8" of "int") prints its width, for any width
 * cute    CuTe's name of the code (with the width, as the family), or NULL
 * tma     its CUtensorMapDataType, or -1 (8-bit types are bytes to the unit)
 * xla     XLA's PrimitiveType (xla_data.proto), or 0 (PRIMITIVE_TYPE_INVALID)
 * torch   "aoti_torch_dtype_" + this names torch's dtype, or NULL
 *
 * The first row of a code gives the code's family and CuTe name. */
/* clang-format off */
#define TJ_DTYPES(X)                                                                             \
  X("bool", kDLBool, 8, 1, "bool", "Boolean", 0, 1, "bool")                                       \
  X("int8", kDLInt, 8, 1, "int", "Int", 0, 2, "int8")                                             \
  X("int16", kDLInt, 16, 1, "int", "Int", 1, 3, "int16")                                          \
  X("int32", kDLInt, 32, 1, "int", "Int", 3, 4, "int32")                                          \
  X("int64", kDLInt, 64, 1, "int", "Int", 5, 5, "int64")                                          \
  X("uint8", kDLUInt, 8, 1, "uint", "Uint", 0, 6, "uint8")                                        \
  X("uint16", kDLUInt, 16, 1, "uint", "Uint", 1, 7, "uint16")                                     \
  X("uint32", kDLUInt, 32, 1, "uint", "Uint", 2, 8, "uint32")                                     \
  X("uint64", kDLUInt, 64, 1, "uint", "Uint", 4, 9, "uint64")                                     \
  X("float16", kDLFloat, 16, 1, "float", "Float", 6, 10, "float16")                               \
  X("bfloat16", kDLBfloat, 16, 1, "bfloat", "BFloat", 9, 16, "bfloat16")                          \
  X("float32", kDLFloat, 32, 1, "float", "Float", 7, 11, "float32")                               \
  X("float64", kDLFloat, 64, 1, "float", "Float", 8, 12, "float64")                               \
  X("float8_e4m3fn", kDLFloat8_e4m3fn, 8, 1, "float8_e4m3fn", "Float8E4M3FN", 0, 20,               \
    "float8_e4m3fn")                                                                              \
  X("float8_e5m2", kDLFloat8_e5m2, 8, 1, "float8_e5m2", "Float8E5M2", 0, 19, "float8_e5m2")        \
  X("complex64", kDLComplex, 64, 1, "complex", "Complex", -1, 15, "complex64")                    \
  X("complex128", kDLComplex, 128, 1, "complex", "Complex", -1, 18, "complex128")                 \
  X("complex32", kDLComplex, 32, 1, "complex", "Complex", -1, 0, "complex32")                     \
  X("float8_e3m4", kDLFloat8_e3m4, 8, 1, "float8_e3m4", NULL, -1, 29, NULL)                        \
  X("float8_e4m3", kDLFloat8_e4m3, 8, 1, "float8_e4m3", "Float8E4M3", -1, 28, NULL)                \
  X("float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8, 1, "float8_e4m3b11fnuz", NULL, -1, 23, NULL)   \
  X("float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8, 1, "float8_e4m3fnuz", "Float8E4M3FNUZ", -1, 25,      \
    "float8_e4m3fnuz")                                                                            \
  X("float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8, 1, "float8_e5m2fnuz", "Float8E5M2FNUZ", -1, 24,      \
    "float8_e5m2fnuz")                                                                            \
  X("float8_e8m0fnu", kDLFloat8_e8m0fnu, 8, 1, "float8_e8m0fnu", "Float8E8M0FNU", -1, 33,          \
    "float8_e8m0fnu")                                                                             \
  X("float6_e2m3fn", kDLFloat6_e2m3fn, 6, 1, "float6_e2m3fn", "Float6E2M3FN", -1, 0, NULL)         \
  X("float6_e3m2fn", kDLFloat6_e3m2fn, 6, 1, "float6_e3m2fn", "Float6E3M2FN", -1, 0, NULL)         \
  X("float4_e2m1fn", kDLFloat4_e2m1fn, 4, 2, "float4_e2m1fn", "Float4E2M1FN", -1, 0,               \
    "float4_e2m1fn_x2")                                                                           \
  X("handle", kDLOpaqueHandle, 64, 1, "handle", NULL, -1, 0, NULL)
/* clang-format on */

/* Bytes per element of each CUtensorMapDataType, uint8 (0) to tfloat32_ftz (12). */
#define TJ_TENSORMAP_ELEMENT_BYTES {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4}

/* A row of TJ_DTYPES, for bindings and tests. Compatibility: append-only. */
typedef struct tj_dtype_row {
  const char *name;
  DLDataType dtype;
  const char *family;
  const char *cute;
  int32_t tma;
  int32_t xla;
  const char *torch;
} tj_dtype_row;

/* The rows of TJ_DTYPES in its order (static), their number in *count. Never fails. */
TJ_API const tj_dtype_row *tj_dtype_rows(int32_t *count);

/* Bytes per element of a CUtensorMapDataType; 0 for a number the TMA unit lacks. */
TJ_API int64_t tj_tensormap_element_bytes(int32_t data_type);

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
  /* Kinds from 7 on are reserved to tilejit/producer.h. */
} tj_arg_kind;

/* tj_arg.flags. TJ_ARG_OUT_OF_RANGE: a kind INT whose Python int fits neither
 * int64 nor uint64; value.f then holds it as a double (±inf beyond a double's
 * range), which a float parameter takes. On a kind FLOAT: a finite value beyond
 * a double's range (value.f ±inf), which no parameter takes. */
#define TJ_ARG_READ_ONLY 1u /* producer marked the tensor read-only */
#define TJ_ARG_OUT_OF_RANGE 2u
#define TJ_ARG_UNSIGNED 4u /* kind INT: value.i holds the bits of a uint64 >= 2**63 */

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
  const char *type_name; /* kind OTHER: what it is; INT, BOOL, FLOAT: the type it
                          * was read from when not Python's own (numpy.float32);
                          * borrowed, for messages; may be NULL */
  int32_t owner_kind;    /* tj_owner_kind */
  void *owner;           /* the managed tensor whose deleter is owed */
  /* Kind TENSOR: the producer that allocates outputs like it and gives its
   * stream (tilejit/producer.h); NULL for tensors no producer stands behind,
   * as every tensor of tj_arg_from_* is. Borrowed. */
  const struct tj_producer *producer;
} tj_arg;

/* Sets `arg` to an empty NONE argument. */
TJ_API void tj_arg_init(tj_arg *arg);

/* Imports a legacy managed tensor: takes ownership of `managed` (its deleter
 * is called exactly once, by tj_arg_release). Never fails. */
TJ_API void tj_arg_from_legacy(tj_arg *arg, DLManagedTensor *managed);

/* Imports a versioned managed tensor: takes ownership of `managed` in every
 * case. A major version other than TJ_DLPACK_MAJOR deletes it at once and
 * returns TJ_EVALUE (`what` names the argument in the message; may be NULL).
 * Reads the READ_ONLY flag into arg->flags. */
TJ_API int tj_arg_from_versioned(tj_arg *arg, DLManagedTensorVersioned *managed, const char *what);

/* Uses a DLTensor the caller keeps alive for the whole call (copied by value;
 * shape/strides borrowed). */
TJ_API void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags);

/* Calls the owed deleter, if any, exactly once; afterwards `arg` is NONE. Safe
 * to call repeatedly. */
TJ_API void tj_arg_release(tj_arg *arg);

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
/* A global workspace: allocated by tilejit at every call like an output (shape
 * from its expressions, with the output allocator), handed to the kernel and
 * to tensor maps, released once the launch is enqueued; never passed by the
 * caller, never returned. With TJ_BUF_ZERO it is zero-filled before the
 * kernel runs (on the launch stream for CUDA). */
#define TJ_BUF_WORKSPACE 8u
#define TJ_BUF_ZERO 16u

/* Where one argument of the kernel function comes from (tj_abi_arg.source). */
typedef enum {
  TJ_ABI_PARAM = 1,     /* parameter `index`, passed as declared */
  TJ_ABI_SYMBOL = 2,    /* symbol `index`, as an integer of the symbol's dtype */
  TJ_ABI_EXPR = 3,      /* expression `index` over the symbols, as an integer of `dtype` */
  TJ_ABI_TENSORMAP = 4, /* CUDA: tensor map `index` (tj_kernel_add_tensormap), by value */
} tj_abi_source;

typedef struct tj_abi_arg {
  int32_t source; /* tj_abi_source */
  int32_t index;
  DLDataType dtype; /* TJ_ABI_EXPR: int32, int64, uint32 or uint64; else ignored */
} tj_abi_arg;

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
TJ_API int tj_kernel_create(const char *name, int32_t nparams, int32_t target, tj_kernel **out);

/* Frees the kernel, closing its library if tj_kernel_load opened one.
 * NULL is allowed. */
TJ_API void tj_kernel_free(tj_kernel *kernel);

/* Declares the next symbol (ids are 0, 1, ... in call order; this order is the
 * ABI order of the trailing symbol arguments, int64 unless
 * tj_kernel_set_symbol_dtype says otherwise). `name` is copied;
 * divisibility >= 1. */
TJ_API int tj_kernel_add_symbol(tj_kernel *kernel, const char *name, int64_t divisibility);

/* Sets the integer type of `symbol` (default int64): int32, int64, uint32 or
 * uint64. A bound value outside its range is a TJ_EVALUE naming the argument
 * that bound it; in the kernel's argument list the symbol has that width. */
TJ_API int tj_kernel_set_symbol_dtype(tj_kernel *kernel, int32_t symbol, DLDataType dtype);

/* Registers an expression: `n` (op, operand) pairs and its source text for
 * messages ("n + 1"); both copied. Writes its id to *out_id. A program that is
 * a single TJ_OP_SYM is a direct occurrence: it binds the symbol. */
TJ_API int tj_kernel_add_expr(tj_kernel *kernel, const int64_t *code, int32_t n, const char *text,
                              int32_t *out_id);

/* Declares parameter `index` as a buffer. shape_ids/stride_ids are expression
 * ids (ndim each); stride_ids == NULL declares compact row-major. align is the
 * required byte alignment of data + byte_offset (0: element size). flags is
 * TJ_BUF_*. Arrays and name are copied. */
TJ_API int tj_kernel_set_buffer(tj_kernel *kernel, int32_t index, const char *name,
                                DLDataType dtype, int32_t ndim, const int32_t *shape_ids,
                                const int32_t *stride_ids, int64_t align, uint32_t flags);

/* Declares parameter `index` as a scalar of `dtype` (int, uint, float, bool). */
TJ_API int tj_kernel_set_scalar(tj_kernel *kernel, int32_t index, const char *name,
                                DLDataType dtype);

/* Makes integer scalar parameter `index` (declared by tj_kernel_set_scalar)
 * bind `symbol`: a call's value of the scalar is the symbol's value, so shape,
 * grid, block, shared memory, tensor-map and kernel-argument expressions may
 * use it. A tensor extent or another scalar binding the same symbol must agree
 * with it; its divisibility and its dtype's range are checked as for a symbol
 * bound by a tensor. */
TJ_API int tj_kernel_set_scalar_symbol(tj_kernel *kernel, int32_t index, int32_t symbol);

/* Declares parameter `index` as a raw pointer (tensor, address or None). */
TJ_API int tj_kernel_set_pointer(tj_kernel *kernel, int32_t index, const char *name,
                                 DLDataType dtype, int64_t align, uint32_t flags);

/* The arguments the kernel function receives, in its order: `n` entries
 * (copied), each a parameter, a symbol or an expression over the symbols; a
 * parameter may be left out (it is still validated and binds symbols). Without
 * this call: every parameter in declaration order, then every symbol. */
TJ_API int tj_kernel_set_abi(tj_kernel *kernel, int32_t n, const tj_abi_arg *args);

/* Checks the signature is complete and consistent (every parameter set,
 * every symbol bound by a direct occurrence in an input buffer) and plans
 * binding. After this the kernel is immutable. */
TJ_API int tj_kernel_finalize(tj_kernel *kernel);

/* Entry point of a loaded CPU kernel: the packed-argument function tilejit
 * generates next to the user's source. args holds one value per kernel ABI
 * argument (tj_kernel_set_abi): pointers in p, integers (symbols, expressions,
 * integer and bool scalars) in i, floating scalars in f. Returns the kernel's
 * status: 0 for success (always, for a kernel returning void); anything else
 * fails the call with TJ_ERUNTIME. */
typedef union tj_value {
  void *p;
  int64_t i;
  double f;
} tj_value;
typedef int32_t (*tj_cpu_entry)(const tj_value *args);

/* CPU kernel: opens the shared library at `path` (dlopen, RTLD_LOCAL) and
 * resolves `symbol` as the packed entry; the kernel keeps the library open
 * until tj_kernel_free.
 * CUDA kernel: reads the module image at `path` (cubin, fatbin or PTX) into
 * memory and takes `symbol` as the name of its extern "C" __global__
 * function, as tj_kernel_set_image does. */
TJ_API int tj_kernel_load(tj_kernel *kernel, const char *path, const char *symbol);

/* CPU kernel built elsewhere: opens the shared library `library` and resolves
 * its function `symbol`, then opens the glue library `glue` (generated by
 * tilejit from the signature) and resolves `entry`, its packed entry, which
 * calls the function whose address is stored in the glue's exported
 * `void *tilejit_kernel_function`. Both libraries stay open until
 * tj_kernel_free. */
TJ_API int tj_kernel_load_prebuilt(tj_kernel *kernel, const char *glue, const char *entry,
                                   const char *library, const char *symbol);

/* CUDA kernel: uses the module image of `size` bytes at `image` (copied) with
 * `symbol` (copied) as its function. The driver loads it lazily, once per
 * CUDA context, at the first launch in that context; a bad image or a missing
 * function is reported by that launch. */
TJ_API int tj_kernel_set_image(tj_kernel *kernel, const void *image, int64_t size,
                               const char *symbol);

/* CUDA kernel, before tj_kernel_finalize: how it is launched. grid_ids[3] and
 * block_ids[3] are the dimensions and shared_mem_id the dynamic shared memory
 * in bytes, each an expression id (tj_kernel_add_expr; use the constant 1 for
 * unused dimensions), evaluated over the bound symbols at every launch. An
 * empty grid (a dimension of 0) launches nothing. Arrays are copied. */
TJ_API int tj_kernel_set_launch(tj_kernel *kernel, const int32_t grid_ids[3],
                                const int32_t block_ids[3], int32_t shared_mem_id);

/* Launch attributes (tj_kernel_set_launch_attrs flags): a cooperative launch
 * (grid-wide sync); programmatic dependent launch (the kernel may start while
 * the previous one on the stream finishes). */
#define TJ_LAUNCH_COOPERATIVE 1u
#define TJ_LAUNCH_PDL 2u

/* CUDA kernel, before tj_kernel_finalize: one more kernel function of the
 * same module image, launched after the ones before it on the same stream,
 * each call. `symbol` is its extern "C" __global__ function; grid, block and
 * shared memory are expression ids as in tj_kernel_set_launch; `args` its
 * `nargs` arguments as in tj_kernel_set_abi. Launch 0 is the one
 * tj_kernel_set_image, tj_kernel_set_launch and tj_kernel_set_abi describe.
 * Writes the launch's index to *out_index. Everything is copied. */
TJ_API int tj_kernel_add_launch(tj_kernel *kernel, const char *symbol, const int32_t grid_ids[3],
                                const int32_t block_ids[3], int32_t shared_mem_id, int32_t nargs,
                                const tj_abi_arg *args, int32_t *out_index);

/* CUDA kernel, before tj_kernel_finalize: launch `index`'s attributes.
 * cluster_ids: the thread block cluster's dimensions as expression ids, or
 * NULL for none; flags: TJ_LAUNCH_*. A launch with any attribute goes through
 * cuLaunchKernelEx, one without through cuLaunchKernel. */
TJ_API int tj_kernel_set_launch_attrs(tj_kernel *kernel, int32_t index,
                                      const int32_t cluster_ids[3], uint32_t flags);

/* A TMA descriptor (CUtensorMap) the core encodes at every call, from the
 * bound buffer's address and these fields evaluated over the bound symbols; a
 * kernel receives it by value (TJ_ABI_TENSORMAP). Every array holds
 * expression ids, innermost dimension first, as the driver takes them.
 * Tiled maps (im2col 0) go through cuTensorMapEncodeTiled and use `box`;
 * im2col maps (im2col 1, rank 3 to 5) through cuTensorMapEncodeIm2col and use
 * the pixel box corners (rank - 2 each), channels_per_pixel and
 * pixels_per_column instead, checked against the driver's documented limits
 * first, with messages naming the map. */
typedef struct tj_tensormap {
  const char *name;                           /* for messages: the kernel's parameter ("A_desc") */
  int32_t param;                              /* the buffer (or pointer) parameter it describes */
  int32_t data_type;                          /* CUtensorMapDataType */
  int32_t rank;                               /* 1 to TJ_MAX_TENSORMAP_RANK */
  int32_t dims[TJ_MAX_TENSORMAP_RANK];        /* globalDim, elements */
  int32_t strides[TJ_MAX_TENSORMAP_RANK - 1]; /* globalStrides, bytes, dims 1.. */
  int32_t box[TJ_MAX_TENSORMAP_RANK];         /* boxDim, elements */
  int32_t element_strides[TJ_MAX_TENSORMAP_RANK];  /* elementStrides */
  int32_t interleave;                              /* CUtensorMapInterleave */
  int32_t swizzle;                                 /* CUtensorMapSwizzle */
  int32_t l2_promotion;                            /* CUtensorMapL2promotion */
  int32_t oob_fill;                                /* CUtensorMapFloatOOBfill */
  int32_t im2col;                                  /* 0: tiled; 1: im2col */
  int32_t lower_corner[TJ_MAX_TENSORMAP_RANK - 2]; /* im2col: pixelBoxLowerCorner {D, H, W} */
  int32_t upper_corner[TJ_MAX_TENSORMAP_RANK - 2]; /* im2col: pixelBoxUpperCorner */
  int32_t channels_per_pixel;                      /* im2col */
  int32_t pixels_per_column;                       /* im2col */
} tj_tensormap;

/* CUDA kernel, before tj_kernel_finalize: registers a tensor map (copied);
 * writes its id to *out_id. */
TJ_API int tj_kernel_add_tensormap(tj_kernel *kernel, const tj_tensormap *map, int32_t *out_id);

/* Uses an entry point the caller provides (tests, embedders). Borrowed: it
 * must outlive the kernel. */
TJ_API int tj_kernel_set_entry(tj_kernel *kernel, tj_cpu_entry entry);

/* Introspection. Borrowed pointers, valid while the kernel lives. */
TJ_API const char *tj_kernel_name(const tj_kernel *kernel);
TJ_API int32_t tj_kernel_num_params(const tj_kernel *kernel);
TJ_API int32_t tj_kernel_num_symbols(const tj_kernel *kernel);
/* Global workspaces (TJ_BUF_WORKSPACE): they follow the outputs in the
 * frame's out_* arrays and in tj_call_set_output's numbering. */
TJ_API int32_t tj_kernel_num_workspaces(const tj_kernel *kernel);
TJ_API int32_t tj_kernel_num_outputs(const tj_kernel *kernel);
/* Parameter index of the i-th output (declaration order), then of each
 * workspace (i from num_outputs); -1 beyond. */
TJ_API int32_t tj_kernel_output_param(const tj_kernel *kernel, int32_t i);
TJ_API int32_t tj_kernel_param_kind(const tj_kernel *kernel, int32_t index);
TJ_API const char *tj_kernel_param_name(const tj_kernel *kernel, int32_t index);

/* ---- Reading a kernel's signature ----------------------------------------- */

/* What the builder calls above declared, read back from a finalized kernel: a
 * kernel tj_kernel_open built (tilejit's Python binding reads an export's
 * signature this way, never the file) or any other. Each *_info function fills
 * `out` with borrowed pointers, valid while the kernel lives, and returns
 * TJ_EVALUE for an index out of range or a kernel not finalized.
 * Compatibility: the *_info structs are append-only. */
TJ_API int32_t tj_kernel_target(const tj_kernel *kernel); /* tj_target; 0 for NULL */
TJ_API int32_t tj_kernel_num_exprs(const tj_kernel *kernel);
/* CUDA kernel functions launched per call; 0 for a CPU kernel. */
TJ_API int32_t tj_kernel_num_launches(const tj_kernel *kernel);
TJ_API int32_t tj_kernel_num_tensormaps(const tj_kernel *kernel);

typedef struct tj_symbol_info {
  const char *name;
  int64_t divisibility;
  DLDataType dtype; /* int64 unless tj_kernel_set_symbol_dtype said otherwise */
} tj_symbol_info;
TJ_API int tj_kernel_symbol_info(const tj_kernel *kernel, int32_t symbol, tj_symbol_info *out);

typedef struct tj_expr_info {
  const int64_t *code; /* n (op, operand) pairs */
  int32_t n;
  const char *text; /* "" when none was given */
} tj_expr_info;
TJ_API int tj_kernel_expr_info(const tj_kernel *kernel, int32_t expr, tj_expr_info *out);

typedef struct tj_param_info {
  int32_t kind; /* tj_param_kind */
  const char *name;
  DLDataType dtype;
  int32_t ndim;           /* buffers; 0 otherwise */
  const int32_t *shape;   /* buffers: ndim expression ids */
  const int32_t *strides; /* buffers: ndim expression ids; NULL: compact row-major */
  int64_t align;          /* as declared: 0 for the default */
  uint32_t flags;         /* TJ_BUF_* */
  int32_t symbol;         /* a scalar: the symbol it binds (tj_kernel_set_scalar_symbol); else -1 */
} tj_param_info;
TJ_API int tj_kernel_param_info(const tj_kernel *kernel, int32_t index, tj_param_info *out);

/* The kernel function's arguments as tj_kernel_set_abi declared them; *n is -1
 * and *args NULL where it was never called (the default list). */
TJ_API int tj_kernel_abi_info(const tj_kernel *kernel, int32_t *n, const tj_abi_arg **args);

/* CUDA launch `index` (0 .. tj_kernel_num_launches - 1), as
 * tj_kernel_set_launch / tj_kernel_add_launch / tj_kernel_set_launch_attrs
 * declared it; launch 0's arguments are the kernel's (tj_kernel_set_abi, or
 * the default list). */
typedef struct tj_launch_info {
  const char *symbol; /* its __global__ function; "" before an image is set */
  int32_t grid[3];    /* expression ids */
  int32_t block[3];
  int32_t shared_mem;
  const int32_t *cluster; /* 3 expression ids, or NULL for none */
  uint32_t flags;         /* TJ_LAUNCH_* */
  int32_t nargs;
  const tj_abi_arg *args;
} tj_launch_info;
TJ_API int tj_kernel_launch_info(const tj_kernel *kernel, int32_t index, tj_launch_info *out);

/* Tensor map `index` as tj_kernel_add_tensormap took it. */
TJ_API int tj_kernel_tensormap_info(const tj_kernel *kernel, int32_t index,
                                    const tj_tensormap **out);

/* ---- Exported kernels ----------------------------------------------------- */

/* Opens an export directory (what kernel.export(path) writes in Python: a
 * MANIFEST, signature.tj, the compiled image and kernel.h; docs/export.md).
 * Every file MANIFEST lists is checked against its size and SHA-256, the
 * format versions and the target against this machine (a cpu kernel's
 * architecture; a cuda kernel's against the device's compute capability),
 * then the kernel is built from signature.tj and its image loaded. Nothing is
 * compiled. On success *out is a finalized, loaded kernel (tj_kernel_free);
 * any failure is TJ_EVALUE naming the directory, the file and what is wrong,
 * and nothing is kept. */
TJ_API int tj_kernel_open(const char *dir, tj_kernel **out);
/*
 * How tj_kernel_open reads: the directory is opened once and MANIFEST and every
 * file it lists are read from it, each once; a listed file that is a symbolic
 * link (any link, wherever it points) or not a regular file (a FIFO, a device)
 * is refused, naming it, and never waited on. The image is loaded from the
 * bytes that were checked (a CPU library through a private copy in $TMPDIR,
 * removed once loaded), so later changes at the path never reach the kernel
 * and two opens of one path never share a library. A directory replaced whole
 * while it is read (another process exporting there with overwrite) is read
 * again, up to 20 times: the kernel is the old export whole or the new one
 * whole; after that the refusal says to try again.
 *
 * The kernel keeps the files as they were checked, until tj_kernel_free:
 * tj_kernel_export_num_files counts them (0 for a kernel not made by
 * tj_kernel_open), tj_kernel_export_file gives file i's name, bytes (size
 * bytes, then a NUL), size and SHA-256 (64 lowercase hex digits), each
 * pointer optional and borrowed from the kernel, and TJ_EVALUE for an i out
 * of range. tj_kernel_export_arch is MANIFEST's arch ("" if none; NULL for a
 * kernel not opened). tj_kernel_reopen builds another kernel from the kept
 * bytes, reading nothing from disk (TJ_EVALUE for a kernel not opened).
 */
TJ_API int tj_kernel_reopen(const tj_kernel *kernel, tj_kernel **out);
TJ_API int32_t tj_kernel_export_num_files(const tj_kernel *kernel);
TJ_API int tj_kernel_export_file(const tj_kernel *kernel, int32_t i, const char **name,
                                 const void **data, int64_t *size, const char **sha256);
TJ_API const char *tj_kernel_export_arch(const tj_kernel *kernel);

/* What an export says beyond the builder calls, read from its signature.tj by
 * tj_kernel_open (and tj_kernel_reopen) and checked there, the rest of the
 * file's reading: the order a call returns the outputs in (`out_idx`), each
 * kernel function's name, C prototype and arguments (`function`, `arg`: what
 * kernel.h declares), and the `load` line's files and symbols. TJ_EVALUE for a
 * kernel not opened. Borrowed pointers, valid while the kernel lives.
 * Compatibility: the tj_export_* structs are append-only.
 *
 * tj_kernel_export_out_idx: *n outputs, parameter indices in return order, the
 * output buffers each exactly once; *n is -1 and *out_idx NULL where the file
 * has no out_idx line (outputs are then returned in declaration order). */
TJ_API int tj_kernel_export_out_idx(const tj_kernel *kernel, int32_t *n, const int32_t **out_idx);

typedef struct tj_export_arg {
  const char *name;
  int32_t source;    /* tj_abi_source */
  int32_t index;     /* parameter, symbol, expression or tensor map */
  const char *dtype; /* tilejit's name of its value type, or a pointer's element type */
  int32_t pointer;   /* 1: passed as a pointer */
  int32_t is_const;  /* 1: a pointer to const */
  int32_t param;     /* the parameter it passes, or -1 */
} tj_export_arg;

typedef struct tj_export_function {
  const char *name;
  const char *prototype; /* as tilejit declared it */
  int32_t nargs;
  const tj_export_arg *args;
} tj_export_function;

/* Kernel functions in launch order (0 where the file has no function line). */
TJ_API int32_t tj_kernel_export_num_functions(const tj_kernel *kernel);
TJ_API int tj_kernel_export_function(const tj_kernel *kernel, int32_t i, tj_export_function *out);

typedef struct tj_export_load {
  const char *image;   /* the file loaded: a CPU library (a prebuilt's glue), a CUDA image */
  const char *entry;   /* the symbol resolved in it */
  const char *library; /* load_prebuilt: the kernel's own library file; else NULL */
  const char *symbol;  /* load_prebuilt: its function; else NULL */
} tj_export_load;
TJ_API int tj_kernel_export_load(const tj_kernel *kernel, tj_export_load *out);

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
   * the caller then sets it: an explicit stream first, else the producer's
   * current work stream. A CPU kernel given a non-NULL stream is an error. */
  void *stream;
} tj_frame;

/* Validates the `nargs` caller arguments (parameters minus outputs, in
 * declaration order; all of them, optional ones given as None) against the
 * kernel, binds every symbol and computes the output shapes into frame.
 * Borrows args: they must outlive the frame. On error nothing needs undoing
 * beyond tj_arg_release of the args. */
TJ_API int tj_call_bind(const tj_kernel *kernel, tj_arg *args, int32_t nargs, tj_frame *frame);

/* Sets output `i` (output order) to an imported tensor and validates it like
 * an input (dtype, shape, strides, alignment, device). Borrows `arg`. */
TJ_API int tj_call_set_output(tj_frame *frame, int32_t i, tj_arg *arg);

/* Packs the arguments and runs the kernel: a CPU kernel synchronously on the
 * calling thread; a CUDA kernel is enqueued on frame->stream with
 * cuLaunchKernel (asynchronous), in the calling thread's current context
 * when it is on the tensors' device, else in that device's primary context:
 * made current (and left so) on a thread with no current context, pushed for
 * the launch only on a thread current on another device.
 * Touches no Python state: bindings release the GIL around it. Every output
 * must be set. */
TJ_API int tj_call_launch(tj_frame *frame);

/* ---- CUDA driver ---------------------------------------------------------- */

/* The driver (libcuda) is opened at the first CUDA call, never before:
 * $TILEJIT_LIBCUDA if set, else libcuda.so.1. Without one, CUDA calls fail
 * with TJ_ERUNTIME saying so, and the next call tries again; CPU kernels
 * never need it. Driver failures are TJ_ERUNTIME carrying the driver's error
 * name and text. */

/* Writes the compute capability of CUDA device `device_id` (a device
 * ordinal; -1: the device of the calling thread's current context, else 0).
 * Loads the driver if needed. */
TJ_API int tj_cuda_device_capability(int32_t device_id, int32_t *major, int32_t *minor);

/* ---- The call ----------------------------------------------------------------- */

/* One kernel call. Caller-owned, usually on the stack; everything in it is
 * borrowed. Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_call {
  /* The caller's arguments, `nargs` of them: tensors (tj_arg_from_*), scalars,
   * addresses and None. tj_call_run releases every owning import before it
   * returns. A call may leave out trailing optional buffers, as a Python
   * function its trailing `=None` parameters: the array then has room for the
   * kernel's inputs (TJ_MAX_PARAMS always does), and tj_call_run sets the
   * records left out to None. */
  tj_arg *args;
  int32_t nargs;
  int32_t has_stream; /* 1: `stream` was given explicitly and wins */
  void *stream;
  /* One slot per output, in declaration order: new references the caller owns,
   * also when the call fails (NULL where no object was made). Outputs the
   * core allocated itself (step 4 below) are DLManagedTensor *: the caller
   * deletes each with its own deleter (m->deleter(m)). */
  void **outputs;
} tj_call;

/* Runs one call, each step here and nowhere else:
 *   1. the argument count;
 *   2. validates every argument and binds the symbols (tj_call_bind);
 *   3. the stream: explicit > the current work stream of the first tensor's
 *      producer (devices other than the CPU) > none;
 *   4. allocates each output (and workspace) with the first tensor's producer
 *      and validates it (tj_call_set_output). Where no producer allocates (a
 *      call made here from C, its tensors from tj_arg_from_*), the core
 *      allocates a CPU kernel's outputs in host memory: compact, aligned to
 *      the parameter's align and at least 64 bytes, not zero-filled, each a
 *      DLManagedTensor (call->outputs). A CUDA kernel's outputs need a
 *      producer, or tj_call_bind and tj_call_set_output (TJ_ETYPE naming the
 *      output);
 *   5. launches (tj_call_launch);
 *   6. releases every owning import, inputs and outputs, success or not.
 * On failure the record (tj_last_error_info) says which argument or output.
 * Language bindings run the same sequence through tj_call_run_binding
 * (tilejit/producer.h). */
TJ_API int tj_call_run(const tj_kernel *kernel, tj_call *call);

/* ---- Bound launches ------------------------------------------------------------ */

/* A call bound once and launched many times: the steps of tj_call_run up to
 * the launch (count, validation and binding, outputs allocated) run once, and
 * the launch is packed (a CPU kernel's argument array; a CUDA kernel's
 * evaluated grid, block and shared memory, encoded tensor maps and parameter
 * array, attributes included). Each tj_bound_launch then enqueues the same
 * launch, into the same outputs, choosing only the stream again. Opaque; not
 * safe to launch from two threads at once (one per thread, or a lock). */
typedef struct tj_bound tj_bound;

/* Binds `call` (its stream fields are ignored: the stream is each launch's).
 * Outputs are allocated as tj_call_run allocates them (the core's own
 * DLManagedTensors for a CPU kernel when no producer allocates).
 * The argument records move into the bound launch, which owns their imports
 * from here on, success or not (the caller's records are left as NONE; their
 * release is a no-op); what they borrow (a DLTensor's shape and strides, the
 * data) must outlive the bound launch. call->outputs receives the outputs'
 * objects as borrowed references, valid until tj_bound_free (NULL where none
 * was made); the bound launch owns them and the workspaces. On success *out
 * is a new bound launch: release it with tj_bound_free. On failure *out is
 * NULL and the error names the argument, as tj_call_run's. */
TJ_API int tj_bound_create(const tj_kernel *kernel, tj_call *call, tj_bound **out);

/* Launches the bound call again: on `stream` when has_stream is 1, else on
 * the first tensor's producer's current work stream, asked at this launch
 * (never kept from an earlier one), else the default stream. A CPU kernel
 * runs now, on the calling thread (no stream). A CUDA launch in steady state
 * makes two driver calls (cuCtxGetCurrent and the launch), loads no module
 * while the stream is being captured into a CUDA graph (the first launch in a
 * context loads it, or tj_kernel_warmup ahead), allocates nothing and, unless
 * workspaces were allocated on another stream than the launch's, synchronizes
 * nothing. */
TJ_API int tj_bound_launch(tj_bound *bound, int32_t has_stream, void *stream);

/* Replaces caller argument `position`, a tensor, by `arg`: a tensor with the
 * same dtype, a shape and strides that bind every symbol to the same value,
 * on the same device, aligned as the parameter declares, writable unless the
 * parameter is const (tj_call_set_output's checks of an output, with the
 * message naming the argument). Takes ownership of `arg` in every case (a
 * TJ_ARG_OBJECT is imported through its producer first); the replaced
 * tensor's import is released. On failure the bound launch is unchanged. */
TJ_API int tj_bound_update(tj_bound *bound, int32_t position, tj_arg *arg);

/* The bound frame (symbols, device, arguments), borrowed from the bound
 * launch: valid until its next update or tj_bound_free. */
TJ_API const tj_frame *tj_bound_frame(const tj_bound *bound);

/* Releases every import, output and workspace the bound launch owns, and the
 * bound launch. NULL is allowed. Work it enqueued may still be running: the
 * caller orders the release of the memory after it, as for any call. */
TJ_API void tj_bound_free(tj_bound *bound);

/* Loads a CUDA kernel's module ahead of its first launch, so that a launch
 * inside a CUDA graph capture finds it: into device `device`'s context (the
 * thread's current one when it is on that device, else the device's primary
 * context), or with `device` -1 into the calling thread's current context
 * (nothing when it has none): the device a framework made current, as torch
 * does. A CPU kernel has nothing to load: TJ_OK. Loads the driver if needed. */
TJ_API int tj_kernel_warmup(const tj_kernel *kernel, int32_t device);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_CORE_H_ */
