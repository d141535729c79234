/*
 * Kernels as XLA FFI custom calls: one handler (tj_xla_handler) runs every
 * kernel registered here when a compiled XLA program calls it, with the
 * core's validation and binding, on buffers XLA allocated.
 *
 * XLA's FFI is a C API (xla/ffi/api/c_api.h, shipped with jaxlib) whose
 * structs are versioned by their struct_size and only ever grow at the end;
 * the part of it the handler reads is declared below (tj_xla_*), laid out as
 * there, so that the core builds without jaxlib and one build serves every
 * jaxlib (tests/test_jax.py checks each declaration against the installed
 * jaxlib's header).
 *
 * A call names its kernel and how its operands map onto the kernel's inputs
 * with attributes (static: part of the compiled program):
 *   tilejit         the key the kernel was registered under (tj_xla_register);
 *   tilejit_inputs  one letter per input of the kernel, in declaration order:
 *                   'b' the next operand, a buffer; 'w' the next operand, a
 *                   buffer the kernel writes: the kernel writes the next
 *                   result after its outputs, which XLA aliases to that
 *                   operand; 's' the next operand, a 0-d buffer holding a
 *                   scalar's value (host memory only); 'a' a scalar
 *                   attribute named "tj_<position>" (position: the input's, in
 *                   decimal); 'n' None (an optional buffer left out); 'o'
 *                   an object no kernel takes, its type's name the string
 *                   attribute "tj_<position>" (refused, naming it: only
 *                   tj_xla_bind meets it at trace time). A call may describe
 *                   fewer or more inputs than the kernel has: the core
 *                   refuses a wrong count as a direct call's (trailing
 *                   optional buffers may be left out).
 * Results: the kernel's outputs in output order, then its workspaces, then
 * one per 'w' input.
 */
#ifndef TILEJIT_XLA_H_
#define TILEJIT_XLA_H_

#include <stddef.h>
#include <stdint.h>

#include "tilejit/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- XLA's FFI C API, the part the handler reads ------------------------------------ */

typedef struct tj_xla_extension {
  size_t struct_size;
  int32_t type; /* 1: metadata */
  struct tj_xla_extension *next;
} tj_xla_extension;

typedef struct tj_xla_api_version {
  size_t struct_size;
  tj_xla_extension *extension_start;
  int major_version;
  int minor_version;
} tj_xla_api_version;

typedef struct tj_xla_metadata {
  size_t struct_size;
  tj_xla_api_version api_version;
  uint32_t traits;
  int64_t state_type_id;
} tj_xla_metadata;

typedef struct tj_xla_metadata_extension {
  tj_xla_extension extension_base;
  tj_xla_metadata *metadata;
} tj_xla_metadata_extension;

typedef struct tj_xla_buffer {
  size_t struct_size;
  tj_xla_extension *extension_start;
  int32_t dtype; /* XLA's PrimitiveType */
  void *data;
  int64_t rank;
  int64_t *dims;
} tj_xla_buffer;

typedef struct tj_xla_byte_span {
  const char *ptr;
  size_t len;
} tj_xla_byte_span;

typedef struct tj_xla_scalar {
  int32_t dtype;
  void *value;
} tj_xla_scalar;

typedef struct tj_xla_list {
  size_t struct_size;
  tj_xla_extension *extension_start;
  int64_t size;
  int32_t *types;
  void **items;
} tj_xla_list;

typedef struct tj_xla_attrs {
  size_t struct_size;
  tj_xla_extension *extension_start;
  int64_t size;
  int32_t *types; /* 3: scalar, 4: string */
  tj_xla_byte_span **names;
  void **attrs;
} tj_xla_attrs;

typedef struct tj_xla_error_create_args {
  size_t struct_size;
  tj_xla_extension *extension_start;
  const char *message;
  int32_t errc;
} tj_xla_error_create_args;

typedef struct tj_xla_stream_get_args {
  size_t struct_size;
  tj_xla_extension *extension_start;
  void *ctx;
  void *stream;
} tj_xla_stream_get_args;

typedef struct tj_xla_device_ordinal_get_args {
  size_t struct_size;
  tj_xla_extension *extension_start;
  void *ctx;
  int32_t device_ordinal;
} tj_xla_device_ordinal_get_args;

typedef struct tj_xla_api {
  size_t struct_size;
  tj_xla_extension *extension_start;
  tj_xla_api_version api_version;
  const void *internal_api;
  void *(*error_create)(tj_xla_error_create_args *args);
  void (*error_get_message)(void *args);
  void (*error_destroy)(void *args);
  void *(*handler_register)(void *args);
  void *(*stream_get)(tj_xla_stream_get_args *args);
  void *unused[12]; /* type registry ... run id: not read */
  void *(*device_ordinal_get)(tj_xla_device_ordinal_get_args *args);
} tj_xla_api;

typedef struct tj_xla_call_frame {
  size_t struct_size;
  tj_xla_extension *extension_start;
  const tj_xla_api *api;
  void *ctx;
  int32_t stage; /* 3: execute */
  tj_xla_list args;
  tj_xla_list rets;
  tj_xla_attrs attrs;
  void *future;
} tj_xla_call_frame;

/* The FFI version the handler declares, and its one trait. */
#define TJ_XLA_API_MAJOR 0
#define TJ_XLA_API_MINOR 1
#define TJ_XLA_COMMAND_BUFFER_COMPATIBLE 1u

/* ---- tilejit's handler ------------------------------------------------------------ */

/* Registers `kernel` (borrowed: it must outlive every program that calls it;
 * the process's, for tilejit) under `key` (at most 127 bytes), for calls on
 * device type `device_type` (kDLCPU, kDLCUDA). Registering the same key again
 * replaces the kernel. TJ_ERUNTIME once TJ_XLA_MAX_KERNELS are registered. */
#define TJ_XLA_MAX_KERNELS 1024
TJ_API int tj_xla_register(const char *key, const tj_kernel *kernel, int32_t device_type);

/* The handler (XLA_FFI_Handler): answers XLA's metadata query (API version,
 * and the command-buffer trait for kernels on CUDA), does nothing at the
 * stages before execution, and at execution runs the kernel the call's
 * attributes name on its operands and results (see the top of this file),
 * launching on XLA's stream on CUDA. A refused or failed call returns an XLA
 * error carrying the core's message (INVALID_ARGUMENT for what a direct call
 * raises as TypeError or ValueError, INTERNAL otherwise). Touches no Python
 * state; reentrant. */
TJ_API void *tj_xla_handler(tj_xla_call_frame *frame);

/* What a call frame would bind, without running anything: the check a
 * framework makes when it traces a call (the buffers' data may be any
 * non-NULL address with the alignment XLA gives; results are not read), its
 * buffers on `device` (where the program will run: a kernel refuses buffers
 * on another device as a direct call does). The
 * kernel's outputs' shapes and element types into out_ndim[o],
 * out_shape[o * TJ_MAX_NDIM + d] and out_dtype[o], or the core's status and
 * message, as the handler would report them. */
TJ_API int tj_xla_bind(const tj_xla_call_frame *frame, DLDevice device, int32_t *out_ndim,
                       int64_t *out_shape, DLDataType *out_dtype);

#ifdef __cplusplus
}
#endif

#endif /* TILEJIT_XLA_H_ */
