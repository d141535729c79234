/*
 * Private declarations shared by the core's translation units: the kernel's
 * layout and the small helpers of the lowest layer (errors, dtypes, the
 * exchange-API import). Nothing here is ABI; names are tj__. The internals
 * of one file that others use are declared in that file's own header
 * (frame.h, validate.h, memo.h, target_cuda.h).
 *
 * The files are layered: each calls only files of the layers below it, so no
 * two depend on each other, directly or around a cycle
 * (tests/test_core_api.py checks it). One step of a call lives in one file.
 *
 *   7  torch.c      kernels as torch operators: torch's tensor handles in,
 *                   the call run, outputs pushed; exports' torch_op.txt
 *   6  host.c       the binding layer: host objects in, a host result or
 *                   exception out (tj_host_call)
 *      open.c       opening an exported kernel: its manifest and files
 *                   checked, its signature replayed (tj_kernel_open)
 *   5  call.c       the call sequencer: import, bind, stream, outputs,
 *                   launch, release (tj_call_run); bound launches, the same
 *                   steps once and the launch replayed (tj_bound_*)
 *   4  kernel.c     building a kernel's signature, loading it, freeing it
 *      xla.c        kernels as XLA FFI custom calls: a call frame in, bound,
 *                   launched on XLA's stream
 *   3  memo.c       binding a call: from the record of an earlier one, else
 *                   by validate.c's full checks, recorded (tj_call_bind)
 *      launch.c     packing the arguments and running a CPU kernel
 *                   (tj_call_launch), cuda.c for a CUDA one; packed once
 *                   and run again (launch.h)
 *   2  validate.c   the full checks of the arguments, symbol binding, and
 *                   outputs (tj_call_set_output)
 *      cuda.c       the CUDA driver, per-context modules, CUDA launches
 *   1  frame.c      helpers over a kernel's parameters and argument list
 *                   and a bound frame
 *      producer.c   the exchange-API producer, lazy views, capsules
 *      layout.c     the layout algebra of tensor views
 *   0  arg.c, expr.c, dtype.c, error.c   arguments, expressions, names,
 *                   the error record; sha256.c  file hashes; version.c;
 *                   env.c  the environment variables the core reads
 *
 * docs/architecture.md lists the files lowest first, in an order these layers
 * allow (tests/test_docs.py checks it against the calls).
 */
#ifndef TILEJIT_INTERNAL_H_
#define TILEJIT_INTERNAL_H_

#include <string.h>

#include "tilejit/tilejit.h"

/* An expression as registered: its RPN program plus what the validator needs
 * to take the fast paths (a constant, or a lone symbol that binds). */
typedef struct {
  int64_t *code; /* 2 * n int64 */
  int32_t n;
  char *text;
  int32_t sym;      /* >= 0: the program is exactly that symbol */
  int32_t is_const; /* 1: the program is exactly the constant cval */
  int64_t cval;
} tj__expr;

typedef struct {
  int32_t kind;  /* tj_param_kind; 0 while unset */
  int32_t binds; /* an integer scalar: the symbol its value binds; -1: none */
  char *name;
  DLDataType dtype;
  int32_t ndim;
  int32_t shape[TJ_MAX_NDIM];   /* expression ids */
  int32_t strides[TJ_MAX_NDIM]; /* expression ids, when has_strides */
  int32_t has_strides;
  int32_t has_complex;    /* some dim is neither constant nor a lone symbol */
  int64_t align;          /* bytes, >= 1 */
  int64_t declared_align; /* as declared (0: the default), for tj_kernel_param_info */
  uint32_t flags;         /* TJ_BUF_* */
  int32_t position;       /* caller argument index; -1 for outputs */
  int32_t output;         /* output index (workspaces follow the outputs); -1 for inputs */
} tj__param;

/* One kernel function launched per call. Launch 0 is built at finalize from
 * tj_kernel_set_image / _set_launch / _set_abi (its symbol and arguments
 * borrowed from the kernel); further ones (tj_kernel_add_launch) own theirs.
 * A CPU kernel has launch 0 only, for its argument list. */
typedef struct {
  char *symbol;
  int32_t config[7]; /* grid[3], block[3], shared memory: expression ids */
  int32_t has_cluster;
  int32_t cluster[3]; /* expression ids */
  uint32_t flags;     /* TJ_LAUNCH_* */
  int32_t nabi;
  tj_abi_arg *abi;
} tj__launch;

struct tj_kernel {
  char *name;
  int32_t target;
  int32_t nparams;
  tj__param params[TJ_MAX_PARAMS];
  int32_t nsymbols;
  char *symbol_names[TJ_MAX_SYMBOLS];
  int64_t symbol_div[TJ_MAX_SYMBOLS];
  DLDataType symbol_dtype[TJ_MAX_SYMBOLS]; /* int64 unless set */
  /* The kernel function's arguments (tj_kernel_set_abi; by default at
   * finalize: the parameters, then the symbols). */
  int32_t nabi;
  int32_t has_abi;
  int32_t check_integers; /* a narrow symbol or an expression argument: check_integers */
  tj_abi_arg abi[TJ_MAX_ABI_ARGS];
  tj__expr *exprs;
  int32_t nexprs;
  int32_t cap_exprs;
  int32_t ninputs;   /* caller-visible arguments */
  int32_t nrequired; /* the fewest a call gives: the rest are optional buffers (None) */
  int32_t noutputs;
  int32_t output_params[TJ_MAX_OUTPUTS]; /* outputs, then workspaces */
  int32_t finalized;
  void *library;        /* dlopen handle, owned */
  void *kernel_library; /* a prebuilt CPU kernel's own library, owned */
  tj_cpu_entry entry;
  /* CUDA target: launch configuration as expression ids (grid[3], block[3],
   * shared memory) once has_launch; the module image (image_size bytes plus a
   * NUL, so PTX text is terminated) and its __global__ function's name, owned,
   * set by tj_kernel_set_image; the image loaded per context (cuda.c), owned,
   * made with the image. */
  int32_t has_launch;
  int32_t launch[7];
  unsigned char *image;
  int64_t image_size;
  char *image_symbol;
  struct tj__cuda_modules *cuda;
  /* A kernel tj_kernel_open made: the export's files as they were checked,
   * owned, and what frees them (open.c's; kernel.c calls it, a layer below). */
  void *opened;
  void (*opened_free)(void *opened);
  int32_t nlaunches; /* >= 1 once finalized */
  tj__launch launches[TJ_MAX_LAUNCHES];
  int32_t ntensormaps;
  tj_tensormap tensormaps[TJ_MAX_TENSORMAPS]; /* names owned */
  struct tj__memo *memo; /* the last call that bound (memo.c); NULL: none kept */
  int32_t nworkspaces;   /* allocated like outputs, after them: nallocs in all */
  int32_t nallocs;
  int32_t zero_fill; /* some workspace is TJ_BUF_ZERO */
};

/* Error paths: kept out of the functions that check, so that those stay small
 * enough to inline on the per-call path. */
#if defined(__GNUC__)
#define TJ__COLD __attribute__((cold, noinline))
#else
#define TJ__COLD
#endif

/* Bytes per element (at least 1 for sub-byte types). */
static inline int64_t tj__dtype_bytes(DLDataType dtype) {
  int64_t bits = (int64_t)dtype.bits * (dtype.lanes ? dtype.lanes : 1);
  return bits >= 8 ? bits / 8 : 1;
}

/* The word holding the lazy-view bits of `object`, read where `bits` says
 * (tj_view_bits); 0 when the object points to no block. Inline: it runs for
 * every torch tensor of every call. */
static inline uint64_t tj__view_word(const tj_view_bits *bits, const void *object) {
  const char *block;
  uint64_t word;
  memcpy(&block, (const char *)object + bits->block_offset, sizeof(block));
  if (block == NULL) return 0;
  memcpy(&word, block + bits->word_offset, sizeof(word));
  return word;
}

/* Whether `object` may be a lazy view its producer must check
 * (tj_producer_check_view): a conjugate or negative bit set where the bits
 * are read in place, and always where they are asked of the framework. */
static inline int tj__may_be_view(const tj_producer *producer, const void *object) {
  const tj_view_bits *bits = producer->view_bits;
  return bits != NULL ? (tj__view_word(bits, object) & (bits->conjugate | bits->negative)) != 0
                      : producer->view != NULL;
}

/* Whether `object` has no autograd record (neither grad nor a tangent): the
 * framework then claims nothing, and nothing need be asked. Inline: the answer
 * for nearly every tensor of every call. */
/* Whether a claim says where objects keep their autograd record, so that
 * tj__no_autograd_record can read it. */
static inline int tj__claim_reads_record(const tj_claim *claim) {
  return !claim->always && claim->requires_grad != NULL && claim->meta_offset >= 0;
}

static inline int tj__no_autograd_record(const tj_claim *claim, const void *object) {
  if (!tj__claim_reads_record(claim)) return 0;
  const void *impl = *(void *const *)((const char *)object + claim->offset);
  return impl != NULL && *(void *const *)((const char *)impl + claim->meta_offset) == NULL;
}

/* The import of a producer made by tj_producer_from_exchange: the exchange
 * API's view when the table has it (nothing to release), else its owning
 * export. Inline for the sequencer, which calls it in place for such
 * producers; tj__exchange_import is the same as the producer's function. */
static inline int tj__exchange_import_inline(const tj_producer *self, void *object, tj_arg *arg) {
  const DLPackExchangeAPI *api = self->api;
  if (api->dltensor_from_py_object_no_sync != NULL) {
    if (api->dltensor_from_py_object_no_sync(object, &arg->tensor) != 0) return TJ_EPYERR;
    arg->kind = TJ_ARG_TENSOR;
    return TJ_OK;
  }
  DLManagedTensorVersioned *managed = NULL;
  if (api->managed_tensor_from_py_object_no_sync(object, &managed) != 0) return TJ_EPYERR;
  return tj_arg_from_versioned(arg, managed, NULL);
}
int tj__exchange_import(const tj_producer *self, void *object, tj_arg *arg);

/* What a float scalar parameter receives from an INT or FLOAT argument (an
 * INT flagged TJ_ARG_UNSIGNED holds a uint64's bits; one flagged
 * TJ_ARG_OUT_OF_RANGE, its value as a double). */
static inline double tj__float_value(const tj_arg *arg) {
  if (arg->kind != TJ_ARG_INT || (arg->flags & TJ_ARG_OUT_OF_RANGE)) return arg->value.f;
  return (arg->flags & TJ_ARG_UNSIGNED) ? (double)(uint64_t)arg->value.i : (double)arg->value.i;
}

/* What the kernel receives for a tensor argument: data + byte_offset (NULL for
 * no tensor), on integers: validation checked the sum does not wrap, and a
 * NULL data pointer with an offset is no pointer C may add to. */
static inline void *tj__tensor_address(const tj_arg *arg) {
  if (arg == NULL || arg->kind != TJ_ARG_TENSOR) return NULL;
  return (void *)((uintptr_t)arg->tensor.data + arg->tensor.byte_offset);
}

/* tj_set_error(code, "%s: argument %d '%s': %s", kernel, argument, name,
 * what) and tj_error_at(code, argument, -1, TJ_PRODUCER_NONE), without
 * printf's cost: for messages set on a path that is not a failure (a call a
 * framework claims). */
int tj__set_argument_error(int code, const char *kernel, int32_t argument, const char *name,
                           const char *what);

/* Puts a printf-style prefix before the current error message, keeping the
 * record's argument/output/producer; returns `code`. */
int tj__prefix_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The environment variables the core reads, each read in env.c only:
 * TILEJIT_LIBCUDA, the CUDA driver library to open ("libcuda.so.1" when unset
 * or empty), and TMPDIR, where an export's CPU library is copied to be loaded
 * ("/tmp" when unset or empty). */
const char *tj__env_libcuda(void);
const char *tj__env_tmpdir(void);

/* The SHA-256 of `size` bytes as 64 lowercase hex digits and a NUL (sha256.c). */
void tj__sha256_hex(const void *data, size_t size, char out[65]);

/* The first row of core.h's TJ_DTYPES with DLPack code `code`, and the row of
 * `dtype` (code, bits and lanes), or NULL (dtype.c). A row's family is printed
 * with the width (tj__dtype_family_sized) when its rows are named by family
 * and width: "int8". */
const tj_dtype_row *tj__dtype_row_of_code(uint8_t code);
const tj_dtype_row *tj__dtype_row_of(DLDataType dtype);
int tj__dtype_family_sized(const tj_dtype_row *row);

/* Formats an int64 array as "(2, 3, 4)". */
void tj__format_tuple(const int64_t *v, int32_t n, char *buf, int32_t size);

/* A public entry point refuses a NULL pointer argument with TJ_EVALUE and a
 * message naming the function and the parameter ("tj_call_bind: args is
 * NULL") instead of dereferencing it. */
#define TJ__REFUSE_NULL(fn, p)                                                 \
  do {                                                                         \
    if ((p) == NULL) return tj_set_error(TJ_EVALUE, "%s: %s is NULL", fn, #p); \
  } while (0)

#endif /* TILEJIT_INTERNAL_H_ */
