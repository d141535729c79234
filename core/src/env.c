/* The environment as the core reads it: every variable it reads is read
 * here, and only here (the Python side's one reader is build_tools/env.py;
 * docs/environment.md lists them all). */
#include <stdlib.h>

#include "internal.h"

/* The value of `name`, or `fallback` when it is unset or empty. */
static const char *read_or(const char *name, const char *fallback) {
  const char *value = getenv(name);
  return value != NULL && *value != '\0' ? value : fallback;
}

const char *tj__env_libcuda(void) { return read_or("TILEJIT_LIBCUDA", "libcuda.so.1"); }

const char *tj__env_tmpdir(void) { return read_or("TMPDIR", "/tmp"); }
