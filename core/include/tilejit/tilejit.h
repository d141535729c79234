/*
 * tilejit's C API, every public header in one include:
 *
 *   tilejit/core.h      the embedding API: statuses and errors, expressions,
 *                       call arguments, kernel signatures, calls and frames,
 *                       the CUDA driver, and the call (tj_call_run);
 *   tilejit/producer.h  how the core reads host objects: producers, lazy
 *                       views, a framework's claim on calls, the DLPack
 *                       exchange API and capsules;
 *   tilejit/host.h      the host ABI of a language binding (CPython's): the
 *                       host's object operations and the prepared call;
 *   tilejit/layout.h    the layout algebra of tensor views.
 *
 * The DLPack types are DLPack's own header, dlpack/dlpack.h, shipped beside
 * tilejit/ (its LICENSE with it): a program may include its own copy of it
 * before or after these headers. Each header says who owns what it takes and
 * returns, and for how long.
 */
#ifndef TILEJIT_TILEJIT_H_
#define TILEJIT_TILEJIT_H_

#include "tilejit/core.h"
#include "tilejit/host.h"
#include "tilejit/layout.h"
#include "tilejit/producer.h"

#endif /* TILEJIT_TILEJIT_H_ */
