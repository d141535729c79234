/* Call arguments: import of DLPack managed tensors and their release. */
#include <string.h>

#include "internal.h"

void tj_arg_init(tj_arg *arg) { memset(arg, 0, sizeof(*arg)); }

void tj_arg_from_legacy(tj_arg *arg, DLManagedTensor *managed) {
  tj_arg_init(arg);
  arg->kind = TJ_ARG_TENSOR;
  arg->tensor = managed->dl_tensor;
  arg->owner_kind = TJ_OWNER_LEGACY;
  arg->owner = managed;
}

int tj_arg_from_versioned(tj_arg *arg, DLManagedTensorVersioned *managed, const char *what) {
  TJ__REFUSE_NULL("tj_arg_from_versioned", arg);
  TJ__REFUSE_NULL("tj_arg_from_versioned", managed);
  tj_arg_init(arg);
  if (managed->version.major != TJ_DLPACK_MAJOR) {
    /* Only version and deleter may be read from a tensor of another major
     * version; we took ownership, so delete it now. */
    uint32_t major = managed->version.major, minor = managed->version.minor;
    if (managed->deleter) managed->deleter(managed);
    /* `what` names the argument; a binding that adds its own label passes NULL. */
    return tj_set_error(TJ_EVALUE, "%s%sDLPack version %u.%u is not supported (expected %d.x)",
                        what ? what : "", what ? ": " : "", major, minor, TJ_DLPACK_MAJOR);
  }
  arg->kind = TJ_ARG_TENSOR;
  arg->tensor = managed->dl_tensor;
  if (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) arg->flags |= TJ_ARG_READ_ONLY;
  arg->owner_kind = TJ_OWNER_VERSIONED;
  arg->owner = managed;
  return TJ_OK;
}

void tj_arg_from_dltensor(tj_arg *arg, const DLTensor *tensor, uint32_t flags) {
  tj_arg_init(arg);
  arg->kind = TJ_ARG_TENSOR;
  arg->tensor = *tensor;
  arg->flags = flags;
}

void tj_arg_release(tj_arg *arg) {
  void *owner = arg->owner;
  int32_t kind = arg->owner_kind;
  /* Clear first: a deleter that re-enters (e.g. frees a Python object whose
   * finaliser touches this arg) must see nothing left to release. */
  tj_arg_init(arg);
  if (kind == TJ_OWNER_LEGACY) {
    DLManagedTensor *m = owner;
    if (m->deleter) m->deleter(m);
  } else if (kind == TJ_OWNER_VERSIONED) {
    DLManagedTensorVersioned *m = owner;
    if (m->deleter) m->deleter(m);
  }
}
