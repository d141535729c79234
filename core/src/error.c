/* Thread-local error text and the status-code table. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define TJ__ERROR_SIZE 2048

static _Thread_local char tj__error[TJ__ERROR_SIZE];

const char *tj_last_error(void) { return tj__error; }

int tj_set_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tj__error, sizeof(tj__error), fmt, ap);
  va_end(ap);
  return code;
}

const char *tj_status_name(int code) {
  switch (code) {
#define TJ__STATUS_NAME(name, value, exc) \
  case value: return #name;
    TJ_STATUS_MAP(TJ__STATUS_NAME)
#undef TJ__STATUS_NAME
  }
  return "TJ_EUNKNOWN";
}

const char *tj_status_exception(int code) {
  switch (code) {
#define TJ__STATUS_EXC(name, value, exc) \
  case value: return exc;
    TJ_STATUS_MAP(TJ__STATUS_EXC)
#undef TJ__STATUS_EXC
  }
  return "RuntimeError";
}
