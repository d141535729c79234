/*
 * torch_op.so, the library kernel.export(path) writes beside the kernel: when
 * torch loads it (torch.ops.load_library(path + "/torch_op.so")), it opens
 * the export it lies in and registers its kernel as the torch operator
 * torch_op.txt describes (tj_torch_open_export), under the name and schema
 * kernel.torch_op has in tilejit's Python. It needs neither tilejit's Python
 * nor a compiler: the core library it links lies in the same directory and
 * is found there ($ORIGIN). The same bytes serve every export of one core.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "tilejit/torch.h"

/* Where the registration failed, or "" (for programs that load the library
 * themselves and want to know; torch's loader only sees stderr). */
static char failure[4096];

__attribute__((visibility("default"))) const char *tilejit_torch_op_error(void) { return failure; }

__attribute__((constructor)) static void register_operator(void) {
  Dl_info info;
  char dir[4096] = ".";
  if (dladdr((void *)register_operator, &info) != 0 && info.dli_fname != NULL) {
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
      snprintf(dir, sizeof(dir), ".");
    else if (slash == dir)
      dir[1] = '\0';
    else
      *slash = '\0';
  }
  if (tj_torch_open_export(dir, NULL) != TJ_OK) {
    snprintf(failure, sizeof(failure), "%s", tj_last_error());
    fprintf(stderr, "tilejit: %s/torch_op.so: the operator is not registered: %s\n", dir, failure);
  }
}
