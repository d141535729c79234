/* The library's version (tj_version, tj_version_string): TJ_VERSION of the
 * headers it was built with. */
#include "internal.h"

int32_t tj_version(void) {
  return TJ_VERSION_MAJOR * 10000 + TJ_VERSION_MINOR * 100 + TJ_VERSION_PATCH;
}

const char *tj_version_string(void) { return TJ_VERSION; }
