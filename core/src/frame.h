/*
 * Helpers over a kernel's parameters and argument list and over a bound
 * frame (frame.c). They read the kernel and the frame only: frame.c calls
 * nothing above expr.c.
 */
#ifndef TILEJIT_FRAME_H_
#define TILEJIT_FRAME_H_

#include "internal.h"

/* "argument 1 'B'", "output 'C'" or "workspace 'W'" for messages. */
void tj__param_label(const tj_kernel *k, int32_t index, char *buf, int32_t size);

/* The value of kernel ABI argument `a` when it is a symbol or an expression,
 * over the frame's bound symbols. */
int tj__abi_integer(const tj_frame *f, const tj_abi_arg *a, int64_t *out);

/* Bytes a kernel ABI argument takes in the kernel's parameter list. */
int64_t tj__abi_bytes(const tj_kernel *k, const tj_abi_arg *a);

/* The address and size in bytes of workspace `o` (an out_* index after the
 * outputs) when the launch must zero-fill it (TJ_BUF_ZERO, set and not empty);
 * NULL otherwise. */
void *tj__workspace_to_zero(const tj_frame *f, int32_t o, int64_t *bytes);

#endif /* TILEJIT_FRAME_H_ */
