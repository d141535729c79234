/*
 * A kernel as a torch operator's implementation, registered with torch's
 * dispatcher through torch's stable C ABI (the `aoti_torch_*` and `torch_*`
 * functions libtorch exports, declared by torch/csrc/stable/c/shim.h and
 * torch/csrc/inductor/aoti_torch/c/shim.h): the dispatcher then calls the core
 * with no Python in between. Nothing here links torch: every function of
 * torch is looked up in the process at tj_torch_init, so the core loads
 * without torch and a program that never registers an operator never needs
 * it. Conventions (statuses, ownership words) are those of tilejit/core.h.
 *
 * An operator implemented here reads its arguments from the dispatcher's
 * stack, runs tj_call_run_binding on them (the same validation and messages
 * as any call), allocates its outputs with torch (aoti_torch_empty_strided),
 * launches a CUDA kernel on torch's current stream, and pushes the outputs.
 * A failure reaches torch as a C++ exception carrying the core's message, as
 * for any operator of torch's stable ABI: std::invalid_argument for TJ_EVALUE
 * (Python sees a ValueError), std::runtime_error for the rest (a
 * RuntimeError).
 */
#ifndef TILEJIT_TORCH_H_
#define TILEJIT_TORCH_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tilejit/core.h"
#include "tilejit/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds torch's stable C ABI in the process (libtorch must be loaded; the
 * CUDA functions are optional). TJ_OK, or TJ_ERUNTIME saying what is
 * missing: an older torch, then, whose operators tilejit registers another
 * way. Safe to call repeatedly and from many threads. */
TJ_API int tj_torch_init(void);

/* Defines operator `schema` ("vec_add_0123(Tensor A, Tensor B) -> Tensor") in
 * namespace `ns`, for a program that registers an operator torch's Python
 * does not define (an export's torch_op.so). */
TJ_API int tj_torch_define(const char *ns, const char *schema);

/* The kinds of an operator's inputs, one character per schema argument in
 * order: 'T' Tensor, 't' Tensor? (None allowed), 'i' SymInt, 'f' float,
 * 'b' bool. */
#define TJ_TORCH_TENSOR 'T'
#define TJ_TORCH_OPTIONAL_TENSOR 't'
#define TJ_TORCH_INT 'i'
#define TJ_TORCH_FLOAT 'f'
#define TJ_TORCH_BOOL 'b'

/* When an input has an autograd record, the operator's autograd kernel hands
 * the call to this function (its host's: Python's autograd, for tilejit's
 * own registration), with the stack as the dispatcher passed it, optional
 * tensors unboxed (a tensor handle or 0). It takes ownership of the input
 * tensor handles, writes the outputs' new handles into the stack from index
 * 0 and returns 0; or returns the core's status for the failure (TJ_ETYPE,
 * TJ_EVALUE, ...: the exception the status table names is what the call
 * raises), or 2 (a ValueError) or 1 (any other failure), with a message
 * (NUL-terminated, truncated to `size`) in `message`. */
typedef int (*tj_torch_fallback)(void *context, uint64_t *stack, uint64_t nargs, uint64_t nouts,
                                 char *message, size_t size);

/* How the autograd kernel tells a call it may run at once (one the dispatcher
 * would send, unchanged, from autograd down to the backend kernel) from one it
 * hands to the fallback: none of its tensors has an autograd record (the word
 * at byte `meta_offset` of the TensorImpl, the object an AtenTensorHandle's
 * first word points to, is NULL: the tensor neither requires grad nor carries
 * a tangent), every tensor's dispatch key set (the word at byte
 * `keyset_offset` of the TensorImpl) is one of `keysets` (a plain dense
 * tensor's: no tensor subclass, functionalization, batching or lazy view),
 * and the thread includes no dispatch key beyond torch's defaults (no
 * dispatch mode, tracer or transform is active): the thread-local 64-bit word
 * `tls_symbol` names is 0 (libc10's c10::impl::raw_local_dispatch_key_set,
 * whose first word holds the included keys XOR the default ones). The host
 * finds and checks these for the libtorch loaded (tj_torch_tls_word). Caller-
 * owned; copied. */
#define TJ_TORCH_MAX_KEYSETS 4
typedef struct tj_torch_plain {
  int64_t meta_offset;
  int64_t keyset_offset;
  uint64_t keysets[TJ_TORCH_MAX_KEYSETS];
  int32_t nkeysets;
  const char *tls_symbol;
  /* Optional (NULL: a tensor with an autograd record never makes a plain call).
   * With grad mode off (torch's aoti_torch_grad_mode_is_enabled), autograd
   * records nothing, and a tensor with a record makes a plain call when it
   * carries no forward-mode tangent: `fw_grad` (libtorch's
   * torch::autograd::AutogradMeta::fw_grad(level, self) const, called with the
   * record, level 0 and the tensor handle) returns a tensor whose TensorImpl is
   * `undefined` (c10::UndefinedTensorImpl's singleton). What a custom
   * autograd.Function's forward, or a compiled training graph, hands the op. */
  const void *(*fw_grad)(const void *meta, uint64_t level, const void *tensor);
  const void *undefined;
} tj_torch_plain;

/* The calling thread's value of the thread-local word `symbol` of torch's
 * libraries (tj_torch_plain.tls_symbol), for the host's checks. TJ_ERUNTIME
 * when there is no such symbol. */
TJ_API int tj_torch_tls_word(const char *symbol, uint64_t *out);

/* Two questions a host asks before it records a call of torch tensors itself
 * (tj_host_plan.record_plain), answered in place: tj_torch_plain_object(
 * context, NULL) is 1 when the calling thread includes no dispatch key beyond
 * torch's defaults (no dispatch mode, tracer, functorch transform or inference
 * mode: plain->tls_symbol's word is 0), and tj_torch_plain_object(context,
 * object) is 1 when the TensorImpl a tensor's host object holds at byte
 * `impl_offset` has a plain dense tensor's key set (plain->keysets: not a
 * functorch wrapper nor any other kind torch alone can read). 0 means "not
 * known here": the host asks its own way. `context` is a
 * tj_torch_plain_objects; both borrowed, alive while the host uses them. */
typedef struct tj_torch_plain_objects {
  int64_t impl_offset;
  const tj_torch_plain *plain;
} tj_torch_plain_objects;
TJ_API int tj_torch_plain_object(const void *context, const void *object);

/* A direct call's read of a torch.Tensor object in place, for torch releases
 * without the DLPack exchange API (whose tensors are otherwise read through
 * __dlpack__, a capsule per tensor): the TensorImpl * the object holds at
 * byte `impl_offset` is read with torch's stable C ABI, as the op's kernels
 * read a tensor handle, when it is a c10::TensorImpl itself (its first word is
 * `impl_vtable`) with a plain dense tensor's key set (plain->keysets, at
 * plain->keyset_offset) and a torch dtype (code c) whose bit `dtypes >> c & 1`
 * is set. The host finds and checks all of these against __dlpack__ on
 * tensors of every kind, and vouches for them for the objects it hands over
 * (torch.Tensor's, and subclasses that change nothing of it). Caller-owned;
 * borrowed, alive while any producer points to it (tj_producer.read_context).
 * Compatibility: append-only (fields are added at the end only, never
 * reordered, resized or removed). */
typedef struct tj_torch_reader {
  int64_t impl_offset;
  const tj_torch_plain *plain;
  const void *impl_vtable;
  uint64_t dtypes;
  /* Optional (NULL: outputs are made the public way): the host object of a
   * tensor handle, a new reference (NULL with the host's error pending) that
   * holds a reference of its own to the tensor: libtorch_python's
   * THPVariable_Wrap(const at::TensorBase &), which the host checks. */
  void *(*wrap)(const void *tensor);
} tj_torch_reader;

/* tj_producer.read over a tj_torch_reader (`context`): writes every field of
 * `out` (shape and strides borrowed from the tensor; the CPU's device id 0,
 * as DLPack says it) and returns 0; returns 1 for an object it does not read
 * that way (torch not initialised by tj_torch_init, another kind of tensor,
 * another dtype), which the caller then imports the public way (the core's
 * error record may have been written; nothing is pending in the host).
 * Borrows both. */
TJ_API int tj_torch_read_object(const void *context, void *object, DLTensor *out);

/* tj_producer.make over a tj_torch_reader (`context`): a new torch.Tensor
 * object like `prototype` (its dtype, device and shape; compact row-major
 * strides, as torch.empty makes them) in *object, made in C (torch's stable
 * C ABI's empty_strided, then context->wrap), and TJ_OK; TJ_EPYERR when the
 * wrap failed (the host's error pending; *object NULL); 1 when it is not made
 * here (no wrap, a dtype or device the reader does not vouch for, torch's own
 * failure to allocate), which the caller then allocates the public way.
 * Borrows `context` and `prototype`. */
TJ_API int tj_torch_make_object(const void *context, const DLTensor *prototype, void **object);

/* What tj_torch_impl registers. Caller-owned; copied. Compatibility:
 * append-only (fields are added at the end only, never reordered, resized
 * or removed). */
typedef struct tj_torch_op {
  const char *ns;     /* the operator's namespace ("tilejit") */
  const char *name;   /* its name, without overload ("vec_add_0123") */
  const char *inputs; /* TJ_TORCH_* per schema input */
  /* The autograd kernel, registered when `fallback` is set: a plain call
   * (`plain`, NULL: none is) runs the kernel at once, any other is handed to
   * `fallback`. */
  tj_torch_fallback fallback;
  void *context;
  const tj_torch_plain *plain;
  /* The order of the operator's returns: return r is the kernel's output
   * output_order[r] (output order, tj_kernel_output_param), one per output;
   * NULL: the outputs in their order. */
  const int32_t *output_order;
} tj_torch_op;

/* Registers `kernel` (borrowed: it must outlive the process's use of the
 * operator, which torch never unregisters) as the implementation of the
 * operator op->ns::op->name for torch's dispatch keys CPU and CUDA, the core
 * refusing a tensor on a device the kernel does not run on with its own
 * message; and, with op->fallback, its autograd kernel (dispatch key
 * Autograd). The operator must be defined (tj_torch_define, or torch's own
 * Library.define). Each registration takes one of a fixed number of slots
 * (TJ_TORCH_MAX_OPS): TJ_ERUNTIME once they are all used. A failure of
 * torch's while registering leaves the kernels registered so far in place:
 * the kernel must outlive the process then too. */
#define TJ_TORCH_MAX_OPS 4096
TJ_API int tj_torch_impl(const tj_kernel *kernel, const tj_torch_op *op);

/* Opens the export in `dir` (tj_kernel_open: every file checked) and
 * registers its kernel as the torch operator its file torch_op.txt describes
 * (what kernel.export writes for a kernel that can be one), defining the
 * operator first: what an export's torch_op.so does when torch loads it. The
 * kernel is kept for the process's life and written to *out when `out` is
 * not NULL. torch_op.txt, one entry per line:
 *   tilejit-torch-op 1
 *   namespace NS
 *   schema NAME(ARGUMENTS) -> RETURNS      (the rest of the line)
 *   inputs KINDS                           (TJ_TORCH_* per argument; "-": none)
 *   order R0 R1 ...                        (tj_torch_op.output_order; may be empty)
 * Failures are TJ_EVALUE (the file) or torch's (TJ_ERUNTIME), naming the
 * directory. */
TJ_API int tj_torch_open_export(const char *dir, tj_kernel **out);

#ifdef __cplusplus
}
#endif
#endif /* TILEJIT_TORCH_H_ */
